/*
 * swiglu_common.h - what the two SwiGLU + FP8 families share (swiglu_quant,
 * docs/kernels.md K7; batch_swiglu_quant, K6): the values they hand the
 * quantiser engine (quant_engine.h), their plan, launch shape, emission and
 * tuning candidates. A family file declares keys, sizes and arguments and
 * passes its kind.
 */
#ifndef LG_SWIGLU_COMMON_H
#define LG_SWIGLU_COMMON_H

#include <stdbool.h>

#include "family.h"

#define LG_SWIGLU_N_MAX 16384          /* intermediate: x rows are 2n <= 32768 wide */
#define LG_SWIGLU_TOKENS_MAX (1 << 28) /* rows of x (the grid stays far below 2^31 CTAs) */
#define LG_SWIGLU_EXPERTS_MAX 4096

/* The tile keys both families declare: threads a CTA, feature blocks a CTA,
 * CTAs an SM (family.h). */
extern const int64_t lg_swiglu_threads_ok[];
extern const int64_t lg_swiglu_fblocks_ok[];
#define LG_SWIGLU_TILE_KEYS(kt, kf, ko, kp)                                                             \
	[(kt)] = LG_KEY_TILE("threads", "t", 256, 512, lg_swiglu_threads_ok,                              \
			     "threads per 128 x 128 tile: 512 (4 tokens a thread, the default) or 256 (8)"), \
	[(kf)] = LG_KEY_TILE("fblocks", "f", 1, 256, lg_swiglu_fblocks_ok,                                \
			     "128-feature blocks of the output a CTA quantises in turn (batch_swiglu_quant "  \
			     "backward: the gate half's n/128 or all 2n/128, for dprob)"),                                          \
	[(ko)] = LG_KEY_TILE_MIN_CTAS,                                                                     \
	[(kp)] = LG_KEY_TILE("prefetch", "a", 0, 1, NULL,                                                \
			     "1: with fblocks > 1, the next feature block's loads issued (into registers) " \
			     "before this block's barriers and stores")

/* What differs between the two families: the prob weight, dprob and the
 * experts (K6), and their key indices (-1: none). */
struct lg_swiglu_kind {
	bool weighted;   /* K6: y and dx times the row's prob; dprob; per-expert layout */
	int key_n;       /* "intermediate" */
	int key_dx_bf16; /* "dx_bf16" */
	int key_experts; /* "experts" */
	/* "tile.threads", "tile.fblocks", "tile.min_ctas", "tile.prefetch",
	 * "tile.tiles" (K6: token tiles a CTA), "tile.qt_store" (K7: the flat
	 * qt store, quant_engine.h) */
	int key_threads, key_fblocks, key_min_ctas, key_prefetch, key_tiles, key_qt_store;
};

/* Each family file's kind (swiglu_quant.c, batch_swiglu_quant.c). */
extern const struct lg_swiglu_kind lg_swiglu_kind_swiglu_quant, lg_swiglu_kind_batch_swiglu_quant;

/* The family functions of both (family.h), for the spec's op. validate:
 * dx_bf16 only backward; K6's backward writes both copies and takes every
 * feature block a CTA. */
lg_status lg_swiglu_validate(const struct lg_spec *s, const char *where);
lg_status lg_swiglu_plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p);
void lg_swiglu_emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p);
void lg_swiglu_geometry(const struct lg_plan *p, int e, const int64_t *sizes, struct lg_launch_dim *d);
int lg_swiglu_candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max);

#endif
