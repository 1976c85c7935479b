/*
 * fp8_quant_weight.c - family "fp8_quant_weight" (docs/kernels.md 1.3,
 * weights; linghe's triton_block_quant): blockwise FP8 quantisation of a
 * weight w [rows, hidden] bf16 in 128 x 128 tiles, one scale a tile:
 * q [rows, hidden] e4m3 and s [cdiv(rows, 128), hidden / 128] fp32
 * (row-major), s = the dequantisation multiplier of docs/kernels.md 1.2
 * (quant.round_scale as everywhere; quant.output must be "both", its
 * default: a weight has one copy).
 * hidden must be a multiple of 128; rows may be any count: a partial last
 * row of tiles takes its amax over its real rows (absent rows count as 0)
 * and stores nothing past them.
 * `transposed`: also the transposed copy dgrad reads (wgmma takes e4m3
 * K-major only): qt [hidden, rows] = q^T and st [hidden / 128, cdiv(rows,
 * 128)] = s^T, each value quantised with its tile's scale (bit for bit q's
 * bytes), through the engine's columnwise path (128-byte qt lines).
 *
 * Strategy: the quant engine (quant_engine.h), layout LG_QE_TILE128 (its
 * weight-tile emitter, quant_tile.c): one CTA a 128 x 128 tile (`fblocks` of them along the features in turn),
 * w read once by 16-byte loads into registers; the column maxima of the
 * engine's columnwise path reduced once more to the tile's amax; then the
 * rowwise pass of the engine with the tile's scale (a half warp stores a
 * row's 128-byte q line).
 *
 * Tile options: `threads` 256 / 512, `fblocks` 1, 2, 4, 8, `values`
 * 16 / 32 (as fp8_quant_batched).
 */
#include <stdio.h>

#include "error.h"
#include "family.h"

#include "quant_common.h"
#include "quant_engine.h"

#define TILE 128
#define HIDDEN_MAX 65536
#define ROWS_MAX (((int64_t)INT32_MAX / (HIDDEN_MAX / TILE)) * TILE)

enum { K_HIDDEN, K_QUANT, K_TRANS = K_QUANT + LG_QUANT_KEYS, K_TILE, K_THREADS, K_FBLOCKS, K_VALUES, NKEYS };
static const char *const trans_words[2] = {"", "tr"};
static const int64_t threads_ok[] = {256, 512, 0};
static const int64_t fblocks_ok[] = {1, 2, 4, 8, 0};
static const int64_t values_ok[] = {16, 32, 0};
static const struct lg_key keys[NKEYS] = {
	[K_HIDDEN] = LG_KEY_DIM("hidden", "h", 128, HIDDEN_MAX, 128, "columns of the weight (its input features)"),
	LG_KEYS_QUANT(K_QUANT),
	[K_TRANS] = {.path = "transposed", .type = LG_KEY_BOOL, .has_def = true, .def = 0,
		     .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 24, .words = trans_words,
		     .doc = "also the transposed copy qt [hidden, rows], st [hidden/128, cdiv(rows, 128)] (dgrad's)"},
	[K_TILE] = LG_KEY_TILE_OBJ,
	[K_THREADS] = LG_KEY_TILE("threads", "t", 256, 512, threads_ok,
				  "threads per 128 x 128 tile: 256 (8 rows a thread) or 512 (4 rows)"),
	[K_FBLOCKS] = LG_KEY_TILE("fblocks", "f", 1, 8, fblocks_ok, "128 x 128 tiles a CTA quantises in turn"),
	[K_VALUES] = LG_KEY_TILE("values", "v", 16, 32, values_ok,
				 "bits a value is held in: 16 (bf16, the fast path) or 32 (the engine's fp32 path)"),
};

static const struct lg_size sizes[] = {
	{"rows", "M", 0, ROWS_MAX, "rows of the weight (its output features)", 0, 0},
};

enum { ARG_W, ARG_Q, ARG_S, ARG_QT, ARG_ST, NARGS };
static const struct lg_arg fwd_args[NARGS] = {
	[ARG_W] = {"w", LG_ARG_IN, LG_ELEM_BF16, "rows, hidden", 16, NULL},
	[ARG_Q] = {"q", LG_ARG_OUT, LG_ELEM_E4M3, "rows, hidden", 8, NULL},
	[ARG_S] = {"s", LG_ARG_OUT, LG_ELEM_FP32, "cdiv(rows, 128), hidden / 128", 4, "one scale a 128 x 128 tile"},
	[ARG_QT] = {"qt", LG_ARG_OUT, LG_ELEM_E4M3, "hidden, rows", 8, "transposed: q^T (else not used)"},
	[ARG_ST] = {"st", LG_ARG_OUT, LG_ELEM_FP32, "hidden / 128, cdiv(rows, 128)", 4, "transposed: s^T"},
};

/* The transposed copy only where the spec asks for it. */
static void uses(const struct lg_spec *s, unsigned char *used)
{
	if (!lg_spec_int(s, K_TRANS))
		used[ARG_QT] = used[ARG_ST] = 0;
}

static lg_status validate(const struct lg_spec *s, const char *where)
{
	if (lg_spec_quant(s).output != LG_QOUT_BOTH)
		return lg_spec_error(where, "quant.output: found \"%s\", allowed: \"both\" (a weight has one copy, "
				     "128 x 128 tiles)", lg_quant_output_names[lg_spec_quant(s).output]);
	return LG_OK;
}

static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	(void)t;
	lg_qe_plan(s, p, lg_spec_int(s, K_HIDDEN), K_THREADS, K_FBLOCKS, K_VALUES, -1, 1);
	p->nentries = 1;
	snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
	return LG_OK;
}

static void geometry(const struct lg_plan *p, int e, const int64_t *sz, struct lg_launch_dim *d)
{
	(void)e;
	struct lg_qe q = lg_qe_planned(NULL, p, LG_QE_TILE128);
	lg_qe_geometry(&q, sz[0], 0, d);
}

/* The values: w itself (16-byte streaming loads). */
static void emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	struct lg_qe e = lg_qe_planned(s, p, LG_QE_TILE128);
	e.cols = lg_spec_int(s, K_TRANS) != 0;
	struct lg_qe_hooks h = {.values = lg_qe_hook_load_bf16, .ctx = (void *)"w"};
	(void)t;
	lg_qe_emit_kernel(b, s, p, &e, &h, "FP8 quantisation of a weight in 128 x 128 tiles");
}

static int candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max)
{
	return lg_candidate_grid(s, t, out, 0, max, K_FBLOCKS, fblocks_ok, K_THREADS, threads_ok);
}

/* What a launch computes: the comment of its typed launcher (lingen_ops.h). */
static const char doc_forward[] =
	"FP8 quantisation of a weight in 128 x 128 tiles (op \"fp8_quant_weight\"):\n"
	"  w [rows, hidden] bf16 -> q [rows, hidden] e4m3, s [cdiv(rows, 128),\n"
	"  hidden/128] fp32, one scale a tile (a partial last row of tiles over its\n"
	"  real rows); transposed: also qt [hidden, rows] = q^T, st [hidden/128,\n"
	"  cdiv(rows, 128)] = s^T (the copy dgrad reads).";

const struct lg_family lg_family_fp8_quant_weight = {
	.op = "fp8_quant_weight",
	.summary = "FP8 quantisation of a weight in 128 x 128 tiles, one scale a tile",
	.passes = 1u << LG_PASS_FORWARD,
	.dtypes = 1u << LG_DTYPE_BF16,
	.nkeys = NKEYS,
	.keys = keys,
	.sig = {[LG_PASS_FORWARD] = {1, sizes, NARGS, fwd_args, doc_forward}},
	.validate = validate,
	.uses = uses,
	.plan = plan,
	.emit = emit,
	.geometry = geometry,
	.candidates = candidates,
};
