/*
 * router_gemm_emit.c - the kernels' source of family "router_gemm":
 * the forward (mma.sync, or wgmma + TMA on sm_90a) and the backward's dx
 * and dw GEMMs. The strategy is the header comment of router_gemm.c.
 */
#include <stdio.h>

#include "router_gemm.h"

#include "error.h"
#include "wgmma_pipe.h"

/* ------------------------------------------------------------ emission */

static struct lg_gemm_tile plan_tile(const struct lg_plan *p)
{
	return (struct lg_gemm_tile){.bm = (int)p->v[P_BM], .bn = (int)p->v[P_BN], .bk = (int)p->v[P_BK],
				     .warps_m = (int)p->v[P_WM], .warps_n = (int)p->v[P_WN],
				     .stages = (int)p->v[P_STAGES]};
}

/* The static sizes as constants. */
static void emit_dims(lg_buf *b, const struct lg_plan *p)
{
	lg_line(b, "#define LG_K %lldll // hidden", (long long)p->v[P_K]);
	lg_line(b, "#define LG_N %lldll // experts", (long long)p->v[P_N]);
}

/* The kernel's head: the signature (with the tensor maps on the wgmma
 * path: one CTA an SM), shared memory. */
static void emit_head(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p, const char *entry,
		      const struct lg_gemm *g, int ctas, const char *what)
{
	if (p->v[P_WG]) { /* sm_90a: the pipeline's head (one CTA an SM) */
		lg_wgp_emit_head(b, s, p, entry, what, 1, lg_gemm90_threads(&g->t));
		return;
	}
	lg_section(b, entry, what);
	lg_emit_signature(b, s, entry, "__launch_bounds__(%d, %d)", lg_gemm_threads(&g->t), ctas);
	lg_open(b, "{");
	lg_line(b, "extern __shared__ __align__(128) u8 smem[];");
}

/* The forward's tile origin o0a, o0b of CTA blockIdx.x and its reduction
 * tiles kts: a grouped raster, RASTER row tiles at a time sweeping the
 * columns (with clusters: whole clusters of consecutive row tiles). */
static void emit_raster(lg_buf *b, const struct lg_plan *p, const struct lg_gemm *g, const char *why)
{
	int64_t tn = (p->v[P_N] + g->t.bn - 1) / g->t.bn;
	int cl = g->cluster > 1 ? g->cluster : 1;
	lg_comment(b, "One CTA a %dx%d tile of the logits, %lld tile column%s; grouped raster: %d row tiles",
		   g->t.bm, g->t.bn, (long long)tn, tn > 1 ? "s" : "", RASTER);
	lg_comment(b, "at a time sweep the columns, so %s", why);
	if (cl > 1) {
		lg_comment(b, "Row tiles rounded up to whole clusters of %d: a cluster's CTAs are consecutive", cl);
		lg_comment(b, "row tiles of one column (groups of whole clusters); one past M reads zeros, stores none.");
		lg_line(b, "const i64 rows = ((M + %d) / %d + %d) / %d * %d, pid = blockIdx.x;", g->t.bm - 1, g->t.bm,
			cl - 1, cl, cl);
	} else {
		lg_line(b, "const i64 rows = (M + %d) / %d, pid = blockIdx.x;", g->t.bm - 1, g->t.bm);
	}
	lg_wgp_emit_group(b, "pid", "rows", tn);
	lg_line(b, "const i64 o0a = (first + r %% gs) * %d, o0b = r / gs * %d;", g->t.bm, g->t.bn);
	lg_line(b, "const i64 kts = (LG_K + %d) / %d;", g->t.bk - 1, g->t.bk);
}

static void emit_forward(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	struct lg_gemm g = lg_router_gemm_of(s, 0, plan_tile(p));
	lg_section(b, "helpers for this spec", NULL);
	emit_dims(b, p);
	lg_gemm_emit_loaders(b, &g, "fw");
	lg_gemm_emit_store_f32(b, "lg_store_f32", p->v[P_N] % 2 == 0);
	emit_head(b, s, p, p->entry[0], &g, 1, "router GEMM forward: logits fp32 = x . w^T");
	emit_raster(b, p, &g, "a wave's x and w tiles stay in L2.");
	lg_gemm_emit_mainloop(b, &g, "fw", "o0a", "o0b", "0", "kts");
	lg_gemm_emit_epilogue(b, &g, "o0a", "o0b", "lg_store_f32((float *)logits, M, LG_N, ");
	lg_close(b);
}

static void emit_forward90(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	struct lg_gemm g = lg_router_gemm_of(s, 0, plan_tile(p));
	g.cluster = (int)p->v[P_CLUSTER];
	lg_section(b, "helpers for this spec", NULL);
	emit_dims(b, p);
	lg_gemm90_emit_helpers(b, &g, "fw");
	lg_gemm_emit_store_f32(b, "lg_store_f32", p->v[P_N] % 2 == 0);
	lg_wgp_emit_head(b, s, p, p->entry[0], "router GEMM forward (wgmma, TMA): logits fp32 = x . w^T", g.cluster,
			 lg_gemm90_threads(&g.t));
	emit_raster(b, p, &g, "x is read from memory once and w stays in L2.");
	lg_gemm90_emit_mainloop(b, &g, "fw", "o0a", "o0b", "0", "kts");
	lg_gemm90_emit_epilogue(b, &g, "o0a", "o0b", "lg_store_f32((float *)logits, M, LG_N, ");
	lg_close(b);
}

/* The CTAs of dx an SM should hold (__launch_bounds__' minimum, which caps
 * the registers): 16 warps an SM in all, as shared memory allows (228 KB an
 * SM, 1 KB reserved a CTA); a tile's reduction is short (the experts), so
 * that CTAs of smaller tiles overlap one's prologue with another's mma. */
static int dx_ctas(const struct lg_gemm *g, unsigned smem)
{
	int warps = lg_gemm_threads(&g->t) / 32, n = 16 / warps;
	while (n > 1 && (unsigned)n * (smem + 1024u) > 228u * 1024u)
		n--;
	return n < 1 ? 1 : n;
}

/* The backward's helpers: the GEMMs' loaders, the fp32 and bf16 stores. */
static void emit_bwd_helpers(lg_buf *b, const struct lg_plan *p, const struct lg_gemm *gx, const struct lg_gemm *gw,
			     bool wg)
{
	lg_section(b, "helpers for this spec", NULL);
	emit_dims(b, p);
	if (wg) {
		lg_gemm90_emit_helpers(b, gx, "dx");
		lg_gemm90_emit_helpers(b, gw, "dw");
	} else {
		lg_gemm_emit_loaders(b, gx, "dx");
		lg_gemm_emit_loaders(b, gw, "dw");
	}
	lg_gemm_emit_store_f32(b, "lg_store_f32", true);
	lg_comment(b, "Store of a bf16 pair (row, col), (row, col + 1) of dx [M, K] (K even).");
	lg_line(b, "static __device__ __forceinline__ void");
	lg_head(b, "lg_store_dx", "u8 *out, i64 rows, i64 row, i64 col, float v0, float v1");
	lg_open(b, "{");
	lg_line(b, "if (row >= rows || col >= LG_K) return;");
	lg_line(b, "*(u32 *)(out + (row * LG_K + col) * 2) = lg_pack_bf16x2(v0, v1);");
	lg_close(b);
}

/* The dx kernel: dx = dy . w, a tile a CTA (persistent on sm_90a when planned). */
static void emit_dx(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p, const struct lg_gemm *gx, bool wg)
{
	int64_t xcols = (p->v[P_K] + gx->t.bn - 1) / gx->t.bn;
	emit_head(b, s, p, p->entry[0], gx, wg ? 1 : dx_ctas(gx, (unsigned)p->v[P_XSMEM]),
		  wg ? "router GEMM backward (wgmma, TMA): dx = dy . w" : "router GEMM backward: dx = dy . w");
	lg_comment(b, "One CTA a %dx%d tile of dx (%lld a row of %d tokens: they share dy's rows in L2),",
		   gx->t.bm, gx->t.bn, (long long)xcols, gx->t.bm);
	lg_comment(b, "reduction over the experts; dy as %d bf16 term%s.", gx->terms, gx->terms > 1 ? "s" : "");
	if (p->early[1]) {
		lg_comment(b, "dw (independent of dx) may be scheduled once every CTA of this grid runs.");
		lg_line(b, "asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");");
	}
	lg_line(b, "if (!dx) return;");
	const char *store = "lg_store_dx((u8 *)dx, M, ";
	if (p->v[P_XPERS]) {
		lg_comment(b, "Persistent: CTA blockIdx.x takes tiles blockIdx.x, + gridDim.x, ...");
		lg_line(b, "const i64 tiles = (M + %d) / %d * %lld;", gx->t.bm - 1, gx->t.bm, (long long)xcols);
		lg_line(b, "const i64 kts = (LG_N + %d) / %d;", gx->t.bk - 1, gx->t.bk);
		lg_gemm90_emit_tiles(b, gx, "dx", "tiles", xcols, "0", "kts");
		lg_gemm90_emit_epilogue(b, gx, "o0a", "o0b", store);
		lg_gemm90_emit_tiles_end(b);
	} else {
		lg_line(b, "const i64 t = blockIdx.x;");
		lg_line(b, "const i64 o0a = t / %lld * %d, o0b = t %% %lld * %d;", (long long)xcols, gx->t.bm,
			(long long)xcols, gx->t.bn);
		lg_line(b, "const i64 kts = (LG_N + %d) / %d;", gx->t.bk - 1, gx->t.bk);
		if (wg) {
			lg_gemm90_emit_mainloop(b, gx, "dx", "o0a", "o0b", "0", "kts");
			lg_gemm90_emit_epilogue(b, gx, "o0a", "o0b", store);
		} else {
			lg_gemm_emit_mainloop(b, gx, "dx", "o0a", "o0b", "0", "kts");
			lg_gemm_emit_epilogue(b, gx, "o0a", "o0b", store);
		}
	}
	lg_close(b);
}

/* The dw kernel: dw = dy^T . x, a tile and token slice a CTA. */
static void emit_dw(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p, const struct lg_gemm *gw, bool wg,
		    int split)
{
	int64_t cols = (p->v[P_K] + gw->t.bn - 1) / gw->t.bn, tw = (p->v[P_N] + gw->t.bm - 1) / gw->t.bm * cols;
	emit_head(b, s, p, p->entry[1], gw, 1,
		  wg ? "router GEMM backward (wgmma, TMA): dw = dy^T . x" : "router GEMM backward: dw = dy^T . x");
	lg_comment(b, "%lld tiles of %dx%d x %d token slice%s; slice z adds its share of the token tiles (none",
		   (long long)tw, gw->t.bm, gw->t.bn, split, split > 1 ? "s" : "");
	lg_comment(b, "at 0 tokens: zeros) and %s. dy as %d bf16 term%s.",
		   split > 1 ? "writes its partial [N][K] to the workspace" : "writes dw", gw->terms,
		   gw->terms > 1 ? "s" : "");
	if (p->early[1]) {
		lg_comment(b, "Launched early (beside dx's last wave): this grid completes only after dx's, so");
		lg_comment(b, "that what follows on the stream finds dx written.");
		lg_open(b, "if (!dw) {");
		lg_line(b, "asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");");
		lg_line(b, "return;");
		lg_close(b);
	} else {
		lg_line(b, "if (!dw) return;");
	}
	lg_line(b, "const i64 t = (i64)blockIdx.x %% %lld, z = (i64)blockIdx.x / %lld;", (long long)tw,
		(long long)tw);
	lg_line(b, "const i64 o0a = t / %lld * %d, o0b = t %% %lld * %d;", (long long)cols, gw->t.bm,
		(long long)cols, gw->t.bn);
	if (split > 1)
		lg_line(b, "const i64 kts = (M + %d) / %d, per = (kts + %d) / %d;", gw->t.bk - 1, gw->t.bk,
			split - 1, split);
	else
		lg_line(b, "const i64 kts = (M + %d) / %d, per = kts;", gw->t.bk - 1, gw->t.bk);
	lg_line(b, "const i64 kt0 = z * per < kts ? z * per : kts;");
	lg_line(b, "const i64 kt1 = kt0 + per < kts ? kt0 + per : kts;");
	if (wg)
		lg_gemm90_emit_mainloop(b, gw, "dw", "o0a", "o0b", "kt0", "kt1");
	else
		lg_gemm_emit_mainloop(b, gw, "dw", "o0a", "o0b", "kt0", "kt1");
	const char *store = "lg_store_f32((float *)dw, LG_N, LG_K, ";
	if (split > 1) {
		lg_line(b, "float *const part_out = (float *)ws + z * LG_N * LG_K;");
		store = "lg_store_f32(part_out, LG_N, LG_K, ";
	}
	if (wg)
		lg_gemm90_emit_epilogue(b, gw, "o0a", "o0b", store);
	else
		lg_gemm_emit_epilogue(b, gw, "o0a", "o0b", store);
	if (p->early[1])
		lg_line(b, "asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");");
	lg_close(b);
}

/* The sum of the dw slices' partials, in order (split > 1). */
static void emit_dw_sum(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p, bool wg, int split)
{
	lg_section(b, p->entry[2], "router GEMM backward: dw = the slices' partials, in order");
	lg_comment(b, "Four values a thread (N K is a multiple of 8); the same order every run.");
	if (wg) /* every entry takes the tensor maps */
		lg_emit_signature_tmaps(b, s, p, p->entry[2], "__launch_bounds__(256)");
	else
		lg_emit_signature(b, s, p->entry[2], "__launch_bounds__(256)");
	lg_open(b, "{");
	lg_line(b, "const i64 i = ((i64)blockIdx.x * 256 + threadIdx.x) * 4;");
	lg_line(b, "if (!dw || i >= LG_N * LG_K) return;");
	lg_line(b, "const float *const p = (const float *)ws + i;");
	lg_line(b, "float4 v = *(const float4 *)p;");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int z = 1; z < %d; z++) {", split);
	lg_line(b, "const float4 u = *(const float4 *)(p + z * LG_N * LG_K);");
	lg_line(b, "v.x += u.x;");
	lg_line(b, "v.y += u.y;");
	lg_line(b, "v.z += u.z;");
	lg_line(b, "v.w += u.w;");
	lg_close(b);
	lg_line(b, "*(float4 *)((float *)dw + i) = v;");
	lg_close(b);
}

static void emit_backward(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	bool wg = p->v[P_WG];
	struct lg_gemm gx = lg_router_gemm_of(s, wg ? 3 : 1, lg_router_gemm_unpack_tile(p->v[P_XTILE]));
	struct lg_gemm gw = lg_router_gemm_of(s, wg ? 4 : 2, plan_tile(p));
	int split = (int)p->v[P_SPLIT];
	emit_bwd_helpers(b, p, &gx, &gw, wg);
	emit_dx(b, s, p, &gx, wg);
	emit_dw(b, s, p, &gw, wg, split);
	if (split > 1)
		emit_dw_sum(b, s, p, wg, split);
}

void lg_router_gemm_emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	(void)t;
	if (p->v[P_BWD])
		emit_backward(b, s, p);
	else if (p->v[P_WG])
		emit_forward90(b, s, p);
	else
		emit_forward(b, s, p);
}
