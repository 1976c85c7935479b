/*
 * group_rmsnorm_gate_ref.c - CPU reference of family "group_rmsnorm_gate"
 * (docs/kernels.md K8), all in float64. For token (b, l), group i of d = dim /
 * groups values, r = 1 / sqrt(sum_group x^2 / d + eps), s = sigmoid(gate):
 *   forward  y = x r w s
 *   backward dx = r dy w s - r^3 x (sum_group x dy w s) / d,
 *            dgate = x r w dy s (1 - s), dw = sum over tokens of x r dy s
 *            (over the groups too with a shared weight).
 * gate, y, dy and dgate are [seq, batch, dim] with transpose, else [batch,
 * seq, dim] as x.
 *
 * How exact: the GPU works in fp32 (r from an fp32 sum of squares and
 * rsqrt.approx by default, else rounded to fp32 from fp64; ex2.approx and
 * rcp.approx in the sigmoid; fp32 sums). Each bf16 output is the float64
 * value rounded once, bit for bit, but where the GPU's fp32 error bound
 * (below, REL and ABS: with a wide margin over those approximations and
 * sums) reaches another bf16 value: there its slack allows the reach. So a
 * kernel that rounds toward zero fails (tests/test_compare.c). dw, a long
 * fp32 sum, a relative tolerance.
 */
#include <math.h>
#include <stdlib.h>

#include "error.h"
#include "numeric_ref.h"
#include "ref.h"

enum { F_X, F_GATE, F_W, F_Y };
/* The GPU's fp32 error bound on a product of a few factors (the approximate
 * rsqrt, exp and reciprocal at 2^-21 or better, and roundings): relative
 * 2^-16; on a sum of n terms: n 2^-22 times the sum of their magnitudes;
 * on sigmoid's 1 - s: 2^-19 absolute. */
#define REL 0x1p-16
#define SUM_REL 0x1p-22
#define ONE_MINUS_S 0x1p-19
enum { B_DY, B_X, B_GATE, B_W, B_DX, B_DGATE, B_DW, B_WS };

static void bf16_tol(struct lg_ref_buf *b)
{
	b->cmp = LG_CMP_BF16_ULP, b->ulps = 0;
}

static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	if (s->pass == LG_PASS_FORWARD) {
		bf16_tol(&c->buf[F_Y]);
		return;
	}
	bf16_tol(&c->buf[B_DX]);
	bf16_tol(&c->buf[B_DGATE]);
	c->buf[B_DW].cmp = LG_CMP_FP32, c->buf[B_DW].rtol = 1e-3, c->buf[B_DW].atol = 1e-3;
}

static void fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed)
{
	bool fwd = s->pass == LG_PASS_FORWARD;
	size_t n = (size_t)(c->sizes[0] * c->sizes[1] * lg_ref_int(s, "dim"));
	uint64_t st = seed;
	struct lg_ref_buf *x = &c->buf[fwd ? F_X : B_X], *g = &c->buf[fwd ? F_GATE : B_GATE],
			  *w = &c->buf[fwd ? F_W : B_W];
	lg_ref_fill_bf16(x->host, n, 1.0f, &st);
	lg_ref_fill_bf16(g->host, n, 2.0f, &st);
	uint16_t *wv = w->host;
	lg_ref_fill_norm_weight(wv, w->count, &st);
	if (!fwd)
		lg_ref_fill_bf16(c->buf[B_DY].host, n, 1.0f, &st);
}

/* The problem's dimensions, and where token (b, l) sits in each layout. */
struct dims {
	size_t B, L, dim, d, groups;
	bool transpose, shared;
};

static size_t row_x(const struct dims *k, size_t b, size_t l) { return b * k->L + l; }
static size_t row_g(const struct dims *k, size_t b, size_t l)
{
	return k->transpose ? l * k->B + b : b * k->L + l;
}
static double bf(const uint16_t *p, size_t i) { return lg_ref_bf16_to_f32(p[i]); }
static double sigmoid(double v) { return 1.0 / (1.0 + exp(-v)); }

/* The tensors of a pass (NULL where the pass has none). */
struct io {
	const uint16_t *x, *gate, *w, *dy;
	uint16_t *y, *dx, *dgate;
	uint16_t *y_slack, *dx_slack, *dgate_slack;
	double *dw; /* float64 sums */
};

/* One group of one token: x at ox, gate, y, dy, dgate at og, w at ow. */
static void unit(const struct dims *k, const struct io *t, double eps, size_t ox, size_t og, size_t ow)
{
	double ss = 0.0, dot = 0.0, adot = 0.0, n = (double)k->d;
	for (size_t j = 0; j < k->d; j++) {
		ss += bf(t->x, ox + j) * bf(t->x, ox + j);
		if (t->dy) {
			double term = bf(t->x, ox + j) * bf(t->dy, og + j) * bf(t->w, ow + j) *
				      sigmoid(bf(t->gate, og + j));
			dot += term;
			adot += fabs(term);
		}
	}
	double r = 1.0 / sqrt(ss / n + eps);
	for (size_t j = 0; j < k->d; j++) {
		double xv = bf(t->x, ox + j), wv = bf(t->w, ow + j), sg = sigmoid(bf(t->gate, og + j));
		if (!t->dy) {
			double y = xv * r * wv * sg;
			t->y[og + j] = lg_ref_bf16_bounded(y, REL * fabs(y), &t->y_slack[og + j]);
			continue;
		}
		double dv = bf(t->dy, og + j);
		double a = r * dv * wv * sg, b = r * r * r * xv * dot / n;
		double berr = REL * fabs(b) + fabs(r * r * r * xv / n) * SUM_REL * n * adot;
		t->dx[ox + j] = lg_ref_bf16_bounded(a - b, REL * fabs(a) + berr, &t->dx_slack[ox + j]);
		double pre = xv * r * wv * dv * sg, dg = pre * (1.0 - sg);
		t->dgate[og + j] = lg_ref_bf16_bounded(dg, REL * fabs(dg) + fabs(pre) * ONE_MINUS_S,
						       &t->dgate_slack[og + j]);
		t->dw[ow + j] += xv * r * dv * sg;
	}
}

/* A bf16 output's slack, allocated (zeroed) here, freed with its host. */
static uint16_t *slack_of(struct lg_ref_buf *b)
{
	free(b->slack);
	b->slack = calloc(b->count ? b->count : 1, sizeof *b->slack);
	LG_ASSERT(b->slack);
	return b->slack;
}

static void run(const struct lg_spec *s, struct lg_ref_case *c)
{
	bool fwd = s->pass == LG_PASS_FORWARD;
	struct dims k = {.B = (size_t)c->sizes[0], .L = (size_t)c->sizes[1], .dim = (size_t)lg_ref_int(s, "dim"),
			 .groups = (size_t)lg_ref_int(s, "groups"), .transpose = lg_ref_int(s, "transpose") != 0,
			 .shared = lg_ref_int(s, "shared_weight") != 0};
	k.d = k.dim / k.groups;
	size_t wlen = k.shared ? k.d : k.dim;
	struct io t = {.x = c->buf[fwd ? F_X : B_X].host, .gate = c->buf[fwd ? F_GATE : B_GATE].host,
		       .w = c->buf[fwd ? F_W : B_W].host};
	if (fwd) {
		t.y = c->buf[F_Y].host;
		t.y_slack = slack_of(&c->buf[F_Y]);
	} else {
		t.dy = c->buf[B_DY].host, t.dx = c->buf[B_DX].host, t.dgate = c->buf[B_DGATE].host;
		t.dx_slack = slack_of(&c->buf[B_DX]), t.dgate_slack = slack_of(&c->buf[B_DGATE]);
		t.dw = calloc(wlen, sizeof *t.dw);
		LG_ASSERT(t.dw);
	}
	for (size_t b = 0; b < k.B; b++)
		for (size_t l = 0; l < k.L; l++)
			for (size_t i = 0; i < k.groups; i++)
				unit(&k, &t, lg_ref_num(s, "eps"), row_x(&k, b, l) * k.dim + i * k.d,
				     row_g(&k, b, l) * k.dim + i * k.d, k.shared ? 0 : i * k.d);
	if (fwd)
		return;
	for (size_t j = 0; j < wlen; j++)
		((float *)c->buf[B_DW].host)[j] = (float)t.dw[j];
	free(t.dw);
}

const struct lg_ref_family lg_ref_group_rmsnorm_gate = {describe, fill, run};
