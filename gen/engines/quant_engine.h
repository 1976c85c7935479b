/*
 * quant_engine.h - the one blockwise FP8 quantiser of lingen (docs/kernels.md
 * 1.2, 1.3): the generator piece every quantising family calls to emit the
 * body of a kernel that quantises values the family computes.
 *
 * The unit of work is a tile of 128 tokens x 128 features (one 128x1
 * block per feature, one 1x128 block per token). Thread (rb, lb) of the
 * CTA holds R = 2048 / threads consecutive tokens r0 = R rb .. r0 + R - 1
 * of the tile by the 8 features 8 lb .. 8 lb + 7 of the current 128-feature
 * block, in registers:
 *   - LG_QE_F32:  `float v[R][8]`, the family's fp32 values;
 *   - LG_QE_BF16: `lg_u32x4 v[R]`, 8 bf16 values a token (the fast path of
 *     inputs that are bf16 already: block maxima on the bf16 bits, two
 *     values an instruction; bf16 -> fp32 is exact, so the result is the
 *     same as that of F32 on the widened values).
 * The family writes those values through its `values` hook, one token row
 * of 8 features at a time; the engine does the rest: block maxima (absent
 * rows of a partial tile zeroed first, so they count as 0), scales (power
 * of two with round_scale, else the correctly rounded divide), the rowwise
 * copy q [M, K] with s [K/128, M], the columnwise copy written transposed
 * qt [K, M] with st [cdiv(M, 128), K] (staged in a swizzled shared tile,
 * each 128-byte line stored by memory's aligned 16-byte chunks at any token
 * count: lg_emit_qt_lines_realign), any of rowwise / columnwise / both, and
 * no store past the last token (but for a flat qt's zero tail).
 *
 * Layouts (struct lg_qe.layout):
 *   - LG_QE_FLAT: one tensor of M tokens; qt [K, round_up(M, 128)], rows
 *     128-byte aligned (LG_QT_PITCH) for TMA (the FP8 wgrad's operand), the tail
 *     [M, round_up(M, 128)) of each row written as zeros at every launch
 *     (lg_emit_qt_lines_pitched).
 *   - LG_QE_EXPERTS: per expert (docs/kernels.md 1.3): tokens grouped by expert
 *     in contiguous segments of counts[e] tokens (counts: E int32 in device
 *     memory, read by the kernel; never the host), each segment quantised
 *     as a tensor of its own (its 128-token blocks start at its first
 *     token), the buffers concatenated in expert order: q rows as x; s: a
 *     [K/128, count_e] block at element start_e K/128; qt: a [K, count_e]
 *     block at element start_e K; st: [cdiv(count_e, 128), K] rows at row
 *     sum_{e' < e} cdiv(count_e', 128). A tile never straddles two experts.
 *     The grid is a static bound, cdiv(M, 128) + E token tiles (a CTA
 *     takes `tiles` of them in turn: tiles slot, slot + slots, ...);
 *     the CTA scans the counts once for its tiles; a CTA past the last
 *     tile exits.
 *     Counts must sum to at most M; an expert whose segment runs past M
 *     (bad counts) is not written at all, so nothing is stored out of
 *     bounds.
 *   - LG_QE_TILE128: weights (the weight-tile emitter, quant_tile.h): one
 *     scale per 128 x 128 tile, q [M, K] and s [cdiv(M, 128), K/128]
 *     (row-major); `rows` must be on. `cols` (off unless the family sets
 *     it) adds the transposed copy with the same
 *     tiles' scales: qt [K, M] (the columnwise path's lines, each value
 *     quantised with its tile's scale) and st [K/128, cdiv(M, 128)]. A
 *     partial last token tile takes its amax over its real tokens. With
 *     expert_rows N (expert weights [E, N, K] as one [E N, K] weight: no
 *     tile spans two experts) the transposed copy is each expert's own,
 *     the experts' one after the other: qt [E, K, N] (expert e's [K, N]
 *     block at element e N K) and st [E, K/128, N/128] (its block at
 *     e N/128 K/128); a short last expert of n < N rows gets [K, n] and
 *     [K/128, cdiv(n, 128)] blocks.
 *
 * Names the generated body defines, for the hooks: m0 (i64, the tile's
 * first token in x / q), rows (int, real tokens in the tile, 1..128), lb,
 * rb, r0 (the thread's place), and inside the feature-block loop cb (the
 * 128-feature block) and k0 (i64, its first feature), v (the values). With
 * LG_QE_EXPERTS also ex (the expert), seg0 (i64, its first token), segn
 * (i64, its tokens) and lt (the tile's index within the segment).
 * The kernel's arguments the body reads are named by struct lg_qe (the
 * family's argument and run-time size names).
 */
#ifndef LG_QUANT_ENGINE_H
#define LG_QUANT_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "family.h"
#include "quant_common.h"

enum lg_qe_vals { LG_QE_F32, LG_QE_BF16 };
enum lg_qe_layout { LG_QE_FLAT, LG_QE_EXPERTS, LG_QE_TILE128 };

struct lg_qe {
	int64_t n;      /* features K, a multiple of 128 (static) */
	int threads;    /* 256 (8 tokens a thread) or 512 (4) */
	int fblocks;    /* 128-feature blocks a CTA does in turn (0 or 1: one) */
	int tiles;      /* LG_QE_EXPERTS: token tiles a CTA takes in turn, at most (0 or
			   1: one, and a grid of cdiv(M, 128) + E tiles, a bound) */
	bool prefetch;  /* with fblocks > 1 and the hooks' fetch / compute: the next
			   feature block's loads issued (into registers) before this
			   block's barriers and stores */
	bool rows;      /* the rowwise copy (q, s) */
	bool cols;      /* the columnwise copy (qt, st) */
	bool pow2;      /* round_scale */
	int64_t expert_rows; /* LG_QE_TILE128 with cols: 0, or the rows are experts of this
				many rows each (a multiple of 128; the last may be short) and the
				transposed copy is per expert (see Layouts) */
	enum lg_qt_store qt_store; /* LG_QE_FLAT: how the pitched lines leave
				      (lg_emit_qt_lines_pitched, tile.qt_store): whole
				      16-byte evict-first stores (the default), the former
				      store (each piece tested at run time, narrow stores
				      where not whole; for timing it) or whole write-back
				      stores */
	enum lg_qe_vals vals;
	enum lg_qe_layout layout;
	/* Names in the generated code (NULL: the default in brackets): the
	 * outputs [q, s, qt, st], the tokens [M], the counts [counts] and the
	 * number of experts [E] (LG_QE_EXPERTS). */
	const char *q, *s, *qt, *st, *m, *counts, *experts;
	/* LG_QE_FLAT: the name of qt's row pitch in bytes, an i64 run-time size
	 * (0 standing for round_up(M, 128); else a multiple of 128 at least
	 * that: qt is then the tokens' columns of a wider copy); NULL: qt's
	 * rows round_up(M, 128) apart. */
	const char *qt_pitch;
	/* The CTA's place (NULL: from blockIdx.x, as lg_qe_geometry launches):
	 * an i64 expression of its token tile and an int expression of its
	 * feature group (blocks fblocks * group ...). A family with a grid of
	 * its own (2-D, reversed, sliced) gives both and its own geometry(). */
	const char *tile, *group;
	/* A condition on the CTA (the same in all its threads; NULL: none)
	 * that splits the feature-block loop into two copies, each compiled
	 * for its case: the hooks see variant 1 in the copy where it holds, 0
	 * in the other, -1 without a split (set by the engine). A family
	 * whose values differ by feature block (a backward's two halves)
	 * names the case so that each copy computes only its own. */
	const char *cta_case;
	int variant;
};

/* What the values hook is given for one token row of 8 features. */
struct lg_qe_row {
	const char *row;  /* i64 expression: the token (in x / q), always in bounds (a
			     token past the tile's last is replaced by the last) */
	const char *lrow; /* int expression: the token within the tile (0..127) */
	const char *col;  /* i64 expression: the first of the 8 features */
	const char *dst;  /* where to write: F32 `float[8]` (dst[j] = value of col + j),
			     BF16 an lg_u32x4 of 8 bf16 (feature col + 2j in the low half of word j) */
	const char *valid; /* bool expression: the token is real (else the values are
			      discarded; extra per-row stores must test it) */
	const char *slot; /* int expression: the row's index 0..R-1 among the thread's
			     (fetch / compute: its place in the raw registers) */
};

struct lg_qe_hooks {
	void *ctx;
	/* Emit the code computing the values of one token row (a statement or
	 * block; it runs inside an unrolled loop over the R rows, so loads are
	 * issued together). Required unless the three below are given. */
	void (*values)(lg_buf *b, const struct lg_qe *e, const struct lg_qe_row *r, void *ctx);
	/* The values in two steps (instead of `values`; what lg_qe.prefetch
	 * needs): raw declares the registers a thread's r rows load into (once,
	 * before the feature-block loop), fetch issues the loads of one row
	 * into them (row r->slot; no use of the loaded values), compute turns
	 * them into r->dst. The engine runs every row's fetch, then every
	 * row's compute; with prefetch the next block's fetch follows this
	 * block's compute. */
	void (*raw)(lg_buf *b, const struct lg_qe *e, int r, void *ctx);
	void (*fetch)(lg_buf *b, const struct lg_qe *e, const struct lg_qe_row *r, void *ctx);
	void (*compute)(lg_buf *b, const struct lg_qe *e, const struct lg_qe_row *r, void *ctx);
	/* Optional: once a CTA, after m0 / rows (and the expert) are known,
	 * before the feature-block loop (shared memory, per-token loads, ...). */
	void (*prologue)(lg_buf *b, const struct lg_qe *e, void *ctx);
	/* Optional: after each 128 x 128 block is quantised and stored (v still
	 * in scope): extra per-row outputs, partial sums, ... */
	void (*epilogue)(lg_buf *b, const struct lg_qe *e, void *ctx);
	/* Optional: at the start of each 128-feature block, before the values
	 * (k0 known): per-feature loads the values hook uses (a weight). */
	void (*block)(lg_buf *b, const struct lg_qe *e, void *ctx);
};

/* A values hook body for a row-major bf16 input `x` [*, e->n]: one 16-byte
 * streaming load of the 8 values (widened to fp32 with LG_QE_F32). */
void lg_qe_emit_load_bf16(lg_buf *b, const struct lg_qe *e, const struct lg_qe_row *r, const char *x);
/* The same as a ready values hook: ctx is the input's name (const char *). */
void lg_qe_hook_load_bf16(lg_buf *b, const struct lg_qe *e, const struct lg_qe_row *r, void *ctx);

/* tile.tiles of the per-expert families (lg_qe.tiles): token tiles a CTA
 * takes in turn, 1, 2, 4 or 8. */
extern const int64_t lg_qe_tiles_ok[];
#define LG_QE_KEY_TILES(doc_) LG_KEY_TILE("tiles", "k", 1, 8, lg_qe_tiles_ok, doc_)

/* tile.qt_store of the families with a flat columnwise copy: 1 the former
 * store (each piece tested at run time for a whole aligned store), 2 (the
 * default) whole 16-byte stores (qt's rows are round_up(M, 128) apart), 3
 * the same whole stores written back (no evict-first hint). */
extern const int64_t lg_qe_qt_store_ok[];
#define LG_QE_KEY_QT_STORE                                                                          \
	LG_KEY_TILE("qt_store", "qs", 1, 3, lg_qe_qt_store_ok,                                      \
		    "qt lines: 2 (default) whole 16-byte evict-first stores (qt rows round_up(tokens, " \
		    "128) bytes apart); 1 the tile's 16-byte pieces each tested at run time, narrow "   \
		    "stores where not whole (the former store); 3 the whole stores of 2 as plain "      \
		    "write-back stores (made for the former pitch, round_up(tokens, 16), whose "        \
		    "tiles' lines shared 32-byte sectors that merged in L2)")
/* Resolve tile.qt_store (key k; -1: none, the default): sets p->tile[k]
 * and returns the store asked for. */
enum lg_qt_store lg_qe_plan_qt_store(const struct lg_spec *s, struct lg_plan *p, int k);

/* `lingen tune`'s tiles of a flat quantiser (fp8_quant's layout): each of
 * threads_ok (key k_threads), each with both qt stores (key k_qt_store)
 * when the columnwise copy is asked for. */
int lg_qe_flat_candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max,
			  int k_threads, const int64_t *threads_ok, int k_qt_store);

/* Plan helpers for families whose tile is the engine's own keys: plan
 * values LG_QE_PV_* of struct lg_plan.v (a family using them keeps its own
 * values after LG_QE_PV_COUNT). */
enum { LG_QE_PV_N, LG_QE_PV_THREADS, LG_QE_PV_FBLOCKS, LG_QE_PV_F32, LG_QE_PV_QT_STORE, LG_QE_PV_COUNT };
/* Resolve tile keys threads, fblocks, values and qt_store (key indices;
 * -1: the family has no such key) for features n: threads 256 with power-of-two
 * scales and bf16 values, else 512 (the fp32 values and the exact divide
 * need the registers); fblocks default fblocks_def (clamped to n / 128);
 * values 16 unless 32 is given. Sets p->tile[] of the keys declared and
 * p->v[LG_QE_PV_*]. */
void lg_qe_plan(const struct lg_spec *s, struct lg_plan *p, int64_t n, int k_threads, int k_fblocks, int k_values,
		int k_qt_store, int fblocks_def);
/* The engine as planned (lg_qe_plan), for a layout; s NULL (geometry):
 * the quant recipe left off. LG_QE_TILE128 has rows on and cols off
 * (a family asking for the transposed copy sets cols). */
struct lg_qe lg_qe_planned(const struct lg_spec *s, const struct lg_plan *p, enum lg_qe_layout layout);
/* A whole one-entry kernel: helpers, section `title`, the signature of
 * p->entry[0] with launch bounds, the body. */
void lg_qe_emit_kernel(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p, const struct lg_qe *e,
		       const struct lg_qe_hooks *h, const char *title);

/* Tokens a thread (R) for the engine's thread count. */
int lg_qe_tokens_per_thread(const struct lg_qe *e);
/* Emit the helpers the body needs (before the kernel; once a file). */
void lg_qe_emit_helpers(lg_buf *b, const struct lg_qe *e);
/* Emit the kernel body (inside its braces) for the hooks. */
void lg_qe_emit_body(lg_buf *b, const struct lg_qe *e, const struct lg_qe_hooks *h);
/* The launch shape for tokens m and experts (LG_QE_EXPERTS; else ignored):
 * a 1-D grid of token tiles x feature groups, e->threads a CTA, no dynamic
 * shared memory. No tokens: grid 0 (nothing launched). */
void lg_qe_geometry(const struct lg_qe *e, int64_t m, int64_t experts, struct lg_launch_dim *d);
/* The largest number of tokens whose grid fits 2^31 - 1 CTAs for features
 * up to n_max and experts up to e_max (for a family's size ranges). */
int64_t lg_qe_tokens_max(int64_t n_max, int64_t e_max);

#endif
