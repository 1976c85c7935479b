/*
 * swiglu_common.h - what the two SwiGLU + FP8 families share (swiglu_quant,
 * KERNELS.md K7; batch_swiglu_quant, K6): the values they hand the
 * quantiser engine (quant_common.h), their plan, launch shape and emission.
 * A family file declares keys, sizes and arguments and passes its kind.
 */
#ifndef LG_SWIGLU_COMMON_H
#define LG_SWIGLU_COMMON_H

#include <stdbool.h>

#include "family.h"

#define LG_SWIGLU_N_MAX 16384         /* intermediate: x rows are 2n <= 32768 wide */
#define LG_SWIGLU_TOKENS_MAX (1 << 28) /* rows of x */
#define LG_SWIGLU_EXPERTS_MAX 4096

/* What differs between the two families: the prob weight and the experts
 * (K6), the bf16 dx option (K7), and their key indices (-1: none). */
struct lg_swiglu_kind {
	bool weighted;   /* K6: y and dx times the row's prob; dprob; per-expert layout */
	int key_n;       /* "intermediate" */
	int key_dx_bf16; /* "dx_bf16" */
	int key_experts; /* "experts" */
};

lg_status lg_swiglu_plan(const struct lg_swiglu_kind *k, const struct lg_spec *s, const struct lg_target *t,
			 struct lg_plan *p);
void lg_swiglu_emit(const struct lg_swiglu_kind *k, lg_buf *b, const struct lg_spec *s, const struct lg_target *t,
		    const struct lg_plan *p);
void lg_swiglu_geometry(const struct lg_plan *p, int e, const int64_t *sizes, struct lg_launch_dim *d);
size_t lg_swiglu_workspace(const struct lg_plan *p);

#endif
