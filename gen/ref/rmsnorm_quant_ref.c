/*
 * rmsnorm_quant_ref.c - CPU reference of family "rmsnorm_quant" (K1):
 * float64 sums of squares, y = (x * r) * w in fp32, then the blockwise e4m3
 * quantisation of y shared by the quantising references (quant_ref.c).
 *
 * Everything here is exactly what the GPU must produce: the fill draws only
 * rows whose r no fp64 summation order changes (lg_ref_rrms_stable), y is
 * the same two fp32 products, amax a maximum, the scale and v / s correctly
 * rounded fp32 operations, e4m3 and its rounding fixed. So q, qt, s, st and
 * rms are compared bit for bit.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "numeric_ref.h"
#include "ref.h"

enum { X, W, Q, S, RMS, QT, ST };

static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	(void)s;
	c->buf[Q].cmp = LG_CMP_E4M3_ULP;
	c->buf[S].cmp = LG_CMP_SCALE;
	c->buf[RMS].cmp = LG_CMP_FP32_ULP;
	c->buf[QT].cmp = LG_CMP_E4M3_ULP;
	c->buf[ST].cmp = LG_CMP_SCALE;
}

/* x: lg_ref_fill_norm_input (rows of every magnitude, zero rows, outliers,
 * each with a stable r); w about 1. */
static void fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed)
{
	size_t n = (size_t)lg_ref_int(s, "hidden");
	uint64_t st = seed;
	uint16_t *w = c->buf[W].host;
	lg_ref_fill_norm_input(c->buf[X].host, c->sizes[0], n, lg_ref_num(s, "eps"), &st);
	lg_ref_fill_norm_weight(w, n, &st);
}

static void run(const struct lg_spec *s, struct lg_ref_case *c)
{
	struct lg_quant qr = lg_spec_quant(s);
	size_t n = (size_t)lg_ref_int(s, "hidden"), mm = (size_t)c->sizes[0];
	const uint16_t *x = c->buf[X].host, *w = c->buf[W].host;
	float *y = malloc(mm * n * sizeof *y), *rms = c->buf[RMS].host;
	LG_ASSERT(y);
	for (size_t i = 0; i < mm; i++) {
		float r = lg_ref_rrms(lg_ref_sumsq_bf16(x + i * n, n), (int64_t)n, lg_ref_num(s, "eps"));
		rms[i] = r;
		for (size_t k = 0; k < n; k++)
			y[i * n + k] = (lg_ref_bf16_to_f32(x[i * n + k]) * r) * lg_ref_bf16_to_f32(w[k]);
	}
	lg_ref_quant_flat(y, mm, n, qr, c->buf[Q].host, c->buf[S].host, c->buf[QT].host, c->buf[ST].host);
	free(y);
}

const struct lg_ref_family lg_ref_rmsnorm_quant = {describe, fill, run};
