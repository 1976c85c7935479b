/*
 * router_gemm.c - family "router_gemm" (docs/kernels.md K3): the MoE router's
 * GEMM with fp32 logits.
 *
 *   forward   logits fp32 [M, N] = x bf16 [M, K] . w bf16 [N, K]^T
 *   backward  dx bf16 [M, K] = dy fp32 [M, N] . w
 *             dw fp32 [N, K] = dy^T . x   (deterministic)
 *
 * M (tokens) is a run-time size; N (experts) and K (hidden) are static.
 * Any M and N; K a multiple of 8 (rows of x and w are read in 16-byte
 * pieces). linghe needs M % 32, K % 128, N % 16.
 *
 * Strategy, sm_90a forward: the wgmma + TMA path of gemm_emit.c. The plan
 * declares tensor maps of x and w (boxes of 64 hidden x tile rows, 128-byte
 * swizzle; runtime/launch.c encodes them); a CTA of two consumer
 * warpgroups and a producer warpgroup computes a 128x128 tile of logits
 * (128 CTAs at the target for 132 SMs: 128x256 would give 64), up to 7
 * stages of 32 KB in flight, fp32 accumulators in registers stored
 * predicated; 128x256 when that still gives two waves at 8192 tokens (a
 * large GEMM). tile.cluster 2 shares w's tile between two CTAs by TMA
 * multicast (correct, but measured twice as slow on the H200: opt-in).
 * H200: 21.5 us at the target (was 40.5 on the path below), 672 TFLOP/s on
 * 8192^3 against cuBLAS's 685 (git history, commit 8b8e268: bench/h200-2026-12-01-wgmma).
 *
 * Strategy, the forward on other targets: one tensor-core GEMM of
 * gemm_emit.c (ldmatrix, mma.sync m16n8k16 bf16 -> fp32, a cp.async ring
 * of `tile.stages` reduction tiles, predicated tails), both operands
 * K-major, one CTA a tile.m x tile.n tile of logits (w stays in L2).
 *
 * Strategy, sm_90a backward (experts a multiple of 4: dy's rows, 16-byte
 * multiples, are read by TMA): two wgmma + TMA GEMMs of gemm_emit.c, each
 * its own kernel and tile, a producer warpgroup and 64-row consumer
 * warpgroups. dy comes through the ring as fp32 boxes of 64 x 64 (no
 * swizzle); each consumer warpgroup splits its box into `precision` bf16
 * planes in the 128-byte swizzled layout wgmma reads (two plane buffers:
 * the split of tile kt overlaps the wgmma group of tile kt - 1) and issues
 * one wgmma a plane into the same fp32 accumulators (bf16: dy rounded;
 * bf16x2: 16 significant bits, error 2^-17 of dy, far below tf32's 2^-11;
 * bf16x3: dy exact, only fp32 summation error; tf32: dy rounded to tf32,
 * in 2 planes; products of bf16 are exact). w and x are MN-major (output-contiguous) operands: boxes of 64
 * outputs x 64 reduction rows, read transposed (imm-trans-b 1).
 *   _dx    dx = dy . w: A = dy (K-major over the experts), B = w [N][K]
 *          (N-major); tile.dx_*: 128 tokens x 256 features, tile.k 64 (4
 *          reduction tiles at 256 experts), the stages that fit (3 at
 *          bf16, 2 at bf16x3): 512 CTAs at the target, one an SM. H200:
 *          47.8 us (ncu), latency-bound: with 4 reduction tiles a CTA its
 *          prologue (barriers, the first TMA loads) and epilogue (64 KB of
 *          dx stored from registers) overlap nothing. tile.dx_persistent 1
 *          (opt-in: 73.3 us in all against 75.8 on the H200): one CTA an
 *          SM (grid: what is co-resident, 132 at the target) loops over the tiles, its
 *          producer's stage count running on across them, so that it loads
 *          the next tile's stages while the consumers store this one and
 *          one prologue serves ~4 tiles.
 *   _dw    dw = dy^T . x: A = dy (M-major: experts contiguous), B = x
 *          [M][K] (N-major), reduction over a token slice: tile.* 128
 *          experts (64 up to 64) x 128 features x tile.split slices
 *          (132 / tiles: 32 x 4 = 128 CTAs at the target); launched early
 *          as below.
 * Other experts (1, 7: dy rows not 16-byte multiples) take the mma.sync
 * backward below on sm_90a too.
 *
 * Strategy, backward on the other targets: two mma.sync GEMMs of
 * gemm_emit.c, each its own kernel and tile. dy is fp32: its tiles come
 * through the cp.async ring as they are, and the CTA splits each once into
 * `precision` bf16 planes in shared memory, one tile ahead of the mma
 * (gemm_emit's convert); every term is an mma with the same bf16 fragment
 * of w or x, its fragments by ldmatrix. (Splitting at
 * fragment time instead, every warp again, took ~10 instructions an mma:
 * 147 us at the target, issue-bound at one CTA an SM.) Entry points:
 *   _dx    dx = dy . w: A = dy [M][N] (K-major), B = w [N][K] (MN-major,
 *          ldmatrix .trans), reduction over the experts; tile.dx_*: 128
 *          tokens x 256 features, 16 warps (L2 reads at the target: dy
 *          8 times, 64 MB, and w 64 times, 64 MB),
 *          __launch_bounds__ asking 16 warps an SM (two CTAs of 8 warps
 *          when shared memory allows).
 *   _dw    dw = dy^T . x: A = dy (MN-major), B = x [M][K] (MN-major),
 *          reduction over a slice of the tokens: tile.* (128 x 128) x
 *          tile.split slices (enough CTAs for 132 SMs), each writing its
 *          partial [N][K] to the workspace (tile.split 1: straight to dw).
 *          On sm_90+ launched early (programmatic dependent launch): its
 *          CTAs take the SMs dx's last wave leaves; it completes only
 *          after dx (griddepcontrol.wait at its end).
 *   _dwsum dw = the partials added in slice order (split > 1): fixed
 *          order, so dw is the same bits on every run (both paths).
 * On sm_86 and sm_89 (99 KB of shared memory a CTA) the default dx and dw
 * tiles do not fit at 3 stages with dy's planes (112-120 KB): a tile the
 * spec does not size is halved (rows or columns, whichever needs less)
 * until it fits (fit; e.g. dx 64 x 256 at bf16).
 * Bounds at the target (8192 tokens): 8.6 GFLOP a GEMM a term, ~41 MB
 * (dx) and ~40 MB (dw) of DRAM traffic; from L2, dx reads dy (fp32) once a
 * column tile (8 times: 64 MB) and w once a row block (64 MB), dw dy once
 * a feature tile (16 times at tile.n 128: 128 MB; 8 at 256) and x once an
 * expert tile (2 times: 64 MB). mma.sync (sm_80..sm_90): its rate
 * (about 2/3 of wgmma's) and latency at 12-24% occupancy bound it (H200:
 * 122 us for both, 108 tuned). sm_90a (wgmma): at the forward's ~650
 * TFLOP/s a term is ~13 us a GEMM; H200 (git history, commit 8b8e268: bench/h200-2026-12-01d, bf16):
 * 78.7 us in all, _dx 47.8, _dw 29.2, _dwsum 4.6 (ncu): dx's 4 reduction
 * tiles a CTA make its prologue and epilogue (64 KB of dx a CTA) weigh
 * (tile.dx_persistent above); dw, whose top stall is the split's shared
 * memory reads (issue active 19%), adds 8 MB of partials (4 slices) and
 * _dwsum: tile.n 256 halves dy's reads and splits a FLOP (16 tiles x 8
 * slices), for 16 MB of partials. Shared memory: bf16x3's three
 * plane buffers beside the fp32 ring make it the tightest (fewer stages).
 * dw's accuracy: a tensor-core sum over a whole token slice (all 8192
 * tokens at hidden 7168, where split is 1) truncates up to half an ulp a
 * k16 step; the reference's bound for dw grows with the tokens and terms
 * (router_gemm_ref.c). H200: 4e-5 of dw's rms at hidden 7168, bf16x2.
 * Precision (spec key `precision`; the largest error over the rms against
 * dx, dw of the fp32 dy, measured on the reference by
 * test_router_gemm_ref's test_precision_errors: 512 tokens, hidden 256,
 * 64 experts): dw bf16 7.0e-3, bf16x2 1.0e-5, bf16x3 1.7e-7 (dw's own fp32
 * rounding), tf32 8.6e-4. dx 1.5e-2 at every precision (its bf16 output
 * rounding), 1.8e-2 at bf16. `tf32` is linghe's (tl.dot's default on fp32
 * operands): dy rounded to tf32 (cvt.rna), which 2 bf16 terms hold
 * exactly, so it runs as bf16x2 does (lg_split_tf32) with tf32's products,
 * for results that match linghe's; bf16x2 costs the same and is 80 times
 * closer. (Real tf32 mma would cost as much, tf32 running at half bf16's
 * rate, and wgmma takes tf32 only K-major: w and x are MN-major here.)
 * bf16x3 is exact dy: what the 3xtf32 asks, and more.
 * A null dx or dw skips that output (its kernels return at once).
 */
#include <stdio.h>

#include "router_gemm.h"

#include "error.h"
#include "gemm_emit.h"

static const char *const precision_names[] = {"bf16", "bf16x2", "bf16x3", "tf32"};
enum { PREC_TF32 = 3 }; /* dy rounded to tf32 (linghe's), as 2 bf16 terms */
static const int64_t tmn_ok[] = {32, 64, 128, 256, 0};
static const int64_t tk_ok[] = {32, 64, 0};
static const int64_t warps_ok[] = {1, 2, 4, 8, 0};
static const int64_t cluster_ok[] = {1, 2, 0};
static const struct lg_key keys[NKEYS] = {
	[K_HIDDEN] = LG_KEY_DIM("hidden", "h", 8, 1 << 20, 8, "K: features of x and w (a multiple of 8)"),
	[K_EXPERTS] = {.path = "experts", .type = LG_KEY_INT, .flags = LG_KEY_REQUIRED | LG_KEY_SHAPE, .min = 1,
		       .max = 1 << 16, .naming = LG_NAME_ALWAYS, .rank = 11, .abbrev = "e",
		       .doc = "N: experts, rows of w, columns of the logits"},
	[K_PRECISION] = {.path = "precision", .type = LG_KEY_ENUM, .values = precision_names, .nvalues = 4,
			 .has_def = true, .def = 0, .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 20,
			 .doc = "backward: dy (fp32) as 1, 2 or 3 bf16 terms on the tensor cores "
				"(bf16x3: dy exact), or tf32: dy rounded to tf32 as linghe's tl.dot, in 2 terms "
				"(the forward is exact in any case)"},
	[K_TILE] = LG_KEY_TILE_OBJ,
	[K_TM] = LG_KEY_TILE("m", "m", 32, 256, tmn_ok, "output rows a CTA (tokens; experts for dw)"),
	[K_TN] = LG_KEY_TILE("n", "n", 32, 256, tmn_ok, "output columns a CTA (experts; hidden for dx, dw)"),
	[K_TK] = LG_KEY_TILE("k", "k", 32, 64, tk_ok, "reduction step a pipeline stage"),
	[K_STAGES] = LG_KEY_TILE("stages", "s", 2, 8, NULL, "reduction tiles in flight (cp.async ring)"),
	[K_WM] = LG_KEY_TILE("warps_m", "wm", 1, 8, warps_ok, "warps along the tile's rows"),
	[K_WN] = LG_KEY_TILE("warps_n", "wn", 1, 8, warps_ok, "warps along the tile's columns"),
	[K_SPLIT] = LG_KEY_TILE("split", "z", 1, 32, NULL,
				"backward: token slices of dw, added in order by a second kernel"),
	[K_CLUSTER] = LG_KEY_TILE("cluster", "cl", 1, 2, cluster_ok,
				  "sm_90a forward: CTAs a cluster along the tokens sharing w's tile (TMA multicast)"),
	[K_XM] = LG_KEY_TILE("dx_m", "xm", 32, 256, tmn_ok, "backward: tokens a dx CTA (the tile.* keys: dw's)"),
	[K_XN] = LG_KEY_TILE("dx_n", "xn", 32, 256, tmn_ok, "backward: hidden features a dx CTA"),
	[K_XK] = LG_KEY_TILE("dx_k", "xk", 32, 64, tk_ok, "backward: experts a dx pipeline stage"),
	[K_XS] = LG_KEY_TILE("dx_stages", "xs", 2, 8, NULL, "backward: dx's reduction tiles in flight"),
	[K_XWM] = LG_KEY_TILE("dx_warps_m", "xwm", 1, 8, warps_ok, "backward: dx's warps along the tokens"),
	[K_XWN] = LG_KEY_TILE("dx_warps_n", "xwn", 1, 8, warps_ok, "backward: dx's warps along the hidden features"),
	[K_XP] = LG_KEY_TILE("dx_persistent", "xp", 0, 1, NULL,
			     "sm_90a backward: dx on one CTA an SM looping over its tiles (the next tile's loads "
			     "overlap this one's stores)"),
};

static const struct lg_size sizes[] = {
	{"tokens", "M", 0, INT32_MAX, "rows of x (tokens)", 0, 0},
};

enum { F_X, F_W, F_Y, F_NARGS };
enum { B_DY, B_X, B_W, B_DX, B_DW, B_WS, B_NARGS };

static const struct lg_arg fwd_args[F_NARGS] = {
	[F_X] = {"x", LG_ARG_IN, LG_ELEM_BF16, "tokens, hidden", 16, NULL},
	[F_W] = {"w", LG_ARG_IN, LG_ELEM_BF16, "experts, hidden", 16, NULL},
	[F_Y] = {"logits", LG_ARG_OUT, LG_ELEM_FP32, "tokens, experts", 16, "x . w^T, fp32"},
};

static const struct lg_arg bwd_args[B_NARGS] = {
	[B_DY] = {"dy", LG_ARG_IN, LG_ELEM_FP32, "tokens, experts", 16, "gradient of the logits"},
	[B_X] = {"x", LG_ARG_IN, LG_ELEM_BF16, "tokens, hidden", 16, NULL},
	[B_W] = {"w", LG_ARG_IN, LG_ELEM_BF16, "experts, hidden", 16, NULL},
	[B_DX] = {"dx", LG_ARG_OPT_OUT, LG_ELEM_BF16, "tokens, hidden", 16, "dy . w (0: not computed)"},
	[B_DW] = {"dw", LG_ARG_OPT_OUT, LG_ELEM_FP32, "experts, hidden", 16,
		  "dy^T . x, deterministic (0: not computed)"},
	[B_WS] = {"workspace", LG_ARG_WORKSPACE, LG_ELEM_U8, NULL, 16, NULL},
};

/* On sm_90a the forward runs on wgmma + TMA (gemm_emit.h, sm_90a path),
 * and so does the backward when dy's rows are 16-byte multiples (its TMA
 * tensor map): experts a multiple of 4. */
static bool wgmma_path(const struct lg_spec *s, const struct lg_target *t)
{
	return t->sm == 90 && t->arch_specific &&
	       (s->pass == LG_PASS_FORWARD || lg_spec_int(s, K_EXPERTS) % 4 == 0);
}

/* The bf16 terms of dy: 1, 2, 3 (bf16x3), or 2 (tf32: a tf32 value in 2 terms). */
static int terms_of(const struct lg_spec *s)
{
	int p = (int)lg_spec_int(s, K_PRECISION);
	return p == PREC_TF32 ? 2 : p + 1;
}

/* The spec's tile.m, n, k and stages over t's. */
static void spec_tile(const struct lg_spec *s, struct lg_gemm_tile *t)
{
	static const int key[4] = {K_TM, K_TN, K_TK, K_STAGES};
	int *const v[4] = {&t->bm, &t->bn, &t->bk, &t->stages};
	for (int i = 0; i < 4; i++)
		if (lg_spec_has(s, key[i]))
			*v[i] = (int)lg_spec_int(s, key[i]);
}

/* dw's token slices: the spec's, else enough CTAs for 132 SMs (1 to 16)
 * with dw's tile t. */
static int split_of(const struct lg_spec *s, const struct lg_gemm_tile *t)
{
	if (lg_spec_has(s, K_SPLIT))
		return (int)lg_spec_int(s, K_SPLIT);
	int64_t n = lg_spec_int(s, K_EXPERTS), k = lg_spec_int(s, K_HIDDEN);
	int64_t tiles = ((n + t->bm - 1) / t->bm) * ((k + t->bn - 1) / t->bn), z = 132 / tiles;
	return (int)(z < 1 ? 1 : z > 16 ? 16 : z);
}

/* The tile of a spec: its own keys, else the heuristic. The forward's
 * columns are the experts (a 128-wide tile up to 64 CTAs of tokens at
 * the target: 128 CTAs); the backward's are hidden features. dw's token
 * slices: enough CTAs for 132 SMs. */
static struct lg_gemm_tile tile_of(const struct lg_spec *s, int *split)
{
	bool bwd = s->pass == LG_PASS_BACKWARD;
	int64_t n = lg_spec_int(s, K_EXPERTS);
	struct lg_gemm_tile t = {.bm = 128, .bn = 128, .bk = 32, .warps_m = 2, .warps_n = 4, .stages = 4};
	if (!bwd && n <= 64) {
		t.bn = n <= 32 ? 32 : 64;
		t.warps_n = t.bn / 32;
		t.warps_m = 4;
	}
	spec_tile(s, &t);
	if (lg_spec_has(s, K_TM) || lg_spec_has(s, K_TN))
		lg_gemm_fit_warps(&t);
	if (lg_spec_has(s, K_WM))
		t.warps_m = (int)lg_spec_int(s, K_WM);
	if (lg_spec_has(s, K_WN))
		t.warps_n = (int)lg_spec_int(s, K_WN);
	*split = bwd ? split_of(s, &t) : lg_spec_has(s, K_SPLIT) ? (int)lg_spec_int(s, K_SPLIT) : 1;
	return t;
}

/* The backward's dx tile: the spec's dx_* keys, else 128 tokens x 256
 * features (128 at 128 features or fewer; 64 wide warp tiles), 4 x 4 warps,
 * experts 32 a stage, 4 stages: dy's tile is read from L2 (and split) once
 * for 256 features, one CTA of 16 warps an SM. */
static struct lg_gemm_tile dx_tile_of(const struct lg_spec *s)
{
	static const struct lg_gemm_tile_keys k = {K_XM, K_XN, K_XK, K_XS, K_XWM, K_XWN};
	bool narrow = lg_spec_int(s, K_HIDDEN) <= 128;
	struct lg_gemm_tile t = {.bm = 128, .bn = narrow ? 128 : 256, .bk = 32, .warps_m = 4,
				 .warps_n = narrow ? 2 : 4, .stages = 4};
	lg_gemm_tile_from_spec(s, &k, &t);
	return t;
}

/* A tile in one plan value and back (each field below 1024). */
static int64_t pack_tile(const struct lg_gemm_tile *t)
{
	const int f[6] = {t->bm, t->bn, t->bk, t->stages, t->warps_m, t->warps_n};
	int64_t v = 0;
	for (int i = 5; i >= 0; i--)
		v = v << 10 | f[i];
	return v;
}
struct lg_gemm_tile lg_router_gemm_unpack_tile(int64_t v)
{
	int f[6];
	for (int i = 0; i < 6; i++, v >>= 10)
		f[i] = (int)(v & 1023);
	return (struct lg_gemm_tile){.bm = f[0], .bn = f[1], .bk = f[2], .stages = f[3], .warps_m = f[4],
				     .warps_n = f[5]};
}

/* The GEMMs of a spec: 0 the forward, or 1 dx and 2 dw; 3 dx and 4 dw on
 * the sm_90a path (dy fp32 by TMA, split into bf16 planes by the
 * consumers; w and x MN-major). */
struct lg_gemm lg_router_gemm_of(const struct lg_spec *s, int which, struct lg_gemm_tile t)
{
	int64_t n = lg_spec_int(s, K_EXPERTS);
	int dych = n % 4 == 0 ? 16 : 4; /* dy rows 16-byte aligned or not */
	int terms = terms_of(s);
	struct lg_gemm g = {.t = t, .terms = 1, .tf32 = which > 0 && lg_spec_int(s, K_PRECISION) == PREC_TF32};
	switch (which) {
	case 0:
		g.a = (struct lg_gemm_operand){"a", false, false, "x", "LG_K", "M", "LG_K", 16, "tm_x"};
		g.b = (struct lg_gemm_operand){"b", false, false, "w", "LG_K", "LG_N", "LG_K", 16, "tm_w"};
		break;
	/* the backward's A is dy, fp32, split into `terms` bf16 planes in shared
	 * memory by the CTA once a tile (convert) */
	case 1:
		g.terms = terms;
		g.convert = true;
		g.a = (struct lg_gemm_operand){"a", true, false, "dy", "LG_N", "M", "LG_N", dych, NULL};
		g.b = (struct lg_gemm_operand){"b", false, true, "w", "LG_K", "LG_K", "LG_N", 16, NULL};
		break;
	case 2:
		g.terms = terms;
		g.convert = true;
		g.a = (struct lg_gemm_operand){"a", true, true, "dy", "LG_N", "LG_N", "M", dych, NULL};
		g.b = (struct lg_gemm_operand){"b", false, true, "x", "LG_K", "LG_K", "M", 16, NULL};
		break;
	case 3:
		g.terms = terms;
		g.a = (struct lg_gemm_operand){"a", true, false, "dy", "LG_N", "M", "LG_N", 16, "tm_dy"};
		g.b = (struct lg_gemm_operand){"b", false, true, "w", "LG_K", "LG_K", "LG_N", 16, "tm_w"};
		break;
	default:
		g.terms = terms;
		g.a = (struct lg_gemm_operand){"a", true, true, "dy", "LG_N", "LG_N", "M", 16, "tm_dy"};
		g.b = (struct lg_gemm_operand){"b", false, true, "x", "LG_K", "LG_K", "M", 16, "tm_x"};
		break;
	}
	return g;
}

static lg_status validate(const struct lg_spec *s, const char *where)
{
	int split;
	bool bwd = s->pass == LG_PASS_BACKWARD;
	for (int i = bwd ? 1 : 0; i <= (bwd ? 2 : 0); i++) {
		struct lg_gemm_tile t = i == 1 ? dx_tile_of(s) : tile_of(s, &split);
		struct lg_gemm g = lg_router_gemm_of(s, i, t);
		const char *why = lg_gemm_tile_problem(&g);
		if (why)
			return lg_spec_error(where,
					     "tile: found %sm %d, n %d, k %d, warps_m %d, warps_n %d, stages %d; "
					     "allowed: %s",
					     i == 1 ? "dx_" : "", t.bm, t.bn, t.bk, t.warps_m, t.warps_n, t.stages, why);
	}
	tile_of(s, &split);
	if (!bwd && lg_spec_has(s, K_SPLIT) && split != 1)
		return lg_spec_error(where, "tile.split: found %d, allowed: 1 in the forward (dw only)", split);
	for (int k = K_XM; !bwd && k <= K_XP; k++)
		if (lg_spec_has(s, k))
			return lg_spec_error(where, "%s: allowed only in the backward (dx's tile)", keys[k].path);
	return LG_OK;
}

/* The plan's tile keys and sizes of the forward's tile or dw's. */
static void plan_tile_set(const struct lg_spec *s, struct lg_plan *p, const struct lg_gemm_tile *t, int split)
{
	p->tile[K_TM] = p->v[P_BM] = t->bm;
	p->tile[K_TN] = p->v[P_BN] = t->bn;
	p->tile[K_TK] = p->v[P_BK] = t->bk;
	p->tile[K_STAGES] = p->v[P_STAGES] = t->stages;
	p->tile[K_WM] = p->v[P_WM] = t->warps_m;
	p->tile[K_WN] = p->v[P_WN] = t->warps_n;
	p->tile[K_SPLIT] = p->v[P_SPLIT] = split;
	p->v[P_K] = lg_spec_int(s, K_HIDDEN);
	p->v[P_N] = lg_spec_int(s, K_EXPERTS);
	p->v[P_TERMS] = terms_of(s);
	p->v[P_BWD] = s->pass == LG_PASS_BACKWARD;
}

/* g (sm_90a) with its stages: the spec's (key `stages`), else as many as
 * fit t (at most 8); its shared memory in *smem, or an error. `pre` names
 * the tile's keys ("" or "dx_"). */
static lg_status fit90(const struct lg_spec *s, const struct lg_target *t, struct lg_gemm *g, int stages,
		       const char *pre, int64_t *smem)
{
	while (!lg_spec_has(s, stages) && g->t.stages > 2 && lg_gemm90_smem(g) > lg_gemm_smem_limit(t))
		g->t.stages--;
	const char *why = lg_gemm90_tile_problem(g);
	if (why)
		return lg_fail(LG_ERR_SPEC, "%s: tile: found %sm %d, %sn %d, %sk %d, %sstages %d; allowed on %s: %s",
			       s->entry, pre, g->t.bm, pre, g->t.bn, pre, g->t.bk, pre, g->t.stages, t->name, why);
	*smem = lg_gemm90_smem(g);
	if (lg_gemm90_smem(g) > lg_gemm_smem_limit(t))
		return lg_fail(LG_ERR_SPEC,
			       "%s: tile.%sstages: found %d, needing %u bytes of shared memory; allowed: at most "
			       "%u bytes on %s (fewer stages or a smaller tile)",
			       s->entry, pre, g->t.stages, lg_gemm90_smem(g), lg_gemm_smem_limit(t), t->name);
	return LG_OK;
}

/* The sm_90a forward's tile: the spec's m, n, k, stages, else 128 rows and
 * 128 columns (two consumer warpgroups; 128 CTAs at the target shape, whose
 * 256 experts make only 64 tiles of 128x256 for 132 SMs), 256 columns when
 * that still gives two waves or more (a large GEMM: less L2 traffic a
 * FLOP), and as many stages as fit. warps_m / warps_n are not used. */
static lg_status plan90(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	int64_t n = lg_spec_int(s, K_EXPERTS);
	struct lg_gemm_tile tl = {.bm = 128, .bn = 128, .bk = 64, .stages = 8};
	if (n <= 64)
		tl.bn = n <= 32 ? 32 : 64;
	else if (n > 128 && (8192 / 128) * ((n + 255) / 256) >= 2 * 132)
		tl.bn = 256;
	spec_tile(s, &tl);
	struct lg_gemm g = lg_router_gemm_of(s, 0, tl);
	g.cluster = lg_spec_has(s, K_CLUSTER) ? (int)lg_spec_int(s, K_CLUSTER) : 1;
	lg_status st = fit90(s, t, &g, K_STAGES, "", &p->v[P_SMEM]);
	if (st != LG_OK)
		return st;
	g.t.warps_m = g.t.bm / 16; /* four warps a consumer warpgroup */
	g.t.warps_n = 1;
	plan_tile_set(s, p, &g.t, 1);
	p->tile[K_CLUSTER] = p->v[P_CLUSTER] = g.cluster;
	p->cluster[0] = g.cluster > 1 ? (unsigned)g.cluster : 0;
	p->v[P_TERMS] = 1;
	p->v[P_WG] = 1;
	p->nentries = 1;
	snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
	p->ntmaps = 2;
	p->tmap[0].arg = F_X;
	p->tmap[1].arg = F_W;
	lg_gemm90_boxes(&g, p->tmap[0].box, p->tmap[1].box, &p->tmap[0].swizzle, &p->tmap[1].swizzle);
	return LG_OK;
}

/* g's stages: the spec's (key[2], `stages`), else as many as fit t. When
 * even the fewest do not fit and the spec sizes no tile (keys m, n,
 * warps_m, warps_n: key[0], key[1], key[3], key[4]), the heuristic's tile
 * is halved, on the side whose half needs less shared memory, with warps
 * refitted, until it fits (sm_86, sm_89: 99 KB; the backward's default
 * tiles of 128 x 256 and 128 x 128 with dy's planes need 112-120 KB).
 * Its shared memory in *smem, or an error when it does not fit. */
static lg_status fit(const struct lg_spec *s, const struct lg_target *t, struct lg_gemm *g, const int key[5],
		     const char *name, int64_t *smem)
{
	const int min = g->convert ? 3 : 2, top = g->t.stages;
	bool sized = false;
	for (int i = 0; i < 5; i++)
		sized = sized || (i != 2 && lg_spec_has(s, key[i]));
	for (;;) {
		while (!lg_spec_has(s, key[2]) && g->t.stages > min && lg_gemm_smem(g) > lg_gemm_smem_limit(t))
			g->t.stages--;
		if (sized || lg_gemm_smem(g) <= lg_gemm_smem_limit(t))
			break;
		struct lg_gemm half[2] = {*g, *g}, *best = NULL;
		half[0].t.bm /= 2;
		half[1].t.bn /= 2;
		for (int h = 0; h < 2; h++) {
			lg_gemm_fit_warps(&half[h].t);
			if (half[h].t.bm >= 32 && half[h].t.bn >= 32 && !lg_gemm_tile_problem(&half[h]) &&
			    (!best || lg_gemm_smem(&half[h]) < lg_gemm_smem(best)))
				best = &half[h];
		}
		if (!best)
			break;
		*g = *best;
		g->t.stages = top;
	}
	*smem = lg_gemm_smem(g);
	if (lg_gemm_smem(g) > lg_gemm_smem_limit(t))
		return lg_fail(LG_ERR_SPEC,
			       "%s: tile.%s: found %d, needing %u bytes of shared memory; allowed: at most "
			       "%u bytes on %s (fewer stages or a smaller tile)",
			       s->entry, name, g->t.stages, lg_gemm_smem(g), lg_gemm_smem_limit(t), t->name);
	return LG_OK;
}

/* The backward's plan from its dw and dx GEMMs (either path). */
static lg_status plan_bwd(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p,
			  const struct lg_gemm *gw, const struct lg_gemm *gx, int split)
{
	plan_tile_set(s, p, &gw->t, split);
	p->v[P_XTILE] = pack_tile(&gx->t);
	p->tile[K_XM] = gx->t.bm;
	p->tile[K_XN] = gx->t.bn;
	p->tile[K_XK] = gx->t.bk;
	p->tile[K_XS] = gx->t.stages;
	p->tile[K_XWM] = gx->t.warps_m;
	p->tile[K_XWN] = gx->t.warps_n;
	p->nentries = split > 1 ? 3 : 2;
	p->early[1] = t->sm >= 90; /* dw's CTAs may start on the SMs dx's last wave leaves */
	snprintf(p->entry[0], sizeof p->entry[0], "%s_dx", s->entry);
	snprintf(p->entry[1], sizeof p->entry[1], "%s_dw", s->entry);
	if (split > 1)
		snprintf(p->entry[2], sizeof p->entry[2], "%s_dwsum", s->entry);
	return LG_OK;
}

/* The sm_90a backward: dx's tile (the spec's dx_* keys, else 128 tokens x
 * 256 features: dy's tile is read and split once for 256 features, 512
 * CTAs at the target) and dw's (tile.*, else 128 experts (64 up to 64) x
 * 128 features, token slices for 132 SMs: 32 tiles x 4 at the target),
 * tile.k 64, as many stages as fit; the warps fields are the consumer
 * warps (4 a 64 rows), not used. */
static lg_status plan90_bwd(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	static const struct lg_gemm_tile_keys xk = {K_XM, K_XN, K_XK, K_XS, -1, -1};
	int64_t n = lg_spec_int(s, K_EXPERTS), k = lg_spec_int(s, K_HIDDEN);
	struct lg_gemm_tile tx = {.bm = 128, .bn = k <= 128 ? 128 : 256, .bk = 64, .stages = 8};
	struct lg_gemm_tile tw = {.bm = n <= 64 ? 64 : 128, .bn = 128, .bk = 64, .stages = 8};
	lg_gemm_tile_from_spec(s, &xk, &tx);
	spec_tile(s, &tw);
	struct lg_gemm gx = lg_router_gemm_of(s, 3, tx), gw = lg_router_gemm_of(s, 4, tw);
	lg_status st = fit90(s, t, &gx, K_XS, "dx_", &p->v[P_XSMEM]);
	if (st == LG_OK)
		st = fit90(s, t, &gw, K_STAGES, "", &p->v[P_SMEM]);
	if (st != LG_OK)
		return st;
	int split = split_of(s, &gw.t);
	gx.t.warps_m = gx.t.bm / 16; /* four warps a consumer warpgroup */
	gw.t.warps_m = gw.t.bm / 16;
	p->tile[K_XP] = p->v[P_XPERS] = lg_spec_has(s, K_XP) && lg_spec_int(s, K_XP);
	p->persistent[0] = p->v[P_XPERS] != 0;
	p->per_sm[0] = p->persistent[0] ? 1u : 0u;
	gx.t.warps_n = gw.t.warps_n = 1;
	p->v[P_WG] = 1;
	p->ntmaps = 3;
	p->tmap[0].arg = B_DY;
	p->tmap[1].arg = B_W;
	p->tmap[2].arg = B_X;
	lg_gemm90_boxes(&gx, p->tmap[0].box, p->tmap[1].box, &p->tmap[0].swizzle, &p->tmap[1].swizzle);
	lg_gemm90_boxes(&gw, p->tmap[0].box, p->tmap[2].box, &p->tmap[0].swizzle, &p->tmap[2].swizzle);
	return plan_bwd(s, t, p, &gw, &gx, split);
}

static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	bool bwd = s->pass == LG_PASS_BACKWARD;
	if (wgmma_path(s, t) && !bwd)
		return plan90(s, t, p);
	if (lg_spec_has(s, K_CLUSTER) && lg_spec_int(s, K_CLUSTER) != 1)
		return lg_fail(LG_ERR_SPEC, "%s: tile.cluster: found %lld, allowed on %s%s: 1 (clusters are for the "
			       "sm_90a forward)", s->entry, (long long)lg_spec_int(s, K_CLUSTER), t->name,
			       bwd ? " in the backward" : "");
	p->tile[K_CLUSTER] = 1;
	if (wgmma_path(s, t))
		return plan90_bwd(s, t, p);
	if (lg_spec_has(s, K_XP) && lg_spec_int(s, K_XP))
		return lg_fail(LG_ERR_SPEC, "%s: tile.dx_persistent: found 1, allowed on %s: 0 (the sm_90a backward "
			       "with experts a multiple of 4 only)", s->entry, t->name);
	p->tile[K_XP] = 0;
	int split;
	static const int tkeys[5] = {K_TM, K_TN, K_STAGES, K_WM, K_WN}, xkeys[5] = {K_XM, K_XN, K_XS, K_XWM, K_XWN};
	struct lg_gemm g = lg_router_gemm_of(s, bwd ? 2 : 0, tile_of(s, &split));
	lg_status st = fit(s, t, &g, tkeys, "stages", &p->v[P_SMEM]);
	if (st != LG_OK)
		return st;
	if (bwd)
		split = split_of(s, &g.t); /* of the tile that fits */
	if (!bwd) {
		plan_tile_set(s, p, &g.t, split);
		p->nentries = 1;
		snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
		return LG_OK;
	}
	struct lg_gemm gx = lg_router_gemm_of(s, 1, dx_tile_of(s));
	st = fit(s, t, &gx, xkeys, "dx_stages", &p->v[P_XSMEM]);
	if (st != LG_OK)
		return st;
	return plan_bwd(s, t, p, &g, &gx, split);
}

/* SMs of the target (H200) when the device's count is not known. */
#define SMS 132u

static unsigned cdiv(int64_t a, int64_t b) { return (unsigned)((a + b - 1) / b); }

static void geometry(const struct lg_plan *p, int e, const int64_t *sz, struct lg_launch_dim *d)
{
	int64_t M = sz[0], K = p->v[P_K], N = p->v[P_N], bm = p->v[P_BM], bn = p->v[P_BN];
	d->grid[1] = d->grid[2] = d->block[1] = d->block[2] = 1;
	d->block[0] = (unsigned)(32 * p->v[P_WM] * p->v[P_WN]);
	if (p->v[P_WG]) /* consumer warpgroups and the producer */
		d->block[0] = (unsigned)(128 * (p->v[P_BM] / 64 + 1));
	d->smem = (unsigned)p->v[P_SMEM];
	if (!p->v[P_BWD]) { /* tiles, in a grouped raster (whole clusters of row tiles) */
		unsigned cl = p->v[P_CLUSTER] > 1 ? (unsigned)p->v[P_CLUSTER] : 1;
		d->grid[0] = (cdiv(M, bm) + cl - 1) / cl * cl * cdiv(N, bn);
		return;
	}
	if (e == 0) { /* dx tiles (none at 0 tokens); persistent: at most one CTA an SM */
		struct lg_gemm_tile x = lg_router_gemm_unpack_tile(p->v[P_XTILE]);
		d->grid[0] = cdiv(M, x.bm) * cdiv(K, x.bn);
		unsigned cap = p->resident[0] ? p->resident[0] : SMS;
		if (p->v[P_XPERS] && d->grid[0] > cap)
			d->grid[0] = cap;
		d->block[0] = (unsigned)(p->v[P_WG] ? lg_gemm90_threads(&x) : lg_gemm_threads(&x));
		d->smem = (unsigned)p->v[P_XSMEM];
		return;
	}
	if (e == 1) { /* dw tiles x slices (also at 0 tokens: dw = 0) */
		d->grid[0] = cdiv(N, bm) * cdiv(K, bn) * (unsigned)p->v[P_SPLIT];
		return;
	}
	/* the sum of the partials, four values a thread */
	d->grid[0] = cdiv(N * K / 4, 256);
	d->block[0] = 256;
	d->smem = 0;
}

static size_t workspace(const struct lg_plan *p)
{
	if (!p->v[P_BWD] || p->v[P_SPLIT] <= 1)
		return 0;
	return (size_t)p->v[P_SPLIT] * (size_t)p->v[P_N] * (size_t)p->v[P_K] * 4;
}

/* Candidates from rows of values of keys key[0..nk). */
static int add_rows(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int n,
		    int max, const int *key, int nk, const int64_t (*rows)[6], size_t nrows)
{
	for (size_t i = 0; i < nrows; i++) {
		struct lg_tile_choice c = {0};
		for (int j = 0; j < nk; j++) {
			c.v[key[j]] = rows[i][j];
			c.set |= (uint64_t)1 << key[j];
		}
		n = lg_candidate_add(s, t, out, n, max, c);
	}
	return n;
}

/* Tile variants for `lingen tune`: on the sm_90a forward, tile shapes,
 * stages and clusters of the wgmma path; on the sm_90a backward, dw's and
 * dx's tiles and stages, persistent dx CTAs and dw's token slices; on the mma.sync forward, tile
 * shapes and warp grids, stages; in the backward a few of dw's tiles, dw's
 * token slices and dx's tiles (the two kernels' tiles are independent). */
static int candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out,
		      int max)
{
	static const int64_t shapes[][6] = {
		/* m, n, warps_m, warps_n, stages, k */
		{128, 128, 2, 4, 4, 32}, {128, 128, 2, 4, 3, 64}, {64, 128, 2, 4, 4, 32},  {128, 256, 2, 4, 3, 32},
		{128, 64, 4, 2, 4, 32},  {128, 256, 2, 4, 3, 64}, {256, 128, 4, 2, 3, 32}, {64, 64, 2, 2, 6, 32},
		{128, 128, 2, 2, 4, 32}, {128, 128, 2, 4, 6, 32},
	};
	static const int64_t dx_shapes[][6] = {
		/* dx_m, dx_n, dx_warps_m, dx_warps_n, dx_stages, dx_k */
		{128, 256, 4, 4, 4, 32}, {128, 256, 4, 4, 3, 64}, {128, 128, 2, 4, 4, 32}, {64, 256, 2, 4, 4, 32},
		{256, 128, 4, 2, 3, 32}, {128, 128, 4, 2, 4, 64}, {64, 128, 2, 2, 4, 32},
	};
	static const int64_t shapes90[][6] = {
		/* m, n, stages, k, cluster: the sm_90a forward (wgmma; one cluster of 2, measured
		 * twice as slow on the H200 for now) */
		{128, 128, 6, 64, 1}, {128, 128, 4, 64, 1}, {128, 128, 6, 64, 2}, {128, 256, 4, 64, 1},
		{128, 256, 3, 64, 1}, {64, 256, 4, 64, 1},  {64, 128, 8, 64, 1},  {128, 64, 8, 64, 1},
		{64, 64, 8, 64, 1},
	};
	static const int64_t bwd90[][6] = {
		/* m, n, dx_m, dx_n: the sm_90a backward (dw's tile, dx's; the stages that fit) */
		{128, 128, 128, 256}, {128, 256, 128, 256}, {64, 128, 128, 256}, {128, 128, 128, 128},
		{128, 128, 64, 256},  {128, 128, 64, 128},  {128, 64, 128, 256},
	};
	static const int64_t pers90[][6] = {
		/* m, n, dx_m, dx_n, dx_persistent: the sm_90a backward with persistent dx CTAs */
		{128, 128, 128, 256, 1}, {128, 256, 128, 256, 1}, {128, 128, 128, 128, 1}, {128, 128, 64, 256, 1},
	};
	static const int keyp90[5] = {K_TM, K_TN, K_XM, K_XN, K_XP};
	static const int key90[5] = {K_TM, K_TN, K_STAGES, K_TK, K_CLUSTER};
	static const int keyb90[4] = {K_TM, K_TN, K_XM, K_XN};
	static const int key[6] = {K_TM, K_TN, K_WM, K_WN, K_STAGES, K_TK};
	static const int dx_key[6] = {K_XM, K_XN, K_XWM, K_XWN, K_XS, K_XK};
	static const int64_t splits[] = {1, 2, 4, 8, 0};
	if (wgmma_path(s, t) && s->pass == LG_PASS_BACKWARD) {
		int n = add_rows(s, t, out, 0, max, keyb90, 4, bwd90, sizeof bwd90 / sizeof bwd90[0]);
		n = add_rows(s, t, out, n, max, keyp90, 5, pers90, sizeof pers90 / sizeof pers90[0]);
		return lg_candidate_values(s, t, out, n, max, K_SPLIT, splits);
	}
	if (wgmma_path(s, t))
		return add_rows(s, t, out, 0, max, key90, 5, shapes90, sizeof shapes90 / sizeof shapes90[0]);
	if (s->pass == LG_PASS_FORWARD)
		return add_rows(s, t, out, 0, max, key, 6, shapes, sizeof shapes / sizeof shapes[0]);
	int n = add_rows(s, t, out, 0, max, key, 6, shapes, 4);
	n = lg_candidate_values(s, t, out, n, max, K_SPLIT, splits);
	return add_rows(s, t, out, n, max, dx_key, 6, dx_shapes, sizeof dx_shapes / sizeof dx_shapes[0]);
}

/* What a launch computes: the comment of its typed launcher (lingen_ops.h). */
static const char doc_forward[] =
	"K3: the router GEMM, forward (op \"router_gemm\"): x [tokens, hidden] bf16, w [experts,\n"
	"  hidden] bf16; logits [tokens, experts] fp32 = x . w^T.";
static const char doc_backward[] =
	"Its backward: dy [tokens, experts] fp32, x and w as in the forward; dx [tokens, hidden] bf16\n"
	"  = dy . w, dw [experts, hidden] fp32 = dy^T . x (overwritten, deterministic); either may be\n"
	"  0 (not computed). workspace: lg_kernel_workspace_size(k) bytes.";

const struct lg_family lg_family_router_gemm = {
	.op = "router_gemm",
	.summary = "router GEMM, fp32 logits = x . w^T: forward, backward (dx bf16, dw fp32) (K3)",
	.passes = (1u << LG_PASS_FORWARD) | (1u << LG_PASS_BACKWARD),
	.dtypes = 1u << LG_DTYPE_BF16,
	.nkeys = NKEYS,
	.keys = keys,
	.sig = {[LG_PASS_FORWARD] = {1, sizes, F_NARGS, fwd_args, doc_forward},
		[LG_PASS_BACKWARD] = {1, sizes, B_NARGS, bwd_args, doc_backward}},
	.validate = validate,
	.plan = plan,
	.emit = lg_router_gemm_emit,
	.geometry = geometry,
	.workspace = workspace,
	.candidates = candidates,
};
