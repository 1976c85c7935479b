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
 * Since issue 37 the cases that are one lg_check_kernel each (every spec
 * and size above checked against the reference alone) are data: tests/cases/
 * group_rmsnorm_gate.json, run by gpu_test_families; what stays here is
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

static lg_spec *parse(const char *pass, const char *keys)
{
	return lg_test_spec("group_rmsnorm_gate", pass, "bf16", keys);
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

int main(void)
{
	lg_test_require_gpu("gpu_test_group_rmsnorm_gate");
	seed = lg_test_seed("gpu_test_group_rmsnorm_gate");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dw_deterministic),
	};
	return LG_TEST_RUN_GPU(tests, &ctx);
}
