/*
 * fp8_gemm.c - family "fp8_gemm" (docs/kernels.md 1.3; issue 16): the
 * three blockwise FP8 GEMMs of a linear layer y = x . w^T, on the layouts
 * lingen's quantisers write (fp8_quant, fp8_quant_weight):
 *
 *   forward  y [M, n] = x . w^T: x's rowwise copy (q [M, k], s [cdiv(k,
 *            128), M], 1 x 128 blocks), w's 128 x 128 tiles (q [n, k],
 *            s [cdiv(n, 128), cdiv(k, 128)]); y bf16 or fp32 (`dtype`)
 *   dgrad    dx [M, k] = dy . w: dy's rowwise copy ([M, n], [cdiv(n, 128),
 *            M]), w's transposed copy (qt [k, n], st [cdiv(k, 128),
 *            cdiv(n, 128)]: wgmma reads e4m3 K-major only)
 *   wgrad    dw [n, k] = dy^T . x over the tokens: the columnwise copies of
 *            dy (qt [n, round_up(M, 128)], st [cdiv(M, 128), n]) and x
 *            ([k, round_up(M, 128)], [cdiv(M, 128), k]); fp32 (or bf16);
 *            `accumulate`: dw += (an fp32 main gradient)
 *
 * M is the run-time token count (any, 0 and 1 included; the wgrad's
 * columnwise copies have rows round_up(M, 128) bytes apart, LG_QT_PITCH, a
 * pitch TMA takes, read as rows of M: the tail is never read); n and k are
 * static multiples of 16 (a partial last 128-block of the reduction is
 * zero-filled by TMA and scaled by its block's scale). sm_90a only: plan()
 * refuses other targets.
 *
 * Strategy: the FP8 GEMM emitter (fp8_gemm_emit.h): persistent CTAs of
 * two consumer warpgroups and a TMA producer, 128 x 128 tiles (tile.m,
 * tile.n), 128 of the reduction a stage, as many stages as fit (7), the
 * partial sums promoted with both scales every 128 of the reduction. Tiles
 * in the pipeline's grouped raster: LG_WGP_RASTER row tiles at a time
 * sweep the columns, so a wave's operand tiles stay in L2.
 */
#include <stdio.h>

#include "error.h"
#include "family.h"

#include "fp8_gemm_common.h"
#include "wgmma_pipe.h"

enum { K_N, K_K, K_ACC, K_TILE, K_TM, K_TN, K_STAGES, K_TC, K_TA, K_TE, K_TO, K_TF, K_TP, NKEYS };

static const int64_t tm_ok[] = {64, 128, 256, 0};
static const char *const acc_words[2] = {"set", "acc"};
static const struct lg_key keys[NKEYS] = {
	[K_N] = LG_KEY_DIM("n", "n", 16, 1 << 20, 16, "output features: rows of w (a multiple of 16)"),
	[K_K] = {.path = "k", .type = LG_KEY_INT, .flags = LG_KEY_REQUIRED | LG_KEY_SHAPE, .min = 16,
		 .max = 1 << 20, .multiple = 16, .naming = LG_NAME_ALWAYS, .rank = 11, .abbrev = "k",
		 .doc = "input features: columns of x and w (a multiple of 16)"},
	[K_ACC] = {.path = "accumulate", .type = LG_KEY_BOOL, .has_def = true, .def = 0,
		   .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 20, .words = acc_words,
		   .doc = "wgrad: dw += dy^T . x (an fp32 main gradient) instead of dw ="},
	[K_TILE] = LG_KEY_TILE_OBJ,
	[K_TM] = LG_KEY_TILE("m", "m", 64, 256, tm_ok,
			     "output rows a CTA tile (64 a consumer warpgroup; 256: two of 128 rows in two waves)"),
	[K_TN] = LG_KEY_TILE("n", "n", 16, 256, NULL, "output columns a CTA tile (a multiple of 16)"),
	[K_STAGES] = LG_KEY_TILE("stages", "s", 2, 8, NULL, "128-element reduction blocks in flight"),
	[K_TC] = LG_FP8_KEY_CLUSTER,
	[K_TA] = LG_FP8_KEY_AHEAD,
	[K_TO] = LG_FP8_KEY_OVERLAP,
	[K_TE] = LG_FP8_KEY_EPILOGUE,
	[K_TF] = LG_FP8_KEY_FFMA,
	[K_TP] = LG_FP8_KEY_PINGPONG,
};

static const struct lg_size sizes[] = {
	{"tokens", "M", 0, INT32_MAX, "rows of x and dy (tokens)", 0, 0},
};
/* wgrad reads the columnwise copies (tokens along a row) by TMA, whose row
 * pitch must be a multiple of 16 bytes: their rows are round_up(tokens, 128)
 * apart (the quantisers' layout, a zero tail), any token count. */
static const struct lg_size wgrad_sizes[] = {
	{"tokens", "M", 0, INT32_MAX, "rows of dy and x (the columnwise copies' columns; their rows "
	 "round_up(tokens, 128) apart)", 0, 0},
};

enum { A_IN, A_IN_S, B_IN, B_IN_S, C_OUT, NARGS };
static const struct lg_arg fwd_args[NARGS] = {
	[A_IN] = {"x", LG_ARG_IN, LG_ELEM_E4M3, "tokens, k", 16, "rowwise copy of x"},
	[A_IN_S] = {"x_scale", LG_ARG_IN, LG_ELEM_FP32, "cdiv(k, 128), tokens", 4, "its 1 x 128 scales"},
	[B_IN] = {"w", LG_ARG_IN, LG_ELEM_E4M3, "n, k", 16, "the weight's copy"},
	[B_IN_S] = {"w_scale", LG_ARG_IN, LG_ELEM_FP32, "cdiv(n, 128), cdiv(k, 128)", 4, "its 128 x 128 scales"},
	[C_OUT] = {"y", LG_ARG_OUT, LG_ELEM_DTYPE, "tokens, n", 16, "x . w^T"},
};
static const struct lg_arg dgrad_args[NARGS] = {
	[A_IN] = {"dy", LG_ARG_IN, LG_ELEM_E4M3, "tokens, n", 16, "rowwise copy of dy"},
	[A_IN_S] = {"dy_scale", LG_ARG_IN, LG_ELEM_FP32, "cdiv(n, 128), tokens", 4, "its 1 x 128 scales"},
	[B_IN] = {"wt", LG_ARG_IN, LG_ELEM_E4M3, "k, n", 16, "the weight's transposed copy"},
	[B_IN_S] = {"wt_scale", LG_ARG_IN, LG_ELEM_FP32, "cdiv(k, 128), cdiv(n, 128)", 4, "its 128 x 128 scales"},
	[C_OUT] = {"dx", LG_ARG_OUT, LG_ELEM_DTYPE, "tokens, k", 16, "dy . w"},
};
static const struct lg_arg wgrad_args[NARGS] = {
	[A_IN] = {"dyt", LG_ARG_IN, LG_ELEM_E4M3, "n, " LG_QT_PITCH, 16,
		  "columnwise copy of dy (rows 128-byte aligned; the tail not read)"},
	[A_IN_S] = {"dyt_scale", LG_ARG_IN, LG_ELEM_FP32, "cdiv(tokens, 128), n", 4, "its 128 x 1 scales"},
	[B_IN] = {"xt", LG_ARG_IN, LG_ELEM_E4M3, "k, " LG_QT_PITCH, 16,
		  "columnwise copy of x (rows 128-byte aligned; the tail not read)"},
	[B_IN_S] = {"xt_scale", LG_ARG_IN, LG_ELEM_FP32, "cdiv(tokens, 128), k", 4, "its 128 x 1 scales"},
	[C_OUT] = {"dw", LG_ARG_OUT, LG_ELEM_DTYPE, "n, k", 16, "dy^T . x (accumulate: added to dw)"},
};

static const struct lg_fp8_keys tkeys = {K_TM, K_TN, K_STAGES, K_ACC, K_TC, K_TA, K_TE, K_TO, K_TF, K_TP, K_N, K_K, 3072, true, true};

static lg_status validate(const struct lg_spec *s, const char *where)
{
	return lg_fp8_validate(s, where, &tkeys, false);
}

/* Static extents as literals of generated code. */
struct lits {
	char n[24], k[24], nb[24], kb[24];
};
static struct lits lits_of(const struct lg_spec *s)
{
	struct lits l;
	int64_t n = lg_spec_int(s, K_N), k = lg_spec_int(s, K_K);
	snprintf(l.n, sizeof l.n, "%lldll", (long long)n);
	snprintf(l.k, sizeof l.k, "%lldll", (long long)k);
	snprintf(l.nb, sizeof l.nb, "%lld", (long long)lg_fp8_cdiv(n, 128));
	snprintf(l.kb, sizeof l.kb, "%lld", (long long)lg_fp8_cdiv(k, 128));
	return l;
}

/* The GEMM of a pass: its operands' tensor maps and scale kinds (cols:
 * l's, which must outlive it). */
static struct lg_fp8_gemm gemm_of(const struct lg_spec *s, const struct lg_fp8_tile *t, const struct lits *l)
{
	static const char *const tm[LG_PASS_COUNT][3] = {[LG_PASS_FORWARD] = {"&tm_x", "&tm_w", "&tm_y"},
							  [LG_PASS_DGRAD] = {"&tm_dy", "&tm_wt", "&tm_dx"},
							  [LG_PASS_WGRAD] = {"&tm_dyt", "&tm_xt", "&tm_dw"}};
	return lg_fp8_gemm_of(s, &tkeys, t, tm[s->pass], s->pass == LG_PASS_FORWARD ? l->n : l->k, false);
}

/* The scales' macros (fp8_gemm_emit.h): A's per row, B's per tile or row. */
static void emit_scale_macros(lg_buf *b, const struct lg_spec *s, const struct lits *l)
{
	switch (s->pass) {
	case LG_PASS_FORWARD:
		lg_line(b, "#define LG_SA(kb, r) (((const float *)x_scale)[(i64)(kb) * M + (r)])");
		lg_line(b, "#define LG_SB(kb, c) (((const float *)w_scale)[(i64)(c) * %s + (kb)])", l->kb);
		break;
	case LG_PASS_DGRAD:
		lg_line(b, "#define LG_SA(kb, r) (((const float *)dy_scale)[(i64)(kb) * M + (r)])");
		lg_line(b, "#define LG_SB(kb, c) (((const float *)wt_scale)[(i64)(c) * %s + (kb)])", l->nb);
		break;
	default:
		lg_line(b, "#define LG_SA(kb, r) (((const float *)dyt_scale)[(i64)(kb) * %s + (r)])", l->n);
		lg_line(b, "#define LG_SB(kb, c) (((const float *)xt_scale)[(i64)(kb) * %s + (c)])", l->k);
		break;
	}
}

/* Output rows (an expression), columns and reduction of a pass. */
static void extents(const struct lg_spec *s, const struct lits *l, const char **rows, int64_t *cols,
		    const char **red)
{
	int64_t n = lg_spec_int(s, K_N), k = lg_spec_int(s, K_K);
	*rows = s->pass == LG_PASS_WGRAD ? l->n : "M";
	*cols = s->pass == LG_PASS_FORWARD ? n : k;
	*red = s->pass == LG_PASS_FORWARD ? l->k : s->pass == LG_PASS_DGRAD ? l->n : "M";
}

static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	struct lg_fp8_tile tl;
	lg_status st = lg_fp8_plan_tile(s, t, &tkeys, 0, false, &tl);
	if (st != LG_OK)
		return st;
	struct lits l = lits_of(s);
	struct lg_fp8_gemm g = gemm_of(s, &tl, &l);
	const char *rows, *red;
	int64_t cols;
	extents(s, &l, &rows, &cols, &red);
	p->v[P8_COLS] = cols;
	p->v[P8_ROWS] = s->pass == LG_PASS_WGRAD ? lg_spec_int(s, K_N) : -1;
	st = lg_fp8_plan_finish(s, p, &g, &tkeys, A_IN, B_IN, C_OUT);
	/* the operands: rows of tokens in a pitch of round_up(tokens, 128) (LG_QT_PITCH) */
	if (st == LG_OK && s->pass == LG_PASS_WGRAD)
		p->tmap[0].cols = p->tmap[1].cols = "tokens";
	return st;
}

static void geometry(const struct lg_plan *p, int e, const int64_t *sz, struct lg_launch_dim *d)
{
	(void)e;
	int64_t rows = p->v[P8_ROWS] >= 0 ? p->v[P8_ROWS] : sz[0];
	int64_t tiles = lg_fp8_cdiv(rows, p->v[P8_BM]) * lg_fp8_cdiv(p->v[P8_COLS], p->v[P8_BN] * (int64_t)p->cluster[0]);
	lg_fp8_geometry(p, tiles, d);
}

/* ------------------------------------------------------------ emission */

struct dense {
	const char *rows, *red;
	int64_t cols;
	int bm, bn, cl;
};

static void dense_setup(lg_buf *b, void *ctx)
{
	const struct dense *d = ctx;
	lg_line(b, "const i64 rtiles = (%s + %d) / %d;", d->rows, d->bm - 1, d->bm);
	lg_line(b, "const i64 tiles = rtiles * %lld;", (long long)lg_fp8_cdiv(d->cols, (int64_t)d->bn * d->cl));
}

static void dense_tile(lg_buf *b, void *ctx, bool producer)
{
	const struct dense *d = ctx;
	lg_wgp_emit_raster(b, lg_fp8_cdiv(d->cols, (int64_t)d->bn * d->cl), d->bm, d->bn, d->cl, producer);
	lg_line(b, "const int nkt = (int)((%s + 127) / 128);", d->red);
	if (!producer)
		lg_line(b, "const i64 rend = %s;", d->rows);
}

static void emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	(void)t;
	struct lg_fp8_tile tl = lg_fp8_planned(p);
	struct lits l = lits_of(s);
	struct lg_fp8_gemm g = gemm_of(s, &tl, &l);
	struct dense d = {NULL, NULL, 0, tl.bm, tl.bn, tl.cluster};
	extents(s, &l, &d.rows, &d.cols, &d.red);
	static const char *const what[] = {"y = x . w^T", "", "dx = dy . w", "dw = dy^T . x"};
	lg_section(b, "helpers for this spec", NULL);
	lg_fp8_gemm_emit_helpers(b, &g, "fp8");
	const struct lg_arg *a = lg_family_get(s->op)->sig[s->pass].args;
	char store[96];
	lg_fp8_emit_store(b, s->dtype == LG_DTYPE_FP32, lg_spec_int(s, K_ACC) != 0, d.cols);
	snprintf(store, sizeof store, "lg_st_out((u8 *)%s, ", a[C_OUT].name);
	lg_fp8_emit_head(b, s, p, what[s->pass], &g);
	emit_scale_macros(b, s, &l);
	struct lg_fp8_sched sc = {&d, dense_setup, dense_tile, NULL};
	lg_fp8_gemm_emit_body(b, &g, &sc, "fp8", store);
	lg_close(b);
}

static int candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max)
{
	return lg_fp8_candidates(s, t, out, max, &tkeys);
}

static const char doc_fwd[] =
	"Blockwise FP8 GEMM forward (op \"fp8_gemm\", sm_90a): y [tokens, n] (bf16 or\n"
	"  fp32: dtype) = x . w^T from x's rowwise copy (x [tokens, k] e4m3, x_scale\n"
	"  [cdiv(k,128), tokens]) and w's 128 x 128 tiles (w [n, k], w_scale\n"
	"  [cdiv(n,128), cdiv(k,128)]).";
static const char doc_dgrad[] =
	"Blockwise FP8 GEMM dgrad (op \"fp8_gemm\", sm_90a): dx [tokens, k] = dy . w from\n"
	"  dy's rowwise copy (dy [tokens, n], dy_scale [cdiv(n,128), tokens]) and the\n"
	"  weight's transposed copy (wt [k, n], wt_scale [cdiv(k,128), cdiv(n,128)]).";
static const char doc_wgrad[] =
	"Blockwise FP8 GEMM wgrad (op \"fp8_gemm\", sm_90a): dw [n, k] (=, or += with\n"
	"  accumulate) dy^T . x over the tokens (any count) from the columnwise copies\n"
	"  of dy (dyt [n, round_up(tokens,128)], dyt_scale [cdiv(tokens,128), n]) and\n"
	"  x (xt [k, round_up(tokens,128)], xt_scale [cdiv(tokens,128), k]): the\n"
	"  quantisers' layout, rows 128-byte aligned, columns past tokens not read.";

const struct lg_family lg_family_fp8_gemm = {
	.op = "fp8_gemm",
	.summary = "blockwise FP8 GEMM (1x128 activations, 128x128 weights): forward, dgrad, wgrad (sm_90a)",
	.passes = 1u << LG_PASS_FORWARD | 1u << LG_PASS_DGRAD | 1u << LG_PASS_WGRAD,
	.dtypes = 1u << LG_DTYPE_BF16 | 1u << LG_DTYPE_FP32,
	.nkeys = NKEYS,
	.keys = keys,
	.sig = {[LG_PASS_FORWARD] = {1, sizes, NARGS, fwd_args, doc_fwd},
		[LG_PASS_DGRAD] = {1, sizes, NARGS, dgrad_args, doc_dgrad},
		[LG_PASS_WGRAD] = {1, wgrad_sizes, NARGS, wgrad_args, doc_wgrad}},
	.validate = validate,
	.plan = plan,
	.emit = emit,
	.geometry = geometry,
	.candidates = candidates,
	.target_only = "sm_90a",
};
