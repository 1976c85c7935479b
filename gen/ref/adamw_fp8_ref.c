/*
 * adamw_fp8_ref.c - CPU reference of family "adamw_fp8"
 * (gen/families/adamw_fp8.c): the AdamW step of adamw_ref.c
 * (lg_ref_adamw_step) over the whole weight, then the weight's FP8 copies
 * in 128 x 128 tiles of the weight as stored after the step (one scale a
 * tile, the amax over its real rows, docs/kernels.md 1.2), and their
 * transposes (with expert_rows: rearranged into each expert's, as
 * lingen.nn._quant.experts_transposed). The step updates p, m and v in place: the harness's case
 * works on copies of them (its inputs stay as filled), the GPU test
 * (gpu_test_adamw_fp8) steps both sides and compares p, m and v too.
 */
#include "list_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "numeric_ref.h"

enum { P, G, M, V, STEP, LR, Q, S, QT, ST };

static float weight_at(const void *w, bool bf16, size_t i)
{
	return bf16 ? lg_ref_bf16_to_f32(((const uint16_t *)w)[i]) : ((const float *)w)[i];
}

void lg_ref_weight_tiles(const void *w, bool bf16, size_t m, size_t n, bool pow2, uint8_t *q, float *s,
			 uint8_t *qt, float *st)
{
	size_t mb = (m + 127) / 128, nb = n / 128;
	for (size_t r0 = 0; r0 < m; r0 += 128) {
		size_t rows = m - r0 < 128 ? m - r0 : 128;
		for (size_t b = 0; b < nb; b++) {
			float amax = 0.0f;
			for (size_t i = r0; i < r0 + rows; i++)
				for (size_t k = b * 128; k < b * 128 + 128; k++)
					amax = fmaxf(amax, fabsf(weight_at(w, bf16, i * n + k)));
			float sv = lg_ref_scale(amax, pow2);
			s[(r0 / 128) * nb + b] = sv;
			st[b * mb + r0 / 128] = sv;
			for (size_t i = r0; i < r0 + rows; i++)
				for (size_t k = b * 128; k < b * 128 + 128; k++) {
					uint8_t x = lg_ref_quant(weight_at(w, bf16, i * n + k), sv, pow2);
					q[i * n + k] = x;
					qt[k * m + i] = x;
				}
		}
	}
}

void lg_ref_experts_transposed(const uint8_t *qt, const float *st, size_t m, size_t n, size_t er, uint8_t *qe,
			       float *se)
{
	size_t mb = (m + 127) / 128, nb = n / 128;
	for (size_t e0 = 0; e0 < m; e0 += er) {
		size_t c = m - e0 < er ? m - e0 : er, cb = (c + 127) / 128;
		for (size_t k = 0; k < n; k++)
			memcpy(qe + e0 * n + k * c, qt + k * m + e0, c);
		for (size_t b = 0; b < nb; b++)
			for (size_t j = 0; j < cb; j++)
				se[e0 / 128 * nb + b * cb + j] = st[b * mb + e0 / 128 + j];
	}
}

static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	(void)s;
	lg_ref_describe_copies(c, Q, S, QT, ST);
}

/* n values of scale `scale` (positive with pos), fp32 or bf16. */
static void fill_values(void *a, bool bf16, size_t n, double scale, bool pos, uint64_t *st)
{
	for (size_t i = 0; i < n; i++) {
		double u = (double)(lg_ref_rand(st) >> 11) * 0x1p-53;
		float f = (float)((pos ? u : 2 * u - 1) * scale);
		if (bf16)
			((uint16_t *)a)[i] = lg_ref_f32_to_bf16(f);
		else
			((float *)a)[i] = f;
	}
}

static void fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed)
{
	uint64_t st = seed;
	struct lg_ref_adamw_hp h = lg_ref_adamw_hp_of(s);
	size_t m = (size_t)c->sizes[0], n = (size_t)lg_ref_int(s, "hidden");
	if (h.param_bf16) {
		lg_ref_fill_quant_input(c->buf[P].host, m, n, &st);
	} else {
		for (size_t i = 0; i < m * n; i++)
			((float *)c->buf[P].host)[i] = lg_ref_randn(&st);
	}
	fill_values(c->buf[G].host, h.grad_bf16, m * n, 1.0, false, &st);
	fill_values(c->buf[M].host, h.moments_bf16, m * n, 0.01, false, &st);
	fill_values(c->buf[V].host, h.moments_bf16, m * n, 1e-4, true, &st);
	*(float *)c->buf[STEP].host = 3.0f;
	*(float *)c->buf[LR].host = 1e-3f;
}

static void run(const struct lg_spec *s, struct lg_ref_case *c)
{
	struct lg_ref_adamw_hp h = lg_ref_adamw_hp_of(s);
	size_t m = (size_t)c->sizes[0], n = (size_t)lg_ref_int(s, "hidden");
	size_t er = (size_t)lg_ref_int(s, "expert_rows"), nst = (m + 127) / 128 * (n / 128);
	uint8_t *qt = c->buf[QT].host;
	float *st = c->buf[ST].host;
	void *copy[3] = {NULL, NULL, NULL};
	const int idx[3] = {P, M, V};
	for (int i = 0; i < 3; i++) {
		size_t bytes = c->buf[idx[i]].count * c->buf[idx[i]].elem;
		copy[i] = malloc(bytes ? bytes : 1);
		if (!copy[i])
			goto out;
		memcpy(copy[i], c->buf[idx[i]].host, bytes);
	}
	lg_ref_adamw_step(&h, copy[0], c->buf[G].host, copy[1], copy[2], m * n, *(const float *)c->buf[STEP].host,
			  *(const float *)c->buf[LR].host);
	if (er && m) { /* the flat transposed copy, then each expert's */
		qt = malloc(m * n);
		st = malloc(nst * sizeof *st);
		if (!qt || !st)
			goto out;
	}
	lg_ref_weight_tiles(copy[0], h.param_bf16, m, n, lg_spec_quant(s).round_scale, c->buf[Q].host,
			    c->buf[S].host, qt, st);
	if (qt != c->buf[QT].host)
		lg_ref_experts_transposed(qt, st, m, n, er, c->buf[QT].host, c->buf[ST].host);
out:
	if (qt != c->buf[QT].host)
		free(qt), free(st);
	for (int i = 0; i < 3; i++)
		free(copy[i]);
}

const struct lg_ref_family lg_ref_adamw_fp8 = {describe, fill, run};
