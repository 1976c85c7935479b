/*
 * grad_norm_ref.c - CPU reference of family "grad_norm" (docs/kernels.md K10):
 * the norm of the tensors of a host table, in float64 with compensated
 * sums (list_ref.c). The GPU's fp64 sums in another order differ from it
 * by far less than an fp32 rounding, so out is compared to 1e-6 relative.
 */
#include "list_ref.h"

#include <stdlib.h>

#include "error.h"

static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	(void)s;
	c->buf[1].cmp = LG_CMP_FP32, c->buf[1].rtol = 1e-6, c->buf[1].atol = 0;
}

static void run(const struct lg_spec *s, struct lg_ref_case *c)
{
	static const enum lg_ref_ord ords[] = {LG_REF_ORD_2, LG_REF_ORD_1, LG_REF_ORD_INF};
	size_t rows = (size_t)c->sizes[0];
	struct lg_ref_tensor *t = lg_ref_list_rows(c->buf[0].host, rows);
	LG_ASSERT(t || !rows);
	double v = lg_ref_list_norm(t, rows, ords[lg_ref_int(s, "ord")], lg_ref_int(s, "norm") != 0);
	*(float *)c->buf[1].host = (float)v;
	free(t);
}

const struct lg_ref_family lg_ref_grad_norm = {describe, lg_ref_list_fill, run};
