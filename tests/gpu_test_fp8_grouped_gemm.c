/*
 * gpu_test_fp8_grouped_gemm.c - what the generic check of the grouped
 * blockwise FP8 GEMMs (family fp8_grouped_gemm, issue 16; label "gpu")
 * cannot say. Its cases of spec x token count against the float64
 * reference of the dequantised operands, expert by expert (forward, dgrad
 * and wgrad at the Ling-mini MoE's expert shapes and odd ones, experts of
 * 0 rows, each tile, 0 tokens) are tests/cases/fp8_grouped_gemm.json, run
 * by tests/gpu_test_families.c. Here: the wgrad's accumulate (a second
 * launch exactly doubles dw; aligned, every count odd, random), each
 * pass's bf16 output the fp32 one rounded to nearest bit for bit.
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
	return lg_test_spec("fp8_grouped_gemm", pass, dtype, keys);
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* wgrad accumulate: exactly doubled by a second launch (aligned, every
 * count odd, random). */
static void test_wgrad_accumulate(void **state)
{
	(void)state;
	lg_spec *s = parse("wgrad", "fp32", "\"n\": 256, \"k\": 640, \"experts\": 8, \"accumulate\": true");
	lg_test_accumulate(ctx, s, 2048, 5, seed);
	lg_test_accumulate(ctx, s, 2064, 5, seed + 2);
	lg_test_accumulate(ctx, s, 2001, 5, seed + 1);
	lg_spec_free(s);
	/* tile.pingpong: 64-row tiles, one a warpgroup, experts of different
	 * lengths */
	s = parse("wgrad", "fp32", "\"n\": 512, \"k\": 384, \"experts\": 16, \"accumulate\": true, "
		  "\"tile\": {\"pingpong\": 1, \"m\": 64}");
	lg_test_accumulate(ctx, s, 3001, 5, seed + 3);
	lg_spec_free(s);
}

/* Each pass's bf16 output is its fp32 output rounded to nearest. */
static void test_bf16_exact(void **state)
{
	(void)state;
	static const char *const passes[] = {"forward", "dgrad", "wgrad"};
	static const int64_t ms[] = {3000, 4096};
	for (size_t p = 0; p < N_OF(passes); p++)
		for (size_t i = 0; i < N_OF(ms); i++) {
			const char *keys = "\"n\": 400, \"k\": 2880, \"experts\": 6";
			lg_spec *s16 = parse(passes[p], "bf16", keys), *s32 = parse(passes[p], "fp32", keys);
			lg_test_bf16_exact(ctx, s16, s32, ms[i], 5, seed + p * 2 + i);
			lg_spec_free(s16);
			lg_spec_free(s32);
		}
}

static int setup(void **state)
{
	(void)state;
	if (lg_test_gpu_ctx(&ctx) != 0)
		return -1;
	if (strcmp(lg_ctx_arch(ctx), "sm_90a") != 0) {
		printf("SKIP gpu_test_fp8_grouped_gemm: the device is %s, the FP8 GEMMs need sm_90a\n", lg_ctx_arch(ctx));
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
	lg_test_require_gpu("gpu_test_fp8_grouped_gemm");
	seed = lg_test_seed("gpu_test_fp8_grouped_gemm");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wgrad_accumulate),
		cmocka_unit_test(test_bf16_exact),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
