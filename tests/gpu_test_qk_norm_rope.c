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

static void test_target(void **state)
{
	(void)state;
	check(TARGET, 4096, 2);
}

static void test_one_token(void **state)
{
	(void)state;
	check(TARGET, 1, 1);
	check("\"head_dim\": 64, \"q_heads\": 12, \"kv_heads\": 4", 1, 1);
}

/* H / h = 3, D 64, odd S and B (a partial last group of tokens); 28 / 4,
 * 32 / 4; 15 / 5 (h odd). */
static void test_odd(void **state)
{
	(void)state;
	check("\"head_dim\": 64, \"q_heads\": 12, \"kv_heads\": 4", 7, 3);
	check("\"head_dim\": 128, \"q_heads\": 28, \"kv_heads\": 4", 33, 5);
	check("\"head_dim\": 128, \"q_heads\": 32, \"kv_heads\": 4", 129, 1);
	/* kv heads not a power of two (5 groups of 3 q heads), plain heads too */
	check("\"head_dim\": 128, \"q_heads\": 15, \"kv_heads\": 5", 9, 2);
	check("\"head_dim\": 64, \"q_heads\": 15, \"kv_heads\": 5, \"head_layout\": \"plain\"", 9, 2);
}

static void test_d256(void **state)
{
	(void)state;
	check("\"head_dim\": 256, \"q_heads\": 40, \"kv_heads\": 8", 37, 2);
	check("\"head_dim\": 256, \"q_heads\": 16, \"kv_heads\": 4", 512, 2);
}

static void test_rotary(void **state)
{
	(void)state;
	check(TARGET ", \"rotary_fraction\": 1", 257, 2);
	check(TARGET ", \"rotary_fraction\": 0.25", 257, 2);
	check("\"head_dim\": 64, \"q_heads\": 12, \"kv_heads\": 4, \"rotary_fraction\": 1", 7, 3);
}

static void test_silu(void **state)
{
	(void)state;
	check(TARGET ", \"silu\": true", 300, 2);
	check("\"head_dim\": 64, \"q_heads\": 12, \"kv_heads\": 4, \"silu\": true", 7, 3);
}

static void test_layouts(void **state)
{
	(void)state;
	check(TARGET ", \"qkv_order\": \"batch_seq\"", 300, 3);
	check(TARGET ", \"head_layout\": \"plain\"", 300, 3);
	check("\"head_dim\": 64, \"q_heads\": 12, \"kv_heads\": 4, \"qkv_order\": \"batch_seq\", "
	      "\"head_layout\": \"plain\", \"silu\": true, \"rotary_fraction\": 1",
	      7, 3);
}

/* Other tiles: 1, 2 and 8 tokens at a time, 128, 256 and 512 threads (512:
 * the forward only), the backward's grid, min_ctas. */
static void test_tiles(void **state)
{
	(void)state;
	check(TARGET ", \"tile\": {\"tokens\": 1, \"threads\": 128}", 301, 2);
	check_passes(0, 0, TARGET ", \"tile\": {\"tokens\": 8, \"threads\": 512}", 301, 2); /* forward only */
	check(TARGET ", \"tile\": {\"tokens\": 8, \"threads\": 256}", 301, 2);
	check(TARGET ", \"tile\": {\"tokens\": 2, \"threads\": 128}", 33, 3);
	check_passes(1, 1, TARGET ", \"tile\": {\"ctas\": 1056, \"min_ctas\": 4}", 4096, 2); /* the backward's grid */
	check_passes(1, 1, TARGET ", \"tile\": {\"ctas\": 264, \"min_ctas\": 2}", 33, 3);
	/* registers capped for 3 and 4 CTAs an SM (tile.min_ctas; 4 spills) */
	check(TARGET ", \"tile\": {\"min_ctas\": 3}", 4096, 2);
	check(TARGET ", \"tile\": {\"min_ctas\": 4}", 301, 3);
	check_passes(0, 0, "\"head_dim\": 256, \"q_heads\": 12, \"kv_heads\": 4, \"tile\": {\"tokens\": 8, "
		     "\"threads\": 512}", 31, 3);
	check("\"head_dim\": 256, \"q_heads\": 12, \"kv_heads\": 4, \"tile\": {\"tokens\": 8, \"threads\": 128}",
	      31, 3);
}

/* Where the loads are issued: without prefetch (the loads after the
 * table), batches of 1, 2 and 4 rounds with prefetch 1 and 2 (the
 * backward's k | v heads before the table too), H/h = 3 (q heads in two
 * batches), a varlen form. */
static void test_prefetch(void **state)
{
	(void)state;
	check(TARGET ", \"tile\": {\"prefetch\": 0}", 301, 3);
	check(TARGET ", \"tile\": {\"batch\": 1}", 33, 3);
	check(TARGET ", \"tile\": {\"batch\": 4}", 301, 2);
	check_passes(1, 1, TARGET ", \"tile\": {\"prefetch\": 2, \"batch\": 2, \"ctas\": 264, \"min_ctas\": 2}",
		     301, 3);
	check_passes(1, 1, TARGET ", \"tile\": {\"prefetch\": 2, \"batch\": 2, \"tokens\": 2, \"threads\": 128, "
		     "\"ctas\": 528, \"min_ctas\": 4}", 33, 3);
	check("\"head_dim\": 64, \"q_heads\": 12, \"kv_heads\": 4, \"tile\": {\"prefetch\": 2, \"tokens\": 1}",
	      31, 3);
	check("\"head_dim\": 128, \"q_heads\": 32, \"kv_heads\": 4, \"rotary_fraction\": 1, "
	      "\"tile\": {\"prefetch\": 2}", 300, 3);
}

/* K2b: packed sequences (seq = T tokens, batch = sequences: random lengths
 * from the reference, some empty), context parallel ranks, mscale; the
 * target head shape at 8192 tokens in 4 sequences too. */
static void test_varlen(void **state)
{
	(void)state;
	check(TARGET ", \"varlen\": true", 8192, 4);
	check(TARGET ", \"varlen\": true", 1, 1);
	check(TARGET ", \"varlen\": true", 77, 0); /* no sequences: one from 0 */
	check(TARGET ", \"varlen\": true, \"mscale\": 0.75", 1000, 9);
	check("\"head_dim\": 64, \"q_heads\": 12, \"kv_heads\": 4, \"varlen\": true, \"cp_size\": 2, "
	      "\"cp_rank\": 1",
	      301, 7);
	check(TARGET ", \"varlen\": true, \"cp_size\": 4, \"cp_rank\": 2, \"silu\": true", 513, 3);
	check(TARGET ", \"cp_size\": 2, \"cp_rank\": 0", 64, 2); /* fixed length, context parallel */
	check(TARGET ", \"varlen\": true", 3000, 600); /* more sequences than 511 (the old bound) */
}

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

/* No tokens (fixed S = 0, or B = 0): the backward still writes dq_weight
 * and dk_weight (as 0); the forward launches nothing. */
static void test_no_tokens(void **state)
{
	(void)state;
	check_passes(1, 1, TARGET, 0, 2);
	check_passes(1, 1, TARGET, 5, 0);
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
		cmocka_unit_test(test_one_token), cmocka_unit_test(test_odd),    cmocka_unit_test(test_target),
		cmocka_unit_test(test_d256),      cmocka_unit_test(test_rotary), cmocka_unit_test(test_silu),
		cmocka_unit_test(test_layouts),   cmocka_unit_test(test_tiles),  cmocka_unit_test(test_prefetch),
		cmocka_unit_test(test_varlen),    cmocka_unit_test(test_no_tokens),
		cmocka_unit_test(test_typed_deterministic), cmocka_unit_test(test_sizes),
	};
	return LG_TEST_RUN_GPU(tests, &ctx);
}
