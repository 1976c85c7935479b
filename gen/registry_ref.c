/*
 * registry_ref.c - the enum-indexed table of CPU references, and the
 * random-number helpers they share.
 */
#include <math.h>
#include <string.h>

#include "error.h"
#include "numeric_ref.h"
#include "ref.h"

#define LG_REF_DECL(name, NAME) extern const struct lg_ref_family lg_ref_##name;
LG_FAMILIES(LG_REF_DECL)
#undef LG_REF_DECL

static const struct lg_ref_family *const refs[LG_OP_COUNT] = {
#define LG_REF_ENTRY(name, NAME) [LG_OP_##NAME] = &lg_ref_##name,
	LG_FAMILIES(LG_REF_ENTRY)
#undef LG_REF_ENTRY
};
_Static_assert(sizeof refs / sizeof refs[0] == LG_OP_COUNT, "one reference per op");

const struct lg_ref_family *lg_ref_family_get(enum lg_op op)
{
	LG_ASSERT((unsigned)op < LG_OP_COUNT && refs[op]);
	return refs[op];
}

int64_t lg_ref_int(const struct lg_spec *s, const char *path)
{
	int k = lg_family_key(lg_family_get(s->op), path);
	LG_ASSERT(k >= 0);
	return s->v[k];
}

double lg_ref_num(const struct lg_spec *s, const char *path)
{
	int k = lg_family_key(lg_family_get(s->op), path);
	LG_ASSERT(k >= 0);
	return s->num[k];
}

lg_status lg_ref_case_init(struct lg_ref_case *c, const struct lg_spec *s, const int64_t *sizes,
			   const unsigned char *used, size_t workspace)
{
	const struct lg_sig *g = &lg_family_get(s->op)->sig[s->pass];
	memset(c, 0, sizeof *c);
	c->n = g->nargs;
	for (int i = 0; i < g->nsizes; i++)
		c->sizes[i] = sizes[i];
	for (int i = 0; i < g->nargs; i++) {
		const struct lg_arg *a = &g->args[i];
		struct lg_ref_buf *b = &c->buf[i];
		int64_t n = 0;
		b->name = a->name;
		b->output = a->role == LG_ARG_OUT || a->role == LG_ARG_OPT_OUT;
		b->elem = (size_t)lg_elem_bytes[lg_arg_elem(s, a)];
		lg_status st = a->role == LG_ARG_WORKSPACE ? LG_OK : lg_arg_count(s, i, sizes, &n);
		if (st != LG_OK)
			return st;
		b->count = a->role == LG_ARG_WORKSPACE ? workspace : (size_t)n;
		if (used && !used[i])
			b->count = 0;
	}
	return LG_OK;
}

uint64_t lg_ref_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

float lg_ref_randn(uint64_t *s)
{
	double u1 = ((double)(lg_ref_rand(s) >> 11) + 0.5) * 0x1p-53;
	double u2 = (double)(lg_ref_rand(s) >> 11) * 0x1p-53;
	return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void lg_ref_fill_bf16(uint16_t *p, size_t n, float scale, uint64_t *s)
{
	for (size_t i = 0; i < n; i++)
		p[i] = lg_ref_f32_to_bf16(lg_ref_randn(s) * scale);
}

double lg_ref_sumsq_bf16(const uint16_t *row, size_t n)
{
	double ss = 0.0;
	for (size_t k = 0; k < n; k++) {
		double v = lg_ref_bf16_to_f32(row[k]);
		ss += v * v;
	}
	return ss;
}
