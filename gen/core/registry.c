/*
 * registry.c - the enum-indexed table of kernel families.
 *
 * Made from the list in families.h: a family named there and not defined
 * does not link.
 */
#include "family.h"

#include "error.h"

#define LG_FAMILY_DECL(name, NAME) extern const struct lg_family lg_family_##name;
LG_FAMILIES(LG_FAMILY_DECL)
#undef LG_FAMILY_DECL

static const struct lg_family *const families[LG_OP_COUNT] = {
#define LG_FAMILY_ENTRY(name, NAME) [LG_OP_##NAME] = &lg_family_##name,
	LG_FAMILIES(LG_FAMILY_ENTRY)
#undef LG_FAMILY_ENTRY
};
_Static_assert(sizeof families / sizeof families[0] == LG_OP_COUNT, "one family per op");

const struct lg_family *lg_family_get(enum lg_op op)
{
	LG_ASSERT((unsigned)op < LG_OP_COUNT && families[op]);
	return families[op];
}
