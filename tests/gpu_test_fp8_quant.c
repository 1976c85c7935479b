/*
 * gpu_test_fp8_quant.c - the blockwise FP8 quantiser (family fp8_quant,
 * KERNELS.md 1.3) on the GPU against the CPU reference (label "gpu"): every
 * output mode, with and without power-of-two scales, at tokens 1, 127, 128,
 * 8191 and 8192 and hidden 128, 384, 2048 and 7168, and the 512-thread tile
 * at a few of them, and the quant engine's fp32 path (tile.values 32). The quantiser's arithmetic is exactly reproducible (y
 * is the bf16 input itself), so scales and e4m3 payloads must be equal bit
 * for bit, and nothing may be left unwritten. Fresh random inputs, poisoned
 * outputs. Also: no tokens launch nothing.
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
#include "harness.h"
#include "testutil.h"

static lg_ctx *ctx;
static uint64_t seed;

static int setup(void **state)
{
	(void)state;
	return lg_test_gpu_ctx(&ctx);
}

static int teardown(void **state)
{
	(void)state;
	lg_ctx_destroy(ctx);
	return 0;
}

/* One spec at one token count: every output bit-exact, nothing unwritten. */
static void check(const char *json, int64_t tokens)
{
	lg_spec *s = NULL;
	if (lg_spec_parse(json, &s) != LG_OK)
		fail_msg("%s", lg_last_error());
	struct lg_check_opts o = {.tokens = tokens, .seed = seed + (uint64_t)tokens};
	struct lg_check_result r;
	if (lg_check_kernel(ctx, s, &o, &r) != LG_OK)
		fail_msg("%s x %lld: %s", lg_spec_entry(s), (long long)tokens, lg_last_error());
	bool exact = r.nmeasures > 0;
	for (int i = 0; i < r.nmeasures; i++)
		exact = exact && r.m[i].mismatches == 0 && r.m[i].unwritten == 0;
	printf("%s M=%lld: %s\n", lg_spec_entry(s), (long long)tokens, r.pass && exact ? "PASS" : "FAIL");
	for (int i = 0; i < r.nmeasures; i++)
		printf("  %-3s %-5s n=%llu equal=%.9f mismatches=%llu unwritten=%llu %s\n", r.m[i].name, r.m[i].kind,
		       (unsigned long long)r.m[i].count, r.m[i].equal_frac, (unsigned long long)r.m[i].mismatches,
		       (unsigned long long)r.m[i].unwritten, r.m[i].pass ? "ok" : "FAIL");
	assert_true(r.pass);
	assert_true(exact);
	lg_spec_free(s);
}

static const char *const outputs[] = {"both", "rowwise", "columnwise"};
static const int64_t tokens[] = {1, 127, 128, 8191, 8192};

/* Every output x round_scale x token count at one hidden size. */
static void sweep(int hidden, const char *tile)
{
	for (size_t o = 0; o < 3; o++)
		for (int pow2 = 1; pow2 >= 0; pow2--) {
			char json[512];
			snprintf(json, sizeof json,
				 "{\"op\": \"fp8_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": %d, "
				 "\"quant\": {\"round_scale\": %s, \"output\": \"%s\"}%s}",
				 hidden, pow2 ? "true" : "false", outputs[o], tile);
			for (size_t t = 0; t < sizeof tokens / sizeof tokens[0]; t++)
				check(json, tokens[t]);
		}
}

static void test_h128(void **state) { (void)state; sweep(128, ""); }
static void test_h384(void **state) { (void)state; sweep(384, ""); }
static void test_h2048(void **state) { (void)state; sweep(2048, ""); }
static void test_h7168(void **state) { (void)state; sweep(7168, ""); }

/* The other tile of `lingen tune`: 512 threads, 4 tokens a thread. */
static void test_threads512(void **state)
{
	(void)state;
	sweep(384, ", \"tile\": {\"threads\": 512}");
	sweep(2048, ", \"tile\": {\"threads\": 512}");
}

/* The quant engine's fp32 path (values 32): the same bytes. */
static void test_values32(void **state)
{
	(void)state;
	sweep(384, ", \"tile\": {\"values\": 32}");
	sweep(2048, ", \"tile\": {\"values\": 32}");
	sweep(2048, ", \"tile\": {\"values\": 32, \"threads\": 256}");
}

/* No tokens: a zero grid, nothing launched, the pointers never touched. */
static void test_no_tokens(void **state)
{
	(void)state;
	lg_spec *s = NULL;
	assert_int_equal(lg_spec_parse("{\"op\": \"fp8_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
				       "\"hidden\": 2048, \"quant\": {}}",
				       &s),
			 LG_OK);
	lg_kernel *k = NULL;
	if (lg_kernel_get(ctx, s, &k) != LG_OK)
		fail_msg("%s", lg_last_error());
	const lg_dptr ptrs[5] = {256, 256, 256, 256, 256}; /* aligned, never dereferenced */
	const int64_t none = 0;
	if (lg_kernel_run(k, NULL, &none, 1, ptrs, 5) != LG_OK)
		fail_msg("%s", lg_last_error());
	lg_spec_free(s);
}

int main(void)
{
	lg_test_require_gpu("gpu_test_fp8_quant");
	seed = lg_test_seed("gpu_test_fp8_quant");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_tokens),
		cmocka_unit_test(test_h128),
		cmocka_unit_test(test_h384),
		cmocka_unit_test(test_h2048),
		cmocka_unit_test(test_h7168),
		cmocka_unit_test(test_threads512),
		cmocka_unit_test(test_values32),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
