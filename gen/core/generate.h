/*
 * generate.h - from a spec and a target to CUDA source and launch plan.
 */
#ifndef LG_GENERATE_H
#define LG_GENERATE_H

#include "family.h"

/* SHA-256 (hex) of the generator's own files, computed at build time: the
 * same identity and resolved spec always give the same source. */
extern const char lg_generator_id[];

/* Which arguments the spec uses (struct lg_plan.used): every one, less
 * those the family's uses() clears. The same on every target. */
void lg_spec_uses(const struct lg_spec *s, unsigned char used[LG_MAX_ARGS]);

/* Only the plan (tile, entry points, geometry) of a kernel: no source. */
lg_status lg_plan_for(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p);

/* Emit one kernel from its plan (lg_plan_for of the same spec and target):
 * *src is malloc'd (caller frees). */
lg_status lg_generate_planned(const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p,
			      char **src, size_t *len);

/* Plan and emit one kernel. On success *src is malloc'd (caller frees) and
 * p holds the resolved tile and entry points. */
lg_status lg_generate_for(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p,
			  char **src, size_t *len);

#endif
