/*
 * gpu_test_swiglu_quant.c - the SwiGLU + FP8 families on the GPU against
 * their CPU references (label "gpu"): swiglu_quant (K7) and
 * batch_swiglu_quant (K6), forward and backward.
 *   K7: the target shapes (x [8192, 1024] and [8192, 4096] forward, g [8192,
 *       512] backward), token counts that are no multiple of anything (1, 2,
 *       127, 128, 129, 333, 4097), intermediate 128, 384 and 5120, both
 *       scale modes, every quant.output, dx in bf16.
 *   K6: the target (65536 rows, n 512, 256 experts), 96, 160, 1 and 3
 *       experts, counts of 0, 1, 127, 128, 129 and random ones (the
 *       reference's fill), 0 and 1 rows, both scale modes, every forward
 *       output, dx in bf16, the non-default tiles; dprob the same bits on a
 *       second launch (deterministic).
 *   Both: tile.prefetch at 2 to 8 feature blocks a CTA.
 * Payloads and scales are compared element by element with the slack the
 * reference derives from its bound on the GPU's fp32 values: bit-equal
 * where no value in the bound crosses a rounding boundary; power-of-two
 * scales always bit-equal. Fresh random inputs, poisoned outputs, nothing
 * left unwritten (K6's st rows past the last expert's are not written: the
 * reference leaves them poisoned too).
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

#include "cuda.h"
#include "gpu.h"
#include "gputest.h"
#include "harness.h"
#include "testutil.h"

static lg_ctx *ctx;
static uint64_t seed;

static lg_spec *parse(const char *op, const char *pass, const char *keys)
{
	return lg_test_spec(op, pass, "bf16", keys);
}

/* One spec at m tokens: every output within its bound, nothing unwritten. */
static void check(const char *op, const char *pass, const char *keys, int64_t m)
{
	lg_spec *s = parse(op, pass, keys);
	const int64_t sizes[1] = {m};
	struct lg_check_opts o = {.tokens = m, .sizes = sizes, .seed = seed + (uint64_t)m * 7919};
	struct lg_check_result r;
	if (lg_check_kernel(ctx, s, &o, &r) != LG_OK)
		fail_msg("%s at %lld tokens: %s", lg_spec_entry(s), (long long)m, lg_last_error());
	bool written = lg_test_written(&r, true);
	printf("%s M=%lld: %s\n", lg_spec_entry(s), (long long)m, r.pass && written ? "PASS" : "FAIL");
	lg_test_print_measures(&r, 5);
	assert_true(r.pass);
	assert_true(written);
	lg_spec_free(s);
}

static const int64_t odd[] = {1, 2, 127, 128, 129, 333, 4097};
#define NODD (sizeof odd / sizeof odd[0])

static void both_passes(const char *op, const char *keys, const int64_t *ms, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		check(op, "forward", keys, ms[i]);
		check(op, "backward", keys, ms[i]);
	}
}

#define POW2 "\"quant\": {\"round_scale\": true}"
#define EXACT "\"quant\": {\"round_scale\": false}"

static void test_k7_target(void **state)
{
	(void)state;
	static const int64_t m[] = {8192};
	both_passes("swiglu_quant", "\"intermediate\": 512, " POW2, m, 1);
	check("swiglu_quant", "forward", "\"intermediate\": 2048, " POW2, 8192);
	both_passes("swiglu_quant", "\"intermediate\": 512, " POW2, odd, NODD);
}

static void test_k7_scales(void **state)
{
	(void)state;
	static const int64_t m[] = {8192, 1, 333};
	both_passes("swiglu_quant", "\"intermediate\": 512, " EXACT, m, 3);
	both_passes("swiglu_quant", "\"intermediate\": 2048, " EXACT, odd, NODD);
}

/* Widths: one block (128), not a power of two (384), the dense layer (5120). */
static void test_k7_widths(void **state)
{
	(void)state;
	both_passes("swiglu_quant", "\"intermediate\": 128, " POW2, odd, NODD);
	both_passes("swiglu_quant", "\"intermediate\": 384, " EXACT, odd, NODD);
	static const int64_t m[] = {1, 129, 1000};
	both_passes("swiglu_quant", "\"intermediate\": 5120, " POW2, m, 3);
}

/* Each copy alone, and dx in bf16 beside the quantised copies. */
static void test_k7_outputs(void **state)
{
	(void)state;
	static const char *const outs[] = {"rowwise", "columnwise"};
	for (int o = 0; o < 2; o++)
		for (int pow2 = 0; pow2 < 2; pow2++) {
			char keys[160];
			snprintf(keys, sizeof keys, "\"intermediate\": 512, \"quant\": {\"round_scale\": %s, \"output\": \"%s\"}",
				 pow2 ? "true" : "false", outs[o]);
			both_passes("swiglu_quant", keys, odd, NODD);
		}
	static const int64_t m[] = {8192};
	for (size_t i = 0; i < NODD; i++)
		check("swiglu_quant", "backward", "\"intermediate\": 512, \"dx_bf16\": true, " POW2, odd[i]);
	check("swiglu_quant", "backward", "\"intermediate\": 512, \"dx_bf16\": true, " EXACT, m[0]);
	check("swiglu_quant", "backward",
	      "\"intermediate\": 512, \"dx_bf16\": true, \"quant\": {\"output\": \"columnwise\"}", 333);
}

static void test_k6_target(void **state)
{
	(void)state;
	static const int64_t m[] = {65536};
	both_passes("batch_swiglu_quant", "\"intermediate\": 512, \"experts\": 256, " POW2, m, 1);
	both_passes("batch_swiglu_quant", "\"intermediate\": 512, \"experts\": 256, " EXACT, m, 1);
}

/* The occupancy variants lingen tune tries (tile.min_ctas: registers capped,
 * some spilled): the same results at the target shapes and odd ones. */
static void test_min_ctas(void **state)
{
	(void)state;
	static const int64_t m[] = {65536, 333};
	both_passes("batch_swiglu_quant", "\"intermediate\": 512, \"experts\": 256, \"tile\": {\"min_ctas\": 2}, " POW2,
		    m, 2);
	both_passes("batch_swiglu_quant",
		    "\"intermediate\": 512, \"experts\": 96, \"tile\": {\"threads\": 256, \"min_ctas\": 3}, " EXACT, m,
		    2);
	static const int64_t m7[] = {8192, 129};
	both_passes("swiglu_quant", "\"intermediate\": 512, \"tile\": {\"min_ctas\": 2}, " POW2, m7, 2);
}

/* The tiles besides the defaults: the forward's loop over 4 blocks a CTA
 * (one expert scan for them), the backward's every block a CTA (the
 * default: the gate half and the up half in CTAs of their own); token
 * tiles a CTA (tile.tiles): 1, 2 and 8, more experts than one step of the
 * counts scan (300, 1000: a CTA's tiles found over several steps), few
 * tokens for many experts. */
static void test_k6_tiles(void **state)
{
	(void)state;
	static const int64_t m[] = {65536, 333, 20000};
	static const int64_t mt[] = {0, 1, 130, 1000, 5000, 40000};
	for (size_t i = 0; i < 6; i++) {
		check("batch_swiglu_quant", "forward", "\"intermediate\": 256, \"experts\": 300, \"tile\": {\"tiles\": 8}, "
		      POW2, mt[i]);
		check("batch_swiglu_quant", "forward", "\"intermediate\": 384, \"experts\": 1000, \"tile\": {\"tiles\": 2}, "
		      EXACT, mt[i]);
		check("batch_swiglu_quant", "forward", "\"intermediate\": 512, \"experts\": 96, \"tile\": {\"tiles\": 1}, "
		      POW2, mt[i]);
		check("batch_swiglu_quant", "backward", "\"intermediate\": 256, \"experts\": 300, \"tile\": {\"tiles\": 2}, "
		      POW2, mt[i]);
	}
	for (size_t i = 0; i < 3; i++) {
		check("batch_swiglu_quant", "forward",
		      "\"intermediate\": 512, \"experts\": 256, \"tile\": {\"fblocks\": 4}, " POW2, m[i]);
		check("batch_swiglu_quant", "backward",
		      "\"intermediate\": 512, \"experts\": 256, \"tile\": {\"fblocks\": 8}, " POW2, m[i]);
		check("batch_swiglu_quant", "backward",
		      "\"intermediate\": 384, \"experts\": 96, \"tile\": {\"fblocks\": 8}, " EXACT, m[i]);
	}
}

/* tile.prefetch: the next feature block's loads issued before this
 * block's stores, at 2, 4 and 8 blocks a CTA (and a group cut short: 3 of
 * 4 blocks), every output, dx in bf16, both scale modes; K6's backward
 * without it (its default since). */
static void test_prefetch(void **state)
{
	(void)state;
	static const int64_t m[] = {65536, 1, 333, 20000};
	for (size_t i = 0; i < 4; i++) {
		check("batch_swiglu_quant", "forward",
		      "\"intermediate\": 512, \"experts\": 256, \"tile\": {\"fblocks\": 4, \"prefetch\": 1}, " POW2,
		      m[i]);
		check("batch_swiglu_quant", "forward",
		      "\"intermediate\": 384, \"experts\": 96, \"tile\": {\"fblocks\": 2, \"prefetch\": 1}, " EXACT,
		      m[i]);
		check("batch_swiglu_quant", "forward",
		      "\"intermediate\": 512, \"experts\": 160, \"tile\": {\"fblocks\": 2, \"prefetch\": 1}, "
		      "\"quant\": {\"output\": \"columnwise\"}",
		      m[i]);
		check("batch_swiglu_quant", "backward", /* the default is 1 */
		      "\"intermediate\": 512, \"experts\": 256, \"tile\": {\"prefetch\": 0}, " POW2, m[i]);
		check("batch_swiglu_quant", "backward",
		      "\"intermediate\": 384, \"experts\": 96, \"dx_bf16\": true, \"tile\": {\"fblocks\": 8, "
		      "\"prefetch\": 1}, " EXACT,
		      m[i]);
	}
	static const int64_t m7[] = {8192, 1, 129, 4097};
	both_passes("swiglu_quant", "\"intermediate\": 512, \"tile\": {\"fblocks\": 4, \"prefetch\": 1}, " POW2, m7,
		    4);
	both_passes("swiglu_quant", "\"intermediate\": 2048, \"tile\": {\"fblocks\": 2, \"prefetch\": 1}, " EXACT,
		    m7, 4);
	both_passes("swiglu_quant", "\"intermediate\": 384, \"tile\": {\"fblocks\": 4, \"prefetch\": 1}, " POW2, m7,
		    4);
	check("swiglu_quant", "backward",
	      "\"intermediate\": 512, \"dx_bf16\": true, \"tile\": {\"fblocks\": 8, \"prefetch\": 1}, " POW2, 333);
}

/* Any number of experts (96, 160, 1, 3), few and many rows, 0 and 1. */
static void test_k6_experts(void **state)
{
	(void)state;
	static const int64_t m[] = {0, 1, 2, 385, 1000, 20000};
	both_passes("batch_swiglu_quant", "\"intermediate\": 512, \"experts\": 96, " POW2, m, 6);
	both_passes("batch_swiglu_quant", "\"intermediate\": 256, \"experts\": 160, " EXACT, m, 6);
	both_passes("batch_swiglu_quant", "\"intermediate\": 384, \"experts\": 1, " POW2, m, 6);
	both_passes("batch_swiglu_quant", "\"intermediate\": 1024, \"experts\": 3, " POW2, m, 6);
	both_passes("batch_swiglu_quant", "\"intermediate\": 128, \"experts\": 5, " EXACT, m, 6);
	for (size_t i = 0; i < 6; i++)
		check("batch_swiglu_quant", "backward", "\"intermediate\": 512, \"experts\": 96, \"dx_bf16\": true, " POW2,
		      m[i]);
}

static void test_k6_outputs(void **state)
{
	(void)state;
	static const int64_t m[] = {1, 385, 20000};
	static const char *const outs[] = {"rowwise", "columnwise"};
	for (int o = 0; o < 2; o++)
		for (size_t i = 0; i < 3; i++) {
			char keys[160];
			snprintf(keys, sizeof keys, "\"intermediate\": 512, \"experts\": 96, \"quant\": {\"output\": \"%s\"}",
				 outs[o]);
			check("batch_swiglu_quant", "forward", keys, m[i]);
		}
}

/* dprob (and everything else) the same bits on a second launch. */
static void test_k6_deterministic(void **state)
{
	(void)state;
	lg_spec *s = parse("batch_swiglu_quant", "backward", "\"intermediate\": 512, \"experts\": 256, " POW2);
	lg_kernel *k = NULL;
	if (lg_kernel_get(ctx, s, &k) != LG_OK)
		fail_msg("%s", lg_last_error());
	const int64_t sizes[1] = {65536};
	struct lg_gpu_case g;
	if (lg_gpu_case_init(&g, s, 0, sizes, seed, k) != LG_OK)
		fail_msg("%s", lg_last_error());
	void *first[LG_MAX_ARGS] = {0};
	for (int i = 4; i < g.ref.n; i++) { /* the outputs */
		size_t bytes = g.ref.buf[i].count * g.ref.buf[i].elem;
		first[i] = malloc(bytes + 1);
		assert_non_null(first[i]);
	}
	/* Both launches on poisoned outputs: dxst's container rows past the
	 * experts' (cdiv(tokens, 128) + experts is a bound) are not written by
	 * contract, so they must hold the same bytes before each launch (fresh
	 * device memory holds whatever a previous test freed there). */
	assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
	assert_int_equal(lg_gpu_case_launch(&g, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	for (int i = 4; i < g.ref.n; i++)
		memcpy(first[i], g.got[i], g.ref.buf[i].count * g.ref.buf[i].elem);
	assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
	assert_int_equal(lg_gpu_case_launch(&g, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	for (int i = 4; i < g.ref.n; i++) {
		const unsigned char *a = first[i], *b = g.got[i];
		size_t bytes = g.ref.buf[i].count * g.ref.buf[i].elem, at = 0;
		while (at < bytes && a[at] == b[at])
			at++;
		if (at < bytes)
			fail_msg("%s: output %s differs between two launches (first at element %zu of %zu)",
				 lg_spec_entry(s), g.ref.buf[i].name, at / g.ref.buf[i].elem, (size_t)g.ref.buf[i].count);
		free(first[i]);
	}
	lg_gpu_case_free(&g);
	lg_spec_free(s);
}

/* No tokens: nothing to write. */
static void test_no_tokens(void **state)
{
	(void)state;
	static const int64_t m[] = {0};
	both_passes("swiglu_quant", "\"intermediate\": 512, " POW2, m, 1);
	both_passes("batch_swiglu_quant", "\"intermediate\": 512, \"experts\": 8, " POW2, m, 1);
}

int main(void)
{
	lg_test_require_gpu("gpu_test_swiglu_quant");
	seed = lg_test_seed("gpu_test_swiglu_quant");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_k7_target),
		cmocka_unit_test(test_k7_scales),
		cmocka_unit_test(test_k7_widths),
		cmocka_unit_test(test_k7_outputs),
		cmocka_unit_test(test_k6_target),
		cmocka_unit_test(test_k6_experts),
		cmocka_unit_test(test_k6_outputs),
		cmocka_unit_test(test_k6_tiles),
		cmocka_unit_test(test_k6_deterministic),
		cmocka_unit_test(test_prefetch),
		cmocka_unit_test(test_min_ctas),
		cmocka_unit_test(test_no_tokens),
	};
	return LG_TEST_RUN_GPU(tests, &ctx);
}
