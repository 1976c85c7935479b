/*
 * gpu_test_qk_norm_rope.c - split + q/k RMSNorm + RoPE (family
 * qk_norm_rope, docs/kernels.md K2) on the GPU against the CPU reference (label
 * "gpu"), forward and backward: the target shape (S 4096, B 2, H 16, h 4,
 * D 128) and odd ones: S = B = 1; S 7, B 3, H 12, h 4, D 64 (3 q heads a
 * group); D 256 with H 40, h 8; rotary fraction 1 and 0.25; SiLU; the
 * [B, S] order; plain heads; other tiles; packed sequences (varlen), context
 * parallel, mscale, 600 sequences; no tokens (the weight gradients written
 * as 0); a fixed batch of 600, and seq x batch >= 2^31 refused at launch.
 * Tolerances as the reference describes them (about one bf16 ulp; the weight
 * gradients relative); nothing may be left unwritten. Fresh random inputs,
 * poisoned outputs. The typed launchers of include/lingen.h give the same
 * bits as the generic launch, and a second backward the same bits as the
 * first (deterministic dq_weight, dk_weight).
 * Exits with LG_TEST_SKIP (ctest: skipped), saying why, when there is no
 * CUDA device or driver; random inputs print their seed (LINGEN_SEED replays).
 * Since issue 37 the cases that are one lg_check_kernel each (every spec
 * and size above checked against the reference alone) are data: tests/cases/
 * qk_norm_rope.json, run by gpu_test_families; what stays here is
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

/* One spec (keys after op, pass, dtype) at seq x batch, passes `first` to
 * `last` (0: forward, 1: backward). */
static void check_passes(int first, int last, const char *keys, int64_t seq, int64_t batch)
{
	static const char *const passes[] = {"forward", "backward"};
	for (int p = first; p <= last; p++) {
		char json[768];
		snprintf(json, sizeof json, "{\"op\": \"qk_norm_rope\", \"pass\": \"%s\", \"dtype\": \"bf16\", %s}",
			 passes[p], keys);
		lg_spec *s = NULL;
		if (lg_spec_parse(json, &s) != LG_OK)
			fail_msg("%s", lg_last_error());
		const int64_t sizes[2] = {seq, batch};
		struct lg_check_opts o = {.tokens = seq, .seed = seed + (uint64_t)(seq * 1000 + batch), .sizes = sizes};
		struct lg_check_result r;
		if (lg_check_kernel(ctx, s, &o, &r) != LG_OK)
			fail_msg("%s S=%lld B=%lld: %s", lg_spec_entry(s), (long long)seq, (long long)batch,
				 lg_last_error());
		bool written = lg_test_written(&r, r.nmeasures > 0);
		printf("%s S=%lld B=%lld: %s\n", lg_spec_entry(s), (long long)seq, (long long)batch,
		       r.pass && written ? "PASS" : "FAIL");
		lg_test_print_measures(&r, 9);
		assert_true(r.pass);
		assert_true(written);
		lg_spec_free(s);
	}
}

static void check(const char *keys, int64_t seq, int64_t batch) { check_passes(0, 1, keys, seq, batch); }

#define TARGET "\"head_dim\": 128, \"q_heads\": 16, \"kv_heads\": 4"

/* A batch over 511 (the old bound) in the fixed form; seq x batch of 2^31
 * or more is refused at launch, naming both, before any pointer is read. */
static void test_sizes(void **state)
{
	(void)state;
	check("\"head_dim\": 64, \"q_heads\": 12, \"kv_heads\": 4", 3, 600);
	lg_spec *s = NULL;
	if (lg_spec_parse("{\"op\": \"qk_norm_rope\", \"pass\": \"forward\", \"dtype\": \"bf16\", " TARGET "}",
			  &s) != LG_OK)
		fail_msg("%s", lg_last_error());
	lg_kernel *k = NULL;
	if (lg_kernel_get(ctx, s, &k) != LG_OK)
		fail_msg("%s", lg_last_error());
	assert_int_equal(lg_qk_norm_rope_forward(k, NULL, 1 << 22, 512, 0, 0, 0, 0, 0, 0, 0, 0), LG_ERR_INVALID_ARG);
	assert_non_null(strstr(lg_last_error(), "seq x batch = 4194304 x 512, allowed: a product below 2^31"));
	lg_spec_free(s);
}

/* Launch case g of kernel k through its typed launcher (include/lingen.h). */
static lg_status launch_typed(const struct lg_gpu_case *g, const lg_kernel *k, bool bwd)
{
	const lg_dptr *a = g->ptrs;
	int64_t S = g->ref.sizes[0], B = g->ref.sizes[1];
	if (!bwd)
		return lg_qk_norm_rope_forward(k, NULL, S, B, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
	return lg_qk_norm_rope_backward(k, NULL, S, B, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9],
					a[10], a[11]);
}

/* One spec at seq x batch: the generic launch, then (outputs poisoned) the
 * typed launcher; every output the same bits both times (the backward's
 * dq_weight, dk_weight: deterministic). */
static void check_same_bits(const char *pass, const char *keys, int64_t seq, int64_t batch)
{
	lg_spec *s = lg_test_spec("qk_norm_rope", pass, "bf16", keys);
	lg_kernel *k = NULL;
	if (lg_kernel_get(ctx, s, &k) != LG_OK)
		fail_msg("%s", lg_last_error());
	const int64_t sizes[2] = {seq, batch};
	struct lg_gpu_case g;
	if (lg_gpu_case_init(&g, s, 0, sizes, seed + 17, k) != LG_OK)
		fail_msg("%s", lg_last_error());
	void *first[LG_MAX_ARGS] = {0};
	assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
	assert_int_equal(lg_gpu_case_launch(&g, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	for (int i = 0; i < g.ref.n; i++)
		if (g.ref.buf[i].output && g.got[i]) {
			size_t bytes = g.ref.buf[i].count * g.ref.buf[i].elem;
			first[i] = malloc(bytes);
			assert_non_null(first[i]);
			memcpy(first[i], g.got[i], bytes);
		}
	assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
	if (launch_typed(&g, k, strcmp(pass, "backward") == 0) != LG_OK)
		fail_msg("%s: %s", lg_spec_entry(s), lg_last_error());
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	int outputs = 0;
	for (int i = 0; i < g.ref.n; i++)
		if (first[i]) {
			if (memcmp(first[i], g.got[i], g.ref.buf[i].count * g.ref.buf[i].elem) != 0)
				fail_msg("%s S=%lld B=%lld: output %d differs between two launches", lg_spec_entry(s),
					 (long long)seq, (long long)batch, i);
			free(first[i]);
			outputs++;
		}
	assert_int_equal(outputs, 3); /* q, k, v; dqkv, dq_weight, dk_weight */
	printf("%s S=%lld B=%lld: typed launch, same bits: PASS\n", lg_spec_entry(s), (long long)seq,
	       (long long)batch);
	lg_gpu_case_free(&g);
	lg_spec_free(s);
}

static void test_typed_deterministic(void **state)
{
	(void)state;
	static const char *const passes[] = {"forward", "backward"};
	for (int p = 0; p < 2; p++) {
		check_same_bits(passes[p], TARGET, 4096, 2);
		check_same_bits(passes[p], "\"head_dim\": 64, \"q_heads\": 12, \"kv_heads\": 4", 7, 3);
		check_same_bits(passes[p], TARGET ", \"varlen\": true, \"mscale\": 0.75", 1000, 9);
	}
}

int main(void)
{
	lg_test_require_gpu("gpu_test_qk_norm_rope");
	seed = lg_test_seed("gpu_test_qk_norm_rope");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_typed_deterministic), cmocka_unit_test(test_sizes),
	};
	return LG_TEST_RUN_GPU(tests, &ctx);
}
