/*
 * rmsnorm_ref.c - CPU reference of family "rmsnorm" (K1, plain): forward
 * y = (x * r) * w rounded to bf16; backward dx = r g w - r^3 x (sum x g w)/n
 * and dw = sum over rows of x g r, all in float64.
 *
 * How exact (ref.h's compare kinds): r is the same fp32 on the GPU (the fill
 * draws only rows whose r no fp64 summation order changes,
 * lg_ref_rrms_stable), so y, whose two fp32 products the reference does as
 * the kernel does, and rms are compared bit for bit. dx has an fp32 dot
 * product in the GPU's own order: each element gets the bf16 values that an
 * fp32 evaluation can reach (the error bound of dx_slack) as its slack, and
 * must be exact where that is one value. dw, a long fp32 sum, keeps a
 * relative tolerance.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "numeric_ref.h"
#include "ref.h"

enum { F_X, F_W, F_Y, F_RMS };
enum { B_DY, B_X, B_W, B_RMS, B_DX, B_DW, B_WS };

static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	if (s->pass == LG_PASS_FORWARD) {
		c->buf[F_Y].cmp = LG_CMP_BF16_ULP;
		c->buf[F_RMS].cmp = LG_CMP_FP32_ULP;
		return;
	}
	c->buf[B_DX].cmp = LG_CMP_BF16_ULP;
	c->buf[B_DW].cmp = LG_CMP_FP32, c->buf[B_DW].rtol = 1e-4, c->buf[B_DW].atol = 1e-4;
}

static void fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed)
{
	size_t n = (size_t)lg_ref_int(s, "hidden"), mm = (size_t)c->sizes[0];
	double eps = lg_ref_num(s, "eps");
	uint64_t st = seed;
	bool fwd = s->pass == LG_PASS_FORWARD;
	uint16_t *x = c->buf[fwd ? F_X : B_X].host, *w = c->buf[fwd ? F_W : B_W].host;
	for (size_t i = 0; i < mm; i++) {
		float scale = ldexpf(1.0f, (int)(lg_ref_rand(&st) % 9) - 4);
		do /* a row whose r the GPU's summation order could change: draw again */
			lg_ref_fill_bf16(x + i * n, n, scale, &st);
		while (!lg_ref_rrms_stable(lg_ref_sumsq_bf16(x + i * n, n), (int64_t)n, eps));
	}
	lg_ref_fill_norm_weight(w, n, &st);
	if (fwd)
		return;
	lg_ref_fill_bf16(c->buf[B_DY].host, mm * n, 1.0f, &st);
	float *rms = c->buf[B_RMS].host; /* the forward's rms, as training passes it */
	for (size_t i = 0; i < mm; i++)
		rms[i] = lg_ref_rrms(lg_ref_sumsq_bf16(x + i * n, n), (int64_t)n, eps);
}

/* Sign-magnitude bf16 on a line of integers, for distances in ulps. */
static int32_t bf16_ord(uint16_t h) { return (h & 0x8000) ? -(int32_t)(h & 0x7fff) : (int32_t)h; }

/* ulps from a to b as the compare counts them: +0 and -0 are 1 apart. */
static uint16_t ulps_between(uint16_t a, uint16_t b)
{
	int32_t d = bf16_ord(a) - bf16_ord(b);
	d = d < 0 ? -d : d;
	return (uint16_t)(a == b ? 0 : d == 0 ? 1 : d > 65535 ? 65535 : d);
}

/* The GPU computes each dx in fp32 (docs/kernels.md K1 backward, as the kernel
 * writes it): D' = the fp32 sum of the n products x g w in some order (each
 * product of three bf16 is exact in fp32), c = ((r r) r) (D' / n), then
 * (r g) w - c x, with or without FMA contraction, then bf16. With u = 2^-24
 * and the exact values A = r g w, B = r^3 x D / n:
 *   |D' - D| <= (n - 1) u / (1 - (n - 1) u) sum |x g w|   (any order)
 *   |fp32 dx - (A - B)| <= 4u |A| + 8u |B| + |r^3 x / n| |D' - D| (1 + 8u)
 * (A takes at most 2 roundings and the result 1; B at most 5 and 1, so
 * 4u and 8u leave room), plus the reference's own float64 error. Every fp32
 * value in [d - e, d + e] rounds into [bf16(d - e), bf16(d + e)]: the slack
 * is how far that range reaches from the reference value, in bf16 ulps. */
static uint16_t dx_slack(uint16_t ref, double d, double e)
{
	float lo32 = (float)(d - e), hi32 = (float)(d + e);
	/* usually the whole range lies strictly inside ref's rounding cell,
	 * between the midpoints to its neighbours: no slack (this is only a
	 * shortcut; the conversions below give the same answer) */
	if ((ref & 0x7fff) != 0 && (ref & 0x7fff) < 0x7f7f) {
		double r = lg_ref_bf16_to_f32(ref), below = lg_ref_bf16_to_f32((uint16_t)(ref - 1)),
		       above = lg_ref_bf16_to_f32((uint16_t)(ref + 1)); /* same sign, one ulp nearer/farther from 0 */
		double m1 = (r + below) / 2, m2 = (r + above) / 2;
		if (m1 > m2) {
			double t = m1;
			m1 = m2;
			m2 = t;
		}
		if (lo32 > m1 && hi32 < m2)
			return 0;
	}
	uint16_t lo = lg_ref_f32_to_bf16(lo32), hi = lg_ref_f32_to_bf16(hi32);
	uint16_t a = ulps_between(lo, ref), b = ulps_between(hi, ref);
	return a > b ? a : b;
}

static void run_bwd(size_t n, size_t mm, struct lg_ref_case *c)
{
	const uint16_t *dy = c->buf[B_DY].host, *x = c->buf[B_X].host, *w = c->buf[B_W].host;
	const float *rms = c->buf[B_RMS].host;
	uint16_t *dx = c->buf[B_DX].host;
	float *dw = c->buf[B_DW].host;
	double *acc = calloc(n, sizeof *acc);
	free(c->buf[B_DX].slack);
	uint16_t *slack = c->buf[B_DX].slack = malloc(mm * n * sizeof *slack);
	LG_ASSERT(acc && slack);
	const double u = 0x1p-24, nn = (double)n;
	const double gamma = (nn - 1) * u / (1 - (nn - 1) * u) + 2 * nn * 0x1p-53; /* fp32 sum; ours */
	for (size_t i = 0; i < mm; i++) {
		double r = rms[i], dot = 0.0, sabs = 0.0;
		const uint16_t *xr = x + i * n, *gr = dy + i * n;
		for (size_t k = 0; k < n; k++) {
			double t = (double)lg_ref_bf16_to_f32(xr[k]) * lg_ref_bf16_to_f32(gr[k]) *
				   lg_ref_bf16_to_f32(w[k]);
			dot += t;
			sabs += fabs(t);
		}
		double dot_err = gamma * sabs + nn * 0x1p-149; /* products below 2^-126 may flush */
		for (size_t k = 0; k < n; k++) {
			double xv = lg_ref_bf16_to_f32(xr[k]), gv = lg_ref_bf16_to_f32(gr[k]);
			double a = r * gv * lg_ref_bf16_to_f32(w[k]), bx = r * r * r * xv / nn;
			double d = a - bx * dot;
			double e = 4 * u * fabs(a) + 8 * u * fabs(bx * dot) + fabs(bx) * dot_err * (1 + 8 * u) +
				   0x1p-48 * (fabs(a) + fabs(bx * dot));
			dx[i * n + k] = lg_ref_f32_to_bf16((float)d);
			slack[i * n + k] = dx_slack(dx[i * n + k], d, e);
			acc[k] += xv * gv * r;
		}
	}
	for (size_t k = 0; k < n; k++)
		dw[k] = (float)acc[k];
	free(acc);
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
			float r = lg_ref_rrms(lg_ref_sumsq_bf16(x + i * n, n), (int64_t)n, eps);
			rms[i] = r;
			for (size_t k = 0; k < n; k++)
				y[i * n + k] = lg_ref_f32_to_bf16((lg_ref_bf16_to_f32(x[i * n + k]) * r) *
								  lg_ref_bf16_to_f32(w[k]));
		}
		return;
	}
	run_bwd(n, mm, c);
}

const struct lg_ref_family lg_ref_rmsnorm = {describe, fill, run};
