/*
 * fp8_quant_ref.c - CPU reference of family "fp8_quant" (KERNELS.md 1.3):
 * the bf16 input widened to fp32 (exact), then the shared blockwise e4m3
 * quantisation (quant_ref.c).
 */
#include <math.h>
#include <stdlib.h>

#include "error.h"
#include "numeric_ref.h"
#include "ref.h"

enum { X, Q, S, QT, ST };

static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	(void)s;
	c->buf[Q].cmp = LG_CMP_E4M3_ULP; /* bit-equal: ulps 0 */
	c->buf[S].cmp = LG_CMP_SCALE;
	c->buf[QT].cmp = LG_CMP_E4M3_ULP;
	c->buf[ST].cmp = LG_CMP_SCALE;
}

/* Rows of varied magnitude (2^-8 .. 2^8), a few rows of +0 and of -0, rows
 * far below the 1e-30 scale floor and far above 448, outliers, and an
 * all-zero feature: scales of every size, floored scales, zero blocks
 * (rowwise and columnwise) and signed zeros get exercised. */
static void fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed)
{
	size_t n = (size_t)lg_ref_int(s, "hidden");
	int64_t m = c->sizes[0];
	uint64_t st = seed;
	uint16_t *x = c->buf[X].host;
	size_t zero_col = (size_t)(lg_ref_rand(&st) % n);
	for (int64_t i = 0; i < m; i++) {
		uint16_t *row = x + (size_t)i * n;
		uint64_t kind = lg_ref_rand(&st) % 101;
		float scale = ldexpf(1.0f, (int)(lg_ref_rand(&st) % 17) - 8);
		if (m > 1 && kind == 0)
			scale = 0.0f;
		else if (kind == 1)
			scale = 0x1p-120f; /* amax / 448 below 1e-30 */
		else if (kind == 2)
			scale = 0x1p100f;
		lg_ref_fill_bf16(row, n, scale, &st);
		if (m > 1 && kind == 3)
			for (size_t k = 0; k < n; k++)
				row[k] = 0x8000; /* -0: amax 0, payload -0 (0x80) */
		if (scale != 0.0f && lg_ref_rand(&st) % 7 == 0) {
			size_t k = (size_t)(lg_ref_rand(&st) % n);
			row[k] = lg_ref_f32_to_bf16(lg_ref_bf16_to_f32(row[k]) * 40.0f);
		}
		if (m > 1)
			row[zero_col] = 0;
	}
}

static void run(const struct lg_spec *s, struct lg_ref_case *c)
{
	size_t n = (size_t)lg_ref_int(s, "hidden"), m = (size_t)c->sizes[0], count = m * n;
	const uint16_t *x = c->buf[X].host;
	float *y = malloc((count ? count : 1) * sizeof *y);
	LG_ASSERT(y);
	for (size_t i = 0; i < count; i++)
		y[i] = lg_ref_bf16_to_f32(x[i]);
	lg_ref_quant_blockwise(y, m, n, lg_spec_quant(s), c->buf[Q].host, c->buf[S].host, c->buf[QT].host,
			       c->buf[ST].host);
	free(y);
}

const struct lg_ref_family lg_ref_fp8_quant = {describe, fill, run};
