/*
 * fp8_gemm_tile.h - the blockwise FP8 GEMM's tile as the emitter
 * (fp8_gemm_emit.c) reads it: warpgroups, waves, the ring's stages and
 * scale slots, the epilogue's buffers (fp8_gemm_tile.c says why each is
 * what it is). What the families read is in fp8_gemm_emit.h.
 */
#ifndef LG_FP8_GEMM_TILE_H
#define LG_FP8_GEMM_TILE_H

#include <stdbool.h>

#include "fp8_gemm_emit.h"

#define BK 128   /* reduction a stage: one 128-byte row of e4m3 (the swizzle atom) */
#define ROWB 128 /* bytes of a shared row */

/* m64 waves a consumer warpgroup issues a stage (1 or 2). */
int lg_fp8_gemm_waves(const struct lg_fp8_gemm *g);
/* Consumer warpgroups a CTA. */
int lg_fp8_gemm_consumers(const struct lg_fp8_gemm *g);
/* A consumer warpgroup's first row in its tiles: wg times this (0: pingpong). */
int lg_fp8_gemm_wg_rows(const struct lg_fp8_gemm *g);
/* Stages a group of the `ahead` loop. */
int lg_fp8_gemm_group(const struct lg_fp8_gemm *g);
/* Does the promotion read B's per-row scales from the stage's slot? */
bool lg_fp8_gemm_late_scales(const struct lg_fp8_gemm *g);
/* Bytes of a stage in the ring (A's and B's rows). */
unsigned lg_fp8_gemm_stage_bytes(const struct lg_fp8_gemm *g);
/* Floats of a stage's scale slot. */
int lg_fp8_gemm_slot(const struct lg_fp8_gemm *g);
/* tile.epilogue 3: one half-width buffer a warpgroup. */
bool lg_fp8_gemm_half_out(const struct lg_fp8_gemm *g);
/* Columns of an epilogue buffer's row. */
int lg_fp8_gemm_out_cols(const struct lg_fp8_gemm *g);
/* The epilogue's 64-row buffers a consumer warpgroup. */
int lg_fp8_gemm_out_slots(const struct lg_fp8_gemm *g);
/* Bytes of a 64-row epilogue buffer. */
int lg_fp8_gemm_slot_bytes(const struct lg_fp8_gemm *g);
/* Bytes of all the epilogue's buffers. */
unsigned lg_fp8_gemm_out_bytes(const struct lg_fp8_gemm *g);
/* The output's swizzle span: bytes of a box's row. */
int lg_fp8_gemm_out_span(const struct lg_fp8_gemm *g);
/* One 128-block of B's tile scales a tile (bn divides 128). */
bool lg_fp8_gemm_one_block(int bn);

#endif
