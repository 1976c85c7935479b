/*
 * adamw_ref.c - CPU reference of family "adamw" (gen/families/adamw.c):
 * torch.optim.AdamW's update (amsgrad off, maximize off), element by
 * element, in its order of operations, each fp32 operation rounded once
 * (C11 with -ffp-contract off: no contraction), the lerp an fmaf as
 * torch's lerp is; the step's scalars in fp64 from step and lr, rounded
 * once to fp32 as torch rounds its Python floats. The GPU computes the
 * same operations, so it must agree bit for bit (but for pow: the
 * device's fp64 pow may differ from the host's by an fp64 ulp, which moves
 * an fp32 scalar only when it lies within 2^-29 of a rounding boundary).
 */
#include "list_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "numeric_ref.h"

static float ld(const void *a, bool bf16, size_t i)
{
	float f;
	if (bf16) {
		uint32_t w = (uint32_t)((const uint16_t *)a)[i] << 16;
		memcpy(&f, &w, 4);
		return f;
	}
	return ((const float *)a)[i];
}

static void st(void *a, bool bf16, size_t i, float f)
{
	if (bf16)
		((uint16_t *)a)[i] = lg_ref_f32_to_bf16(f);
	else
		((float *)a)[i] = f;
}

void lg_ref_adamw_step(const struct lg_ref_adamw_hp *h, void *p, const void *g, void *m, void *v, size_t n,
		  float step, float lr)
{
	double t = step, rate = lr;
	double bc1 = 1.0 - pow(h->beta1, t), bc2 = 1.0 - pow(h->beta2, t);
	float decay = (float)(1.0 - rate * h->weight_decay), neg_step = (float)-(rate / bc1);
	float bc2_sqrt = (float)sqrt(bc2), w1 = (float)(1.0 - h->beta1);
	float beta2 = (float)h->beta2, w2 = (float)(1.0 - h->beta2), eps = (float)h->eps;
	for (size_t i = 0; i < n; i++) {
		float pi = ld(p, h->param_bf16, i), gi = ld(g, h->grad_bf16, i), mi = ld(m, h->moments_bf16, i);
		float vi = ld(v, h->moments_bf16, i);
		pi = pi * decay;
		mi = w1 < 0.5f ? fmaf(w1, gi - mi, mi) : fmaf(w1 - 1.0f, gi - mi, gi);
		vi = vi * beta2 + (w2 * gi) * gi;
		float den = sqrtf(vi) / bc2_sqrt + eps;
		st(p, h->param_bf16, i, pi + neg_step * (mi / den));
		st(m, h->moments_bf16, i, mi);
		st(v, h->moments_bf16, i, vi);
	}
}

struct lg_ref_adamw_hp lg_ref_adamw_hp_of(const struct lg_spec *s)
{
	/* adamw: the "param" key; adamw_fp8: the spec's dtype is the weight's */
	bool pb = lg_family_key(s->fam, "param") >= 0 ? lg_ref_int(s, "param") == 1 : s->dtype == LG_DTYPE_BF16;
	return (struct lg_ref_adamw_hp){lg_ref_num(s, "beta1"), lg_ref_num(s, "beta2"), lg_ref_num(s, "eps"),
					lg_ref_num(s, "weight_decay"), lg_ref_int(s, "grad") == 1,
					lg_ref_int(s, "moments") == 1, pb};
}

/* The harness has no case for a family that updates its list in place:
 * its tests (test_adamw_ref, gpu_test_adamw) build the list themselves. The
 * case here reads an empty table (0 rows are a valid launch). */
static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	(void)s, (void)c;
}

static void fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed)
{
	(void)s, (void)seed;
	if (c->buf[0].host)
		memset(c->buf[0].host, 0, c->buf[0].count * c->buf[0].elem);
	if (c->buf[1].host)
		*(float *)c->buf[1].host = 1.0f;
	if (c->buf[2].host)
		*(float *)c->buf[2].host = 1e-3f;
}

static void run(const struct lg_spec *s, struct lg_ref_case *c)
{
	(void)s, (void)c;
}

const struct lg_ref_family lg_ref_adamw = {describe, fill, run};
