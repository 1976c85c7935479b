/*
 * numeric_ref.h - plain-C number formats for the CPU references: bf16 and
 * e4m3 conversions (round-to-nearest-even, from the formats' definitions),
 * the blockwise scale of docs/kernels.md 1.2, and the reciprocal RMS.
 */
#ifndef LG_NUMERIC_REF_H
#define LG_NUMERIC_REF_H

#include <stdbool.h>
#include <stdint.h>

float lg_ref_bf16_to_f32(uint16_t h);
uint16_t lg_ref_f32_to_bf16(float f);      /* RNE, overflow to inf; NaN stays NaN */
/* A bf16 output the GPU computes in fp32 to within err of v (float64):
 * the reference's bf16 (v rounded to fp32, then to bf16 as above) and in
 * *slack the bf16 steps by which the GPU's may differ from it (0 when the
 * whole interval [v - err, v + err] rounds to the same bf16): for
 * LG_CMP_BF16_ULP with ulps 0. */
uint16_t lg_ref_bf16_bounded(double v, double err, uint16_t *slack);
/* Tests (test_compare): lg_ref_f32_to_bf16 rounds toward zero while on,
 * as a kernel built with cvt.rz.bf16x2 would (lg_ref_bf16_bounded's slack
 * stays that of RNE). */
void lg_ref_bf16_rz_for_tests(bool on);
uint8_t lg_ref_f32_to_e4m3(float f);       /* RNE, saturating to +-448, NaN -> 0x7f */
float lg_ref_e4m3_to_f32(uint8_t b);
/* max(amax / 448, 1e-30) in fp32; with pow2, 2^ceil(log2 of that). */
float lg_ref_scale(float amax, bool pow2);
/* e4m3 of the fp32 quotient v / s (an IEEE division; exact when s is a
 * power of two, so pow2 changes nothing). */
uint8_t lg_ref_quant(float v, float s, bool pow2);
/* (float)(1 / sqrt(sumsq / n + eps)), in double. */
float lg_ref_rrms(double sumsq, int64_t n, double eps);
/* True when every fp64 sum of the same n squares, whatever its order, gives
 * the same lg_ref_rrms as sumsq: then the GPU's reciprocal RMS is this one
 * bit for bit. False for about n 2^-29 of random rows. */
bool lg_ref_rrms_stable(double sumsq, int64_t n, double eps);

#endif
