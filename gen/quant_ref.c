/*
 * quant_ref.c - the blockwise FP8 quantisation of KERNELS.md 1.2 and 1.3 in
 * plain C, shared by the references of every quantising family: an fp32
 * [m, n] array into the rowwise copy (1x128 blocks, q [m, n], scales
 * s [n/128, m]) and the columnwise copy (128x1 blocks, transposed:
 * qt [n, m], scales st [ceil(m/128), n]). A partial last token block takes
 * its amax over its real rows only.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

#include "numeric_ref.h"
#include "ref.h"

void lg_ref_quant_blockwise(const float *y, size_t m, size_t n, struct lg_quant qr, uint8_t *q, float *s,
			    uint8_t *qt, float *st)
{
	bool pow2 = qr.round_scale;
	size_t nb = n / 128;
	if (qr.output != LG_QOUT_COLUMNWISE) {
		for (size_t i = 0; i < m; i++)
			for (size_t b = 0; b < nb; b++) {
				const float *v = y + i * n + b * 128;
				float amax = 0.0f;
				for (int k = 0; k < 128; k++)
					amax = fmaxf(amax, fabsf(v[k]));
				float sv = lg_ref_scale(amax, pow2);
				s[b * m + i] = sv;
				for (int k = 0; k < 128; k++)
					q[i * n + b * 128 + (size_t)k] = lg_ref_quant(v[k], sv, pow2);
			}
	}
	if (qr.output != LG_QOUT_ROWWISE) {
		for (size_t t = 0; t * 128 < m; t++) {
			size_t r0 = t * 128, rows = m - r0 < 128 ? m - r0 : 128;
			for (size_t k = 0; k < n; k++) {
				float amax = 0.0f;
				for (size_t i = 0; i < rows; i++)
					amax = fmaxf(amax, fabsf(y[(r0 + i) * n + k]));
				float sv = lg_ref_scale(amax, pow2);
				st[t * n + k] = sv;
				for (size_t i = 0; i < rows; i++)
					qt[k * m + r0 + i] = lg_ref_quant(y[(r0 + i) * n + k], sv, pow2);
			}
		}
	}
}

/* Rows of varied magnitude (2^-8 .. 2^8), a few rows of +0 and of -0, rows
 * far below the 1e-30 scale floor and far above 448, outliers, and an
 * all-zero feature: scales of every size, floored scales, zero blocks
 * (rowwise and columnwise) and signed zeros get exercised. */
void lg_ref_fill_quant_input(uint16_t *x, size_t m, size_t n, uint64_t *st)
{
	size_t zero_col = (size_t)(lg_ref_rand(st) % n);
	for (size_t i = 0; i < m; i++) {
		uint16_t *row = x + i * n;
		uint64_t kind = lg_ref_rand(st) % 101;
		float scale = ldexpf(1.0f, (int)(lg_ref_rand(st) % 17) - 8);
		if (m > 1 && kind == 0)
			scale = 0.0f;
		else if (kind == 1)
			scale = 0x1p-120f; /* amax / 448 below 1e-30 */
		else if (kind == 2)
			scale = 0x1p100f;
		lg_ref_fill_bf16(row, n, scale, st);
		if (m > 1 && kind == 3)
			for (size_t k = 0; k < n; k++)
				row[k] = 0x8000; /* -0: amax 0, payload -0 (0x80) */
		if (scale != 0.0f && lg_ref_rand(st) % 7 == 0) {
			size_t k = (size_t)(lg_ref_rand(st) % n);
			row[k] = lg_ref_f32_to_bf16(lg_ref_bf16_to_f32(row[k]) * 40.0f);
		}
		if (m > 1)
			row[zero_col] = 0;
	}
}

void lg_ref_quant_experts(const float *y, size_t m, size_t n, const int32_t *counts, size_t experts,
			  struct lg_quant qr, uint8_t *q, float *s, uint8_t *qt, float *st, size_t st_rows)
{
	bool rows = qr.output != LG_QOUT_COLUMNWISE, cols = qr.output != LG_QOUT_ROWWISE;
	/* what the kernel leaves alone keeps the harness's 0xff poison */
	if (rows) {
		memset(q, 0xff, m * n);
		memset(s, 0xff, m * (n / 128) * sizeof *s);
	}
	if (cols) {
		memset(qt, 0xff, m * n);
		memset(st, 0xff, st_rows * n * sizeof *st);
	}
	size_t start = 0, trow = 0;
	for (size_t e = 0; e < experts; e++) {
		size_t c = counts[e] > 0 ? (size_t)counts[e] : 0;
		if (c == 0)
			continue;
		if (start + c > m) /* past the capacity: the kernel writes nothing for it */
			break;
		lg_ref_quant_blockwise(y + start * n, c, n, qr, rows ? q + start * n : NULL,
				       rows ? s + start * (n / 128) : NULL, cols ? qt + start * n : NULL,
				       cols ? st + trow * n : NULL);
		start += c;
		trow += (c + 127) / 128;
	}
}
