/*
 * cross_entropy.h - what the two files of family "cross_entropy" share:
 * cross_entropy.c (keys, declaration, plan) and cross_entropy_emit.c (the
 * kernels' source). Private to gen/families/.
 */
#ifndef LG_FAMILY_CROSS_ENTROPY_H
#define LG_FAMILY_CROSS_ENTROPY_H

#include "family.h"

#define STATS 6 /* values per row of a shard's statistics */

enum {
	K_VOCAB,
	K_PART,
	K_CLASSES,
	K_INDEX,
	K_IGNORE,
	K_SMOOTH,
	K_INPLACE,
	K_FUSED,
	K_TILE,
	K_THREADS,
	K_UNROLL,
	K_CLUSTER,
	NKEYS
};
enum { PART_FULL, PART_SHARD, PART_MERGE, PART_COUNT };

enum { P_PART, P_THREADS, P_UNROLL, P_FUSED, P_BWD, P_INPLACE, P_CLUSTER, P_PER };

/* The kernels' source of a planned spec (the family's emit). */
void lg_cross_entropy_emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p);

#endif
