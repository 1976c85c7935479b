/*
 * list_ref.c - the tensor-list references (list_ref.h).
 */
#include "list_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "family.h"
#include "lingen.h"
#include "numeric_ref.h"

static double element(const struct lg_ref_tensor *t, int64_t i)
{
	if (t->elem == LG_LIST_BF16)
		return lg_ref_bf16_to_f32(((const uint16_t *)t->data)[i]);
	return ((const float *)t->data)[i];
}

/* Neumaier's compensated sum: s + c is the running total. */
struct ksum {
	double s, c;
};
static void kadd(struct ksum *k, double v)
{
	double t = k->s + v;
	k->c += fabs(k->s) >= fabs(v) ? (k->s - t) + v : (v - t) + k->s;
	k->s = t;
}

double lg_ref_list_norm(const struct lg_ref_tensor *t, size_t n, enum lg_ref_ord ord, bool root)
{
	struct ksum k = {0, 0};
	double max = 0;
	for (size_t j = 0; j < n; j++)
		for (int64_t i = 0; i < t[j].count; i++) {
			double v = fabs(element(&t[j], i));
			if (ord == LG_REF_ORD_INF)
				max = isnan(v) || isnan(max) ? NAN : v > max ? v : max;
			else
				kadd(&k, ord == LG_REF_ORD_2 ? v * v : v);
		}
	if (ord == LG_REF_ORD_INF)
		return max;
	double sum = k.s + k.c;
	return ord == LG_REF_ORD_2 && root ? sqrt(sum) : sum;
}

int64_t lg_ref_list_count_zero(const struct lg_ref_tensor *t, size_t n)
{
	int64_t zeros = 0;
	for (size_t j = 0; j < n; j++)
		for (int64_t i = 0; i < t[j].count; i++)
			zeros += element(&t[j], i) == 0.0;
	return zeros;
}

struct lg_ref_tensor *lg_ref_list_rows(const void *table, size_t rows)
{
	struct lg_ref_tensor *t = rows ? calloc(rows, sizeof *t) : NULL;
	const unsigned char *r = table;
	for (size_t i = 0; t && i < rows; i++, r += LG_LIST_ROW_BYTES) {
		uint64_t p;
		uint32_t count, elem;
		memcpy(&p, r, 8);
		memcpy(&count, r + 8, 4);
		memcpy(&elem, r + 12, 4);
		t[i] = (struct lg_ref_tensor){(const void *)(uintptr_t)p, (int)elem, count};
	}
	return t;
}

static void put_row(unsigned char *r, const void *p, uint32_t count, uint32_t elem)
{
	uint64_t a = (uint64_t)(uintptr_t)p;
	memcpy(r, &a, 8);
	memcpy(r + 8, &count, 4);
	memcpy(r + 12, &elem, 4);
}

void lg_ref_list_fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed)
{
	int mk = lg_family_key(s->fam, "mixed");
	bool mixed = mk >= 0 && s->v[mk];
	size_t items = (size_t)c->sizes[0];
	free(c->data);
	c->data_bytes = items * LG_LIST_ITEM_BYTES;
	c->data = items ? aligned_alloc(16, c->data_bytes) : NULL;
	LG_ASSERT(c->data || !items);
	uint64_t st = seed;
	unsigned char *row = c->buf[0].host, *at = c->data;
	for (size_t i = 0, tensor = 0; i < items; tensor++) {
		int elem = mixed ? (int)(tensor & 1) : s->dtype == LG_DTYPE_FP32 ? LG_LIST_FP32 : LG_LIST_BF16;
		uint32_t per = LG_LIST_ITEM_BYTES / (elem == LG_LIST_FP32 ? 4 : 2);
		for (size_t k = 0; k < 1 + tensor % 7 && i < items; k++, i++, at += LG_LIST_ITEM_BYTES) {
			for (uint32_t j = 0; j < per; j++) {
				uint64_t r = lg_ref_rand(&st);
				float v = (r >> 58) < 2 ? ((r >> 57) & 1 ? -0.0f : 0.0f) /* 2 of 64: ~3% */
						       : (float)((double)(int32_t)(uint32_t)r * 0x1p-31 * 2.5);
				if (elem == LG_LIST_FP32)
					memcpy(at + 4 * j, &v, 4);
				else {
					uint16_t h = lg_ref_f32_to_bf16(v);
					memcpy(at + 2 * j, &h, 2);
				}
			}
			put_row(row + i * LG_LIST_ROW_BYTES, at, per, (uint32_t)elem);
		}
	}
}
