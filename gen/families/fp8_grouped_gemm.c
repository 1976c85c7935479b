/*
 * fp8_grouped_gemm.c - family "fp8_grouped_gemm" (docs/kernels.md 1.3;
 * issue 16): the MoE experts' blockwise FP8 GEMMs over per-expert row
 * segments, on the layouts the per-expert quantisers write
 * (fp8_quant_batched, moe_permute_quant: expert e's rows start at
 * start_e = sum of counts[:e]; its rowwise scales are a [cdiv(K, 128),
 * count_e] block at element start_e cdiv(K, 128)):
 *
 *   forward  y [tokens, n] = x . w[e]^T for the rows of each expert e: x's
 *            rowwise copy, w [experts, n, k] in 128 x 128 tiles (w_scale
 *            [experts, cdiv(n, 128), cdiv(k, 128)])
 *   dgrad    dx [tokens, k] = dy . w[e]: dy's rowwise copy, the weights'
 *            transposed copies wt [experts, k, n] (wt_scale [experts,
 *            cdiv(k, 128), cdiv(n, 128)])
 *   wgrad    dw [experts, n, k] = dy_e^T . x_e over each expert's tokens:
 *            the per-expert columnwise copies of dy and x (expert e's a
 *            [n, count_e] / [k, count_e] block at element start_e n /
 *            start_e k, scales a [cdiv(count_e, 128), n] / [.., k] block at
 *            row sum of cdiv(counts[:e], 128)); fp32 (`accumulate`: dw +=,
 *            a main gradient) or bf16; an expert of 0 rows gets dw[e] = 0
 *
 * counts [experts] int32 is read on the device (no host synchronisation:
 * capturable in a CUDA graph); experts may have 0 rows; rows past the
 * counts' sum are not written (nor rows past `tokens`, should the counts
 * overrun it). n, k multiples of 16. sm_90a only.
 *
 * Strategy: the FP8 GEMM emitter (fp8_gemm_emit.h) on persistent CTAs; each
 * CTA scans the counts once into shared memory (each expert's first row
 * and first tile), then takes tiles blockIdx.x, + gridDim.x, ...: a tile
 * finds its expert by a binary search of the tile starts; an expert's tiles
 * run row-major (its m-tiles sweep the n-tiles, so its weight stays in L2).
 * A tile's rows past its expert's segment are loaded (TMA reads the next
 * expert's rows, or zeros) but neither scaled nor stored. The wgrad's
 * tiles are static (experts x n/bm x k/bn, expert-major); its operands'
 * rows are count_e bytes apart, which no tensor map given at launch
 * holds: a first entry patches two maps an expert (dyt's and xt's blocks)
 * into the workspace, and the producer loads by TMA through its expert's
 * where count_e is a multiple of 16, else by byte loads into the swizzled
 * layout, zeros past the expert's tokens. Why count_e: a block's base
 * (element start_e n, start_e k; n and k multiples of 16) is 16-byte
 * aligned at any counts, but its rows are count_e bytes apart, and that
 * pitch is the map's global stride, which TMA takes only in multiples of
 * 16 bytes (cuTensorMapEncodeTiled; CUDA programming guide, TMA alignment
 * table). TMA's box may start at any coordinate, negative or unaligned,
 * zeros outside the map (PTX ISA 5.5.3.1, 5.5.3.3), which serves a [k,
 * tokens] copy (rows the tokens apart, an expert's columns from start_e)
 * but cannot fix a pitch: TMA at any counts needs the quantisers to write
 * each expert's block with rows round_up(count_e, 16) apart (zeros past
 * count_e), or one [k, round_up(tokens, 128)] copy (LG_QT_PITCH, the dense
 * quantisers' layout).
 */
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "family.h"

#include "fp8_gemm_common.h"
#include "wgmma_pipe.h"

enum { K_N, K_K, K_E, K_ACC, K_TILE, K_TM, K_TN, K_STAGES, K_TC, K_TA, K_TE, K_TO, K_TF, K_TP, NKEYS };

static const int64_t tm_ok[] = {64, 128, 0};
static const char *const acc_words[2] = {"set", "acc"};
#define EXPERTS_MAX 1024
#define MAPS_THREADS 256 /* the wgrad's map-patching entry */
static const struct lg_key keys[NKEYS] = {
	[K_N] = LG_KEY_DIM("n", "n", 16, 1 << 20, 16, "output features: rows of each w[e] (a multiple of 16)"),
	[K_K] = {.path = "k", .type = LG_KEY_INT, .flags = LG_KEY_REQUIRED | LG_KEY_SHAPE, .min = 16,
		 .max = 1 << 20, .multiple = 16, .naming = LG_NAME_ALWAYS, .rank = 11, .abbrev = "k",
		 .doc = "input features: columns of x and w[e] (a multiple of 16)"},
	[K_E] = {.path = "experts", .type = LG_KEY_INT, .flags = LG_KEY_REQUIRED | LG_KEY_SHAPE, .min = 1,
		 .max = EXPERTS_MAX, .naming = LG_NAME_ALWAYS, .rank = 12, .abbrev = "e",
		 .doc = "experts: segments of rows, weights w[e]"},
	[K_ACC] = {.path = "accumulate", .type = LG_KEY_BOOL, .has_def = true, .def = 0,
		   .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 20, .words = acc_words,
		   .doc = "wgrad: dw += dy^T . x (an fp32 main gradient) instead of dw ="},
	[K_TILE] = LG_KEY_TILE_OBJ,
	[K_TM] = LG_KEY_TILE("m", "m", 64, 128, tm_ok, "output rows a CTA tile (64 a consumer warpgroup)"),
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
	{"tokens", "M", 0, INT32_MAX, "rows of x and dy: every expert's segment (a capacity)", 0, 0},
};

enum { A_IN, A_IN_S, B_IN, B_IN_S, COUNTS, C_OUT, NARGS, WS = NARGS };
static const struct lg_arg fwd_args[NARGS] = {
	[A_IN] = {"x", LG_ARG_IN, LG_ELEM_E4M3, "tokens, k", 16, "rowwise copy of x, rows by expert"},
	[A_IN_S] = {"x_scale", LG_ARG_IN, LG_ELEM_FP32, "cdiv(k, 128), tokens", 4,
		    "its 1 x 128 scales, per expert a [cdiv(k,128), count] block"},
	[B_IN] = {"w", LG_ARG_IN, LG_ELEM_E4M3, "experts, n, k", 16, "the weights' copies"},
	[B_IN_S] = {"w_scale", LG_ARG_IN, LG_ELEM_FP32, "experts, cdiv(n, 128), cdiv(k, 128)", 4,
		    "their 128 x 128 scales"},
	[COUNTS] = {"counts", LG_ARG_IN, LG_ELEM_I32, "experts", 4, "rows of each expert (device memory)"},
	[C_OUT] = {"y", LG_ARG_OUT, LG_ELEM_DTYPE, "tokens, n", 16, "x . w[e]^T"},
};
static const struct lg_arg dgrad_args[NARGS] = {
	[A_IN] = {"dy", LG_ARG_IN, LG_ELEM_E4M3, "tokens, n", 16, "rowwise copy of dy, rows by expert"},
	[A_IN_S] = {"dy_scale", LG_ARG_IN, LG_ELEM_FP32, "cdiv(n, 128), tokens", 4,
		    "its 1 x 128 scales, per expert a [cdiv(n,128), count] block"},
	[B_IN] = {"wt", LG_ARG_IN, LG_ELEM_E4M3, "experts, k, n", 16, "the weights' transposed copies"},
	[B_IN_S] = {"wt_scale", LG_ARG_IN, LG_ELEM_FP32, "experts, cdiv(k, 128), cdiv(n, 128)", 4,
		    "their 128 x 128 scales"},
	[COUNTS] = {"counts", LG_ARG_IN, LG_ELEM_I32, "experts", 4, "rows of each expert (device memory)"},
	[C_OUT] = {"dx", LG_ARG_OUT, LG_ELEM_DTYPE, "tokens, k", 16, "dy . w[e]"},
};

static const struct lg_arg wgrad_args[NARGS + 1] = {
	[A_IN] = {"dyt", LG_ARG_IN, LG_ELEM_E4M3, "n, tokens", 16,
		  "columnwise copy of dy: per expert a [n, count] block at element start n"},
	[A_IN_S] = {"dyt_scale", LG_ARG_IN, LG_ELEM_FP32, "cdiv(tokens, 128) + experts, n", 4,
		    "its 128 x 1 scales: per expert a [cdiv(count, 128), n] block"},
	[B_IN] = {"xt", LG_ARG_IN, LG_ELEM_E4M3, "k, tokens", 16,
		  "columnwise copy of x: per expert a [k, count] block at element start k"},
	[B_IN_S] = {"xt_scale", LG_ARG_IN, LG_ELEM_FP32, "cdiv(tokens, 128) + experts, k", 4,
		    "its 128 x 1 scales: per expert a [cdiv(count, 128), k] block"},
	[COUNTS] = {"counts", LG_ARG_IN, LG_ELEM_I32, "experts", 4, "rows of each expert (device memory)"},
	[C_OUT] = {"dw", LG_ARG_OUT, LG_ELEM_DTYPE, "experts, n, k", 16, "dy_e^T . x_e (accumulate: added to dw)"},
	[WS] = {"workspace", LG_ARG_WORKSPACE, LG_ELEM_U8, NULL, 16, NULL},
};

static const struct lg_fp8_keys tkeys = {K_TM, K_TN, K_STAGES, K_ACC, K_TC, K_TA, K_TE, K_TO, K_TF, K_TP, K_N, K_K, 0, false, false};

static lg_status validate(const struct lg_spec *s, const char *where)
{
	return lg_fp8_validate(s, where, &tkeys, s->pass == LG_PASS_WGRAD);
}

enum { P_E = P8_OWN, P_CT, P_RT };

/* The pass's GEMM: the wgrad's operands through pointers (manual). */
static struct lg_fp8_gemm gemm_of(const struct lg_spec *s, const struct lg_fp8_tile *tl, const char *cols)
{
	static const char *const tm[LG_PASS_COUNT][3] = {[LG_PASS_FORWARD] = {"&tm_x", "&tm_w", "&tm_y"},
							  [LG_PASS_DGRAD] = {"&tm_dy", "&tm_wt", "&tm_dx"},
							  [LG_PASS_WGRAD] = {"ma", "mb", "&tm_dw"}};
	return lg_fp8_gemm_of(s, &tkeys, tl, tm[s->pass], cols, s->pass == LG_PASS_WGRAD);
}

static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	struct lg_fp8_tile tl;
	/* the counts' scan: gr (i64) and gt (int) of experts + 1 in static shared memory */
	unsigned scan = (unsigned)(lg_spec_int(s, K_E) + 1) * 12u + 16u;
	lg_status st = lg_fp8_plan_tile(s, t, &tkeys, scan, s->pass == LG_PASS_WGRAD, &tl);
	if (st != LG_OK)
		return st;
	int64_t n = lg_spec_int(s, K_N), k = lg_spec_int(s, K_K);
	struct lg_fp8_gemm g = gemm_of(s, &tl, NULL);
	p->v[P8_COLS] = s->pass == LG_PASS_FORWARD ? n : k;
	p->v[P8_ROWS] = s->pass == LG_PASS_WGRAD ? n : -1;
	p->v[P_E] = lg_spec_int(s, K_E);
	p->v[P_CT] = lg_fp8_cdiv(p->v[P8_COLS], (int64_t)tl.bn * tl.cluster);
	p->v[P_RT] = lg_fp8_cdiv(n, tl.bm);
	st = lg_fp8_plan_finish(s, p, &g, &tkeys, A_IN, B_IN, C_OUT);
	if (st != LG_OK || s->pass != LG_PASS_WGRAD)
		return st;
	/* entry 0 patches each expert's two tensor maps, entry 1 is the GEMM */
	p->nentries = 2;
	memcpy(p->entry[1], p->entry[0], sizeof p->entry[0]);
	snprintf(p->entry[0], sizeof p->entry[0], "%s_maps", s->entry);
	p->persistent[1] = true;
	p->per_sm[1] = p->per_sm[0];
	p->cluster[1] = p->cluster[0];
	p->persistent[0] = false;
	p->per_sm[0] = p->cluster[0] = 0;
	return LG_OK;
}

/* The wgrad's: two tensor maps an expert (dyt's block, xt's block). */
static size_t workspace(const struct lg_plan *p)
{
	return p->nentries == 2 ? (size_t)p->v[P_E] * 2 * 128 : 0;
}

/* forward, dgrad: a bound on the tiles (the counts are on the device),
 * the rows' tiles and one partial tile an expert; wgrad: every expert's
 * n x k tiles (an expert of no tokens stores zeros). */
static void geometry(const struct lg_plan *p, int e, const int64_t *sz, struct lg_launch_dim *d)
{
	if (e + 1 < p->nentries) { /* the wgrad's maps: one CTA */
		*d = (struct lg_launch_dim){{1, 1, 1}, {MAPS_THREADS, 1, 1}, 0};
		return;
	}
	if (p->v[P8_ROWS] >= 0) {
		lg_fp8_geometry(p, p->v[P_E] * p->v[P_RT] * p->v[P_CT], d);
		return;
	}
	int64_t tiles = (lg_fp8_cdiv(sz[0], p->v[P8_BM]) + p->v[P_E]) * p->v[P_CT];
	lg_fp8_geometry(p, sz[0] > 0 ? tiles : 0, d);
}

/* ------------------------------------------------------------ emission */

struct grouped {
	int64_t experts, ct, rt, red, cols, n;
	int bm, bn, cl;
	bool wgrad;
};

/* Each expert's first row gr[e] and (tiles) first tile gt[e] (wgrad:
 * first 128-token scale block), from counts, into shared memory. */
static void emit_scan(lg_buf *b, const struct grouped *g, bool tiles)
{
	long long e = (long long)g->experts;
	if (!tiles)
		lg_comment(b, "Expert e's first row gr[e], one scan.");
	else if (g->wgrad)
		lg_comment(b, "Expert e's first row gr[e] and first 128-token scale block gt[e], one scan.");
	else
		lg_comment(b, "Expert e's first row gr[e] and first tile gt[e] (gt[%lld]: the tiles), one scan.", e);
	lg_line(b, "__shared__ i64 gr[%lld];", e + 1);
	if (tiles)
		lg_line(b, "__shared__ int gt[%lld];", e + 1);
	lg_open(b, "if (threadIdx.x == 0) {");
	lg_line(b, "i64 r = 0;");
	if (tiles)
		lg_line(b, "int t = 0;");
	lg_open(b, "for (int e = 0; e < %lld; e++) {", e);
	lg_line(b, "gr[e] = r;");
	if (tiles)
		lg_line(b, "gt[e] = t;");
	lg_line(b, "const i64 c = ((const int *)counts)[e];");
	lg_line(b, "const i64 n = c < 0 ? 0 : r + c > M ? M - r : c; // no rows past M");
	lg_line(b, "r += n;");
	if (tiles && g->wgrad)
		lg_line(b, "t += (int)((n + 127) / 128);");
	else if (tiles)
		lg_line(b, "t += (int)((n + %d) / %d) * %lld;", g->bm - 1, g->bm, (long long)g->ct);
	lg_close(b);
	lg_line(b, "gr[%lld] = r;", e);
	if (tiles)
		lg_line(b, "gt[%lld] = t;", e);
	lg_close(b);
	lg_line(b, "__syncthreads();");
}

static void grouped_setup(lg_buf *b, void *ctx)
{
	const struct grouped *g = ctx;
	emit_scan(b, g, true);
	if (g->wgrad)
		lg_line(b, "const i64 tiles = %lldll;", (long long)(g->experts * g->rt * g->ct));
	else
		lg_line(b, "const i64 tiles = gt[%lld];", (long long)g->experts);
}

/* The wgrad's first entry: expert e's tensor maps of its [n, count] block
 * of dyt and [k, count] block of xt (rows count bytes apart), patched from
 * the launch's templates into workspace maps 2 e, 2 e + 1, where count is
 * a multiple of 16 (the pitch, TMA's global stride, must be: the header);
 * the GEMM copies the other experts' stages byte by byte. */
static void emit_maps(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p, const struct grouped *g)
{
	lg_section(b, p->entry[0], "each expert's tensor maps of its blocks of dyt and xt");
	lg_emit_signature_tmaps(b, s, p, p->entry[0], "__launch_bounds__(%d)", MAPS_THREADS);
	lg_open(b, "{");
	emit_scan(b, g, false);
	lg_open(b, "for (int e = threadIdx.x; e < %lld; e += %d) {", (long long)g->experts, MAPS_THREADS);
	lg_line(b, "const i64 seg0 = gr[e], segn = gr[e + 1] - seg0;");
	lg_line(b, "if (segn == 0 || (segn & 15) != 0) continue;");
	lg_line(b, "lg_tmap *const m = (lg_tmap *)ws + 2 * e;");
	lg_line(b, "lg_tmap_patch(m, &tm_dyt, (const u8 *)dyt + seg0 * %lld, (u32)segn, %lldu);", (long long)g->n,
		(long long)g->n);
	lg_line(b, "lg_tmap_patch(m + 1, &tm_xt, (const u8 *)xt + seg0 * %lld, (u32)segn, %lldu);", (long long)g->cols,
		(long long)g->cols);
	lg_close(b);
	lg_line(b, "lg_tmap_release();");
	lg_close(b);
}

/* Tile `tile`: its expert (binary search of gt), rows, columns. */
static void grouped_tile(lg_buf *b, void *ctx, bool producer)
{
	const struct grouped *g = ctx;
	lg_comment(b, "the last expert whose first tile is <= tile");
	lg_line(b, "int lo = 0, hi = %lld;", (long long)g->experts);
	lg_open(b, "while (hi - lo > 1) {");
	lg_line(b, "const int mid = (lo + hi) >> 1;");
	lg_line(b, "if (gt[mid] <= tile) lo = mid; else hi = mid;");
	lg_close(b);
	lg_line(b, "const int ex = lo, lt = (int)(tile - gt[ex]);");
	lg_line(b, "const i64 seg0 = gr[ex];");
	lg_line(b, "const int ta = (int)(seg0 + (i64)(lt / %lld) * %d), nkt = %lld;", (long long)g->ct, g->bm,
		(long long)lg_fp8_cdiv(g->red, 128));
	char lt[32], col[96];
	snprintf(lt, sizeof lt, "lt %% %lld", (long long)g->ct);
	lg_wgp_col(col, sizeof col, lt, g->bn, g->cl);
	if (producer) {
		lg_line(b, "const int tb = (int)(ex * %lldll + %s);", (long long)g->cols, col);
		return;
	}
	lg_line(b, "const i64 segn = gr[ex + 1] - seg0, rend = seg0 + segn;");
	lg_line(b, "const i64 oc = %s;", col);
}

/* wgrad tile `tile` (expert-major): expert ex's output rows ex n + ta..
 * (rows of dy's copy), columns oc.. (rows of x's), over its tokens. */
static void wgrad_operands(lg_buf *b, const struct grouped *g);

/* The stages of wgrad tile t (its expert's 128-token blocks): the other
 * tile's, for tile.pingpong (the forward's and dgrad's are all nkt). */
static void wgrad_count(lg_buf *b, void *ctx, const char *t, const char *name)
{
	const struct grouped *g = ctx;
	long long per = (long long)(g->rt * g->ct);
	lg_line(b, "const int %s = (int)((gr[%s / %lld + 1] - gr[%s / %lld] + 127) / 128);", name, t, per, t, per);
}

static void wgrad_tile(lg_buf *b, void *ctx, bool producer)
{
	const struct grouped *g = ctx;
	long long n = (long long)g->n, per = (long long)(g->rt * g->ct);
	lg_line(b, "const int ex = (int)(tile / %lld), lt = (int)(tile %% %lld);", per, per);
	lg_line(b, "const i64 seg0 = gr[ex], segn = gr[ex + 1] - seg0;");
	lg_line(b, "const i64 er = (i64)ex * %lld;", n);
	lg_line(b, "const int ta = (int)(er + lt / %lld * %d);", (long long)g->ct, g->bm);
	lg_line(b, "const int nkt = (int)((segn + 127) / 128);");
	lg_line(b, "const i64 oc = (i64)(lt %% %lld) * %d, rend = er + %lld;", (long long)g->ct, g->bn, n);
	if (producer)
		wgrad_operands(b, g);
}

/* The wgrad producer's operands: expert ex's [n, segn] block of dy's copy
 * from row ta - er and [k, segn] block of x's from row oc. */
static void wgrad_operands(lg_buf *b, const struct grouped *g)
{
	long long n = (long long)g->n, k = (long long)g->cols;
	lg_line(b, "const i64 ra = ta - er; // the tile's first row of dy's block");
	lg_line(b, "const u8 *const ga = (const u8 *)dyt + seg0 * %lld + ra * segn;", n);
	lg_line(b, "const u8 *const gb = (const u8 *)xt + seg0 * %lld + oc * segn;", k);
	lg_line(b, "const i64 lda = segn, ldb = segn, rlen = segn;");
	lg_line(b, "const int na = (int)(rend - ta), nb = (int)(%lld - oc);", k);
	lg_line(b, "const bool al = (segn & 15) == 0; // its maps patched: TMA");
	lg_line(b, "const lg_tmap *const ma = (const lg_tmap *)ws + 2 * ex;");
	lg_line(b, "const lg_tmap *const mb = ma + 1;");
	lg_line(b, "const int ya = (int)ra, yb = (int)oc;");
}

static void emit_scale_macros(lg_buf *b, enum lg_pass pass, const struct grouped *g)
{
	int64_t rb = lg_fp8_cdiv(g->red, 128), cb = lg_fp8_cdiv(g->cols, 128);
	if (pass == LG_PASS_WGRAD) {
		lg_comment(b, "scales: per expert [cdiv(count, 128), n] and [.., k] blocks from row gt[ex]");
		lg_line(b, "#define LG_SA(kb, r) (((const float *)dyt_scale)[(gt[ex] + (kb)) * %lldll + (r) - er])",
			(long long)g->n);
		lg_line(b, "#define LG_SB(kb, c) (((const float *)xt_scale)[(gt[ex] + (kb)) * %lldll + (c)])",
			(long long)g->cols);
		return;
	}
	bool fwd = pass == LG_PASS_FORWARD;
	lg_comment(b, "scales: A's per expert a [%lld, segn] block at element seg0 %lld; B's tiles of w[ex]", (long long)rb,
		   (long long)rb);
	lg_line(b, "#define LG_SA(kb, r) \\\n\t(((const float *)%s)[seg0 * %lld + (i64)(kb) * segn + (r) - seg0])",
		fwd ? "x_scale" : "dy_scale", (long long)rb);
	lg_line(b, "#define LG_SB(kb, c) (((const float *)%s)[((i64)ex * %lld + (c)) * %lld + (kb)])",
		fwd ? "w_scale" : "wt_scale", (long long)cb, (long long)rb);
}

static void emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	(void)t;
	static const char *const what[] = {"y = x . w[e]^T over each expert's rows", "",
					   "dx = dy . w[e] over each expert's rows",
					   "dw[e] = dy_e^T . x_e over each expert's tokens"};
	bool wg = s->pass == LG_PASS_WGRAD;
	struct lg_fp8_tile tl = lg_fp8_planned(p);
	int64_t n = lg_spec_int(s, K_N), k = lg_spec_int(s, K_K);
	struct grouped gs = {p->v[P_E], p->v[P_CT], p->v[P_RT], s->pass == LG_PASS_FORWARD ? k : n,
			     p->v[P8_COLS], n, tl.bm, tl.bn, tl.cluster, wg};
	char cols[24], store[64];
	snprintf(cols, sizeof cols, "%lldll", (long long)gs.cols);
	struct lg_fp8_gemm g = gemm_of(s, &tl, cols);
	const struct lg_arg *a = lg_family_get(s->op)->sig[s->pass].args;
	lg_section(b, "helpers for this spec", NULL);
	lg_fp8_gemm_emit_helpers(b, &g, "fp8");
	lg_fp8_emit_store(b, s->dtype == LG_DTYPE_FP32, lg_spec_int(s, K_ACC) != 0, gs.cols);
	if (wg)
		emit_maps(b, s, p, &gs);
	lg_fp8_emit_head(b, s, p, what[s->pass], &g);
	emit_scale_macros(b, s->pass, &gs);
	snprintf(store, sizeof store, "lg_st_out((u8 *)%s, ", a[C_OUT].name);
	struct lg_fp8_sched sc = {&gs, grouped_setup, wg ? wgrad_tile : grouped_tile, wg ? wgrad_count : NULL};
	lg_fp8_gemm_emit_body(b, &g, &sc, "fp8", store);
	lg_close(b);
}

static int candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max)
{
	return lg_fp8_candidates(s, t, out, max, &tkeys);
}

static const char doc_fwd[] =
	"Grouped blockwise FP8 GEMM forward (op \"fp8_grouped_gemm\", sm_90a): y [tokens,\n"
	"  n] = x . w[e]^T over expert e's rows (counts [experts] int32 on the device), from\n"
	"  x's per-expert rowwise copy and w [experts, n, k]'s 128 x 128 tiles.";
static const char doc_dgrad[] =
	"Grouped blockwise FP8 GEMM dgrad (op \"fp8_grouped_gemm\", sm_90a): dx [tokens, k]\n"
	"  = dy . w[e] over expert e's rows, from dy's per-expert rowwise copy and the\n"
	"  weights' transposed copies wt [experts, k, n].";
static const char doc_wgrad[] =
	"Grouped blockwise FP8 GEMM wgrad (op \"fp8_grouped_gemm\", sm_90a): dw [experts,\n"
	"  n, k] (=, or += with accumulate) dy_e^T . x_e over expert e's tokens, from the\n"
	"  per-expert columnwise copies of dy (dyt) and x (xt) as fp8_quant_batched,\n"
	"  moe_permute_quant and batch_swiglu_quant write them.";

const struct lg_family lg_family_fp8_grouped_gemm = {
	.op = "fp8_grouped_gemm",
	.summary = "grouped blockwise FP8 GEMM over per-expert row segments: forward, dgrad, wgrad (sm_90a)",
	.passes = 1u << LG_PASS_FORWARD | 1u << LG_PASS_DGRAD | 1u << LG_PASS_WGRAD,
	.dtypes = 1u << LG_DTYPE_BF16 | 1u << LG_DTYPE_FP32,
	.nkeys = NKEYS,
	.keys = keys,
	.sig = {[LG_PASS_FORWARD] = {1, sizes, NARGS, fwd_args, doc_fwd},
		[LG_PASS_DGRAD] = {1, sizes, NARGS, dgrad_args, doc_dgrad},
		[LG_PASS_WGRAD] = {1, sizes, NARGS + 1, wgrad_args, doc_wgrad}},
	.validate = validate,
	.plan = plan,
	.emit = emit,
	.geometry = geometry,
	.workspace = workspace,
	.candidates = candidates,
	.target_only = "sm_90a",
};
