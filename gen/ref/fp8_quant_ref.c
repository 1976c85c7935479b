/*
 * fp8_quant_ref.c - CPU reference of family "fp8_quant" (docs/kernels.md 1.3):
 * the bf16 input widened to fp32 (exact), then the shared blockwise e4m3
 * quantisation (quant_ref.c).
 */
#include <stdlib.h>

#include "error.h"
#include "numeric_ref.h"
#include "ref.h"

enum { X, Q, S, QT, ST };

static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	(void)s;
	lg_ref_describe_copies(c, Q, S, QT, ST);
}

static void fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed)
{
	uint64_t st = seed;
	lg_ref_fill_quant_input(c->buf[X].host, (size_t)c->sizes[0], (size_t)lg_ref_int(s, "hidden"), &st);
}

static void run(const struct lg_spec *s, struct lg_ref_case *c)
{
	size_t n = (size_t)lg_ref_int(s, "hidden"), m = (size_t)c->sizes[0], count = m * n;
	const uint16_t *x = c->buf[X].host;
	float *y = malloc((count ? count : 1) * sizeof *y);
	LG_ASSERT(y);
	lg_ref_widen_bf16(x, y, count);
	lg_ref_quant_flat(y, m, n, lg_spec_quant(s), c->buf[Q].host, c->buf[S].host, c->buf[QT].host,
			       c->buf[ST].host);
	free(y);
}

const struct lg_ref_family lg_ref_fp8_quant = {describe, fill, run};
