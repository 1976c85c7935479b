/*
 * batch_swiglu_quant.c - family "batch_swiglu_quant" (docs/kernels.md K6): the
 * routed experts' prob-weighted SwiGLU + per-expert blockwise FP8
 * quantisation. The rows of x are grouped by expert (counts [experts] int32
 * in device memory: no host synchronisation, no launch per expert; any
 * number of experts, counts of 0 included); each expert's segment is
 * quantised as a tensor of its own (docs/kernels.md 1.3, per-expert layout).
 *
 *   forward  x [tokens, 2n] = [gate | up] bf16, prob [tokens, 1] fp32 ->
 *            y = silu(x1) x2 prob in fp32, quantised per expert: q [tokens,
 *            n]; s per expert [n/128, count_e] at start_e n/128 (container
 *            [n/128, tokens], as fp8_quant_batched); qt per expert [n,
 *            count_e] at start_e n (container [n, tokens]); st per expert
 *            [cdiv(count_e, 128), n]
 *            rows one after the other (container cdiv(tokens, 128) +
 *            experts rows, an upper bound of their sum; the rest not
 *            written).
 *   backward g [tokens, n], x, prob -> dx = [dx1 | dx2] with
 *            dx1 = g x2 prob s (1 + x1 (1 - s)), dx2 = g x1 s prob,
 *            quantised per expert with K = 2n, both copies always; dprob =
 *            sum_j silu(x1) x2 g in fp32 (deterministic), [tokens, 1]; with
 *            dx_bf16 also dx itself in bf16.
 *
 * Strategy (swiglu_common.c, shared with swiglu_quant): the quantiser
 * engine's per-expert layout (quant_engine.h: tiles never straddle
 * experts; a CTA takes `tile.tiles` token tiles in turn, forward 4 by
 * default, whose expert segments one scan of counts finds; the grid a
 * bound of cdiv(tokens, 128) + experts tiles; the rows past an expert's
 * last token are skipped by whole threads); a values hook computes the
 * SwiGLU values from 16-byte loads, times each token's prob. An expert's
 * qt rows (count_e bytes) start at any byte: the staged lines are stored
 * by memory's aligned 16-byte chunks (one store a whole chunk), the heads
 * and tails a byte a lane (lg_emit_qt_lines_realign). The forward's CTA
 * takes one 128 x 128 block a tile (64 registers at 512 threads with 4
 * tiles a CTA: 2 CTAs an SM; 1 tile a CTA before sm_89, whose software
 * e4m3 makes 4 spill at 64 registers). The backward's CTA takes the n/128 blocks of
 * the gate half of its tokens (dprob summed in a fixed order within it;
 * the tile's probs and the thread's dprob terms in shared memory) or of
 * the up half, a copy of the loop compiled for each half (lg_qe.cta_case:
 * dx1's computes no dx2, dx2's loads no up); 128 registers with prefetch,
 * its default (the next block's loads in flight during this block's
 * stores), one CTA an SM. Tile options: threads 512 / 256, fblocks
 * (forward default 1; backward n/128, default, or 2n/128), min_ctas,
 * prefetch, tiles.
 *
 * What bounds it (H200, 65536 x 1024, 256 experts; copy ceiling 48 us
 * forward, 80 backward; git history, commit 8b8e268: bench/h200-2026-12-01f, CUDA graphs, k6counts2.py):
 * forward 84.1 us at random counts, 76.1 at counts that are multiples of
 * 16, 70.4 at whole tiles, against swiglu_quant's 64.9 at the same x;
 * backward 178.5 / 154.3 / 135.5 against swiglu_quant's 112. So: the qt
 * lines that start at any byte (each 128-byte line segment 7 whole 16-byte
 * chunks and two partial ones shared with the neighbouring tile's CTA)
 * cost ~8 / ~24 us, the experts' partial last tiles (652 tiles against
 * 512, each a whole tile's chain) ~6 / ~19, and the backward's structure
 * (the gate half's 4 blocks in turn at one CTA an SM, for dprob) ~20: at
 * one expert it takes 131 against 112 (k6scan.py); two CTAs an SM (64
 * registers) measured 178.3 against 177.4. Tried and measured slower: the
 * next block's loads issued early (tile.prefetch) in the forward, the
 * backward's gate half over a cluster of CTAs with dprob summed through
 * distributed shared memory (253-377 us), more token tiles a CTA in the
 * backward (221.5 at 2). What would move it: a CTA owning a run of an
 * expert's tiles, so its qt lines leave as one contiguous region (whole
 * chunks only) and the partial tiles share one CTA's chain; for the
 * backward, dprob through a workspace and a second small kernel, so its
 * CTAs need not take the whole gate half.
 */
#include <stdio.h>

#include "family.h"

#include "quant_common.h"
#include "quant_engine.h"
#include "swiglu_common.h"

enum { K_N, K_EXPERTS, K_DXBF16, K_QUANT, K_TILE = K_QUANT + LG_QUANT_KEYS, K_THREADS, K_FBLOCKS, K_MIN_CTAS, K_PREFETCH,
       K_TILES, NKEYS };
static const char *const dxbf16_words[2] = {"dxq", "dxbf16"};
static const struct lg_key keys[NKEYS] = {
	[K_N] = LG_KEY_DIM("intermediate", "n", 128, LG_SWIGLU_N_MAX, 128,
			   "n: an expert's SwiGLU output width; x is [gate | up], 2n wide"),
	[K_EXPERTS] = {.path = "experts", .type = LG_KEY_INT, .flags = LG_KEY_REQUIRED | LG_KEY_SHAPE, .min = 1,
		       .max = LG_SWIGLU_EXPERTS_MAX, .naming = LG_NAME_ALWAYS, .rank = 11, .abbrev = "e",
		       .doc = "experts (counts has one int32 a expert; any number, 0 rows allowed)"},
	[K_DXBF16] = {.path = "dx_bf16", .type = LG_KEY_BOOL, .has_def = true, .def = 0,
		      .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 24, .words = dxbf16_words,
		      .doc = "backward: also write dx [tokens, 2n] in bf16, unquantised (for autograd)"},
	LG_KEYS_QUANT(K_QUANT),
	[K_TILE] = LG_KEY_TILE_OBJ,
	LG_SWIGLU_TILE_KEYS(K_THREADS, K_FBLOCKS, K_MIN_CTAS, K_PREFETCH),
	[K_TILES] = LG_QE_KEY_TILES("token tiles a CTA takes in turn (the counts scan paid once for them; "
				    "forward default 4, backward 1)"),
};

static const struct lg_size sizes[] = {
	{"tokens", "M", 0, LG_SWIGLU_TOKENS_MAX, "rows of x, all experts (the sum of counts)", 0, 0},
};

/* The per-expert st: sum_e cdiv(count_e, 128) rows, at most cdiv(tokens,
 * 128) + experts (the container); the rows past the last expert's are not
 * written. */
#define ST_ROWS "cdiv(tokens, 128) + experts"

enum { F_X, F_P, F_COUNTS, F_Q, F_S, F_QT, F_ST, F_NARGS };
enum { B_G, B_X, B_P, B_COUNTS, B_DXQ, B_DXS, B_DP, B_DXQT, B_DXST, B_DX, B_NARGS };

static const struct lg_arg fwd_args[F_NARGS] = {
	[F_X] = {"x", LG_ARG_IN, LG_ELEM_BF16, "tokens, 2 * intermediate", 16, "[gate | up], rows by expert"},
	[F_P] = {"prob", LG_ARG_IN, LG_ELEM_FP32, "tokens, 1", 4, "router prob of each row"},
	[F_COUNTS] = {"counts", LG_ARG_IN, LG_ELEM_I32, "experts", 4, "rows of each expert (sum: tokens)"},
	[F_Q] = {"q", LG_ARG_OUT, LG_ELEM_E4M3, "tokens, intermediate", 8, "rowwise (0 for columnwise)"},
	[F_S] = {"s", LG_ARG_OUT, LG_ELEM_FP32, "intermediate / 128, tokens", 4,
		 "rowwise scales: per expert [n/128, count] (0 for columnwise)"},
	[F_QT] = {"qt", LG_ARG_OUT, LG_ELEM_E4M3, "intermediate, tokens", 16,
		  "columnwise: per expert [n, count] (0 for rowwise)"},
	[F_ST] = {"st", LG_ARG_OUT, LG_ELEM_FP32, ST_ROWS ", intermediate", 8,
		  "columnwise scales: per expert [cdiv(count, 128), n] (0 for rowwise)"},
};

static const struct lg_arg bwd_args[B_NARGS] = {
	[B_G] = {"g", LG_ARG_IN, LG_ELEM_BF16, "tokens, intermediate", 16, "dL/dy"},
	[B_X] = {"x", LG_ARG_IN, LG_ELEM_BF16, "tokens, 2 * intermediate", 16, "the forward's [gate | up]"},
	[B_P] = {"prob", LG_ARG_IN, LG_ELEM_FP32, "tokens, 1", 4, "the forward's router probs"},
	[B_COUNTS] = {"counts", LG_ARG_IN, LG_ELEM_I32, "experts", 4, "rows of each expert"},
	[B_DXQ] = {"dxq", LG_ARG_OUT, LG_ELEM_E4M3, "tokens, 2 * intermediate", 8, "dx rowwise"},
	[B_DXS] = {"dxs", LG_ARG_OUT, LG_ELEM_FP32, "intermediate / 64, tokens", 4,
		   "dx rowwise scales: per expert [2n/128, count]"},
	[B_DP] = {"dprob", LG_ARG_OUT, LG_ELEM_FP32, "tokens, 1", 4,
		  "sum_j silu(x1) x2 g, fp32, deterministic"},
	[B_DXQT] = {"dxqt", LG_ARG_OUT, LG_ELEM_E4M3, "2 * intermediate, tokens", 16,
		    "dx columnwise: per expert [2n, count]"},
	[B_DXST] = {"dxst", LG_ARG_OUT, LG_ELEM_FP32, ST_ROWS ", 2 * intermediate", 8,
		    "dx columnwise scales: per expert [cdiv(count, 128), 2n]"},
	[B_DX] = {"dx", LG_ARG_OPT_OUT, LG_ELEM_BF16, "tokens, 2 * intermediate", 16,
		  "dx in bf16 (with dx_bf16; else 0)"},
};

const struct lg_swiglu_kind lg_swiglu_kind_batch_swiglu_quant = {
	.weighted = true,
	.key_n = K_N,
	.key_dx_bf16 = K_DXBF16,
	.key_experts = K_EXPERTS,
	.key_threads = K_THREADS,
	.key_fblocks = K_FBLOCKS,
	.key_min_ctas = K_MIN_CTAS,
	.key_prefetch = K_PREFETCH,
	.key_qt_store = -1,
	.key_tiles = K_TILES,
};

static void uses(const struct lg_spec *s, unsigned char *used)
{
	if (s->pass == LG_PASS_FORWARD)
		lg_quant_uses(s, used, F_Q, F_S, F_QT, F_ST);
	else if (!lg_spec_int(s, K_DXBF16))
		used[B_DX] = 0;
}


/* What a launch computes: the comment of its typed launcher (lingen_ops.h). */
static const char doc_forward[] =
	"K6: per-expert prob-weighted SwiGLU + blockwise FP8, forward (op\n"
	"  \"batch_swiglu_quant\"): x [tokens, 2n] bf16 with rows grouped by expert,\n"
	"  prob [tokens, 1] fp32, counts [experts] int32 in device memory (summing to\n"
	"  tokens; never read by the host); y = silu(gate) * up * prob quantised\n"
	"  per expert (docs/kernels.md 1.3): q [tokens, n]; s, per expert [n/128,\n"
	"  count] at start * n/128; qt, per expert [n, count] at start * n; st\n"
	"  [cdiv(tokens, 128) + experts, n], per expert cdiv(count, 128) rows\n"
	"  (the rows past them not written).";
static const char doc_backward[] =
	"Its backward: g [tokens, n] bf16, x, prob, counts as in the forward; dx\n"
	"  quantised per expert with K = 2n (dxq, dxs, dxqt, dxst laid out as the\n"
	"  forward's, both always); dprob [tokens, 1] fp32 = sum_j silu(gate) * up *\n"
	"  g (deterministic); dx [tokens, 2n] bf16 with dx_bf16 (else 0).";

const struct lg_family lg_family_batch_swiglu_quant = {
	.op = "batch_swiglu_quant",
	.summary = "per-expert prob-weighted SwiGLU + blockwise FP8: forward y, backward dx (K = 2n) and "
		   "dprob (K6)",
	.passes = (1u << LG_PASS_FORWARD) | (1u << LG_PASS_BACKWARD),
	.dtypes = 1u << LG_DTYPE_BF16,
	.nkeys = NKEYS,
	.keys = keys,
	.sig = {[LG_PASS_FORWARD] = {1, sizes, F_NARGS, fwd_args, doc_forward},
		[LG_PASS_BACKWARD] = {1, sizes, B_NARGS, bwd_args, doc_backward}},
	.validate = lg_swiglu_validate,
	.uses = uses,
	.plan = lg_swiglu_plan,
	.emit = lg_swiglu_emit,
	.geometry = lg_swiglu_geometry,
	.candidates = lg_swiglu_candidates,
};
