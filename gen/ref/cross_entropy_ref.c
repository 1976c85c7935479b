/*
 * cross_entropy_ref.c - CPU reference of family "cross_entropy" (docs/kernels.md
 * K9), all in float64: per row m = max x, S = sum exp(x - m) (libm exp),
 * lse = log S + m, loss = (1 - e)(lse - x_y) + e (lse - sum x / C), and
 * grad_v = (exp(x_v - m) / S - (1 - e)[v == y] - e / C) g. The shard
 * statistics and their merge follow gen/cross_entropy.c's header.
 *
 * How exact: the GPU sums exp in fp64 from fp32 ex2.approx values, so the
 * loss is compared to 1e-6 relative (docs/kernels.md 5); S to 1e-5; m is a
 * logit, bit-equal; fp32 gradients 1e-5 relative above 1e-9 absolute;
 * bf16 gradients bit for bit against the float64 value rounded once, but
 * where the GPU's fp32 error bound reaches another bf16 (a slack there):
 * REL of p g (the approximate exp of an fp32 argument, the division) and
 * TARGET_REL of the subtracted target's share (the cancellation of p - t),
 * with a wide margin. So a kernel rounding toward zero fails
 * (tests/test_compare.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "numeric_ref.h"
#include "ref.h"

enum { F_LOGITS, F_LABELS, F_STATS_IN, F_G, F_LOSS, F_SUM, F_MAX, F_STATS, F_GRAD };
enum { B_LOGITS, B_LABELS, B_SUM, B_MAX, B_DLOSS, B_GRAD };
enum { PART_FULL, PART_SHARD, PART_MERGE };
#define STATS 6
#define REL 0x1p-16
#define TARGET_REL 0x1p-21

struct ce {
	size_t M, V;   /* rows, columns of this kernel's rows */
	double C, e;   /* classes, label smoothing */
	int64_t ignore, v0;
	int part;
	bool f32, i32, fused;
};

static struct ce ce_of(const struct lg_spec *s, const struct lg_ref_case *c)
{
	struct ce k = {.M = (size_t)c->sizes[0], .V = (size_t)lg_ref_int(s, "vocab"),
		       .e = lg_ref_num(s, "label_smoothing"), .ignore = lg_ref_int(s, "ignore_index"),
		       .part = (int)lg_ref_int(s, "part"), .f32 = s->dtype == LG_DTYPE_FP32,
		       .i32 = lg_ref_int(s, "index") == 1, .fused = lg_ref_int(s, "fused") != 0};
	k.C = (double)(lg_ref_int(s, "classes") ? lg_ref_int(s, "classes") : (int64_t)k.V);
	k.v0 = k.part == PART_SHARD ? c->sizes[1] : 0;
	return k;
}

static void tol(struct lg_ref_buf *b, enum lg_cmp cmp, double rtol, double atol)
{
	b->cmp = cmp, b->rtol = rtol, b->atol = atol;
}

/* Gradients: p g (less the target's share) in fp32. With label smoothing,
 * p - e/C cancels where p is near the smoothing target e/C: the absolute
 * error is then a few fp32 ulps of e/C (times |g|, O(1) in the checks), not
 * a relative one (measured on the H200: 2.8e-9 at e/C = 0.025). */
static void grad_tol(const struct ce *k, struct lg_ref_buf *b)
{
	if (k->f32)
		tol(b, LG_CMP_FP32, 1e-5, 1e-9 + 1e-6 * k->e / k->C);
	else
		b->cmp = LG_CMP_BF16_ULP, b->ulps = 0;
}

static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	struct ce k = ce_of(s, c);
	if (s->pass == LG_PASS_BACKWARD) {
		grad_tol(&k, &c->buf[B_GRAD]);
		return;
	}
	tol(&c->buf[F_LOSS], LG_CMP_FP32, 1e-6, 1e-8);
	tol(&c->buf[F_SUM], LG_CMP_FP32, 1e-5, 1e-9);
	tol(&c->buf[F_MAX], LG_CMP_SCALE, 0.0, 0.0);
	tol(&c->buf[F_STATS], LG_CMP_FP32, 1e-5, 1e-6);
	grad_tol(&k, &c->buf[F_GRAD]);
}

static double logit(const struct ce *k, const void *p, size_t i)
{
	return k->f32 ? (double)((const float *)p)[i] : (double)lg_ref_bf16_to_f32(((const uint16_t *)p)[i]);
}

static int64_t label(const struct ce *k, const void *p, size_t i)
{
	return k->i32 ? (int64_t)((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

static void put_label(const struct ce *k, void *p, size_t i, int64_t v)
{
	if (k->i32)
		((int32_t *)p)[i] = (int32_t)v;
	else
		((int64_t *)p)[i] = v;
}

/* Gradient i: v within err of what the GPU computes (bf16: its slack). */
static void put_grad(const struct ce *k, void *p, uint16_t *slack, size_t i, double v, double err)
{
	if (k->f32)
		((float *)p)[i] = (float)v;
	else
		((uint16_t *)p)[i] = lg_ref_bf16_bounded(v, err, &slack[i]);
}

/* Row r's m, S (relative to m), sum of x, and its logit at local column
 * yl (-inf when outside the row); ex (or NULL) gets each exp(x - m). */
static void row_stats(const struct ce *k, const void *x, size_t r, int64_t yl, double *m, double *S, double *sx,
		      double *xy, double *ex)
{
	*m = -INFINITY, *S = 0.0, *sx = 0.0;
	for (size_t j = 0; j < k->V; j++) {
		double v = logit(k, x, r * k->V + j);
		*m = v > *m ? v : *m;
		*sx += v;
	}
	for (size_t j = 0; j < k->V; j++) {
		double e = exp(logit(k, x, r * k->V + j) - *m);
		*S += e;
		if (ex)
			ex[j] = e;
	}
	*xy = yl >= 0 && (size_t)yl < k->V ? logit(k, x, r * k->V + (size_t)yl) : -INFINITY;
}

static double loss_of(const struct ce *k, double lse, double xy, double sx)
{
	return (1.0 - k->e) * (lse - xy) + (k->e > 0.0 ? k->e * (lse - sx / k->C) : 0.0);
}

/* The gradient of row r into out from m, S, g (zeros when ign); ex (or
 * NULL) holds exp(x - m) of the row, as row_stats left it for this m. */
static void grad_row(const struct ce *k, const void *x, void *out, uint16_t *slack, size_t r, int64_t yl,
		     bool ign, double m, double S, double g, const double *ex)
{
	for (size_t j = 0; j < k->V; j++) {
		double v = 0.0, err = 0.0;
		if (!ign) {
			double t = k->e / k->C + ((int64_t)j == yl ? 1.0 - k->e : 0.0);
			v = lg_ref_ce_grad((ex ? ex[j] : exp(logit(k, x, r * k->V + j) - m)) / S, t, g, &err);
		}
		put_grad(k, out, slack, r * k->V + j, v, err);
	}
}

double lg_ref_ce_grad(double p, double t, double g, double *err)
{
	*err = fabs(g) * (REL * p + TARGET_REL * t);
	return (p - t) * g;
}

/* A bf16 gradient's slack (NULL for fp32), allocated here, freed with its
 * host. */
static uint16_t *slack_of(const struct ce *k, struct lg_ref_buf *b)
{
	if (k->f32 || !b->host)
		return NULL;
	free(b->slack);
	b->slack = calloc(b->count ? b->count : 1, sizeof *b->slack);
	LG_ASSERT(b->slack);
	return b->slack;
}

/* fp32 logits 2 N(0, 1), in pieces of their own streams, in parallel. */
#define PIECE 4096

struct fill_f32 {
	float *x;
	size_t n;
	uint64_t base;
};

static void fill_f32_pieces(void *ctx, size_t lo, size_t hi)
{
	const struct fill_f32 *f = ctx;
	for (size_t c = lo; c < hi; c++) {
		uint64_t st = lg_ref_stream(f->base, c);
		size_t end = (c + 1) * PIECE < f->n ? (c + 1) * PIECE : f->n;
		for (size_t i = c * PIECE; i < end; i++)
			f->x[i] = 2.0f * lg_ref_randn(&st);
	}
}

/* A row loop of the case, on lg_ref_parallel_rows's threads: every row
 * writes only its own outputs. */
struct rows {
	const struct ce *k;
	struct lg_ref_case *c;
	const struct lg_spec *s;
};

/* The backward's inputs S and m of each row's own logits. */
static void stats_rows(void *ctx, size_t lo, size_t hi)
{
	const struct rows *j = ctx;
	struct lg_ref_case *c = j->c;
	for (size_t r = lo; r < hi; r++) {
		double m, S, sx, xy;
		row_stats(j->k, c->buf[B_LOGITS].host, r, -1, &m, &S, &sx, &xy, NULL);
		((float *)c->buf[B_SUM].host)[r] = (float)S;
		((float *)c->buf[B_MAX].host)[r] = (float)m;
	}
}

static void fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed)
{
	struct ce k = ce_of(s, c);
	uint64_t st = seed;
	bool bwd = s->pass == LG_PASS_BACKWARD;
	void *x = c->buf[bwd ? B_LOGITS : F_LOGITS].host, *y = c->buf[bwd ? B_LABELS : F_LABELS].host;
	if (x) {
		size_t n = k.M * k.V;
		if (k.f32) {
			struct fill_f32 f = {x, n, lg_ref_rand(&st)};
			lg_ref_parallel_rows((n + PIECE - 1) / PIECE, PIECE * 8, fill_f32_pieces, &f);
		} else {
			lg_ref_fill_bf16(x, n, 2.0f, &st);
		}
	}
	/* labels: 1 row in 8 ignored, the rest in [0, C) (a shard: around
	 * its columns, so some rows have their label in it and some not) */
	for (size_t r = 0; r < k.M; r++) {
		uint64_t u = lg_ref_rand(&st);
		int64_t v;
		if (u % 8 == 3)
			v = k.ignore;
		else if (k.part == PART_SHARD)
			v = k.v0 + (int64_t)((u >> 8) % (2 * k.V)) - (int64_t)(k.V / 2);
		else
			v = (int64_t)((u >> 8) % (uint64_t)k.C);
		if (v < 0 || v == k.ignore)
			v = v == k.ignore ? v : 0;
		put_label(&k, y, r, v);
	}
	if (!bwd && k.part == PART_MERGE) {
		size_t ns = (size_t)c->sizes[2];
		float *o = c->buf[F_STATS_IN].host;
		for (size_t sh = 0; sh < ns; sh++)
			for (size_t r = 0; r < k.M; r++) {
				float *p = o + (sh * k.M + r) * STATS;
				double S = 1.0 + (double)(lg_ref_rand(&st) % 100000) * 0.37;
				p[0] = 4.0f + lg_ref_randn(&st);
				p[1] = (float)S;
				p[2] = (float)(S - (double)p[1]) + 1e-6f * lg_ref_randn(&st);
				p[3] = r % ns == sh ? p[0] - 3.0f * fabsf(lg_ref_randn(&st)) : -INFINITY;
				double sx = 50.0 * lg_ref_randn(&st);
				p[4] = (float)sx;
				p[5] = 1e-5f * lg_ref_randn(&st);
			}
	}
	if (!bwd && k.fused)
		*(float *)c->buf[F_G].host = 0.37f;
	if (bwd) {
		/* S, m of each row's own logits (rows in parallel); g random */
		struct rows j = {&k, c, s};
		lg_ref_parallel_rows(k.M, k.V * 20, stats_rows, &j);
		for (size_t r = 0; r < k.M; r++)
			((float *)c->buf[B_DLOSS].host)[r] = 1.0f + 0.5f * lg_ref_randn(&st);
	}
}

static void run_merge(const struct ce *k, struct lg_ref_case *c)
{
	size_t ns = (size_t)c->sizes[2];
	const float *o = c->buf[F_STATS_IN].host;
	for (size_t r = 0; r < k->M; r++) {
		bool ign = label(k, c->buf[F_LABELS].host, r) == k->ignore;
		double mx = -INFINITY, xy = -INFINITY, S = 0.0, X = 0.0;
		for (size_t sh = 0; sh < ns; sh++) {
			const float *p = o + (sh * k->M + r) * STATS;
			mx = p[0] > mx ? p[0] : mx;
			xy = p[3] > xy ? p[3] : xy;
		}
		for (size_t sh = 0; sh < ns; sh++) {
			const float *p = o + (sh * k->M + r) * STATS;
			S += ((double)p[1] + (double)p[2]) * exp((double)p[0] - mx);
			X += (double)p[4] + (double)p[5];
		}
		((float *)c->buf[F_LOSS].host)[r] = ign ? 0.0f : (float)loss_of(k, log(S) + mx, xy, X);
		if (c->buf[F_SUM].host)
			((float *)c->buf[F_SUM].host)[r] = ign ? 0.0f : (float)S;
		if (c->buf[F_MAX].host)
			((float *)c->buf[F_MAX].host)[r] = ign ? 0.0f : (float)mx;
	}
}

static void backward_rows(void *ctx, size_t lo, size_t hi)
{
	const struct rows *j = ctx;
	const struct ce *k = j->k;
	struct lg_ref_case *c = j->c;
	for (size_t r = lo; r < hi; r++) {
		int64_t y = label(k, c->buf[B_LABELS].host, r);
		grad_row(k, c->buf[B_LOGITS].host, c->buf[B_GRAD].host, c->buf[B_GRAD].slack, r, y - k->v0,
			 y == k->ignore,
			 ((const float *)c->buf[B_MAX].host)[r], ((const float *)c->buf[B_SUM].host)[r],
			 ((const float *)c->buf[B_DLOSS].host)[r], NULL);
	}
}

static void forward_rows(void *ctx, size_t lo, size_t hi)
{
	const struct rows *j = ctx;
	const struct ce *k = j->k;
	struct lg_ref_case *c = j->c;
	bool grad = k->fused && c->buf[F_GRAD].host; /* in place: nothing to compare */
	double *ex = grad ? malloc(k->V * sizeof *ex + 1) : NULL; /* the exps, once for both */
	LG_ASSERT(!grad || ex);
	for (size_t r = lo; r < hi; r++) {
		int64_t y = label(k, c->buf[F_LABELS].host, r);
		bool ign = y == k->ignore;
		double m, S, sx, xy;
		row_stats(k, c->buf[F_LOGITS].host, r, y - k->v0, &m, &S, &sx, &xy, ex);
		if (ign)
			m = S = sx = xy = 0.0;
		if (k->part == PART_SHARD) {
			float *o = (float *)c->buf[F_STATS].host + r * STATS;
			o[0] = (float)m, o[1] = (float)S, o[2] = (float)(S - (double)o[1]), o[3] = (float)xy;
			o[4] = k->e > 0.0 ? (float)sx : 0.0f, o[5] = k->e > 0.0 ? (float)(sx - (double)(float)sx) : 0.0f;
			continue;
		}
		((float *)c->buf[F_LOSS].host)[r] = ign ? 0.0f : (float)loss_of(k, log(S) + m, xy, sx);
		if (c->buf[F_SUM].host)
			((float *)c->buf[F_SUM].host)[r] = (float)S;
		if (c->buf[F_MAX].host)
			((float *)c->buf[F_MAX].host)[r] = (float)m;
		if (grad)
			grad_row(k, c->buf[F_LOGITS].host, c->buf[F_GRAD].host, c->buf[F_GRAD].slack, r, y, ign, m, S,
				 *(const float *)c->buf[F_G].host, ex);
	}
	free(ex);
}

/* Rows are independent: they run on lg_ref_parallel_rows's threads. */
static void run(const struct lg_spec *s, struct lg_ref_case *c)
{
	struct ce k = ce_of(s, c);
	struct rows j = {&k, c, s};
	if (s->pass == LG_PASS_BACKWARD) {
		/* in place: nothing to compare (the inputs stay as drawn) */
		if (c->buf[B_GRAD].host) {
			slack_of(&k, &c->buf[B_GRAD]);
			lg_ref_parallel_rows(k.M, k.V * 30, backward_rows, &j);
		}
		return;
	}
	if (k.part == PART_MERGE) {
		run_merge(&k, c);
		return;
	}
	if (k.fused && c->buf[F_GRAD].host)
		slack_of(&k, &c->buf[F_GRAD]);
	lg_ref_parallel_rows(k.M, k.V * (k.fused ? 50 : 20), forward_rows, &j);
}

const struct lg_ref_family lg_ref_cross_entropy = {describe, fill, run};
