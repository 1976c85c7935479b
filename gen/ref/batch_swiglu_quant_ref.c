/*
 * batch_swiglu_quant_ref.c - CPU reference of family "batch_swiglu_quant"
 * (docs/kernels.md K6), and the SwiGLU reference swiglu_quant (K7) shares
 * (swiglu_ref.h). In float64, with a = x1, u = x2, p the row's prob (1 for
 * K7), s = 1 / (1 + e^-a):
 *   forward  y = a s u p, quantised (per expert for K6);
 *   backward dx1 = g u p s (1 + a (1 - s)), dx2 = g a s p, quantised with
 *            K = 2n; dp = sum_j a s u g (K6); dx in bf16 (dx_bf16).
 *
 * How exact: the GPU works in fp32 with an approximate exp, so its values
 * are those here within LG_SWIGLU_ERR_REL of their size (for dx1 of the
 * size of its terms: g u p s (1 + |a|), the factor may cancel) plus
 * LG_SWIGLU_ERR_ABS. The quantised copies are compared element by element
 * with a slack from that bound (lg_ref_quant_tol): bit-equal wherever no
 * value in the bound crosses a rounding boundary of e4m3 or of the scale.
 * Power-of-two scales are bit-equal: the fill nudges every input whose
 * value's bound straddles a power of two times 448 (where the scale of a
 * block it is the amax of could go either way). dp, an fp32 sum, gets a
 * relative tolerance; dx in bf16 a slack like the payloads.
 * Inputs and values are drawn and computed row by row on
 * lg_ref_parallel_rows's threads (each row from its own random stream).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "numeric_ref.h"
#include "swiglu_ref.h"

/* ------------------------------------------------------------ compare */

void lg_swiglu_ref_describe(const struct lg_spec *s, struct lg_ref_case *c, const struct lg_swiglu_ref_args *a)
{
	c->buf[a->q].cmp = c->buf[a->qt].cmp = LG_CMP_E4M3_ULP;
	c->buf[a->s].cmp = c->buf[a->st].cmp = LG_CMP_FP32_ULP;
	if (a->dp >= 0 && s->pass == LG_PASS_BACKWARD)
		c->buf[a->dp].cmp = LG_CMP_FP32, c->buf[a->dp].rtol = 1e-4, c->buf[a->dp].atol = 3e-4;
	if (a->dx >= 0 && s->pass == LG_PASS_BACKWARD)
		c->buf[a->dx].cmp = LG_CMP_BF16_ULP;
}

/* ------------------------------------------------------------- values */

/* The problem, read from a case. */
struct io {
	size_t m, n;       /* tokens, intermediate */
	const uint16_t *x; /* [m, 2n] */
	const uint16_t *g; /* [m, n]; NULL: forward */
	const float *p;    /* [m]; NULL: 1 */
};

static double bf(const uint16_t *v, size_t i) { return lg_ref_bf16_to_f32(v[i]); }
static double sigmoid(double a) { return 1.0 / (1.0 + exp(-a)); }

/* Column j of row i: the forward's y_j (v[0]) or the backward's dx1_j and
 * dx2_j (v[0], v[1]), each with its bound; returns how many. */
static int column(const struct io *t, size_t i, size_t j, float v[2], float e[2])
{
	double a = bf(t->x, i * 2 * t->n + j), u = bf(t->x, i * 2 * t->n + t->n + j);
	double p = t->p ? t->p[i] : 1.0, sg = sigmoid(a);
	if (!t->g) {
		double y = a * sg * u * p;
		v[0] = (float)y, e[0] = (float)(LG_SWIGLU_ERR_REL * fabs(y) + LG_SWIGLU_ERR_ABS);
		return 1;
	}
	double g = bf(t->g, i * t->n + j);
	double d1 = g * u * p * sg * (1.0 + a * (1.0 - sg)), d2 = g * a * sg * p;
	v[0] = (float)d1, e[0] = (float)(LG_SWIGLU_ERR_REL * fabs(g * u * p * sg) * (2.0 + 2.0 * fabs(a)) +
					 LG_SWIGLU_ERR_ABS);
	v[1] = (float)d2, e[1] = (float)(LG_SWIGLU_ERR_REL * fabs(d2) + LG_SWIGLU_ERR_ABS);
	return 2;
}

/* Every value of the pass: [m, n] (forward) or [m, 2n] (backward), the
 * rows in parallel. */
struct values_job {
	const struct io *t;
	float *v, *e;
};

static void values_rows(void *ctx, size_t lo, size_t hi)
{
	const struct values_job *j = ctx;
	const struct io *t = j->t;
	size_t w = t->g ? 2 * t->n : t->n;
	for (size_t i = lo; i < hi; i++)
		for (size_t k = 0; k < t->n; k++) {
			float cv[2], ce[2];
			int nv = column(t, i, k, cv, ce);
			j->v[i * w + k] = cv[0], j->e[i * w + k] = ce[0];
			if (nv == 2)
				j->v[i * w + t->n + k] = cv[1], j->e[i * w + t->n + k] = ce[1];
		}
}

static void values(const struct io *t, float *v, float *e)
{
	struct values_job j = {t, v, e};
	lg_ref_parallel_rows(t->m, t->n * 60, values_rows, &j);
}

static struct io io_of(const struct lg_spec *s, const struct lg_ref_case *c, const struct lg_swiglu_ref_args *a)
{
	struct io t = {.m = (size_t)c->sizes[0], .n = (size_t)lg_ref_int(s, "intermediate"),
		       .x = c->buf[a->x].host};
	if (s->pass == LG_PASS_BACKWARD)
		t.g = c->buf[a->g].host;
	if (a->p >= 0)
		t.p = c->buf[a->p].host;
	return t;
}

/* --------------------------------------------------------------- fill */

/* Could a power-of-two scale of a block whose amax is in [|v| - e, |v| + e]
 * go either way? (The quick test: the binades of the ends differ, or an
 * end is a power of two.) */
static bool straddles(float v, float e)
{
	float lo = fabsf(v) - e, hi = fabsf(v) + e;
	if (lo < 0)
		lo = 0;
	int el, eh;
	float ml = frexpf(lo / 448.0f, &el), mh = frexpf(hi / 448.0f, &eh);
	if (el == eh && ml != 0.5f && mh != 0.5f)
		return false;
	return lg_ref_scale(lo, true) != lg_ref_scale(hi, true);
}

/* Expert counts summing to m: the first experts take 0, 1, 127, 128, 129,
 * 0, 255, 256, 257 rows while they fit, the rest random (about m / experts
 * each), the last what is left. */
static void fill_counts(int32_t *counts, size_t experts, size_t m, uint64_t *st)
{
	static const size_t special[] = {0, 1, 127, 128, 129, 0, 255, 256, 257};
	size_t left = m;
	for (size_t e = 0; e < experts; e++) {
		size_t c;
		if (e + 1 == experts)
			c = left;
		else if (e < sizeof special / sizeof special[0] && special[e] <= left)
			c = special[e];
		else
			c = (size_t)(lg_ref_rand(st) % (2 * left / (experts - e) + 1));
		if (c > left)
			c = left;
		counts[e] = (int32_t)c;
		left -= c;
	}
}

/* One row of inputs: x1 about N(0, 4) with a few values far out (|a| up
 * to 12, where silu's sigmoid saturates); x2 and g at scales 2^-8 .. 2^8
 * (g 2^-4 .. 2^4), a few rows of zeros, one feature of zeros. Then every
 * input of the row whose value straddles a power-of-two scale boundary is
 * nudged (x2 forward, g backward, by 3/4) until none does. */
struct fill_job {
	const struct io *t; /* the inputs being written (p already drawn) */
	uint16_t *x, *g;
	size_t zero_col;
	uint64_t base;
	bool pow2;
};

static void fill_rows(void *ctx, size_t lo, size_t hi)
{
	const struct fill_job *f = ctx;
	size_t m = f->t->m, n = f->t->n;
	for (size_t i = lo; i < hi; i++) {
		uint64_t st = lg_ref_stream(f->base, i);
		uint16_t *row = f->x + i * 2 * n;
		for (size_t j = 0; j < n; j++)
			row[j] = lg_ref_f32_to_bf16(lg_ref_randn(&st) * 2.0f);
		for (size_t j = 0; j < n; j++)
			if (lg_ref_rand(&st) % 64 == 0)
				row[j] = lg_ref_f32_to_bf16((lg_ref_rand(&st) % 2 ? 1.0f : -1.0f) *
							    (8.0f + (float)(lg_ref_rand(&st) % 5)));
		uint64_t kind = lg_ref_rand(&st) % 61;
		float scale = m > 1 && kind == 0 ? 0.0f : ldexpf(1.0f, (int)(lg_ref_rand(&st) % 17) - 8);
		for (size_t j = 0; j < n; j++)
			row[n + j] = lg_ref_f32_to_bf16(lg_ref_randn(&st) * scale);
		if (m > 1)
			row[n + f->zero_col] = 0;
		if (f->g) {
			float gs = m > 1 && kind == 1 ? 0.0f : ldexpf(1.0f, (int)(lg_ref_rand(&st) % 9) - 4);
			for (size_t j = 0; j < n; j++)
				f->g[i * n + j] = lg_ref_f32_to_bf16(lg_ref_randn(&st) * gs);
		}
		for (size_t j = 0; f->pow2 && j < n; j++) {
			uint16_t *in = f->g ? f->g + i * n + j : row + n + j;
			for (int tries = 0;; tries++) {
				float v[2], e[2];
				int k = column(f->t, i, j, v, e);
				bool bad = straddles(v[0], e[0]) || (k == 2 && straddles(v[1], e[1]));
				if (!bad)
					break;
				*in = tries < 64 ? lg_ref_f32_to_bf16(lg_ref_bf16_to_f32(*in) * 0.75f) : 0;
			}
		}
	}
}

/* The rows' inputs as fill_rows draws them, each row from its own stream,
 * in parallel; probs in (0, 1], a few 0 (drawn first: the nudging reads
 * them); the expert counts. */
void lg_swiglu_ref_fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed,
			const struct lg_swiglu_ref_args *a)
{
	uint64_t st = seed;
	size_t m = (size_t)c->sizes[0], n = (size_t)lg_ref_int(s, "intermediate");
	struct fill_job f = {.x = c->buf[a->x].host, .pow2 = lg_spec_quant(s).round_scale};
	f.g = a->g >= 0 && s->pass == LG_PASS_BACKWARD ? c->buf[a->g].host : NULL;
	f.zero_col = n ? (size_t)(lg_ref_rand(&st) % n) : 0;
	f.base = lg_ref_rand(&st);
	if (a->p >= 0) {
		float *p = c->buf[a->p].host;
		for (size_t i = 0; i < m; i++)
			p[i] = lg_ref_rand(&st) % 50 == 0 ? 0.0f : (float)((lg_ref_rand(&st) >> 11) + 1) * 0x1p-53f;
	}
	if (a->counts >= 0)
		fill_counts(c->buf[a->counts].host, c->buf[a->counts].count, m, &st);
	struct io t = io_of(s, c, a);
	f.t = &t;
	lg_ref_parallel_rows(m, n * 80, fill_rows, &f);
}

/* ---------------------------------------------------------------- run */

static uint16_t *slack_of(struct lg_ref_buf *b)
{
	free(b->slack);
	b->slack = calloc(b->count ? b->count : 1, sizeof *b->slack);
	LG_ASSERT(b->slack);
	return b->slack;
}

/* The bf16 of each value, with the slack of its bound (in pieces, in
 * parallel). */
struct bf16_job {
	const float *v, *e;
	size_t count;
	uint16_t *out, *slack;
};

#define PIECE 65536

static void bf16_pieces(void *ctx, size_t lo, size_t hi)
{
	const struct bf16_job *j = ctx;
	size_t end = hi * PIECE < j->count ? hi * PIECE : j->count;
	for (size_t i = lo * PIECE; i < end; i++) {
		uint16_t nom = lg_ref_f32_to_bf16(j->v[i]), lo16 = lg_ref_f32_to_bf16(j->v[i] - j->e[i]),
			 hi16 = lg_ref_f32_to_bf16(j->v[i] + j->e[i]);
		j->out[i] = nom;
		uint16_t dl = lg_ref_steps(nom, lo16, 16), dh = lg_ref_steps(nom, hi16, 16);
		j->slack[i] = dl > dh ? dl : dh;
	}
}

static void bf16_tol(const float *v, const float *e, size_t count, uint16_t *out, uint16_t *slack)
{
	struct bf16_job j = {v, e, count, out, slack};
	lg_ref_parallel_rows((count + PIECE - 1) / PIECE, PIECE * 12, bf16_pieces, &j);
}

/* dp of each row: sum_j a s(a) u g in float64, in order (rows in parallel). */
struct dp_job {
	const struct io *t;
	float *dp;
};

static void dp_rows(void *ctx, size_t lo, size_t hi)
{
	const struct dp_job *j = ctx;
	const struct io *t = j->t;
	for (size_t i = lo; i < hi; i++) {
		double sum = 0.0;
		for (size_t k = 0; k < t->n; k++) {
			double x1 = bf(t->x, i * 2 * t->n + k), x2 = bf(t->x, i * 2 * t->n + t->n + k);
			sum += x1 * sigmoid(x1) * x2 * bf(t->g, i * t->n + k);
		}
		j->dp[i] = (float)sum;
	}
}

void lg_swiglu_ref_run(const struct lg_spec *s, struct lg_ref_case *c, const struct lg_swiglu_ref_args *a)
{
	struct io t = io_of(s, c, a);
	bool bwd = t.g != NULL;
	size_t w = bwd ? 2 * t.n : t.n, count = t.m * w;
	float *v = malloc((count ? count : 1) * sizeof *v), *e = malloc((count ? count : 1) * sizeof *e);
	LG_ASSERT(v && e);
	values(&t, v, e);
	struct lg_quant qr = lg_spec_quant(s);
	struct lg_ref_qout o = {.q = c->buf[a->q].host, .qt = c->buf[a->qt].host, .s = c->buf[a->s].host,
				.st = c->buf[a->st].host};
	if (qr.output != LG_QOUT_COLUMNWISE)
		o.q_slack = slack_of(&c->buf[a->q]), o.s_slack = slack_of(&c->buf[a->s]);
	if (qr.output != LG_QOUT_ROWWISE)
		o.qt_slack = slack_of(&c->buf[a->qt]), o.st_slack = slack_of(&c->buf[a->st]);
	if (a->counts >= 0) {
		const struct lg_ref_buf *cb = &c->buf[a->counts];
		size_t st_rows = w ? c->buf[a->st].count / w : 0;
		lg_ref_quant_experts_tol(v, e, t.m, w, cb->host, cb->count, qr, &o, st_rows);
	} else { /* swiglu_quant's flat copy: qt rows round_up(m, 128) apart */
		o.qt_ld = lg_ref_qt_pitch(t.m);
		lg_ref_quant_tol(v, e, t.m, w, qr, &o);
	}
	if (bwd && a->dx >= 0 && c->buf[a->dx].count)
		bf16_tol(v, e, count, c->buf[a->dx].host, slack_of(&c->buf[a->dx]));
	if (bwd && a->dp >= 0) {
		struct dp_job j = {&t, c->buf[a->dp].host};
		lg_ref_parallel_rows(t.m, t.n * 30, dp_rows, &j);
	}
	free(v);
	free(e);
}

/* ------------------------------------------------- batch_swiglu_quant */

static const struct lg_swiglu_ref_args fwd = {.x = 0, .g = -1, .p = 1, .counts = 2,
					      .q = 3, .s = 4, .qt = 5, .st = 6, .dp = -1, .dx = -1};
static const struct lg_swiglu_ref_args bwd = {.x = 1, .g = 0, .p = 2, .counts = 3,
					      .q = 4, .s = 5, .qt = 7, .st = 8, .dp = 6, .dx = 9};

static const struct lg_swiglu_ref_args *args(const struct lg_spec *s)
{
	return s->pass == LG_PASS_FORWARD ? &fwd : &bwd;
}

static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	lg_swiglu_ref_describe(s, c, args(s));
}

static void fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed)
{
	lg_swiglu_ref_fill(s, c, seed, args(s));
}

static void run(const struct lg_spec *s, struct lg_ref_case *c)
{
	lg_swiglu_ref_run(s, c, args(s));
}

const struct lg_ref_family lg_ref_batch_swiglu_quant = {describe, fill, run};
