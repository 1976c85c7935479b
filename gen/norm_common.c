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
	char eps[32];
	lg_fmt_double(eps, s->eps);
	lg_comment(b, "Reciprocal RMS from the fp64 sum of squares of one row, every step correctly");
	lg_comment(b, "rounded in fp64, so it matches the float64 reference bit for bit.");
	lg_open(b, "static __device__ __forceinline__ float lg_rrms(double sumsq)");
	lg_line(b, "return (float)(1.0 / sqrt(sumsq / %lld.0 + %s));", (long long)s->dim[LG_DIM_HIDDEN],
		eps);
	lg_close(b);
	lg_line(b, "%s", "");
}

void lg_emit_e4m3(lg_buf *b, const struct lg_target *t)
{
	lg_emit_template(b, t->sm >= 89 ? "fp8_e4m3_ptx" : "fp8_e4m3_soft");
}
