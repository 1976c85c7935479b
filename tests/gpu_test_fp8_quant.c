/*
 * gpu_test_fp8_quant.c - the FP8 quantisers on the quant engine (families
 * fp8_quant, fp8_quant_batched and fp8_quant_weight, docs/kernels.md 1.3) on
 * the GPU against the CPU reference (label "gpu").
 * fp8_quant: every output mode, with and without power-of-two scales, at
 * tokens 1, 127, 128, 8191 and 8192 and hidden 128, 384, 2048 and 7168,
 * the 512-thread tile at a few of them, and the engine's fp32 path
 * (tile.values 32).
 * fp8_quant_batched (per expert): every output mode, both scale kinds, at
 * the target shape (65536 tokens x 1024, 256 experts) and odd ones: one
 * token, expert counts of 0, 1, 127, 128, 129 and random sizes (the
 * reference's fill; counts summing to the tokens), experts not a power of
 * two (3, 96, 160) and more experts than threads (1000: the block scan
 * over several steps), every tile option (threads, fblocks, fp32 path).
 * Also counts that do not sum to the tokens (fewer: a capacity; more: the
 * expert that overruns is not written), one expert, none.
 * fp8_quant_weight: 128 x 128 tiles at 2048 x 2048 and odd row counts.
 * The quantisers' arithmetic is exactly reproducible (the values are the
 * bf16 input), so scales and e4m3 payloads must be equal bit for bit and
 * nothing may be left unwritten (the per-expert reference leaves the st
 * rows past the last expert as the harness's poison, as the kernel must).
 * Fresh random inputs, poisoned outputs. Also: no tokens launch nothing.
 * Exits with LG_TEST_SKIP (ctest: skipped), saying why, when there is no
 * CUDA device or driver; random inputs print their seed (LINGEN_SEED replays).
 * Since issue 37 the cases that are one lg_check_kernel each (every spec
 * and size above checked against the reference alone) are data: tests/cases/
 * fp8_quant, fp8_quant_batched and fp8_quant_weight.json, run by gpu_test_families; what stays here is
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
#include "harness.h"
#include "ref.h"
#include "testutil.h"

static lg_ctx *ctx;
static uint64_t seed;

static const char *const outputs[] = {"both", "rowwise", "columnwise"};

/* Kernel json launched with run-time sizes `zero` (no tokens, or no rows)
 * on real buffers of a case at `sizes`, outputs poisoned: it returns LG_OK,
 * and after a synchronise every output byte is still the poison (nothing
 * written). */
static void expect_nothing_written(const char *json, const int64_t *sizes, const int64_t *zero, int nsizes)
{
	lg_spec *s = NULL;
	if (lg_spec_parse(json, &s) != LG_OK)
		fail_msg("%s", lg_last_error());
	lg_kernel *k = NULL;
	if (lg_kernel_get(ctx, s, &k) != LG_OK)
		fail_msg("%s", lg_last_error());
	struct lg_gpu_case g;
	if (lg_gpu_case_init(&g, s, sizes[0], nsizes > 1 ? sizes : NULL, seed, k) != LG_OK)
		fail_msg("%s", lg_last_error());
	assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
	if (lg_kernel_run(k, NULL, zero, nsizes, g.ptrs, g.ref.n) != LG_OK)
		fail_msg("%s", lg_last_error());
	assert_int_equal(g.cu->cuCtxSynchronize(), CUDA_SUCCESS);
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	size_t checked = 0;
	for (int i = 0; i < g.ref.n; i++) {
		const struct lg_ref_buf *b = &g.ref.buf[i];
		size_t n = b->count * b->elem;
		const uint8_t *got = g.got[i];
		if (!b->output || !n || !got)
			continue;
		checked++;
		for (size_t j = 0; j < n; j++)
			if (got[j] != 0xff)
				fail_msg("%s with no tokens wrote %s byte %zu (0x%02x)", lg_spec_entry(s), b->name, j, got[j]);
	}
	printf("%s at sizes 0: %zu outputs untouched\n", lg_spec_entry(s), checked);
	assert_true(checked > 0);
	lg_gpu_case_free(&g);
	lg_spec_free(s);
}

/* No tokens: a zero grid, nothing launched, nothing written. */
static void test_no_tokens(void **state)
{
	(void)state;
	const int64_t some[2] = {256, 4}, zero[2] = {0, 0};
	expect_nothing_written("{\"op\": \"fp8_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
			       "\"hidden\": 2048, \"quant\": {}}", some, zero, 1);
	/* a weight of no rows likewise */
	expect_nothing_written("{\"op\": \"fp8_quant_weight\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
			       "\"hidden\": 2048, \"quant\": {}}", some, zero, 1);
}

/* ---------------------------------- per expert (fp8_quant_batched) */

/* No tokens (4 experts): nothing launched, nothing written. */
static void test_batched_no_tokens(void **state)
{
	(void)state;
	const int64_t some[2] = {256, 4}, zero_tokens[2] = {0, 4};
	expect_nothing_written("{\"op\": \"fp8_quant_batched\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
			       "\"hidden\": 1024, \"quant\": {}}", some, zero_tokens, 2);
}

/* Counts the reference's fill never gives: summing to less than the tokens
 * (a capacity: the tokens past the sum neither read nor written), past
 * them (the expert that overruns and those after it not written at all,
 * nothing stored out of bounds), one expert of every token, every expert
 * empty. The case's counts are replaced and uploaded, the reference run on
 * them; every output bit-exact, the unwritten regions still poison. */
static void test_batched_counts(void **state)
{
	(void)state;
	enum { E = 5 };
	static const int32_t counts[][E] = {
		{0, 129, 300, 1, 200},   /* 630 of 1000 */
		{129, 500, 600, 1, 0},   /* 1230: expert 2 runs past the 1000 tokens */
		{1000, 0, 0, 0, 0},      /* one expert */
		{0, 0, 0, 0, 0},         /* nothing */
		{128, 128, 128, 128, 0}, /* whole tiles, 512 of 1000 */
	};
	static const char *const tiles[] = {"", ", \"tile\": {\"fblocks\": 2}",
					    ", \"tile\": {\"values\": 32, \"threads\": 256}",
					    ", \"tile\": {\"tiles\": 2}", ", \"tile\": {\"tiles\": 8, \"fblocks\": 2}"};
	for (size_t t = 0; t < sizeof tiles / sizeof tiles[0]; t++)
		for (int pow2 = 1; pow2 >= 0; pow2--)
			for (size_t o = 0; o < 3; o++) {
				char json[512];
				snprintf(json, sizeof json,
					 "{\"op\": \"fp8_quant_batched\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
					 "\"hidden\": 384, \"quant\": {\"round_scale\": %s, \"output\": \"%s\"}%s}",
					 pow2 ? "true" : "false", outputs[o], tiles[t]);
				lg_spec *s = NULL;
				if (lg_spec_parse(json, &s) != LG_OK)
					fail_msg("%s", lg_last_error());
				lg_kernel *k = NULL;
				if (lg_kernel_get(ctx, s, &k) != LG_OK)
					fail_msg("%s", lg_last_error());
				for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
					const int64_t sizes[2] = {1000, E};
					struct lg_gpu_case g;
					if (lg_gpu_case_init(&g, s, 0, sizes, seed + c, k) != LG_OK)
						fail_msg("%s", lg_last_error());
					memcpy(g.ref.buf[1].host, counts[c], sizeof counts[c]); /* counts: argument 1 */
					assert_int_equal(g.cu->cuMemcpyHtoD(g.dev[1], counts[c], sizeof counts[c]),
							 CUDA_SUCCESS);
					assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
					assert_int_equal(lg_gpu_case_launch(&g, k, NULL), LG_OK);
					assert_int_equal(lg_gpu_case_download(&g), LG_OK);
					struct lg_check_result r;
					lg_gpu_case_check(&g, s, NULL, 5, stdout, &r);
					bool ok = r.pass;
					for (int i = 0; i < r.nmeasures; i++)
						ok = ok && r.m[i].mismatches == 0 && r.m[i].unwritten == 0;
					printf("%s counts %d %d %d %d %d: %s\n", lg_spec_entry(s), counts[c][0], counts[c][1],
					       counts[c][2], counts[c][3], counts[c][4], ok ? "PASS" : "FAIL");
					assert_true(ok);
					lg_gpu_case_free(&g);
				}
				lg_spec_free(s);
			}
}

/* ------------------------------------------ weights (fp8_quant_weight) */

int main(void)
{
	lg_test_require_gpu("gpu_test_fp8_quant");
	seed = lg_test_seed("gpu_test_fp8_quant");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_tokens),
		cmocka_unit_test(test_batched_no_tokens),
		cmocka_unit_test(test_batched_counts),
	};
	return LG_TEST_RUN_GPU(tests, &ctx);
}
