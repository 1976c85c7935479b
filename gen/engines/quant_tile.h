/*
 * quant_tile.h - the weight-tile FP8 quantiser (layout LG_QE_TILE128 of
 * quant_engine.h; docs/kernels.md 1.3, weights): one scale a 128 x 128
 * tile, q [M, K] with s [cdiv(M, 128), K/128], and with lg_qe.cols the
 * transposed copy qt / st with the same tiles' scales (per expert with
 * lg_qe.expert_rows). Families reach it through lg_qe_emit_kernel /
 * lg_qe_emit_body, which hand an LG_QE_TILE128 engine to it.
 */
#ifndef LG_QUANT_TILE_H
#define LG_QUANT_TILE_H

#include "quant_engine.h"

/* Emit the kernel body (inside its braces) of the weight-tile quantiser
 * for the hooks (e->layout LG_QE_TILE128, e->rows on). */
void lg_qtile_emit_body(lg_buf *b, const struct lg_qe *e, const struct lg_qe_hooks *h);

#endif
