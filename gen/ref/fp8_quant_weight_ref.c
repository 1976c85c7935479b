/*
 * fp8_quant_weight_ref.c - CPU reference of family "fp8_quant_weight"
 * (docs/kernels.md 1.3, weights): one scale per 128 x 128 tile of w (the amax
 * over its real rows), s [cdiv(rows, 128), hidden / 128], each value
 * quantised with its tile's scale (docs/kernels.md 1.2).
 */
#include <math.h>

#include "numeric_ref.h"
#include "ref.h"

enum { W, Q, S, QT, ST };

static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	(void)s;
	lg_ref_describe_copies(c, Q, S, QT, ST);
}

static void fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed)
{
	uint64_t st = seed;
	lg_ref_fill_quant_input(c->buf[W].host, (size_t)c->sizes[0], (size_t)lg_ref_int(s, "hidden"), &st);
}

struct tiles {
	const uint16_t *w;
	uint8_t *q;
	float *sc;
	size_t m, n;
	bool pow2;
};

/* The tiles of the 128-row blocks [lo, hi). */
static void tile_rows(void *ctx, size_t lo, size_t hi)
{
	const struct tiles *t = ctx;
	size_t m = t->m, n = t->n, nb = n / 128;
	for (size_t r0 = lo * 128; r0 < hi * 128 && r0 < m; r0 += 128) {
		size_t rows = m - r0 < 128 ? m - r0 : 128;
		for (size_t b = 0; b < nb; b++) {
			float amax = 0.0f;
			for (size_t i = r0; i < r0 + rows; i++)
				for (size_t k = b * 128; k < b * 128 + 128; k++)
					amax = fmaxf(amax, fabsf(lg_ref_bf16_to_f32(t->w[i * n + k])));
			float sv = lg_ref_scale(amax, t->pow2);
			t->sc[(r0 / 128) * nb + b] = sv;
			for (size_t i = r0; i < r0 + rows; i++)
				for (size_t k = b * 128; k < b * 128 + 128; k++)
					t->q[i * n + k] = lg_ref_quant(lg_ref_bf16_to_f32(t->w[i * n + k]), sv, t->pow2);
		}
	}
}

static void run(const struct lg_spec *s, struct lg_ref_case *c)
{
	struct tiles t = {c->buf[W].host, c->buf[Q].host, c->buf[S].host, (size_t)c->sizes[0],
			  (size_t)lg_ref_int(s, "hidden"), lg_spec_quant(s).round_scale};
	lg_ref_parallel_rows((t.m + 127) / 128, 128 * t.n * 40, tile_rows, &t); /* block rows: independent */
	if (!c->buf[QT].count) /* no transposed copy asked for */
		return;
	uint8_t *qt = c->buf[QT].host;
	float *st = c->buf[ST].host;
	size_t mb = (t.m + 127) / 128, nb = t.n / 128;
	for (size_t i = 0; i < t.m; i++)
		for (size_t k = 0; k < t.n; k++)
			qt[k * t.m + i] = t.q[i * t.n + k];
	for (size_t i = 0; i < mb; i++)
		for (size_t k = 0; k < nb; k++)
			st[k * mb + i] = t.sc[i * nb + k];
}

const struct lg_ref_family lg_ref_fp8_quant_weight = {describe, fill, run};
