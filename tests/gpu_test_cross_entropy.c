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
 * Since issue 37 the cases that are one lg_check_kernel each (every spec
 * and size above checked against the reference alone) are data: tests/cases/
 * cross_entropy.json, run by gpu_test_families; what stays here is
 * what that check cannot say.
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
		cmocka_unit_test(test_inplace),
		cmocka_unit_test(test_all_ignored),
		cmocka_unit_test(test_deterministic),
		cmocka_unit_test(test_labels_offset),
	};
	return LG_TEST_RUN_GPU(tests, &ctx);
}
