/*
 * gpu_test_fp8_gemm.c - what the generic check of the blockwise FP8 GEMMs
 * (family fp8_gemm, issue 16; label "gpu") cannot say. Its cases of spec x
 * token count against the float64 reference of the dequantised operands
 * (forward, dgrad and wgrad at the target's n and k and at odd shapes, the
 * tiles, 0 tokens, the wgrad at every token count) are
 * tests/cases/fp8_gemm.json, run by tests/gpu_test_families.c. Here:
 * wgrad's accumulate (dw += exactly doubling a first result), every bf16
 * output the fp32 one rounded to nearest bit for bit, the wgrad's declared
 * pitch (its columnwise copies' rows round_up(M, 128) apart).
 * Needs sm_90a: skips (77) without a CUDA device or on another arch.
 * Random inputs print their seed (LINGEN_SEED replays).
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

static lg_spec *parse(const char *pass, const char *dtype, const char *keys)
{
	return lg_test_spec("fp8_gemm", pass, dtype, keys);
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* accumulate: dw from 0 is the product (within the bound); a second
 * launch adds the same bits again: exactly twice the first. */
static void test_accumulate(void **state)
{
	(void)state;
	lg_spec *s = parse("wgrad", "fp32", "\"n\": 256, \"k\": 640, \"accumulate\": true");
	lg_test_accumulate(ctx, s, 1024, 4, seed);
	lg_test_accumulate(ctx, s, 1001, 4, seed + 1);
	lg_spec_free(s);
	/* the forms with waves (B's scales read in the promotion, the TMA
	 * add of each wave's rows), at a partial last block of tokens */
	static const char *const waves[] = {"{\"pingpong\": 1}", "{\"m\": 256, \"epilogue\": 1}"};
	for (size_t i = 0; i < N_OF(waves); i++) {
		char extra[160];
		snprintf(extra, sizeof extra, "\"n\": 1024, \"k\": 1152, \"accumulate\": true, \"tile\": %s", waves[i]);
		s = parse("wgrad", "fp32", extra);
		lg_test_accumulate(ctx, s, 3001, 4, seed + 2 + i);
		lg_spec_free(s);
	}
}

/* Every form's bf16 output is its fp32 output rounded to nearest, bit for
 * bit (the same tiles and accumulation): at odd shapes and two tiles. */
static void test_bf16_exact(void **state)
{
	(void)state;
	static const struct {
		const char *pass, *keys;
		int64_t m;
	} cs[] = {
		{"forward", "\"n\": 256, \"k\": 2880", 127},
		{"forward", "\"n\": 1024, \"k\": 1152, \"tile\": {\"n\": 192}", 6001},
		{"dgrad", "\"n\": 2880, \"k\": 208", 1001},
		{"wgrad", "\"n\": 2880, \"k\": 144", 4096},
		{"wgrad", "\"n\": 208, \"k\": 2880, \"tile\": {\"m\": 64}", 2000},
		{"wgrad", "\"n\": 208, \"k\": 2880", 9973},
	};
	for (size_t i = 0; i < N_OF(cs); i++) {
		lg_spec *s16 = parse(cs[i].pass, "bf16", cs[i].keys), *s32 = parse(cs[i].pass, "fp32", cs[i].keys);
		lg_test_bf16_exact(ctx, s16, s32, cs[i].m, 4, seed + i);
		lg_spec_free(s16);
		lg_spec_free(s32);
	}
}

/* wgrad's columnwise operands dyt and xt are [n | k, round_up(tokens, 128)]
 * (LG_QT_PITCH; it takes every token count: tests/cases/fp8_gemm.json). */
static void test_wgrad_pitch(void **state)
{
	(void)state;
	lg_spec *s = parse("wgrad", "fp32", "\"n\": 256, \"k\": 256");
	int64_t sz[1] = {100}, d[8];
	int nd = 0;
	assert_int_equal(lg_spec_arg_shape(s, 0, sz, 1, d, 8, &nd), LG_OK);
	assert_int_equal(nd, 2);
	assert_int_equal(d[1], 128);
	lg_spec_free(s);
}

static int setup(void **state)
{
	(void)state;
	if (lg_test_gpu_ctx(&ctx) != 0)
		return -1;
	if (strcmp(lg_ctx_arch(ctx), "sm_90a") != 0) {
		printf("SKIP gpu_test_fp8_gemm: the device is %s, the FP8 GEMMs need sm_90a\n", lg_ctx_arch(ctx));
		fflush(stdout);
		exit(LG_TEST_SKIP);
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	lg_ctx_destroy(ctx);
	return 0;
}

int main(void)
{
	lg_test_require_gpu("gpu_test_fp8_gemm");
	seed = lg_test_seed("gpu_test_fp8_gemm");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_accumulate),
		cmocka_unit_test(test_wgrad_pitch),
		cmocka_unit_test(test_bf16_exact),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
