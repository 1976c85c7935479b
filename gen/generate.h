/*
 * generate.h - from a spec and a target to CUDA source and launch plan.
 */
#ifndef LG_GENERATE_H
#define LG_GENERATE_H

#include "family.h"

/* Plan and emit one kernel. On success *src is malloc'd (caller frees) and
 * p holds the resolved tile and entry points. */
lg_status lg_generate_for(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p,
			  char **src, size_t *len);

#endif
