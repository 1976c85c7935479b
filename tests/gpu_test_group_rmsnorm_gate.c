/*
 * gpu_test_group_rmsnorm_gate.c - group RMSNorm x sigmoid gate (family
 * group_rmsnorm_gate, docs/kernels.md K8) on the GPU against the CPU reference
 * (label "gpu"), forward and backward: the target shape (x [2, 4096,
 * 2048], 4 groups), token counts that are no multiple of anything (B = 1
 * L = 1, B = 3 L = 7, B * L odd), dim 1000 (5 groups of 200: 4 groups of
 * 250 are refused, d must be a multiple of 8), a group over several warps,
 * the shared weight, gate in x's layout, and the tiles `lingen tune`
 * sweeps (with and without prefetch). Fresh random inputs,
 * poisoned outputs, nothing left unwritten.
 * The backward's dw must be the same bits on a second launch
 * (deterministic; that launch through the typed launcher of
 * include/lingen.h, every output compared), and no tokens give dw = 0.
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

static lg_spec *parse(const char *pass, const char *keys)
{
	return lg_test_spec("group_rmsnorm_gate", pass, "bf16", keys);
}

/* One spec at batch B, seq L: every output within tolerance, nothing unwritten. */
static void check(const char *pass, const char *keys, int64_t B, int64_t L)
{
	lg_spec *s = parse(pass, keys);
	const int64_t sizes[2] = {B, L};
	struct lg_check_opts o = {.tokens = B * L, .sizes = sizes, .seed = seed + (uint64_t)(B * 7919 + L)};
	struct lg_check_result r;
	if (lg_check_kernel(ctx, s, &o, &r) != LG_OK)
		fail_msg("%s at %lld x %lld: %s", lg_spec_entry(s), (long long)B, (long long)L, lg_last_error());
	bool written = lg_test_written(&r, B * L == 0 || r.nmeasures > 0); /* at 0 tokens the forward has no output */
	printf("%s B=%lld L=%lld: %s\n", lg_spec_entry(s), (long long)B, (long long)L,
	       r.pass && written ? "PASS" : "FAIL");
	lg_test_print_measures(&r, 5);
	assert_true(r.pass);
	assert_true(written);
	lg_spec_free(s);
}

/* Forward and backward of one spec at each (B, L). */
static void both(const char *keys, const int64_t (*bl)[2], size_t n)
{
	for (size_t i = 0; i < n; i++) {
		check("forward", keys, bl[i][0], bl[i][1]);
		check("backward", keys, bl[i][0], bl[i][1]);
	}
}

static const int64_t odd[][2] = {{1, 1}, {3, 7}, {1, 8}, {2, 1}, {5, 333}, {1, 4097}};
#define NODD (sizeof odd / sizeof odd[0])

static void test_target(void **state)
{
	(void)state;
	static const int64_t bl[][2] = {{2, 4096}};
	both("\"dim\": 2048, \"groups\": 4", bl, 1);
	both("\"dim\": 2048, \"groups\": 4", odd, NODD);
}

static void test_shared_weight(void **state)
{
	(void)state;
	static const int64_t bl[][2] = {{2, 4096}};
	both("\"dim\": 2048, \"groups\": 4, \"shared_weight\": true", bl, 1);
	both("\"dim\": 2048, \"groups\": 4, \"shared_weight\": true", odd, NODD);
}

static void test_untransposed(void **state)
{
	(void)state;
	static const int64_t bl[][2] = {{2, 4096}};
	both("\"dim\": 2048, \"groups\": 4, \"transpose\": false", bl, 1);
	both("\"dim\": 2048, \"groups\": 4, \"transpose\": false", odd, NODD);
	both("\"dim\": 2048, \"groups\": 4, \"transpose\": false, \"shared_weight\": true", odd, NODD);
}

/* dim not a power of two: 5 groups of 200 (80 lanes a token), and 3 of 40. */
static void test_odd_dims(void **state)
{
	(void)state;
	both("\"dim\": 1000, \"groups\": 5", odd, NODD);
	both("\"dim\": 1000, \"groups\": 5, \"shared_weight\": true, \"transpose\": false", odd, NODD);
	both("\"dim\": 120, \"groups\": 3", odd, NODD);
	both("\"dim\": 1000, \"groups\": 1", odd, NODD);
}

/* Groups over several warps (64 to 1024 lanes), one unit per CTA, and a
 * backward that falls back from prefetch. */
static void test_wide_groups(void **state)
{
	(void)state;
	static const int64_t bl[][2] = {{1, 1}, {3, 7}, {2, 300}};
	both("\"dim\": 4096, \"groups\": 2", bl, 3);
	both("\"dim\": 16384, \"groups\": 1", bl, 3);
	both("\"dim\": 8192, \"groups\": 64", bl, 3);
	/* 16 groups of 2048: too wide to prefetch (16 x 128 lanes), 64 lanes a group without */
	both("\"dim\": 32768, \"groups\": 16", bl, 3);
}

/* The tiles of `lingen tune` (with and without prefetch), and persistent
 * loops that go round (more tokens than the grid holds). */
static void test_tiles(void **state)
{
	(void)state;
	static const int64_t bl[][2] = {{3, 7}, {1, 1}, {2, 4096}};
	for (int tpc = 1; tpc <= 8; tpc *= 2)
		for (size_t i = 0; i < 3; i++) {
			for (int pf = 0; pf < 2; pf++) {
				char keys[160];
				snprintf(keys, sizeof keys,
					 "\"dim\": 2048, \"groups\": 4, \"tile\": {\"tokens\": %d, \"prefetch\": %d}",
					 tpc, pf);
				check("forward", keys, bl[i][0], bl[i][1]);
				if (tpc < 8)
					check("backward", keys, bl[i][0], bl[i][1]);
			}
		}
	/* the other loop at odd shapes too: forward with, backward without prefetch */
	both("\"dim\": 1000, \"groups\": 5, \"tile\": {\"prefetch\": 1}", odd, NODD);
	for (size_t i = 0; i < NODD; i++)
		check("backward", "\"dim\": 1000, \"groups\": 5, \"tile\": {\"prefetch\": 0}", odd[i][0],
		      odd[i][1]);
}

/* The other forms of bench/grg-variants.json (fp64 r, pieces a lane,
 * CTAs an SM), at odd shapes and where the persistent loops go round. */
static void test_forms(void **state)
{
	(void)state;
	static const char *const forms[] = {
		"\"fsum\": 0", "\"pieces\": 1", "\"pieces\": 1, \"per_sm\": 3", "\"pieces\": 4, \"per_sm\": 2",
		"\"prefetch\": 0, \"pieces\": 4", "\"prefetch\": 0, \"pieces\": 1", "\"per_sm\": 3",
	};
	static const int64_t bl[][2] = {{2, 4096}};
	for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
		char keys[160];
		snprintf(keys, sizeof keys, "\"dim\": 2048, \"groups\": 4, \"tile\": {%s}", forms[i]);
		both(keys, bl, 1);
		both(keys, odd, NODD);
		snprintf(keys, sizeof keys, "\"dim\": 1000, \"groups\": 5, \"shared_weight\": true, \"tile\": {%s}",
			 forms[i]);
		both(keys, odd, NODD);
	}
}

/* Launch case g of kernel k through its typed launcher (include/lingen.h). */
static lg_status launch_typed(const struct lg_gpu_case *g, const lg_kernel *k, bool bwd)
{
	const lg_dptr *a = g->ptrs;
	int64_t B = g->ref.sizes[0], L = g->ref.sizes[1];
	if (!bwd)
		return lg_group_rmsnorm_gate_forward(k, NULL, B, L, a[0], a[1], a[2], a[3]);
	return lg_group_rmsnorm_gate_backward(k, NULL, B, L, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
}

/* One spec at B x L: the generic launch, then (outputs poisoned) the typed
 * launcher; every output (the backward's dw included) the same bits. */
static void check_same_bits(const char *pass, const char *keys, int64_t B, int64_t L)
{
	lg_spec *s = parse(pass, keys);
	lg_kernel *k = NULL;
	if (lg_kernel_get(ctx, s, &k) != LG_OK)
		fail_msg("%s", lg_last_error());
	const int64_t sizes[2] = {B, L};
	struct lg_gpu_case g;
	if (lg_gpu_case_init(&g, s, 0, sizes, seed, k) != LG_OK)
		fail_msg("%s", lg_last_error());
	void *first[LG_MAX_ARGS] = {0};
	assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
	assert_int_equal(lg_gpu_case_launch(&g, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	int outputs = 0;
	for (int i = 0; i < g.ref.n; i++)
		if (g.ref.buf[i].output && g.got[i]) {
			size_t bytes = g.ref.buf[i].count * g.ref.buf[i].elem;
			first[i] = malloc(bytes);
			assert_non_null(first[i]);
			memcpy(first[i], g.got[i], bytes);
			outputs++;
		}
	assert_int_equal(outputs, strcmp(pass, "backward") == 0 ? 3 : 1); /* dx, dgate, dw; y */
	assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
	if (launch_typed(&g, k, strcmp(pass, "backward") == 0) != LG_OK)
		fail_msg("%s: %s", lg_spec_entry(s), lg_last_error());
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	for (int i = 0; i < g.ref.n; i++)
		if (first[i]) {
			if (memcmp(first[i], g.got[i], g.ref.buf[i].count * g.ref.buf[i].elem) != 0)
				fail_msg("%s B=%lld L=%lld: %s differs between two launches", lg_spec_entry(s),
					 (long long)B, (long long)L, g.ref.buf[i].name);
			free(first[i]);
		}
	printf("%s B=%lld L=%lld: typed launch, same bits: PASS\n", lg_spec_entry(s), (long long)B, (long long)L);
	lg_gpu_case_free(&g);
	lg_spec_free(s);
}

/* The backward's dw (and every other output): the same bits on a second
 * launch, that one through the typed launcher; the forward's y likewise. */
static void test_dw_deterministic(void **state)
{
	(void)state;
	check_same_bits("backward", "\"dim\": 2048, \"groups\": 4", 2, 4096);
	check_same_bits("backward", "\"dim\": 1000, \"groups\": 5, \"shared_weight\": true", 3, 7);
	check_same_bits("forward", "\"dim\": 2048, \"groups\": 4", 2, 4096);
	check_same_bits("forward", "\"dim\": 1000, \"groups\": 5, \"transpose\": false", 5, 333);
}

/* No tokens: the rows kernel is not launched, dw is written as 0. */
static void test_no_tokens(void **state)
{
	(void)state;
	static const int64_t bl[][2] = {{0, 5}, {3, 0}};
	both("\"dim\": 2048, \"groups\": 4", bl, 2);
}

int main(void)
{
	lg_test_require_gpu("gpu_test_group_rmsnorm_gate");
	seed = lg_test_seed("gpu_test_group_rmsnorm_gate");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_target),
		cmocka_unit_test(test_shared_weight),
		cmocka_unit_test(test_untransposed),
		cmocka_unit_test(test_odd_dims),
		cmocka_unit_test(test_wide_groups),
		cmocka_unit_test(test_tiles),
		cmocka_unit_test(test_forms),
		cmocka_unit_test(test_dw_deterministic),
		cmocka_unit_test(test_no_tokens),
	};
	return LG_TEST_RUN_GPU(tests, &ctx);
}
