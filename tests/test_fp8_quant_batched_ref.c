/*
 * test_fp8_quant_batched_ref.c - the per-expert and weight quantisers on
 * the CPU (families fp8_quant_batched and fp8_quant_weight, docs/kernels.md
 * 1.3): the per-expert reference (lg_ref_quant_experts) against the flat
 * one run on each expert's rows as a tensor of its own, with expert counts
 * 0, 1, 127, 128, 129 and sizes not multiples of 16, untouched elements
 * left as poison; the weight reference on a hand-checked tile and a tail;
 * the families' references (buffers, counts summing to the tokens), spec
 * errors, launch geometry (the static grid bound), tuning candidates (each
 * plans and generates on sm_90a and sm_80) and the generated code's use of
 * the engine. No GPU.
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
#include <math.h>

#include "error.h"
#include "generate.h"
#include "numeric_ref.h"
#include "ref.h"

static lg_spec *spec(const char *json)
{
	lg_spec *s = NULL;
	if (lg_spec_parse(json, &s) != LG_OK)
		fail_msg("%s", lg_last_error());
	return s;
}

static float *random_y(size_t m, size_t n, uint64_t seed)
{
	float *y = malloc((m * n > 0 ? m * n : 1) * sizeof *y);
	assert_non_null(y);
	uint64_t st = seed;
	for (size_t i = 0; i < m * n; i++)
		y[i] = lg_ref_randn(&st) * ldexpf(1.0f, (int)(i / n % 9) - 4);
	return y;
}

/* Each expert's part of the concatenated buffers equals the flat reference
 * run on its rows alone; everything after the last expert is poison. */
static void check_experts(const int32_t *counts, size_t ne, size_t m, size_t n, bool pow2, uint64_t seed)
{
	struct lg_quant qr = {.present = true, .block = 128, .round_scale = pow2, .output = LG_QOUT_BOTH};
	size_t nb = n / 128, st_rows = (m + 127) / 128 + ne;
	float *y = random_y(m, n, seed);
	uint8_t *q = malloc(m * n + 1), *qt = malloc(m * n + 1), *q1 = malloc(m * n + 1), *qt1 = malloc(m * n + 1);
	float *s = malloc(m * nb * sizeof *s + 4), *st = malloc(st_rows * n * sizeof *st);
	float *s1 = malloc(m * nb * sizeof *s1 + 4), *st1 = malloc(st_rows * n * sizeof *st1);
	assert_true(q && qt && q1 && qt1 && s && st && s1 && st1);
	lg_ref_quant_experts(y, m, n, counts, ne, qr, q, s, qt, st, st_rows);
	size_t start = 0, trow = 0;
	for (size_t e = 0; e < ne; e++) {
		size_t c = (size_t)counts[e];
		if (c) {
			lg_ref_quant_blockwise(y + start * n, c, n, qr, q1, s1, qt1, st1);
			assert_memory_equal(q + start * n, q1, c * n);
			assert_memory_equal(s + start * nb, s1, c * nb * sizeof *s);
			assert_memory_equal(qt + start * n, qt1, c * n);
			assert_memory_equal(st + trow * n, st1, (c + 127) / 128 * n * sizeof *st);
		}
		start += c;
		trow += (c + 127) / 128;
	}
	for (size_t i = start * n; i < m * n; i++)
		assert_int_equal(q[i], 0xff);
	for (size_t i = trow * n; i < st_rows * n; i++) {
		uint32_t u;
		memcpy(&u, st + i, 4);
		assert_int_equal(u, 0xffffffffu);
	}
	free(y);
	free(q), free(qt), free(q1), free(qt1), free(s), free(st), free(s1), free(st1);
}

static void test_experts_layout(void **state)
{
	(void)state;
	static const int32_t a[] = {0, 1, 127, 128, 129, 0, 300, 5}; /* 690 tokens */
	check_experts(a, 8, 690, 256, true, 1);
	check_experts(a, 8, 690, 256, false, 2);
	check_experts(a, 8, 700, 128, true, 3); /* 10 tokens past the counts */
	static const int32_t one[] = {259};
	check_experts(one, 1, 259, 384, true, 4);
	static const int32_t zeros[] = {0, 0, 0};
	check_experts(zeros, 3, 17, 128, true, 5);
}

/* An expert's 128-token blocks start at its first token: 2 tokens of
 * amax 1 in expert 0 and 1 token of amax 448 in expert 1 (one flat block
 * would give all three the scale 1); the columnwise scales of expert 1 sit
 * in st row 1, its qt bytes at element 2 * 128. */
static void test_experts_blocks_start_at_segments(void **state)
{
	(void)state;
	float y[3 * 128];
	for (int i = 0; i < 3 * 128; i++)
		y[i] = i < 256 ? 1.0f : 448.0f;
	int32_t counts[2] = {2, 1};
	struct lg_quant qr = {.present = true, .block = 128, .round_scale = true, .output = LG_QOUT_BOTH};
	uint8_t q[3 * 128], qt[3 * 128];
	float s[3], st[4 * 128];
	lg_ref_quant_experts(y, 3, 128, counts, 2, qr, q, s, qt, st, 4);
	assert_true(st[0] == 0x1p-8f && st[128] == 1.0f);
	assert_int_equal(qt[0], 0x78); /* 1 / 2^-8 = 256 */
	assert_int_equal(qt[2 * 128], 0x7e); /* 448 */
	assert_true(s[0] == 0x1p-8f && s[1] == 0x1p-8f && s[2] == 1.0f);
	uint32_t u;
	memcpy(&u, &st[2 * 128], 4);
	assert_int_equal(u, 0xffffffffu); /* rows past the last expert's: poison */
}

/* Counts past the capacity: the walk stops before the expert that overruns. */
static void test_experts_overrun(void **state)
{
	(void)state;
	float *y = random_y(200, 128, 9);
	int32_t counts[3] = {100, 150, 10};
	struct lg_quant qr = {.present = true, .block = 128, .round_scale = true, .output = LG_QOUT_BOTH};
	uint8_t q[200 * 128], qt[200 * 128];
	float s[200], st[5 * 128];
	lg_ref_quant_experts(y, 200, 128, counts, 3, qr, q, s, qt, st, 5);
	assert_int_not_equal(q[99 * 128], 0xff);
	for (size_t i = 100 * 128; i < 200 * 128; i++)
		assert_int_equal(q[i], 0xff);
	free(y);
}

/* ------------------------------------------------------------ weights */

#define FW(h, pow2, extra)                                                                          \
	"{\"op\": \"fp8_quant_weight\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": " #h    \
	", \"quant\": {\"round_scale\": " #pow2 "}" extra "}"

static struct lg_ref_case make_case(const lg_spec *s, const int64_t *sizes)
{
	struct lg_target t;
	struct lg_plan p;
	assert_true(lg_target_parse("sm_90a", &t));
	assert_int_equal(lg_plan_for(s, &t, &p), LG_OK);
	struct lg_ref_case c;
	assert_int_equal(lg_ref_case_init(&c, s, sizes, p.used, 0), LG_OK);
	for (int i = 0; i < c.n; i++)
		if (c.buf[i].count) {
			c.buf[i].host = calloc(c.buf[i].count, c.buf[i].elem);
			assert_non_null(c.buf[i].host);
		}
	return c;
}

static void case_free(struct lg_ref_case *c)
{
	for (int i = 0; i < c->n; i++)
		free(c->buf[i].host);
}

/* 130 x 256 weight: a tile of ones with 896 = 2 x 448 at (3, 5) has scale
 * 2 (pow2) and payloads 0.5 (0x30) and 448; the tail tile row (2 rows)
 * takes its amax over its own rows; s is [2, 2]. */
static void test_weight_reference(void **state)
{
	(void)state;
	lg_spec *s = spec(FW(256, true, ""));
	int64_t sizes[LG_MAX_SIZES] = {130};
	struct lg_ref_case c = make_case(s, sizes);
	assert_int_equal(c.n, 5);
	assert_int_equal(c.buf[3].count, 0); /* no transposed copy asked for */
	assert_int_equal(c.buf[0].count, 130 * 256);
	assert_int_equal(c.buf[1].count, 130 * 256);
	assert_int_equal(c.buf[2].count, 2 * 2);
	uint16_t *w = c.buf[0].host;
	for (size_t i = 0; i < 130 * 256; i++)
		w[i] = 0x3f80; /* 1.0 */
	w[3 * 256 + 5] = lg_ref_f32_to_bf16(896.0f);
	w[129 * 256 + 200] = lg_ref_f32_to_bf16(-4.0f);
	const struct lg_ref_family *rf = lg_ref_family_get(s->op);
	rf->describe(s, &c);
	assert_int_equal(c.buf[2].cmp, LG_CMP_SCALE);
	rf->run(s, &c);
	const float *sc = c.buf[2].host;
	const uint8_t *q = c.buf[1].host;
	assert_true(sc[0] == 2.0f);          /* tile (0, 0): 896 / 448 */
	assert_true(sc[1] == 0x1p-8f);       /* tile (0, 1): amax 1 */
	assert_true(sc[2] == 0x1p-8f);       /* tile (1, 0): rows 128, 129, amax 1 */
	assert_true(sc[3] == 0x1p-6f);       /* tile (1, 1): amax 4, 4/448 -> 2^-6 */
	assert_int_equal(q[3 * 256 + 5], 0x7e);
	assert_int_equal(q[0], 0x30);        /* 1 / 2 = 0.5 */
	assert_int_equal(q[129 * 256 + 200], 0xf8); /* -4 / 2^-6 = -256 */
	case_free(&c);
	lg_spec_free(s);
}

/* transposed: qt [256, 130] is q^T byte for byte, st [2, 2] is s^T. */
static void test_weight_transposed(void **state)
{
	(void)state;
	lg_spec *s = spec(FW(256, true, ", \"transposed\": true"));
	int64_t sizes[LG_MAX_SIZES] = {130};
	struct lg_ref_case c = make_case(s, sizes);
	assert_int_equal(c.buf[3].count, 256 * 130);
	assert_int_equal(c.buf[4].count, 2 * 2);
	uint64_t st = 7;
	lg_ref_fill_quant_input(c.buf[0].host, 130, 256, &st);
	const struct lg_ref_family *rf = lg_ref_family_get(s->op);
	rf->describe(s, &c);
	assert_int_equal(c.buf[3].cmp, LG_CMP_E4M3_ULP);
	assert_int_equal(c.buf[4].cmp, LG_CMP_SCALE);
	rf->run(s, &c);
	const uint8_t *q = c.buf[1].host, *qt = c.buf[3].host;
	const float *sc = c.buf[2].host, *sct = c.buf[4].host;
	for (size_t i = 0; i < 130; i++)
		for (size_t k = 0; k < 256; k++)
			assert_int_equal(qt[k * 130 + i], q[i * 256 + k]);
	for (int i = 0; i < 2; i++)
		for (int k = 0; k < 2; k++)
			assert_true(sct[k * 2 + i] == sc[i * 2 + k]);
	assert_non_null(strstr(lg_spec_entry(s), "_tr"));
	case_free(&c);
	lg_spec_free(s);
}

/* quant.output other than both: a spec error naming the key. */
static void test_weight_spec_errors(void **state)
{
	(void)state;
	lg_spec *s = NULL;
	assert_int_equal(lg_spec_parse("{\"op\": \"fp8_quant_weight\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
				       "\"hidden\": 256, \"quant\": {\"output\": \"rowwise\"}}",
				       &s),
			 LG_ERR_SPEC);
	assert_non_null(strstr(lg_last_error(), "quant.output"));
	assert_non_null(strstr(lg_last_error(), "both"));
	assert_int_equal(lg_spec_parse("{\"op\": \"fp8_quant_weight\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
				       "\"hidden\": 200, \"quant\": {}}",
				       &s),
			 LG_ERR_SPEC);
	assert_non_null(strstr(lg_last_error(), "hidden"));
	assert_int_equal(lg_spec_parse("{\"op\": \"fp8_quant_weight\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
				       "\"hidden\": 256, \"quant\": {}, \"tile\": {\"fblocks\": 3}}",
				       &s),
			 LG_ERR_SPEC);
	assert_non_null(strstr(lg_last_error(), "fblocks"));
}

/* ------------------------------------------------------------ per expert */

#define FB(h, out, pow2, extra)                                                                     \
	"{\"op\": \"fp8_quant_batched\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": " #h   \
	", \"quant\": {\"round_scale\": " #pow2 ", \"output\": \"" #out "\"}" extra "}"

/* Buffers as declared (st a capacity of cdiv(tokens, 128) + experts rows),
 * counts that sum to the tokens with every special count present somewhere
 * across seeds, outputs equal to lg_ref_quant_experts on x widened. */
static void test_batched_reference(void **state)
{
	(void)state;
	lg_spec *s = spec(FB(384, both, true, ""));
	int64_t sizes[LG_MAX_SIZES] = {1000, 96};
	struct lg_ref_case c = make_case(s, sizes);
	const size_t want[6] = {1000 * 384, 96, 1000 * 384, 3 * 1000, 384 * 1000, (8 + 96) * 384};
	assert_int_equal(c.n, 6);
	for (int i = 0; i < 6; i++)
		assert_int_equal(c.buf[i].count, want[i]);
	const struct lg_ref_family *rf = lg_ref_family_get(s->op);
	rf->describe(s, &c);
	bool seen[5] = {false};
	for (uint64_t seed = 1; seed <= 8; seed++) {
		rf->fill(s, &c, seed);
		const int32_t *counts = c.buf[1].host;
		int64_t sum = 0;
		for (int e = 0; e < 96; e++) {
			assert_true(counts[e] >= 0);
			sum += counts[e];
			static const int32_t special[5] = {0, 1, 127, 128, 129};
			for (int k = 0; k < 5; k++)
				seen[k] = seen[k] || counts[e] == special[k];
		}
		assert_int_equal(sum, 1000);
	}
	for (int k = 0; k < 5; k++)
		assert_true(seen[k]);
	rf->run(s, &c);
	float *y = malloc(want[0] * sizeof *y);
	uint8_t *q = malloc(want[2]), *qt = malloc(want[4]);
	float *sc = malloc(want[3] * sizeof *sc), *st = malloc(want[5] * sizeof *st);
	assert_true(y && q && qt && sc && st);
	const uint16_t *x = c.buf[0].host;
	for (size_t i = 0; i < want[0]; i++)
		y[i] = lg_ref_bf16_to_f32(x[i]);
	lg_ref_quant_experts(y, 1000, 384, c.buf[1].host, 96, lg_spec_quant(s), q, sc, qt, st, 8 + 96);
	assert_memory_equal(q, c.buf[2].host, want[2]);
	assert_memory_equal(sc, c.buf[3].host, want[3] * 4);
	assert_memory_equal(qt, c.buf[4].host, want[4]);
	assert_memory_equal(st, c.buf[5].host, want[5] * 4);
	free(y), free(q), free(qt), free(sc), free(st);
	case_free(&c);
	lg_spec_free(s);
}

/* Rowwise only: qt and st unused (count 0) and untouched. */
static void test_batched_rowwise_uses(void **state)
{
	(void)state;
	lg_spec *s = spec(FB(256, rowwise, false, ""));
	int64_t sizes[LG_MAX_SIZES] = {300, 7};
	struct lg_ref_case c = make_case(s, sizes);
	assert_int_equal(c.buf[4].count, 0);
	assert_int_equal(c.buf[5].count, 0);
	const struct lg_ref_family *rf = lg_ref_family_get(s->op);
	rf->describe(s, &c);
	rf->fill(s, &c, 3);
	rf->run(s, &c);
	case_free(&c);
	lg_spec_free(s);
}

/* The grid: (cdiv(tokens, 128) + experts) token tiles x feature groups; no
 * tokens, nothing launched; the declared maxima fit 2^31 - 1. */
static void test_geometry(void **state)
{
	(void)state;
	struct lg_target t;
	assert_true(lg_target_parse("sm_90a", &t));
	const struct lg_family *f = lg_family_get(LG_OP_FP8_QUANT_BATCHED);
	lg_spec *s = spec(FB(1024, both, true, "")), *s1 = spec(FB(1024, both, true, ", \"tile\": {\"fblocks\": 4}"));
	lg_spec *wide = spec(FB(65536, both, true, ", \"tile\": {\"fblocks\": 1}"));
	struct lg_plan p;
	struct lg_launch_dim d;
	assert_int_equal(lg_plan_for(s, &t, &p), LG_OK);
	int64_t z[2] = {0, 256}, big[2] = {65536, 256}, odd[2] = {1000, 96};
	f->geometry(&p, 0, z, &d);
	assert_int_equal(d.grid[0], 0);
	f->geometry(&p, 0, big, &d);
	assert_int_equal(d.grid[0], (512 + 256) * 8); /* fblocks 1: 8 feature groups */
	assert_int_equal(d.block[0], 256);
	assert_int_equal(lg_plan_for(s1, &t, &p), LG_OK);
	f->geometry(&p, 0, odd, &d);
	assert_int_equal(d.grid[0], (8 + 96) * 2); /* fblocks 4 of 8 blocks */
	assert_int_equal(lg_plan_for(wide, &t, &p), LG_OK);
	int64_t most[2] = {f->sig[LG_PASS_FORWARD].sizes[0].max, f->sig[LG_PASS_FORWARD].sizes[1].max};
	f->geometry(&p, 0, most, &d);
	assert_true(d.grid[0] > 0 && d.grid[0] <= INT32_MAX);
	const struct lg_family *fw = lg_family_get(LG_OP_FP8_QUANT_WEIGHT);
	lg_spec *w = spec(FW(2048, true, ""));
	assert_int_equal(lg_plan_for(w, &t, &p), LG_OK);
	int64_t rows[1] = {4097};
	fw->geometry(&p, 0, rows, &d);
	assert_int_equal(d.grid[0], 33 * 16);
	lg_spec_free(s), lg_spec_free(s1), lg_spec_free(wide), lg_spec_free(w);
}

/* Spec errors: a tile value outside its list, hidden not a multiple of 128. */
static void test_batched_spec_errors(void **state)
{
	(void)state;
	lg_spec *s = NULL;
	assert_int_equal(lg_spec_parse(FB(1024, both, true, ", \"tile\": {\"values\": 8}"), &s), LG_ERR_SPEC);
	assert_non_null(strstr(lg_last_error(), "values"));
	assert_int_equal(lg_spec_parse(FB(1000, both, true, ""), &s), LG_ERR_SPEC);
	assert_non_null(strstr(lg_last_error(), "hidden"));
	assert_int_equal(lg_spec_parse(FB(1024, sideways, true, ""), &s), LG_ERR_SPEC);
	assert_non_null(strstr(lg_last_error(), "output"));
}

/* Candidates: each plans and generates (the block scan of counts in the
 * source, the fp32 path when asked) on sm_90a and sm_80. */
static void test_candidates(void **state)
{
	(void)state;
	static const char *const specs[] = {
		FB(1024, both, true, ""), FB(128, rowwise, false, ""), FB(7168, columnwise, true, ""),
		FB(2048, both, false, ", \"tile\": {\"values\": 32}"), FW(2048, true, ""), FW(384, false, ""),
	};
	static const char *const archs[] = {"sm_90a", "sm_80"};
	for (size_t a = 0; a < 2; a++) {
		struct lg_target tg;
		assert_true(lg_target_parse(archs[a], &tg));
		for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
			lg_spec *s = spec(specs[i]);
			const struct lg_family *f = lg_family_get(s->op);
			struct lg_tile_choice c[LG_MAX_CANDIDATES];
			int n = f->candidates(s, &tg, c, LG_MAX_CANDIDATES);
			assert_int_equal(n, 8); /* fblocks 1, 2, 4, 8 x 256, 512 threads */
			for (int k = 0; k < n; k++) {
				struct lg_spec v;
				struct lg_plan p;
				assert_int_equal(lg_spec_with_tile(s, &c[k], &v), LG_OK);
				assert_int_equal(lg_plan_for(&v, &tg, &p), LG_OK);
				char *src = NULL;
				assert_int_equal(lg_generate_for(&v, &tg, &p, &src, NULL), LG_OK);
				assert_non_null(strstr(src, p.entry[0]));
				if (s->op == LG_OP_FP8_QUANT_BATCHED)
					assert_non_null(strstr(src, "lg_expert_tiles("));
				else
					assert_non_null(strstr(src, "tmax"));
				free(src);
			}
			lg_spec_free(s);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_experts_layout),
		cmocka_unit_test(test_experts_blocks_start_at_segments),
		cmocka_unit_test(test_experts_overrun),
		cmocka_unit_test(test_weight_reference),
		cmocka_unit_test(test_weight_transposed),
		cmocka_unit_test(test_weight_spec_errors),
		cmocka_unit_test(test_batched_reference),
		cmocka_unit_test(test_batched_rowwise_uses),
		cmocka_unit_test(test_geometry),
		cmocka_unit_test(test_batched_spec_errors),
		cmocka_unit_test(test_candidates),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
