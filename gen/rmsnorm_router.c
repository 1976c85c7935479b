/*
 * rmsnorm_router.c - family "rmsnorm_router" (KERNELS.md K3b): RMSNorm
 * fused with the MoE router GEMM and the rowwise blockwise FP8 quantisation
 * of the norm output, forward. For each token m:
 *
 *   r_m    = rsqrt(sum_k x_mk^2 / hidden + eps)        rms [M] fp32
 *   y_mk   = (x_mk r_m) w_k (fp32)                     y [M, hidden] bf16
 *   logits = y . route_w^T                             [M, experts] fp32
 *   q, s   = the 1x128 blockwise e4m3 copy of fp32 y   (KERNELS.md 1.2, 1.3)
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
 * Strategy (H200, 8192 tokens x 2048 -> 256 experts): one CTA a tile of
 * tile.m tokens (64) by tile.n experts (256: all of them, so y is made once;
 * more experts: further column tiles recompute y for their GEMM and only
 * the first writes y, rms, q, s). 128 CTAs, one wave.
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
 * Traffic at the target: x 32 MB from HBM (+ 32 MB from L2), y 32 MB,
 * q 16 MB, logits 8 MB; route_w (1 MB) from L2 by every CTA.
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
	[K_WM] = LG_KEY_TILE("warps_m", "wm", 1, 8, warps_ok, "warps along the tokens"),
	[K_WN] = LG_KEY_TILE("warps_n", "wn", 1, 8, warps_ok, "warps along the experts"),
};

static const struct lg_size sizes[] = {
	{"tokens", "M", 0, (int64_t)65535 * 128, "rows of x (tokens)", 0},
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
	[A_QT] = {"qt", LG_ARG_OUT, LG_ELEM_E4M3, "hidden, tokens", 16,
		  "columnwise copy, transposed (quant.output both)"},
	[A_ST] = {"st", LG_ARG_OUT, LG_ELEM_FP32, "cdiv(tokens, 128), hidden", 16, "columnwise scales"},
};

/* Plan values. */
enum { P_BM, P_BN, P_STAGES, P_WM, P_WN, P_K, P_N, P_TERMS, P_SMEM, P_BOTH };

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
	static const struct lg_gemm_tile_keys tk = {K_TM, K_TN, -1, K_STAGES, K_WM, K_WN};
	lg_gemm_tile_from_spec(s, &tk, &t);
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
		d->block[0] = (unsigned)(32 * p->v[P_WM] * p->v[P_WN]);
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
static void emit_fill_helpers(lg_buf *b, const struct lg_spec *s, int r, int rg)
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
	lg_line(b, "a_st_a(dst, lr, lb * 8, yv);");
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
	emit_fill_helpers(b, s, r, rg);

	lg_section(b, p->entry[0], "RMSNorm, router GEMM, rowwise copy: one pass");
	lg_emit_signature(b, s, p->entry[0], "__launch_bounds__(%d, 1)", threads);
	lg_open(b, "{");
	lg_line(b, "extern __shared__ __align__(128) u8 smem[];");
	lg_line(b, "(void)part;");
	lg_line(b, "(void)qt;");
	lg_line(b, "(void)st;");
	lg_line(b, "float *const rs = (float *)(smem + %u); // [%d] the tile's reciprocal RMS", lg_gemm_smem(&g),
		g.t.bm);
	lg_comment(b, "A %dx%d tile of the logits (%lld column tile%s a row tile, adjacent: they share x in L2);",
		   g.t.bm, g.t.bn, (long long)nct, nct > 1 ? "s" : "");
	lg_comment(b, "the first writes y, rms, q and s. Thread: features 8 lb.. of rows rg + %d i, i < %d.", rg,
		   r);
	lg_line(b, "const i64 o0a = (i64)(blockIdx.x / %lld) * %d, o0b = (i64)(blockIdx.x %% %lld) * %d;",
		(long long)nct, g.t.bm, (long long)nct, g.t.bn);
	lg_line(b, "const bool lead = blockIdx.x %% %lld == 0;", (long long)nct);
	lg_line(b, "const int lb = threadIdx.x & 15, rg = threadIdx.x >> 4;");
	lg_line(b, "u8 *const yo = (u8 *)y, *const qo = (u8 *)q;");
	lg_line(b, "float *const so = (float *)s;");

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
	lg_line(b, "__syncthreads();");

	lg_comment(b, "2. The GEMM over blocks of 128 features, y made into the A stages as it goes.");
	lg_line(b, "lg_u32x4 xf[%d], wf;", r);
	lg_line(b, "const i64 kts = (LG_K + %d) / %d;", BK - 1, BK);
	struct lg_gemm_fill f = {.ctx = NULL, .fetch = fetch, .fill = fill};
	lg_gemm_emit_mainloop_fill(b, &g, "a", "o0a", "o0b", "0", "kts", &f);
	lg_comment(b, "3. The logits.");
	lg_gemm_emit_epilogue(b, &g, "o0a", "o0b", "lg_store_f32((float *)logits, M, LG_N, ");
	lg_close(b);
}

/* The columnwise copy (quant.output both): K1's columnwise kernel, the
 * quant engine on norm_common's hooks, after the fused pass (its rms). */
static void emit_cols(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	lg_section(b, p->entry[1], "columnwise copy of y, from x, rms and w");
	lg_comment(b, "128 tokens x 128 features a CTA (the quant engine); x re-read (evict first), the rms");
	lg_comment(b, "the first entry wrote; tiles in reverse: the last rows read are likeliest in L2.");
	lg_emit_signature(b, s, p->entry[1], "__launch_bounds__(%d, 2)", CT_THREADS);
	lg_open(b, "{");
	lg_line(b, "(void)route_w;");
	lg_line(b, "(void)y;");
	lg_line(b, "(void)logits;");
	lg_line(b, "(void)q;");
	lg_line(b, "(void)s;");
	lg_line(b, "(void)part;");
	lg_line(b, "const i64 tiles = (M + 127) / 128;");
	struct lg_qe e = {.n = p->v[P_K], .threads = CT_THREADS, .cols = true, .pow2 = lg_quant_pow2(s),
			  .vals = LG_QE_F32, .layout = LG_QE_FLAT, .tile = "tiles - 1 - (i64)blockIdx.y",
			  .group = "(int)blockIdx.x"};
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
	emit_fused(b, s, p);
	if (p->v[P_BOTH])
		emit_cols(b, s, p);
}

static void uses(const struct lg_spec *s, unsigned char *used)
{
	lg_quant_uses(s, used, A_Q, A_S, A_QT, A_ST);
}

/* Tile variants for `lingen tune`: tokens a CTA and warp grids, experts a
 * column tile, route_w stages. */
static int candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out,
		      int max)
{
	static const int64_t shapes[][5] = {
		/* m, n, warps_m, warps_n, stages */
		{64, 256, 2, 4, 2}, {64, 256, 2, 4, 3}, {32, 256, 1, 8, 2}, {32, 256, 2, 4, 3},
		{128, 256, 4, 2, 2}, {64, 128, 2, 4, 2}, {64, 128, 2, 2, 3}, {128, 128, 4, 2, 2},
		{32, 128, 1, 4, 3}, {64, 256, 4, 2, 2}, {32, 128, 1, 4, 2}, {64, 64, 2, 2, 2},
	};
	int n = 0;
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

const struct lg_family lg_family_rmsnorm_router = {
	.op = "rmsnorm_router",
	.summary = "RMSNorm + router GEMM (fp32 logits) + 1x128 FP8 quantisation, one pass (K3b)",
	.passes = 1u << LG_PASS_FORWARD,
	.dtypes = 1u << LG_DTYPE_BF16,
	.nkeys = NKEYS,
	.keys = keys,
	.sig = {[LG_PASS_FORWARD] = {1, sizes, NARGS, fwd_args}},
	.validate = validate,
	.uses = uses,
	.plan = plan,
	.emit = emit,
	.geometry = geometry,
	.candidates = candidates,
};
