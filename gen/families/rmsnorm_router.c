/*
 * rmsnorm_router.c - family "rmsnorm_router" (docs/kernels.md K3b): RMSNorm
 * fused with the MoE router GEMM and the rowwise blockwise FP8 quantisation
 * of the norm output, forward. For each token m:
 *
 *   r_m    = rsqrt(sum_k x_mk^2 / hidden + eps)        rms [M] fp32
 *   y_mk   = (x_mk r_m) w_k (fp32)                     y [M, hidden] bf16
 *   logits = y . route_w^T                             [M, experts] fp32
 *   q, s   = the 1x128 blockwise e4m3 copy of fp32 y   (docs/kernels.md 1.2, 1.3)
 *
 * (quant.output "rowwise", the default: linghe's mode 0), and with "both"
 * also the columnwise copy qt, st (linghe's mode 1, "the transposed copy
 * from the saved rms", as a second entry). The columnwise copy
 * alone ("columnwise") is not this family's: from a saved rms it is the
 * second entry below, which rmsnorm_quant with quant.output "columnwise"
 * also gives (it recomputes rms with the same fp64 arithmetic: the same
 * bits).
 *
 * `precision` is what the tensor cores multiply route_w by: bf16 (default)
 * y rounded to bf16, which is exactly the y written, so the logits are
 * router_gemm's of the written y; bf16x2 / bf16x3 fp32 y as 2 or 3 bf16
 * terms (2^-17 of y, or y exact: linghe's tl.dot on fp32 y is tf32, 2^-11),
 * at 2 or 3 times the mma work. The errors against the float64 logits of
 * fp32 y are measured in tests/test_rmsnorm_router_ref.c.
 *
 * M (tokens) is a run-time size; hidden (any multiple of 8; the last 1x128
 * block may be partial, its amax over its real features) and experts (any)
 * are static. "both" needs hidden % 128 == 0 (the columnwise quantiser's
 * 128-feature blocks).
 *
 * Strategy on sm_90a (H200, 8192 tokens x 2048 -> 256 experts; any spec
 * without tile.warps_m / warps_n and with tile.m 64 if any): one CTA a tile
 * of 64 tokens by tile.n experts (all of them up to 256, a multiple of 16;
 * more experts: further column tiles remake y for their GEMM and only the
 * first writes y, rms, q, s), 128 CTAs, one wave, in clusters of 2 (row
 * tiles 2 i, 2 i + 1 of one column tile; the row tiles rounded up to
 * whole clusters: one past M reads zeros and stores nothing); two consumer
 * warpgroups (each half of the experts) and a producer warp.
 *   1. The consumers read the tile's rows of x once from HBM (16-byte
 *      loads, 16 lanes a row, an L2 evict-last policy) for the fp64 sums of
 *      squares; r goes to shared memory (and rms).
 *   2. The producer loads its CTA's half of route_w's blocks of 128
 *      features (two TMA boxes of 64 features x tile.n / 2, 128-byte
 *      swizzle), multicast to both CTAs of the cluster (halving route_w's
 *      L2 traffic: 64 MB at the target, not 128), into a ring of
 *      tile.stages stages (full / empty mbarriers; a stage is refilled once
 *      the consumer warps of both CTAs released it). The consumers, for each
 *      block: fetch x's next block (from L2) into registers, turn the
 *      current one into y = (x r) w in fp32 (8 features x 4 tokens a
 *      thread), write y, q, s as on sm_80 (below; the first column tile)
 *      and the bf16 term(s) of y into an A buffer [64][128 features] laid
 *      out as TMA's 128-byte swizzle (16-byte chunk XOR row mod 8), then
 *      fence.proxy.async, a named barrier of the 256 consumers, and
 *      wgmma.mma_async m64 n<tile.n / 2> k16 over it and the stage (shared
 *      memory descriptors, fp32 accumulators in registers), one group in
 *      flight while the next block is made: three A buffers (a buffer is
 *      rewritten once both warpgroups met past the wait of its group); two
 *      where three do not fit (bf16x3 at 256 experts), each group then
 *      waited for. The last block's second 64 features, when all past
 *      hidden, are neither loaded nor multiplied.
 *   3. The epilogue stores the logits (fp32 pairs).
 * The bound: x 32 MB from HBM (+ 32 MB from L2), y 32 MB, q 16 MB,
 * logits 8 MB (about 22 us of HBM at the target), with 11 us of bf16
 * tensor work (22, 33 for bf16x2, bf16x3) run under the y making; route_w
 * (1 MB) from L2 by every cluster and x's second read: 96 MB from L2.
 *
 * Strategy elsewhere (sm_80, sm_89, sm_90 without "a", and sm_90a specs
 * with a warp grid): one CTA a tile of tile.m tokens (64) by tile.n experts
 * (256), warps_m x warps_n warps. 128 CTAs, one wave.
 *   1. The tile's rows of x are read once from HBM (16-byte loads, 16 lanes
 *      a row, 16 loads in flight a thread, an L2 evict-last policy) for the
 *      fp64 sums of squares; r goes to shared memory (and rms).
 *   2. The router GEMM on gemm_emit.c's main loop (ldmatrix, mma.sync
 *      m16n8k16 bf16 -> fp32, route_w's tiles in a cp.async ring of
 *      tile.stages), its reduction step one 1x128 quant block (tile.k =
 *      128), with A made by the kernel (lg_gemm_emit_mainloop_fill): x's
 *      next block is fetched (from L2: step 1 just read it) into registers
 *      while the current block's mma run; then each thread turns its 8
 *      features x R tokens into y = (x r) w in fp32, writes them into the A
 *      stage (bf16, or fp32 split into terms at fragment time), and, in the
 *      first column tile, the block's amax over its 16 lanes, the scale and
 *      payload (quant_common.h's lg_emit_pack8, the shared rowwise
 *      quantiser), y (16-byte stores) and q, s. The norm output never goes
 *      back to memory to be read again.
 *   3. The epilogue stores the logits (fp32 pairs).
 * H200, rowwise bf16: 91.7 us this way (mma.sync-bound at one wave).
 * With "both", a second entry is K1's columnwise kernel: the quant engine
 * (quant_engine.h) over 128 x 128 tiles with norm_common.h's hooks, y
 * remade from x, the rms just written and w.
 */
#include <stdio.h>

#include "family.h"

#include "error.h"
#include "gemm_emit.h"
#include "norm_common.h"
#include "quant_common.h"
#include "quant_engine.h"
#include "wgmma_pipe.h"

#define BK 128 /* the reduction step: one 1x128 quant block */
#define CT_THREADS 512 /* the columnwise entry: the quant engine, 4 tokens x 8 features a thread */

enum {
	K_HIDDEN,
	K_EXPERTS,
	K_EPS,
	K_PRECISION,
	K_QUANT,
	K_TILE = K_QUANT + LG_QUANT_KEYS,
	K_TM,
	K_TN,
	K_STAGES,
	K_WM,
	K_WN,
	K_QT_STORE,
	NKEYS
};

static const char *const precision_names[] = {"bf16", "bf16x2", "bf16x3"};
static const int64_t tm_ok[] = {32, 64, 128, 0};
static const int64_t tn_ok[] = {32, 64, 96, 128, 160, 192, 224, 256, 0};
static const int64_t warps_ok[] = {1, 2, 4, 8, 0};
static const struct lg_key keys[NKEYS] = {
	[K_HIDDEN] = LG_KEY_DIM("hidden", "h", 8, 1 << 16, 8, "features of x, w and route_w (a multiple of 8)"),
	[K_EXPERTS] = {.path = "experts", .type = LG_KEY_INT, .flags = LG_KEY_REQUIRED | LG_KEY_SHAPE, .min = 1,
		       .max = 1 << 16, .naming = LG_NAME_ALWAYS, .rank = 11, .abbrev = "e",
		       .doc = "rows of route_w, columns of the logits"},
	[K_EPS] = LG_KEY_EPS,
	[K_PRECISION] = {.path = "precision", .type = LG_KEY_ENUM, .values = precision_names, .nvalues = 3,
			 .has_def = true, .def = 0, .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 24,
			 .doc = "y in the router GEMM: bf16 (the y written), or fp32 y as 2 or 3 bf16 terms "
				"(bf16x3: exact)"},
	LG_KEYS_QUANT_OUT(K_QUANT, LG_QOUT_ROWWISE),
	[K_TILE] = LG_KEY_TILE_OBJ,
	[K_TM] = LG_KEY_TILE("m", "m", 32, 128, tm_ok, "tokens a CTA"),
	[K_TN] = LG_KEY_TILE("n", "n", 32, 256, tn_ok, "experts a CTA (more: column tiles that remake y)"),
	[K_STAGES] = LG_KEY_TILE("stages", "s", 2, 4, NULL, "route_w blocks of 128 features in flight"),
	[K_WM] = LG_KEY_TILE("warps_m", "wm", 1, 8, warps_ok, "warps along the tokens (sm_90a: the mma.sync path)"),
	[K_WN] = LG_KEY_TILE("warps_n", "wn", 1, 8, warps_ok, "warps along the experts (sm_90a: mma.sync)"),
	[K_QT_STORE] = LG_QE_KEY_QT_STORE,
};

static const struct lg_size sizes[] = {
	{"tokens", "M", 0, (int64_t)65535 * 128, "rows of x (tokens)", 0, 0},
};

enum { A_X, A_W, A_RW, A_Y, A_RMS, A_LOGITS, A_Q, A_S, A_QT, A_ST, NARGS };

static const struct lg_arg fwd_args[NARGS] = {
	[A_X] = {"x", LG_ARG_IN, LG_ELEM_BF16, "tokens, hidden", 16, NULL},
	[A_W] = {"w", LG_ARG_IN, LG_ELEM_BF16, "hidden", 16, "the norm's weight"},
	[A_RW] = {"route_w", LG_ARG_IN, LG_ELEM_BF16, "experts, hidden", 16, "the router's weight"},
	[A_Y] = {"y", LG_ARG_OUT, LG_ELEM_BF16, "tokens, hidden", 16, "(x r) w"},
	[A_RMS] = {"rms", LG_ARG_OUT, LG_ELEM_FP32, "tokens", 16, "reciprocal RMS"},
	[A_LOGITS] = {"logits", LG_ARG_OUT, LG_ELEM_FP32, "tokens, experts", 16, "y . route_w^T, fp32"},
	[A_Q] = {"q", LG_ARG_OUT, LG_ELEM_E4M3, "tokens, hidden", 16, "rowwise copy of y"},
	[A_S] = {"s", LG_ARG_OUT, LG_ELEM_FP32, "cdiv(hidden, 128), tokens", 16, "rowwise scales, transposed"},
	[A_QT] = {"qt", LG_ARG_OUT, LG_ELEM_E4M3, "hidden, " LG_QT_PITCH, 16,
		  "columnwise copy, transposed, zeros past tokens (quant.output both)"},
	[A_ST] = {"st", LG_ARG_OUT, LG_ELEM_FP32, "cdiv(tokens, 128), hidden", 16, "columnwise scales"},
};

/* Plan values. */
enum { P_BM, P_BN, P_STAGES, P_WM, P_WN, P_K, P_N, P_TERMS, P_SMEM, P_BOTH, P_WG, P_NA, P_QT_STORE };

/* The sm_90a path (wgmma): 64 tokens a CTA, two consumer warpgroups (each
 * half of the tile's experts) and a producer warp; A buffers of 64 tokens
 * x 128 features (two 128-byte swizzled halves) a bf16 term. */
#define WG_BM 64
#define WG_THREADS 288 /* 256 consumers + the producer warp */
#define WG_HALF 8192u  /* 64 rows x 128 bytes: one swizzled half of an A block */
#define WG_CLUSTER 2   /* CTAs sharing route_w's stages (each loads half, multicast) */

/* The tile of a spec: its own keys, else the heuristic (64 tokens; every
 * expert up to 256 in one column tile). */
static struct lg_gemm_tile tile_of(const struct lg_spec *s)
{
	int64_t n = lg_spec_int(s, K_EXPERTS);
	struct lg_gemm_tile t = {.bm = 64, .bn = 256, .bk = BK, .warps_m = 2, .warps_n = 4, .stages = 2};
	if (n <= 32)
		t.bn = 32, t.warps_n = 2;
	else if (n < 256)
		t.bn = (int)((n + 63) / 64 * 64);
	static const struct lg_gemm_tile_keys tk = {K_TM, K_TN, -1, K_STAGES, -1, -1};
	lg_gemm_tile_from_spec(s, &tk, &t);
	if (lg_spec_has(s, K_TM) || lg_spec_has(s, K_TN))
		lg_gemm_fit_warps(&t);
	if (lg_spec_has(s, K_WM))
		t.warps_m = (int)lg_spec_int(s, K_WM);
	if (lg_spec_has(s, K_WN))
		t.warps_n = (int)lg_spec_int(s, K_WN);
	return t;
}

static struct lg_gemm gemm_of(const struct lg_spec *s, struct lg_gemm_tile t)
{
	int terms = 1 + (int)lg_spec_int(s, K_PRECISION);
	struct lg_gemm g = {.t = t, .terms = terms};
	g.a = (struct lg_gemm_operand){"a", terms > 1, false, NULL, "LG_K", "M", "LG_K", 16, NULL};
	g.b = (struct lg_gemm_operand){"b", false, false, "route_w", "LG_K", "LG_N", "LG_K", 16, NULL};
	return g;
}

static unsigned smem_of(const struct lg_gemm *g) { return lg_gemm_smem(g) + (unsigned)g->t.bm * 4u; }

/* The sm_90a path's shared memory: 1024 bytes of alignment slack, na A
 * buffers of `terms` bf16 terms, `stages` route_w blocks (bn rows x 128
 * features) with their two mbarriers, the tile's reciprocal RMS. */
static unsigned smem90_of(int bn, int terms, int na, int stages)
{
	return 1024u + (unsigned)(na * terms) * 2u * WG_HALF + (unsigned)stages * ((unsigned)bn * 256u + 16u) +
	       WG_BM * 4u;
}

/* The wgmma path runs on sm_90a for the specs whose tile it can take:
 * tile.m 64 (or none) and no warp grid (tile.warps_m / warps_n select the
 * mma.sync path, the tiles `lingen tune` sweeps there). */
static bool wgmma_path(const struct lg_spec *s, const struct lg_target *t)
{
	return t->sm == 90 && t->arch_specific && (!lg_spec_has(s, K_TM) || lg_spec_int(s, K_TM) == WG_BM) &&
	       !lg_spec_has(s, K_WM) && !lg_spec_has(s, K_WN);
}

/* The sm_90a plan: tile.n (else every expert up to 256, a multiple of 16:
 * each consumer warpgroup a multiple of 8), three A buffers (the wgmma of a
 * block runs while the next is made; see emit_fused90) unless only two fit
 * with two route_w stages, and as many stages as fit up to 4. */
static lg_status plan90(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	int64_t n = lg_spec_int(s, K_EXPERTS);
	int bn = lg_spec_has(s, K_TN) ? (int)lg_spec_int(s, K_TN) : n >= 256 ? 256 : (int)((n + 15) / 16 * 16);
	int terms = 1 + (int)lg_spec_int(s, K_PRECISION), na = 3, st = 4;
	unsigned lim = lg_gemm_smem_limit(t);
	if (lg_spec_has(s, K_STAGES))
		st = (int)lg_spec_int(s, K_STAGES);
	else
		while (st > 2 && smem90_of(bn, terms, na, st) > lim)
			st--;
	if (smem90_of(bn, terms, na, st) > lim)
		na = 2;
	unsigned smem = smem90_of(bn, terms, na, st);
	if (smem > lim)
		return lg_fail(LG_ERR_SPEC,
			       "%s: tile: found n %d, stages %d, needing %u bytes of shared memory; allowed: at most "
			       "%u bytes on %s (fewer stages or a smaller tile)",
			       s->entry, bn, st, smem, lim, t->name);
	p->tile[K_TM] = p->v[P_BM] = WG_BM;
	p->tile[K_TN] = p->v[P_BN] = bn;
	p->tile[K_STAGES] = p->v[P_STAGES] = st;
	p->tile[K_WM] = p->v[P_WM] = 1; /* a consumer warpgroup's 64 tokens */
	p->tile[K_WN] = p->v[P_WN] = 2; /* two warpgroups along the experts */
	p->v[P_K] = lg_spec_int(s, K_HIDDEN);
	p->v[P_N] = n;
	p->v[P_TERMS] = terms;
	p->v[P_SMEM] = smem;
	p->v[P_BOTH] = lg_quant_colwise(s);
	p->v[P_WG] = 1;
	p->v[P_NA] = na;
	p->nentries = p->v[P_BOTH] ? 2 : 1;
	snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
	if (p->v[P_BOTH])
		snprintf(p->entry[1], sizeof p->entry[1], "%s_cols", s->entry);
	p->ntmaps = 1;
	p->tmap[0] = (struct lg_tmap_decl){.arg = A_RW, .box = {64, (unsigned)(bn / WG_CLUSTER)}, .swizzle = 128};
	p->cluster[0] = WG_CLUSTER;
	return LG_OK;
}

static lg_status validate(const struct lg_spec *s, const char *where)
{
	struct lg_quant qr = lg_spec_quant(s);
	int64_t h = lg_spec_int(s, K_HIDDEN);
	if (qr.output == LG_QOUT_COLUMNWISE)
		return lg_spec_error(where,
				     "quant.output: found \"columnwise\", allowed: \"rowwise\", \"both\" (the "
				     "columnwise copy alone is rmsnorm_quant's, quant.output \"columnwise\")");
	if (qr.output == LG_QOUT_BOTH && h % 128 != 0)
		return lg_spec_error(where,
				     "quant.output: found \"both\" with hidden %lld, allowed: \"rowwise\" (the "
				     "columnwise copy needs hidden a multiple of 128)",
				     (long long)h);
	struct lg_gemm_tile t = tile_of(s);
	struct lg_gemm g = gemm_of(s, t);
	const char *why = lg_gemm_tile_problem(&g);
	int threads = lg_gemm_threads(&t);
	if (!why && (threads < 16 || (t.bm * 16) % threads != 0))
		why = "tile.m x 16 a multiple of the threads (32 tile.warps_m tile.warps_n): whole 16-lane "
		      "rows of a quant block a thread group";
	if (why)
		return lg_spec_error(where, "tile: found m %d, n %d, warps_m %d, warps_n %d, stages %d; allowed: %s",
				     t.bm, t.bn, t.warps_m, t.warps_n, t.stages, why);
	return LG_OK;
}

static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	p->v[P_QT_STORE] = lg_qe_plan_qt_store(s, p, K_QT_STORE); /* the columnwise entry's */
	if (wgmma_path(s, t))
		return plan90(s, t, p);
	struct lg_gemm_tile tl = tile_of(s);
	struct lg_gemm g = gemm_of(s, tl);
	/* the heuristic's tile: fewer experts a column tile until it fits */
	while (smem_of(&g) > lg_gemm_smem_limit(t) && !lg_spec_has(s, K_TN) && g.t.bn > 64) {
		g.t.bn /= 2;
		g.t.bn = g.t.bn / 32 * 32;
	}
	unsigned smem = smem_of(&g);
	if (smem > lg_gemm_smem_limit(t))
		return lg_fail(LG_ERR_SPEC,
			       "%s: tile: found m %d, n %d, stages %d, needing %u bytes of shared memory; allowed: at "
			       "most %u bytes on %s (fewer stages or a smaller tile)",
			       s->entry, g.t.bm, g.t.bn, g.t.stages, smem, lg_gemm_smem_limit(t), t->name);
	p->tile[K_TM] = p->v[P_BM] = g.t.bm;
	p->tile[K_TN] = p->v[P_BN] = g.t.bn;
	p->tile[K_STAGES] = p->v[P_STAGES] = g.t.stages;
	p->tile[K_WM] = p->v[P_WM] = g.t.warps_m;
	p->tile[K_WN] = p->v[P_WN] = g.t.warps_n;
	p->v[P_K] = lg_spec_int(s, K_HIDDEN);
	p->v[P_N] = lg_spec_int(s, K_EXPERTS);
	p->v[P_TERMS] = g.terms;
	p->v[P_SMEM] = smem;
	p->v[P_BOTH] = lg_quant_colwise(s);
	p->v[P_WG] = 0;
	p->nentries = p->v[P_BOTH] ? 2 : 1;
	snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
	if (p->v[P_BOTH])
		snprintf(p->entry[1], sizeof p->entry[1], "%s_cols", s->entry);
	return LG_OK;
}

static unsigned cdiv(int64_t a, int64_t b) { return (unsigned)((a + b - 1) / b); }

static void geometry(const struct lg_plan *p, int e, const int64_t *sz, struct lg_launch_dim *d)
{
	int64_t M = sz[0];
	d->grid[1] = d->grid[2] = d->block[1] = d->block[2] = 1;
	if (e == 0) { /* row tiles x column tiles, the column tiles of a row tile adjacent */
		d->grid[0] = cdiv(M, p->v[P_BM]) * cdiv(p->v[P_N], p->v[P_BN]);
		if (p->v[P_WG]) /* whole clusters of row tiles */
			d->grid[0] = cdiv(cdiv(M, WG_BM), WG_CLUSTER) * WG_CLUSTER * cdiv(p->v[P_N], p->v[P_BN]);
		d->block[0] = p->v[P_WG] ? WG_THREADS : (unsigned)(32 * p->v[P_WM] * p->v[P_WN]);
		d->smem = (unsigned)p->v[P_SMEM];
		return;
	}
	/* the columnwise copy: 128-feature groups on x, 128-token tiles on y */
	d->grid[0] = M ? (unsigned)(p->v[P_K] / 128) : 0;
	d->grid[1] = cdiv(M, 128);
	d->block[0] = CT_THREADS;
	d->smem = 0; /* the quant engine's shared memory is static */
}

/* ------------------------------------------------------------ emission */

/* The helpers the fill hooks call: lg_fetch_a (A's next block: the
 * thread's 8 features x R tokens of x, and w's 8) and lg_make_a (y = (x r)
 * w of the fetched block into an A stage; in the first column tile also y,
 * q and s). */
static void emit_fill_helpers(lg_buf *b, const struct lg_spec *s, int r, int rg, const char *store)
{
	lg_comment(b, "A's block at feature r0: the thread's 8 features of its %d tokens of x, and of w.", r);
	lg_line(b, "static __device__ __forceinline__ void");
	char params[256];
	snprintf(params, sizeof params, "lg_u32x4 xf[%d], lg_u32x4 &wf, i64 r0, u64 x, u64 w, i64 o0a, i64 M", r);
	lg_head(b, "lg_fetch_a", params);
	lg_open(b, "{");
	lg_line(b, "const int lb = threadIdx.x & 15, rg = threadIdx.x >> 4;");
	lg_line(b, "const i64 col = r0 + lb * 8;");
	lg_line(b, "wf = col < LG_K ? lg_ld16_keep((const u8 *)w + col * 2) : lg_u32x4{0u, 0u, 0u, 0u};");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < %d; i++) {", r);
	lg_line(b, "const i64 row = o0a + rg + i * %d;", rg);
	lg_line(b, "const u8 *const xp = (const u8 *)x + (row * LG_K + col) * 2;");
	lg_line(b, "xf[i] = row < M && col < LG_K ? lg_ld16_cs(xp) : lg_u32x4{0u, 0u, 0u, 0u};");
	lg_close(b);
	lg_close(b);

	lg_comment(b, "y = (x r) w of the fetched block into the A stage dst; with lead also y and its");
	lg_comment(b, "rowwise copy (a 1x128 block: 16 lanes).");
	lg_line(b, "static __device__ __forceinline__ void");
	snprintf(params, sizeof params,
		 "u8 *dst, i64 r0, const lg_u32x4 xf[%d], lg_u32x4 wf, const float *rs, i64 o0a, i64 M, "
		 "bool lead, u8 *yo, u8 *qo, float *so", r);
	lg_head(b, "lg_make_a", params);
	lg_open(b, "{");
	lg_line(b, "const int lb = threadIdx.x & 15, rg = threadIdx.x >> 4;");
	lg_line(b, "const i64 col = r0 + lb * 8;");
	lg_line(b, "const u32 ww[4] = {wf.x, wf.y, wf.z, wf.w};");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < %d; i++) {", r);
	lg_line(b, "const int lr = rg + i * %d;", rg);
	lg_line(b, "const i64 row = o0a + lr;");
	lg_line(b, "const u32 xw[4] = {xf[i].x, xf[i].y, xf[i].z, xf[i].w};");
	lg_line(b, "const float rr = rs[lr];");
	lg_line(b, "float yv[8], amax = 0.0f;");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int e = 0; e < 4; e++) {");
	lg_line(b, "yv[2 * e] = (lg_bf16_lo(xw[e]) * rr) * lg_bf16_lo(ww[e]);");
	lg_line(b, "yv[2 * e + 1] = (lg_bf16_hi(xw[e]) * rr) * lg_bf16_hi(ww[e]);");
	lg_line(b, "amax = fmaxf(amax, fmaxf(fabsf(yv[2 * e]), fabsf(yv[2 * e + 1])));");
	lg_close(b);
	lg_line(b, "%s(dst, lr, lb * 8, yv);", store);
	lg_line(b, "if (!lead) continue; // CTA-uniform");
	lg_line(b, "amax = lg_max_xor(amax, 1, 8);");
	lg_emit_pack8(b, lg_quant_pow2(s), "yv");
	lg_line(b, "if (row >= M || col >= LG_K) continue;");
	lg_line(b, "lg_st16_cs(yo + (row * LG_K + col) * 2,");
	lg_line(b, "\tlg_u32x4{lg_pack_bf16x2(yv[0], yv[1]), lg_pack_bf16x2(yv[2], yv[3]),");
	lg_line(b, "\t\tlg_pack_bf16x2(yv[4], yv[5]), lg_pack_bf16x2(yv[6], yv[7])});");
	lg_line(b, "lg_st8_cs(qo + row * LG_K + col, p0, p1);");
	lg_line(b, "if (lb == 0) so[(r0 >> 7) * M + row] = sc;");
	lg_close(b);
	lg_close(b);
}

/* The CTA's tile (o0a, o0b), whether it leads its row tile, the thread's
 * lane in its row (lb) and row group (rg), and the outputs' pointers. */
static void emit_tile_vars(lg_buf *b, int64_t nct, int bm, int bn, int cl)
{
	if (cl > 1) {
		lg_line(b, "const i64 pair = blockIdx.x / %d; // cluster: rank blockIdx.x %% %d, row tile %d pair..",
			cl, cl, cl);
		lg_line(b, "const i64 o0a = (pair / %lld * %d + blockIdx.x %% %d) * %d, o0b = pair %% %lld * %d;",
			(long long)nct, cl, cl, bm, (long long)nct, bn);
		lg_line(b, "const bool lead = pair %% %lld == 0;", (long long)nct);
	} else {
		lg_line(b, "const i64 o0a = (i64)(blockIdx.x / %lld) * %d, o0b = (i64)(blockIdx.x %% %lld) * %d;",
			(long long)nct, bm, (long long)nct, bn);
		lg_line(b, "const bool lead = blockIdx.x %% %lld == 0;", (long long)nct);
	}
	lg_line(b, "const int lb = threadIdx.x & 15, rg = threadIdx.x >> 4;");
	lg_line(b, "u8 *const yo = (u8 *)y, *const qo = (u8 *)q;");
	lg_line(b, "float *const so = (float *)s;");
}

/* Step 1 of both paths: the fp64 sums of squares of the tile's rows (16
 * lanes a row, rows rg + rg_n i, i < r, of 8-feature pieces lb..; kp pieces
 * a row), r to shared `rs` (and rms in the first column tile), then `sync`. */
static void emit_sumsq(lg_buf *b, int r, int rg, int64_t kp, const char *sync)
{
	lg_comment(b, "1. Sums of squares (fp64) of the tile's rows: 16 lanes a row, x kept in L2 for step 2.");
	lg_open(b, "{");
	lg_line(b, "const u64 keep = lg_policy_evict_last();");
	lg_line(b, "double ss[%d];", r);
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < %d; i++) ss[i] = 0.0;", r);
	lg_line(b, "#pragma unroll 4");
	lg_open(b, "for (i64 c = lb; c < %lld; c += 16) {", (long long)kp);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < %d; i++) {", r);
	lg_line(b, "const i64 row = o0a + rg + i * %d;", rg);
	lg_line(b, "const u8 *const xp = (const u8 *)x + (row * LG_K + c * 8) * 2;");
	lg_line(b, "if (row < M) ss[i] = lg_sumsq_bf16x8(ss[i], lg_ld16_last(xp, keep));");
	lg_close(b);
	lg_close(b);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < %d; i++) {", r);
	lg_line(b, "const double t = lg_dsum_xor(ss[i], 1, 8);");
	lg_line(b, "const int lr = rg + i * %d;", rg);
	lg_open(b, "if (lb == 0) {");
	lg_line(b, "const float rv = lg_rrms(t);");
	lg_line(b, "rs[lr] = rv;");
	lg_line(b, "if (lead && o0a + lr < M) ((float *)rms)[o0a + lr] = rv;");
	lg_close(b);
	lg_close(b);
	lg_close(b);
	lg_line(b, "%s", sync);
}

static void fetch(lg_buf *b, const struct lg_gemm *g, const char *r0, void *ctx)
{
	(void)g, (void)ctx;
	lg_line(b, "lg_fetch_a(xf, wf, %s, x, w, o0a, M);", r0);
}

static void fill(lg_buf *b, const struct lg_gemm *g, const char *r0, const char *dst, void *ctx)
{
	(void)g, (void)ctx;
	lg_line(b, "lg_make_a(%s, %s, xf, wf, rs, o0a, M, lead, yo, qo, so);", dst, r0);
}

static void emit_fused(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	struct lg_gemm g = gemm_of(s, (struct lg_gemm_tile){.bm = (int)p->v[P_BM], .bn = (int)p->v[P_BN],
							   .bk = BK, .warps_m = (int)p->v[P_WM],
							   .warps_n = (int)p->v[P_WN],
							   .stages = (int)p->v[P_STAGES]});
	int threads = lg_gemm_threads(&g.t), rg = threads / 16, r = g.t.bm / rg;
	int64_t nct = (p->v[P_N] + g.t.bn - 1) / g.t.bn, kp = p->v[P_K] / 8;
	lg_gemm_emit_loaders(b, &g, "a");
	lg_gemm_emit_store_f32(b, "lg_store_f32", p->v[P_N] % 2 == 0);
	emit_fill_helpers(b, s, r, rg, "a_st_a");

	lg_section(b, p->entry[0], "RMSNorm, router GEMM, rowwise copy: one pass");
	lg_emit_signature(b, s, p->entry[0], "__launch_bounds__(%d, 1)", threads);
	lg_open(b, "{");
	lg_line(b, "extern __shared__ __align__(128) u8 smem[];");
	lg_line(b, "float *const rs = (float *)(smem + %u); // [%d] the tile's reciprocal RMS", lg_gemm_smem(&g),
		g.t.bm);
	lg_comment(b, "A %dx%d tile of the logits (%lld column tile%s a row tile, adjacent: they share x in L2);",
		   g.t.bm, g.t.bn, (long long)nct, nct > 1 ? "s" : "");
	lg_comment(b, "the first writes y, rms, q and s. Thread: features 8 lb.. of rows rg + %d i, i < %d.", rg,
		   r);
	emit_tile_vars(b, nct, g.t.bm, g.t.bn, 1);

	emit_sumsq(b, r, rg, kp, "__syncthreads();");
	lg_comment(b, "2. The GEMM over blocks of 128 features, y made into the A stages as it goes.");
	lg_line(b, "lg_u32x4 xf[%d], wf;", r);
	lg_line(b, "const i64 kts = (LG_K + %d) / %d;", BK - 1, BK);
	struct lg_gemm_fill f = {.ctx = NULL, .fetch = fetch, .fill = fill};
	lg_gemm_emit_mainloop_fill(b, &g, "a", "o0a", "o0b", "0", "kts", &f);
	lg_comment(b, "3. The logits.");
	lg_gemm_emit_epilogue(b, &g, "o0a", "o0b", "lg_store_f32((float *)logits, M, LG_N, ");
	lg_close(b);
}

/* ------------------------------------------------------------ sm_90a */

/* The A store of the wgmma path: 8 values of row `row` at feature col.. of
 * a block (col a multiple of 8 below 128) into an A buffer [term][half]
 * [64 rows][128 bytes], the 16-byte chunks of each 128-byte row XOR the
 * row mod 8: the 128-byte swizzle TMA writes and lg_wg_desc describes. */
static void emit_store_a90(lg_buf *b, int terms)
{
	lg_comment(b, "8 values of A's row `row` at col.. of a block into buffer s (%d bf16 term%s, %u bytes",
		   terms, terms > 1 ? "s" : "", 2u * WG_HALF);
	lg_comment(b, "each; 128-byte swizzled halves of 64 features).");
	lg_line(b, "static __device__ __forceinline__ void");
	lg_head(b, "lg_st_a90", "u8 *s, int row, int col, const float v[8]");
	lg_open(b, "{");
	lg_line(b, "u8 *const p = s + (col >> 6) * %u + row * 128 + ((((col >> 3) & 7) ^ (row & 7)) << 4);", WG_HALF);
	if (terms == 1) {
		lg_line(b, "*(uint4 *)p = make_uint4(lg_pack_bf16x2(v[0], v[1]), lg_pack_bf16x2(v[2], v[3]),");
		lg_line(b, "\tlg_pack_bf16x2(v[4], v[5]), lg_pack_bf16x2(v[6], v[7]));");
	} else {
		lg_line(b, "u32 t[4][%d];", terms);
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int j = 0; j < 4; j++) lg_split_bf16x2(t[j], %d, v[2 * j], v[2 * j + 1]);", terms);
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int e = 0; e < %d; e++)", terms);
		lg_line(b, "\t*(uint4 *)(p + e * %u) = make_uint4(t[0][e], t[1][e], t[2][e], t[3][e]);", 2u * WG_HALF);
	}
	lg_close(b);
}

/* The wgmma of one 64-feature half of a block: every term of A (the small
 * ones first), four k16 steps each (32 bytes along the swizzled rows: 2 in
 * descriptor units). */
static void emit_half_mma(lg_buf *b, int terms, unsigned a_off, unsigned b_off)
{
	if (terms > 1) {
		lg_line(b, "#pragma unroll");
		lg_open(b, "for (int e = %d; e >= 0; e--) {", terms - 1);
	}
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int ks = 0; ks < 4; ks++)");
	/* descriptor offsets of the operands' first k16 step (a 0 left out) */
	char da[32] = "", db[32] = "";
	if (a_off >> 4)
		snprintf(da, sizeof da, "%uu + ", a_off >> 4);
	if (b_off >> 4)
		snprintf(db, sizeof db, "%uu + ", b_off >> 4);
	if (terms > 1)
		lg_line(b, "\trt_wgmma(acc, da + %se * %uu + 2 * ks, db + %s2 * ks);", da, (2u * WG_HALF) >> 4, db);
	else
		lg_line(b, "\trt_wgmma(acc, da + %s2 * ks, db + %s2 * ks);", da, db);
	if (terms > 1)
		lg_close(b);
}

/* The fused kernel's sizes (emit_fused90). */
struct f90 {
	int half, S, na, terms;
	unsigned ab, sb; /* bytes of an A buffer, of a route_w stage */
	const char *two; /* the condition for a block's second half, or NULL: always */
	struct lg_wgp pipe;
};

/* The producer's hooks of the pipeline's fill (struct lg_wgp_fill): before
 * the loop its route_w rows, in stage s its half of block kb. */
static void f90_first(lg_buf *b, void *ctx)
{
	const struct f90 *v = ctx;
	lg_line(b, "const lg_tmap *const tm = &tm_route_w;");
	lg_line(b, "const int e0 = (int)o0b + (int)rank * %d; // its route_w rows", v->half);
}

static void f90_stage(lg_buf *b, void *ctx)
{
	const struct f90 *v = ctx;
	unsigned sb = v->sb;
	const char *two = v->two;
	lg_line(b, "u64 *const fs = &full[s];");
	if (two) {
		lg_line(b, "const bool two = %s;", two);
		lg_line(b, "lg_mbar_expect(fs, two ? %uu : %uu);", sb, sb / 2);
	} else {
		lg_line(b, "lg_mbar_expect(fs, %uu);", sb);
	}
	lg_line(b, "const int k0 = kb * 128;");
	lg_line(b, "u8 *const sh = sd + rank * %u;", (unsigned)v->half * 128u);
	lg_line(b, "lg_tma_load_2d_mc(sh, tm, fs, k0, e0, %u);", (1u << WG_CLUSTER) - 1);
	if (two)
		lg_line(b, "if (two)");
	lg_line(b, "%slg_tma_load_2d_mc(sh + %u, tm, fs, k0 + 64, e0, %u);", two ? "\t" : "", sb / 2,
		(1u << WG_CLUSTER) - 1);
}

/* 1. The producer thread: route_w's blocks by TMA, multicast to the cluster
 * (the pipeline's loads' thread, fill and leave). Its block is opened here,
 * not by lg_wgp_open_producer: this kernel declares wg in its consumers
 * and takes no setmaxnreg. */
static void emit_f90_producer(lg_buf *b, const struct f90 *v)
{
	const struct lg_wgp_fill pf = {.ctx = (void *)v, .tile = f90_first, .stage = f90_stage, .sd = true,
				       .k = "kb", .ring = "bbuf"};
	lg_open(b, "if (threadIdx.x >= 256) {");
	lg_comment(b, "Producer: one thread loads its half of route_w's block kb (two 64-feature");
	lg_comment(b, "boxes, multicast to the cluster) into stage kb %% %d once both CTAs' consumers", v->S);
	lg_comment(b, "released it.");
	lg_wgp_open_loader(b, &v->pipe);
	lg_wgp_emit_fill(b, &v->pipe, &pf);
	lg_close(b);
	lg_wgp_emit_leave(b, &v->pipe);
	lg_close(b);
}

/* 2. The consumer warpgroups' main loop: A made from x, then its wgmma groups. */
static void emit_f90_consumer(lg_buf *b, const struct f90 *v)
{
	int half = v->half, S = v->S, na = v->na, terms = v->terms;
	unsigned ab = v->ab, sb = v->sb;
	const char *two = v->two;
	lg_comment(b, "2. Consumer warpgroup wg: experts %d wg.. of the tile. Block kb: x's next block is", half);
	lg_comment(b, "fetched, y made into A buffer kb %% %d (and y, q, s written), then, once both warpgroups", na);
	lg_comment(b, "wrote it, its wgmma group issued; %s", na == 3 ? "one group kept in flight (so a buffer is"
		   : "each group waited for (two A buffers");
	lg_comment(b, "%s", na == 3 ? "rewritten 3 blocks on: both warpgroups met past its wait)."
		   : "fit, not three: the wgmma does not overlap the next block's making).");
	lg_line(b, "const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;");
	lg_wgp_emit_acc(b, "acc", half / 2);
	lg_line(b, "lg_u32x4 xf[4], wf, xn[4], wn;");
	lg_line(b, "lg_fetch_a(xf, wf, 0, x, w, o0a, M);");
	lg_open(b, "for (int kb = 0; kb < nkb; kb++) {");
	lg_line(b, "const i64 r0 = (i64)kb * 128;");
	lg_line(b, "if (kb + 1 < nkb) lg_fetch_a(xn, wn, r0 + 128, x, w, o0a, M);");
	lg_line(b, "u8 *const ab = abuf + (kb %% %d) * %u;", na, ab);
	lg_line(b, "lg_make_a(ab, r0, xf, wf, rs, o0a, M, lead, yo, qo, so);");
	lg_line(b, "lg_fence_proxy_async(); // the generic stores, then the wgmma's async-proxy reads");
	lg_line(b, "lg_bar_named(1, 256);");
	lg_line(b, "const int s = kb %% %d;", S);
	lg_wgp_emit_wait_full(b, &v->pipe, "s", "kb");
	lg_line(b, "const u64 da = lg_wg_desc(ab), db = lg_wg_desc(bbuf + s * %u + wg * %u);", sb,
		(unsigned)half * 128u);
	lg_line(b, "lg_wg_fence();");
	emit_half_mma(b, terms, 0, 0);
	if (two)
		lg_open(b, "if (%s) {", two);
	emit_half_mma(b, terms, WG_HALF, sb / 2);
	if (two)
		lg_close(b);
	lg_line(b, "lg_wg_commit();");
	if (na == 3) {
		lg_line(b, "lg_wg_wait(1);");
		lg_comment(b, "block kb - 1's stage released in both CTAs");
		char prev[32];
		snprintf(prev, sizeof prev, "(kb + %d) %% %d", S - 1, S);
		lg_wgp_emit_release(b, &v->pipe, NULL, "kb > 0", prev);
	} else {
		lg_line(b, "lg_wg_wait(0);");
		lg_wgp_emit_release(b, &v->pipe, NULL, NULL, "s");
	}
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < 4; i++) xf[i] = xn[i];");
	lg_line(b, "wf = wn;");
	lg_close(b);
	lg_line(b, "lg_wg_wait(0);");
	lg_wgp_emit_hold(b, "acc", half / 2);
}

/* 3. The logits from the accumulators. */
static void emit_f90_logits(lg_buf *b, int half, const struct lg_wgp *pipe)
{
	lg_comment(b, "3. The logits: accumulator pairs (row, col), (row, col + 1).");
	lg_line(b, "const i64 row = o0a + warp * 16 + (lane >> 2);");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int j = 0; j < %d; j++) {", half / 8);
	lg_line(b, "const i64 col = o0b + wg * %d + j * 8 + (lane & 3) * 2;", half);
	lg_line(b, "float *const lo = (float *)logits;");
	lg_line(b, "lg_store_f32(lo, M, LG_N, row, col, acc[4 * j], acc[4 * j + 1]);");
	lg_line(b, "lg_store_f32(lo, M, LG_N, row + 8, col, acc[4 * j + 2], acc[4 * j + 3]);");
	lg_close(b);
	lg_wgp_emit_done(b, pipe);
}

/* Thread 0's first work: the prefetch of tensor map `ctx` (route_w's). */
static void emit_prefetch90(lg_buf *b, void *ctx) { lg_line(b, "lg_tma_prefetch(%s);", (const char *)ctx); }

static void emit_fused90(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	int bn = (int)p->v[P_BN], half = bn / 2, S = (int)p->v[P_STAGES], na = (int)p->v[P_NA];
	int terms = (int)p->v[P_TERMS];
	int64_t K = p->v[P_K], nct = (p->v[P_N] + bn - 1) / bn;
	unsigned ab = 2u * WG_HALF * (unsigned)terms, sb = (unsigned)bn * 256u;
	/* the last block's second half past hidden: not loaded, not multiplied */
	const char *two = K % 128 != 0 && K % 128 <= 64 ? "kb + 1 < nkb" : NULL;
	struct lg_gemm g = {.t = {.bm = WG_BM, .bn = half, .bk = 64, .stages = S}, .terms = 1};
	/* two consumer warpgroups (a half of the tile's experts each), the loads' thread */
	const struct lg_wgp pipe = {2, S, WG_CLUSTER, sb, 1, NULL, LG_WGP_DEC_TMA, LG_WGP_INC_TMA, 0};
	lg_gemm90_emit_helpers(b, &g, "rt");
	lg_gemm_emit_store_f32(b, "lg_store_f32", p->v[P_N] % 2 == 0);
	emit_store_a90(b, terms);
	emit_fill_helpers(b, s, 4, 16, "lg_st_a90");

	lg_wgp_emit_head(b, s, p, p->entry[0], "RMSNorm, router GEMM (wgmma, TMA), rowwise copy: one pass", WG_CLUSTER,
			 WG_THREADS);
	lg_comment(b, "%d A buffers [%d term%s][2][64][128 B], %d route_w stages [2][%d][128 B] (at 1024-byte", na,
		   terms, terms > 1 ? "s" : "", S, bn);
	lg_comment(b, "boundaries), full[%d], empty[%d], the tile's reciprocal RMS [64].", S, S);
	lg_wgp_emit_ring(b);
	lg_line(b, "u8 *const abuf = ring, *const bbuf = ring + %u;", (unsigned)na * ab);
	char at[48];
	snprintf(at, sizeof at, "bbuf + %u", (unsigned)S * sb);
	lg_wgp_emit_barriers(b, &pipe, at);
	lg_line(b, "float *const rs = (float *)(empty + %d);", S);
	lg_comment(b, "A 64x%d tile of the logits (%lld column tile%s a row tile, adjacent: they share x in L2);",
		   bn, (long long)nct, nct > 1 ? "s" : "");
	lg_comment(b, "the first writes y, rms, q and s. Consumer thread: features 8 lb.. of rows");
	lg_comment(b, "rg + 16 i, i < 4.");
	emit_tile_vars(b, nct, WG_BM, bn, WG_CLUSTER);
	lg_line(b, "const u32 rank = blockIdx.x %% %d; // in the cluster", WG_CLUSTER);
	lg_line(b, "const int nkb = (int)((LG_K + 127) / 128); // blocks of 128 features");
	lg_wgp_emit_init(b, &pipe, emit_prefetch90, (void *)"&tm_route_w");
	const struct f90 v = {half, S, na, terms, ab, sb, two, pipe};
	emit_f90_producer(b, &v);

	emit_sumsq(b, 4, 16, K / 8, "lg_bar_named(1, 256); // the consumers");

	emit_f90_consumer(b, &v);
	emit_f90_logits(b, half, &pipe);
	lg_close(b);
}

/* The columnwise copy (quant.output both): K1's columnwise kernel, the
 * quant engine on norm_common's hooks, after the fused pass (its rms). */
static void emit_cols(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	lg_section(b, p->entry[1], "columnwise copy of y, from x, rms and w");
	lg_comment(b, "128 tokens x 128 features a CTA (the quant engine); x re-read (evict first), the rms");
	lg_comment(b, "the first entry wrote; tiles in reverse: the last rows read are likeliest in L2.");
	lg_emit_signature_tmaps(b, s, p, p->entry[1], "__launch_bounds__(%d, 2)", CT_THREADS);
	lg_open(b, "{");
	lg_line(b, "const i64 tiles = (M + 127) / 128;");
	struct lg_qe e = {.n = p->v[P_K], .threads = CT_THREADS, .cols = true, .pow2 = lg_quant_pow2(s),
			  .vals = LG_QE_F32, .layout = LG_QE_FLAT, .tile = "tiles - 1 - (i64)blockIdx.y",
			  .group = "(int)blockIdx.x", .qt_store = (enum lg_qt_store)p->v[P_QT_STORE]};
	struct lg_qe_hooks h = {.values = lg_norm_qe_values, .block = lg_norm_qe_block};
	lg_qe_emit_body(b, &e, &h);
	lg_close(b);
}

static void emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	(void)t;
	lg_section(b, "helpers for this spec", NULL);
	lg_line(b, "#define LG_K %lldll // hidden", (long long)p->v[P_K]);
	lg_line(b, "#define LG_N %lldll // experts", (long long)p->v[P_N]);
	lg_emit_rrms(b, s);
	lg_emit_quant_q(b, lg_quant_pow2(s));
	if (p->v[P_WG])
		emit_fused90(b, s, p);
	else
		emit_fused(b, s, p);
	if (p->v[P_BOTH])
		emit_cols(b, s, p);
}

static void uses(const struct lg_spec *s, unsigned char *used)
{
	lg_quant_uses(s, used, A_Q, A_S, A_QT, A_ST);
}

/* Tile variants for `lingen tune`: on sm_90a first the wgmma path's
 * experts a column tile and route_w stages; then tokens a CTA and warp
 * grids (the mma.sync path), experts a column tile, route_w stages. */
static int candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out,
		      int max)
{
	int n = 0;
	if (wgmma_path(s, t)) {
		static const int64_t wg[][2] = {{256, 2}, {128, 2}, {128, 4}, {64, 4}};
		for (size_t i = 0; i < sizeof wg / sizeof wg[0]; i++) {
			struct lg_tile_choice c = {0};
			c.v[K_TN] = wg[i][0];
			c.v[K_STAGES] = wg[i][1];
			c.set = (uint64_t)1 << K_TN | (uint64_t)1 << K_STAGES;
			n = lg_candidate_add(s, t, out, n, max, c);
		}
	}
	static const int64_t shapes[][5] = {
		/* m, n, warps_m, warps_n, stages */
		{64, 256, 2, 4, 2}, {64, 256, 2, 4, 3}, {32, 256, 1, 8, 2}, {32, 256, 2, 4, 3},
		{128, 256, 4, 2, 2}, {64, 128, 2, 4, 2}, {64, 128, 2, 2, 3}, {128, 128, 4, 2, 2},
		{32, 128, 1, 4, 3}, {64, 256, 4, 2, 2}, {32, 128, 1, 4, 2}, {64, 64, 2, 2, 2},
	};
	for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
		struct lg_tile_choice c = {0};
		const int key[5] = {K_TM, K_TN, K_WM, K_WN, K_STAGES};
		for (int j = 0; j < 5; j++) {
			c.v[key[j]] = shapes[i][j];
			c.set |= (uint64_t)1 << key[j];
		}
		n = lg_candidate_add(s, t, out, n, max, c);
	}
	return n;
}

/* What a launch computes: the comment of its typed launcher (lingen_ops.h). */
static const char doc_forward[] =
	"K3b: RMSNorm + router GEMM + rowwise FP8 in one pass (op \"rmsnorm_router\"):\n"
	"  x [tokens, hidden] bf16, w [hidden] bf16 (the norm's weight), route_w\n"
	"  [experts, hidden] bf16; y [tokens, hidden] bf16 = (x r) w, rms [tokens]\n"
	"  fp32 = r (reciprocal RMS), logits [tokens, experts] fp32 = y . route_w^T\n"
	"  (y as the spec's precision), q, s the rowwise copy of fp32 y (s\n"
	"  [cdiv(hidden, 128), tokens]), qt, st the columnwise copy (qt [hidden,\n"
	"  round_up(tokens, 128)], zeros past tokens; quant.output \"both\"; else 0).";

const struct lg_family lg_family_rmsnorm_router = {
	.op = "rmsnorm_router",
	.summary = "RMSNorm + router GEMM (fp32 logits) + 1x128 FP8 quantisation, one pass (K3b)",
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
