/*
 * gpu_test_router_gemm.c - what the generic check of the router GEMM
 * (family router_gemm, docs/kernels.md K3; label "gpu") cannot say. Its
 * cases of spec x sizes against the CPU reference (the target shape, sizes
 * of no multiple, each backward precision, the tiles `lingen tune` sweeps,
 * the wgmma and mma.sync paths) are tests/cases/router_gemm.json, run by
 * tests/gpu_test_families.c. Here: 0 tokens (the forward launches nothing,
 * the backward writes dw = 0, on sm_90a also with no dx CTA at all), dw the
 * same bits on a second launch, dx or dw alone through the typed launcher
 * (the other pointer 0, its output left poisoned; a forward kernel
 * refused), and the launch's tensor maps following the pointers and sizes.
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

enum { B_DY, B_X, B_W, B_DX, B_DW, B_WS };

static bool wgmma(void) { return strcmp(lg_ctx_arch(ctx), "sm_90a") == 0; }

static int setup(void **state)
{
	(void)state;
	return lg_test_gpu_ctx(&ctx) != 0 ? -1 : 0;
}

static int teardown(void **state)
{
	(void)state;
	lg_ctx_destroy(ctx);
	return 0;
}

static lg_spec *parse(const char *pass, const char *keys)
{
	return lg_test_spec("router_gemm", pass, "bf16", keys);
}

/* One spec at M tokens: every output within tolerance, nothing unwritten. */
static void check(const char *pass, const char *keys, int64_t M)
{
	lg_spec *s = parse(pass, keys);
	struct lg_check_opts o = {.tokens = M, .seed = seed + (uint64_t)M * 7919};
	struct lg_check_result r;
	if (lg_check_kernel(ctx, s, &o, &r) != LG_OK)
		fail_msg("%s at %lld tokens: %s", lg_spec_entry(s), (long long)M, lg_last_error());
	bool written = lg_test_written(&r, M == 0 || r.nmeasures > 0); /* at 0 tokens the forward has no output */
	printf("%s %s M=%lld: %s\n", lg_spec_entry(s), lg_ctx_arch(ctx), (long long)M,
	       r.pass && written ? "PASS" : "FAIL");
	lg_test_print_measures(&r, 6);
	assert_true(r.pass);
	assert_true(written);
	lg_spec_free(s);
}

static void both(const char *keys, const int64_t *ms, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		check("forward", keys, ms[i]);
		check("backward", keys, ms[i]);
	}
}

/* The launch's tensor maps follow the pointers and sizes (launch.c keeps
 * the last ones): the forward on buffers A, then B (same sizes), then A
 * again: A's logits the same bits twice, B's others and the same bits on
 * a rerun; then A at 1000 tokens (its first 1000 rows the same bits, the
 * rest untouched) and at 8192 again (all the same bits: a map kept from
 * the 1000-token launch would read zeros past row 1000). */
static void test_tmap_cache(void **state)
{
	(void)state;
	lg_spec *s = parse("forward", "\"hidden\": 2048, \"experts\": 256");
	lg_kernel *k;
	if (lg_kernel_get(ctx, s, &k) != LG_OK)
		fail_msg("%s", lg_last_error());
	const int64_t sizes[1] = {8192};
	struct lg_gpu_case a, b;
	if (lg_gpu_case_init(&a, s, 8192, sizes, seed, k) != LG_OK ||
	    lg_gpu_case_init(&b, s, 8192, sizes, seed + 1, k) != LG_OK)
		fail_msg("%s", lg_last_error());
	enum { F_Y = 2 };
	size_t bytes = a.ref.buf[F_Y].count * 4, row = 256 * 4;
	char *a1 = malloc(bytes), *b1 = malloc(bytes);
	assert_true(a1 && b1);
	assert_int_equal(lg_gpu_case_launch(&a, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&a), LG_OK);
	memcpy(a1, a.got[F_Y], bytes);
	assert_int_equal(lg_gpu_case_launch(&b, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&b), LG_OK);
	memcpy(b1, b.got[F_Y], bytes);
	assert_memory_not_equal(a1, b1, row);
	assert_int_equal(lg_gpu_case_poison(&a), LG_OK);
	assert_int_equal(lg_gpu_case_launch(&a, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&a), LG_OK);
	assert_memory_equal(a1, a.got[F_Y], bytes);
	assert_int_equal(lg_gpu_case_poison(&b), LG_OK);
	assert_int_equal(lg_gpu_case_launch(&b, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&b), LG_OK);
	assert_memory_equal(b1, b.got[F_Y], bytes);
	assert_int_equal(lg_gpu_case_poison(&a), LG_OK);
	assert_int_equal(lg_router_gemm_forward(k, NULL, 1000, a.ptrs[0], a.ptrs[1], a.ptrs[F_Y]), LG_OK);
	assert_int_equal(lg_gpu_case_download(&a), LG_OK);
	assert_memory_equal(a1, a.got[F_Y], 1000 * row);
	const unsigned char *rest = (const unsigned char *)a.got[F_Y] + 1000 * row;
	for (size_t i = 0; i < bytes - 1000 * row; i++)
		if (rest[i] != 0xff)
			fail_msg("byte %zu past the 1000 rows written", i);
	assert_int_equal(lg_gpu_case_launch(&a, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&a), LG_OK);
	assert_memory_equal(a1, a.got[F_Y], bytes);
	free(a1);
	free(b1);
	lg_gpu_case_free(&a);
	lg_gpu_case_free(&b);
	lg_spec_free(s);
}

/* No tokens: the forward launches nothing, the backward writes dw = 0. */
static void test_no_tokens(void **state)
{
	(void)state;
	static const int64_t ms[] = {0};
	both("\"hidden\": 2048, \"experts\": 256", ms, 1);
	check("backward", "\"hidden\": 1000, \"experts\": 7, \"tile\": {\"split\": 1}", 0);
	if (wgmma()) /* no dx CTA at all */
		check("backward", "\"hidden\": 2048, \"experts\": 256, \"tile\": {\"dx_persistent\": 1}", 0);
}

/* A backward case at the target shape: its kernel and buffers. */
static void bwd_case(const char *keys, lg_kernel **k, struct lg_gpu_case *g, lg_spec **s)
{
	*s = parse("backward", keys);
	if (lg_kernel_get(ctx, *s, k) != LG_OK)
		fail_msg("%s", lg_last_error());
	const int64_t sizes[1] = {8192};
	if (lg_gpu_case_init(g, *s, 8192, sizes, seed, *k) != LG_OK)
		fail_msg("%s", lg_last_error());
}

/* dw: the same bits on a second launch. */
static void test_dw_deterministic(void **state)
{
	(void)state;
	lg_spec *s;
	lg_kernel *k;
	struct lg_gpu_case g;
	bwd_case("\"hidden\": 2048, \"experts\": 256", &k, &g, &s);
	size_t bytes = g.ref.buf[B_DW].count * g.ref.buf[B_DW].elem;
	void *first = malloc(bytes);
	assert_non_null(first);
	assert_int_equal(lg_gpu_case_launch(&g, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	memcpy(first, g.got[B_DW], bytes);
	assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
	assert_int_equal(lg_gpu_case_launch(&g, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	assert_memory_equal(first, g.got[B_DW], bytes);
	free(first);
	lg_gpu_case_free(&g);
	lg_spec_free(s);
}

/* dx alone (dw 0) and dw alone (dx 0), through the typed launcher: the
 * output not asked for stays poisoned, the other matches the full launch. */
static void test_one_output(void **state)
{
	(void)state;
	lg_spec *s;
	lg_kernel *k;
	struct lg_gpu_case g;
	bwd_case("\"hidden\": 2048, \"experts\": 256", &k, &g, &s);
	size_t nx = g.ref.buf[B_DX].count * 2, nw = g.ref.buf[B_DW].count * 4;
	void *dx = malloc(nx), *dw = malloc(nw);
	assert_true(dx && dw);
	assert_int_equal(lg_gpu_case_launch(&g, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	memcpy(dx, g.got[B_DX], nx);
	memcpy(dw, g.got[B_DW], nw);
	for (int which = 0; which < 2; which++) {
		assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
		lg_dptr p[6];
		memcpy(p, g.ptrs, sizeof p);
		p[which == 0 ? B_DW : B_DX] = 0;
		if (lg_router_gemm_backward(k, NULL, 8192, p[B_DY], p[B_X], p[B_W], p[B_DX], p[B_DW], p[B_WS]) !=
		    LG_OK)
			fail_msg("%s", lg_last_error());
		assert_int_equal(lg_gpu_case_download(&g), LG_OK);
		const unsigned char *skipped = g.got[which == 0 ? B_DW : B_DX];
		assert_true(skipped[0] == 0xff && skipped[(which == 0 ? nw : nx) - 1] == 0xff);
		if (which == 0)
			assert_memory_equal(dx, g.got[B_DX], nx);
		else
			assert_memory_equal(dw, g.got[B_DW], nw);
	}
	/* the typed launcher refuses a forward kernel */
	lg_spec *f = parse("forward", "\"hidden\": 2048, \"experts\": 256");
	lg_kernel *kf;
	assert_int_equal(lg_kernel_get(ctx, f, &kf), LG_OK);
	assert_int_equal(lg_router_gemm_backward(kf, NULL, 1, 0, 0, 0, 0, 0, 0), LG_ERR_INVALID_ARG);
	lg_spec_free(f);
	free(dx);
	free(dw);
	lg_gpu_case_free(&g);
	lg_spec_free(s);
}

int main(void)
{
	lg_test_require_gpu("gpu_test_router_gemm");
	seed = lg_test_seed("gpu_test_router_gemm");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tmap_cache),
		cmocka_unit_test(test_no_tokens),
		cmocka_unit_test(test_dw_deterministic),
		cmocka_unit_test(test_one_output),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
