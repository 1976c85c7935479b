/*
 * qk_norm_rope.h - what the two files of family "qk_norm_rope" share:
 * qk_norm_rope.c (keys, declaration, plan) and qk_norm_rope_emit.c (the kernels'
 * source). Private to gen/families/.
 */
#ifndef LG_FAMILY_QK_NORM_ROPE_H
#define LG_FAMILY_QK_NORM_ROPE_H

#include "family.h"

/* SMs of an H200. The backward's grid is static, not the device's: its
 * CTAs' dq_weight / dk_weight partials and their fixed-order sum are laid
 * out by the plan, so the weight gradients are the same bits on every
 * device (elsewhere only the wave's fit changes). */
#define SMS 132
#define PMAX (2 * SMS) /* the fewest CTAs of the backward's persistent grid (tile.ctas) */
#define PDEF (3 * SMS) /* its default: 3 CTAs an SM (tile.min_ctas 3 by default in the backward) */
#define DW_COLS 32 /* columns of the weight gradients per CTA of the dw kernel */

enum {
	K_HEAD_DIM,
	K_Q_HEADS,
	K_KV_HEADS,
	K_ROTARY,
	K_ORDER,
	K_HEADS,
	K_SILU,
	K_VARLEN,
	K_MSCALE,
	K_CP_SIZE,
	K_CP_RANK,
	K_EPS,
	K_TILE,
	K_TOKENS,
	K_THREADS,
	K_CTAS,
	K_MIN_CTAS,
	K_BATCH,
	K_PREFETCH,
	NKEYS
};

enum { P_D, P_H, P_HKV, P_R, P_TOKENS, P_THREADS, P_BWD, P_CTAS, P_VARLEN, P_MIN_CTAS, P_BATCH, P_PREFETCH };

/* Rounds of `gt` lane groups over n heads. */
static inline int64_t rounds_of(int64_t n, int64_t gt)
{
	return (n + gt - 1) / gt;
}

/* The kernels' source of a planned spec (the family's emit). */
void lg_qk_norm_rope_emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p);

#endif
