/*
 * cross_entropy_quant_ref.c - CPU reference of family "cross_entropy_quant"
 * (docs/kernels.md K9, 1.3): K9's gradient in float64 as the cross entropy
 * reference computes it (lg_ref_ce_grad: (exp(x - m) / S - t) g, with its
 * bound on the GPU's fp32 value), rounded to bf16 (the GPU rounds its
 * fp32 value, as cross_entropy's backward does), then the blockwise
 * quantisation of that bf16 gradient (lg_ref_quant_tol, the quantisers'
 * reference).
 *
 * How exact: where the GPU's fp32 value's bound rounds to one bf16 (nearly
 * everywhere) its bf16 is the reference's, and the copies are compared bit
 * for bit; where the bound reaches another bf16, the values between the two
 * bf16 ends are the element's interval for lg_ref_quant_tol, which gives the
 * payloads and scales their slack from it (a power-of-two scale whose
 * block's amax interval straddles 448 times a power of two: any scale).
 * m and S are drawn as the forward gives them (float64 of the bf16 logits,
 * rounded to fp32; an ignored row 0, 0); g[0] = 0.37.
 * qt's rows are the run-time size qt_pitch apart (0: round_up(tokens,
 * 128)); the columns past round_up(tokens, 128), which the kernel leaves
 * alone, keep the harness's 0xff poison.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "numeric_ref.h"
#include "ref.h"

enum { LOGITS, LABELS, SUM, MAX, G, Q, SC, QT, ST };

struct io {
	size_t m, n;
	double e;
	int64_t ignore;
	bool i32;
	struct lg_ref_case *c;
	float *y, *err; /* the bf16 gradient widened, and its interval's half width */
};

static int64_t label(const struct io *t, size_t r)
{
	const void *p = t->c->buf[LABELS].host;
	return t->i32 ? (int64_t)((const int32_t *)p)[r] : ((const int64_t *)p)[r];
}

static struct io io_of(const struct lg_spec *s, struct lg_ref_case *c)
{
	return (struct io){.m = (size_t)c->sizes[0], .n = (size_t)lg_ref_int(s, "vocab"),
			   .e = lg_ref_num(s, "label_smoothing"), .ignore = lg_ref_int(s, "ignore_index"),
			   .i32 = lg_ref_int(s, "index") == 1, .c = c};
}

static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	(void)s;
	c->buf[Q].cmp = c->buf[QT].cmp = LG_CMP_E4M3_ULP;
	c->buf[SC].cmp = c->buf[ST].cmp = LG_CMP_FP32_ULP;
	/* An exact scale (amax / 448) whose block's amax may be one bf16 ulp off
	 * (the GPU's exp) moves by 2^16 / 1.75 fp32 steps when amax's mantissa
	 * is 1.75 or more, else by 2^17 / 1.75 (the quotient's mantissa below
	 * 1.75 / 1.75 renormalises: one binade down, steps twice as fine), that
	 * is up to 74899, +-1 for the divide's rounding; a slack saturates at
	 * 2^16 - 1 (lg_ref_quant_tol): 74901 - 65535 steps more. Seen on the
	 * H200 at 1 to 9 scales of 65536-471552 (vocab 1024 to 201088) and on the
	 * H100 at 74898 steps (8191 tokens, vocab 1024). A power-of-two scale's
	 * smallest error is 2^23 steps: still caught. */
	c->buf[SC].ulps = c->buf[ST].ulps = 74901 - 65535;
}

/* m and S of each row from its bf16 logits in float64, as the forward. */
static void stats_rows(void *ctx, size_t lo, size_t hi)
{
	const struct io *t = ctx;
	const uint16_t *x = t->c->buf[LOGITS].host;
	for (size_t r = lo; r < hi; r++) {
		double m = -INFINITY, sum = 0.0;
		for (size_t j = 0; j < t->n; j++)
			m = fmax(m, (double)lg_ref_bf16_to_f32(x[r * t->n + j]));
		for (size_t j = 0; j < t->n; j++)
			sum += exp((double)lg_ref_bf16_to_f32(x[r * t->n + j]) - m);
		bool ign = label(t, r) == t->ignore;
		((float *)t->c->buf[SUM].host)[r] = ign ? 0.0f : (float)sum;
		((float *)t->c->buf[MAX].host)[r] = ign ? 0.0f : (float)m;
	}
}

static void fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed)
{
	struct io t = io_of(s, c);
	uint64_t st = seed;
	lg_ref_fill_bf16(c->buf[LOGITS].host, t.m * t.n, 2.0f, &st);
	/* labels: 1 row in 8 ignored, the rest in [0, C) */
	for (size_t r = 0; r < t.m; r++) {
		uint64_t u = lg_ref_rand(&st);
		int64_t v = u % 8 == 3 ? t.ignore : (int64_t)((u >> 8) % t.n);
		if (t.i32)
			((int32_t *)c->buf[LABELS].host)[r] = (int32_t)v;
		else
			((int64_t *)c->buf[LABELS].host)[r] = v;
	}
	*(float *)c->buf[G].host = 0.37f;
	lg_ref_parallel_rows(t.m, t.n * 20, stats_rows, &t);
}

/* Each row's bf16 gradient and the interval of the GPU's bf16 around it. */
static void grad_rows(void *ctx, size_t lo, size_t hi)
{
	const struct io *t = ctx;
	const uint16_t *x = t->c->buf[LOGITS].host;
	double g = *(const float *)t->c->buf[G].host, C = (double)t->n;
	for (size_t r = lo; r < hi; r++) {
		int64_t yl = label(t, r);
		bool ign = yl == t->ignore;
		double m = ((const float *)t->c->buf[MAX].host)[r], S = ((const float *)t->c->buf[SUM].host)[r];
		for (size_t j = 0; j < t->n; j++) {
			size_t i = r * t->n + j;
			double v = 0.0, err = 0.0;
			if (!ign) {
				double p = exp((double)lg_ref_bf16_to_f32(x[i]) - m) / S;
				v = lg_ref_ce_grad(p, t->e / C + ((int64_t)j == yl ? 1.0 - t->e : 0.0), g, &err);
			}
			uint16_t slack;
			float y = lg_ref_bf16_to_f32(lg_ref_bf16_bounded(v, err, &slack));
			t->y[i] = y;
			t->err[i] = 0.0f;
			if (slack) { /* the GPU's bf16 is between the ends' roundings */
				float a = lg_ref_bf16_to_f32(lg_ref_f32_to_bf16((float)(v - err)));
				float b = lg_ref_bf16_to_f32(lg_ref_f32_to_bf16((float)(v + err)));
				t->err[i] = fmaxf(fabsf(y - a), fabsf(y - b));
			}
		}
	}
}

/* A compared output's slack, allocated here, freed with its buffer. */
static uint16_t *slack_for(struct lg_ref_buf *b)
{
	if (!b->host)
		return NULL;
	free(b->slack);
	b->slack = calloc(b->count ? b->count : 1, sizeof *b->slack);
	LG_ASSERT(b->slack);
	return b->slack;
}

static void run(const struct lg_spec *s, struct lg_ref_case *c)
{
	struct io t = io_of(s, c);
	size_t count = t.m * t.n;
	t.y = malloc((count ? count : 1) * sizeof *t.y);
	t.err = malloc((count ? count : 1) * sizeof *t.err);
	LG_ASSERT(t.y && t.err);
	lg_ref_parallel_rows(t.m, t.n * 30, grad_rows, &t);
	struct lg_ref_qout o = {.q = c->buf[Q].host, .qt = c->buf[QT].host, .s = c->buf[SC].host,
				.st = c->buf[ST].host, .q_slack = slack_for(&c->buf[Q]),
				.s_slack = slack_for(&c->buf[SC]), .qt_slack = slack_for(&c->buf[QT]),
				.st_slack = slack_for(&c->buf[ST]), .qt_ld = lg_ref_qt_pitch(t.m)};
	size_t tail = o.qt_ld, ld = c->sizes[1] ? (size_t)c->sizes[1] : tail;
	o.qt_ld = ld;
	lg_ref_quant_tol(t.y, t.err, t.m, t.n, lg_spec_quant(s), &o);
	if (o.qt && lg_spec_quant(s).output != LG_QOUT_ROWWISE && ld > tail) /* another launch's columns */
		for (size_t k = 0; k < t.n; k++)
			memset(o.qt + k * ld + tail, 0xff, ld - tail);
	free(t.y);
	free(t.err);
}

const struct lg_ref_family lg_ref_cross_entropy_quant = {describe, fill, run};
