/*
 * registry.c - the enum-indexed table of kernel families.
 *
 * Adding a family: add its lg_op value (spec.h), its name in lg_op_names
 * (spec.c) and its struct here. The _Static_asserts stop a forgotten table.
 */
#include "family.h"

#include "error.h"

extern const struct lg_family lg_family_rmsnorm_quant;
extern const struct lg_family lg_family_rmsnorm;

static const struct lg_family *const families[LG_OP_COUNT] = {
	[LG_OP_RMSNORM_QUANT] = &lg_family_rmsnorm_quant,
	[LG_OP_RMSNORM] = &lg_family_rmsnorm,
};
_Static_assert(sizeof families / sizeof families[0] == LG_OP_COUNT, "one family per op");

const struct lg_family *lg_family_get(enum lg_op op)
{
	LG_ASSERT((unsigned)op < LG_OP_COUNT && families[op]);
	return families[op];
}
