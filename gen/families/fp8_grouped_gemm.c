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
 * expert's rows, or zeros) but neither scaled nor stored.
 */
#include <stdio.h>

#include "error.h"
#include "family.h"

#include "fp8_gemm_common.h"

enum { K_N, K_K, K_E, K_TILE, K_TM, K_TN, K_STAGES, NKEYS };

static const int64_t tm_ok[] = {64, 128, 0};
#define EXPERTS_MAX 1024
static const struct lg_key keys[NKEYS] = {
	[K_N] = LG_KEY_DIM("n", "n", 16, 1 << 20, 16, "output features: rows of each w[e] (a multiple of 16)"),
	[K_K] = {.path = "k", .type = LG_KEY_INT, .flags = LG_KEY_REQUIRED | LG_KEY_SHAPE, .min = 16,
		 .max = 1 << 20, .multiple = 16, .naming = LG_NAME_ALWAYS, .rank = 11, .abbrev = "k",
		 .doc = "input features: columns of x and w[e] (a multiple of 16)"},
	[K_E] = {.path = "experts", .type = LG_KEY_INT, .flags = LG_KEY_REQUIRED | LG_KEY_SHAPE, .min = 1,
		 .max = EXPERTS_MAX, .naming = LG_NAME_ALWAYS, .rank = 12, .abbrev = "e",
		 .doc = "experts: segments of rows, weights w[e]"},
	[K_TILE] = LG_KEY_TILE_OBJ,
	[K_TM] = LG_KEY_TILE("m", "m", 64, 128, tm_ok, "output rows a CTA tile (64 a consumer warpgroup)"),
	[K_TN] = LG_KEY_TILE("n", "n", 16, 256, NULL, "output columns a CTA tile (a multiple of 16)"),
	[K_STAGES] = LG_KEY_TILE("stages", "s", 2, 8, NULL, "128-element reduction blocks in flight"),
};

static const struct lg_size sizes[] = {
	{"tokens", "M", 0, INT32_MAX, "rows of x and dy: every expert's segment (a capacity)", 0},
};

enum { A_IN, A_IN_S, B_IN, B_IN_S, COUNTS, C_OUT, NARGS };
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

static const struct lg_fp8_keys tkeys = {K_TM, K_TN, K_STAGES, -1};

static lg_status validate(const struct lg_spec *s, const char *where)
{
	return lg_fp8_validate(s, where, &tkeys);
}

enum { P_E = P8_OWN, P_CT };

static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	struct lg_fp8_tile tl;
	/* the counts' scan: gr (i64) and gt (int) of experts + 1 in static shared memory */
	unsigned scan = (unsigned)(lg_spec_int(s, K_E) + 1) * 12u + 16u;
	lg_status st = lg_fp8_plan_tile(s, t, &tkeys, scan, &tl);
	if (st != LG_OK)
		return st;
	bool fwd = s->pass == LG_PASS_FORWARD;
	int64_t cols = fwd ? lg_spec_int(s, K_N) : lg_spec_int(s, K_K);
	struct lg_fp8_gemm g = {tl.bm, tl.bn, tl.stages, fwd ? "tm_x" : "tm_dy", fwd ? "tm_w" : "tm_wt", false,
				NULL, NULL};
	p->v[P8_COLS] = cols;
	p->v[P_E] = lg_spec_int(s, K_E);
	p->v[P_CT] = lg_fp8_cdiv(cols, tl.bn);
	return lg_fp8_plan_finish(s, p, &g, &tkeys, A_IN, B_IN);
}

/* A bound on the tiles (the counts are on the device): the rows' tiles
 * and one partial tile an expert. */
static void geometry(const struct lg_plan *p, int e, const int64_t *sz, struct lg_launch_dim *d)
{
	(void)e;
	int64_t tiles = (lg_fp8_cdiv(sz[0], p->v[P8_BM]) + p->v[P_E]) * p->v[P_CT];
	lg_fp8_geometry(p, sz[0] > 0 ? tiles : 0, d);
}

/* ------------------------------------------------------------ emission */

struct grouped {
	int64_t experts, ct, red, cols;
	int bm, bn;
};

/* Each expert's first row and first tile, from counts, into shared memory. */
static void grouped_setup(lg_buf *b, void *ctx)
{
	const struct grouped *g = ctx;
	lg_comment(b, "Expert e's first row gr[e] and first tile gt[e] (gt[%lld]: the tiles), one scan.",
		   (long long)g->experts);
	lg_line(b, "__shared__ i64 gr[%lld];", (long long)g->experts + 1);
	lg_line(b, "__shared__ int gt[%lld];", (long long)g->experts + 1);
	lg_open(b, "if (threadIdx.x == 0) {");
	lg_line(b, "i64 r = 0;");
	lg_line(b, "int t = 0;");
	lg_open(b, "for (int e = 0; e < %lld; e++) {", (long long)g->experts);
	lg_line(b, "gr[e] = r;");
	lg_line(b, "gt[e] = t;");
	lg_line(b, "const i64 c = ((const int *)counts)[e];");
	lg_line(b, "const i64 n = c < 0 ? 0 : r + c > M ? M - r : c; // no rows past M");
	lg_line(b, "r += n;");
	lg_line(b, "t += (int)((n + %d) / %d) * %lld;", g->bm - 1, g->bm, (long long)g->ct);
	lg_close(b);
	lg_line(b, "gr[%lld] = r;", (long long)g->experts);
	lg_line(b, "gt[%lld] = t;", (long long)g->experts);
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_line(b, "const i64 tiles = gt[%lld];", (long long)g->experts);
}

/* Tile `tile`: its expert (binary search of gt), rows, columns. */
static void grouped_tile(lg_buf *b, void *ctx)
{
	const struct grouped *g = ctx;
	lg_line(b, "int lo = 0, hi = %lld; // the last expert whose first tile is <= tile", (long long)g->experts);
	lg_open(b, "while (hi - lo > 1) {");
	lg_line(b, "const int mid = (lo + hi) >> 1;");
	lg_line(b, "if (gt[mid] <= tile) lo = mid; else hi = mid;");
	lg_close(b);
	lg_line(b, "const int ex = lo, lt = (int)(tile - gt[ex]);");
	lg_line(b, "const i64 seg0 = gr[ex], segn = gr[ex + 1] - seg0;");
	lg_line(b, "(void)segn;");
	lg_line(b, "const int ta = (int)(seg0 + (i64)(lt / %lld) * %d);", (long long)g->ct, g->bm);
	lg_line(b, "const i64 oc = (i64)(lt %% %lld) * %d;", (long long)g->ct, g->bn);
	lg_line(b, "const int tb = (int)(ex * %lldll + oc);", (long long)g->cols);
	lg_line(b, "const int rb = 0, nkt = %lld;", (long long)lg_fp8_cdiv(g->red, 128));
	lg_line(b, "const i64 rend = seg0 + segn;");
}

static void emit_scale_macros(lg_buf *b, bool fwd, const struct grouped *g)
{
	int64_t rb = lg_fp8_cdiv(g->red, 128), cb = lg_fp8_cdiv(g->cols, 128);
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
	bool fwd = s->pass == LG_PASS_FORWARD;
	struct lg_fp8_tile tl = lg_fp8_planned(p);
	int64_t n = lg_spec_int(s, K_N), k = lg_spec_int(s, K_K);
	struct grouped gs = {p->v[P_E], p->v[P_CT], fwd ? k : n, fwd ? n : k, tl.bm, tl.bn};
	char cols[24], store[64];
	snprintf(cols, sizeof cols, "%lldll", (long long)gs.cols);
	struct lg_fp8_gemm g = {tl.bm, tl.bn, tl.stages, fwd ? "tm_x" : "tm_dy", fwd ? "tm_w" : "tm_wt", false,
				cols, NULL};
	lg_section(b, "helpers for this spec", NULL);
	lg_fp8_gemm_emit_helpers(b, &g, "fp8");
	lg_fp8_emit_store(b, s->dtype == LG_DTYPE_FP32, false, gs.cols);
	lg_fp8_emit_head(b, s, p, fwd ? "y = x . w[e]^T over each expert's rows" : "dx = dy . w[e] over each expert's rows",
			 &g);
	emit_scale_macros(b, fwd, &gs);
	lg_line(b, "(void)%s;", fwd ? "x" : "dy");
	lg_line(b, "(void)%s;", fwd ? "w" : "wt");
	snprintf(store, sizeof store, "lg_st_out((u8 *)%s, ", fwd ? "y" : "dx");
	struct lg_fp8_sched sc = {&gs, grouped_setup, grouped_tile};
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

const struct lg_family lg_family_fp8_grouped_gemm = {
	.op = "fp8_grouped_gemm",
	.summary = "grouped blockwise FP8 GEMM over per-expert row segments: forward, dgrad (sm_90a)",
	.passes = 1u << LG_PASS_FORWARD | 1u << LG_PASS_DGRAD,
	.dtypes = 1u << LG_DTYPE_BF16 | 1u << LG_DTYPE_FP32,
	.nkeys = NKEYS,
	.keys = keys,
	.sig = {[LG_PASS_FORWARD] = {1, sizes, NARGS, fwd_args, doc_fwd},
		[LG_PASS_DGRAD] = {1, sizes, NARGS, dgrad_args, doc_dgrad}},
	.validate = validate,
	.plan = plan,
	.emit = emit,
	.geometry = geometry,
	.candidates = candidates,
	.target_only = "sm_90a",
};
