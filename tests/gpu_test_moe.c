/*
 * gpu_test_moe.c - the MoE dispatch and combine families on the GPU
 * against their CPU references (label "gpu"): moe_row_map (mask, top-k
 * int32 and int64), moe_permute (bf16 and e4m3 with scales, forward and
 * backward) and moe_unpermute (plain and weighted, forward and backward).
 * Each at the target shape (8192 tokens, 256 experts, top-8, hidden 2048)
 * and at the cases linghe gets wrong or refuses: hidden not a power of two
 * (1001, 2050, 7, 1), experts not a power of two (96, 160, 5, 7), experts
 * with 0 tokens, tokens routed to fewer than top_k experts, 1 token, 0
 * tokens, every token on one expert, multiples 1, 3, 16 and 128. Every
 * routing pattern of the references (moe_ref.h: lg_moe_ref_pattern of the
 * input seed) runs at each shape. Integer outputs and copies must be bit-equal, the fp32
 * sums of the combine bit-equal (same adds, same order), the fused
 * permute + FP8 quantisation (moe_permute_quant, K4b: its default form, rows
 * copied into shared memory a block ahead, and tile.prefetch 0, rows gathered
 * into registers; without probs and out_probs too) bit-equal, the weighted
 * forms within tolerance; poisoned outputs, nothing left unwritten; a
 * second launch gives the same bytes. The pipelined combine (tile.pipeline
 * 2, the default: persistent CTAs, moe_unpermute forward plain and
 * weighted, moe_permute backward) gives the bytes of the one-CTA-a-token
 * form (tile.pipeline 1) on the same inputs at hidden 2048, 1001, 7168 and
 * 3 and 1, 7, 333 and 8192 tokens; so does the pipelined dispatch (moe_permute forward, tile.pipeline 2, bf16
 * and e4m3; test_permute_pipelined). Each typed launcher of include/lingen.h
 * gives the bytes of the generic launch and refuses a kernel of another op
 * (test_typed_launchers); a size past int32 row ids is refused
 * (test_int32_rows).
 * Exits with LG_TEST_SKIP (ctest: skipped), saying why, when there is no
 * CUDA device or driver; random inputs print their seed (LINGEN_SEED replays).
 * Since issue 37 the cases that are one lg_check_kernel each (every spec
 * and size above checked against the reference alone) are data: tests/cases/
 * moe_row_map, moe_permute, moe_unpermute and moe_permute_quant.json, run by gpu_test_families; what stays here is
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

#include "context.h"
#include "cuda.h"
#include "gpu.h"
#include "gputest.h"
#include "harness.h"
#include "moe_ref.h"
#include "testutil.h"

static lg_ctx *ctx;
static uint64_t seed;

static lg_spec *parse(const char *op, const char *pass, const char *dtype, const char *keys)
{
	return lg_test_spec(op, pass, dtype, keys);
}

#define TARGET_KEYS "\"experts\": 256, \"top_k\": 8, \"multiple\": 16"

/* The same bytes on a second launch (weighted forms: fp32 sums and dots). */
static void same_twice(const char *op, const char *pass, const char *keys)
{
	lg_spec *s = parse(op, pass, "bf16", keys);
	lg_kernel *k = NULL;
	if (lg_kernel_get(ctx, s, &k) != LG_OK)
		fail_msg("%s", lg_last_error());
	const int64_t sizes[1] = {8192};
	struct lg_gpu_case g;
	if (lg_gpu_case_init(&g, s, 0, sizes, seed, k) != LG_OK)
		fail_msg("%s", lg_last_error());
	/* both launches on poisoned outputs: rows past the padded total are unwritten by contract */
	assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
	assert_int_equal(lg_gpu_case_launch(&g, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	void *first[LG_MAX_ARGS] = {0};
	lg_test_copy_outputs(&g, first);
	assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
	assert_int_equal(lg_gpu_case_launch(&g, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	for (int i = 0; i < g.ref.n; i++) {
		if (!first[i])
			continue;
		assert_memory_equal(first[i], g.got[i], g.ref.buf[i].count * g.ref.buf[i].elem);
		free(first[i]);
	}
	printf("%s: the same bytes twice\n", lg_spec_entry(s));
	lg_gpu_case_free(&g);
	lg_spec_free(s);
}

/* Every output of g (downloaded) against first[] (copy_outputs; freed):
 * true when all bytes are the same, else each output that differs named. */
static bool same_outputs(const struct lg_gpu_case *g, void *first[LG_MAX_ARGS])
{
	bool same = true;
	for (int i = 0; i < g->ref.n; i++) {
		if (!first[i])
			continue;
		size_t n = g->ref.buf[i].count * g->ref.buf[i].elem, diff = 0, at = 0;
		for (size_t j = 0; j < n; j++)
			if (((const unsigned char *)first[i])[j] != ((const unsigned char *)g->got[i])[j] && !diff++)
				at = j;
		if (diff) {
			printf("  %s: %zu of %zu bytes differ, the first at byte %zu (element %zu)\n", g->ref.buf[i].name,
			       diff, n, at, at / g->ref.buf[i].elem);
			same = false;
		}
		free(first[i]);
		first[i] = NULL;
	}
	return same;
}

/* The pipelined form of spec `keys` (tile.pipeline 2, the default) gives
 * the bytes of the one-CTA-a-token form (tile.pipeline 1) on the same
 * inputs at T tokens (every output; weighted sums included). */
static void same_as_one_cta(const char *op, const char *pass, const char *dtype, const char *keys, int64_t T)
{
	char p1[512], p2[512];
	snprintf(p1, sizeof p1, "%s, \"tile\": {\"pipeline\": 1}", keys);
	snprintf(p2, sizeof p2, "%s, \"tile\": {\"pipeline\": 2}", keys);
	lg_spec *s0 = parse(op, pass, dtype, p1), *s1 = parse(op, pass, dtype, p2);
	lg_kernel *k0 = NULL, *k1 = NULL;
	if (lg_kernel_get(ctx, s0, &k0) != LG_OK || lg_kernel_get(ctx, s1, &k1) != LG_OK)
		fail_msg("%s", lg_last_error());
	const int64_t sizes[1] = {T};
	struct lg_gpu_case g;
	if (lg_gpu_case_init(&g, s1, 0, sizes, seed + (uint64_t)T, k1) != LG_OK)
		fail_msg("%s", lg_last_error());
	assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
	assert_int_equal(lg_gpu_case_launch(&g, k0, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	void *first[LG_MAX_ARGS] = {0};
	lg_test_copy_outputs(&g, first);
	assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
	assert_int_equal(lg_gpu_case_launch(&g, k1, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	bool same = same_outputs(&g, first);
	printf("%s vs %s at T=%lld (seed %llu): %s\n", lg_spec_entry(s1), lg_spec_entry(s0), (long long)T,
	       (unsigned long long)(seed + (uint64_t)T), same ? "the same bytes" : "FAIL");
	assert_true(same);
	lg_gpu_case_free(&g);
	lg_spec_free(s0);
	lg_spec_free(s1);
}

/* The pipelined combine (moe_unpermute forward plain and weighted,
 * moe_permute backward) against the one-CTA-a-token form byte for byte
 * (one pattern; against the references, every pattern: tests/cases/
 * moe_unpermute.json and moe_permute.json). */
static void test_pipelined(void **state)
{
	(void)state;
	static const int64_t tokens[] = {1, 7, 333, 8192};
	static const char *const shapes[] = {
		"\"hidden\": 2048, " TARGET_KEYS,
		"\"hidden\": 1001, \"experts\": 160, \"top_k\": 6",
		"\"hidden\": 7168, \"experts\": 96, \"top_k\": 8, \"multiple\": 128",
		"\"hidden\": 3, \"experts\": 7, \"top_k\": 3, \"multiple\": 1",
	};
	for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
		for (int w = 0; w < 3; w++) {
			/* w: moe_unpermute forward plain, weighted; moe_permute backward */
			const char *op = w < 2 ? "moe_unpermute" : "moe_permute", *pass = w < 2 ? "forward" : "backward";
			char keys[256];
			snprintf(keys, sizeof keys, "%s%s", shapes[i], w == 1 ? ", \"weighted\": true" : "");
			for (size_t t = 0; t < sizeof tokens / sizeof tokens[0]; t++)
				same_as_one_cta(op, pass, "bf16", keys, tokens[t]);
		}
	same_as_one_cta("moe_unpermute", "forward", "bf16", "\"hidden\": 7168, \"experts\": 1024, \"top_k\": 8, "
			"\"weighted\": true", 8192);
}

/* The pipelined dispatch (moe_permute forward, tile.pipeline 2) against the
 * one-CTA-a-token form byte for byte (1 token and more; against the
 * references, every routing pattern: tests/cases/moe_permute.json), and its
 * grid. */
static void test_permute_pipelined(void **state)
{
	(void)state;
	static const int64_t tokens[] = {1, 7, 333, 8192};
	static const char *const shapes[][2] = {
		{"bf16", "\"hidden\": 2048, " TARGET_KEYS},
		{"e4m3", "\"hidden\": 2048, " TARGET_KEYS},
		{"e4m3", "\"hidden\": 384, \"experts\": 96, \"top_k\": 6, \"round_scale\": false"},
		{"bf16", "\"hidden\": 1001, \"experts\": 160, \"top_k\": 6"},
		{"bf16", "\"hidden\": 7168, \"experts\": 7, \"top_k\": 3, \"multiple\": 128"},
		{"bf16", "\"hidden\": 1, \"experts\": 5, \"top_k\": 2, \"multiple\": 1"},
		{"bf16", "\"hidden\": 2048, \"experts\": 1024, \"top_k\": 8"},
	};
	for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
		for (size_t t = 0; t < sizeof tokens / sizeof tokens[0]; t++)
			same_as_one_cta("moe_permute", "forward", shapes[i][0], shapes[i][1], tokens[t]);
	/* its grid: the co-resident CTAs (at one token its geometry has 257 CTAs,
	 * once taken for a cluster: a grid of one CTA, 13.2 ms at the target) */
	lg_spec *s = parse("moe_permute", "forward", "bf16", "\"hidden\": 2048, " TARGET_KEYS ", \"tile\": "
			   "{\"pipeline\": 2}");
	lg_kernel *k = NULL;
	if (lg_kernel_get(ctx, s, &k) != LG_OK)
		fail_msg("%s", lg_last_error());
	printf("%s: %u co-resident CTAs\n", lg_spec_entry(s), k->plan.resident[0]);
	assert_true(k->plan.resident[0] > 1);
	lg_spec_free(s);
}

static void test_deterministic(void **state)
{
	(void)state;
	same_twice("moe_row_map", "forward", TARGET_KEYS);
	same_twice("moe_row_map", "forward", TARGET_KEYS ", \"routing\": \"topk_i64\"");
	same_twice("moe_unpermute", "forward", "\"hidden\": 2048, " TARGET_KEYS ", \"weighted\": true");
	same_twice("moe_unpermute", "backward", "\"hidden\": 2048, " TARGET_KEYS ", \"weighted\": true");
	same_twice("moe_unpermute", "forward", "\"hidden\": 2048, " TARGET_KEYS ", \"weighted\": true, "
		   "\"tile\": {\"pipeline\": 1}");
	same_twice("moe_permute", "forward", "\"hidden\": 2048, " TARGET_KEYS ", \"tile\": {\"pipeline\": 2}");
	same_twice("moe_permute_quant", "forward", "\"hidden\": 2048, " TARGET_KEYS ", \"quant\": {\"output\": "
		   "\"both\"}, \"tile\": {\"prefetch\": 1}");
}

/* The typed launchers of include/lingen.h, each on a case's pointers p
 * (the family's declared order; 0 where the spec uses none). */
static lg_status typed_row_map(const lg_kernel *k, int64_t T, const lg_dptr *p)
{
	/* the routing: whichever of mask, topk, topk64 the spec uses */
	return lg_moe_row_map_forward(k, NULL, T, p[0] ? p[0] : p[1] ? p[1] : p[2], p[3], p[4], p[5], p[6], p[7],
				      p[8]);
}

static lg_status typed_permute(const lg_kernel *k, int64_t T, const lg_dptr *p)
{
	return lg_moe_permute_forward(k, NULL, T, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8]);
}

static lg_status typed_permute_bwd(const lg_kernel *k, int64_t T, const lg_dptr *p)
{
	return lg_moe_permute_backward(k, NULL, T, p[0], p[1], p[2], p[3], p[4]);
}

static lg_status typed_unpermute(const lg_kernel *k, int64_t T, const lg_dptr *p)
{
	return lg_moe_unpermute_forward(k, NULL, T, p[0], p[1], p[2], p[3], p[4]);
}

static lg_status typed_unpermute_bwd(const lg_kernel *k, int64_t T, const lg_dptr *p)
{
	return lg_moe_unpermute_backward(k, NULL, T, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8]);
}

static lg_status typed_permute_quant(const lg_kernel *k, int64_t T, const lg_dptr *p)
{
	return lg_moe_permute_quant_forward(k, NULL, T, p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8]);
}

/* Each typed launcher gives the bytes of the generic launch (lg_kernel_run,
 * checked against the references above) on the same inputs, at an odd
 * token count, every output poisoned first; a kernel of another op or
 * pass, or none, is refused with a message naming both. */
static void test_typed_launchers(void **state)
{
	(void)state;
	static const struct {
		const char *op, *pass, *dtype, *keys;
		lg_status (*fn)(const lg_kernel *, int64_t, const lg_dptr *);
	} cases[] = {
		{"moe_row_map", "forward", "bf16", "\"experts\": 160, \"top_k\": 6", typed_row_map},
		{"moe_row_map", "forward", "bf16", "\"experts\": 96, \"top_k\": 6, \"routing\": \"topk_i32\"",
		 typed_row_map},
		{"moe_row_map", "forward", "bf16", "\"experts\": 7, \"top_k\": 3, \"routing\": \"topk_i64\"",
		 typed_row_map},
		{"moe_permute", "forward", "bf16", "\"hidden\": 1001, \"experts\": 160, \"top_k\": 6", typed_permute},
		{"moe_permute", "forward", "e4m3", "\"hidden\": 384, \"experts\": 96, \"top_k\": 6", typed_permute},
		{"moe_permute", "backward", "bf16", "\"hidden\": 2050, \"experts\": 96, \"top_k\": 8", typed_permute_bwd},
		{"moe_unpermute", "forward", "bf16", "\"hidden\": 1001, \"experts\": 160, \"top_k\": 6, "
		 "\"weighted\": true", typed_unpermute},
		{"moe_unpermute", "backward", "bf16", "\"hidden\": 2048, \"experts\": 96, \"top_k\": 6, "
		 "\"weighted\": true", typed_unpermute_bwd},
		{"moe_permute_quant", "forward", "bf16", "\"hidden\": 384, \"experts\": 96, \"top_k\": 6, "
		 "\"multiple\": 128, \"quant\": {}", typed_permute_quant},
	};
	const size_t n = sizeof cases / sizeof cases[0];
	const int64_t sizes[1] = {333};
	for (size_t c = 0; c < n; c++) {
		lg_spec *s = parse(cases[c].op, cases[c].pass, cases[c].dtype, cases[c].keys);
		lg_kernel *k = NULL;
		if (lg_kernel_get(ctx, s, &k) != LG_OK)
			fail_msg("%s", lg_last_error());
		struct lg_gpu_case g;
		if (lg_gpu_case_init(&g, s, 0, sizes, seed + c, k) != LG_OK)
			fail_msg("%s", lg_last_error());
		assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
		assert_int_equal(lg_gpu_case_launch(&g, k, NULL), LG_OK);
		assert_int_equal(lg_gpu_case_download(&g), LG_OK);
		void *first[LG_MAX_ARGS] = {0};
		lg_test_copy_outputs(&g, first);
		assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
		if (cases[c].fn(k, sizes[0], g.ptrs) != LG_OK)
			fail_msg("%s: %s", lg_spec_entry(s), lg_last_error());
		assert_int_equal(lg_gpu_case_download(&g), LG_OK);
		bool same = same_outputs(&g, first);
		printf("%s: typed launcher %s\n", lg_spec_entry(s), same ? "the same bytes" : "FAIL");
		assert_true(same);
		/* the launcher of the next case (another op or pass) refuses this kernel */
		const size_t o = (c + 3) % n;
		assert_int_equal(cases[o].fn(k, sizes[0], g.ptrs), LG_ERR_INVALID_ARG);
		if (!strstr(lg_last_error(), "this launcher takes") || !strstr(lg_last_error(), cases[o].op))
			fail_msg("%s given to the %s launcher: \"%s\"", lg_spec_entry(s), cases[o].op, lg_last_error());
		assert_int_equal(cases[c].fn(NULL, sizes[0], g.ptrs), LG_ERR_INVALID_ARG);
		lg_gpu_case_free(&g);
		lg_spec_free(s);
	}
}

/* Declared argument rules reach the launch: the weighted combine's
 * backward refuses dprobs without g (dprobs = dout . g), names both, and
 * takes it with g or without dprobs (checks before any kernel runs). */
static void test_arg_needs(void **state)
{
	(void)state;
	lg_spec *s = parse("moe_unpermute", "backward", "bf16",
			   "\"hidden\": 2048, " TARGET_KEYS ", \"weighted\": true");
	lg_kernel *k;
	assert_int_equal(lg_kernel_get(ctx, s, &k), LG_OK);
	lg_dptr p = 0x100000; /* aligned, never dereferenced: the launch is refused first */
	assert_int_equal(lg_moe_unpermute_backward(k, NULL, 8, p, p, p, p, p, 0, p, p, p), LG_ERR_INVALID_ARG);
	assert_non_null(strstr(lg_last_error(), "dprobs"));
	assert_non_null(strstr(lg_last_error(), "needs g"));
	lg_spec_free(s);
}

/* A size whose capacity rows pass int32 row ids is refused at the launch,
 * before any kernel runs; one token fewer is within the bound. */
static void test_int32_rows(void **state)
{
	(void)state;
	lg_spec *s = parse("moe_row_map", "forward", "bf16", "\"experts\": 8, \"top_k\": 8, \"multiple\": 1");
	lg_kernel *k;
	assert_int_equal(lg_kernel_get(ctx, s, &k), LG_OK);
	const lg_dptr p = 0x100000; /* aligned, never dereferenced: the launch is refused first */
	const int64_t T = (int64_t)INT32_MAX / 8 + 1; /* T * 8 rows: 2^31 */
	assert_int_equal(lg_moe_row_map_forward(k, NULL, T, p, p, p, p, p, p, p), LG_ERR_INVALID_ARG);
	assert_non_null(strstr(lg_last_error(), "launch geometry"));
	printf("%s at %lld tokens: %s\n", lg_spec_entry(s), (long long)T, lg_last_error());
	lg_spec_free(s);
}

int main(void)
{
	lg_test_require_gpu("gpu_test_moe");
	seed = lg_test_seed("gpu_test_moe");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_permute_pipelined),
		cmocka_unit_test(test_deterministic),
		cmocka_unit_test(test_pipelined),
		cmocka_unit_test(test_arg_needs),
		cmocka_unit_test(test_typed_launchers),
		cmocka_unit_test(test_int32_rows),
	};
	return LG_TEST_RUN_GPU(tests, &ctx);
}
