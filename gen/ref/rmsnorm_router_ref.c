/*
 * rmsnorm_router_ref.c - CPU reference of family "rmsnorm_router" (K3b):
 * float64 sums of squares, r, y = (x * r) * w in fp32, y rounded to bf16,
 * the logits as float64 sums of exact products of route_w with the value of
 * y the GPU's `precision` multiplies (bf16: the bf16 y; bf16xT: the sum of
 * the first T bf16 terms of fp32 y, each the rounding of what the terms
 * before leave), the blockwise e4m3 copies of fp32 y (quant_ref.c; a
 * partial last 1x128 block as if padded with zeros).
 *
 * r, y, q, s, qt, st are what the GPU must produce bit for bit (the fill
 * draws rows whose r no summation order changes). The logits differ by the
 * tensor cores' fp32 summation only (router_gemm's forward tolerance).
 * lg_ref_rmsnorm_router_logits gives the logits of any precision, and of
 * fp32 y exactly (terms 0), for the tests that measure what each precision
 * loses.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "numeric_ref.h"
#include "ref.h"
#include "rmsnorm_router_ref.h"

enum { X, W, RW, Y, RMS, LOGITS, Q, S, QT, ST };

static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	(void)s;
	c->buf[Y].cmp = LG_CMP_BF16_ULP;
	c->buf[RMS].cmp = LG_CMP_FP32_ULP;
	c->buf[LOGITS].cmp = LG_CMP_FP32, c->buf[LOGITS].rtol = 1e-5, c->buf[LOGITS].atol = 5e-5;
	c->buf[Q].cmp = LG_CMP_E4M3_ULP;
	c->buf[S].cmp = LG_CMP_SCALE;
	c->buf[QT].cmp = LG_CMP_E4M3_ULP;
	c->buf[ST].cmp = LG_CMP_SCALE;
}

static void fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed)
{
	size_t n = (size_t)lg_ref_int(s, "hidden");
	uint64_t st = seed;
	uint16_t *w = c->buf[W].host;
	lg_ref_fill_norm_input(c->buf[X].host, c->sizes[0], n, lg_ref_num(s, "eps"), &st);
	lg_ref_fill_norm_weight(w, n, &st);
	/* route_w ~ N(0, 1 / hidden): logits of rms about 1 */
	lg_ref_fill_bf16(c->buf[RW].host, c->buf[RW].count, (float)(1.0 / sqrt((double)n)), &st);
}

void lg_ref_rmsnorm_router_y(const uint16_t *x, const uint16_t *w, size_t m, size_t n, double eps, float *y,
			     float *rms)
{
	for (size_t i = 0; i < m; i++) {
		float r = lg_ref_rrms(lg_ref_sumsq_bf16(x + i * n, n), (int64_t)n, eps);
		if (rms)
			rms[i] = r;
		for (size_t k = 0; k < n; k++)
			y[i * n + k] = (lg_ref_bf16_to_f32(x[i * n + k]) * r) * lg_ref_bf16_to_f32(w[k]);
	}
}

/* The value of v the GPU multiplies with `terms` bf16 terms (0: v). */
static double as_terms(float v, int terms)
{
	if (terms == 0)
		return v;
	double sum = 0.0;
	float rest = v;
	for (int t = 0; t < terms; t++) {
		float b = lg_ref_bf16_to_f32(lg_ref_f32_to_bf16(rest));
		sum += b;
		rest -= b; /* exact */
	}
	return sum;
}

void lg_ref_rmsnorm_router_logits(const float *y, const uint16_t *rw, size_t m, size_t n, size_t e, int terms,
				  double *logits)
{
	double *a = malloc((n + 1) * sizeof *a);
	LG_ASSERT(a);
	for (size_t i = 0; i < m; i++) {
		for (size_t k = 0; k < n; k++)
			a[k] = as_terms(y[i * n + k], terms);
		for (size_t j = 0; j < e; j++) {
			double acc = 0.0;
			for (size_t k = 0; k < n; k++)
				acc += a[k] * lg_ref_bf16_to_f32(rw[j * n + k]);
			logits[i * e + j] = acc;
		}
	}
	free(a);
}

static void run(const struct lg_spec *s, struct lg_ref_case *c)
{
	struct lg_quant qr = lg_spec_quant(s);
	size_t n = (size_t)lg_ref_int(s, "hidden"), e = (size_t)lg_ref_int(s, "experts"), m = (size_t)c->sizes[0];
	size_t np = (n + 127) / 128 * 128; /* the features padded to whole quant blocks */
	float *y = malloc((m * n + 1) * sizeof *y), *yp = calloc(m * np + 1, sizeof *yp);
	double *lg = malloc((m * e + 1) * sizeof *lg);
	uint8_t *qp = malloc(m * np + 1);
	LG_ASSERT(y && yp && lg && qp);
	lg_ref_rmsnorm_router_y(c->buf[X].host, c->buf[W].host, m, n, lg_ref_num(s, "eps"), y, c->buf[RMS].host);
	uint16_t *yb = c->buf[Y].host;
	for (size_t i = 0; i < m * n; i++)
		yb[i] = lg_ref_f32_to_bf16(y[i]);
	lg_ref_rmsnorm_router_logits(y, c->buf[RW].host, m, n, e, 1 + (int)lg_ref_int(s, "precision"), lg);
	for (size_t i = 0; i < m * e; i++)
		((float *)c->buf[LOGITS].host)[i] = (float)lg[i];
	for (size_t i = 0; i < m; i++)
		memcpy(yp + i * np, y + i * n, n * sizeof *y);
	/* qt, st only with "both", where hidden is a multiple of 128 (np == n) */
	lg_ref_quant_flat(yp, m, np, qr, qp, c->buf[S].host, c->buf[QT].host, c->buf[ST].host);
	if (c->buf[Q].count)
		for (size_t i = 0; i < m; i++)
			memcpy((uint8_t *)c->buf[Q].host + i * n, qp + i * np, n);
	free(y);
	free(yp);
	free(lg);
	free(qp);
}

const struct lg_ref_family lg_ref_rmsnorm_router = {describe, fill, run};
