/*
 * swiglu_common.c - plan, launch shape and emission shared by the SwiGLU +
 * FP8 families (swiglu_common.h).
 *
 * The values, in fp32, from bf16 a = x1 (gate) and u = x2 (up), s =
 * sigmoid(a) = 1 / (1 + e^-a) with the hardware exp (ex2.approx: relative
 * error about 2^-21, the bound the references allow is 2^-18):
 *   forward  y = (a s) u, times p (the row's prob, K6);
 *   backward dx1 = (g u) s (1 + a (1 - s)), dx2 = (g a) s, both times p;
 *            dp += (a s) u g (K6).
 * They are handed to the quantiser engine (quant_common.h) tile by tile.
 */
#include <stdio.h>

#include "swiglu_common.h"

#include "quant_common.h"

enum { P_N, P_BWD, P_WEIGHTED, P_DXBF16, P_EXPERTS };

lg_status lg_swiglu_plan(const struct lg_swiglu_kind *k, const struct lg_spec *s, const struct lg_target *t,
			 struct lg_plan *p)
{
	(void)t;
	p->v[P_N] = lg_spec_int(s, k->key_n);
	p->v[P_BWD] = s->pass == LG_PASS_BACKWARD;
	p->v[P_WEIGHTED] = k->weighted;
	p->v[P_DXBF16] = k->key_dx_bf16 >= 0 && lg_spec_int(s, k->key_dx_bf16);
	p->v[P_EXPERTS] = k->key_experts >= 0 ? lg_spec_int(s, k->key_experts) : 1;
	p->nentries = 1;
	snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
	return LG_OK;
}

/* The SwiGLU values as device helpers (see the header comment). */
static void emit_values(lg_buf *b, bool weighted, bool bwd)
{
	lg_comment(b, "sigmoid in fp32: 1 / (1 + e^-a) (ex2.approx; 0 and 1 at the ends, never NaN).");
	lg_line(b, "static __device__ __forceinline__ float lg_swiglu_sig(float a)");
	lg_open(b, "{");
	lg_line(b, "return 1.0f / (1.0f + __expf(-a));");
	lg_close(b);
	if (!bwd) {
		lg_comment(b, "y = silu(a) u%s.", weighted ? " p" : "");
		lg_line(b, "static __device__ __forceinline__ float lg_swiglu_y(float a, float u%s)",
			weighted ? ", float p" : "");
		lg_open(b, "{");
		lg_line(b, "return a * lg_swiglu_sig(a) * u%s;", weighted ? " * p" : "");
		lg_close(b);
		return;
	}
	lg_comment(b, "dx1 = g u s (1 + a (1 - s)) and dx2 = g a s%s (s = sigmoid(a))%s.", weighted ? ", times p" : "",
		   weighted ? "; dp += silu(a) u g" : "");
	lg_line(b, "static __device__ __forceinline__ void lg_swiglu_dx(float a, float u, float g%s, float &dx1, "
		   "float &dx2%s)", weighted ? ", float p" : "", weighted ? ", float &dp" : "");
	lg_open(b, "{");
	lg_line(b, "const float s = lg_swiglu_sig(a), gp = g%s;", weighted ? " * p" : "");
	lg_line(b, "dx1 = gp * u * s * (1.0f + a * (1.0f - s));");
	lg_line(b, "dx2 = gp * a * s;");
	if (weighted)
		lg_line(b, "dp += a * s * u * g;");
	lg_close(b);
}

void lg_swiglu_emit(const struct lg_swiglu_kind *k, lg_buf *b, const struct lg_spec *s, const struct lg_target *t,
		    const struct lg_plan *p)
{
	(void)k;
	(void)t;
	bool bwd = p->v[P_BWD] != 0;
	lg_section(b, "helpers for this spec", NULL);
	emit_values(b, p->v[P_WEIGHTED] != 0, bwd);
	lg_section(b, p->entry[0], bwd ? "SwiGLU backward + blockwise FP8" : "SwiGLU forward + blockwise FP8");
	lg_comment(b, "The quantiser engine (quant_common.h) is not merged yet: nothing is launched.");
	lg_emit_signature(b, s, p->entry[0], "__launch_bounds__(%d)", 256);
	lg_open(b, "{");
	lg_close(b);
}

void lg_swiglu_geometry(const struct lg_plan *p, int e, const int64_t *sz, struct lg_launch_dim *d)
{
	(void)p;
	(void)e;
	(void)sz;
	d->grid[0] = 0;
	d->grid[1] = d->grid[2] = 1;
	d->block[0] = 256;
	d->block[1] = d->block[2] = 1;
	d->smem = 0;
}

size_t lg_swiglu_workspace(const struct lg_plan *p)
{
	(void)p;
	return 0;
}
