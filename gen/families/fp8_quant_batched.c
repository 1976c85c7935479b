/*
 * fp8_quant_batched.c - family "fp8_quant_batched" (docs/kernels.md 1.3, per-
 * expert tensors): the blockwise FP8 activation quantiser of MoE expert
 * inputs. x [tokens, hidden] bf16 holds the tokens grouped by expert in
 * contiguous segments of counts[e] tokens (counts [experts] int32, read
 * from device memory: no host synchronisation, one launch for every
 * expert); each segment is quantised as a tensor of its own (its 128-token
 * blocks start at its first token) and the copies are concatenated in
 * expert order:
 *   q  [tokens, hidden]: rowwise data, x's row order;
 *   s: for expert e a [hidden/128, count_e] block (count_e contiguous) at
 *      element start_e * hidden/128 (declared [hidden/128, tokens]: only
 *      the flat order is meaningful);
 *   qt: for expert e a [hidden, count_e] block at element start_e * hidden
 *      (declared [hidden, tokens]);
 *   st: for expert e cdiv(count_e, 128) rows of hidden at row
 *      sum_{e' < e} cdiv(count_e', 128) (declared [cdiv(tokens, 128) +
 *      experts, hidden]: a capacity; the rows past the last expert's are
 *      not written).
 * start_e is the exclusive prefix sum of counts; experts of count 0
 * contribute nothing; any number of experts. Counts must sum to at most
 * `tokens` (the tokens past the sum are neither read nor written); an
 * expert whose segment would run past `tokens` is not written at all.
 *
 * Strategy: the quant engine (quant_engine.h), layout LG_QE_EXPERTS: a 1-D
 * grid of cdiv(tokens, 128) + experts token tiles (a static bound: each
 * expert adds at most one partial tile) x feature groups; each CTA finds
 * the expert of its token tile by a warp scan of counts (L2-resident)
 * and leaves when its tile is past the last; a tile never straddles two
 * experts. A CTA then quantises `fblocks` 128 x 128 tiles along the
 * features in turn, which spreads the scan over several tiles; default 1:
 * with a loop over blocks ptxas keeps each row's address live across it
 * (104 registers at 256 threads on sm_90a, 2 CTAs an SM, against 73 and 3
 * for one block, as fp8_quant's 71); the scan's latency is then hidden by
 * the SM's other CTAs. Not measured yet: `lingen tune` sweeps fblocks x
 * threads. x is read once, 16 bytes a load; maxima on the bf16 bits.
 *
 * Tile options: `threads` 256 / 512 (as fp8_quant), `fblocks` 1, 2, 4, 8
 * (128-feature blocks a CTA), `values` 16 / 32 (as fp8_quant). The
 * engine's register prefetch of the next block (tile.prefetch of the
 * SwiGLU families) measured 363-386 us against 235.6 here (65536 x 2048,
 * git history, commit 8b8e268: bench/h200-2026-12-01e): it is not offered.
 */
#include <stdio.h>

#include "family.h"

#include "quant_common.h"
#include "quant_engine.h"

#define TILE 128
#define HIDDEN_MAX 65536
#define EXPERTS_MAX 65536
/* The grid, (cdiv(tokens, 128) + experts) x feature groups, within 2^31 - 1. */
#define TOKENS_MAX (((int64_t)INT32_MAX / (HIDDEN_MAX / TILE) - EXPERTS_MAX) * TILE)

enum { K_HIDDEN, K_QUANT, K_TILE = K_QUANT + LG_QUANT_KEYS, K_THREADS, K_FBLOCKS, K_VALUES, K_TILES, NKEYS };
static const int64_t threads_ok[] = {256, 512, 0};
static const int64_t fblocks_ok[] = {1, 2, 4, 8, 0};
static const int64_t values_ok[] = {16, 32, 0};
static const struct lg_key keys[NKEYS] = {
	[K_HIDDEN] = LG_KEY_DIM("hidden", "h", 128, HIDDEN_MAX, 128, "features per row"),
	LG_KEYS_QUANT(K_QUANT),
	[K_TILE] = LG_KEY_TILE_OBJ,
	[K_THREADS] = LG_KEY_TILE("threads", "t", 256, 512, threads_ok,
				  "threads per 128 x 128 tile: 256 (8 tokens a thread) or 512 (4 tokens)"),
	[K_FBLOCKS] = LG_KEY_TILE("fblocks", "f", 1, 8, fblocks_ok,
				  "128-feature blocks a CTA quantises in turn (the expert lookup spread over them)"),
	[K_VALUES] = LG_KEY_TILE("values", "v", 16, 32, values_ok,
				 "bits a value is held in: 16 (bf16, the fast path) or 32 (the engine's fp32 path)"),
	[K_TILES] = LG_QE_KEY_TILES("token tiles a CTA takes in turn (the counts scan paid once for them)"),
};

enum { P_TILES = LG_QE_PV_COUNT }; /* plan values after the engine's */

static const struct lg_size sizes[] = {
	{"tokens", "M", 0, TOKENS_MAX, "rows of x: every expert's tokens, grouped by expert (a capacity: counts may sum "
			      "to less)", 0, 0},
	{"experts", "E", 1, EXPERTS_MAX, "experts (entries of counts)", 256, 0},
};

enum { ARG_X, ARG_COUNTS, ARG_Q, ARG_S, ARG_QT, ARG_ST, NARGS };
static const struct lg_arg fwd_args[NARGS] = {
	[ARG_X] = {"x", LG_ARG_IN, LG_ELEM_BF16, "tokens, hidden", 16, "tokens grouped by expert"},
	[ARG_COUNTS] = {"counts", LG_ARG_IN, LG_ELEM_I32, "experts", 4,
			"tokens of each expert (device memory; sum <= tokens)"},
	[ARG_Q] = {"q", LG_ARG_OUT, LG_ELEM_E4M3, "tokens, hidden", 8, "rowwise (0 for columnwise)"},
	[ARG_S] = {"s", LG_ARG_OUT, LG_ELEM_FP32, "hidden / 128, tokens", 4,
		   "rowwise scales: a [hidden/128, count_e] block an expert, in expert order (0 for columnwise)"},
	[ARG_QT] = {"qt", LG_ARG_OUT, LG_ELEM_E4M3, "hidden, tokens", 16,
		    "columnwise: a [hidden, count_e] block an expert, in expert order (0 for rowwise)"},
	[ARG_ST] = {"st", LG_ARG_OUT, LG_ELEM_FP32, "cdiv(tokens, 128) + experts, hidden", 8,
		    "columnwise scales: cdiv(count_e, 128) rows an expert, in expert order (a capacity; 0 for "
		    "rowwise)"},
};

static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	(void)t;
	lg_qe_plan(s, p, lg_spec_int(s, K_HIDDEN), K_THREADS, K_FBLOCKS, K_VALUES, -1, 1);
	/* one token tile a CTA: 2 and 4 measured 222.3 / 218.8 us against 213.4
	 * (65536 x 2048, 256 experts, git history, commit 8b8e268: bench/h200-2026-12-01f; 128 registers,
	 * two CTAs an SM, against 75 and three) */
	p->tile[K_TILES] = p->v[P_TILES] = lg_spec_has(s, K_TILES) ? lg_spec_int(s, K_TILES) : 1;
	p->nentries = 1;
	snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
	return LG_OK;
}

/* The engine as planned, for a spec (its quant recipe; NULL: geometry). */
static struct lg_qe engine(const struct lg_spec *s, const struct lg_plan *p)
{
	struct lg_qe e = lg_qe_planned(s, p, LG_QE_EXPERTS);
	e.tiles = (int)p->v[P_TILES];
	return e;
}

static void geometry(const struct lg_plan *p, int e, const int64_t *sz, struct lg_launch_dim *d)
{
	(void)e;
	struct lg_qe q = engine(NULL, p);
	lg_qe_geometry(&q, sz[0], sz[1], d);
}

/* The values: x itself (16-byte streaming loads). */
static void emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	struct lg_qe e = engine(s, p);
	struct lg_qe_hooks h = {.values = lg_qe_hook_load_bf16, .ctx = (void *)"x"};
	(void)t;
	lg_qe_emit_kernel(b, s, p, &e, &h, "per-expert blockwise FP8 quantisation");
}

/* Tile variants for `lingen tune`: feature blocks a CTA x threads. */
static int candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max)
{
	return lg_candidate_grid(s, t, out, 0, max, K_FBLOCKS, fblocks_ok, K_THREADS, threads_ok);
}

static void uses(const struct lg_spec *s, unsigned char *used)
{
	lg_quant_uses(s, used, ARG_Q, ARG_S, ARG_QT, ARG_ST);
}

/* What a launch computes: the comment of its typed launcher (lingen_ops.h). */
static const char doc_forward[] =
	"Per-expert (batched) FP8 quantisation (op \"fp8_quant_batched\", docs/kernels.md\n"
	"  1.3): x [tokens, hidden] bf16, tokens grouped by expert; counts\n"
	"  [experts] int32 in device memory (read by the kernel, sum <= tokens);\n"
	"  each expert's segment quantised as a tensor of its own, outputs\n"
	"  concatenated in expert order: q [tokens, hidden]; s: a [hidden/128,\n"
	"  count_e] block at element start_e * hidden/128 (buffer hidden/128 *\n"
	"  tokens floats); qt: a [hidden, count_e] block at element start_e *\n"
	"  hidden (buffer hidden * tokens bytes); st: cdiv(count_e, 128) rows of\n"
	"  hidden floats an expert, one after the other (buffer capacity\n"
	"  (cdiv(tokens, 128) + experts) * hidden floats; rows past the last are\n"
	"  not written).";

const struct lg_family lg_family_fp8_quant_batched = {
	.op = "fp8_quant_batched",
	.summary = "per-expert blockwise FP8 quantisation (tokens grouped by expert, counts on the device)",
	.passes = 1u << LG_PASS_FORWARD,
	.dtypes = 1u << LG_DTYPE_BF16,
	.nkeys = NKEYS,
	.keys = keys,
	.sig = {[LG_PASS_FORWARD] = {2, sizes, NARGS, fwd_args, doc_forward}},
	.uses = uses,
	.plan = plan,
	.emit = emit,
	.geometry = geometry,
	.candidates = candidates,
};
