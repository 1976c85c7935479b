/*
 * gpu_test_rmsnorm_router.c - RMSNorm + router GEMM + rowwise FP8 in one
 * pass (family rmsnorm_router, docs/kernels.md K3b) on the GPU against the CPU
 * reference (label "gpu"): y, rms, q, s (and qt, st with quant.output
 * "both") bit for bit, the logits within router_gemm's forward tolerance,
 * at the target shape (x [8192, 2048], 256 experts) and at sizes that are
 * multiples of nothing (M = 1, 127, 8191; hidden 7168, 1000 (a partial last
 * quant block), 8; experts 96, 160, 1, 300 (two column tiles)), each
 * precision, exact and power-of-two scales, the tiles `lingen tune` sweeps,
 * 0 tokens, and through the typed launcher. Fresh random inputs, poisoned
 * outputs, nothing left unwritten.
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

enum { X, W, RW, Y, RMS, LOGITS, Q, S, QT, ST };

static lg_spec *parse(const char *keys)
{
	return lg_test_spec("rmsnorm_router", "forward", "bf16", keys);
}

/* One spec at M tokens: every output within tolerance, nothing unwritten. */
static void check(const char *keys, int64_t M)
{
	lg_spec *s = parse(keys);
	struct lg_check_opts o = {.tokens = M, .seed = seed + (uint64_t)M * 7919};
	struct lg_check_result r;
	if (lg_check_kernel(ctx, s, &o, &r) != LG_OK)
		fail_msg("%s at %lld tokens: %s", lg_spec_entry(s), (long long)M, lg_last_error());
	bool written = lg_test_written(&r, true);
	printf("%s M=%lld: %s\n", lg_spec_entry(s), (long long)M, r.pass && written ? "PASS" : "FAIL");
	lg_test_print_measures(&r, 6);
	assert_true(r.pass);
	assert_true(written);
	lg_spec_free(s);
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static void each(const char *keys, const int64_t *ms, size_t n)
{
	for (size_t i = 0; i < n; i++)
		check(keys, ms[i]);
}

#define ROWWISE "\"quant\": {\"output\": \"rowwise\"}"
#define BOTH "\"quant\": {\"output\": \"both\"}"

/* The target shape (rowwise, and both copies), and token counts around it. */
static void test_target(void **state)
{
	(void)state;
	static const int64_t ms[] = {8192, 1, 127, 8191};
	each("\"hidden\": 2048, \"experts\": 256, " ROWWISE, ms, N_OF(ms));
	each("\"hidden\": 2048, \"experts\": 256, " BOTH, ms, N_OF(ms));
}

/* hidden 7168, 1000 (a partial last 1x128 block), 8 (one piece a row). */
static void test_hidden(void **state)
{
	(void)state;
	static const int64_t ms[] = {1, 127, 1000};
	each("\"hidden\": 7168, \"experts\": 256, " ROWWISE, ms, N_OF(ms));
	each("\"hidden\": 7168, \"experts\": 256, " BOTH, ms, N_OF(ms));
	each("\"hidden\": 1000, \"experts\": 256, " ROWWISE, ms, N_OF(ms));
	each("\"hidden\": 8, \"experts\": 3, " ROWWISE, ms, N_OF(ms));
}

/* experts 96, 160 (no multiple of the tile), 1 (scalar stores), 300 (two
 * column tiles: the second remakes y but writes only logits). */
static void test_experts(void **state)
{
	(void)state;
	static const int64_t ms[] = {1, 127, 1000};
	each("\"hidden\": 2048, \"experts\": 96, " ROWWISE, ms, N_OF(ms));
	each("\"hidden\": 2048, \"experts\": 160, " BOTH, ms, N_OF(ms));
	each("\"hidden\": 2048, \"experts\": 1, " ROWWISE, ms, N_OF(ms));
	each("\"hidden\": 1000, \"experts\": 7, " ROWWISE, ms, N_OF(ms));
	each("\"hidden\": 2048, \"experts\": 300, " ROWWISE, ms, N_OF(ms));
}

/* y as 2 and 3 bf16 terms (fp32 A stages), exact scales. */
static void test_precision_and_scales(void **state)
{
	(void)state;
	static const int64_t ms[] = {1, 127, 8192};
	static const char *const keys[] = {
		"\"hidden\": 2048, \"experts\": 256, \"precision\": \"bf16x2\", " ROWWISE,
		"\"hidden\": 2048, \"experts\": 256, \"precision\": \"bf16x3\", " BOTH,
		"\"hidden\": 1000, \"experts\": 160, \"precision\": \"bf16x3\", " ROWWISE,
		"\"hidden\": 2048, \"experts\": 256, \"quant\": {\"output\": \"both\", \"round_scale\": false}",
		"\"hidden\": 1000, \"experts\": 96, \"quant\": {\"output\": \"rowwise\", \"round_scale\": false}",
	};
	for (size_t k = 0; k < N_OF(keys); k++)
		for (size_t i = 0; i < N_OF(ms); i++)
			check(keys[k], ms[i]);
}

/* The tiles of `lingen tune` (with a warp grid: mma.sync; without: wgmma on sm_90a). */
static void test_tiles(void **state)
{
	(void)state;
	static const char *const tiles[] = {
		"{\"m\": 64, \"n\": 256, \"warps_m\": 2, \"warps_n\": 4, \"stages\": 2}",
		"{\"m\": 32, \"n\": 256, \"warps_m\": 1, \"warps_n\": 8, \"stages\": 2}",
		"{\"m\": 32, \"n\": 256, \"warps_m\": 2, \"warps_n\": 4, \"stages\": 3}",
		"{\"m\": 128, \"n\": 256, \"warps_m\": 4, \"warps_n\": 2, \"stages\": 2}",
		"{\"m\": 64, \"n\": 128, \"warps_m\": 2, \"warps_n\": 4, \"stages\": 2}",
		"{\"m\": 64, \"n\": 128, \"warps_m\": 2, \"warps_n\": 2, \"stages\": 3}",
		"{\"m\": 128, \"n\": 128, \"warps_m\": 4, \"warps_n\": 2, \"stages\": 2}",
		"{\"m\": 32, \"n\": 128, \"warps_m\": 1, \"warps_n\": 4, \"stages\": 3}",
		"{\"m\": 64, \"n\": 256, \"warps_m\": 4, \"warps_n\": 2, \"stages\": 2}",
		"{\"m\": 64, \"n\": 64, \"warps_m\": 2, \"warps_n\": 2, \"stages\": 2}",
		/* no warp grid: the wgmma path on sm_90a */
		"{\"m\": 64, \"n\": 256, \"stages\": 2}",
		"{\"n\": 128, \"stages\": 4}",
		"{\"n\": 64, \"stages\": 3}",
		"{\"n\": 96}",
	};
	static const int64_t ms[] = {127, 1000};
	for (size_t t = 0; t < N_OF(tiles); t++) {
		char keys[256];
		snprintf(keys, sizeof keys, "\"hidden\": 1000, \"experts\": 160, " ROWWISE ", \"tile\": %s", tiles[t]);
		for (size_t i = 0; i < N_OF(ms); i++)
			check(keys, ms[i]);
	}
}

/* No tokens: nothing launched, nothing to write. */
static void test_no_tokens(void **state)
{
	(void)state;
	check("\"hidden\": 2048, \"experts\": 256, " ROWWISE, 0);
	check("\"hidden\": 2048, \"experts\": 256, " BOTH, 0);
}

/* The typed launcher gives what the harness's launch gave, and refuses
 * another op's kernel. */
static void test_typed_launcher(void **state)
{
	(void)state;
	lg_spec *s = parse("\"hidden\": 2048, \"experts\": 256, " BOTH);
	lg_kernel *k;
	if (lg_kernel_get(ctx, s, &k) != LG_OK)
		fail_msg("%s", lg_last_error());
	const int64_t sizes[1] = {1000};
	struct lg_gpu_case g;
	if (lg_gpu_case_init(&g, s, 1000, sizes, seed, k) != LG_OK)
		fail_msg("%s", lg_last_error());
	assert_int_equal(lg_gpu_case_launch(&g, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	void *first[10];
	size_t bytes[10];
	for (int i = Y; i <= ST; i++) {
		bytes[i] = g.ref.buf[i].count * g.ref.buf[i].elem;
		first[i] = malloc(bytes[i] + 1);
		assert_non_null(first[i]);
		memcpy(first[i], g.got[i], bytes[i]);
	}
	assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
	const lg_dptr *p = g.ptrs;
	if (lg_rmsnorm_router_forward(k, NULL, 1000, p[X], p[W], p[RW], p[Y], p[RMS], p[LOGITS], p[Q], p[S], p[QT],
				      p[ST]) != LG_OK)
		fail_msg("%s", lg_last_error());
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	for (int i = Y; i <= ST; i++) {
		if (memcmp(first[i], g.got[i], bytes[i]) != 0)
			fail_msg("%s differs between the harness's launch and the typed launcher", g.ref.buf[i].name);
		free(first[i]);
	}
	lg_spec *f = NULL;
	assert_int_equal(lg_spec_parse("{\"op\": \"router_gemm\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
				       "\"hidden\": 2048, \"experts\": 256}",
				       &f),
			 LG_OK);
	lg_kernel *kf;
	assert_int_equal(lg_kernel_get(ctx, f, &kf), LG_OK);
	assert_int_equal(lg_rmsnorm_router_forward(kf, NULL, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), LG_ERR_INVALID_ARG);
	lg_spec_free(f);
	lg_gpu_case_free(&g);
	lg_spec_free(s);
}

int main(void)
{
	lg_test_require_gpu("gpu_test_rmsnorm_router");
	seed = lg_test_seed("gpu_test_rmsnorm_router");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_target),
		cmocka_unit_test(test_hidden),
		cmocka_unit_test(test_experts),
		cmocka_unit_test(test_precision_and_scales),
		cmocka_unit_test(test_tiles),
		cmocka_unit_test(test_no_tokens),
		cmocka_unit_test(test_typed_launcher),
	};
	return LG_TEST_RUN_GPU(tests, &ctx);
}
