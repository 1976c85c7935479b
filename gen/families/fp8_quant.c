/*
 * fp8_quant.c - family "fp8_quant" (docs/kernels.md 1.3): the standalone
 * blockwise FP8 activation quantiser, forward. x [tokens, hidden] bf16 into
 * the rowwise copy (1x128 blocks: q [tokens, hidden] e4m3, scales
 * s [hidden/128, tokens], tokens contiguous) and the columnwise copy (128x1
 * blocks, physically transposed: qt [hidden, round_up(tokens, 128)], rows
 * 128-byte aligned (LG_QT_PITCH) for the wgrad's TMA, the tail past tokens
 * written as zeros; scales st [ceil(tokens/128), hidden]); quant.output picks the
 * copies.
 *
 * Strategy: the quant engine (quant_engine.h) with x as the values: x is
 * read once, 16 bytes a load, by one kernel; a CTA owns a tile of 128
 * tokens (one 128x1 block) by 128 features (one 1x128 block); tiles run
 * along the grid's x, token tile major, so a wave reads whole rows of x.
 * Block maxima are taken on the bf16 bits (the engine's bf16 fast path).
 *
 * Tile option: `threads` 256 (8 tokens a thread; the default with power-of-
 * two scales) or 512 (4 tokens; the default with exact scales, whose
 * divides need more registers); `values` 16 (the bf16 fast path, default)
 * or 32 (x widened to fp32 first: the engine's fp32 path, which families
 * computing fp32 values use; slower, the same bytes: it is here so that
 * the GPU tests check that path against the reference).
 * A tail tile (tokens not a multiple of 128) zeroes its rows past the last
 * token, which then count as 0 in every amax, and stores nothing past it.
 */
#include <stdio.h>

#include "family.h"

#include "quant_common.h"
#include "quant_engine.h"

#define TILE 128 /* tokens and features of a CTA's tile: one 128x1 and one 1x128 block */
/* Up to a vocabulary of 262144: the FP8 LM head quantises its logits
 * gradient [tokens, vocab] in one launch (Ling 157184, o200k 201088). */
#define HIDDEN_MAX 262144
/* The grid is one CTA per tile along x (at most 2^31 - 1): tokens such that
 * ceil(tokens / 128) * (HIDDEN_MAX / 128) stays within it. */
#define TOKENS_MAX ((int64_t)(INT32_MAX / (HIDDEN_MAX / TILE)) * TILE)

enum { K_HIDDEN, K_QUANT, K_TILE = K_QUANT + LG_QUANT_KEYS, K_THREADS, K_VALUES, K_QT_STORE, NKEYS };
static const int64_t threads_ok[] = {256, 512, 0};
static const int64_t values_ok[] = {16, 32, 0};
static const struct lg_key keys[NKEYS] = {
	[K_HIDDEN] = LG_KEY_DIM("hidden", "h", 128, HIDDEN_MAX, 128, "features per row"),
	LG_KEYS_QUANT(K_QUANT),
	[K_TILE] = LG_KEY_TILE_OBJ,
	[K_THREADS] = LG_KEY_TILE("threads", "t", 256, 512, threads_ok,
				  "threads per 128 x 128 tile: 256 (8 tokens a thread) or 512 (4 tokens)"),
	[K_VALUES] = LG_KEY_TILE("values", "v", 16, 32, values_ok,
				 "bits a value is held in: 16 (bf16, the fast path) or 32 (widened to fp32 first: "
				 "the quant engine's fp32 path, same bytes)"),
	[K_QT_STORE] = LG_QE_KEY_QT_STORE,
};

static const struct lg_size sizes[] = {
	{"tokens", "M", 0, TOKENS_MAX, "rows of x (one CTA per 128 tokens x 128 features)", 0, 0},
};

enum { ARG_X, ARG_Q, ARG_S, ARG_QT, ARG_ST, NARGS };
/* Alignment: x is read 16 bytes at a time, q written 8, s 4, st 8 (two
 * features), qt 16 (its rows round_up(tokens, 128) bytes apart). */
static const struct lg_arg fwd_args[NARGS] = {
	[ARG_X] = {"x", LG_ARG_IN, LG_ELEM_BF16, "tokens, hidden", 16, NULL},
	[ARG_Q] = {"q", LG_ARG_OUT, LG_ELEM_E4M3, "tokens, hidden", 8, "rowwise (0 for columnwise)"},
	[ARG_S] = {"s", LG_ARG_OUT, LG_ELEM_FP32, "hidden / 128, tokens", 4,
		   "rowwise scales, transposed (0 for columnwise)"},
	[ARG_QT] = {"qt", LG_ARG_OUT, LG_ELEM_E4M3, "hidden, " LG_QT_PITCH, 16,
		    "columnwise, transposed, rows 128-byte aligned, zeros past tokens (0 for rowwise)"},
	[ARG_ST] = {"st", LG_ARG_OUT, LG_ELEM_FP32, "cdiv(tokens, 128), hidden", 8,
		    "columnwise scales (0 for rowwise)"},
};

static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	(void)t;
	/* Power-of-two scales: 256 threads (71 registers on sm_90a, 3 CTAs an
	 * SM); measured on H200 at 8192 x 2048, 22.21 us against 22.66 at 512
	 * (git history, commit 8b8e268: bench/h200-2026-11-30-families). The exact divide needs 102
	 * registers at 256 threads, 58 at 512: 512 (not measured against 256).
	 * Both are lg_qe_plan's defaults. */
	lg_qe_plan(s, p, lg_spec_int(s, K_HIDDEN), K_THREADS, -1, K_VALUES, K_QT_STORE, 1);
	p->nentries = 1;
	snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
	return LG_OK;
}

/* One CTA per 128 x 128 tile; no tokens, no tiles: nothing is launched. */
static void geometry(const struct lg_plan *p, int e, const int64_t *sz, struct lg_launch_dim *d)
{
	(void)e;
	struct lg_qe q = lg_qe_planned(NULL, p, LG_QE_FLAT);
	lg_qe_geometry(&q, sz[0], 0, d);
}

/* The values: x itself (16-byte streaming loads). */
static void emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	struct lg_qe e = lg_qe_planned(s, p, LG_QE_FLAT);
	struct lg_qe_hooks h = {.values = lg_qe_hook_load_bf16, .ctx = (void *)"x"};
	(void)t;
	lg_qe_emit_kernel(b, s, p, &e, &h, "blockwise FP8 quantisation");
}

/* Tile variants for `lingen tune`: 256 and 512 threads per tile, each with
 * both qt stores when the columnwise copy is asked for. */
static int candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out,
		      int max)
{
	return lg_qe_flat_candidates(s, t, out, max, K_THREADS, threads_ok, K_QT_STORE);
}

static void uses(const struct lg_spec *s, unsigned char *used)
{
	lg_quant_uses(s, used, ARG_Q, ARG_S, ARG_QT, ARG_ST);
}

/* What a launch computes: the comment of its typed launcher (lingen_ops.h). */
static const char doc_forward[] =
	"Blockwise FP8 quantisation of activations (op \"fp8_quant\", docs/kernels.md\n"
	"  1.3): x [tokens, hidden] bf16; q, s, qt, st as lg_rmsnorm_quant_forward\n"
	"  (0 for a copy quant.output does not ask for).";

const struct lg_family lg_family_fp8_quant = {
	.op = "fp8_quant",
	.summary = "blockwise FP8 quantisation of activations: 1x128 rowwise, 128x1 columnwise transposed",
	.passes = 1u << LG_PASS_FORWARD,
	.dtypes = 1u << LG_DTYPE_BF16,
	.nkeys = NKEYS,
	.keys = keys,
	.sig = {[LG_PASS_FORWARD] = {1, sizes, NARGS, fwd_args, doc_forward}},
	.uses = uses,
	.plan = plan,
	.emit = emit,
	.geometry = geometry,
	.candidates = candidates,
};
