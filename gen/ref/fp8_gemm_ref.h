/*
 * fp8_gemm_ref.h - the float64 blockwise FP8 GEMM shared by the references
 * of fp8_gemm and fp8_grouped_gemm.
 */
#ifndef LG_FP8_GEMM_REF_H
#define LG_FP8_GEMM_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ref.h"

/* out [rows, cols] = sum over the reduction of dequantised A [rows, red]
 * (scales sa [cdiv(red, 128), rows]) times dequantised B [cols, red]
 * (scales: b_rowscale, sb [cdiv(red, 128), cols]; else 128 x 128 tiles
 * sb [cdiv(cols, 128), cdiv(red, 128)]), in float64. */
struct lg_ref_fp8_op {
	const uint8_t *a;
	const float *sa;
	const uint8_t *b;
	const float *sb;
	size_t rows, cols, red;
	bool b_rowscale;
	size_t ld; /* elements from one row of a or b to the next (0: red; the wgrad's round_up(red, 128)) */
};
void lg_ref_fp8_product(const struct lg_ref_fp8_op *o, double *out);
/* Random e4m3 payloads (2 N(0, 1), quantised) and scales (0.5 .. 1.5 times
 * 2^-3 .. 2^3). */
void lg_ref_fp8_fill(uint8_t *q, size_t n, float *sc, size_t ns, uint64_t *st);
/* y [n] into output o (fp32 or bf16 by the spec's dtype), its atol set
 * so that the bound is 2e-3 (fp32; bf16: 2e-3 + 2^-8) of max |y|. */
/* dw's check for both GEMM families (tolerance; accumulate zeroes dw). */
void lg_ref_fp8_out(const struct lg_spec *s, struct lg_ref_buf *out);
void lg_ref_fp8_store(const struct lg_spec *s, struct lg_ref_buf *o, const double *y, size_t n);

#endif
