/*
 * test_fp8_quant_ref.c - the blockwise FP8 quantisation reference
 * (gen/ref/quant_ref.c, docs/kernels.md 1.2-1.3) on tiny cases checked by hand: one
 * 128x128 tile with a known amax, zero blocks and a zero feature, a partial
 * last token block, round-to-nearest-even ties, the transposed layouts; the
 * fp8_quant family's reference (buffers as declared, inputs, outputs not
 * asked for left alone), its launch geometry and its tuning candidates
 * (each validates, plans and generates). No GPU.
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

#include "generate.h"
#include "numeric_ref.h"
#include "quant_common.h"
#include "ref.h"

/* e4m3 bytes, by hand: sign | exponent (bias 7) << 3 | mantissa */
#define E4M3_448 0x7e  /* 1.75 * 2^8, the largest */
#define E4M3_256 0x78  /* 2^8 */
#define E4M3_0_25 0x28 /* 2^-2 */
#define E4M3_1 0x38    /* 2^0 */

static const struct lg_quant POW2_BOTH = {.present = true, .block = 128, .round_scale = true, .output = LG_QOUT_BOTH};
static const struct lg_quant EXACT_BOTH = {.present = true, .block = 128, .round_scale = false, .output = LG_QOUT_BOTH};

struct out {
	uint8_t *q, *qt;
	float *s, *st;
};

static struct out quantise(const float *y, size_t m, size_t n, struct lg_quant qr)
{
	struct out o = {malloc(m * n), malloc(m * n), malloc(n / 128 * m * sizeof(float)),
			malloc((m + 127) / 128 * n * sizeof(float))};
	assert_true(o.q && o.qt && o.s && o.st);
	lg_ref_quant_blockwise(y, m, n, qr, o.q, o.s, o.qt, o.st);
	return o;
}

static void out_free(struct out *o)
{
	free(o->q);
	free(o->qt);
	free(o->s);
	free(o->st);
}

/* 128 x 128 ones with one outlier 1792 = 4 x 448 at token 5, feature 7:
 *   pow2: a block of amax 1 has s = 2^ceil(log2(1/448)) = 2^-8, payload 1/2^-8 = 256;
 *         the outlier's row and column have s = 4, payloads 1/4 and 1792/4 = 448.
 *   exact: s = 1/448 (fp32), payload 1 / (1/448) rounds to 448; the outlier's blocks as above. */
static void test_tile_known_amax(void **state)
{
	(void)state;
	float *y = malloc(128 * 128 * sizeof *y);
	for (int i = 0; i < 128 * 128; i++)
		y[i] = 1.0f;
	y[5 * 128 + 7] = 1792.0f;
	struct out o = quantise(y, 128, 128, POW2_BOTH);
	for (int i = 0; i < 128; i++) {
		assert_true(o.s[i] == (i == 5 ? 4.0f : 0x1p-8f)); /* s [1, 128]: one per token */
		assert_true(o.st[i] == (i == 7 ? 4.0f : 0x1p-8f)); /* st [1, 128]: one per feature */
		for (int k = 0; k < 128; k++) {
			int want_q = i != 5 ? E4M3_256 : k == 7 ? E4M3_448 : E4M3_0_25;
			int want_qt = k != 7 ? E4M3_256 : i == 5 ? E4M3_448 : E4M3_0_25;
			assert_int_equal(o.q[i * 128 + k], want_q);
			assert_int_equal(o.qt[k * 128 + i], want_qt); /* qt [128 features, 128 tokens] */
		}
	}
	out_free(&o);
	o = quantise(y, 128, 128, EXACT_BOTH);
	assert_true(o.s[0] == 1.0f / 448.0f && o.s[5] == 4.0f);
	assert_true(o.st[0] == 1.0f / 448.0f && o.st[7] == 4.0f);
	assert_int_equal(o.q[0], E4M3_448);
	assert_int_equal(o.q[5 * 128], E4M3_0_25);
	assert_int_equal(o.q[5 * 128 + 7], E4M3_448);
	assert_int_equal(o.qt[7 * 128 + 4], E4M3_0_25);
	out_free(&o);
	free(y);
}

/* 3 tokens x 256 features of 2, with token 1's second block and feature 3
 * all zero: a zero block gets s = 1e-30 (pow2: 2^-99, as 2^-100 < 1e-30 <
 * 2^-99) and payload 0; s is [2 blocks, 3 tokens], tokens contiguous. */
static void test_zero_blocks(void **state)
{
	(void)state;
	const size_t m = 3, n = 256;
	float y[3 * 256];
	for (size_t i = 0; i < m * n; i++)
		y[i] = 2.0f;
	for (size_t k = 128; k < 256; k++)
		y[1 * n + k] = 0.0f;
	for (size_t i = 0; i < m; i++)
		y[i * n + 3] = 0.0f;
	struct lg_quant qr[2] = {POW2_BOTH, EXACT_BOTH};
	for (int v = 0; v < 2; v++) {
		struct out o = quantise(y, m, n, qr[v]);
		float zero = v == 0 ? 0x1p-99f : 1e-30f, two = v == 0 ? 0x1p-7f : 2.0f / 448.0f;
		for (size_t i = 0; i < m; i++) {
			assert_true(o.s[0 * m + i] == two);
			assert_true(o.s[1 * m + i] == (i == 1 ? zero : two));
		}
		for (size_t k = 0; k < n; k++)
			assert_true(o.st[k] == (k == 3 ? zero : two));
		for (size_t k = 128; k < 256; k++)
			assert_int_equal(o.q[1 * n + k], 0);
		for (size_t i = 0; i < m; i++)
			assert_int_equal(o.qt[3 * m + i], 0);
		if (v == 0) { /* 2 / 2^-7 = 256 */
			assert_int_equal(o.q[0], E4M3_256);
			assert_int_equal(o.qt[200 * m + 1], 0);
			assert_int_equal(o.qt[200 * m + 2], E4M3_256);
		}
		out_free(&o);
	}
}

/* 130 tokens: the second token block has 2 rows and takes its amax over
 * them only. Feature 0: 1000 in the first block, 2 in the second; feature 1:
 * 1 in the first, 0.5 and -0.5 in the second. */
static void test_partial_token_block(void **state)
{
	(void)state;
	const size_t m = 130, n = 128;
	float *y = malloc(m * n * sizeof *y);
	for (size_t i = 0; i < m; i++)
		for (size_t k = 0; k < n; k++)
			y[i * n + k] = i < 128 ? (k == 0 ? 1000.0f : 1.0f) : (k == 0 ? 2.0f : 0.5f);
	y[129 * n + 1] = -0.5f;
	struct out o = quantise(y, m, n, POW2_BOTH);
	assert_true(o.st[0 * n + 0] == 4.0f);     /* 1000 / 448 = 2.23 -> 4 */
	assert_true(o.st[1 * n + 0] == 0x1p-7f);  /* 2 / 448 -> 2^-7, not 1000's */
	assert_true(o.st[1 * n + 1] == 0x1p-9f);  /* 0.5 / 448 = 2^-9.8 -> 2^-9 */
	assert_int_equal(o.qt[0 * m + 128], E4M3_256);       /* 2 / 2^-7 */
	assert_int_equal(o.qt[1 * m + 129], 0x80 | E4M3_256); /* -0.5 / 2^-9 */
	assert_int_equal(o.qt[1 * m + 127], E4M3_256);        /* 1 / 2^-8 */
	assert_true(o.s[129] == 0x1p-7f); /* token 129's own row: amax 2 */
	out_free(&o);
	o = quantise(y, m, n, EXACT_BOTH);
	assert_true(o.st[1 * n + 0] == 2.0f / 448.0f);
	out_free(&o);
	free(y);
}

/* amax 448 gives s = 1 exactly, so payloads are e4m3(v), ties to even:
 * 1.0625 between 1 (even) and 1.125 -> 1; 1.1875 between 1.125 and 1.25
 * (even) -> 1.25; 3 x 2^-10 between the subnormals 2^-9 and 2^-8 (even) -> 2^-8. */
static void test_ties_to_even(void **state)
{
	(void)state;
	float y[128] = {448.0f, 1.0625f, 1.1875f, 3 * 0x1p-10f, -1.0625f};
	struct out o = quantise(y, 1, 128, EXACT_BOTH);
	assert_true(o.s[0] == 1.0f);
	assert_int_equal(o.q[0], E4M3_448);
	assert_int_equal(o.q[1], E4M3_1);
	assert_int_equal(o.q[2], 0x3a); /* 1.25 = 2^0 x (1 + 2/8) */
	assert_int_equal(o.q[3], 0x02); /* 2^-8 = 2 x 2^-9, subnormal */
	assert_int_equal(o.q[4], 0x80 | E4M3_1);
	assert_int_equal(o.q[5], 0);
	out_free(&o);
}

/* Only the copy asked for is written (the other's pointers may be NULL).
 * Token 0 all 3, token 1 all -1: rowwise s = 2^-7 (3 / 448 = 2^-7.2) and
 * 2^-8, payloads 3 / 2^-7 = 384 and -256; columnwise s = 2^-7, payloads
 * 384 and -1 / 2^-7 = -128. */
static void test_one_copy(void **state)
{
	(void)state;
	float y[2 * 128];
	for (int i = 0; i < 256; i++)
		y[i] = i < 128 ? 3.0f : -1.0f;
	struct lg_quant rw = POW2_BOTH, cw = POW2_BOTH;
	rw.output = LG_QOUT_ROWWISE;
	cw.output = LG_QOUT_COLUMNWISE;
	uint8_t q[256], qt[256];
	float s[2], st[128];
	lg_ref_quant_blockwise(y, 2, 128, rw, q, s, NULL, NULL);
	assert_true(s[0] == 0x1p-7f && s[1] == 0x1p-8f);
	assert_int_equal(q[5], 0x7c);        /* 384 = 1.5 x 2^8 */
	assert_int_equal(q[128 + 5], 0xf8);  /* -256 */
	lg_ref_quant_blockwise(y, 2, 128, cw, NULL, NULL, qt, st);
	assert_true(st[0] == 0x1p-7f && st[127] == 0x1p-7f);
	assert_int_equal(qt[5 * 2], 0x7c);
	assert_int_equal(qt[5 * 2 + 1], 0xf0); /* -128 = -2^7 */
}

/* ------------------------------------------------------ the family */

#define FQ(h, out, pow2)                                                                           \
	"{\"op\": \"fp8_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": " #h           \
	", \"quant\": {\"round_scale\": " #pow2 ", \"output\": \"" #out "\"}}"

static lg_spec *spec(const char *json)
{
	lg_spec *s = NULL;
	if (lg_spec_parse(json, &s) != LG_OK)
		fail_msg("%s", lg_last_error());
	return s;
}

/* The family's reference: buffers as declared (130 tokens x 256: q, s [2,
 * 130], qt, st [2, 256]), the columnwise copy not asked for left alone,
 * inputs never all zero, outputs equal to the shared helper's on x widened. */
static void test_family_reference(void **state)
{
	(void)state;
	lg_spec *s = spec(FQ(256, rowwise, true));
	struct lg_target t;
	struct lg_plan p;
	assert_true(lg_target_parse("sm_90a", &t));
	assert_int_equal(lg_plan_for(s, &t, &p), LG_OK);
	int64_t sizes[LG_MAX_SIZES] = {130};
	struct lg_ref_case c;
	assert_int_equal(lg_ref_case_init(&c, s, sizes, p.used, 0), LG_OK);
	const size_t want[5] = {130 * 256, 130 * 256, 2 * 130, 0, 0}; /* x q s qt st */
	assert_int_equal(c.n, 5);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(c.buf[i].count, want[i]);
		if (c.buf[i].count) {
			c.buf[i].host = calloc(c.buf[i].count, c.buf[i].elem);
			assert_non_null(c.buf[i].host);
		}
	}
	const struct lg_ref_family *rf = lg_ref_family_get(s->op);
	rf->describe(s, &c);
	assert_int_equal(c.buf[1].cmp, LG_CMP_E4M3_ULP);
	assert_int_equal(c.buf[2].cmp, LG_CMP_SCALE);
	rf->fill(s, &c, 7);
	const uint16_t *x = c.buf[0].host;
	size_t nonzero = 0;
	for (size_t i = 0; i < want[0]; i++)
		nonzero += (x[i] & 0x7fff) != 0;
	assert_true(nonzero > want[0] / 2);
	rf->run(s, &c);
	float *y = malloc(want[0] * sizeof *y);
	uint8_t *q = malloc(want[1]);
	float sc[2 * 130];
	for (size_t i = 0; i < want[0]; i++)
		y[i] = lg_ref_bf16_to_f32(x[i]);
	lg_ref_quant_blockwise(y, 130, 256, lg_spec_quant(s), q, sc, NULL, NULL);
	assert_memory_equal(q, c.buf[1].host, want[1]);
	assert_memory_equal(sc, c.buf[2].host, sizeof sc);
	free(q);
	free(y);
	for (int i = 0; i < 5; i++)
		free(c.buf[i].host);
	lg_spec_free(s);
}

/* One CTA per 128 tokens x 128 features; none for no tokens; the largest
 * token count declared fits the grid at the widest hidden. */
static void test_geometry(void **state)
{
	(void)state;
	const struct lg_family *f = lg_family_get(LG_OP_FP8_QUANT);
	struct lg_target t;
	assert_true(lg_target_parse("sm_90a", &t));
	lg_spec *s = spec(FQ(2048, both, true)), *wide = spec(FQ(65536, both, true));
	struct lg_plan p;
	struct lg_launch_dim d;
	assert_int_equal(lg_plan_for(s, &t, &p), LG_OK);
	int64_t n0[1] = {0}, n1[1] = {1}, n8k[1] = {8192}, n8k1[1] = {8193};
	f->geometry(&p, 0, n0, &d);
	assert_int_equal(d.grid[0], 0);
	f->geometry(&p, 0, n1, &d);
	assert_int_equal(d.grid[0], 16);
	assert_int_equal(d.block[0], 256);
	f->geometry(&p, 0, n8k, &d);
	assert_int_equal(d.grid[0], 64 * 16);
	f->geometry(&p, 0, n8k1, &d);
	assert_int_equal(d.grid[0], 65 * 16);
	assert_int_equal(lg_plan_for(wide, &t, &p), LG_OK);
	int64_t most[1] = {f->sig[LG_PASS_FORWARD].sizes[0].max};
	f->geometry(&p, 0, most, &d);
	assert_true(d.grid[0] > 0 && d.grid[0] <= INT32_MAX && d.grid[1] == 1 && d.grid[2] == 1);
	assert_true(most[0] >= 10 * 1000 * 1000); /* tens of millions of tokens */
	lg_spec_free(s);
	lg_spec_free(wide);
}

/* `lingen tune`'s candidates: each validates, plans and generates, for
 * every output and both scale kinds, on sm_90a and sm_80. */
static void test_candidates(void **state)
{
	(void)state;
	static const char *const specs[] = {
		FQ(128, both, true),         FQ(2048, both, true),        FQ(2048, rowwise, false),
		FQ(1152, columnwise, true),  FQ(7168, both, false),       FQ(65536, rowwise, true),
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
			/* 256 and 512 threads, each with both qt stores with a columnwise copy */
			assert_int_equal(n, lg_quant_colwise(s) ? 4 : 2);
			for (int k = 0; k < n; k++) {
				struct lg_spec v;
				struct lg_plan p;
				assert_int_equal(lg_spec_with_tile(s, &c[k], &v), LG_OK);
				assert_int_equal(lg_spec_check(&v, ""), LG_OK);
				assert_int_equal(lg_plan_for(&v, &tg, &p), LG_OK);
				char *src = NULL;
				assert_int_equal(lg_generate_for(&v, &tg, &p, &src, NULL), LG_OK);
				assert_non_null(strstr(src, p.entry[0]));
				free(src);
			}
			assert_int_equal(f->candidates(s, &tg, c, 1), 1); /* max honoured */
			lg_spec_free(s);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tile_known_amax),
		cmocka_unit_test(test_zero_blocks),
		cmocka_unit_test(test_partial_token_block),
		cmocka_unit_test(test_ties_to_even),
		cmocka_unit_test(test_one_copy),
		cmocka_unit_test(test_family_reference),
		cmocka_unit_test(test_geometry),
		cmocka_unit_test(test_candidates),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
