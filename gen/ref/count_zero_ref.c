/*
 * count_zero_ref.c - CPU reference of family "count_zero" (docs/kernels.md
 * K11): the zeros of the tensors of a host table (list_ref.c), compared
 * bit for bit.
 */
#include "list_ref.h"

#include <stdlib.h>

#include "error.h"

static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	(void)s;
	c->buf[1].cmp = LG_CMP_EXACT;
}

static void run(const struct lg_spec *s, struct lg_ref_case *c)
{
	(void)s;
	size_t rows = (size_t)c->sizes[0];
	struct lg_ref_tensor *t = lg_ref_list_rows(c->buf[0].host, rows);
	LG_ASSERT(t || !rows);
	*(int64_t *)c->buf[1].host = lg_ref_list_count_zero(t, rows);
	free(t);
}

const struct lg_ref_family lg_ref_count_zero = {describe, lg_ref_list_fill, run};
