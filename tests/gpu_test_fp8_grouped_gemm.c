/*
 * gpu_test_fp8_grouped_gemm.c - the grouped blockwise FP8 GEMMs (family
 * fp8_grouped_gemm, issue 16) on the GPU against the float64 reference of
 * the dequantised operands, expert by expert (label "gpu"): forward and
 * dgrad at the Ling-mini MoE's expert shapes (n 1024 / k 2048 and n 2048 /
 * k 512; 256 experts at a small shape) and odd ones (M 1, 127, 6001; k 2880; experts of 0 rows:
 * the reference's random counts empty a quarter of them), each tile; the
 * wgrad (dw[e] over each expert's tokens) at token counts that are
 * multiples of 32 (the reference's counts then are multiples of 16: every
 * row of the columnwise copies 16-byte aligned, the TMA path), 16 more than
 * a multiple of 32 (with an even number of experts every count odd: no
 * expert's rows aligned though the tokens are a multiple of 16, the byte
 * loads) and odd ones (random counts, rows at any byte), fp32 with
 * accumulate and bf16; every bf16 output bit for bit the fp32 one rounded
 * to nearest.
 * Bounds (fp8_gemm_ref.c): every element within 2e-3 of max |ref| for an
 * fp32 output, 2e-3 + 2^-7 (one bf16 step) for bf16; each check prints
 * max |gpu - ref| / max |ref| as measured.
 * Needs sm_90a: skips (77) without a CUDA device or on another arch.
 * Random inputs print their seed (LINGEN_SEED replays).
 */
#include <math.h>
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
#include "numeric_ref.h"
#include "testutil.h"

static lg_ctx *ctx;
static uint64_t seed;

static lg_spec *parse(const char *pass, const char *dtype, const char *keys)
{
	char json[512];
	snprintf(json, sizeof json, "{\"op\": \"fp8_grouped_gemm\", \"pass\": \"%s\", \"dtype\": \"%s\", %s}", pass, dtype,
		 keys);
	lg_spec *s = NULL;
	if (lg_spec_parse(json, &s) != LG_OK)
		fail_msg("%s: %s", json, lg_last_error());
	return s;
}

/* One spec at M tokens: within its bound, nothing unwritten. */
static void check(const char *pass, const char *dtype, const char *keys, int64_t M)
{
	lg_spec *s = parse(pass, dtype, keys);
	struct lg_check_opts o = {.tokens = M, .seed = seed + (uint64_t)M * 7919};
	struct lg_check_result r;
	if (lg_check_kernel(ctx, s, &o, &r) != LG_OK)
		fail_msg("%s at %lld tokens: %s", lg_spec_entry(s), (long long)M, lg_last_error());
	bool written = true;
	for (int i = 0; i < r.nmeasures; i++)
		written = written && r.m[i].unwritten == 0;
	printf("%s M=%lld: %s\n", lg_spec_entry(s), (long long)M, r.pass && written ? "PASS" : "FAIL");
	for (int i = 0; i < r.nmeasures; i++)
		printf("  %-4s %-5s n=%llu max_rel=%.3g rel_l2=%.3g mismatches=%llu unwritten=%llu %s\n", r.m[i].name,
		       r.m[i].kind, (unsigned long long)r.m[i].count, r.m[i].max_rel, r.m[i].rel_l2,
		       (unsigned long long)r.m[i].mismatches, (unsigned long long)r.m[i].unwritten,
		       r.m[i].pass ? "ok" : "FAIL");
	assert_true(r.pass);
	assert_true(written);
	lg_spec_free(s);
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* The Ling-mini MoE's expert shapes (fewer experts than its 256 at these
 * n, k: the reference's fill and float64 products are plain C), and its 256
 * experts at a small shape (the counts' scan, many 0-row experts). */
static void test_target(void **state)
{
	(void)state;
	check("forward", "bf16", "\"n\": 1024, \"k\": 2048, \"experts\": 32", 8192);
	check("dgrad", "bf16", "\"n\": 1024, \"k\": 2048, \"experts\": 32", 8192);
	check("forward", "bf16", "\"n\": 2048, \"k\": 512, \"experts\": 64", 8192);
	check("dgrad", "bf16", "\"n\": 2048, \"k\": 512, \"experts\": 64", 8192);
	check("forward", "bf16", "\"n\": 256, \"k\": 256, \"experts\": 256", 4096);
}

/* M 1, 127, 6001; k 2880 (a partial last block); fp32 out; one expert. */
static void test_odd(void **state)
{
	(void)state;
	static const int64_t ms[] = {1, 127, 6001};
	for (size_t i = 0; i < N_OF(ms); i++) {
		check("forward", "bf16", "\"n\": 256, \"k\": 2880, \"experts\": 8", ms[i]);
		check("forward", "fp32", "\"n\": 208, \"k\": 640, \"experts\": 1", ms[i]);
		check("dgrad", "bf16", "\"n\": 2880, \"k\": 208, \"experts\": 5", ms[i]);
	}
	check("forward", "bf16", "\"n\": 256, \"k\": 256, \"experts\": 4", 0);
}

/* The wgrad: the MoE's shapes (fewer experts: the float64 reference),
 * 256 experts at a small shape, odd token counts (6032, 8208, 3024: every
 * expert's count odd at an even number of experts, the tokens a multiple
 * of 16), n and k off the tile. */
static void test_wgrad(void **state)
{
	(void)state;
	check("wgrad", "fp32", "\"n\": 1024, \"k\": 2048, \"experts\": 16", 4096);
	check("wgrad", "bf16", "\"n\": 2048, \"k\": 512, \"experts\": 32", 8192);
	check("wgrad", "fp32", "\"n\": 256, \"k\": 256, \"experts\": 256", 8192);
	check("wgrad", "fp32", "\"n\": 256, \"k\": 256, \"experts\": 256", 8208);
	static const int64_t ms[] = {1, 127, 6001, 6016, 6032};
	for (size_t i = 0; i < N_OF(ms); i++) {
		check("wgrad", "fp32", "\"n\": 208, \"k\": 2880, \"experts\": 8", ms[i]);
		check("wgrad", "bf16", "\"n\": 400, \"k\": 144, \"experts\": 3", ms[i]);
	}
	check("wgrad", "fp32", "\"n\": 256, \"k\": 256, \"experts\": 4", 0);
	static const char *const tiles[] = {"{\"m\": 64}", "{\"n\": 64}", "{\"n\": 192}", "{\"stages\": 3}",
					    "{\"epilogue\": 0}", "{\"epilogue\": 2}", "{\"epilogue\": 2, \"stages\": 2}"};
	for (size_t t = 0; t < N_OF(tiles); t++) {
		char keys[256];
		snprintf(keys, sizeof keys, "\"n\": 512, \"k\": 384, \"experts\": 16, \"tile\": %s", tiles[t]);
		check("wgrad", "fp32", keys, 3000);
		check("wgrad", "fp32", keys, 3008);
		check("wgrad", "fp32", keys, 3024);
	}
}

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

static void test_tiles(void **state)
{
	(void)state;
	static const char *const tiles[] = {"{\"m\": 64}", "{\"n\": 64}", "{\"n\": 192}", "{\"n\": 256}",
					    "{\"stages\": 3}", "{\"cluster\": 2}", "{\"n\": 192, \"cluster\": 2}",
					    "{\"ahead\": 1}", "{\"ahead\": 1, \"cluster\": 2}", "{\"epilogue\": 0}",
					    "{\"epilogue\": 2}", "{\"epilogue\": 2, \"ahead\": 1}"};
	for (size_t t = 0; t < N_OF(tiles); t++) {
		char keys[256];
		snprintf(keys, sizeof keys, "\"n\": 512, \"k\": 384, \"experts\": 16, \"tile\": %s", tiles[t]);
		check("forward", "bf16", keys, 3000);
		check("dgrad", "bf16", keys, 3000);
	}
	/* ahead over 9 and 5 stages: two groups of 4 and one left, one and one */
	check("forward", "bf16", "\"n\": 256, \"k\": 1152, \"experts\": 16, \"tile\": {\"ahead\": 1}", 1000);
	check("dgrad", "bf16", "\"n\": 640, \"k\": 256, \"experts\": 16, \"tile\": {\"ahead\": 1}", 1000);
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
		cmocka_unit_test(test_target),
		cmocka_unit_test(test_odd),
		cmocka_unit_test(test_tiles),
		cmocka_unit_test(test_wgrad),
		cmocka_unit_test(test_wgrad_accumulate),
		cmocka_unit_test(test_bf16_exact),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
