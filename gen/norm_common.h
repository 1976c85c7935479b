/*
 * norm_common.h - emission shared by the RMSNorm families: the reciprocal
 * RMS from a float64 sum of squares, and the fp8 conversion for a target.
 */
#ifndef LG_NORM_COMMON_H
#define LG_NORM_COMMON_H

#include "family.h"

/* `lg_rrms(double S)`: (float)(1 / sqrt(S / hidden + eps)), every step in
 * correctly rounded fp64, as the CPU reference computes it. */
void lg_emit_rrms(lg_buf *b, const struct lg_spec *s);
/* The e4m3 conversion for a target: hardware cvt on sm_89+, the bit-exact
 * software version before. */
void lg_emit_e4m3(lg_buf *b, const struct lg_target *t);
/* Shortest decimal that round-trips a double, for literals in source. */
void lg_fmt_double(char out[32], double v);

#endif
