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
 * Since issue 37 the cases that are one lg_check_kernel each (every spec
 * and size above checked against the reference alone) are data: tests/cases/
 * swiglu_quant.json and batch_swiglu_quant.json, run by gpu_test_families; what stays here is
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

#define POW2 "\"quant\": {\"round_scale\": true}"
#define EXACT "\"quant\": {\"round_scale\": false}"

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

int main(void)
{
	lg_test_require_gpu("gpu_test_swiglu_quant");
	seed = lg_test_seed("gpu_test_swiglu_quant");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_k6_deterministic),
	};
	return LG_TEST_RUN_GPU(tests, &ctx);
}
