/*
 * gpu_test_cross_entropy.c - softmax cross entropy (family cross_entropy,
 * docs/kernels.md K9) on the GPU against the float64 CPU reference (label
 * "gpu"): forward (loss to 1e-6 relative, S, m bit-equal), backward, the
 * fused forward + backward, in place (backward and fused), the
 * vocab-parallel shard statistics, merge and shard backward; at the target
 * vocab (157184) and the other model vocabs (151936, 129280) and odd ones
 * (50257, 100003, 7, 1), bf16 and fp32 logits, int64 and int32 labels,
 * ignore_index (1 row in 8, and a custom value), label smoothing, one row,
 * no rows, every label ignored (in every kernel), the tiles `lingen tune`
 * sweeps, and the fused forward's clusters (1, 2, 4, 8 CTAs a row); the
 * same bits on a second launch; labels 4 bytes off an 8-byte boundary.
 * Fresh random inputs, poisoned outputs, nothing left unwritten.
 * Exits with LG_TEST_SKIP (ctest: skipped), saying why, when there is no
 * CUDA device or driver; random inputs print their seed (LINGEN_SEED replays).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "compare.h"
#include "generate.h"
#include "cuda.h"
#include "gpu.h"
#include "gputest.h"
#include "harness.h"
#include "testutil.h"

static lg_ctx *ctx;
static uint64_t seed;

enum { F_LOGITS, F_LABELS, F_STATS_IN, F_G, F_LOSS, F_SUM, F_MAX, F_STATS, F_GRAD };
enum { B_LOGITS, B_LABELS, B_SUM, B_MAX, B_DLOSS, B_GRAD };

static lg_spec *parse(const char *pass, const char *dtype, const char *keys)
{
	return lg_test_spec("cross_entropy", pass, dtype, keys);
}

/* One spec at M rows (vocab_start v0, shards ns): every output within
 * tolerance, nothing unwritten. */
static void check_at(const char *pass, const char *dtype, const char *keys, int64_t M, int64_t v0, int64_t ns)
{
	lg_spec *s = parse(pass, dtype, keys);
	const int64_t sizes[3] = {M, v0, ns};
	struct lg_check_opts o = {.tokens = M, .sizes = sizes, .seed = seed + (uint64_t)(M * 7919 + v0)};
	struct lg_check_result r;
	if (lg_check_kernel(ctx, s, &o, &r) != LG_OK)
		fail_msg("%s at %lld rows: %s", lg_spec_entry(s), (long long)M, lg_last_error());
	bool written = lg_test_written(&r, M == 0 || r.nmeasures > 0);
	printf("%s M=%lld v0=%lld shards=%lld: %s\n", lg_spec_entry(s), (long long)M, (long long)v0,
	       (long long)ns, r.pass && written ? "PASS" : "FAIL");
	lg_test_print_measures(&r, 9);
	assert_true(r.pass);
	assert_true(written);
	lg_spec_free(s);
}

static void check(const char *pass, const char *dtype, const char *keys, int64_t M)
{
	check_at(pass, dtype, keys, M, 0, 1);
}

/* Forward, fused forward and backward of a vocab at each row count. */
static void all(const char *dtype, const char *keys, const int64_t *rows, size_t n)
{
	char fused[256];
	snprintf(fused, sizeof fused, "%s, \"fused\": true", keys);
	for (size_t i = 0; i < n; i++) {
		check("forward", dtype, keys, rows[i]);
		check("forward", dtype, fused, rows[i]);
		check("backward", dtype, keys, rows[i]);
	}
}

static const int64_t odd_rows[] = {1, 0, 3, 17, 300};
#define NODD (sizeof odd_rows / sizeof odd_rows[0])

/* The target vocab: 1024 rows (the CPU reference of 8192 rows takes long;
 * `lingen check configs/kernels/cross-entropy.json --tokens 8192` does it). */
static void test_target(void **state)
{
	(void)state;
	static const int64_t rows[] = {1024};
	all("bf16", "\"vocab\": 157184", rows, 1);
	all("bf16", "\"vocab\": 157184", odd_rows, NODD);
}

/* The other models' vocabs and odd ones (rows not 16-byte aligned), tiny
 * ones (fewer values than threads), bf16 and fp32. */
static void test_vocabs(void **state)
{
	(void)state;
	static const int64_t rows[] = {1, 5, 64};
	static const char *const vocabs[] = {"151936", "129280", "50257", "100003", "7", "1", "8", "4097"};
	for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++) {
		char keys[64];
		snprintf(keys, sizeof keys, "\"vocab\": %s", vocabs[v]);
		all("bf16", keys, rows, 3);
		all("fp32", keys, rows, 3);
	}
}

/* int32 labels, a custom ignore_index, label smoothing (with each; and
 * e = 1, the end of torch's range). */
static void test_options(void **state)
{
	(void)state;
	static const int64_t rows[] = {1, 9, 256};
	static const char *const opts[] = {
		"\"vocab\": 50257, \"index\": \"int32\"",
		"\"vocab\": 50257, \"ignore_index\": -1",
		"\"vocab\": 50257, \"ignore_index\": 0",
		"\"vocab\": 157184, \"label_smoothing\": 0.1",
		"\"vocab\": 100003, \"label_smoothing\": 0.25, \"index\": \"int32\", \"ignore_index\": 5",
		"\"vocab\": 157184, \"label_smoothing\": 1", /* torch's upper end: the uniform target */
	};
	for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
		all("bf16", opts[i], rows, 3);
		all("fp32", opts[i], rows, 3);
	}
}

/* Vocab parallel: shards of the target vocab (8 x 19648) and odd shards
 * (3 x 16753 of 50257 with smoothing), at a start where some labels fall
 * in the shard; the merge of 1, 2, 8 and 3 shards. */
static void test_vocab_parallel(void **state)
{
	(void)state;
	static const int64_t rows[] = {1, 7, 512};
	for (size_t i = 0; i < 3; i++) {
		check_at("forward", "bf16", "\"vocab\": 19648, \"part\": \"shard\", \"classes\": 157184", rows[i],
			 3 * 19648, 1);
		check_at("backward", "bf16", "\"vocab\": 19648, \"part\": \"shard\", \"classes\": 157184", rows[i],
			 3 * 19648, 1);
		check_at("forward", "fp32",
			 "\"vocab\": 16753, \"part\": \"shard\", \"classes\": 50257, \"label_smoothing\": 0.1, "
			 "\"index\": \"int32\"",
			 rows[i], 16753, 1);
		check_at("backward", "bf16",
			 "\"vocab\": 16753, \"part\": \"shard\", \"classes\": 50257, \"label_smoothing\": 0.1",
			 rows[i], 2 * 16753, 1);
		for (int64_t ns = 1; ns <= 8; ns *= 2)
			check_at("forward", "bf16", "\"vocab\": 157184, \"part\": \"merge\"", rows[i], 0, ns);
		check_at("forward", "bf16", "\"vocab\": 50257, \"part\": \"merge\", \"label_smoothing\": 0.1", rows[i],
			 0, 3);
		check_at("forward", "bf16", "\"vocab\": 50257, \"part\": \"merge\", \"label_smoothing\": 1", rows[i],
			 0, 3);
	}
	check_at("forward", "bf16", "\"vocab\": 157184, \"part\": \"merge\"", 0, 0, 2);
}

/* The tiles of `lingen tune`. */
static void test_tiles(void **state)
{
	(void)state;
	static const int64_t th[] = {128, 256, 512, 1024}, un[] = {1, 2, 4, 8};
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 4; j++) {
			char keys[160];
			snprintf(keys, sizeof keys, "\"vocab\": 50257, \"tile\": {\"threads\": %lld, \"unroll\": %lld}",
				 (long long)th[i], (long long)un[j]);
			static const int64_t rows[] = {3, 40};
			all("bf16", keys, rows, 2);
		}
}

/* The fused forward's clusters (sm_90): 1 (L2 second pass), 2, 4, 8 CTAs
 * a row, at the target vocab (bf16), the largest fp32 one that fits, the
 * other models' vocabs and a tiny one (fewer pieces than CTAs x threads). */
static void test_fused_clusters(void **state)
{
	(void)state;
	static const int64_t rows[] = {1, 3, 130};
	static const char *const specs[][2] = {
		{"bf16", "\"vocab\": 157184, \"fused\": true"},
		{"bf16", "\"vocab\": 151936, \"fused\": true, \"label_smoothing\": 0.1"},
		{"fp32", "\"vocab\": 129280, \"fused\": true, \"index\": \"int32\""},
		{"bf16", "\"vocab\": 16, \"fused\": true"},
		{"fp32", "\"vocab\": 8, \"fused\": true, \"label_smoothing\": 0.2"},
	};
	for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
		for (int cl = 1; cl <= 8; cl *= 2)
			for (int th = 256; th <= 1024; th *= 2) {
				char keys[256];
				snprintf(keys, sizeof keys, "%s, \"tile\": {\"cluster\": %d, \"threads\": %d}", specs[i][1],
					 cl, th);
				lg_spec *s = NULL;
				char json[512];
				snprintf(json, sizeof json, "{\"op\": \"cross_entropy\", \"pass\": \"forward\", "
					 "\"dtype\": \"%s\", %s}", specs[i][0], keys);
				if (lg_spec_parse(json, &s) != LG_OK)
					continue; /* a slice too large for shared memory */
				lg_spec_free(s);
				for (size_t r = 0; r < 3; r++)
					check("forward", specs[i][0], keys, rows[r]);
			}
}

/* In place: the gradient over the logits equals the reference gradient
 * (the new-buffer spec's), for the backward and the fused forward. */
static void inplace(const char *pass, const char *dtype, const char *keys, int64_t M)
{
	char ikeys[256];
	snprintf(ikeys, sizeof ikeys, "%s, \"inplace\": true", keys);
	lg_spec *s = parse(pass, dtype, ikeys), *plain = parse(pass, dtype, keys);
	lg_kernel *k = NULL;
	if (lg_kernel_get(ctx, s, &k) != LG_OK)
		fail_msg("%s", lg_last_error());
	const int64_t sizes[3] = {M, 0, 1};
	struct lg_gpu_case g;
	uint64_t sd = seed + 17;
	if (lg_gpu_case_init(&g, s, 0, sizes, sd, k) != LG_OK)
		fail_msg("%s", lg_last_error());
	/* the reference: the plain spec's case on the same inputs */
	struct lg_ref_case c;
	unsigned char used[LG_MAX_ARGS];
	lg_spec_uses(plain, used);
	assert_int_equal(lg_ref_case_init(&c, plain, sizes, used, 0), LG_OK);
	lg_ref_family_get(plain->op)->describe(plain, &c);
	for (int i = 0; i < c.n; i++) {
		c.buf[i].host = c.buf[i].count ? calloc(c.buf[i].count, c.buf[i].elem) : NULL;
		if (c.buf[i].count && g.ref.buf[i].host && !c.buf[i].output)
			memcpy(c.buf[i].host, g.ref.buf[i].host, c.buf[i].count * c.buf[i].elem);
	}
	lg_ref_family_get(plain->op)->run(plain, &c);
	int x = 0, grad = s->pass == LG_PASS_BACKWARD ? B_GRAD : F_GRAD; /* logits: argument 0 of both */
	assert_int_equal(lg_gpu_case_launch(&g, k, NULL), LG_OK);
	size_t bytes = c.buf[grad].count * c.buf[grad].elem;
	void *got = malloc(bytes + 1);
	assert_non_null(got);
	if (bytes)
		assert_int_equal(g.cu->cuMemcpyDtoH(got, g.dev[x], bytes), CUDA_SUCCESS);
	struct lg_check_measure m;
	lg_compare(&c.buf[grad], got, 5, stdout, &m);
	printf("%s M=%lld in place: %s (max_rel %.3g, mismatches %llu)\n", lg_spec_entry(s), (long long)M,
	       m.pass ? "PASS" : "FAIL", m.max_rel, (unsigned long long)m.mismatches);
	assert_true(m.pass);
	free(got);
	for (int i = 0; i < c.n; i++)
		free(c.buf[i].host);
	lg_gpu_case_free(&g);
	lg_spec_free(s);
	lg_spec_free(plain);
}

static void test_inplace(void **state)
{
	(void)state;
	static const int64_t rows[] = {1, 5, 256};
	for (size_t i = 0; i < 3; i++) {
		inplace("backward", "bf16", "\"vocab\": 157184", rows[i]);
		inplace("backward", "bf16", "\"vocab\": 50257, \"label_smoothing\": 0.1", rows[i]);
		inplace("backward", "fp32", "\"vocab\": 100003, \"index\": \"int32\"", rows[i]);
		inplace("forward", "bf16", "\"vocab\": 157184, \"fused\": true", rows[i]);
		inplace("forward", "bf16", "\"vocab\": 50257, \"fused\": true, \"label_smoothing\": 0.1", rows[i]);
		inplace("forward", "fp32", "\"vocab\": 100003, \"fused\": true", rows[i]);
	}
}

/* The kernel and the filled case of one spec at sizes (M, v0, ns). */
static lg_kernel *case_of(lg_spec *s, struct lg_gpu_case *g, int64_t M, int64_t v0, int64_t ns, uint64_t sd)
{
	lg_kernel *k = NULL;
	if (lg_kernel_get(ctx, s, &k) != LG_OK)
		fail_msg("%s", lg_last_error());
	const int64_t sizes[3] = {M, v0, ns};
	if (lg_gpu_case_init(g, s, 0, sizes, sd, k) != LG_OK)
		fail_msg("%s", lg_last_error());
	return k;
}

/* Every byte of n at p is zero (+0.0 in every float format). */
static bool zeros(const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		if (b[i])
			return false;
	return true;
}

/* Every label the spec's ignore_index `ii`: every output (loss, S, m, a
 * shard's stats, the gradient; the logits with inplace) must be all zeros
 * whatever the logits, the poison of the outputs overwritten. */
static void ignored(const char *pass, const char *dtype, const char *keys, int64_t ii, int64_t M, int64_t v0,
		    int64_t ns)
{
	lg_spec *s = parse(pass, dtype, keys);
	struct lg_gpu_case g;
	lg_kernel *k = case_of(s, &g, M, v0, ns, seed + 29);
	int lab = s->pass == LG_PASS_BACKWARD ? B_LABELS : F_LABELS, x = 0; /* logits: argument 0 of both */
	struct lg_ref_buf *lb = &g.ref.buf[lab];
	for (size_t r = 0; r < lb->count; r++) {
		if (lb->elem == 4)
			((int32_t *)lb->host)[r] = (int32_t)ii;
		else
			((int64_t *)lb->host)[r] = ii;
	}
	if (lb->count)
		assert_int_equal(g.cu->cuMemcpyHtoD(g.dev[lab], lb->host, lb->count * lb->elem), CUDA_SUCCESS);
	assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
	assert_int_equal(lg_gpu_case_launch(&g, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	bool ok = true;
	for (int i = 0; i < g.ref.n; i++) {
		const struct lg_ref_buf *b = &g.ref.buf[i];
		if (b->output && b->count && g.dev[i] && !zeros(g.got[i], b->count * b->elem)) {
			printf("  %s: not all zeros\n", b->name);
			ok = false;
		}
	}
	if (strstr(keys, "\"inplace\": true") && g.ref.buf[x].count) {
		size_t bytes = g.ref.buf[x].count * g.ref.buf[x].elem;
		void *got = malloc(bytes);
		assert_non_null(got);
		assert_int_equal(g.cu->cuMemcpyDtoH(got, g.dev[x], bytes), CUDA_SUCCESS);
		if (!zeros(got, bytes)) {
			printf("  logits (in place): not all zeros\n");
			ok = false;
		}
		free(got);
	}
	printf("%s M=%lld, every label ignored: %s\n", lg_spec_entry(s), (long long)M, ok ? "PASS" : "FAIL");
	assert_true(ok);
	lg_gpu_case_free(&g);
	lg_spec_free(s);
}

/* Every label ignored, in every kernel: the forward (aligned and odd
 * vocab, bf16 and fp32, int32 labels, a custom ignore_index), the fused
 * forward (the cluster form and the one-CTA form, in place), the backward
 * (in place too), a shard's statistics and backward, the merge. */
static void test_all_ignored(void **state)
{
	(void)state;
	static const int64_t rows[] = {1, 300};
	static const struct {
		const char *pass, *dtype, *keys;
		int64_t ii, v0, ns;
	} cases[] = {
		{"forward", "bf16", "\"vocab\": 157184", -100, 0, 1},
		{"forward", "fp32", "\"vocab\": 50257, \"index\": \"int32\", \"ignore_index\": -1", -1, 0, 1},
		{"forward", "bf16", "\"vocab\": 157184, \"fused\": true", -100, 0, 1},
		{"forward", "bf16", "\"vocab\": 157184, \"fused\": true, \"tile\": {\"cluster\": 1}", -100, 0, 1},
		{"forward", "bf16", "\"vocab\": 100003, \"fused\": true, \"inplace\": true, \"label_smoothing\": 0.1",
		 -100, 0, 1},
		{"forward", "fp32", "\"vocab\": 129280, \"fused\": true, \"inplace\": true, \"ignore_index\": 0", 0, 0,
		 1},
		{"backward", "bf16", "\"vocab\": 157184", -100, 0, 1},
		{"backward", "fp32", "\"vocab\": 50257, \"inplace\": true, \"index\": \"int32\"", -100, 0, 1},
		{"forward", "bf16", "\"vocab\": 19648, \"part\": \"shard\", \"classes\": 157184, \"label_smoothing\": 0.1",
		 -100, 19648, 1},
		{"backward", "bf16", "\"vocab\": 19648, \"part\": \"shard\", \"classes\": 157184", -100, 19648, 1},
		{"forward", "bf16", "\"vocab\": 157184, \"part\": \"merge\"", -100, 0, 3},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		for (size_t r = 0; r < 2; r++)
			ignored(cases[i].pass, cases[i].dtype, cases[i].keys, cases[i].ii, rows[r], cases[i].v0,
				cases[i].ns);
}

/* The same inputs give the same bits on a second launch (fixed reduction
 * orders, no atomics): every output of the forward, the fused forward in
 * both forms, the backward, a shard's statistics, the merge. */
static void same_bits(const char *pass, const char *dtype, const char *keys, int64_t M, int64_t v0, int64_t ns)
{
	lg_spec *s = parse(pass, dtype, keys);
	struct lg_gpu_case g;
	lg_kernel *k = case_of(s, &g, M, v0, ns, seed + 31);
	void *first[LG_MAX_ARGS] = {0};
	for (int rep = 0; rep < 2; rep++) {
		assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
		assert_int_equal(lg_gpu_case_launch(&g, k, NULL), LG_OK);
		assert_int_equal(lg_gpu_case_download(&g), LG_OK);
		for (int i = 0; i < g.ref.n; i++) {
			const struct lg_ref_buf *b = &g.ref.buf[i];
			if (!b->output || !b->count || !g.dev[i])
				continue;
			size_t bytes = b->count * b->elem;
			if (rep == 0) {
				first[i] = malloc(bytes);
				assert_non_null(first[i]);
				memcpy(first[i], g.got[i], bytes);
			} else if (memcmp(first[i], g.got[i], bytes) != 0) {
				fail_msg("%s M=%lld: %s differs on a second launch", lg_spec_entry(s), (long long)M, b->name);
			}
		}
	}
	printf("%s M=%lld: the same bits twice\n", lg_spec_entry(s), (long long)M);
	for (int i = 0; i < LG_MAX_ARGS; i++)
		free(first[i]);
	lg_gpu_case_free(&g);
	lg_spec_free(s);
}

static void test_deterministic(void **state)
{
	(void)state;
	same_bits("forward", "bf16", "\"vocab\": 157184, \"label_smoothing\": 0.1", 200, 0, 1);
	same_bits("forward", "fp32", "\"vocab\": 50257", 200, 0, 1);
	same_bits("forward", "bf16", "\"vocab\": 157184, \"fused\": true", 200, 0, 1);
	same_bits("forward", "bf16", "\"vocab\": 157184, \"fused\": true, \"tile\": {\"cluster\": 1}", 200, 0, 1);
	same_bits("backward", "bf16", "\"vocab\": 100003", 200, 0, 1);
	same_bits("forward", "bf16", "\"vocab\": 19648, \"part\": \"shard\", \"classes\": 157184", 200, 19648, 1);
	same_bits("forward", "bf16", "\"vocab\": 157184, \"part\": \"merge\", \"label_smoothing\": 0.1", 200, 0, 8);
}

/* Labels 4 bytes past an 8-byte boundary (a slice of int32 labels at an
 * odd element; int64 labels there are read as two words): every output as
 * the reference's. */
static void offset_labels(const char *pass, const char *dtype, const char *keys, int64_t M, int64_t v0,
			  int64_t ns)
{
	lg_spec *s = parse(pass, dtype, keys);
	struct lg_gpu_case g;
	lg_kernel *k = case_of(s, &g, M, v0, ns, seed + 37);
	int lab = s->pass == LG_PASS_BACKWARD ? B_LABELS : F_LABELS;
	const struct lg_ref_buf *lb = &g.ref.buf[lab];
	size_t bytes = lb->count * lb->elem;
	CUdeviceptr shifted = 0;
	assert_int_equal(g.cu->cuMemAlloc(&shifted, bytes + 8), CUDA_SUCCESS);
	assert_int_equal(g.cu->cuMemcpyHtoD(shifted + 4, lb->host, bytes), CUDA_SUCCESS);
	g.ptrs[lab] = shifted + 4;
	assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
	if (lg_gpu_case_launch(&g, k, NULL) != LG_OK)
		fail_msg("%s: %s", lg_spec_entry(s), lg_last_error());
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	struct lg_check_result r;
	lg_gpu_case_check(&g, s, NULL, 5, stdout, &r);
	printf("%s M=%lld, labels at 4 mod 8: %s\n", lg_spec_entry(s), (long long)M, r.pass ? "PASS" : "FAIL");
	assert_true(r.pass);
	g.cu->cuMemFree(shifted);
	lg_gpu_case_free(&g);
	lg_spec_free(s);
}

static void test_labels_offset(void **state)
{
	(void)state;
	static const int64_t rows[] = {1, 77};
	for (size_t r = 0; r < 2; r++) {
		offset_labels("forward", "bf16", "\"vocab\": 50257, \"index\": \"int32\"", rows[r], 0, 1);
		offset_labels("forward", "bf16", "\"vocab\": 157184", rows[r], 0, 1);
		offset_labels("forward", "bf16", "\"vocab\": 157184, \"fused\": true", rows[r], 0, 1);
		offset_labels("backward", "fp32", "\"vocab\": 100003, \"index\": \"int32\"", rows[r], 0, 1);
		offset_labels("forward", "bf16", "\"vocab\": 19648, \"part\": \"shard\", \"classes\": 157184",
			      rows[r], 19648, 1);
		offset_labels("forward", "bf16", "\"vocab\": 157184, \"part\": \"merge\", \"index\": \"int32\"",
			      rows[r], 0, 3);
	}
}

int main(void)
{
	lg_test_require_gpu("gpu_test_cross_entropy");
	seed = lg_test_seed("gpu_test_cross_entropy");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_target),
		cmocka_unit_test(test_vocabs),
		cmocka_unit_test(test_options),
		cmocka_unit_test(test_vocab_parallel),
		cmocka_unit_test(test_tiles),
		cmocka_unit_test(test_fused_clusters),
		cmocka_unit_test(test_inplace),
		cmocka_unit_test(test_all_ignored),
		cmocka_unit_test(test_deterministic),
		cmocka_unit_test(test_labels_offset),
	};
	return LG_TEST_RUN_GPU(tests, &ctx);
}
