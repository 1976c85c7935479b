/*
 * rmsnorm_ref.c - CPU reference of family "rmsnorm" (K1, plain): forward
 * y = (x * r) * w rounded to bf16; backward dx = r g w - r^3 x (sum x g w)/n
 * and dw = sum over rows of x g r, all in float64.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "numeric_ref.h"
#include "ref.h"

enum { F_X, F_W, F_Y, F_RMS };
enum { B_DY, B_X, B_W, B_RMS, B_DX, B_DW, B_WS };

static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	if (s->pass == LG_PASS_FORWARD) {
		c->buf[F_Y].cmp = LG_CMP_BF16, c->buf[F_Y].rtol = 1e-2, c->buf[F_Y].atol = 1e-3;
		c->buf[F_RMS].cmp = LG_CMP_FP32, c->buf[F_RMS].rtol = 1e-6;
		return;
	}
	c->buf[B_DX].cmp = LG_CMP_BF16, c->buf[B_DX].rtol = 2e-2, c->buf[B_DX].atol = 1e-3;
	c->buf[B_DW].cmp = LG_CMP_FP32, c->buf[B_DW].rtol = 1e-4, c->buf[B_DW].atol = 1e-4;
}

static double row_sumsq(const uint16_t *x, size_t n)
{
	double ss = 0.0;
	for (size_t k = 0; k < n; k++) {
		double v = lg_ref_bf16_to_f32(x[k]);
		ss += v * v;
	}
	return ss;
}

static void fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed)
{
	size_t n = (size_t)lg_ref_int(s, "hidden"), mm = (size_t)c->sizes[0];
	double eps = lg_ref_num(s, "eps");
	uint64_t st = seed;
	bool fwd = s->pass == LG_PASS_FORWARD;
	uint16_t *x = c->buf[fwd ? F_X : B_X].host, *w = c->buf[fwd ? F_W : B_W].host;
	for (size_t i = 0; i < mm; i++)
		lg_ref_fill_bf16(x + i * n, n, ldexpf(1.0f, (int)(lg_ref_rand(&st) % 9) - 4), &st);
	for (size_t k = 0; k < n; k++)
		w[k] = lg_ref_f32_to_bf16(1.0f + 0.25f * lg_ref_randn(&st));
	if (fwd)
		return;
	lg_ref_fill_bf16(c->buf[B_DY].host, mm * n, 1.0f, &st);
	float *rms = c->buf[B_RMS].host; /* the forward's rms, as training passes it */
	for (size_t i = 0; i < mm; i++)
		rms[i] = lg_ref_rrms(row_sumsq(x + i * n, n), (int64_t)n, eps);
}

static void run(const struct lg_spec *s, struct lg_ref_case *c)
{
	size_t n = (size_t)lg_ref_int(s, "hidden"), mm = (size_t)c->sizes[0];
	double eps = lg_ref_num(s, "eps");
	if (s->pass == LG_PASS_FORWARD) {
		const uint16_t *x = c->buf[F_X].host, *w = c->buf[F_W].host;
		uint16_t *y = c->buf[F_Y].host;
		float *rms = c->buf[F_RMS].host;
		for (size_t i = 0; i < mm; i++) {
			float r = lg_ref_rrms(row_sumsq(x + i * n, n), (int64_t)n, eps);
			rms[i] = r;
			for (size_t k = 0; k < n; k++)
				y[i * n + k] = lg_ref_f32_to_bf16((lg_ref_bf16_to_f32(x[i * n + k]) * r) *
								  lg_ref_bf16_to_f32(w[k]));
		}
		return;
	}
	const uint16_t *dy = c->buf[B_DY].host, *x = c->buf[B_X].host, *w = c->buf[B_W].host;
	const float *rms = c->buf[B_RMS].host;
	uint16_t *dx = c->buf[B_DX].host;
	float *dw = c->buf[B_DW].host;
	double *acc = calloc(n, sizeof *acc);
	for (size_t i = 0; i < mm && acc; i++) {
		double r = rms[i], dot = 0.0;
		const uint16_t *xr = x + i * n, *gr = dy + i * n;
		for (size_t k = 0; k < n; k++)
			dot += (double)lg_ref_bf16_to_f32(xr[k]) * lg_ref_bf16_to_f32(gr[k]) *
			       lg_ref_bf16_to_f32(w[k]);
		for (size_t k = 0; k < n; k++) {
			double xv = lg_ref_bf16_to_f32(xr[k]), gv = lg_ref_bf16_to_f32(gr[k]);
			double d = r * gv * lg_ref_bf16_to_f32(w[k]) - r * r * r * xv * dot / (double)n;
			dx[i * n + k] = lg_ref_f32_to_bf16((float)d);
			acc[k] += xv * gv * r;
		}
	}
	for (size_t k = 0; k < n && acc; k++)
		dw[k] = (float)acc[k];
	free(acc);
}

const struct lg_ref_family lg_ref_rmsnorm = {describe, fill, run};
