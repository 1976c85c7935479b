/*
 * fp8_gemm_emit.c - the blockwise FP8 GEMM emitter (fp8_gemm_emit.h): TMA
 * + wgmma e4m3 with promotion of the partial sums every 128 of the
 * reduction, on persistent CTAs of consumer warpgroups and a producer.
 */
#include "fp8_gemm_emit.h"

#include <stdio.h>
#include <string.h>

#define BK 128   /* reduction a stage: one 128-byte row of e4m3 (the swizzle atom) */
#define ROWB 128 /* bytes of a shared row */
/* registers a thread of the manual producer keeps (it may copy); its two
 * consumer warpgroups then get 200: 128 (96 + 2 x 200) <= 65536 */
#define MANUAL_REGS 96
/* registers a thread of the TMA producer keeps (its scale warp walks the
 * tiles as the consumers do); its consumer warpgroups then get 224: a
 * setmaxnreg.inc waits for registers the CTA's other warps released, out
 * of the 168 a thread it was launched with (384 threads), so 2 x 128 (224 -
 * 168) <= 128 (168 - 48) (232 would wait forever) */
#define TMA_REGS 48
#define TMA_CONSUMER_REGS 224

static int consumers(const struct lg_fp8_gemm *g) { return g->bm / 64; }

int lg_fp8_gemm_cluster(const struct lg_fp8_gemm *g) { return g->cluster > 1 ? g->cluster : 1; }

bool lg_fp8_gemm_can_ahead(const struct lg_fp8_gemm *g) { return g->bn <= 128 && !g->b_rowscale; }

int lg_fp8_gemm_threads(const struct lg_fp8_gemm *g) { return 128 * (consumers(g) + 1); }

static unsigned stage_bytes(const struct lg_fp8_gemm *g) { return (unsigned)(g->bm + g->bn) * ROWB; }

/* B's scales a stage: one per column (per row of B), or the one or two
 * 128 x 128 tiles' (a slot of 4: 16-byte slots). */
static int b_scales(const struct lg_fp8_gemm *g) { return g->b_rowscale ? g->bn : 4; }

/* Floats of a stage's scale slot: A's bm, then B's. */
static int slot(const struct lg_fp8_gemm *g) { return g->bm + b_scales(g); }

/* Bytes of the epilogue's buffers (c_tmap): a tile of the output. */
static unsigned out_bytes(const struct lg_fp8_gemm *g)
{
	return g->c_tmap ? (unsigned)(g->bm * g->bn * g->c_elem * g->c_bufs) : 0u;
}

unsigned lg_fp8_gemm_smem(const struct lg_fp8_gemm *g)
{
	/* 1024 of slack to align the ring; the epilogue's buffers; a scale slot
	 * and two mbarriers a stage */
	return 1024u + out_bytes(g) + (unsigned)g->stages * (stage_bytes(g) + (unsigned)slot(g) * 4u + 16u);
}

/* The output's swizzle span: bytes of a box's row. */
static int out_span(const struct lg_fp8_gemm *g)
{
	int row = g->bn * g->c_elem;
	return row % 128 == 0 ? 128 : row % 64 == 0 ? 64 : 32;
}

void lg_fp8_gemm_out_box(const struct lg_fp8_gemm *g, unsigned box[2], int *swizzle)
{
	*swizzle = out_span(g);
	box[0] = (unsigned)(out_span(g) / g->c_elem);
	box[1] = 64;
}

int lg_fp8_gemm_fit_stages(struct lg_fp8_gemm *g, int want, unsigned limit)
{
	g->stages = want;
	while (g->stages > 2 && lg_fp8_gemm_smem(g) > limit)
		g->stages--;
	return g->stages;
}

/* Does every tile's column range (origins multiples of bn) lie within two
 * 128-blocks of B's scales? */
static bool two_blocks(int bn)
{
	for (int k = 0; k < 128; k++)
		if ((k * bn) % 128 + bn > 256)
			return false;
	return true;
}

/* One 128-block of B's scales a tile (bn divides 128): no select. */
static bool one_block(int bn) { return 128 % bn == 0; }

const char *lg_fp8_gemm_problem(const struct lg_fp8_gemm *g)
{
	if (g->bm != 64 && g->bm != 128)
		return "tile.m 64 or 128 (one consumer warpgroup a 64 rows)";
	if (g->bn < 16 || g->bn > 256 || g->bn % 16 != 0)
		return "tile.n a multiple of 16 up to 256";
	if (!g->b_rowscale && !two_blocks(g->bn))
		return "tile.n whose tiles span at most two 128-column scale blocks (16..128, 144, 160, 192, 256)";
	if (g->stages < 2 || g->stages > 8)
		return "tile.stages 2 to 8";
	if (g->ahead && !lg_fp8_gemm_can_ahead(g))
		return "tile.ahead with tile.n up to 128 and tile scales (three buffers of bn / 2 registers; not the "
		       "wgrad, whose per-column scales take bn / 4 more)";
	if (g->cluster < 0 || g->cluster > 2 || (g->manual && lg_fp8_gemm_cluster(g) > 1))
		return "tile.cluster 1 or 2 (1 where the operands are copied without tensor maps: the grouped wgrad)";
	return NULL;
}

void lg_fp8_gemm_boxes(const struct lg_fp8_gemm *g, unsigned box_a[2], unsigned box_b[2])
{
	box_a[0] = box_b[0] = BK;
	box_a[1] = (unsigned)(g->bm / lg_fp8_gemm_cluster(g));
	box_b[1] = (unsigned)g->bn;
}

/* Items 0..n-1 (`pre` index `suf`), `per` a line, as gemm_emit.c's list. */
static void emit_list(lg_buf *b, int n, int per, const char *pre, const char *suf, const char *lead,
		      const char *first, const char *last, const char *more)
{
	for (int i = 0; i < n; i += per) {
		char line[256];
		size_t at = 0;
		for (int j = i; j < i + per && j < n && at < sizeof line - 32; j++)
			at += (size_t)snprintf(line + at, sizeof line - at, "%s%s%d%s", j > i ? ", " : "", pre, j, suf);
		lg_line(b, "%s%*s%s%s", lead, (int)strlen(first), i ? "" : first, line, i + per >= n ? last : more);
	}
}

void lg_fp8_gemm_emit_helpers(lg_buf *b, const struct lg_fp8_gemm *g, const char *prefix)
{
	int n = g->bn, regs = n / 2;
	char name[64], params[80];
	snprintf(name, sizeof name, "%s_wgmma", prefix);
	snprintf(params, sizeof params, "float acc[%d], u64 da, u64 db, int add", regs);
	lg_comment(b, "acc (64 x %d, fp32) = (add ? acc : 0) + A (64 x 32 at descriptor da) . B (%d x 32 at", n, n);
	lg_comment(b, "db)^T, both e4m3 K-major in 128-byte swizzled shared memory; asynchronous until lg_wg_wait.");
	lg_line(b, "static __device__ __forceinline__ void");
	lg_head(b, name, params);
	lg_open(b, "{");
	lg_line(b, "asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%d, 0;\\n\"", regs + 2);
	lg_line(b, "\t\"wgmma.mma_async.sync.aligned.m64n%dk32.f32.e4m3.e4m3\\n\"", n);
	emit_list(b, regs, 12, "%", "", "\t\"", "{", "},\"", ",\"");
	lg_line(b, "\t\" %%%d, %%%d, p, 1, 1;\\n}\"", regs, regs + 1);
	emit_list(b, regs, 5, "\"+f\"(acc[", "])", "\t", ": ", "", ",");
	lg_line(b, "\t: \"l\"(da), \"l\"(db), \"r\"(add));");
	lg_close(b);
	if (lg_fp8_gemm_cluster(g) > 1) {
		lg_comment(b, "A consumer warp releases a stage: on both CTAs' barriers (both producers refill it).");
		lg_line(b, "static __device__ __forceinline__ void");
		snprintf(name, sizeof name, "%s_release", prefix);
		lg_head(b, name, "u64 *bar");
		lg_open(b, "{");
		lg_line(b, "for (u32 q = 0; q < %d; q++) lg_mbar_arrive_cta(bar, q);", lg_fp8_gemm_cluster(g));
		lg_close(b);
	}
	if (!g->ahead)
		return;
	lg_comment(b, "No read or write of acc moves across this point (the partial sums of the");
	lg_comment(b, "wgmmas in flight): CUTLASS's warpgroup_fence_operand.");
	lg_line(b, "static __device__ __forceinline__ void");
	snprintf(name, sizeof name, "%s_hold", prefix);
	snprintf(params, sizeof params, "float (&acc)[%d]", regs);
	lg_head(b, name, params);
	lg_open(b, "{");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < %d; i++) asm volatile(\"\" : \"+f\"(acc[i]) :: \"memory\");", regs);
	lg_close(b);
}

/* Shared memory, barriers, the schedule's setup. */
static void emit_prologue(lg_buf *b, const struct lg_fp8_gemm *g, const struct lg_fp8_sched *sc)
{
	int S = g->stages;
	unsigned st = stage_bytes(g);
	lg_comment(b, "%dx%d tiles: %d consumer warpgroup%s (64 rows each) and a producer warpgroup; a ring of",
		   g->bm, g->bn, consumers(g), consumers(g) > 1 ? "s" : "");
	lg_comment(b, "%d stages of A [%d][128 B] and B [%d][128 B] (128 of the reduction, 128-byte swizzle),", S,
		   g->bm, g->bn);
	lg_comment(b, "then each stage's scales (A's of its %d rows, B's of its %s),", g->bm,
		   g->b_rowscale ? "columns" : "one or two 128 x 128 tiles");
	lg_comment(b, "then full[%d], empty[%d].", S, S);
	lg_line(b, "u8 *const ring = (u8 *)(((u64)smem + 1023) & ~(u64)1023);");
	if (g->c_tmap) {
		lg_comment(b, "after the ring, each consumer warpgroup's buffer%s of its 64 rows of the output",
		   g->c_bufs > 1 ? "s" : "");
		lg_line(b, "u8 *const epi = ring + %u;", (unsigned)S * st);
		lg_line(b, "float *const scales = (float *)(epi + %u);", out_bytes(g));
	} else {
		lg_line(b, "float *const scales = (float *)(ring + %u);", (unsigned)S * st);
	}
	lg_line(b, "u64 *const full = (u64 *)(scales + %d), *const empty = full + %d;", S * slot(g), S);
	lg_line(b, "const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;");
	if (lg_fp8_gemm_cluster(g) > 1)
		lg_line(b, "const int rank = (int)(blockIdx.x %% %d); // in the cluster", lg_fp8_gemm_cluster(g));
	sc->setup(b, sc->ctx);
	lg_open(b, "if (threadIdx.x == 0) {");
	if (!g->manual) {
		if (lg_fp8_gemm_cluster(g) > 1)
			lg_open(b, "if (tiles > (i64)(blockIdx.x / %d)) {", lg_fp8_gemm_cluster(g));
		else
			lg_open(b, "if (tiles > (i64)blockIdx.x) {");
		lg_line(b, "lg_tma_prefetch(%s);", g->a_tmap);
		lg_line(b, "lg_tma_prefetch(%s);", g->b_tmap);
		lg_close(b);
	}
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int s = 0; s < %d; s++) {", S);
	if (g->manual)
		lg_line(b, "lg_mbar_init(&full[s], 128); // every producer thread's copies");
	else
		lg_line(b, "lg_mbar_init(&full[s], 33); // the loads' thread, the scale warp's lanes");
	int cl = lg_fp8_gemm_cluster(g);
	lg_line(b, "lg_mbar_init(&empty[s], %d); // every consumer warp%s", 4 * consumers(g) * cl,
		cl > 1 ? " of the cluster" : "");
	lg_close(b);
	lg_line(b, "lg_mbar_fence_init();");
	lg_close(b);
	if (cl > 1)
		lg_line(b, "lg_cluster_sync(); // the cluster's barriers ready before any multicast");
	else
		lg_line(b, "__syncthreads();");
}

/* The loop over this CTA's (cluster's) tiles. */
static void open_tiles(lg_buf *b, const struct lg_fp8_gemm *g)
{
	int cl = lg_fp8_gemm_cluster(g);
	if (cl > 1)
		lg_open(b, "for (i64 tile = blockIdx.x / %d; tile < tiles; tile += gridDim.x / %d) {", cl, cl);
	else
		lg_open(b, "for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {");
}

/* Stage s's scales (reduction block kt) into its slot: A's of the tile's
 * bm rows (contiguous in every layout), then B's of its columns (also
 * contiguous) or of its one or two 128 x 128 tiles; items `first`, +
 * `step`, ..., zero past the valid rows and columns. By 4-byte cp.async,
 * or with manual operands whose rows are not aligned (`al` false: the
 * stage is released by a plain arrive there) by loads and shared stores.
 * In the tile's consumer view (or the manual producer's). */
static void emit_scale_copy(lg_buf *b, const struct lg_fp8_gemm *g, const char *first, int step)
{
	const char *al = g->manual ? "al" : "true";
	lg_line(b, "float *const sl = scales + s * %d;", slot(g));
	lg_line(b, "const float *const pa = &LG_SA(kt, ta);");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = %s; i < %d; i += %d) {", first, g->bm, step);
	lg_line(b, "const bool ok = ta + i < rend;");
	lg_line(b, "lg_cp4_if(sl + i, ok ? pa + i : pa, ok, %s);", al);
	lg_close(b);
	if (g->b_rowscale) {
		lg_line(b, "const float *const pb = &LG_SB(kt, oc);");
		lg_line(b, "#pragma unroll");
		lg_open(b, "for (int i = %s; i < %d; i += %d) {", first, g->bn, step);
		lg_line(b, "const bool ok = oc + i < %s;", g->cols);
		lg_line(b, "lg_cp4_if(sl + %d + i, ok ? pb + i : pa, ok, %s);", g->bm, al);
		lg_close(b);
		return;
	}
	lg_open(b, "if (%s < %d) {", first, one_block(g->bn) ? 1 : 2);
	lg_line(b, "const i64 c = (oc >> 7) + %s;", first);
	lg_line(b, "const bool ok = c * 128 < %s;", g->cols);
	lg_line(b, "const float *const pb = ok ? &LG_SB(kt, c) : pa;");
	lg_line(b, "lg_cp4_if(sl + %d + %s, pb, ok, %s);", g->bm, first, al);
	lg_close(b);
}

/* A stage with per-block maps (manual): where the block's rows are 16-byte
 * aligned (al), by TMA through its patched maps ma, mb (thread q 0 adds the
 * bytes to full[s] without arriving); else by the 128 threads' byte loads
 * and shared stores in the swizzled layout (zeros past the valid rows and
 * reduction), handed to the async proxy. Then the stage's scales; every
 * thread arrives on full[s] once its copies land. */
static void emit_manual_stage(lg_buf *b, const struct lg_fp8_gemm *g)
{
	lg_open(b, "if (al && q == 0) {");
	lg_line(b, "lg_mbar_expect_tx(&full[s], %uu);", stage_bytes(g));
	lg_line(b, "lg_tma_load_2d(sd, %s, &full[s], kt * %d, ya);", g->a_tmap, BK);
	lg_line(b, "lg_tma_load_2d(sd + %u, %s, &full[s], kt * %d, yb);", (unsigned)g->bm * ROWB, g->b_tmap, BK);
	lg_close(b);
	lg_line(b, "const i64 k0 = (i64)kt * %d;", BK);
	lg_line(b, "const i64 kv = rlen - k0 < %d ? rlen - k0 : %d;", BK, BK);
	lg_open(b, "for (int u = q; !al && u < %d; u += 128) {", (g->bm + g->bn) * (ROWB / 16));
	lg_line(b, "const int r = u >> 3, c = u & 7, isb = r >= %d;", g->bm);
	lg_line(b, "const int rr = isb ? r - %d : r;", g->bm);
	lg_line(b, "const bool real = isb ? rr < nb : rr < na;");
	lg_line(b, "const i64 left = real ? kv - c * 16 : 0;");
	lg_line(b, "const u32 n = left <= 0 ? 0u : left >= 16 ? 16u : (u32)left;");
	lg_line(b, "const u8 *const line = isb ? gb + rr * ldb : ga + rr * lda;");
	lg_line(b, "const u8 *const src = line + k0 + c * 16;");
	lg_line(b, "const lg_u32x4 w = lg_ld16_any(src, n);");
	lg_comment(b, "chunk c of row r at c ^ (r & 7): the swizzle");
	lg_line(b, "u8 *const dst = sd + r * 128 + ((c ^ (r & 7)) << 4);");
	lg_line(b, "*(lg_u32x4 *)dst = w;");
	lg_close(b);
	emit_scale_copy(b, g, "q", 128);
	lg_open(b, "if (al) {");
	lg_line(b, "lg_cp_arrive(&full[s]);");
	lg_close(b);
	lg_open(b, "else {");
	lg_line(b, "lg_fence_proxy_async();");
	lg_line(b, "lg_mbar_arrive(&full[s]);");
	lg_close(b);
}

/* A's tile of a stage: whole, or this CTA's half multicast to the cluster. */
static void emit_tma_a(lg_buf *b, const struct lg_fp8_gemm *g)
{
	int cl = lg_fp8_gemm_cluster(g);
	if (cl == 1) {
		lg_line(b, "lg_tma_load_2d(sd, %s, &full[s], r0, ta);", g->a_tmap);
		return;
	}
	lg_line(b, "u8 *const sh = sd + rank * %u;", (unsigned)(g->bm / cl) * ROWB);
	lg_line(b, "lg_tma_load_2d_mc(sh, %s, &full[s], r0, ah, %u);", g->a_tmap, (1u << cl) - 1);
}

/* Wait until stage s (ring count it) is free again. */
static void emit_wait_empty(lg_buf *b, const struct lg_fp8_gemm *g)
{
	lg_line(b, "const int s = it %% %d;", g->stages);
	lg_line(b, "if (it >= %d) lg_mbar_wait(&empty[s], ((it / %d) - 1) & 1);", g->stages, g->stages);
}

/* The scale warp (TMA operands): its lanes copy each stage's scales once
 * released, each arriving on full[s] when its copies land. */
static void emit_scale_warp(lg_buf *b, const struct lg_fp8_gemm *g, const struct lg_fp8_sched *sc)
{
	lg_open(b, "else if (warp == 1) {");
	lg_comment(b, "Scale warp: each stage's scales, beside the loads' TMA.");
	lg_line(b, "int it = 0;");
	open_tiles(b, g);
	sc->tile(b, sc->ctx, false);
	lg_open(b, "for (int kt = 0; kt < nkt; kt++, it++) {");
	emit_wait_empty(b, g);
	emit_scale_copy(b, g, "lane", 32);
	lg_line(b, "lg_cp_arrive(&full[s]);");
	lg_close(b);
	lg_close(b);
	lg_close(b);
}

/* The producer warpgroup refills each stage once released: one thread by
 * TMA and a warp the scales, or (manual) all 128 threads. */
static void emit_producer(lg_buf *b, const struct lg_fp8_gemm *g, const struct lg_fp8_sched *sc)
{
	int c = consumers(g);
	unsigned st = stage_bytes(g);
	lg_open(b, "if (wg == %d) {", c);
	if (g->manual) {
		lg_comment(b, "Producer: its 128 threads fill each stage once its consumers released it.");
		if (c > 1)
			lg_line(b, "lg_setmaxnreg_dec(%d);", MANUAL_REGS);
		lg_line(b, "const int q = threadIdx.x & 127;");
	} else {
		lg_comment(b, "Producer: one thread loads each stage once its consumers released it.");
		if (c > 1)
			lg_line(b, "lg_setmaxnreg_dec(%d);", TMA_REGS);
		lg_open(b, "if (threadIdx.x == %d) {", 128 * c);
	}
	lg_line(b, "int it = 0;");
	open_tiles(b, g);
	sc->tile(b, sc->ctx, true);
	if (lg_fp8_gemm_cluster(g) > 1)
		lg_line(b, "const int ah = ta + rank * %d; // its half of A, multicast", g->bm / 2);
	if (g->manual) {
		lg_open(b, "if (al && q == 0 && nkt > 0) { // the maps the previous launch patched");
		lg_line(b, "lg_tmap_acquire(%s);", g->a_tmap);
		lg_line(b, "lg_tmap_acquire(%s);", g->b_tmap);
		lg_close(b);
	}
	lg_open(b, "for (int kt = 0; kt < nkt; kt++, it++) {");
	emit_wait_empty(b, g);
	lg_line(b, "u8 *const sd = ring + s * %u;", st);
	if (g->manual) {
		emit_manual_stage(b, g);
	} else {
		lg_line(b, "lg_mbar_expect(&full[s], %uu);", st);
		lg_line(b, "const int r0 = kt * %d;", BK);
		emit_tma_a(b, g);
		lg_line(b, "lg_tma_load_2d(sd + %u, %s, &full[s], r0, tb);", (unsigned)g->bm * ROWB, g->b_tmap);
	}
	lg_close(b);
	lg_close(b);
	if (!g->manual) {
		lg_close(b);
		emit_scale_warp(b, g, sc);
	}
	if (lg_fp8_gemm_cluster(g) > 1)
		lg_line(b, "lg_cluster_sync(); // the other CTA is done with this one's stages");
	lg_line(b, "return;");
	lg_close(b);
	if (c > 1)
		lg_line(b, "lg_setmaxnreg_inc(%d);", g->manual ? 200 : TMA_CONSUMER_REGS);
}

/* In stage s (full[s] awaited, not yet released): the scales of this
 * thread's two rows (rl, rl + 8 of the tile) and of its columns from the
 * stage's slot. */
static void emit_scales(lg_buf *b, const struct lg_fp8_gemm *g)
{
	lg_line(b, "const float *const sl = scales + s * %d;", slot(g));
	lg_line(b, "const float sa0 = sl[rl], sa1 = sl[rl + 8];");
	if (!g->b_rowscale) {
		if (one_block(g->bn))
			lg_line(b, "const float sb0 = sl[%d];", g->bm);
		else
			lg_line(b, "const float sb0 = sl[%d], sb1 = sl[%d];", g->bm, g->bm + 1);
		return;
	}
	lg_comment(b, "B's of columns col and col + 1 (col even): one 8-byte load");
	lg_line(b, "float2 sbv[%d];", g->bn / 8);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int j = 0; j < %d; j++) {", g->bn / 8);
	lg_line(b, "sbv[j] = *(const float2 *)(sl + %d + j * 8 + (lane & 3) * 2);", g->bm);
	lg_close(b);
}

/* acc += `ps` (the partial sums of a stage) x the scales of each
 * accumulator's row and column. */
static void emit_promote(lg_buf *b, const struct lg_fp8_gemm *g, const char *ps)
{
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int j = 0; j < %d; j++) {", g->bn / 8);
	if (g->b_rowscale) {
		lg_line(b, "const float c0 = sbv[j].x, c1 = sbv[j].y;");
		lg_line(b, "acc[4 * j] += %s[4 * j] * (sa0 * c0);", ps);
		lg_line(b, "acc[4 * j + 1] += %s[4 * j + 1] * (sa0 * c1);", ps);
		lg_line(b, "acc[4 * j + 2] += %s[4 * j + 2] * (sa1 * c0);", ps);
		lg_line(b, "acc[4 * j + 3] += %s[4 * j + 3] * (sa1 * c1);", ps);
	} else {
		if (one_block(g->bn))
			lg_line(b, "const float c = sb0;");
		else
			lg_line(b, "const float c = oc + j * 8 >= split ? sb1 : sb0;");
		lg_line(b, "const float t0 = sa0 * c, t1 = sa1 * c;");
		lg_line(b, "acc[4 * j] += %s[4 * j] * t0;", ps);
		lg_line(b, "acc[4 * j + 1] += %s[4 * j + 1] * t0;", ps);
		lg_line(b, "acc[4 * j + 2] += %s[4 * j + 2] * t1;", ps);
		lg_line(b, "acc[4 * j + 3] += %s[4 * j + 3] * t1;", ps);
	}
	lg_close(b);
}

/* Wait for stage `s` (`n`: its ring count) and issue its four k32 wgmmas
 * into `ps`, committed as one group. */
static void emit_issue(lg_buf *b, const struct lg_fp8_gemm *g, const char *prefix, const char *ps, const char *s,
		       const char *n)
{
	unsigned st = stage_bytes(g);
	lg_line(b, "lg_mbar_wait(&full[%s], (%s / %d) & 1);", s, n, g->stages);
	if (g->manual) {
		lg_comment(b, "the producer's copies, to the async proxy (wgmma)");
		lg_line(b, "lg_fence_proxy_async();");
	}
	lg_line(b, "const u64 da = lg_wg_desc(ring + %s * %u + wg * %u);", s, st, 64u * ROWB);
	lg_line(b, "const u64 db = lg_wg_desc(ring + %s * %u + %u);", s, st, (unsigned)g->bm * ROWB);
	lg_line(b, "lg_wg_fence();");
	lg_comment(b, "k32 steps: 32 bytes of the swizzled rows, 2 descriptor units");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int ks = 0; ks < %d; ks++) {", BK / 32);
	lg_line(b, "%s_wgmma(%s, da + 2 * ks, db + 2 * ks, ks);", prefix, ps);
	lg_close(b);
	lg_line(b, "lg_wg_commit();");
}

/* Stage s is free again for the producer(s). */
static void emit_release(lg_buf *b, const struct lg_fp8_gemm *g, const char *prefix)
{
	if (lg_fp8_gemm_cluster(g) > 1)
		lg_line(b, "if (lane == 0) %s_release(&empty[s]);", prefix);
	else
		lg_line(b, "if (lane == 0) lg_mbar_arrive(&empty[s]);");
}

/* One stage of a consumer warpgroup: its wgmmas into `ps`, then the
 * promotion into acc. */
static void emit_stage(lg_buf *b, const struct lg_fp8_gemm *g, const char *prefix, const char *ps)
{
	lg_line(b, "const int s = it %% %d;", g->stages);
	emit_issue(b, g, prefix, ps, "s", "it");
	emit_scales(b, g);
	lg_line(b, "lg_wg_wait(0);");
	emit_release(b, g, prefix);
	emit_promote(b, g, ps);
}

/* The compiler may not move reads or writes of `ps` across this point
 * (CUTLASS's warpgroup_fence_operand): the promotion's reads stay after
 * the wait for their wgmmas, the next wgmmas' operands after the promotion. */
static void emit_hold(lg_buf *b, const char *prefix, const char *ps)
{
	lg_line(b, "%s_hold(%s);", prefix, ps);
}

/* With `ahead`, one stage: its wgmmas (into `cur`) were issued before;
 * when `next`, the next stage's are issued into `nxt` first and only this
 * one's awaited (wait_group 1), so that they run while it is promoted. */
static void emit_stage_ahead(lg_buf *b, const struct lg_fp8_gemm *g, const char *prefix, const char *cur,
			     const char *nxt, bool next)
{
	lg_open(b, "{");
	lg_line(b, "const int s = it %% %d;", g->stages);
	emit_scales(b, g);
	if (next) {
		lg_line(b, "const int sn = (it + 1) %% %d;", g->stages);
		emit_hold(b, prefix, nxt);
		emit_issue(b, g, prefix, nxt, "sn", "(it + 1)");
		lg_line(b, "lg_wg_wait(1);");
	} else {
		lg_line(b, "lg_wg_wait(0);");
	}
	emit_hold(b, prefix, cur);
	emit_release(b, g, prefix);
	emit_promote(b, g, cur);
	lg_line(b, "it++;");
	lg_close(b);
}

/* Stages a group of the `ahead` loop: all but its last promotion overlap
 * the next stage's wgmmas (the other consumer warpgroup's fill the rest). */
#define GROUP 4

/* A tile's reduction loop: one stage at a time, or (ahead) groups of GROUP
 * stages over two buffers of partial sums, then the stages left one at a
 * time. Each group retires its wgmmas before the loop's back edge: ptxas
 * serialises every wgmma of a loop whose back edge a wgmma is still in
 * flight across when other instructions read an accumulator (C7514). */
static void emit_reduction(lg_buf *b, const struct lg_fp8_gemm *g, const char *prefix)
{
	if (g->ahead) {
		lg_line(b, "int k4 = 0;");
		lg_open(b, "for (; k4 + %d <= nkt; k4 += %d) {", GROUP, GROUP);
		lg_open(b, "{");
		lg_line(b, "const int s = it %% %d;", g->stages);
		emit_issue(b, g, prefix, "psum0", "s", "it");
		lg_close(b);
		for (int j = 0; j < GROUP; j++)
			emit_stage_ahead(b, g, prefix, j & 1 ? "psum1" : "psum0", j & 1 ? "psum0" : "psum1", j + 1 < GROUP);
		lg_close(b);
	}
	lg_open(b, "for (int kt = %s; kt < nkt; kt++, it++) {", g->ahead ? "k4" : "0");
	emit_stage(b, g, prefix, g->ahead ? "psum0" : "psum");
	lg_close(b);
}

/* The accumulator pairs (row, col), (row, col + 1) to the store, rows
 * below rend. */
static void emit_store_regs(lg_buf *b, const struct lg_fp8_gemm *g, const char *store)
{
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int j = 0; j < %d; j++) {", g->bn / 8);
	lg_line(b, "const i64 col = oc + j * 8 + (lane & 3) * 2;");
	lg_line(b, "const float *const v = acc + 4 * j;");
	lg_line(b, "if (row < rend) %srow, col, v[0], v[1]);", store);
	lg_line(b, "if (row + 8 < rend) %srow + 8, col, v[2], v[3]);", store);
	lg_close(b);
}

static int log2_of(int v)
{
	int n = 0;
	while ((1 << n) < v)
		n++;
	return n;
}

/* This warpgroup's 64 rows through its buffer eb: pair (r, c) of row r
 * (its rows warp 16 + lane / 4 and + 8) to box c / span's row r, swizzled
 * as the tensor map's (16-byte chunk bits 4.. XOR the row bits 7..), then
 * one thread's TMA stores of the boxes, a bulk group left in flight. */
static void emit_store_tma(lg_buf *b, const struct lg_fp8_gemm *g)
{
	int w = out_span(g), e = g->c_elem, mask = w / 16 - 1;
	if (g->c_bufs > 1) {
		lg_line(b, "u8 *const eb = epi + (wg * 2 + (nt & 1)) * %d;", 64 * g->bn * e);
		lg_comment(b, "eb free once the stores of its tile before the last have read it");
		lg_line(b, "if ((threadIdx.x & 127) == 0) lg_bulk_wait_read(1);");
	} else {
		lg_line(b, "u8 *const eb = epi + wg * %d;", 64 * g->bn * e);
		lg_comment(b, "eb free once the stores of this warpgroup's last tile have read it");
		lg_line(b, "if ((threadIdx.x & 127) == 0) lg_bulk_wait_read(0);");
	}
	lg_line(b, "lg_bar_id(1 + wg, 128);");
	lg_line(b, "const u32 rb = (u32)(warp * 16 + (lane >> 2)) * %d; // its row in a box", w);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int j = 0; j < %d; j++) {", g->bn / 8);
	lg_comment(b, "x: the pair's byte in its row; lo, hi: its rows' in the boxes");
	lg_line(b, "const int x = (j * 8 + (lane & 3) * 2) * %d;", e);
	lg_line(b, "const u32 lo = (u32)((x >> %d) * %d + (x & %d)) + rb;", log2_of(w), 64 * w, w - 1);
	lg_line(b, "const u32 hi = lo + %d;", 8 * w);
	lg_line(b, "const float *const v = acc + 4 * j;");
	lg_line(b, "u8 *const p0 = eb + (lo ^ (((lo >> 7) & %d) << 4));", mask);
	lg_line(b, "u8 *const p1 = eb + (hi ^ (((hi >> 7) & %d) << 4));", mask);
	if (e == 2) {
		lg_line(b, "*(u32 *)p0 = lg_pack_bf16x2(v[0], v[1]);");
		lg_line(b, "*(u32 *)p1 = lg_pack_bf16x2(v[2], v[3]);");
	} else {
		lg_line(b, "*(float2 *)p0 = make_float2(v[0], v[1]);");
		lg_line(b, "*(float2 *)p1 = make_float2(v[2], v[3]);");
	}
	lg_close(b);
	lg_line(b, "lg_fence_proxy_async();");
	lg_line(b, "lg_bar_id(1 + wg, 128);");
	lg_open(b, "if ((threadIdx.x & 127) == 0) {");
	lg_line(b, "const int r0 = ta + wg * 64;");
	const char *op = g->c_add ? "lg_tma_add_2d" : "lg_tma_store_2d";
	lg_line(b, "%s(%s, eb, (int)oc, r0);", op, g->c_tmap);
	for (int i = 1; i < g->bn * e / w; i++)
		lg_line(b, "%s(%s, eb + %d, (int)oc + %d, r0);", op, g->c_tmap, i * 64 * w, i * w / e);
	lg_line(b, "lg_bulk_commit();");
	lg_close(b);
	if (g->c_bufs > 1) /* only tiles stored by TMA: their bulk groups alternate the buffers */
		lg_line(b, "nt++;");
}

static void emit_epilogue(lg_buf *b, const struct lg_fp8_gemm *g, const char *store)
{
	if (!g->c_tmap) {
		lg_comment(b, "Epilogue: accumulator pairs (row, col), (row, col + 1) to the store.");
		emit_store_regs(b, g, store);
		return;
	}
	lg_comment(b, "Epilogue: this warpgroup's rows by TMA when all are real, else from registers.");
	lg_open(b, "if (ta + wg * 64 + 64 <= rend) {");
	emit_store_tma(b, g);
	lg_close(b);
	lg_open(b, "else {");
	emit_store_regs(b, g, store);
	lg_close(b);
}

void lg_fp8_gemm_emit_body(lg_buf *b, const struct lg_fp8_gemm *g, const struct lg_fp8_sched *sc,
			   const char *prefix, const char *store)
{
	int regs = g->bn / 2;
	emit_prologue(b, g, sc);
	emit_producer(b, g, sc);
	lg_comment(b, "Consumers: warpgroup wg, rows 64 wg.. of each tile.");
	if (g->ahead) {
		lg_line(b, "float psum0[%d], psum1[%d];", regs, regs);
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int i = 0; i < %d; i++) psum0[i] = psum1[i] = 0.0f;", regs);
	} else {
		lg_line(b, "float psum[%d];", regs);
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int i = 0; i < %d; i++) psum[i] = 0.0f;", regs);
	}
	lg_line(b, "const int rl = wg * 64 + warp * 16 + (lane >> 2); // this thread's rows rl, rl + 8 of a tile");
	lg_line(b, "int it = 0;");
	if (g->c_tmap && g->c_bufs > 1)
		lg_line(b, "int nt = 0; // tiles stored by TMA: the epilogue's buffer alternates");
	open_tiles(b, g);
	sc->tile(b, sc->ctx, false);
	lg_line(b, "const i64 row = (i64)ta + rl;");
	lg_line(b, "float acc[%d];", regs);
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < %d; i++) acc[i] = 0.0f;", regs);
	if (!one_block(g->bn) && !g->b_rowscale) {
		lg_comment(b, "columns from split on take B's second tile scale");
		lg_line(b, "const i64 split = ((oc >> 7) + 1) * 128;");
	}
	emit_reduction(b, g, prefix);
	emit_epilogue(b, g, store);
	lg_close(b);
	if (g->c_tmap)
		lg_line(b, "if ((threadIdx.x & 127) == 0) lg_bulk_wait(0); // the stores done before the CTA ends");
	if (lg_fp8_gemm_cluster(g) > 1)
		lg_line(b, "lg_cluster_sync(); // the other CTA's arrivals on this one's barriers are done");
}
