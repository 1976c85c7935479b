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

/* One spec at one size pair: every output bit-exact, nothing unwritten. */
static void check(const char *json, int64_t tokens, int64_t experts)
{
	lg_spec *s = NULL;
	if (lg_spec_parse(json, &s) != LG_OK)
		fail_msg("%s", lg_last_error());
	const int64_t sizes[2] = {tokens, experts};
	struct lg_check_opts o = {.tokens = tokens, .sizes = experts ? sizes : NULL,
				  .seed = seed + (uint64_t)tokens * 7919u + (uint64_t)experts};
	struct lg_check_result r;
	if (lg_check_kernel(ctx, s, &o, &r) != LG_OK)
		fail_msg("%s x %lld, %lld: %s", lg_spec_entry(s), (long long)tokens, (long long)experts,
			 lg_last_error());
	bool exact = r.nmeasures > 0;
	for (int i = 0; i < r.nmeasures; i++)
		exact = exact && r.m[i].mismatches == 0 && r.m[i].unwritten == 0;
	printf("%s M=%lld E=%lld: %s\n", lg_spec_entry(s), (long long)tokens, (long long)experts,
	       r.pass && exact ? "PASS" : "FAIL");
	for (int i = 0; i < r.nmeasures; i++)
		printf("  %-6s %-5s n=%llu equal=%.9f mismatches=%llu unwritten=%llu %s\n", r.m[i].name, r.m[i].kind,
		       (unsigned long long)r.m[i].count, r.m[i].equal_frac, (unsigned long long)r.m[i].mismatches,
		       (unsigned long long)r.m[i].unwritten, r.m[i].pass ? "ok" : "FAIL");
	assert_true(r.pass);
	assert_true(exact);
	lg_spec_free(s);
}

/* A family of one run-time size at tokens. */
static void check1(const char *json, int64_t tokens)
{
	check(json, tokens, 0);
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
				check1(json, tokens[t]);
		}
}

/* The columnwise copy's pitch at the wgrad's odd counts (1, 15, 17, 9973
 * tokens): qt [hidden, round_up(tokens, 16)], the tail zeros (the
 * reference's), written at every launch over the harness's poison. */
static void test_qt_pitch(void **state)
{
	(void)state;
	static const int64_t odd[] = {1, 15, 17, 9973};
	for (size_t o = 0; o < 3; o += 2) /* both, columnwise */
		for (size_t t = 0; t < sizeof odd / sizeof odd[0]; t++) {
			char json[512];
			snprintf(json, sizeof json,
				 "{\"op\": \"fp8_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
				 "\"quant\": {\"output\": \"%s\"}}", outputs[o]);
			check1(json, odd[t]);
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

/* Both qt stores (tile.qt_store 2, the default: whole 16-byte stores of
 * the pitched lines; 1, the former store, each piece tested) at token
 * counts of every residue mod 16 and 32 (qt [256, round_up(tokens, 16)]:
 * tiles short by every count, the zero tail of every length, written over
 * the harness's 0xff poison), and the former at every output of hidden
 * 384. */
static void test_qt_store(void **state)
{
	(void)state;
	for (int st = 2; st >= 1; st--)
		for (int pow2 = 1; pow2 >= 0; pow2--) {
			char json[512];
			snprintf(json, sizeof json,
				 "{\"op\": \"fp8_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 256, "
				 "\"quant\": {\"round_scale\": %s, \"output\": \"columnwise\"}, \"tile\": {\"qt_store\": %d}}",
				 pow2 ? "true" : "false", st);
			for (int64_t t = 232; t < 264; t++)
				check1(json, t);
		}
	sweep(384, ", \"tile\": {\"qt_store\": 1}");
}

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

/* Every output mode (tile options: both copies only) x both scale kinds. */
static void batched(int hidden, const char *tile, const int64_t (*cases)[2], size_t ncases)
{
	for (size_t o = 0; o < (*tile ? 1u : 3u); o++)
		for (int pow2 = 1; pow2 >= 0; pow2--) {
			char json[512];
			snprintf(json, sizeof json,
				 "{\"op\": \"fp8_quant_batched\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
				 "\"hidden\": %d, \"quant\": {\"round_scale\": %s, \"output\": \"%s\"}%s}",
				 hidden, pow2 ? "true" : "false", outputs[o], tile);
			for (size_t c = 0; c < ncases; c++)
				check(json, cases[c][0], cases[c][1]);
		}
}

static const int64_t odd[][2] = {{1, 1}, {1, 5}, {129, 3}, {1000, 96}, {8191, 160}, {5000, 1000}};

/* The target shape: 65536 tokens x 1024, 256 experts. */
static void test_batched_target(void **state)
{
	(void)state;
	static const int64_t target[][2] = {{65536, 256}};
	batched(1024, "", target, 1);
}

static void test_batched_odd(void **state)
{
	(void)state;
	batched(1024, "", odd, sizeof odd / sizeof odd[0]);
	batched(384, "", odd, sizeof odd / sizeof odd[0]);
	batched(128, "", odd, 4);
}

/* Every tile option: threads, fblocks (a partial last group at 384 = 3
 * blocks), the fp32 path. */
static void test_batched_tiles(void **state)
{
	(void)state;
	static const char *const tiles[] = {
		", \"tile\": {\"threads\": 512}", ", \"tile\": {\"threads\": 256}",
		", \"tile\": {\"fblocks\": 1}",   ", \"tile\": {\"fblocks\": 2}",
		", \"tile\": {\"fblocks\": 8}",   ", \"tile\": {\"values\": 32}",
		", \"tile\": {\"values\": 32, \"threads\": 256, \"fblocks\": 2}",
	};
	for (size_t t = 0; t < sizeof tiles / sizeof tiles[0]; t++) {
		batched(384, tiles[t], odd, sizeof odd / sizeof odd[0]);
		batched(2048, tiles[t], odd + 3, 2);
	}
}

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

static void weight(int hidden, const char *tile, const int64_t *rows, size_t nrows)
{
	for (int pow2 = 1; pow2 >= 0; pow2--) {
		char json[512];
		snprintf(json, sizeof json,
			 "{\"op\": \"fp8_quant_weight\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": %d, "
			 "\"quant\": {\"round_scale\": %s}%s}",
			 hidden, pow2 ? "true" : "false", tile);
		for (size_t r = 0; r < nrows; r++)
			check(json, rows[r], 0);
	}
}

static void test_weight(void **state)
{
	(void)state;
	static const int64_t rows[] = {1, 127, 128, 129, 2048, 2049};
	weight(2048, "", rows, 6);
	weight(384, "", rows, 6);
	weight(7168, "", rows + 4, 1);
	static const char *const tiles[] = {", \"tile\": {\"threads\": 512}", ", \"tile\": {\"fblocks\": 2}",
					    ", \"tile\": {\"values\": 32}", ", \"tile\": {\"fblocks\": 8}"};
	for (size_t t = 0; t < 4; t++)
		weight(384, tiles[t], rows, 6);
}

/* The transposed copy (dgrad's): qt = q^T, st = s^T bit for bit with the
 * reference, at odd row counts (a partial last tile row, rows not a
 * multiple of 16: unaligned qt lines) and each tile variant. */
static void test_weight_transposed(void **state)
{
	(void)state;
	static const int64_t rows[] = {1, 127, 129, 2048, 2049};
	weight(2048, ", \"transposed\": true", rows, 5);
	weight(384, ", \"transposed\": true, \"tile\": {\"values\": 32}", rows, 5);
	weight(384, ", \"transposed\": true, \"tile\": {\"threads\": 512, \"fblocks\": 2}", rows, 5);
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
		cmocka_unit_test(test_qt_store),
		cmocka_unit_test(test_qt_pitch),
		cmocka_unit_test(test_batched_no_tokens),
		cmocka_unit_test(test_batched_target),
		cmocka_unit_test(test_batched_odd),
		cmocka_unit_test(test_batched_tiles),
		cmocka_unit_test(test_batched_counts),
		cmocka_unit_test(test_weight),
		cmocka_unit_test(test_weight_transposed),
	};
	return LG_TEST_RUN_GPU(tests, &ctx);
}
