/*
 * gpu_test_fp8_gemm.c - the blockwise FP8 GEMMs (family fp8_gemm, issue 16)
 * on the GPU against the float64 reference of the dequantised operands
 * (label "gpu"): forward (bf16 and fp32 y), dgrad and wgrad at the target's
 * n and k (7168 x 16384) and at odd shapes (M 1, 127, 6001, 9973; k 2880,
 * whose last 128-block is partial), each tile `lingen tune` sweeps, wgrad's
 * accumulate (dw += exactly doubling a first result), 0 tokens. The wgrad
 * at every token count: its columnwise copies have rows round_up(M, 16)
 * apart, the harness fills their tails with random bytes and the reference
 * never reads them (a kernel reading past M fails).
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
	snprintf(json, sizeof json, "{\"op\": \"fp8_gemm\", \"pass\": \"%s\", \"dtype\": \"%s\", %s}", pass, dtype,
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

/* The target's n, k (DeepSeek-V3's 7168 x 16384 shape) at row tails. */
static void test_target(void **state)
{
	(void)state;
	static const int64_t ms[] = {1, 129};
	for (size_t i = 0; i < N_OF(ms); i++)
		check("forward", "bf16", "\"n\": 7168, \"k\": 16384", ms[i]);
	check("dgrad", "bf16", "\"n\": 7168, \"k\": 2048", 127);
	check("wgrad", "fp32", "\"n\": 256, \"k\": 7168", 2048);
}

/* M 1, 127, 6001; k 2880 (a partial last 128-block); fp32 and bf16 out. */
static void test_odd(void **state)
{
	(void)state;
	static const int64_t ms[] = {1, 127, 6001};
	for (size_t i = 0; i < N_OF(ms); i++) {
		check("forward", "bf16", "\"n\": 256, \"k\": 2880", ms[i]);
		check("forward", "fp32", "\"n\": 208, \"k\": 2880", ms[i]);
		check("dgrad", "bf16", "\"n\": 2880, \"k\": 208", ms[i]);
	}
	static const int64_t mw[] = {1, 16, 127, 2000, 6000, 6001, 9973};
	for (size_t i = 0; i < N_OF(mw); i++)
		check("wgrad", "fp32", "\"n\": 208, \"k\": 2880", mw[i]);
	check("wgrad", "bf16", "\"n\": 2880, \"k\": 144", 4096);
	check("wgrad", "bf16", "\"n\": 2880, \"k\": 144", 4093);
}

/* The tiles `lingen tune` sweeps and a few stage counts. */
static void test_tiles(void **state)
{
	(void)state;
	/* cluster 2 at n 192: 1024 columns are 3 cluster tiles of 384, rank 1's
	 * last one past the output */
	static const char *const tiles[] = {"{\"m\": 64}", "{\"n\": 64}", "{\"n\": 96}", "{\"n\": 160}",
					    "{\"n\": 192}", "{\"n\": 256}", "{\"stages\": 2}", "{\"m\": 64, \"n\": 256}",
					    "{\"cluster\": 2}", "{\"n\": 192, \"cluster\": 2}", "{\"m\": 64, \"cluster\": 2}",
					    "{\"epilogue\": 0}", "{\"epilogue\": 1}", "{\"epilogue\": 2}",
					    "{\"epilogue\": 2, \"n\": 64}"};
	for (size_t t = 0; t < N_OF(tiles); t++) {
		char keys[256];
		snprintf(keys, sizeof keys, "\"n\": 1024, \"k\": 1152, \"tile\": %s", tiles[t]);
		check("forward", "bf16", keys, 300);
		check("dgrad", "bf16", keys, 300);
		check("wgrad", "fp32", keys, 304);
		check("wgrad", "fp32", keys, 301);
	}
	/* ahead (forward and dgrad only): reductions of 9 and 10 stages (groups
	 * of 4 and the rest one at a time), a stage count below a group's;
	 * tile.m 256 (forward and dgrad): two waves a warpgroup, the forward's
	 * 1000 rows ending inside the last tile's second wave, 300 inside its
	 * first */
	static const struct {
		const char *tile;
		int64_t fwd_rows;
	} fd[] = {{"{\"ahead\": 1}", 300}, {"{\"ahead\": 1, \"m\": 64, \"n\": 64}", 300},
		  {"{\"ahead\": 1, \"cluster\": 2}", 300}, {"{\"ahead\": 1, \"stages\": 2}", 300},
		  {"{\"m\": 256}", 1000}, {"{\"m\": 256, \"n\": 64}", 1000},
		  {"{\"m\": 256, \"cluster\": 2}", 1000}, {"{\"m\": 256, \"stages\": 2}", 1000},
		  {"{\"m\": 256, \"epilogue\": 1}", 1000}, {"{\"m\": 256, \"epilogue\": 1}", 300},
		  {"{\"m\": 256, \"epilogue\": 1, \"cluster\": 1}", 1000},
		  {"{\"m\": 256, \"epilogue\": 2}", 1000}, {"{\"m\": 256, \"epilogue\": 2, \"n\": 64}", 1000}};
	static const char *const red[] = {"\"n\": 1024, \"k\": 1152", "\"n\": 1280, \"k\": 1280",
					  "\"n\": 384, \"k\": 384"};
	for (size_t t = 0; t < N_OF(fd); t++)
		for (size_t r = 0; r < N_OF(red); r++) {
			char keys[256];
			snprintf(keys, sizeof keys, "%s, \"tile\": %s", red[r], fd[t].tile);
			check("forward", "bf16", keys, fd[t].fwd_rows);
			check("dgrad", "bf16", keys, 300);
		}
	/* tile.m 256 through TMA: fp32 (a wave's buffer each warpgroup, its
	 * waves' stores in turn) and bf16 at 78 cluster tiles (two tiles on some
	 * CTAs: the buffers taken in turn across tiles, the last row tile's
	 * second wave ending at row 9973 from registers) */
	static const char *const tall[] = {"{\"m\": 256, \"epilogue\": 1}", "{\"m\": 256, \"epilogue\": 2}"};
	for (size_t t = 0; t < N_OF(tall); t++) {
		char keys[256];
		snprintf(keys, sizeof keys, "\"n\": 1024, \"k\": 1152, \"tile\": %s", tall[t]);
		check("forward", "fp32", keys, 1000);
		check("dgrad", "fp32", keys, 300);
		snprintf(keys, sizeof keys, "\"n\": 512, \"k\": 1152, \"tile\": %s", tall[t]);
		check("forward", "bf16", keys, 9973);
		check("forward", "fp32", keys, 9973);
	}
}

/* 0 tokens: y and dx have no rows; dw = 0. */
static void test_no_tokens(void **state)
{
	(void)state;
	check("forward", "bf16", "\"n\": 256, \"k\": 256", 0);
	check("wgrad", "fp32", "\"n\": 256, \"k\": 256", 0);
}

/* accumulate: dw from 0 is the product (within the bound); a second
 * launch adds the same bits again: exactly twice the first. */
static void test_accumulate(void **state)
{
	(void)state;
	lg_spec *s = parse("wgrad", "fp32", "\"n\": 256, \"k\": 640, \"accumulate\": true");
	lg_test_accumulate(ctx, s, 1024, 4, seed);
	lg_test_accumulate(ctx, s, 1001, 4, seed + 1);
	lg_spec_free(s);
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

/* wgrad takes every token count (it refused those not a multiple of 16):
 * dyt and xt [n | k, round_up(tokens, 16)], read as rows of tokens. */
static void test_wgrad_tokens(void **state)
{
	(void)state;
	static const int64_t ms[] = {1, 2, 15, 17, 100, 127, 129, 9973};
	for (size_t i = 0; i < N_OF(ms); i++)
		check("wgrad", "fp32", "\"n\": 256, \"k\": 256", ms[i]);
	lg_spec *s = parse("wgrad", "fp32", "\"n\": 256, \"k\": 256");
	int64_t sz[1] = {100}, d[8];
	int nd = 0;
	assert_int_equal(lg_spec_arg_shape(s, 0, sz, 1, d, 8, &nd), LG_OK);
	assert_int_equal(nd, 2);
	assert_int_equal(d[1], 112);
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
		cmocka_unit_test(test_target),   cmocka_unit_test(test_odd),	    cmocka_unit_test(test_tiles),
		cmocka_unit_test(test_no_tokens), cmocka_unit_test(test_accumulate), cmocka_unit_test(test_wgrad_tokens),
		cmocka_unit_test(test_bf16_exact),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
