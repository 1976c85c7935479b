/*
 * moe_permute_quant_ref.c - CPU reference of family "moe_permute_quant"
 * (docs/kernels.md K4b): the padded dispatch as fp32 rows (x[row_index[r]]
 * widened exactly, zeros for padding rows), each expert's padded segment
 * quantised as a tensor of its own (lg_ref_quant_experts, the shared
 * per-expert quantisation), the rows' probabilities; what the kernel leaves
 * unwritten (rows past P) is the harness's poison.
 */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "moe_ref.h"
#include "numeric_ref.h"
#include "ref.h"

enum { A_X, A_PROBS, A_INDEX, A_PADDED, A_Q, A_S, A_QT, A_ST, A_OUTP };

static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	(void)s;
	c->buf[A_Q].cmp = LG_CMP_E4M3_ULP; /* bit-equal */
	c->buf[A_S].cmp = LG_CMP_SCALE;
	c->buf[A_QT].cmp = LG_CMP_E4M3_ULP;
	c->buf[A_ST].cmp = LG_CMP_SCALE;
	c->buf[A_OUTP].cmp = LG_CMP_SCALE;
}

struct dims {
	int64_t T, E, K, M, H, cap;
};

static struct dims dims_of(const struct lg_spec *s, const struct lg_ref_case *c)
{
	struct dims d = {c->sizes[0], lg_ref_int(s, "experts"), lg_ref_int(s, "top_k"), lg_ref_int(s, "multiple"),
			 lg_ref_int(s, "hidden"), 0};
	d.cap = lg_moe_ref_cap(d.T, d.E, d.K, d.M);
	return d;
}

static void fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed)
{
	struct dims d = dims_of(s, c);
	uint64_t st = seed ^ 0x165667b1u;
	uint8_t *mask = malloc((size_t)(d.T * d.E) + 1);
	int32_t *counts = malloc((size_t)d.E * sizeof *counts);
	LG_ASSERT(mask && counts);
	lg_moe_ref_routing(mask, d.T, d.E, d.K, seed);
	lg_moe_ref_map(mask, d.T, d.E, d.M, d.cap, NULL, counts, NULL, c->buf[A_INDEX].host);
	for (int64_t e = 0; e < d.E; e++)
		((int32_t *)c->buf[A_PADDED].host)[e] = (int32_t)((counts[e] + d.M - 1) / d.M * d.M);
	lg_ref_fill_quant_input(c->buf[A_X].host, (size_t)d.T, (size_t)d.H, &st);
	if (c->buf[A_PROBS].count)
		lg_moe_ref_fill_probs(c->buf[A_PROBS].host, c->buf[A_PROBS].count, &st);
	free(mask);
	free(counts);
}

/* The padded rows widened: x[index[r]], zeros for padding. */
struct gather {
	float *y;
	const uint16_t *x;
	const int32_t *index;
	int64_t H;
};

static void gather_rows(void *ctx, size_t lo, size_t hi)
{
	const struct gather *g = ctx;
	for (size_t r = lo; r < hi; r++)
		for (int64_t h = 0; g->index[r] >= 0 && h < g->H; h++)
			g->y[(int64_t)r * g->H + h] = lg_ref_bf16_to_f32(g->x[(int64_t)g->index[r] * g->H + h]);
}

static void run(const struct lg_spec *s, struct lg_ref_case *c)
{
	struct dims d = dims_of(s, c);
	const int32_t *index = c->buf[A_INDEX].host, *padded = c->buf[A_PADDED].host;
	const uint16_t *x = c->buf[A_X].host;
	size_t count = (size_t)(d.cap * d.H);
	float *y = calloc(count ? count : 1, sizeof *y);
	LG_ASSERT(y);
	struct gather g = {y, x, index, d.H};
	lg_ref_parallel_rows((size_t)d.cap, (size_t)d.H, gather_rows, &g);
	lg_ref_quant_experts(y, (size_t)d.cap, (size_t)d.H, padded, (size_t)d.E, lg_spec_quant(s), c->buf[A_Q].host,
			     c->buf[A_S].host, c->buf[A_QT].host, c->buf[A_ST].host,
			     c->buf[A_ST].count / (size_t)d.H);
	free(y);
	if (!c->buf[A_OUTP].count)
		return;
	float *op = c->buf[A_OUTP].host;
	const float *probs = c->buf[A_PROBS].count ? c->buf[A_PROBS].host : NULL;
	memset(op, 0xff, (size_t)d.cap * sizeof *op); /* past P: not written */
	int64_t r = 0;
	for (int64_t e = 0; e < d.E; e++)
		for (int64_t i = 0; i < padded[e] && r < d.cap; i++, r++)
			op[r] = index[r] >= 0 && probs ? probs[(int64_t)index[r] * d.E + e] : 0.0f;
}

const struct lg_ref_family lg_ref_moe_permute_quant = {describe, fill, run};
