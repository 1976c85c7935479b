/*
 * router_gemm_ref.c - CPU reference of family "router_gemm" (docs/kernels.md
 * K3), float64 sums of exact products:
 *   forward   logits [M, N] = x [M, K] . w [N, K]^T
 *   backward  dx [M, K] = g [M, N] . w (rounded to bf16), dw [N, K] = g^T . x
 * with g = dy as the declared `precision` defines it: the sum of dy's
 * first 1, 2 or 3 bf16 terms, each the rounding (to nearest even) of what
 * the terms before leave (bf16: dy rounded; bf16x3: dy exactly); tf32: dy
 * rounded to tf32 (to nearest, ties away), which 2 terms hold exactly.
 *
 * How exact: products of bf16 terms are exact on the GPU and summed in
 * fp32 by the tensor cores, whose accumulation may truncate (up to one
 * half ulp of the running sum a k16 step): atol 5e-5 of the rms in the
 * forward; 2e-5 of the rms for dx, a sum over the experts; for dw, a sum
 * over the tokens of a slice (all M of them when the plan's split is 1,
 * as at hidden 7168), terms x M / 16 steps of at most 2^-24 of a partial
 * up to ~4 times dw's rms: atol max(2e-5, terms x M x 2^-26) of the rms
 * (1.2e-4 at 8192 tokens, one term; the H200's misses of the former
 * 2e-5 there, bf16x2, were about 4e-5 of the rms). dx adds its own bf16
 * rounding (rtol).
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "numeric_ref.h"
#include "ref.h"

enum { F_X, F_W, F_Y };
enum { B_DY, B_X, B_W, B_DX, B_DW, B_WS };

enum { PREC_TF32 = 3 }; /* "tf32" in router_gemm.c's precision_names: dy rounded to tf32 */

/* v rounded to tf32 as cvt.rna.tf32.f32: to nearest, ties away from zero
 * (10 fraction bits; finite v). */
static float tf32_rna(float v)
{
	uint32_t u;
	memcpy(&u, &v, sizeof u);
	u = (u + 0x1000u) & ~0x1fffu;
	memcpy(&v, &u, sizeof v);
	return v;
}

/* The bf16 terms of dy at the spec's precision (tf32: 2). */
static int terms_of(const struct lg_spec *s)
{
	int p = (int)lg_ref_int(s, "precision");
	return p == PREC_TF32 ? 2 : p + 1;
}

/* dy as the backward multiplies it: the sum of its first `terms` bf16 terms
 * (of its tf32 rounding: 2 hold it exactly). */
static double dy_terms(float v, int terms, bool tf32)
{
	if (tf32)
		v = tf32_rna(v);
	double sum = 0.0;
	for (int i = 0; i < terms; i++) {
		float t = lg_ref_bf16_to_f32(lg_ref_f32_to_bf16(v));
		sum += t;
		v -= t; /* exact: v and its bf16 rounding share the exponent's range */
	}
	return sum;
}

static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	if (s->pass == LG_PASS_FORWARD) {
		c->buf[F_Y].cmp = LG_CMP_FP32, c->buf[F_Y].rtol = 1e-5, c->buf[F_Y].atol = 5e-5;
		return;
	}
	c->buf[B_DX].cmp = LG_CMP_BF16, c->buf[B_DX].rtol = 1.6e-2, c->buf[B_DX].atol = 2e-5;
	double steps = (double)terms_of(s) * (double)c->sizes[0];
	c->buf[B_DW].cmp = LG_CMP_FP32, c->buf[B_DW].rtol = 2e-5, c->buf[B_DW].atol = fmax(2e-5, steps * 0x1p-26);
}

static void fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed)
{
	uint64_t st = seed;
	bool fwd = s->pass == LG_PASS_FORWARD;
	struct lg_ref_buf *x = &c->buf[fwd ? F_X : B_X], *w = &c->buf[fwd ? F_W : B_W];
	lg_ref_fill_bf16(x->host, x->count, 1.0f, &st);
	/* w ~ N(0, 1 / N): dx = dy . w of rms about 1 at every expert count
	 * (the comparison's atol is of max(1, rms)) */
	lg_ref_fill_bf16(w->host, w->count, (float)(1.0 / sqrt((double)lg_ref_int(s, "experts"))), &st);
	if (fwd)
		return;
	float *dy = c->buf[B_DY].host;
	for (size_t i = 0; i < c->buf[B_DY].count; i++)
		dy[i] = lg_ref_randn(&st);
}

static double bf(const uint16_t *p, size_t i) { return lg_ref_bf16_to_f32(p[i]); }

/* The products, in parallel: y and dx by rows m (each a sum over k, or
 * over n in order), dw by blocks of rows n (each element a sum over m in
 * order): every sum in the order of the plain loops, so the bits of a
 * serial run. The bf16 operands are widened to double once (exact); y
 * keeps four sums going at once (four n, each in k order) so that the adds
 * overlap. */
struct gemm {
	size_t M, K, N;
	int terms;
	bool tf32;
	const uint16_t *x;
	const double *w; /* w widened, [N, K] */
	const float *dy;
	float *y, *dw;
	uint16_t *dx;
};

static void widen_row(const uint16_t *p, size_t K, double *out)
{
	for (size_t k = 0; k < K; k++)
		out[k] = bf(p, k);
}

static void y_rows(void *ctx, size_t lo, size_t hi)
{
	const struct gemm *g = ctx;
	size_t K = g->K, N = g->N;
	double *xr = malloc(K * sizeof *xr + 1);
	LG_ASSERT(xr);
	for (size_t m = lo; m < hi; m++) {
		widen_row(g->x + m * K, K, xr);
		size_t n = 0;
		for (; n + 4 <= N; n += 4) {
			const double *w0 = g->w + n * K, *w1 = w0 + K, *w2 = w1 + K, *w3 = w2 + K;
			double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
			for (size_t k = 0; k < K; k++) {
				a0 += xr[k] * w0[k];
				a1 += xr[k] * w1[k];
				a2 += xr[k] * w2[k];
				a3 += xr[k] * w3[k];
			}
			g->y[m * N + n] = (float)a0, g->y[m * N + n + 1] = (float)a1;
			g->y[m * N + n + 2] = (float)a2, g->y[m * N + n + 3] = (float)a3;
		}
		for (; n < N; n++) {
			double acc = 0.0;
			for (size_t k = 0; k < K; k++)
				acc += xr[k] * g->w[n * K + k];
			g->y[m * N + n] = (float)acc;
		}
	}
	free(xr);
}

static void dx_rows(void *ctx, size_t lo, size_t hi)
{
	const struct gemm *g = ctx;
	size_t K = g->K;
	double *row = malloc(K * sizeof *row + 1);
	LG_ASSERT(row);
	for (size_t m = lo; m < hi; m++) {
		for (size_t k = 0; k < K; k++)
			row[k] = 0.0;
		for (size_t n = 0; n < g->N; n++) {
			double d = dy_terms(g->dy[m * g->N + n], g->terms, g->tf32);
			const double *wn = g->w + n * K;
			for (size_t k = 0; k < K; k++)
				row[k] += d * wn[k];
		}
		for (size_t k = 0; k < K; k++)
			g->dx[m * K + k] = lg_ref_f32_to_bf16((float)row[k]);
	}
	free(row);
}

#define DW_BLOCK 8 /* rows n of dw a unit: x is read once for all of them */

static void dw_blocks(void *ctx, size_t lo, size_t hi)
{
	const struct gemm *g = ctx;
	size_t K = g->K, N = g->N;
	double *acc = malloc(DW_BLOCK * K * sizeof *acc + 1), *xr = malloc(K * sizeof *xr + 1);
	LG_ASSERT(acc && xr);
	for (size_t u = lo; u < hi; u++) {
		size_t n0 = u * DW_BLOCK, nb = N - n0 < DW_BLOCK ? N - n0 : DW_BLOCK;
		for (size_t i = 0; i < nb * K; i++)
			acc[i] = 0.0;
		for (size_t m = 0; m < g->M; m++) {
			widen_row(g->x + m * K, K, xr);
			for (size_t j = 0; j < nb; j++) {
				double d = dy_terms(g->dy[m * N + n0 + j], g->terms, g->tf32);
				double *a = acc + j * K;
				for (size_t k = 0; k < K; k++)
					a[k] += d * xr[k];
			}
		}
		for (size_t i = 0; i < nb * K; i++)
			g->dw[n0 * K + i] = (float)acc[i];
	}
	free(acc);
	free(xr);
}

static void run(const struct lg_spec *s, struct lg_ref_case *c)
{
	struct gemm g = {.M = (size_t)c->sizes[0], .K = (size_t)lg_ref_int(s, "hidden"),
			 .N = (size_t)lg_ref_int(s, "experts")};
	bool fwd = s->pass == LG_PASS_FORWARD;
	const uint16_t *w = c->buf[fwd ? F_W : B_W].host;
	double *wd = malloc(g.N * g.K * sizeof *wd + 1);
	LG_ASSERT(wd);
	for (size_t i = 0; i < g.N * g.K; i++)
		wd[i] = bf(w, i);
	g.w = wd;
	if (fwd) {
		g.x = c->buf[F_X].host, g.y = c->buf[F_Y].host;
		lg_ref_parallel_rows(g.M, g.N * g.K, y_rows, &g);
	} else {
		g.terms = terms_of(s);
		g.tf32 = lg_ref_int(s, "precision") == PREC_TF32;
		g.x = c->buf[B_X].host, g.dy = c->buf[B_DY].host;
		g.dx = c->buf[B_DX].count ? c->buf[B_DX].host : NULL;
		g.dw = c->buf[B_DW].count ? c->buf[B_DW].host : NULL;
		if (g.dx)
			lg_ref_parallel_rows(g.M, g.N * g.K, dx_rows, &g);
		if (g.dw)
			lg_ref_parallel_rows((g.N + DW_BLOCK - 1) / DW_BLOCK, DW_BLOCK * g.M * g.K, dw_blocks, &g);
	}
	free(wd);
}

const struct lg_ref_family lg_ref_router_gemm = {describe, fill, run};
