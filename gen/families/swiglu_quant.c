/*
 * swiglu_quant.c - family "swiglu_quant" (docs/kernels.md K7): SwiGLU + blockwise
 * FP8 quantisation, the shared expert's activation (not batched).
 *
 *   forward  x [tokens, 2n] = [gate | up] bf16 -> y = silu(x1) x2 in fp32,
 *            quantised (docs/kernels.md 1.2-1.3): q [tokens, n], s [n/128, tokens],
 *            qt [n, round_up(tokens, 128)] (a zero tail), st [cdiv(tokens,
 *            128), n]; quant.output picks the copies.
 *   backward g [tokens, n], x -> dx = [dx1 | dx2] [tokens, 2n] with
 *            dx1 = g x2 s (1 + x1 (1 - s)), dx2 = g x1 s (s = sigmoid(x1)),
 *            quantised with K = 2n: dxq [tokens, 2n], dxs [2n/128, tokens],
 *            dxqt [2n, round_up(tokens, 128)], dxst [cdiv(tokens, 128), 2n];
 *            with dx_bf16 also dx itself in bf16.
 * Any token count (linghe's backward needs a multiple of 128), one included.
 *
 * Strategy (swiglu_common.c, shared with batch_swiglu_quant): the
 * quantiser engine (quant_engine.h) owns the tiles, the scales and both
 * layouts; a values hook computes the SwiGLU values of each token's 8
 * features in registers from 16-byte loads, so x (and g) are read once
 * from DRAM. Tile options: threads 512 / 256, fblocks (128-feature blocks a
 * CTA, default 1).
 */
#include <stdio.h>

#include "family.h"

#include "quant_common.h"
#include "quant_engine.h"
#include "swiglu_common.h"

enum { K_N, K_DXBF16, K_QUANT, K_TILE = K_QUANT + LG_QUANT_KEYS, K_THREADS, K_FBLOCKS, K_MIN_CTAS, K_PREFETCH,
       K_QT_STORE, NKEYS };
static const char *const dxbf16_words[2] = {"dxq", "dxbf16"};
static const struct lg_key keys[NKEYS] = {
	[K_N] = LG_KEY_DIM("intermediate", "n", 128, LG_SWIGLU_N_MAX, 128,
			   "n: the SwiGLU output's width; x is [gate | up], 2n wide"),
	[K_DXBF16] = {.path = "dx_bf16", .type = LG_KEY_BOOL, .has_def = true, .def = 0,
		      .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 24, .words = dxbf16_words,
		      .doc = "backward: also write dx [tokens, 2n] in bf16, unquantised"},
	LG_KEYS_QUANT(K_QUANT),
	[K_TILE] = LG_KEY_TILE_OBJ,
	LG_SWIGLU_TILE_KEYS(K_THREADS, K_FBLOCKS, K_MIN_CTAS, K_PREFETCH),
	[K_QT_STORE] = LG_QE_KEY_QT_STORE,
};

static const struct lg_size sizes[] = {
	{"tokens", "M", 0, LG_SWIGLU_TOKENS_MAX, "rows of x", 0, 0},
};

enum { F_X, F_Q, F_S, F_QT, F_ST, F_NARGS };
enum { B_G, B_X, B_DXQ, B_DXS, B_DXQT, B_DXST, B_DX, B_NARGS };

static const struct lg_arg fwd_args[F_NARGS] = {
	[F_X] = {"x", LG_ARG_IN, LG_ELEM_BF16, "tokens, 2 * intermediate", 16, "[gate | up]"},
	[F_Q] = {"q", LG_ARG_OUT, LG_ELEM_E4M3, "tokens, intermediate", 8, "rowwise (0 for columnwise)"},
	[F_S] = {"s", LG_ARG_OUT, LG_ELEM_FP32, "intermediate / 128, tokens", 4,
		 "rowwise scales, transposed (0 for columnwise)"},
	[F_QT] = {"qt", LG_ARG_OUT, LG_ELEM_E4M3, "intermediate, " LG_QT_PITCH, 16,
		  "columnwise, transposed, zeros past tokens (0 for rowwise)"},
	[F_ST] = {"st", LG_ARG_OUT, LG_ELEM_FP32, "cdiv(tokens, 128), intermediate", 8,
		  "columnwise scales (0 for rowwise)"},
};

static const struct lg_arg bwd_args[B_NARGS] = {
	[B_G] = {"g", LG_ARG_IN, LG_ELEM_BF16, "tokens, intermediate", 16, "dL/dy"},
	[B_X] = {"x", LG_ARG_IN, LG_ELEM_BF16, "tokens, 2 * intermediate", 16, "the forward's [gate | up]"},
	[B_DXQ] = {"dxq", LG_ARG_OUT, LG_ELEM_E4M3, "tokens, 2 * intermediate", 8,
		   "dx rowwise (0 for columnwise)"},
	[B_DXS] = {"dxs", LG_ARG_OUT, LG_ELEM_FP32, "intermediate / 64, tokens", 4,
		   "dx rowwise scales, transposed (0 for columnwise)"},
	[B_DXQT] = {"dxqt", LG_ARG_OUT, LG_ELEM_E4M3, "2 * intermediate, " LG_QT_PITCH, 16,
		    "dx columnwise, transposed, zeros past tokens (0 for rowwise)"},
	[B_DXST] = {"dxst", LG_ARG_OUT, LG_ELEM_FP32, "cdiv(tokens, 128), 2 * intermediate", 8,
		    "dx columnwise scales (0 for rowwise)"},
	[B_DX] = {"dx", LG_ARG_OPT_OUT, LG_ELEM_BF16, "tokens, 2 * intermediate", 16,
		  "dx in bf16 (with dx_bf16; else 0)"},
};

static void uses(const struct lg_spec *s, unsigned char *used)
{
	if (s->pass == LG_PASS_FORWARD) {
		lg_quant_uses(s, used, F_Q, F_S, F_QT, F_ST);
		return;
	}
	lg_quant_uses(s, used, B_DXQ, B_DXS, B_DXQT, B_DXST);
	if (!lg_spec_int(s, K_DXBF16))
		used[B_DX] = 0;
}

const struct lg_swiglu_kind lg_swiglu_kind_swiglu_quant = {
	.weighted = false,
	.key_n = K_N,
	.key_dx_bf16 = K_DXBF16,
	.key_experts = -1,
	.key_threads = K_THREADS,
	.key_fblocks = K_FBLOCKS,
	.key_min_ctas = K_MIN_CTAS,
	.key_prefetch = K_PREFETCH,
	.key_qt_store = K_QT_STORE,
	.key_tiles = -1,
};


/* What a launch computes: the comment of its typed launcher (lingen_ops.h). */
static const char doc_forward[] =
	"K7: SwiGLU + blockwise FP8, forward (op \"swiglu_quant\"): x [tokens, 2n]\n"
	"  bf16 = [gate | up]; y = silu(gate) * up quantised: q [tokens, n] e4m3,\n"
	"  s [n/128, tokens] fp32, qt [n, round_up(tokens, 128)] e4m3 (zeros past\n"
	"  tokens), st [cdiv(tokens, 128), n] fp32 (0 for a copy quant.output leaves\n"
	"  out). Any token count.";
static const char doc_backward[] =
	"Its backward: g [tokens, n] bf16, x as in the forward; dx = [dgate | dup]\n"
	"  quantised with K = 2n: dxq [tokens, 2n], dxs [2n/128, tokens], dxqt\n"
	"  [2n, round_up(tokens, 128)] (zeros past tokens), dxst [cdiv(tokens, 128),\n"
	"  2n]; dx [tokens, 2n] bf16 with dx_bf16 (else 0).";

const struct lg_family lg_family_swiglu_quant = {
	.op = "swiglu_quant",
	.summary = "SwiGLU + blockwise FP8 quantisation: forward y, backward dx (K = 2n) (K7)",
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
