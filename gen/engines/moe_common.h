/*
 * moe_common.h - what the MoE dispatch and combine families share
 * (docs/kernels.md K4, K5): the routing keys (experts, top_k, multiple), the
 * padded row capacity, and the two token-driven kernels every pass of
 * moe_permute and moe_unpermute is one of:
 *
 *   dispatch: one CTA per token reads the token's row once and writes it to
 *     each of its expert rows (row_id_map[t, e] >= 0, ascending e), with
 *     the token's probability of that expert; extra CTAs write the padding
 *     rows of each expert and the rows past the padded total as zeros
 *     (probability 0; an FP8 scale of the zero block). Plain (no weights,
 *     no dot products) it has a pipelined form too (tile.pipeline 2):
 *     persistent CTAs, a map warp reading the next token's map row while
 *     the others store this token's row. Optionally each row
 *     scaled by a per-row weight and the dot product of the token's row
 *     with another row (the backward of a weighted combine).
 *   combine: each token's expert rows added in ascending expert order in
 *     fp32 (optionally weighted by a per-row probability), the token's row
 *     written once; optionally the probabilities restored to [tokens,
 *     experts] (0 where not routed). By default (tile.pipeline 2)
 *     persistent CTAs loop over tokens, a map warp reading the next
 *     token's row_id_map row while the others add this token's rows;
 *     tile.pipeline 1, one CTA a token, gives the same bytes.
 *
 * Rows are moved in pieces of the largest power of two up to 16 bytes that
 * divides a row's bytes, so every hidden size works (an odd bf16 hidden in
 * 2-byte pieces). Padded rows: P_e = round_up(count_e, multiple); the
 * output buffers hold the static capacity tokens * top_k + experts *
 * (multiple - 1) rows (LG_MOE_ROWS), since the padded total is known only
 * on the device. Row ids are int32: a launch whose capacity passes 2^31 - 1
 * is refused (lg_moe_refuse_past_int32, in every MoE family's geometry).
 */
#ifndef LG_MOE_COMMON_H
#define LG_MOE_COMMON_H

#include <stdbool.h>
#include <stdint.h>

#include "family.h"

/* The rows of a padded dispatch buffer: a bound on the padded total for
 * tokens routed to at most top_k experts each. */
#define LG_MOE_ROWS "tokens * top_k + experts * (multiple - 1)"

/* The routing keys, at indices e, e + 1, e + 2 of a family's table. */
#define LG_KEYS_MOE(e)                                                                          \
	[(e)] = {.path = "experts", .type = LG_KEY_INT, .flags = LG_KEY_REQUIRED | LG_KEY_SHAPE, \
		 .min = 1, .max = 1024, .naming = LG_NAME_ALWAYS, .rank = 11, .abbrev = "e",       \
		 .doc = "experts E (any count, not only powers of two)"},                          \
	[(e) + 1] = {.path = "top_k", .type = LG_KEY_INT, .flags = LG_KEY_REQUIRED | LG_KEY_SHAPE, \
		     .min = 1, .max = 1024, .naming = LG_NAME_ALWAYS, .rank = 12, .abbrev = "k",    \
		     .doc = "experts a token is routed to at most (sizes the padded row buffers)"}, \
	[(e) + 2] = {.path = "multiple", .type = LG_KEY_INT, .flags = LG_KEY_SHAPE, .min = 1,      \
		     .max = 1024, .has_def = true, .def = 16, .naming = LG_NAME_ALWAYS, .rank = 13, \
		     .abbrev = "m", .doc = "each expert's rows padded to a multiple of this"}

/* top_k <= experts (the keys at e, e + 1). */
lg_status lg_moe_validate(const struct lg_spec *s, int e, const char *where);

/* How a row of `hidden` elements of `es` bytes is moved. */
struct lg_moe_rows {
	int64_t hidden, bytes; /* elements, bytes of a row */
	int vb, pieces;        /* bytes a piece, pieces a row */
	int threads, kp;       /* threads a CTA, pieces a thread (pipelined: the adding threads) */
	bool pipelined;        /* tile.pipeline 2: persistent CTAs, + one map warp */
};
/* threads: the spec's tile.threads, or 0 for the default (one piece a
 * thread up to 256 threads, whole warps). */
struct lg_moe_rows lg_moe_rows_of(int64_t hidden, int es, int threads);
/* tile.threads of a family's table at index k (after its LG_KEY_TILE_OBJ):
 * 32 to 1024, a multiple of 32 (validated by lg_moe_validate_threads). */
#define LG_KEY_MOE_THREADS                                                                       \
	LG_KEY_TILE("threads", "t", 32, 1024, lg_moe_threads_ok,                                 \
		    "threads a CTA (one token); default: one 16-byte piece each up to 256")
extern const int64_t lg_moe_threads_ok[];
/* tile.pipeline of a combine family's table (after tile.threads): 2, the
 * default of the combine passes, persistent CTAs (a grid of what is
 * co-resident) looping over tokens, threads + 32 a CTA: the last warp reads
 * the next token's map row into a second shared buffer while the other
 * warps load, weight and add this token's rows (one dependent DRAM trip a
 * token); 1, one CTA a token (three dependent trips: map row, then rows
 * and weights, then the adds; more registers past one piece a thread).
 * H200, 8192 tokens, hidden 2048, top-8: 83.4 us against 120.1. The plain
 * dispatch (moe_permute forward) takes 2 too, 1 its default: persistent
 * CTAs, the map warp reading the next token's map row while the others
 * store this token's row and load the next one's; the weighted dispatch
 * (moe_unpermute backward) takes only 1 (lg_moe_validate_pipeline). */
#define LG_KEY_MOE_PIPELINE                                                                      \
	LG_KEY_TILE("pipeline", "p", 1, 2, NULL,                                                 \
		    "2 (the combines' default) persistent CTAs, the next token's map read while "  \
		    "this one's rows are added or stored; 1 (the dispatch's) one CTA a token")
/* tile.pipeline (key kp) 2 only on a pass with a pipelined form (piped: the
 * combines and the plain dispatch) and with tile.threads (key kt) at most
 * 992 (the map warp makes 32 more; without tile.pipeline, more threads than
 * that take the form 1). */
lg_status lg_moe_validate_pipeline(const struct lg_spec *s, int kp, int kt, bool piped, const char *where);
/* tile.threads (key k) no more than a row's pieces rounded up to a warp. */
lg_status lg_moe_validate_threads(const struct lg_spec *s, int k, int64_t hidden, int es, const char *where);
/* Tuning candidates: tile.threads (key k) 64, 128, 256, 512 where valid;
 * a pass with a pipelined form (piped) each with tile.pipeline (key kp) 1
 * and 2, both named (none valid: the two forms alone). */
int lg_moe_candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max,
		      int k, int kp, bool piped);

/* One pass of moe_permute / moe_unpermute, by the names of its arguments
 * (NULL: not an argument of this pass). */
struct lg_moe_kernel {
	const char *entry, *what;
	int64_t experts, top_k, multiple;
	struct lg_moe_rows r;
	bool fp8, pow2;           /* rows of e4m3 with scales [., hidden / 128]; zero-block scale 2^-99 */
	const char *src, *src_s;  /* dispatch: the token rows [T, H] (+ scales); combine: [rows, H] */
	const char *dst, *dst_s;  /* dispatch: [rows, H] (+ scales); combine: [T, H] */
	const char *map, *offsets, *counts;
	const char *pin, *pout;   /* dispatch: probs [T, E] -> [rows]; combine: [rows] -> [T, E] */
	const char *weights;      /* per-row weights [rows] (combine: a weighted sum; dispatch: scaled rows) */
	const char *other, *dot;  /* dispatch: dot[r] = <src[t], other[r]> (+ pin[t, e]) */
};

/* Row ids are int32 (row_id_map, row_index, offsets): the capacity rows
 * (LG_MOE_ROWS) at `tokens` must stay below 2^31. Past it, d becomes a
 * geometry the runtime refuses (a grid wider than the hardware's: "sizes
 * beyond this kernel's launch geometry"), so such a launch fails instead of
 * wrapping the ids. Every MoE family's geometry() ends with it. */
void lg_moe_refuse_past_int32(int64_t tokens, int64_t top_k, int64_t experts, int64_t multiple,
			      struct lg_launch_dim *d);

/* The dispatch kernel (grid: tokens + LG_MOE_ZERO_CTAS) and the combine
 * kernel (grid: tokens; pipelined: tokens capped at `resident`, the CTAs
 * co-resident on the device, when known, i.e. not 0). */
#define LG_MOE_ZERO_CTAS 256
void lg_moe_emit_dispatch(lg_buf *b, const struct lg_spec *s, const struct lg_moe_kernel *k);
void lg_moe_emit_combine(lg_buf *b, const struct lg_spec *s, const struct lg_moe_kernel *k);
void lg_moe_geometry(const struct lg_moe_rows *r, bool dispatch, int64_t tokens, unsigned resident,
		     struct lg_launch_dim *d);

/* The plan of a one-entry dispatch or combine family (moe_permute,
 * moe_unpermute): rows of `hidden` elements of es bytes, the routing keys
 * at key kmoe (LG_KEYS_MOE), tile.threads at key kthreads and
 * tile.pipeline at key kpipe, kept in the plan's first values
 * (tile.pipeline: 2 by default on a combine pass, a persistent entry; 1 on
 * a dispatch); lg_moe_plan_geometry is such a family's geometry(),
 * lg_moe_plan_rows the rows it emits for. */
void lg_moe_plan(const struct lg_spec *s, struct lg_plan *p, int64_t hidden, int es, bool dispatch, int kmoe,
		 int kthreads, int kpipe);
struct lg_moe_rows lg_moe_plan_rows(const struct lg_plan *p);
void lg_moe_plan_geometry(const struct lg_plan *p, int e, const int64_t *sizes, struct lg_launch_dim *d);

#endif
