/*
 * moe_row_map_ref.c - CPU reference of family "moe_row_map" (docs/kernels.md
 * K4): the routing (a mask, or top-k slots read into a mask: an index
 * outside [0, E) is nothing, a repeat counts once), then the padded row
 * map of moe_common_ref.c, and the padded counts. Every output is an
 * integer: compared exactly.
 */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "moe_ref.h"
#include "ref.h"

enum { A_MASK, A_I32, A_I64, A_MAP, A_COUNTS, A_OFFSETS, A_INDEX, A_PADDED, A_WS };

static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	(void)s;
	for (int i = A_MAP; i <= A_PADDED; i++)
		c->buf[i].cmp = LG_CMP_EXACT;
}

struct dims {
	int64_t T, E, K, M;
};

static struct dims dims_of(const struct lg_spec *s, const struct lg_ref_case *c)
{
	return (struct dims){c->sizes[0], lg_ref_int(s, "experts"), lg_ref_int(s, "top_k"), lg_ref_int(s, "multiple")};
}

static void fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed)
{
	struct dims d = dims_of(s, c);
	uint8_t *mask = malloc((size_t)(d.T * d.E) + 1);
	int64_t *idx = malloc((size_t)(d.T * d.K) * sizeof *idx + 1);
	LG_ASSERT(mask && idx);
	lg_moe_ref_routing(mask, d.T, d.E, d.K, seed);
	if (c->buf[A_MASK].count) {
		uint8_t *m = c->buf[A_MASK].host;
		for (int64_t i = 0; i < d.T * d.E; i++) /* bool, or any non-zero byte */
			m[i] = mask[i] ? (uint8_t)(1 + (i % 3 == 0) * 0x7f) : 0;
	}
	lg_moe_ref_topk(mask, idx, d.T, d.E, d.K, seed);
	for (int64_t i = 0; i < d.T * d.K; i++) {
		if (c->buf[A_I32].count)
			((int32_t *)c->buf[A_I32].host)[i] = (int32_t)idx[i];
		if (c->buf[A_I64].count)
			((int64_t *)c->buf[A_I64].host)[i] = idx[i];
	}
	free(mask);
	free(idx);
}

static void run(const struct lg_spec *s, struct lg_ref_case *c)
{
	struct dims d = dims_of(s, c);
	uint8_t *mask = calloc((size_t)(d.T * d.E) + 1, 1);
	LG_ASSERT(mask);
	for (int64_t t = 0; t < d.T; t++)
		for (int64_t j = 0; j < (c->buf[A_MASK].count ? d.E : d.K); j++) {
			int64_t e;
			if (c->buf[A_MASK].count) {
				if (((const uint8_t *)c->buf[A_MASK].host)[t * d.E + j])
					mask[t * d.E + j] = 1;
				continue;
			}
			e = c->buf[A_I32].count ? ((const int32_t *)c->buf[A_I32].host)[t * d.K + j]
						: ((const int64_t *)c->buf[A_I64].host)[t * d.K + j];
			if (e >= 0 && e < d.E)
				mask[t * d.E + e] = 1;
		}
	lg_moe_ref_map(mask, d.T, d.E, d.M, lg_moe_ref_cap(d.T, d.E, d.K, d.M), c->buf[A_MAP].host,
		       c->buf[A_COUNTS].host, c->buf[A_OFFSETS].host, c->buf[A_INDEX].count ? c->buf[A_INDEX].host : NULL);
	free(mask);
	if (!c->buf[A_PADDED].count)
		return;
	for (int64_t e = 0; e < d.E; e++) {
		int32_t n = ((const int32_t *)c->buf[A_COUNTS].host)[e];
		((int32_t *)c->buf[A_PADDED].host)[e] = (int32_t)((n + d.M - 1) / d.M * d.M);
	}
}

const struct lg_ref_family lg_ref_moe_row_map = {describe, fill, run};
