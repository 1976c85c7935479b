/*
 * moe_unpermute.c - family "moe_unpermute" (docs/kernels.md K5): MoE combine of
 * expert-major padded rows back into tokens, and its backward.
 *
 * forward: out[t] = sum over t's rows r = row_id_map[t, e] >= 0, in
 *   ascending expert order, of g[r] (weighted: probs[r] * g[r]), in fp32,
 *   rounded once to bf16; restore_probs[t, e] = probs[r] where routed, else
 *   0. Any hidden size. Padding rows are never read. `weighted` applies the
 *   router probability here (linghe has no such switch); probs is then
 *   required (declared through uses(): every launch refuses 0).
 * backward: the dispatch of the output gradient into the padded rows:
 *   dg[r] = dout[t] (weighted: probs[r] * dout[t], rounded to bf16) and
 *   dprobs[r] = drestore[t, e] (weighted, with g given: plus <dout[t], g[r]>
 *   in fp32, the lanes then the warps in a fixed order); every other row
 *   below the capacity tokens * top_k + experts * (multiple - 1) zeros.
 *   Unweighted it is moe_permute's forward.
 *
 * Strategy: moe_common.c (the forward by default pipelined, tile.pipeline
 * 2: persistent CTAs, the next token's map row read while this one's rows
 * are loaded and added in order; tile.pipeline 1: one CTA per token, up to
 * 8 expert rows loaded at once; the backward one CTA per token).
 */
#include <stdio.h>

#include "family.h"

#include "error.h"
#include "moe_common.h"

enum { K_HIDDEN, K_EXPERTS, K_TOPK, K_MULTIPLE, K_WEIGHTED, K_TILE, K_THREADS, K_PIPELINE, NKEYS };
static const char *const weighted_words[2] = {"sum", "weighted"};
static const struct lg_key keys[NKEYS] = {
	[K_HIDDEN] = LG_KEY_DIM("hidden", "h", 1, 65536, 0, "features per token (any count)"),
	LG_KEYS_MOE(K_EXPERTS),
	[K_WEIGHTED] = {.path = "weighted", .type = LG_KEY_BOOL, .has_def = true, .def = 0,
			.naming = LG_NAME_IF_NOT_DEFAULT, .rank = 20, .words = weighted_words,
			.doc = "each row times its router probability probs[r] before the sum"},
	[K_TILE] = LG_KEY_TILE_OBJ,
	[K_THREADS] = LG_KEY_MOE_THREADS,
	[K_PIPELINE] = LG_KEY_MOE_PIPELINE,
};

static const struct lg_size sizes[] = {{"tokens", "T", 0, (int64_t)1 << 30, "tokens", 0, 0}};

#define ROWS_H LG_MOE_ROWS ", hidden"

enum { F_G, F_PROBS, F_MAP, F_OUT, F_RPROBS, F_NARGS };
static const struct lg_arg fwd_args[F_NARGS] = {
	[F_G] = {"g", LG_ARG_IN, LG_ELEM_BF16, ROWS_H, 16, "expert-major padded rows"},
	[F_PROBS] = {"probs", LG_ARG_OPT_IN, LG_ELEM_FP32, LG_MOE_ROWS, 4,
		     "each row's router probability (weighted: required)"},
	[F_MAP] = {"row_id_map", LG_ARG_IN, LG_ELEM_I32, "tokens, experts", 4, "moe_row_map"},
	[F_OUT] = {"out", LG_ARG_OUT, LG_ELEM_BF16, "tokens, hidden", 16, "fp32 sum of the token's rows"},
	[F_RPROBS] = {"restore_probs", LG_ARG_OPT_OUT, LG_ELEM_FP32, "tokens, experts", 4,
		      "probs at each routed (t, e), else 0 (needs probs)"},
};

enum { B_DOUT, B_DRP, B_MAP, B_OFF, B_CNT, B_G, B_PROBS, B_DG, B_DPROBS, B_NARGS };
static const struct lg_arg bwd_args[B_NARGS] = {
	[B_DOUT] = {"dout", LG_ARG_IN, LG_ELEM_BF16, "tokens, hidden", 16, "gradient of out"},
	[B_DRP] = {"drestore", LG_ARG_OPT_IN, LG_ELEM_FP32, "tokens, experts", 4, "gradient of restore_probs"},
	[B_MAP] = {"row_id_map", LG_ARG_IN, LG_ELEM_I32, "tokens, experts", 4, "moe_row_map"},
	[B_OFF] = {"offsets", LG_ARG_IN, LG_ELEM_I32, "experts + 1", 4, "moe_row_map"},
	[B_CNT] = {"counts", LG_ARG_IN, LG_ELEM_I32, "experts", 4, "moe_row_map"},
	[B_G] = {"g", LG_ARG_OPT_IN, LG_ELEM_BF16, ROWS_H, 16, "weighted: the forward's rows (for dprobs)"},
	[B_PROBS] = {"probs", LG_ARG_OPT_IN, LG_ELEM_FP32, LG_MOE_ROWS, 4, "weighted: the forward's probs"},
	[B_DG] = {"dg", LG_ARG_OUT, LG_ELEM_BF16, ROWS_H, 16, "gradient of g (padding rows 0)"},
	[B_DPROBS] = {"dprobs", LG_ARG_OPT_OUT, LG_ELEM_FP32, LG_MOE_ROWS, 4, "gradient of probs"},
};

static lg_status validate(const struct lg_spec *s, const char *where)
{
	lg_status st = lg_moe_validate_threads(s, K_THREADS, lg_spec_int(s, K_HIDDEN), 2, where);
	if (st == LG_OK)
		st = lg_moe_validate_pipeline(s, K_PIPELINE, K_THREADS, s->pass == LG_PASS_FORWARD, where);
	return st != LG_OK ? st : lg_moe_validate(s, K_EXPERTS, where);
}

static void uses(const struct lg_spec *s, unsigned char *used)
{
	bool weighted = lg_spec_int(s, K_WEIGHTED) != 0;
	if (s->pass == LG_PASS_FORWARD) {
		used[F_PROBS] = weighted ? LG_ARG_REQUIRED : 1;
		return;
	}
	used[B_G] = weighted;
	used[B_PROBS] = weighted ? LG_ARG_REQUIRED : 0;
	if (weighted) /* d(probs) = dout . g: given with g only */
		used[B_DPROBS] = LG_ARG_NEEDS(B_G);
}

static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	(void)t;
	lg_moe_plan(s, p, lg_spec_int(s, K_HIDDEN), 2, s->pass == LG_PASS_BACKWARD, K_EXPERTS, K_THREADS,
		    K_PIPELINE);
	return LG_OK;
}

static void emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	(void)t;
	bool weighted = lg_spec_int(s, K_WEIGHTED) != 0;
	struct lg_moe_kernel k = {.entry = p->entry[0], .experts = lg_spec_int(s, K_EXPERTS),
				  .top_k = lg_spec_int(s, K_TOPK), .multiple = lg_spec_int(s, K_MULTIPLE),
				  .r = lg_moe_plan_rows(p), .map = "row_id_map",
				  .weights = weighted ? "probs" : NULL};
	if (s->pass == LG_PASS_FORWARD) {
		k.what = weighted ? "MoE unpermute: each token's rows times their probability, added"
				  : "MoE unpermute: each token's rows added";
		k.src = "g", k.dst = "out", k.pin = "probs", k.pout = "restore_probs";
		lg_moe_emit_combine(b, s, &k);
	} else {
		k.what = "MoE unpermute, backward: the gradient dispatched into the padded rows";
		k.src = "dout", k.dst = "dg", k.offsets = "offsets", k.counts = "counts";
		k.pin = "drestore", k.pout = "dprobs";
		if (weighted)
			k.other = "g", k.dot = "dprobs";
		lg_moe_emit_dispatch(b, s, &k);
	}
}

/* Tile variants for `lingen tune`: threads a token; the combine in both forms. */
static int candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max)
{
	return lg_moe_candidates(s, t, out, max, K_THREADS, K_PIPELINE, s->pass == LG_PASS_FORWARD);
}

/* What a launch computes: the comment of its typed launcher (lingen_ops.h). */
static const char doc_forward[] =
	"K5: MoE unpermute (op \"moe_unpermute\", pass \"forward\"): g [rows, hidden]\n"
	"  bf16, probs [rows] fp32 (required when weighted, else optional);\n"
	"  out [tokens, hidden] bf16 = fp32 sum in ascending expert order of the\n"
	"  token's rows (weighted: each times probs[r]); restore_probs [tokens,\n"
	"  experts] fp32 or 0 (probs[r] where routed, else 0). Any hidden.";
static const char doc_backward[] =
	"Its backward: dout [tokens, hidden] bf16, drestore [tokens, experts] fp32\n"
	"  or 0, the row map; weighted: g and probs of the forward. dg [rows,\n"
	"  hidden] bf16 (dout[t], weighted times probs[r]; other rows zeros);\n"
	"  dprobs [rows] fp32 or 0 (drestore[t, e], weighted plus <dout[t], g[r]>;\n"
	"  0 on other rows).";

const struct lg_family lg_family_moe_unpermute = {
	.op = "moe_unpermute",
	.summary = "MoE unpermute (combine): fp32 sum of each token's rows, optionally weighted; backward (K5)",
	.passes = (1u << LG_PASS_FORWARD) | (1u << LG_PASS_BACKWARD),
	.dtypes = 1u << LG_DTYPE_BF16,
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
