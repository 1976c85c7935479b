/*
 * norm_common.c - emission shared by the RMSNorm families (norm_common.h).
 */
#include "norm_common.h"

#include <stdio.h>
#include <stdlib.h>

#include "templates.h"

void lg_fmt_double(char out[32], double v)
{
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(out, 32, "%.*g", prec, v);
		if (strtod(out, NULL) == v)
			return;
	}
}

void lg_emit_rrms(lg_buf *b, const struct lg_spec *s)
{
	const struct lg_family *f = lg_family_get(s->op);
	char eps[32];
	lg_fmt_double(eps, lg_spec_num(s, lg_family_key(f, "eps")));
	lg_comment(b, "Reciprocal RMS from the fp64 sum of squares of one row, every step correctly");
	lg_comment(b, "rounded in fp64, so it matches the float64 reference bit for bit.");
	lg_open(b, "static __device__ __forceinline__ float lg_rrms(double sumsq) {");
	lg_line(b, "return (float)(1.0 / sqrt(sumsq / %lld.0 + %s));", (long long)lg_spec_int(s, lg_family_key(f, "hidden")), eps);
	lg_close(b);
	lg_line(b, "%s", "");
}

struct lg_rowlayout lg_rowlayout_make(int64_t hidden, int kmax, int threads)
{
	struct lg_rowlayout l = {.hidden = hidden, .lpr = 16};
	int64_t pieces = hidden / 8;
	while ((pieces + l.lpr - 1) / l.lpr > kmax)
		l.lpr *= 2;
	l.k = (int)((pieces + l.lpr - 1) / l.lpr);
	l.threads = threads < l.lpr ? l.lpr : threads;
	l.rows = l.threads / l.lpr;
	return l;
}

void lg_emit_row_prologue(lg_buf *b, const struct lg_rowlayout *l)
{
	lg_line(b, "const int lane = threadIdx.x & 31, slot = threadIdx.x / %d, t = threadIdx.x %% %d;", l->lpr,
		l->lpr);
	lg_line(b, "(void)lane;");
	if (l->lpr > 32) {
		lg_line(b, "__shared__ double dred[%d];", l->threads / 32);
		lg_line(b, "__shared__ float fred[%d];", l->threads / 32);
	}
}

void lg_emit_row_load(lg_buf *b, const struct lg_rowlayout *l, const char *dst, const char *base,
		      const char *ld, const char *extra)
{
	int64_t pieces = l->hidden / 8;
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int k = 0; k < %d; k++) {", l->k);
	lg_line(b, "const int c = t + k * %d;", l->lpr);
	lg_line(b, "%s[k] = lg_u32x4{0u, 0u, 0u, 0u};", dst);
	lg_line(b, "if (live && c < %lld) %s[k] = %s(%s + (m * %lld + c * 8) * 2%s%s);", (long long)pieces, dst, ld,
		base, (long long)l->hidden, extra ? ", " : "", extra ? extra : "");
	lg_close(b);
}

void lg_emit_row_sum(lg_buf *b, const struct lg_rowlayout *l, const char *type, const char *var)
{
	const char *fn = type[0] == 'd' ? "lg_dsum_xor" : "lg_sum_xor";
	if (l->lpr <= 32) {
		lg_line(b, "%s = %s(%s, 1, %d);", var, fn, var, l->lpr / 2);
		return;
	}
	const char *scratch = type[0] == 'd' ? "dred" : "fred";
	lg_line(b, "%s = %s(%s, 1, 16);", var, fn, var);
	lg_line(b, "if (lane == 0) %s[threadIdx.x >> 5] = %s;", scratch, var);
	lg_line(b, "__syncthreads();");
	lg_line(b, "%s = 0;", var);
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < %d; i++) %s += %s[slot * %d + i]; // fixed order", l->lpr / 32, var,
		scratch, l->lpr / 32);
	lg_line(b, "__syncthreads();");
}

void lg_emit_row_sumsq(lg_buf *b, const struct lg_rowlayout *l, const char *v)
{
	lg_comment(b, "Sum of squares: one independent fp64 chain per piece, added in a fixed order.");
	lg_line(b, "double sk[%d];", l->k);
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int k = 0; k < %d; k++)", l->k);
	lg_line(b, "\tsk[k] = lg_sumsq_bf16x2(lg_sumsq_bf16x2(lg_sumsq_bf16x2(lg_sumsq_bf16x2(0.0, %s[k].x), %s[k].y), %s[k].z), %s[k].w);",
		v, v, v, v);
	lg_line(b, "double ss = sk[0];");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int k = 1; k < %d; k++) ss += sk[k];", l->k);
	lg_emit_row_sum(b, l, "double", "ss");
}
