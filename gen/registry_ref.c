/*
 * registry_ref.c - the enum-indexed table of CPU references, and the
 * random-number helpers they share.
 */
#include <math.h>

#include "error.h"
#include "numeric_ref.h"
#include "ref.h"

extern const struct lg_ref_family lg_ref_rmsnorm_quant;
extern const struct lg_ref_family lg_ref_rmsnorm;

static const struct lg_ref_family *const refs[LG_OP_COUNT] = {
	[LG_OP_RMSNORM_QUANT] = &lg_ref_rmsnorm_quant,
	[LG_OP_RMSNORM] = &lg_ref_rmsnorm,
};
_Static_assert(sizeof refs / sizeof refs[0] == LG_OP_COUNT, "one reference per op");

const struct lg_ref_family *lg_ref_family_get(enum lg_op op)
{
	LG_ASSERT((unsigned)op < LG_OP_COUNT && refs[op]);
	return refs[op];
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
