/*
 * build_link.h - the linked module of a bundle (`lingen build`): per arch,
 * the relocatable cubins of its kernels (compile_all.h) linked by
 * nvJitLink into one cubin, which a context loads once for all of them
 * (runtime/context.c) instead of one cubin a kernel.
 */
#ifndef LG_BUILD_LINK_H
#define LG_BUILD_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compile_all.h"

/* One arch's linked module. */
struct lg_build_linked {
	void *cubin; /* malloc'd; NULL: none for this arch */
	size_t size;
	uint64_t checksum; /* lg_bundle_linked_checksum */
	size_t offset;     /* in the bundle's cubin file, once packed */
};

/* Link, for every arch of s (out[a] for s->archs[a]), the relocatable
 * cubins of its jobs, and check that the module defines every entry point
 * of each. An arch whose link fails, or that has no relocatable cubin,
 * gets none, with a line on stderr saying why; *in_link[i] (s->n of them)
 * says whether job i's kernel is in its arch's module. False only when out
 * of memory. */
bool lg_build_link(const struct lg_compile_set *s, struct lg_build_linked *out, bool *in_link);
void lg_build_linked_free(struct lg_build_linked *l, int narch);

#endif
