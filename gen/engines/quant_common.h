/*
 * quant_common.h - emission shared by the families that quantise to
 * blockwise FP8 (docs/kernels.md 1): the quantiser input lg_q, the scale of a
 * block from its amax, and the transposed write of a 128 x 128 qt tile from
 * its staging copy in shared memory. The e4m3 conversion itself is the
 * lg_e4m3x2 / lg_e4m3x4 helper of templates/fp8_e4m3.cuh (hardware cvt on
 * sm_89+, the bit-exact software version before), pulled in by use.
 */
#ifndef LG_QUANT_COMMON_H
#define LG_QUANT_COMMON_H

#include <stdbool.h>

#include "family.h"

/* The spec's quant recipe: a rowwise copy asked for, a columnwise copy
 * asked for, power-of-two scales. */
bool lg_quant_rowwise(const struct lg_spec *s);
bool lg_quant_colwise(const struct lg_spec *s);
bool lg_quant_pow2(const struct lg_spec *s);
/* For a family's uses(): arguments q and sc (rowwise) and qt and st
 * (columnwise, by index) are unused when the spec does not ask for their
 * copy. */
void lg_quant_uses(const struct lg_spec *s, unsigned char *used, int q, int sc, int qt, int st);

/* `lg_q(y, inv)` with power-of-two scales (y * inv, exact), else
 * `lg_q(y, sc, inv)` (y / sc correctly rounded; inv = 1 / sc): the value
 * whose e4m3 rounding is the payload of y. */
void lg_emit_quant_q(lg_buf *b, bool pow2);
/* The arguments of lg_q after y: `inv` for power-of-two scales, else `both`
 * ("sc, inv"). */
const char *lg_quant_q_args(bool pow2, const char *both, const char *inv);
/* `const float sc = <scale of amax>, inv = <1 / sc>;` (docs/kernels.md 1.2). */
void lg_emit_scale(lg_buf *b, bool pow2, const char *sc, const char *amax, const char *inv);

/* The rowwise quantisation of 8 consecutive values y[0..7] (y: an array
 * expression, "y" or "y[i]") of one 1x128 block whose amax is `amax`:
 * `sc`, `inv` (lg_emit_scale), then the payload bytes packed in two words
 * `p0` (values 0..3) and `p1` (4..7). */
void lg_emit_pack8(lg_buf *b, bool pow2, const char *y);

/* How the lines of a flat qt (rows 128-byte aligned, LG_QT_PITCH) leave,
 * tile.qt_store (lg_qe_plan_qt_store): LG_QT_WHOLE (2, the default) whole
 * 16-byte evict-first stores (st.global.cs); LG_QT_NARROW (1) the former
 * store, each piece tested at run time; LG_QT_WB (3) the whole stores of
 * LG_QT_WHOLE as plain write-back stores (st.global), made so that a
 * 32-byte sector two tiles' lines shared at the former pitch (rows an odd
 * multiple of 16 apart) merged in L2; at this pitch no line shares one. */
enum lg_qt_store { LG_QT_NARROW = 1, LG_QT_WHOLE = 2, LG_QT_WB = 3 }; /* = the tile value */

/* The qt staging tile: u8 stage[128 features][128 tokens], one 128-byte
 * line per feature c, with token byte t of line c stored at t ^ (8 * (c / 8))
 * (the XOR keeps both the writes of the quantising threads, 8 features
 * each, and the 16-byte reads below free of bank conflicts).
 *
 * lg_emit_qt_lines: the write of the tile to qt [hidden, round_up(M, 128)]
 * (a flat tensor), lg_emit_qt_lines_pitched with qtg = qt, M and t0 m0.
 * Uses stage, qt, M, k0 (first feature), m0 (first token). */
void lg_emit_qt_lines(lg_buf *b, int threads, enum lg_qt_store store);
/* A flat qt of `m` tokens (an expression), its rows round_up(m, 128) bytes
 * apart (LG_QT_PITCH; with `pitch`, the name of an i64 run-time size, that
 * many bytes, 0 standing for round_up(m, 128): qt is then the tokens'
 * columns of a wider copy) from `base` (a 16-byte aligned u8 *), the tile at
 * token t0 (a multiple of 128): each staged line whole (128 bytes), the
 * tail [m, round_up(m, 128)) included (the staged bytes of absent tokens
 * must be zeros), in whole 16-byte stores, evict-first (LG_QT_WHOLE) or write-back
 * (LG_QT_WB); LG_QT_NARROW: the former store (tile.qt_store 1, kept for
 * timing it), a run-time test of each piece and lg_st16_any where it fails
 * (never, at this pitch). */
void lg_emit_qt_lines_pitched(lg_buf *b, int threads, const char *base, const char *m, const char *pitch,
			      const char *t0, enum lg_qt_store store);
/* A qt of rows `ld` bytes apart (the weight's transposed copy, qt [K, M]
 * of LG_QE_TILE128, M any): when ld is a multiple of 16, the 16-byte
 * pieces of lg_emit_qt_lines_to, else lg_emit_qt_lines_realign; the branch
 * is the same in every thread. Stores `rows` bytes of each line. */
void lg_emit_qt_lines_flat(lg_buf *b, int threads, const char *base, const char *ld, const char *t0);
/* Each line is 128 contiguous bytes of a qt row at token t0 of rows `ld`
 * bytes long from `base` (a u8 * expression), 16 bytes a thread over
 * `threads` threads; 16-byte stores when qt rows are 16-byte aligned
 * (ld % 16 == 0) and the piece is full, else lg_st16_any (aligned words
 * and bytes at the ends; bytes for a partial piece). */
void lg_emit_qt_lines_to(lg_buf *b, int threads, const char *base, const char *ld, const char *t0);
/* The store of every layout: qt rows at any byte offset (a flat tensor at
 * any token count, or per expert, where ld is an expert's count): each
 * line's whole aligned 16-byte chunks of memory in one store each (the
 * staged bytes shifted to the chunk boundary: three 8-byte words a chunk,
 * funnel-shifted), its head and tail (the partial chunks, at most 30
 * bytes) a byte a lane, a warp a line; the heads and tails pass is skipped
 * when ld and rows are multiples of 16 (base + t0 must then be 16-byte
 * aligned). The same bytes as lg_emit_qt_lines_to. */
void lg_emit_qt_lines_realign(lg_buf *b, int threads, const char *base, const char *ld, const char *t0);

#endif
