/*
 * quant_ref.c - the blockwise FP8 quantisation of KERNELS.md 1.2 and 1.3 in
 * plain C, shared by the references of every quantising family: an fp32
 * [m, n] array into the rowwise copy (1x128 blocks, q [m, n], scales
 * s [n/128, m]) and the columnwise copy (128x1 blocks, transposed:
 * qt [n, m], scales st [ceil(m/128), n]). A partial last token block takes
 * its amax over its real rows only.
 */
#include <math.h>

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
