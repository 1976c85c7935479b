/*
 * swiglu_ref.h - the CPU reference shared by the SwiGLU + FP8 families
 * (swiglu_quant K7, batch_swiglu_quant K6; batch_swiglu_quant_ref.c): a
 * family names the arguments of each pass by index (-1: absent) and the
 * reference does the rest. K7 is K6 with one expert and no prob.
 */
#ifndef LG_SWIGLU_REF_H
#define LG_SWIGLU_REF_H

#include "ref.h"

/* Argument indices of one pass (-1 where the pass has none). */
struct lg_swiglu_ref_args {
	int x, g, p, counts;  /* inputs: g only backward, p and counts only K6 */
	int q, s, qt, st;     /* the quantised y (forward) or dx (backward) */
	int dp, dx;           /* K6 backward dprob; K7 backward bf16 dx */
};

/* Relative and absolute bound of the GPU's fp32 values against the
 * float64 ones (an approximate exp in the sigmoid, fp32 products). */
#define LG_SWIGLU_ERR_REL 0x1p-18
#define LG_SWIGLU_ERR_ABS 0x1p-126

void lg_swiglu_ref_describe(const struct lg_spec *s, struct lg_ref_case *c, const struct lg_swiglu_ref_args *a);
void lg_swiglu_ref_fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed,
			const struct lg_swiglu_ref_args *a);
void lg_swiglu_ref_run(const struct lg_spec *s, struct lg_ref_case *c, const struct lg_swiglu_ref_args *a);

#endif
