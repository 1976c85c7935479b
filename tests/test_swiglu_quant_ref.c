/*
 * test_swiglu_quant_ref.c - the SwiGLU + FP8 families (swiglu_quant K7,
 * batch_swiglu_quant K6) without a GPU: their references on cases computed
 * by hand (payloads and scales of constant blocks, both scale modes, the
 * transposed scale and payload layouts, the backward's dx1 | dx2 halves
 * and bf16 dx, dprob), the per-expert layout with counts 0, 1, 127, 128
 * and 129 (offsets of s, qt and st, the zero st rows past the last
 * expert), the slack the shared bound gives, the fill (counts sum to the
 * tokens; no ambiguous power-of-two scale after it), the declared shapes
 * and the spec checks and their messages.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "family.h"
#include "generate.h"
#include "lingen.h"
#include "numeric_ref.h"
#include "ref.h"
#include "swiglu_ref.h"
#include "refcase.h"

static lg_spec *parse(const char *op, const char *pass, const char *keys)
{
	char json[512];
	snprintf(json, sizeof json, "{\"op\": \"%s\", \"pass\": \"%s\", \"dtype\": \"bf16\", %s%s}", op, pass, keys,
		 strstr(keys, "quant") ? "" : ", \"quant\": {}");
	lg_spec *s = NULL;
	if (lg_spec_parse(json, &s) != LG_OK)
		fail_msg("%s: %s", json, lg_last_error());
	return s;
}

/* The reference case of s at m tokens, every buffer allocated (zeros). */
static void case_init(struct lg_ref_case *c, const lg_spec *s, int64_t m)
{
	const int64_t sizes[1] = {m};
	assert_int_equal(lg_ref_case_init(c, s, sizes, NULL, 0), LG_OK);
	for (int i = 0; i < c->n; i++) {
		c->buf[i].host = calloc(c->buf[i].count + 1, c->buf[i].elem);
		assert_non_null(c->buf[i].host);
	}
	lg_ref_family_get(s->op)->describe(s, c);
}

static uint16_t bf(float v) { return lg_ref_f32_to_bf16(v); }
static const uint8_t *u8(const struct lg_ref_case *c, int i) { return c->buf[i].host; }
static const float *f32(const struct lg_ref_case *c, int i) { return c->buf[i].host; }

/* K7 arguments */
enum { F_X, F_Q, F_S, F_QT, F_ST };
enum { B_G, B_X, B_DXQ, B_DXS, B_DXQT, B_DXST, B_DX };
/* K6 arguments */
enum { KF_X, KF_P, KF_COUNTS, KF_Q, KF_S, KF_QT, KF_ST };
enum { KB_G, KB_X, KB_P, KB_COUNTS, KB_DXQ, KB_DXS, KB_DP, KB_DXQT, KB_DXST };

/* x rows [a ... | u ...] constant halves. */
static void set_x(struct lg_ref_case *c, int arg, size_t m, size_t n, float a, float u)
{
	uint16_t *x = c->buf[arg].host;
	for (size_t i = 0; i < m; i++)
		for (size_t j = 0; j < n; j++)
			x[i * 2 * n + j] = bf(a), x[i * 2 * n + n + j] = bf(u);
}

/* y = silu(1) 2 = 2 / (1 + e^-1) = 1.4621171572600098 in every place; 2
 * tokens, n = 256. Exact scales: s = y / 448, every payload y / s = 448
 * (0x7e). Power-of-two: s = 2^ceil(log2(y / 448)) = 2^-8, y 256 = 374.3
 * rounds to 384 (0x7c). No slack anywhere (no value near a boundary). */
static void test_forward_by_hand(void **state)
{
	(void)state;
	const double y = 2.0 / (1.0 + exp(-1.0));
	for (int pow2 = 0; pow2 < 2; pow2++) {
		lg_spec *s = parse("swiglu_quant", "forward",
				   pow2 ? "\"intermediate\": 256, \"quant\": {\"round_scale\": true}"
					: "\"intermediate\": 256, \"quant\": {\"round_scale\": false}");
		struct lg_ref_case c;
		case_init(&c, s, 2);
		set_x(&c, F_X, 2, 256, 1.0f, 2.0f);
		lg_ref_family_get(s->op)->run(s, &c);
		float sc = pow2 ? 0x1p-8f : (float)y / 448.0f;
		uint8_t q = pow2 ? 0x7c : 0x7e;
		for (size_t i = 0; i < 512; i++) {
			assert_int_equal(u8(&c, F_Q)[i], q);
			assert_int_equal(c.buf[F_Q].slack[i], 0);
		}
		assert_int_equal(c.buf[F_QT].count, 256 * 128); /* [256, round_up(2, 128)]: a zero tail */
		for (size_t i = 0; i < 256 * 128; i++) {
			assert_int_equal(u8(&c, F_QT)[i], i % 128 < 2 ? q : 0);
			assert_int_equal(c.buf[F_QT].slack[i], 0);
		}
		assert_int_equal(c.buf[F_S].count, 4); /* [2 blocks, 2 tokens] */
		for (size_t i = 0; i < 4; i++)
			assert_true(f32(&c, F_S)[i] == sc);
		assert_int_equal(c.buf[F_ST].count, 256); /* [1, 256] */
		for (size_t i = 0; i < 256; i++)
			assert_true(f32(&c, F_ST)[i] == sc);
		lg_test_case_free(&c);
		lg_spec_free(s);
	}
}

/* The layouts: 3 tokens, n = 256; token i's block b holds v = (i + 1) 2^b
 * (a = 1, so y = silu(1) u with u = v / silu(1) rounded to bf16: y is
 * checked against its own scale). s [2, 3]: s[b 3 + i] is block (i, b)'s;
 * q row-major; qt [256, 128] (rows round_up(3, 128) apart, zeros past
 * token 2): qt[k 128 + i] of token i; st [1, 256] the
 * largest token's (i = 2) scale. A zero gate (a = 0) gives y = 0: scale
 * 1e-30, payload 0. */
static void test_forward_layouts(void **state)
{
	(void)state;
	lg_spec *s = parse("swiglu_quant", "forward", "\"intermediate\": 256, \"quant\": {\"round_scale\": true}");
	struct lg_ref_case c;
	case_init(&c, s, 3);
	uint16_t *x = c.buf[F_X].host;
	double silu1 = 1.0 / (1.0 + exp(-1.0));
	for (size_t i = 0; i < 3; i++)
		for (size_t j = 0; j < 256; j++) {
			x[i * 512 + j] = bf(j == 5 ? 0.0f : 1.0f);
			x[i * 512 + 256 + j] = bf((float)((double)(i + 1) * (j < 128 ? 1 : 2) / silu1));
		}
	lg_ref_family_get(s->op)->run(s, &c);
	for (size_t i = 0; i < 3; i++)
		for (size_t b = 0; b < 2; b++) {
			/* the block's amax: its values are all about (i + 1) 2^b */
			float amax = 0;
			for (size_t k = 0; k < 128; k++) {
				size_t j = b * 128 + k;
				if (j == 5)
					continue;
				double u = lg_ref_bf16_to_f32(x[i * 512 + 256 + j]);
				amax = fmaxf(amax, (float)(silu1 * u));
			}
			assert_true(f32(&c, F_S)[b * 3 + i] == lg_ref_scale(amax, true));
			assert_true(fabsf(f32(&c, F_S)[b * 3 + i] * 448.0f / (float)((i + 1) << b) - 1.0f) < 1.0f);
		}
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(u8(&c, F_Q)[i * 256 + 5], 0); /* y = +0 */
		assert_int_equal(u8(&c, F_QT)[5 * 128 + i], 0);
	}
	for (size_t k = 0; k < 256; k++) /* the pitch's tail */
		for (size_t i = 3; i < 128; i++)
			assert_int_equal(u8(&c, F_QT)[k * 128 + i], 0);
	/* st: token 2's scale per feature; qt of token 0 in feature 200 below token 2's */
	for (size_t k = 0; k < 256; k++)
		if (k != 5)
			assert_true(f32(&c, F_ST)[k] == f32(&c, F_S)[(k / 128) * 3 + 2]);
	assert_true(lg_ref_e4m3_to_f32(u8(&c, F_QT)[200 * 128 + 0]) <
		    lg_ref_e4m3_to_f32(u8(&c, F_QT)[200 * 128 + 2]));
	/* zero feature 5 alone in its column block: the floor scale */
	assert_true(f32(&c, F_ST)[5] == lg_ref_scale(0.0f, true));
	lg_test_case_free(&c);
	lg_spec_free(s);
}

/* Backward, a = 0 (s = 1/2, 1 + a (1 - s) = 1), u = 2, g = 1: dx1 = g u s
 * = 1, dx2 = g a s = 0. dx [2, 256] for n = 128: the first half 1s (exact
 * scale 1/448, payloads 448), the second 0 (scale 1e-30, payload 0); the
 * scales [2, 2]; bf16 dx 1.0 and 0. */
static void test_backward_by_hand(void **state)
{
	(void)state;
	lg_spec *s = parse("swiglu_quant", "backward",
			   "\"intermediate\": 128, \"dx_bf16\": true, \"quant\": {\"round_scale\": false}");
	struct lg_ref_case c;
	case_init(&c, s, 2);
	assert_int_equal(c.buf[B_DXQ].count, 512);
	assert_int_equal(c.buf[B_DXS].count, 4);
	assert_int_equal(c.buf[B_DXQT].count, 256 * 128); /* [256, round_up(2, 128)] */
	assert_int_equal(c.buf[B_DXST].count, 256);
	set_x(&c, B_X, 2, 128, 0.0f, 2.0f);
	uint16_t *g = c.buf[B_G].host;
	for (size_t i = 0; i < 256; i++)
		g[i] = bf(1.0f);
	lg_ref_family_get(s->op)->run(s, &c);
	for (size_t i = 0; i < 2; i++)
		for (size_t j = 0; j < 256; j++) {
			assert_int_equal(u8(&c, B_DXQ)[i * 256 + j], j < 128 ? 0x7e : 0);
			assert_int_equal(u8(&c, B_DXQT)[j * 128 + i], j < 128 ? 0x7e : 0);
			assert_int_equal(((const uint16_t *)c.buf[B_DX].host)[i * 256 + j], j < 128 ? 0x3f80 : 0);
		}
	for (size_t i = 0; i < 2; i++) {
		assert_true(f32(&c, B_DXS)[0 * 2 + i] == 1.0f / 448.0f);
		assert_true(f32(&c, B_DXS)[1 * 2 + i] == 1e-30f);
	}
	for (size_t j = 0; j < 256; j++) {
		assert_true(f32(&c, B_DXST)[j] == (j < 128 ? 1.0f / 448.0f : 1e-30f));
		for (size_t i = 2; i < 128; i++) /* the pitch's tail */
			assert_int_equal(u8(&c, B_DXQT)[j * 128 + i], 0);
	}
	lg_test_case_free(&c);
	lg_spec_free(s);
}

/* dx1's factor 1 + a (1 - s) at a = 2: s = 1 / (1 + e^-2), and dx2 = g a s:
 * a row with u = 1, g = 1 gives dx1 = s (1 + 2 (1 - s)), dx2 = 2 s; their
 * payloads under exact scales (one constant block each) are 448. */
static void test_backward_values(void **state)
{
	(void)state;
	lg_spec *s = parse("swiglu_quant", "backward",
			   "\"intermediate\": 128, \"dx_bf16\": true, \"quant\": {\"round_scale\": false}");
	struct lg_ref_case c;
	case_init(&c, s, 1);
	set_x(&c, B_X, 1, 128, 2.0f, 1.0f);
	uint16_t *g = c.buf[B_G].host;
	for (size_t i = 0; i < 128; i++)
		g[i] = bf(1.0f);
	lg_ref_family_get(s->op)->run(s, &c);
	double sg = 1.0 / (1.0 + exp(-2.0));
	assert_true(f32(&c, B_DXS)[0] == (float)(sg * (1.0 + 2.0 * (1.0 - sg))) / 448.0f);
	assert_true(f32(&c, B_DXS)[1] == (float)(2.0 * sg) / 448.0f);
	assert_int_equal(((const uint16_t *)c.buf[B_DX].host)[0], bf((float)(sg * (1.0 + 2.0 * (1.0 - sg)))));
	assert_int_equal(((const uint16_t *)c.buf[B_DX].host)[128], bf((float)(2.0 * sg)));
	lg_test_case_free(&c);
	lg_spec_free(s);
}

/* Offsets of expert e in the per-expert layout, for counts c. */
struct seg {
	size_t start, strow;
};
static struct seg seg_of(const int32_t *counts, size_t e)
{
	struct seg r = {0, 0};
	for (size_t i = 0; i < e; i++)
		r.start += (size_t)counts[i], r.strow += ((size_t)counts[i] + 127) / 128;
	return r;
}

/* K6 forward with counts 0, 1, 127, 128, 129 (385 tokens, n = 256): a = 1,
 * u = 1, prob of row r (r + 1) / 512, so y_r = silu(1) p_r. Each expert's
 * s is [2, count] at start n/128, its qt [256, count] at start n, its st
 * rows at sum of cdiv(count, 128) (0, 1, 1, 1, 2: 5 rows); the container
 * has cdiv(385, 128) + 5 = 9 rows, the last 4 left as the harness's 0xff
 * poison. An expert's column scale is its largest row's (the last of each
 * 128-token block). */
static void test_experts_layout(void **state)
{
	(void)state;
	static const int32_t counts[5] = {0, 1, 127, 128, 129};
	lg_spec *s = parse("batch_swiglu_quant", "forward",
			   "\"intermediate\": 256, \"experts\": 5, \"quant\": {\"round_scale\": true}");
	struct lg_ref_case c;
	const size_t m = 385, n = 256;
	case_init(&c, s, (int64_t)m);
	assert_int_equal(c.buf[KF_ST].count, 9 * n);
	assert_int_equal(c.buf[KF_S].count, m * 2);
	set_x(&c, KF_X, m, n, 1.0f, 1.0f);
	float *p = c.buf[KF_P].host;
	for (size_t r = 0; r < m; r++)
		p[r] = (float)(r + 1) / 512.0f;
	memcpy(c.buf[KF_COUNTS].host, counts, sizeof counts);
	float *st = c.buf[KF_ST].host;
	lg_ref_family_get(s->op)->run(s, &c);
	double silu1 = 1.0 / (1.0 + exp(-1.0));
	for (size_t e = 0; e < 5; e++) {
		struct seg g = seg_of(counts, e);
		size_t ce = (size_t)counts[e];
		for (size_t i = 0; i < ce; i++) {
			size_t r = g.start + i;
			float y = (float)(silu1 * (double)p[r]), sc = lg_ref_scale(y, true);
			for (size_t b = 0; b < 2; b++)
				assert_true(f32(&c, KF_S)[g.start * 2 + b * ce + i] == sc);
			float last = p[g.start + (i / 128 * 128 + 127 < ce ? i / 128 * 128 + 127 : ce - 1)];
			float cs = lg_ref_scale((float)(silu1 * (double)last), true);
			for (size_t k = 0; k < n; k += 85) {
				assert_true(st[(g.strow + i / 128) * n + k] == cs);
				assert_int_equal(u8(&c, KF_QT)[g.start * n + k * ce + i], lg_ref_quant(y, cs, true));
				assert_int_equal(u8(&c, KF_Q)[r * n + k], lg_ref_quant(y, sc, true));
			}
		}
	}
	for (size_t i = 5 * n; i < 9 * n; i++)
		assert_int_equal(((const uint32_t *)st)[i], 0xffffffffu);
	lg_test_case_free(&c);
	lg_spec_free(s);
}

/* K6 backward: dprob = sum_j silu(x1) x2 g (no prob in it), dx times the
 * prob: a = 1, u = 2, g = 1, n = 128, p = 1/4 on 3 rows of one expert (the
 * others 0 rows): dp = 128 silu(1) 2, dx1 = 2 s (1 + (1 - s)) / 4, dx2 = s / 4. */
static void test_experts_backward(void **state)
{
	(void)state;
	static const int32_t counts[3] = {0, 3, 0};
	lg_spec *s = parse("batch_swiglu_quant", "backward",
			   "\"intermediate\": 128, \"experts\": 3, \"quant\": {\"round_scale\": false}");
	struct lg_ref_case c;
	case_init(&c, s, 3);
	set_x(&c, KB_X, 3, 128, 1.0f, 2.0f);
	uint16_t *g = c.buf[KB_G].host;
	for (size_t i = 0; i < 3 * 128; i++)
		g[i] = bf(1.0f);
	float *p = c.buf[KB_P].host;
	for (size_t r = 0; r < 3; r++)
		p[r] = 0.25f;
	memcpy(c.buf[KB_COUNTS].host, counts, sizeof counts);
	lg_ref_family_get(s->op)->run(s, &c);
	double sg = 1.0 / (1.0 + exp(-1.0));
	for (size_t r = 0; r < 3; r++) {
		assert_true(fabs(f32(&c, KB_DP)[r] - 128.0 * sg * 2.0) < 1e-4);
		assert_true(f32(&c, KB_DXS)[0 * 3 + r] == (float)(2.0 * sg * (2.0 - sg) / 4.0) / 448.0f);
		assert_true(f32(&c, KB_DXS)[1 * 3 + r] == (float)(sg / 4.0) / 448.0f); /* dx2 = g a s p */
	}
	/* st: 1 row of the one expert, then cdiv(3, 128) + 3 - 1 = 3 rows unwritten */
	assert_int_equal(c.buf[KB_DXST].count, 4 * 256);
	for (size_t k = 0; k < 256; k++) {
		assert_true(f32(&c, KB_DXST)[k] == f32(&c, KB_DXS)[(k / 128) * 3]);
		for (size_t r = 1; r < 4; r++)
			assert_int_equal(((const uint32_t *)c.buf[KB_DXST].host)[r * 256 + k], 0xffffffffu);
	}
	assert_int_equal(c.buf[KB_DP].cmp, LG_CMP_FP32);
	lg_test_case_free(&c);
	lg_spec_free(s);
}

/* The slack of lg_ref_quant_tol: a block of one value 448 (scale 1) and
 * values exactly between two e4m3 payloads (1.0625 between 1 and 1.125)
 * get one step of slack once their bound is not zero; without a bound none.
 * A bound across 448 x 2^k is an ambiguous power-of-two scale. */
static void test_slack(void **state)
{
	(void)state;
	float y[128], err[128];
	for (int i = 0; i < 128; i++)
		y[i] = i == 0 ? 448.0f : 1.0625f, err[i] = 0x1p-18f;
	uint8_t q[128], qt[128];
	float s[1], st[128];
	uint16_t qs[128], ss[1];
	struct lg_quant qr = {.present = true, .block = 128, .round_scale = true, .output = LG_QOUT_ROWWISE};
	struct lg_ref_qout o = {.q = q, .s = s, .qt = qt, .st = st, .q_slack = qs, .s_slack = ss};
	err[0] = 0;
	assert_int_equal(lg_ref_quant_tol(y, err, 1, 128, qr, &o), 0);
	assert_true(s[0] == 1.0f && ss[0] == 0);
	assert_int_equal(qs[0], 0);
	assert_int_equal(qs[1], 1);
	assert_int_equal(q[1], lg_ref_f32_to_e4m3(1.0625f)); /* to even: 1.0 */
	assert_int_equal(lg_ref_quant_tol(y, NULL, 1, 128, qr, &o), 0);
	assert_int_equal(qs[1], 0);
	err[0] = 0x1p-10f; /* the amax 448 +- : scale 1 or 2 */
	assert_int_equal(lg_ref_quant_tol(y, err, 1, 128, qr, &o), 1);
	assert_int_equal(ss[0], UINT16_MAX);
	/* exact scales: a few fp32 steps, no ambiguity */
	qr.round_scale = false;
	assert_int_equal(lg_ref_quant_tol(y, err, 1, 128, qr, &o), 0);
	assert_true(ss[0] > 0 && ss[0] < 10000);
	assert_int_equal(lg_ref_steps(0x00, 0x80, 8), 1);
	assert_int_equal(lg_ref_steps(0x01, 0x81, 8), 2);
	assert_int_equal(lg_ref_steps(0x7e, 0x7c, 8), 2);
}

/* The fill: counts sum to the tokens (experts of 0 rows among them), and
 * after it no power-of-two scale is ambiguous (every scale slack 0). */
static void test_fill(void **state)
{
	(void)state;
	static const char *const passes[] = {"forward", "backward"};
	for (int pi = 0; pi < 2; pi++) {
		lg_spec *s = parse("batch_swiglu_quant", passes[pi], "\"intermediate\": 256, \"experts\": 7, "
								   "\"quant\": {\"round_scale\": true}");
		struct lg_ref_case c;
		case_init(&c, s, 700);
		lg_ref_family_get(s->op)->fill(s, &c, 42 + (uint64_t)pi);
		const int32_t *counts = c.buf[pi ? KB_COUNTS : KF_COUNTS].host;
		int64_t sum = 0;
		for (int e = 0; e < 7; e++) {
			assert_true(counts[e] >= 0);
			sum += counts[e];
		}
		assert_int_equal(sum, 700);
		assert_int_equal(counts[0], 0);
		assert_int_equal(counts[1], 1);
		assert_int_equal(counts[2], 127);
		lg_ref_family_get(s->op)->run(s, &c);
		int sc = pi ? KB_DXS : KF_S, stc = pi ? KB_DXST : KF_ST;
		for (size_t i = 0; i < c.buf[sc].count; i++)
			assert_int_equal(c.buf[sc].slack[i], 0);
		for (size_t i = 0; i < c.buf[stc].count; i++)
			assert_int_equal(c.buf[stc].slack[i], 0);
		lg_test_case_free(&c);
		lg_spec_free(s);
	}
	/* K7 at one token */
	lg_spec *s = parse("swiglu_quant", "backward", "\"intermediate\": 128, \"dx_bf16\": true");
	struct lg_ref_case c;
	case_init(&c, s, 1);
	lg_ref_family_get(s->op)->fill(s, &c, 7);
	lg_ref_family_get(s->op)->run(s, &c);
	for (size_t i = 0; i < c.buf[B_DXS].count; i++)
		assert_int_equal(c.buf[B_DXS].slack[i], 0);
	lg_test_case_free(&c);
	lg_spec_free(s);
}

/* Declared shapes at 300 tokens: K7 backward dxs [2n/128, M]; K6 st rows
 * cdiv(M, 128) + experts. */
static void test_shapes(void **state)
{
	(void)state;
	const int64_t sizes[1] = {300};
	int64_t dims[8];
	int nd;
	lg_spec *s = parse("swiglu_quant", "backward", "\"intermediate\": 512");
	assert_int_equal(lg_arg_shape(s, B_DXS, sizes, dims, &nd), LG_OK);
	assert_true(nd == 2 && dims[0] == 8 && dims[1] == 300);
	assert_int_equal(lg_arg_shape(s, B_DXST, sizes, dims, &nd), LG_OK);
	assert_true(nd == 2 && dims[0] == 3 && dims[1] == 1024);
	assert_int_equal(lg_arg_shape(s, B_X, sizes, dims, &nd), LG_OK);
	assert_true(nd == 2 && dims[0] == 300 && dims[1] == 1024);
	lg_spec_free(s);
	s = parse("batch_swiglu_quant", "forward", "\"intermediate\": 512, \"experts\": 96");
	assert_int_equal(lg_arg_shape(s, KF_ST, sizes, dims, &nd), LG_OK);
	assert_true(nd == 2 && dims[0] == 3 + 96 && dims[1] == 512);
	assert_int_equal(lg_arg_shape(s, KF_COUNTS, sizes, dims, &nd), LG_OK);
	assert_true(nd == 1 && dims[0] == 96);
	assert_int_equal(lg_arg_shape(s, KF_P, sizes, dims, &nd), LG_OK);
	assert_true(nd == 2 && dims[0] == 300 && dims[1] == 1);
	lg_spec_free(s);
}

/* A spec the family refuses, and the words its message must hold. */
static void refused(const char *op, const char *pass, const char *keys, const char *want1, const char *want2)
{
	char json[512];
	snprintf(json, sizeof json, "{\"op\": \"%s\", \"pass\": \"%s\", \"dtype\": \"bf16\", %s%s}", op, pass, keys,
		 strstr(keys, "quant") ? "" : ", \"quant\": {}");
	lg_spec *s = NULL;
	assert_int_equal(lg_spec_parse(json, &s), LG_ERR_SPEC);
	const char *msg = lg_last_error();
	if (!strstr(msg, want1) || !strstr(msg, want2))
		fail_msg("%s: message \"%s\" lacks \"%s\" or \"%s\"", keys, msg, want1, want2);
}

static void test_spec_checks(void **state)
{
	(void)state;
	refused("swiglu_quant", "forward", "\"intermediate\": 500", "intermediate: found 500", "multiple of 128");
	refused("swiglu_quant", "forward", "\"intermediate\": 512, \"dx_bf16\": true", "dx_bf16",
		"only the backward");
	refused("swiglu_quant", "forward", "\"hidden\": 512", "hidden", "");
	refused("batch_swiglu_quant", "forward", "\"intermediate\": 512", "experts", "");
	refused("batch_swiglu_quant", "forward", "\"intermediate\": 512, \"experts\": 0", "experts: found 0", "");
	refused("batch_swiglu_quant", "backward",
		"\"intermediate\": 512, \"experts\": 8, \"quant\": {\"output\": \"rowwise\"}",
		"quant.output: found \"rowwise\"", "both");
	lg_spec *s = parse("batch_swiglu_quant", "forward",
			   "\"intermediate\": 512, \"experts\": 160, \"quant\": {\"output\": \"columnwise\"}");
	lg_spec_free(s);
	s = parse("swiglu_quant", "backward", "\"intermediate\": 128, \"quant\": {\"output\": \"rowwise\"}");
	lg_spec_free(s);
}

/* Which outputs a spec uses: the copies quant.output asks for, and bf16 dx
 * only with dx_bf16. */
static void test_uses(void **state)
{
	(void)state;
	unsigned char used[LG_MAX_ARGS];
	lg_spec *s = parse("swiglu_quant", "backward", "\"intermediate\": 128, \"quant\": {\"output\": \"rowwise\"}");
	for (int i = 0; i < 7; i++)
		used[i] = (unsigned char)lg_spec_arg_used(s, i);
	assert_true(used[B_DXQ] && used[B_DXS] && !used[B_DXQT] && !used[B_DXST] && !used[B_DX]);
	lg_spec_free(s);
	s = parse("swiglu_quant", "backward", "\"intermediate\": 128, \"dx_bf16\": true");
	assert_true(lg_spec_arg_used(s, B_DX) && lg_spec_arg_used(s, B_DXQT));
	lg_spec_free(s);
	s = parse("batch_swiglu_quant", "backward", "\"intermediate\": 128, \"experts\": 4");
	for (int i = 0; i < 9; i++)
		assert_true(lg_spec_arg_used(s, i));
	lg_spec_free(s);
}

static void geometry_at(const lg_spec *s, int64_t m, struct lg_launch_dim *d)
{
	const struct lg_family *f = lg_family_get(s->op);
	struct lg_target t;
	assert_true(lg_target_parse("sm_90a", &t));
	struct lg_plan p;
	memset(&p, 0, sizeof p);
	assert_int_equal(f->plan(s, &t, &p), LG_OK);
	const int64_t sz[1] = {m};
	f->geometry(&p, 0, sz, d);
}

/* The targets: K7 one CTA (512 threads) a 128 x 128 tile: 8192 x 512 is 64
 * token tiles x 4 blocks forward, x 8 blocks backward (K = 2n); K6 a token
 * tile (cdiv(65536, 128) + 256 experts, a bound) x 4 blocks forward, a CTA
 * each, backward the gate half's 4 blocks and the up half's 4 in a CTA
 * each (or all 8 in one); no tokens: nothing launched. */
static void test_geometry(void **state)
{
	(void)state;
	struct lg_launch_dim d;
	lg_spec *s = parse("swiglu_quant", "forward", "\"intermediate\": 512");
	geometry_at(s, 8192, &d);
	assert_true(d.grid[0] == 256 && d.block[0] == 512 && d.smem == 0);
	geometry_at(s, 0, &d);
	assert_int_equal(d.grid[0], 0);
	geometry_at(s, 1, &d);
	assert_int_equal(d.grid[0], 4);
	lg_spec_free(s);
	s = parse("swiglu_quant", "backward", "\"intermediate\": 512");
	geometry_at(s, 8192, &d);
	assert_true(d.grid[0] == 512 && d.block[0] == 512);
	lg_spec_free(s);
	s = parse("swiglu_quant", "forward", "\"intermediate\": 512, \"tile\": {\"threads\": 256, \"fblocks\": 2}");
	geometry_at(s, 8192, &d);
	assert_true(d.grid[0] == 128 && d.block[0] == 256);
	lg_spec_free(s);
	/* at most 512 + 256 token tiles, 4 a CTA by default, 4 feature groups */
	s = parse("batch_swiglu_quant", "forward", "\"intermediate\": 512, \"experts\": 256");
	geometry_at(s, 65536, &d);
	assert_true(d.grid[0] == 192 * 4 && d.block[0] == 512);
	geometry_at(s, 0, &d);
	assert_int_equal(d.grid[0], 0);
	geometry_at(s, 1, &d); /* 1 + 256 tiles */
	assert_int_equal(d.grid[0], 65 * 4);
	lg_spec_free(s);
	s = parse("batch_swiglu_quant", "forward", "\"intermediate\": 512, \"experts\": 256, \"tile\": {\"tiles\": 1}");
	geometry_at(s, 65536, &d);
	assert_true(d.grid[0] == 768 * 4 && d.block[0] == 512);
	lg_spec_free(s);
	s = parse("batch_swiglu_quant", "backward", "\"intermediate\": 512, \"experts\": 256");
	geometry_at(s, 65536, &d);
	assert_true(d.grid[0] == 768 * 2 && d.block[0] == 512);
	lg_spec_free(s);
	s = parse("batch_swiglu_quant", "backward",
		  "\"intermediate\": 512, \"experts\": 256, \"tile\": {\"fblocks\": 8}");
	geometry_at(s, 65536, &d);
	assert_int_equal(d.grid[0], 768);
	lg_spec_free(s);
	/* K6 backward: every block a CTA, whatever fblocks says above that */
	s = parse("batch_swiglu_quant", "backward",
		  "\"intermediate\": 128, \"experts\": 3, \"tile\": {\"fblocks\": 8}");
	geometry_at(s, 300, &d);
	assert_int_equal(d.grid[0], 3 + 3);
	lg_spec_free(s);
	refused("batch_swiglu_quant", "backward", "\"intermediate\": 512, \"experts\": 8, \"tile\": {\"fblocks\": 2}",
		"tile.fblocks: found 2", "4 = intermediate / 128 or at least 8");
	refused("swiglu_quant", "forward", "\"intermediate\": 512, \"tile\": {\"fblocks\": 3}", "fblocks", "3");
}

/* Every tuning candidate validates, plans and generates (K6's backward:
 * the gate half or every block a CTA); each again with 2 CTAs an SM, whose launch bounds say so. */
static void test_candidates(void **state)
{
	(void)state;
	static const struct {
		const char *op, *pass, *keys;
		int n;
	} c[] = {
		{"swiglu_quant", "forward", "\"intermediate\": 512", 16},
		{"swiglu_quant", "backward", "\"intermediate\": 128", 12}, /* 2 blocks: fblocks 1, 2 */
		{"batch_swiglu_quant", "forward", "\"intermediate\": 512, \"experts\": 256", 16},
		{"batch_swiglu_quant", "backward", "\"intermediate\": 512, \"experts\": 256", 8},
	};
	struct lg_target t;
	assert_true(lg_target_parse("sm_90a", &t));
	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		lg_spec *s = parse(c[i].op, c[i].pass, c[i].keys);
		const struct lg_family *f = lg_family_get(s->op);
		struct lg_tile_choice tc[LG_MAX_CANDIDATES];
		int n = f->candidates(s, &t, tc, LG_MAX_CANDIDATES);
		assert_true(n >= 4 && n <= c[i].n);
		int bounded = 0;
		for (int j = 0; j < n; j++) {
			struct lg_spec v;
			assert_int_equal(lg_spec_with_tile(s, &tc[j], &v), LG_OK);
			char *src = NULL;
			struct lg_plan pl;
			if (lg_generate_for(&v, &t, &pl, &src, NULL) != LG_OK)
				fail_msg("%s: %s", v.entry, lg_last_error());
			assert_non_null(strstr(src, v.entry));
			bool two = strstr(src, ", 2)") != NULL; /* __launch_bounds__(threads, 2) */
			assert_true(two == (pl.tile[lg_family_key(f, "tile.min_ctas")] == 2));
			bounded += two;
			free(src);
		}
		assert_int_equal(bounded, n / 2);
		lg_spec_free(s);
	}
}

/* The generated source for the spec of op / pass / keys (sm_90a). */
static char *source(const char *op, const char *pass, const char *keys)
{
	lg_spec *s = parse(op, pass, keys);
	struct lg_target t;
	assert_true(lg_target_parse("sm_90a", &t));
	struct lg_plan pl;
	char *src = NULL;
	if (lg_generate_for(s, &t, &pl, &src, NULL) != LG_OK)
		fail_msg("%s", lg_last_error());
	lg_spec_free(s);
	return src;
}

/* K6's token tiles a CTA: a loop over them (one counts scan for all) with
 * more than one, none with one; the backward's halves in copies of their
 * own (cta_case), the gate half's alone writing dprob. */
static void test_k6_source(void **state)
{
	(void)state;
	char *src = source("batch_swiglu_quant", "forward", "\"intermediate\": 512, \"experts\": 256");
	assert_non_null(strstr(src, "lg_expert_tiles((const int *)counts, 256, qe_slot, qe_slots, 4,"));
	assert_non_null(strstr(src, "for (int qe_i = 0; qe_i < 4; qe_i++) {"));
	assert_non_null(strstr(src, "__launch_bounds__(512, 2)"));
	free(src);
	src = source("batch_swiglu_quant", "forward", "\"intermediate\": 512, \"experts\": 256, \"tile\": {\"tiles\": 1}");
	assert_null(strstr(src, "qe_i <"));
	assert_non_null(strstr(src, "qe_slot, qe_slots, 1,"));
	free(src);
	src = source("batch_swiglu_quant", "backward", "\"intermediate\": 512, \"experts\": 256");
	const char *gate = strstr(src, "if (cg < 1) {"), *up = strstr(src, "} else { // not cg < 1");
	assert_non_null(gate);
	assert_non_null(up);
	const char *dp = strstr(src, "((float *)dprob)[");
	assert_true(dp > gate && dp < up && !strstr(up, "((float *)dprob)["));
	assert_null(strstr(up, "xa + 1024")); /* dx2's copy loads no up */
	free(src);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_forward_by_hand),
		cmocka_unit_test(test_forward_layouts),
		cmocka_unit_test(test_backward_by_hand),
		cmocka_unit_test(test_backward_values),
		cmocka_unit_test(test_experts_layout),
		cmocka_unit_test(test_experts_backward),
		cmocka_unit_test(test_slack),
		cmocka_unit_test(test_fill),
		cmocka_unit_test(test_shapes),
		cmocka_unit_test(test_spec_checks),
		cmocka_unit_test(test_uses),
		cmocka_unit_test(test_geometry),
		cmocka_unit_test(test_candidates),
		cmocka_unit_test(test_k6_source),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
