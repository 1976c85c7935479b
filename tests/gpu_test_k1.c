/*
 * gpu_test_k1.c - K1 on the GPU against the CPU reference (label "gpu"):
 * RMSNorm + FP8 quantisation in every output mode with and without
 * power-of-two scales, plain RMSNorm forward and backward, at the target
 * shape 8192x2048 and at odd shapes (1x128, 127x2048, 8191x5120,
 * 300x16384, ...) and no tokens. Fresh random inputs, poisoned outputs. Also: the
 * software e4m3 conversion (for targets before sm_89) equals the hardware
 * cvt for every one of the 2^32 fp32 bit patterns.
 * Exactness: y, rms, q, qt, s and st must equal the reference bit for bit,
 * dx within the slack the reference proves (gen/rmsnorm_ref.c), dw within
 * a relative tolerance. The inputs' seed is printed; LINGEN_SEED replays.
 * Exits with LG_TEST_SKIP (ctest: skipped), saying why, when there is no
 * CUDA device or driver.
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

#include "buf.h"
#include "cuda.h"
#include "gpu.h"
#include "harness.h"
#include "nvrtc.h"
#include "templates.h"
#include "testutil.h"

static lg_ctx *ctx;
static uint64_t seed; /* every check's inputs (as `lingen check --seed`) */

static void check_opt(const char *json, int64_t tokens, bool no_optional)
{
	lg_spec *s = NULL;
	if (lg_spec_parse(json, &s) != LG_OK)
		fail_msg("%s", lg_last_error());
	struct lg_check_opts o = {.tokens = tokens, .seed = seed, .no_optional = no_optional};
	struct lg_check_result r;
	lg_status st = lg_check_kernel(ctx, s, &o, &r);
	if (st != LG_OK)
		fail_msg("%s x %lld: %s", lg_spec_entry(s), (long long)tokens, lg_last_error());
	printf("%s M=%lld: %s\n", lg_spec_entry(s), (long long)tokens, r.pass ? "PASS" : "FAIL");
	for (int i = 0; i < r.nmeasures; i++) {
		const struct lg_check_measure *m = &r.m[i];
		printf("  %-4s %-5s n=%llu equal=%.9f mismatches=%llu unwritten=%llu max_rel=%.3g rel_l2=%.3g",
		       m->name, m->kind, (unsigned long long)m->count, m->equal_frac,
		       (unsigned long long)m->mismatches, (unsigned long long)m->unwritten, m->max_rel, m->rel_l2);
		if (m->ulp_bound >= 0)
			printf(" ulps<=%d%s max_ulps=%llu slack=%llu at_bound=%llu", m->ulp_bound,
			       m->slack ? "+slack" : "", (unsigned long long)m->max_ulps,
			       (unsigned long long)m->slack, (unsigned long long)m->at_bound);
		printf(" %s\n", m->pass ? "ok" : "FAIL");
	}
	if (!r.pass)
		printf("  replay: LINGEN_SEED=%llu, or lingen check with --tokens %lld --seed %llu\n",
		       (unsigned long long)seed, (long long)tokens, (unsigned long long)seed);
	assert_true(r.nmeasures > 0);
	assert_true(r.pass);
	lg_spec_free(s);
}

static void check(const char *json, int64_t tokens) { check_opt(json, tokens, false); }

#define K1(out, pow2, hidden)                                                                      \
	"{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": " #hidden \
	", \"quant\": {\"round_scale\": " #pow2 ", \"output\": \"" #out "\"}}"
#define K1_FUSED(hidden, cluster)                                                                   \
	"{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": " #hidden   \
	", \"quant\": {}, \"tile\": {\"cluster\": " #cluster "}}"
#define K1_SLAB(out, pow2, hidden, slab)                                                           \
	"{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": " #hidden   \
	", \"quant\": {\"round_scale\": " #pow2 ", \"output\": \"" #out "\"}, \"tile\": {\"slab\": " #slab "}}"
#define K1_TILE(hidden, tile)                                                                      \
	"{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": " #hidden   \
	", \"quant\": {}, \"tile\": " tile "}"
#define NORM(pass, hidden)                                                                          \
	"{\"op\": \"rmsnorm\", \"pass\": \"" #pass "\", \"dtype\": \"bf16\", \"hidden\": " #hidden "}"
#define NORM_TILE(pass, hidden, tile)                                                               \
	"{\"op\": \"rmsnorm\", \"pass\": \"" #pass "\", \"dtype\": \"bf16\", \"hidden\": " #hidden \
	", \"tile\": " tile "}"

static void test_k1_target_shape(void **state)
{
	(void)state;
	check(K1(both, true, 2048), 8192);
	check(K1(both, false, 2048), 8192);
	check(K1(rowwise, true, 2048), 8192);
	check(K1(columnwise, false, 2048), 8192);
}

static void test_k1_odd_shapes(void **state)
{
	(void)state;
	check(K1(both, true, 128), 1);
	check(K1(both, true, 2048), 127);
	check(K1(both, false, 5120), 8191);
	check(K1(both, true, 16384), 300);
	check(K1(columnwise, true, 384), 129);
	check(K1(both, true, 1152), 1000);
	check(K1(rowwise, false, 256), 77);
}

/* The goal shapes beyond the target: hidden 4096 and 7168, 16384 tokens. */
static void test_k1_goal_shapes(void **state)
{
	(void)state;
	check(K1(both, true, 4096), 8192);
	check(K1(both, true, 7168), 8192);
	check(K1(both, true, 2048), 16384);
	check(K1(both, false, 4096), 16384);
	check(K1(both, true, 2048), 128);
	check(K1(both, true, 2048), 1024);
}

/* Every tile `lingen tune` tries on the two-kernel form (the fused and slab
 * candidates are test_k1_fused's and test_k1_slab's): kernel 1's threads
 * and rows, and the token slices (tile.stages) with their partial last
 * slice and slices of no tile. */
static void test_k1_candidates(void **state)
{
	(void)state;
	static const char *const tiles[] = {
		"{\"threads\": 128}", "{\"threads\": 256}", "{\"threads\": 512}", "{\"threads\": 256, \"rows\": 8}",
		"{\"stages\": 2}", "{\"stages\": 4}", "{\"stages\": 3, \"threads\": 256}",
	};
	static const int64_t tokens[] = {8192, 1, 129, 333, 8191};
	static const int hidden[] = {2048, 1152};
	for (size_t t = 0; t < sizeof tiles / sizeof *tiles; t++)
		for (size_t h = 0; h < 2; h++) {
			char json[320];
			snprintf(json, sizeof json,
				 "{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
				 "\"hidden\": %d, \"quant\": {}, \"tile\": %s}",
				 hidden[h], tiles[t]);
			for (size_t m = 0; m < sizeof tokens / sizeof *tokens; m++)
				check(json, tokens[m]);
		}
	check(K1_TILE(2048, "{\"cluster\": 16, \"stages\": 1}"), 8191);
	check(K1_TILE(1152, "{\"cluster\": 9, \"stages\": 1}"), 129);
}

/* The fused single-kernel form (a tile option): clusters of up to 16 CTAs. */
static void test_k1_fused(void **state)
{
	(void)state;
	check(K1_FUSED(2048, 16), 8192);
	check(K1_FUSED(2048, 16), 127);
	check(K1_FUSED(1152, 9), 1000);
	check(K1_FUSED(128, 1), 1);
}

/* The one-pass TMA form (a tile option, sm_90): clusters of hidden/slab <= 8
 * CTAs, tails zero-filled by TMA. */
static void test_k1_slab(void **state)
{
	(void)state;
	static const int64_t tokens[] = {8192, 1, 127, 129, 8191};
	for (size_t i = 0; i < sizeof tokens / sizeof *tokens; i++) {
		check(K1_SLAB(both, true, 2048, 256), tokens[i]);
		check(K1_SLAB(both, false, 1024, 128), tokens[i]);
		check(K1_SLAB(both, true, 4096, 512), tokens[i]);
	}
	check(K1_SLAB(both, true, 2048, 512), 8192);
	check(K1_SLAB(both, true, 1024, 256), 1000);
	check(K1_SLAB(rowwise, true, 2048, 256), 8191);
	check(K1_SLAB(columnwise, false, 2048, 256), 8191);
	check(K1_SLAB(both, true, 256, 256), 300); /* one CTA, no cluster */
	check(K1_SLAB(both, true, 2048, 256), 100000); /* several tiles a cluster */
}

static void test_rmsnorm(void **state)
{
	(void)state;
	check(NORM(forward, 2048), 8192);
	check(NORM(forward, 2048), 127);
	check(NORM(forward, 16384), 300);
	check(NORM(forward, 128), 1);
	check(NORM(backward, 2048), 8192);
	check(NORM(backward, 5120), 8191);
	check(NORM(backward, 16384), 300);
	check(NORM(backward, 128), 1);
	check(NORM(backward, 1152), 100000);
	/* hidden any multiple of 8, not of 128 */
	check(NORM(forward, 1000), 127);
	check(NORM(forward, 8), 1);
	check(NORM(forward, 2888), 4099);
	check(NORM(backward, 1000), 8191);
	check(NORM(backward, 72), 300);
	check(NORM(backward, 8), 1);
	/* the backward and the forward without their rings, every loop count */
	check(NORM_TILE(backward, 2048, "{\"prefetch\": 0}"), 8192);
	check(NORM_TILE(backward, 1000, "{\"prefetch\": 0, \"threads\": 256}"), 529);
	check(NORM_TILE(forward, 2048, "{\"prefetch\": 0}"), 8192);
	check(NORM_TILE(forward, 2048, "{\"prefetch\": 1}"), 2113);
	check(NORM_TILE(forward, 5120, "{\"prefetch\": 1}"), 8191);
	check(NORM_TILE(forward, 8, "{\"prefetch\": 1}"), 1);
	/* CTAs an SM of the persistent grid: w in registers (2), or from L1 (3, 4) */
	check(NORM_TILE(forward, 2048, "{\"per_sm\": 2}"), 2113);
	check(NORM_TILE(backward, 2048, "{\"per_sm\": 3}"), 8192);
	check(NORM_TILE(backward, 1000, "{\"per_sm\": 4}"), 2113);
	/* the forward's cp.async ring (the default): stages 1 to 4, CTAs an SM,
	 * lanes past the row (hidden 1000, 72), several rows a warp's loop */
	check(NORM_TILE(forward, 2048, "{\"stages\": 1}"), 2113);
	check(NORM_TILE(forward, 2048, "{\"stages\": 2}"), 8191);
	check(NORM_TILE(forward, 2048, "{\"stages\": 4}"), 4099);
	check(NORM_TILE(forward, 2048, "{\"stages\": 3, \"per_sm\": 4}"), 8192);
	check(NORM_TILE(forward, 2048, "{\"stages\": 2, \"threads\": 256, \"per_sm\": 2}"), 2113);
	check(NORM_TILE(forward, 4096, "{\"stages\": 2, \"threads\": 128, \"per_sm\": 4}"), 8192);
	check(NORM(forward, 4096), 8192);
	check(NORM(forward, 4096), 1025);
	check(NORM(forward, 1000), 100000);
	check(NORM(forward, 72), 3001);
	check(NORM(forward, 2048), 128);
	check(NORM(forward, 2048), 1024);
	/* the backward's ring (the default) and its register prefetch */
	check(NORM_TILE(backward, 2048, "{\"prefetch\": 1}"), 8192);
	check(NORM_TILE(backward, 2048, "{\"stages\": 2}"), 2113);
	check(NORM_TILE(backward, 1000, "{\"stages\": 4}"), 8191);
	check(NORM_TILE(backward, 2048, "{\"stages\": 2, \"per_sm\": 4}"), 4099);
	check(NORM_TILE(backward, 2048, "{\"stages\": 3, \"threads\": 256}"), 8192);
	check(NORM(backward, 4096), 8192);
	check(NORM(backward, 2048), 1024);
	check(NORM(backward, 2048), 128);
	check_opt(NORM_TILE(backward, 2048, "{\"stages\": 1}"), 3001, true);
	/* without rms: the backward recomputes it, the forward does not write it */
	check_opt(NORM(backward, 2048), 4099, true);
	check_opt(NORM(forward, 2048), 4099, true);
}

/* No tokens: every K1 form and the plain forward launch without error (the
 * two-kernel form's one CTA a launch returns at once, the persistent forms
 * launch nothing) on buffers of no tokens; the backward still writes dw = 0. */
static void test_no_tokens(void **state)
{
	(void)state;
	static const char *const specs[] = {
		K1(both, true, 2048), K1(rowwise, false, 384), K1(columnwise, true, 128), K1_FUSED(2048, 16),
		K1_SLAB(both, true, 2048, 256), K1_TILE(2048, "{\"stages\": 2}"), NORM(forward, 2048),
		NORM_TILE(forward, 2048, "{\"prefetch\": 1}"),
	};
	for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
		lg_spec *s = NULL;
		if (lg_spec_parse(specs[i], &s) != LG_OK)
			fail_msg("%s", lg_last_error());
		lg_kernel *k = NULL;
		if (lg_kernel_get(ctx, s, &k) != LG_OK)
			fail_msg("%s", lg_last_error());
		struct lg_gpu_case g;
		if (lg_gpu_case_init(&g, s, 0, NULL, seed, k) != LG_OK)
			fail_msg("%s", lg_last_error());
		assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
		if (lg_gpu_case_launch(&g, k, NULL) != LG_OK)
			fail_msg("%s at no tokens: %s", lg_spec_entry(s), lg_last_error());
		assert_int_equal(lg_gpu_case_download(&g), LG_OK);
		printf("%s M=0: PASS\n", lg_spec_entry(s));
		lg_gpu_case_free(&g);
		lg_spec_free(s);
	}
	check(NORM(backward, 2048), 0);
	check(NORM(backward, 1000), 0);
	check(NORM_TILE(backward, 2048, "{\"prefetch\": 0}"), 0);
}

/* Every fp32 bit pattern through both e4m3 conversions. */
static void test_e4m3_soft_equals_hardware(void **state)
{
	(void)state;
	lg_buf b;
	lg_buf_init(&b);
	/* lg_e4m3x2 as sm_90 (hardware) and sm_80 (software) have it, each
	 * with its helpers in a namespace of its own */
	lg_line(&b, "namespace hw {");
	size_t at = b.len;
	lg_line(&b, "static __device__ u32 e4m3x2(float lo, float hi) { return lg_e4m3x2(lo, hi); }");
	lg_emit_helpers(&b, at, 90);
	lg_line(&b, "}");
	lg_line(&b, "namespace sw {");
	at = b.len;
	lg_line(&b, "static __device__ u32 e4m3x2(float lo, float hi) { return lg_e4m3x2(lo, hi); }");
	lg_emit_helpers(&b, at, 80);
	lg_line(&b, "}");
	at = b.len;
	lg_line(&b, "extern \"C\" __global__ void e4m3_all(u64 out)");
	lg_open(&b, "{");
	lg_line(&b, "unsigned long long *res = (unsigned long long *)out;");
	lg_open(&b, "for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < (1ull << 32); i += (u64)gridDim.x * blockDim.x) {");
	lg_line(&b, "const float f = lg_u2f((u32)i);");
	lg_line(&b, "const u32 a = hw::e4m3x2(f, -f), c = sw::e4m3x2(f, -f);");
	lg_open(&b, "if (a != c) {");
	lg_line(&b, "if (atomicAdd(&res[0], 1ull) == 0) res[1] = i | ((u64)a << 32) | ((u64)c << 48);");
	lg_close(&b);
	lg_close(&b);
	lg_close(&b);
	lg_emit_helpers(&b, at, 80); /* u32, u64, lg_u2f for the kernel */
	char *src = lg_buf_finish(&b, NULL);
	assert_non_null(src);
	void *cubin;
	size_t size;
	if (lg_nvrtc_compile(src, "e4m3_all", lg_ctx_arch(ctx), &cubin, &size, NULL) != LG_OK)
		fail_msg("%s", lg_last_error());
	const struct lg_cu *cu;
	assert_int_equal(lg_cu_get(&cu), LG_OK);
	CUlibrary lib;
	CUkernel k;
	CUdeviceptr res;
	assert_int_equal(cu->cuLibraryLoadData(&lib, cubin, NULL, NULL, 0, NULL, NULL, 0), CUDA_SUCCESS);
	assert_int_equal(cu->cuLibraryGetKernel(&k, lib, "e4m3_all"), CUDA_SUCCESS);
	assert_int_equal(cu->cuMemAlloc(&res, 16), CUDA_SUCCESS);
	assert_int_equal(cu->cuMemsetD8(res, 0, 16), CUDA_SUCCESS);
	void *args[] = {&res};
	assert_int_equal(cu->cuLaunchKernel((CUfunction)k, 1024, 1, 1, 256, 1, 1, 0, NULL, args, NULL),
			 CUDA_SUCCESS);
	unsigned long long h[2] = {0, 0};
	assert_int_equal(cu->cuMemcpyDtoH(h, res, 16), CUDA_SUCCESS);
	printf("e4m3 software vs hardware over 2^32 inputs: %llu mismatches (first 0x%08llx: hw 0x%04llx sw 0x%04llx)\n",
	       h[0], h[1] & 0xffffffffu, (h[1] >> 32) & 0xffff, h[1] >> 48);
	assert_int_equal(h[0], 0);
	cu->cuMemFree(res);
	cu->cuLibraryUnload(lib);
	free(cubin);
	free(src);
}

int main(void)
{
	lg_test_require_gpu("gpu_test_k1");
	seed = lg_test_seed("gpu_test_k1");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_e4m3_soft_equals_hardware),
		cmocka_unit_test(test_k1_target_shape),
		cmocka_unit_test(test_k1_odd_shapes),
		cmocka_unit_test(test_k1_goal_shapes),
		cmocka_unit_test(test_k1_candidates),
		cmocka_unit_test(test_k1_fused),
		cmocka_unit_test(test_k1_slab),
		cmocka_unit_test(test_rmsnorm),
		cmocka_unit_test(test_no_tokens),
	};
	return LG_TEST_RUN_GPU(tests, &ctx);
}
