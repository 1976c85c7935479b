/*
 * swiglu_quant_ref.c - CPU reference of family "swiglu_quant" (docs/kernels.md
 * K7): the SwiGLU reference of batch_swiglu_quant_ref.c with one expert of
 * every row and no prob (swiglu_ref.h).
 */
#include "swiglu_ref.h"

static const struct lg_swiglu_ref_args fwd = {.x = 0, .g = -1, .p = -1, .counts = -1,
					      .q = 1, .s = 2, .qt = 3, .st = 4, .dp = -1, .dx = -1};
static const struct lg_swiglu_ref_args bwd = {.x = 1, .g = 0, .p = -1, .counts = -1,
					      .q = 2, .s = 3, .qt = 4, .st = 5, .dp = -1, .dx = 6};

static const struct lg_swiglu_ref_args *args(const struct lg_spec *s)
{
	return s->pass == LG_PASS_FORWARD ? &fwd : &bwd;
}

static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	lg_swiglu_ref_describe(s, c, args(s));
}

static void fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed)
{
	lg_swiglu_ref_fill(s, c, seed, args(s));
}

static void run(const struct lg_spec *s, struct lg_ref_case *c)
{
	lg_swiglu_ref_run(s, c, args(s));
}

const struct lg_ref_family lg_ref_swiglu_quant = {describe, fill, run};
