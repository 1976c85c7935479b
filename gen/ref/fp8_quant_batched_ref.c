/*
 * fp8_quant_batched_ref.c - CPU reference of family "fp8_quant_batched"
 * (docs/kernels.md 1.3, per-expert tensors): the bf16 input widened to fp32
 * (exact), then each expert's segment quantised as a tensor of its own
 * (lg_ref_quant_experts over the shared blockwise quantisation).
 */
#include <stdlib.h>

#include "error.h"
#include "numeric_ref.h"
#include "ref.h"

enum { X, COUNTS, Q, S, QT, ST };

static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	(void)s;
	lg_ref_describe_copies(c, Q, S, QT, ST);
}

/* Counts summing to the tokens: experts of 0, 1, 127, 128, 129 tokens and
 * of random sizes around tokens / experts, in random order, the last
 * expert taking what is left (a large one when the others fall short). */
static void fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed)
{
	size_t m = (size_t)c->sizes[0], ne = (size_t)c->sizes[1];
	uint64_t st = seed;
	lg_ref_fill_quant_input(c->buf[X].host, m, (size_t)lg_ref_int(s, "hidden"), &st);
	int32_t *counts = c->buf[COUNTS].host;
	static const int32_t special[] = {0, 1, 127, 128, 129};
	size_t left = m, mean = m / ne;
	for (size_t e = 0; e < ne; e++) {
		uint64_t r = lg_ref_rand(&st) % 10;
		size_t k = r < 5 ? (size_t)special[r] : (size_t)(lg_ref_rand(&st) % (2 * mean + 1));
		if (k > left || e + 1 == ne)
			k = left;
		counts[e] = (int32_t)k;
		left -= k;
	}
}

static void run(const struct lg_spec *s, struct lg_ref_case *c)
{
	size_t n = (size_t)lg_ref_int(s, "hidden"), m = (size_t)c->sizes[0], ne = (size_t)c->sizes[1];
	size_t count = m * n;
	const uint16_t *x = c->buf[X].host;
	float *y = malloc((count ? count : 1) * sizeof *y);
	LG_ASSERT(y);
	lg_ref_widen_bf16(x, y, count);
	lg_ref_quant_experts(y, m, n, c->buf[COUNTS].host, ne, lg_spec_quant(s), c->buf[Q].host, c->buf[S].host,
			     c->buf[QT].host, c->buf[ST].host, c->buf[ST].count / (n ? n : 1));
	free(y);
}

const struct lg_ref_family lg_ref_fp8_quant_batched = {describe, fill, run};
