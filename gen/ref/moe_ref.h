/*
 * moe_ref.h - what the CPU references of the MoE families share
 * (moe_common_ref.c): random routings in a few shapes, and the padded row
 * map of a routing computed plainly (docs/kernels.md K4), which the dispatch and
 * combine references take as their inputs.
 */
#ifndef LG_MOE_REF_H
#define LG_MOE_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The routing pattern of a seed: (seed + 3) % 4, so that the fixed seed of
 * `lingen bench` (12345) gets pattern 0, the even top-k of a trained router. */
int lg_moe_ref_pattern(uint64_t seed);

/* A random routing mask [T][E] (1 routed). The pattern (lg_moe_ref_pattern):
 *   0: each token K distinct random experts;
 *   1: every token routed to one expert only (E / 2): the rest get none,
 *      tokens have fewer than K experts;
 *   2: experts drawn from the first min(E, K + 2) only (most experts have
 *      0 tokens);
 *   3: K random slots a token, each dropped with probability 1/3 (fewer
 *      than K experts, some tokens none). */
void lg_moe_ref_routing(uint8_t *mask, int64_t T, int64_t E, int64_t K, uint64_t seed);

/* Top-k slots [T][K] of a mask (the routed experts in a random order, the
 * empty slots -1; with pattern 3 an empty slot may repeat an expert of the
 * token, or hold E + 3: both mean nothing). */
void lg_moe_ref_topk(const uint8_t *mask, int64_t *idx, int64_t T, int64_t E, int64_t K, uint64_t seed);

/* The padded row map of a mask: map [T][E] (-1 where not routed), counts
 * [E], offsets [E + 1], and row_index [cap] (source token; -1 for padding
 * and rows >= P), any of them NULL if not wanted. Returns P. */
int64_t lg_moe_ref_map(const uint8_t *mask, int64_t T, int64_t E, int64_t M, int64_t cap, int32_t *map,
		       int32_t *counts, int32_t *offsets, int32_t *row_index);

/* The capacity: T * K + E * (M - 1). */
int64_t lg_moe_ref_cap(int64_t T, int64_t E, int64_t K, int64_t M);

#endif

/* One dispatch or combine (moe_common.h), by pointers (NULL: absent). */
struct lg_moe_ref_io {
	int64_t T, E, K, M, H, cap;
	int es;                       /* bytes an element: 2 bf16, 1 e4m3 */
	bool pow2;                    /* e4m3 padding scale 2^-99, else 1e-30 */
	const int32_t *map, *offsets, *counts;
	const void *src; const float *src_s;
	void *dst; float *dst_s;
	const float *pin; float *pout;
	const float *weights;
	const uint16_t *other; float *dot;
};
/* The sizes of a dispatch or combine spec at c's tokens (es from the
 * dtype; pow2 from round_scale where the family has it); no pointers. */
struct lg_ref_case;
struct lg_spec;
struct lg_moe_ref_io lg_moe_ref_io_of(const struct lg_spec *s, const struct lg_ref_case *c);
/* The host buffer of argument i, NULL when the spec does not use it. */
void *lg_moe_ref_opt(const struct lg_ref_case *c, int i);

/* Dispatch: every row below cap written (the routed ones from their token,
 * every other one zeros). */
void lg_moe_ref_dispatch(const struct lg_moe_ref_io *io);
/* Combine: out[t] = the fp32 sum, in ascending expert order, of its rows
 * (times the weight, in float64, when weighted); pout [T][E]. */
void lg_moe_ref_combine(const struct lg_moe_ref_io *io);

/* Random inputs of a dispatch or combine: the routing's map, offsets and
 * counts (any pointer NULL), from lg_moe_ref_routing(seed). */
void lg_moe_ref_fill_map(int64_t T, int64_t E, int64_t K, int64_t M, uint64_t seed, int32_t *map,
			 int32_t *offsets, int32_t *counts);
/* n random e4m3 bytes (no NaN), n random probabilities in (0, 1). */
void lg_moe_ref_fill_e4m3(uint8_t *p, size_t n, uint64_t *st);
void lg_moe_ref_fill_probs(float *p, size_t n, uint64_t *st);
