/*
 * quant_body.h - the kernel body shared by lingen's two blockwise FP8
 * quantisers (internal to gen/engines): the activation quantiser of
 * quant_engine.c (a scale a 1x128 token block and a 128x1 feature block;
 * layouts LG_QE_FLAT and LG_QE_EXPERTS) and the weight-tile emitter of
 * quant_tile.c (a scale a 128x128 tile; LG_QE_TILE128).
 *
 * Both hold a 128 x 128 tile in registers the same way (quant_engine.h:
 * thread (rb, lb), R tokens x 8 features, the family's hooks) and
 * quantise it in one pass; they differ in the scales (per token and
 * feature, or one a tile), where those are stored and how the staged qt
 * tile leaves. An emitter fills struct lg_qb (lg_qb_init, then its flags
 * and strings) with its lg_qb_ops, emits the shared memory and the CTA's
 * place (from the pieces below and its own), then lg_qb_emit_body.
 */
#ifndef LG_QUANT_BODY_H
#define LG_QUANT_BODY_H

#include <stdbool.h>
#include <stdint.h>

#include "quant_engine.h"

struct lg_qb;

/* What an emitter adds to the shared body. */
struct lg_qb_ops {
	/* The block's scales, after the thread's maxima (rmax, cmax): the
	 * reductions, the stores of s / st, what the quantising pass reads. */
	void (*scales)(lg_buf *b, const struct lg_qb *k);
	/* With the columnwise copy: the comment on it and the column scales'
	 * loads before the quantising pass (the engine declares cw after). */
	void (*col_setup)(lg_buf *b, const struct lg_qb *k);
	/* In the pass over token pairs p, the rowwise copy: the pair's scales
	 * (lines before its q rows, if any) and lg_q's arguments after y for
	 * tokens 2p (*a0) and 2p + 1 (*a1). */
	void (*row_args)(lg_buf *b, const struct lg_qb *k, const char **a0, const char **a1);
	/* With the columnwise copy: the staged tile (after its barrier) to qt. */
	void (*store_qt)(lg_buf *b, const struct lg_qb *k);
};

/* The emission state of one body. */
struct lg_qb {
	struct lg_qe ev; /* the engine as given, its variant set by lg_qb_emit_body */
	const struct lg_qe *e; /* &ev */
	const struct lg_qe_hooks *h;
	const struct lg_qb_ops *ops;
	int r, warps, fb;
	int64_t nb;
	bool bf16, rmax, cmax; /* bf16 values; row maxima, column maxima needed */
	const char *q, *s, *qt, *st, *m;
	const char *rword; /* whose scale a q value takes ("token's", "tile's") */
	const char *cq;    /* lg_q's arguments after y for a column byte */
};

/* 128-feature blocks a CTA does in turn; feature groups of a token tile
 * (CTAs along the features). */
int lg_qb_fblocks(const struct lg_qe *e);
int64_t lg_qb_groups(const struct lg_qe *e);
/* name, or def where NULL. */
const char *lg_qb_name(const char *name, const char *def);

/* The state for e and h (variant -1) and the emitter's ops: row maxima
 * with the rowwise copy, column maxima with the columnwise copy (an
 * emitter may change those, and sets rword and cq, before emitting). */
void lg_qb_init(struct lg_qb *k, const struct lg_qe *e, const struct lg_qe_hooks *h, const struct lg_qb_ops *ops);
/* Shared memory: the qt staging tile (columnwise copy) and the warps'
 * column maxima cpart (cmax). */
void lg_qb_emit_smem(lg_buf *b, const struct lg_qb *k);
/* The thread's place: lb, rb, r0. */
void lg_qb_emit_thread_place(lg_buf *b, const struct lg_qb *k);
/* The place of a CTA of a flat grid (or the family's, lg_qe.tile /
 * group): tt, cg, m0 and rows. */
void lg_qb_emit_tile_place(lg_buf *b, const struct lg_qb *k);
/* Column maxima across the CTA: cpart after the barrier. */
void lg_qb_emit_col_amax(lg_buf *b, const struct lg_qb *k);
/* After the place: the prologue hook, the raw registers, the feature-block
 * loop (a copy for each case with lg_qe.cta_case). */
void lg_qb_emit_body(lg_buf *b, struct lg_qb *k);

#endif
