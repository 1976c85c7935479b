/*
 * moe_permute.c - family "moe_permute" (docs/kernels.md K4): MoE dispatch of
 * tokens into expert-major padded rows, and its backward.
 *
 * forward (dtype bf16, or e4m3 with scales): for every (t, e) with
 *   r = row_id_map[t, e] >= 0: out[r] = x[t], out_scale[r] = x_scale[t]
 *   (e4m3: [., hidden / 128] fp32), out_probs[r] = probs[t, e]. Every other
 *   row below the capacity rows = tokens * top_k + experts * (multiple - 1)
 *   (each expert's padding, and the rows past the padded total P =
 *   offsets[experts]) is written as zeros, probability 0, e4m3 scale that
 *   of a zero block (1e-30, 2^-99 with round_scale). The capacity is a
 *   static bound because P is known only on the device (moe_row_map).
 * backward (bf16): the combine of the output gradient, dx[t] = sum over t's
 *   rows in ascending expert order (fp32, rounded once), and dprobs[t, e] =
 *   dout_probs[row_id_map[t, e]] (0 where not routed): the forward of
 *   moe_unpermute without weights. Padding rows are never read.
 *
 * Strategy: moe_common.c (forward, tile.pipeline 1, the default: one CTA
 * per token; the token's row read once, in 16-byte pieces where the row
 * allows, and stored to each of its rows; 256 more CTAs write the zero
 * rows. tile.pipeline 2 (opt-in, offered by `lingen tune`): persistent
 * CTAs, a map warp reading the next token's map row (and writing its
 * probabilities) while the other warps store this token's row, the next
 * token's row loaded meanwhile; the zero rows spread over the grid; the
 * same bytes. (It once measured 13.2 ms at the target: the context took
 * its one-token geometry, 1 + 256 CTAs, for a cluster and launched one
 * CTA; runtime/context.c now asks the plan.) The backward's combine by
 * default pipelined, tile.pipeline 2: persistent CTAs, the next token's
 * map row read while this one's rows are added; tile.pipeline 1 one CTA a
 * token).
 */
#include <stdio.h>

#include "family.h"

#include "error.h"
#include "moe_common.h"

enum { K_HIDDEN, K_EXPERTS, K_TOPK, K_MULTIPLE, K_ROUND, K_TILE, K_THREADS, K_PIPELINE, NKEYS };
static const struct lg_key keys[NKEYS] = {
	[K_HIDDEN] = LG_KEY_DIM("hidden", "h", 1, 65536, 0, "features per token (any count; e4m3: a multiple of 128)"),
	LG_KEYS_MOE(K_EXPERTS),
	[K_ROUND] = {.path = "round_scale", .type = LG_KEY_BOOL, .has_def = true, .def = 1,
		     .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 21, .words = lg_round_scale_words,
		     .doc = "e4m3: the padding rows' scale is 2^-99 (power-of-two scales), else 1e-30"},
	[K_TILE] = LG_KEY_TILE_OBJ,
	[K_THREADS] = LG_KEY_MOE_THREADS,
	[K_PIPELINE] = LG_KEY_MOE_PIPELINE,
};

static const struct lg_size sizes[] = {{"tokens", "T", 0, (int64_t)1 << 30, "tokens", 0, 0}};

#define ROWS_H LG_MOE_ROWS ", hidden"
#define ROWS_S LG_MOE_ROWS ", cdiv(hidden, 128)"

enum { F_X, F_XS, F_PROBS, F_MAP, F_OFF, F_CNT, F_OUT, F_OUTS, F_OUTP, F_NARGS };
static const struct lg_arg fwd_args[F_NARGS] = {
	[F_X] = {"x", LG_ARG_IN, LG_ELEM_DTYPE, "tokens, hidden", 16, "the tokens"},
	[F_XS] = {"x_scale", LG_ARG_IN, LG_ELEM_FP32, "tokens, cdiv(hidden, 128)", 4, "e4m3: the tokens' scales"},
	[F_PROBS] = {"probs", LG_ARG_OPT_IN, LG_ELEM_FP32, "tokens, experts", 4, "router probabilities (0: none)"},
	[F_MAP] = {"row_id_map", LG_ARG_IN, LG_ELEM_I32, "tokens, experts", 4, "moe_row_map"},
	[F_OFF] = {"offsets", LG_ARG_IN, LG_ELEM_I32, "experts + 1", 4, "moe_row_map"},
	[F_CNT] = {"counts", LG_ARG_IN, LG_ELEM_I32, "experts", 4, "moe_row_map"},
	[F_OUT] = {"out", LG_ARG_OUT, LG_ELEM_DTYPE, ROWS_H, 16, "expert-major padded rows"},
	[F_OUTS] = {"out_scale", LG_ARG_OUT, LG_ELEM_FP32, ROWS_S, 4, "e4m3: their scales"},
	[F_OUTP] = {"out_probs", LG_ARG_OPT_OUT, LG_ELEM_FP32, LG_MOE_ROWS, 4,
		    "probs[t, e] of each row (0: padding, or no probs)"},
};

enum { B_DOUT, B_DOUTP, B_MAP, B_DX, B_DPROBS, B_NARGS };
static const struct lg_arg bwd_args[B_NARGS] = {
	[B_DOUT] = {"dout", LG_ARG_IN, LG_ELEM_BF16, ROWS_H, 16, "gradient of out"},
	[B_DOUTP] = {"dout_probs", LG_ARG_OPT_IN, LG_ELEM_FP32, LG_MOE_ROWS, 4, "gradient of out_probs"},
	[B_MAP] = {"row_id_map", LG_ARG_IN, LG_ELEM_I32, "tokens, experts", 4, "moe_row_map"},
	[B_DX] = {"dx", LG_ARG_OUT, LG_ELEM_BF16, "tokens, hidden", 16, "fp32 sum of the token's rows"},
	[B_DPROBS] = {"dprobs", LG_ARG_OPT_OUT, LG_ELEM_FP32, "tokens, experts", 4,
		      "dout_probs at each routed (t, e), else 0"},
};

static lg_status validate(const struct lg_spec *s, const char *where)
{
	int64_t h = lg_spec_int(s, K_HIDDEN);
	if (s->dtype == LG_DTYPE_E4M3 && s->pass == LG_PASS_BACKWARD)
		return lg_spec_error(where, "dtype: found e4m3 with pass backward, allowed: bf16 (the backward "
				     "combines bf16 gradients)");
	if (s->dtype == LG_DTYPE_E4M3 && (h % 128 != 0 || h > 32768))
		return lg_spec_error(where, "hidden: found %lld with dtype e4m3, allowed: a multiple of 128 up to "
				     "32768 (one scale per 128 values)", (long long)h);
	lg_status st = lg_moe_validate_threads(s, K_THREADS, h, s->dtype == LG_DTYPE_E4M3 ? 1 : 2, where);
	if (st == LG_OK)
		st = lg_moe_validate_pipeline(s, K_PIPELINE, K_THREADS, true, where);
	return st != LG_OK ? st : lg_moe_validate(s, K_EXPERTS, where);
}

static void uses(const struct lg_spec *s, unsigned char *used)
{
	if (s->pass == LG_PASS_FORWARD)
		used[F_XS] = used[F_OUTS] = s->dtype == LG_DTYPE_E4M3;
}

static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	(void)t;
	lg_moe_plan(s, p, lg_spec_int(s, K_HIDDEN), s->dtype == LG_DTYPE_E4M3 ? 1 : 2, s->pass == LG_PASS_FORWARD,
		    K_EXPERTS, K_THREADS, K_PIPELINE);
	return LG_OK;
}

static void emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	(void)t;
	struct lg_moe_kernel k = {
		.entry = p->entry[0], .experts = lg_spec_int(s, K_EXPERTS), .top_k = lg_spec_int(s, K_TOPK),
		.multiple = lg_spec_int(s, K_MULTIPLE), .r = lg_moe_plan_rows(p),
		.fp8 = s->dtype == LG_DTYPE_E4M3, .pow2 = lg_spec_int(s, K_ROUND) != 0, .map = "row_id_map"};
	if (s->pass == LG_PASS_FORWARD) {
		k.what = "MoE permute: tokens to expert-major padded rows";
		k.src = "x", k.src_s = "x_scale", k.dst = "out", k.dst_s = "out_scale";
		k.offsets = "offsets", k.counts = "counts", k.pin = "probs", k.pout = "out_probs";
		lg_moe_emit_dispatch(b, s, &k);
	} else {
		k.what = "MoE permute, backward: the token's rows added, probabilities restored";
		k.src = "dout", k.dst = "dx", k.pin = "dout_probs", k.pout = "dprobs";
		lg_moe_emit_combine(b, s, &k);
	}
}

/* Tile variants for `lingen tune`: threads a token, in both forms (the
 * forward's plain and pipelined dispatch, the backward's combine). */
static int candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max)
{
	return lg_moe_candidates(s, t, out, max, K_THREADS, K_PIPELINE, true);
}

/* What a launch computes: the comment of its typed launcher (lingen_ops.h). */
static const char doc_forward[] =
	"K4: MoE permute (op \"moe_permute\", pass \"forward\"), dtype bf16 or e4m3:\n"
	"  x [tokens, hidden], x_scale [tokens, hidden / 128] fp32 (e4m3; else 0),\n"
	"  probs [tokens, experts] fp32 or 0, the row map's row_id_map, offsets,\n"
	"  counts; out [rows, hidden] (rows = tokens * top_k + experts * (multiple\n"
	"  - 1): a static bound, since P is known on the device only), out_scale\n"
	"  [rows, hidden / 128] (e4m3), out_probs [rows] fp32 or 0. Row r < P of\n"
	"  (t, e) is x[t] with probs[t, e]; every other row is zeros, probability\n"
	"  0, scale that of a zero block (2^-99 with round_scale, else 1e-30).";
static const char doc_backward[] =
	"Its backward (bf16): dout [rows, hidden], dout_probs [rows] fp32 or 0;\n"
	"  dx [tokens, hidden] = fp32 sum of the token's rows in ascending expert\n"
	"  order; dprobs [tokens, experts] fp32 or 0 (dout_probs of each routed\n"
	"  pair, else 0).";

const struct lg_family lg_family_moe_permute = {
	.op = "moe_permute",
	.summary = "MoE permute into expert-major padded rows (+ probs; bf16 or e4m3 + scales), backward (K4)",
	.passes = (1u << LG_PASS_FORWARD) | (1u << LG_PASS_BACKWARD),
	.dtypes = (1u << LG_DTYPE_BF16) | (1u << LG_DTYPE_E4M3),
	.nkeys = NKEYS,
	.keys = keys,
	.sig = {[LG_PASS_FORWARD] = {1, sizes, F_NARGS, fwd_args, doc_forward}, [LG_PASS_BACKWARD] = {1, sizes, B_NARGS, bwd_args, doc_backward}},
	.validate = validate,
	.uses = uses,
	.plan = plan,
	.emit = emit,
	.geometry = lg_moe_plan_geometry,
	.candidates = candidates,
};
