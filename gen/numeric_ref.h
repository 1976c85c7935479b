/*
 * numeric_ref.h - plain-C number formats for the CPU references: bf16 and
 * e4m3 conversions (round-to-nearest-even, bit-exact with the GPU's), the
 * blockwise scale of KERNELS.md 1.2, and the reciprocal RMS.
 */
#ifndef LG_NUMERIC_REF_H
#define LG_NUMERIC_REF_H

#include <stdbool.h>
#include <stdint.h>

float lg_ref_bf16_to_f32(uint16_t h);
uint16_t lg_ref_f32_to_bf16(float f);      /* RNE; NaN stays NaN */
uint8_t lg_ref_f32_to_e4m3(float f);       /* RNE, saturating to +-448, NaN -> 0x7f */
float lg_ref_e4m3_to_f32(uint8_t b);
/* max(amax / 448, 1e-30), and with pow2 rounded up to a power of two. */
float lg_ref_scale(float amax, bool pow2);
/* e4m3 of v / s: v * (1/s) when s is a power of two (exact), else v / s. */
uint8_t lg_ref_quant(float v, float s, bool pow2);
/* (float)(1 / sqrt(sumsq / n + eps)), in double. */
float lg_ref_rrms(double sumsq, int64_t n, double eps);

#endif
