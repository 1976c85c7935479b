/*
 * fp8_gemm_emit.c - the blockwise FP8 GEMM emitter (fp8_gemm_emit.h): TMA
 * + wgmma e4m3 with promotion of the partial sums every 128 of the
 * reduction, on persistent CTAs of consumer warpgroups and a producer.
 */
#include "fp8_gemm_emit.h"

#include <stdio.h>

#include "fp8_gemm_tile.h"
#include "wgmma_pipe.h"

/* " + wg * <v>" or nothing (v 0): a warpgroup's offset in an expression. */
static const char *plus_wg(char *out, size_t size, int v)
{
	if (v)
		snprintf(out, size, " + wg * %d", v);
	else
		out[0] = '\0';
	return out;
}

/* "ta + wg * <rows> + <add>" (the parts that are 0 left out): this
 * warpgroup's first output row, plus add. */
static const char *wave_row(char *out, size_t size, const struct lg_fp8_gemm *g, int add)
{
	char o[32];
	plus_wg(o, sizeof o, lg_fp8_gemm_wg_rows(g));
	if (add)
		snprintf(out, size, "ta%s + %d", o, add);
	else
		snprintf(out, size, "ta%s", o);
	return out;
}

/* g's pipeline: the TMA producer's loads' thread and scale warp arrive on
 * a full barrier (33), the manual producer's 128 threads each. */
/* The producer at 40 registers, the consumers at 232: tile.m 256's
 * consumers keep 128 + 64 accumulators and, through TMA, the epilogue's
 * buffer addresses (224 registers spill 16 bytes, ptxas; 232 none); so do
 * the waves of tile.pingpong and of the dense wgrad. */
static bool lean_producer(const struct lg_fp8_gemm *g)
{
	return lg_fp8_gemm_waves(g) > 1 && g->c_tmap;
}

static struct lg_wgp pipe_of(const struct lg_fp8_gemm *g)
{
	struct lg_wgp p = {lg_fp8_gemm_consumers(g), g->stages, lg_fp8_gemm_cluster(g), lg_fp8_gemm_stage_bytes(g), 33,
			   "the loads' thread, the scale warp's lanes", LG_WGP_DEC_SCALES, LG_WGP_INC_SCALES, 0};
	/* (the dense wgrad's one-wave tiles stay at 48 / 224: at 40 / 232, their
	 * spills gone, with the scale warp's loops rolled, they measured 681-723
	 * TFLOP/s at the LM head's wgrad against 781-792 before, H100, sessions
	 * 15 and 17, bench/fp8-gemm.md) */
	if (lean_producer(g)) {
		p.dec = LG_WGP_DEC_TMA;
		p.inc = LG_WGP_INC_TMA;
	}
	if (g->pingpong) /* a stage is one warpgroup's */
		p.readers = 1;
	if (g->manual) {
		p.full_count = 128;
		p.full_why = "every producer thread's copies";
		p.dec = LG_WGP_DEC_COPY;
		p.inc = LG_WGP_INC_COPY;
	}
	return p;
}

void lg_fp8_gemm_emit_helpers(lg_buf *b, const struct lg_fp8_gemm *g, const char *prefix)
{
	int n = g->bn, regs = n / 2;
	char name[64], params[80];
	snprintf(name, sizeof name, "%s_wgmma", prefix);
	lg_comment(b, "acc (64 x %d, fp32) = (add ? acc : 0) + A (64 x 32 at descriptor da) . B (%d x 32 at", n, n);
	lg_comment(b, "db)^T, both e4m3 K-major in 128-byte swizzled shared memory; asynchronous until lg_wg_wait.");
	lg_wgp_emit_mma(b, name, n, 32, "e4m3", NULL, true);
	const struct lg_wgp p = pipe_of(g);
	lg_wgp_emit_helpers(b, &p, prefix);
	if (!g->ahead)
		return;
	lg_comment(b, "No read or write of acc moves across this point (the partial sums of the");
	lg_comment(b, "wgmmas in flight): CUTLASS's warpgroup_fence_operand.");
	lg_line(b, "static __device__ __forceinline__ void");
	snprintf(name, sizeof name, "%s_hold", prefix);
	snprintf(params, sizeof params, "float (&acc)[%d]", regs);
	lg_head(b, name, params);
	lg_open(b, "{");
	lg_wgp_emit_hold(b, "acc", regs);
	lg_close(b);
}

/* Thread 0's first work: the tensor maps' prefetch where the CTA has a tile. */
static void emit_prefetch(lg_buf *b, void *ctx)
{
	const struct lg_fp8_gemm *g = ctx;
	if (g->manual)
		return;
	if (lg_fp8_gemm_cluster(g) > 1)
		lg_open(b, "if (tiles > (i64)(blockIdx.x / %d)) {", lg_fp8_gemm_cluster(g));
	else
		lg_open(b, "if (tiles > (i64)blockIdx.x) {");
	lg_line(b, "lg_tma_prefetch(%s);", g->a_tmap);
	lg_line(b, "lg_tma_prefetch(%s);", g->b_tmap);
	lg_close(b);
}

/* Shared memory, barriers, the schedule's setup. */
static void emit_prologue(lg_buf *b, const struct lg_fp8_gemm *g, const struct lg_fp8_sched *sc)
{
	const struct lg_wgp p = pipe_of(g);
	int S = g->stages;
	unsigned st = lg_fp8_gemm_stage_bytes(g);
	if (g->pingpong)
		lg_comment(b, "%dx%d tiles: 2 consumer warpgroups, each a tile of its own in turn, and a producer", g->bm,
			   g->bn);
	else
		lg_comment(b, "%dx%d tiles: %d consumer warpgroup%s (%d rows each) and a producer warpgroup; a ring of",
			   g->bm, g->bn, lg_fp8_gemm_consumers(g), lg_fp8_gemm_consumers(g) > 1 ? "s" : "",
			   64 * lg_fp8_gemm_waves(g));
	if (g->pingpong)
		lg_comment(b, "warpgroup; a ring of (the stages of a pair of tiles in turn)");
	lg_comment(b, "%d stages of A [%d][128 B] and B [%d][128 B] (128 of the reduction, 128-byte swizzle),", S,
		   g->bm, g->bn);
	lg_comment(b, "then each stage's scales (A's of its %d rows, B's of its %s),", g->bm,
		   g->b_rowscale ? "columns" : "one or two 128 x 128 tiles");
	lg_comment(b, "then full[%d], empty[%d].", S, S);
	lg_wgp_emit_ring(b);
	if (g->c_tmap && lg_fp8_gemm_waves(g) > 1) {
		lg_comment(b, "after the ring, each consumer warpgroup's %d buffer%s of 64 rows (a wave's) of the output",
			   lg_fp8_gemm_out_slots(g), lg_fp8_gemm_out_slots(g) > 1 ? "s" : "");
		lg_line(b, "u8 *const epi = ring + %u;", (unsigned)S * st);
		lg_line(b, "float *const scales = (float *)(epi + %u);", lg_fp8_gemm_out_bytes(g));
	} else if (g->c_tmap) {
		if (lg_fp8_gemm_half_out(g))
			lg_comment(b, "after the ring, each consumer warpgroup's buffer of half its 64 rows' columns");
		else
			lg_comment(b, "after the ring, each consumer warpgroup's buffer%s of its 64 rows of the output",
				   lg_fp8_gemm_out_slots(g) > 1 ? "s" : "");
		lg_line(b, "u8 *const epi = ring + %u;", (unsigned)S * st);
		lg_line(b, "float *const scales = (float *)(epi + %u);", lg_fp8_gemm_out_bytes(g));
	} else {
		lg_line(b, "float *const scales = (float *)(ring + %u);", (unsigned)S * st);
	}
	char at[48];
	snprintf(at, sizeof at, "scales + %d", S * lg_fp8_gemm_slot(g));
	lg_wgp_emit_barriers(b, &p, at);
	lg_wgp_emit_roles(b);
	if (lg_fp8_gemm_cluster(g) > 1)
		lg_line(b, "const int rank = (int)(blockIdx.x %% %d); // in the cluster", lg_fp8_gemm_cluster(g));
	sc->setup(b, sc->ctx);
	lg_wgp_emit_init(b, &p, emit_prefetch, (void *)g);
}

/* The consumers' loop over this CTA's (cluster's) tiles; with pingpong
 * over their pairs, warpgroup wg taking the pair's tile wg (`two`: the
 * pair has its second). */
static void open_tiles(lg_buf *b, const struct lg_fp8_gemm *g)
{
	const struct lg_wgp p = pipe_of(g);
	if (!g->pingpong) {
		lg_wgp_open_tiles(b, &p, "tiles");
		return;
	}
	lg_wgp_open_tile_pairs(b, &p, "tiles");
	lg_line(b, "const bool two = pt + tstep < tiles;");
	lg_line(b, "if (wg == 1 && !two) break;");
	lg_line(b, "const i64 tile = pt + wg * tstep;");
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
	/* A's copies unrolled: rolled (#pragma unroll 1, session 15, to end the
	 * fp32 forms' 28 bytes of producer spills), every form whose scale warp
	 * copies them fell 16-25% (H100, session 17 against 15, bench/fp8-gemm.md:
	 * the K 2048 forward 1002 -> 841 TFLOP/s, its dgrad 1029 -> 800-846, the
	 * grouped forward 331 -> 395 us; the grouped wgrad, whose producer copies
	 * with all its threads, and K 512 the same). B's (the wgrad's) rolled only
	 * where the producer has 40 registers (beside A's: 112 bytes of spill) */
	const char *unroll = step == 32 && lean_producer(g) ? "#pragma unroll 1" : "#pragma unroll";
	lg_line(b, "float *const sl = scales + s * %d;", lg_fp8_gemm_slot(g));
	lg_line(b, "const float *const pa = &LG_SA(kt, ta);");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = %s; i < %d; i += %d) {", first, g->bm, step);
	lg_line(b, "const bool ok = ta + i < rend;");
	lg_line(b, "lg_cp4_if(sl + i, ok ? pa + i : pa, ok, %s);", al);
	lg_close(b);
	if (g->b_rowscale) {
		lg_line(b, "const float *const pb = &LG_SB(kt, oc);");
		lg_line(b, "%s", unroll);
		lg_open(b, "for (int i = %s; i < %d; i += %d) {", first, g->bn, step);
		lg_line(b, "const bool ok = oc + i < %s;", g->cols);
		lg_line(b, "lg_cp4_if(sl + %d + i, ok ? pb + i : pa, ok, %s);", g->bm, al);
		lg_close(b);
		return;
	}
	lg_open(b, "if (%s < %d) {", first, lg_fp8_gemm_one_block(g->bn) ? 1 : 2);
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
	lg_line(b, "lg_mbar_expect_tx(&full[s], %uu);", lg_fp8_gemm_stage_bytes(g));
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

/* The producer's hooks of the pipeline's fill (struct lg_wgp_fill). */
struct fill {
	const struct lg_fp8_gemm *g;
	const struct lg_fp8_sched *sc;
};

/* A tile of the producer: the schedule's view, A's half of a cluster, the
 * per-block maps of manual operands. */
static void producer_tile(lg_buf *b, void *ctx)
{
	const struct fill *f = ctx;
	const struct lg_fp8_gemm *g = f->g;
	f->sc->tile(b, f->sc->ctx, true);
	if (lg_fp8_gemm_cluster(g) > 1)
		lg_line(b, "const int ah = ta + rank * %d; // its half of A, multicast", g->bm / 2);
	if (g->manual) {
		lg_comment(b, "the maps the previous launch patched");
		lg_open(b, "if (al && q == 0 && nkt > 0) {");
		lg_line(b, "lg_tmap_acquire(%s);", g->a_tmap);
		lg_line(b, "lg_tmap_acquire(%s);", g->b_tmap);
		lg_close(b);
	}
}

/* A stage of the producer: A's and B's tiles by TMA, or the manual copies. */
static void producer_stage(lg_buf *b, void *ctx)
{
	const struct lg_fp8_gemm *g = ((const struct fill *)ctx)->g;
	if (g->manual) {
		emit_manual_stage(b, g);
		return;
	}
	lg_line(b, "const int r0 = kt * %d;", BK);
	emit_tma_a(b, g);
	lg_line(b, "lg_tma_load_2d(sd + %u, %s, &full[s], r0, tb);", (unsigned)g->bm * ROWB, g->b_tmap);
}

/* The scale warp's tile: the consumers' view of it. */
static void scale_tile(lg_buf *b, void *ctx)
{
	const struct lg_fp8_sched *sc = ((const struct fill *)ctx)->sc;
	sc->tile(b, sc->ctx, false);
}

/* The scale warp's stage: its lanes' copies, each arriving on full[s] when
 * they land. */
static void scale_stage(lg_buf *b, void *ctx)
{
	emit_scale_copy(b, ((const struct fill *)ctx)->g, "lane", 32);
	lg_line(b, "lg_cp_arrive(&full[s]);");
}

/* The scale warp (TMA operands): its lanes copy each stage's scales once
 * released. */
static void emit_scale_warp(lg_buf *b, const struct lg_wgp *p, struct fill *f)
{
	const struct lg_wgp_fill sf = {.ctx = f, .tiles = "tiles", .tile = scale_tile, .stage = scale_stage,
				       .pairs = f->g->pingpong};
	lg_open(b, "else if (warp == 1) {");
	lg_comment(b, "Scale warp: each stage's scales, beside the loads' TMA.");
	lg_wgp_emit_fill(b, p, &sf);
	lg_close(b);
}

/* The producer warpgroup refills each stage once released: one thread by
 * TMA and a warp the scales, or (manual) all 128 threads. */
static void emit_producer(lg_buf *b, const struct lg_fp8_gemm *g, const struct lg_fp8_sched *sc)
{
	const struct lg_wgp p = pipe_of(g);
	struct fill f = {g, sc};
	const struct lg_wgp_fill pf = {.ctx = &f, .tiles = "tiles", .tile = producer_tile, .stage = producer_stage,
				       .sd = true, .expect = !g->manual, .pairs = g->pingpong};
	if (g->manual) {
		lg_wgp_open_producer(b, &p, "Producer: its 128 threads fill each stage once its consumers released it.");
		lg_line(b, "const int q = threadIdx.x & 127;");
		lg_wgp_emit_fill(b, &p, &pf);
	} else {
		lg_wgp_open_producer(b, &p, "Producer: one thread loads each stage once its consumers released it.");
		lg_wgp_open_loader(b, &p);
		lg_wgp_emit_fill(b, &p, &pf);
		lg_close(b);
		emit_scale_warp(b, &p, &f);
	}
	lg_wgp_close_producer(b, &p);
}

/* In stage s (full[s] awaited, not yet released): the scales of this
 * thread's two rows (rl, rl + 8 of the tile; unless `rows` is false: each
 * wave reads its own) and of its columns from the stage's slot. */
static void emit_scales_of(lg_buf *b, const struct lg_fp8_gemm *g, bool rows)
{
	lg_line(b, "const float *const sl = scales + s * %d;", lg_fp8_gemm_slot(g));
	if (rows)
		lg_line(b, "const float sa0 = sl[rl], sa1 = sl[rl + 8];");
	if (!g->b_rowscale) {
		if (lg_fp8_gemm_one_block(g->bn))
			lg_line(b, "const float sb0 = sl[%d];", g->bm);
		else
			lg_line(b, "const float sb0 = sl[%d], sb1 = sl[%d];", g->bm, g->bm + 1);
		return;
	}
	if (lg_fp8_gemm_late_scales(g))
		return; /* read in the promotion */
	lg_comment(b, "B's of columns col and col + 1 (col even): one 8-byte load");
	lg_line(b, "float2 sbv[%d];", g->bn / 8);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int j = 0; j < %d; j++) {", g->bn / 8);
	lg_line(b, "sbv[j] = *(const float2 *)(sl + %d + j * 8 + (lane & 3) * 2);", g->bm);
	lg_close(b);
}

static void emit_scales(lg_buf *b, const struct lg_fp8_gemm *g) { emit_scales_of(b, g, true); }

/* acc += `ps` (the partial sums of a stage) x the scales of each
 * accumulator's row and column; wave w's part of acc from w bn / 2. */
static void emit_promote_wave(lg_buf *b, const struct lg_fp8_gemm *g, const char *ps, int w)
{
	char a[24];
	if (w > 0)
		snprintf(a, sizeof a, "acc[%d + ", w * g->bn / 2);
	else
		snprintf(a, sizeof a, "acc[");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int j = 0; j < %d; j++) {", g->bn / 8);
	if (g->b_rowscale) {
		if (lg_fp8_gemm_late_scales(g)) { /* the stage's slot, released after this */
			lg_line(b, "const float *cs = sl + %d + j * 8 + (lane & 3) * 2;", g->bm);
			lg_line(b, "const float2 cv = *(const float2 *)cs;");
		}
		lg_line(b, "const float c0 = %s.x, c1 = %s.y;", lg_fp8_gemm_late_scales(g) ? "cv" : "sbv[j]",
			lg_fp8_gemm_late_scales(g) ? "cv" : "sbv[j]");
		lg_line(b, "%s4 * j] += %s[4 * j] * (sa0 * c0);", a, ps);
		lg_line(b, "%s4 * j + 1] += %s[4 * j + 1] * (sa0 * c1);", a, ps);
		lg_line(b, "%s4 * j + 2] += %s[4 * j + 2] * (sa1 * c0);", a, ps);
		lg_line(b, "%s4 * j + 3] += %s[4 * j + 3] * (sa1 * c1);", a, ps);
	} else {
		if (lg_fp8_gemm_one_block(g->bn))
			lg_line(b, "const float c = sb0;");
		else
			lg_line(b, "const float c = oc + j * 8 >= split ? sb1 : sb0;");
		lg_line(b, "const float t0 = sa0 * c, t1 = sa1 * c;");
		lg_line(b, "%s4 * j] += %s[4 * j] * t0;", a, ps);
		lg_line(b, "%s4 * j + 1] += %s[4 * j + 1] * t0;", a, ps);
		lg_line(b, "%s4 * j + 2] += %s[4 * j + 2] * t1;", a, ps);
		lg_line(b, "%s4 * j + 3] += %s[4 * j + 3] * t1;", a, ps);
	}
	lg_close(b);
}

static void emit_promote(lg_buf *b, const struct lg_fp8_gemm *g, const char *ps) { emit_promote_wave(b, g, ps, 0); }

/* Issue wave w's four k32 wgmmas of stage `s` into `ps`, committed as one
 * group: the 64 rows w 64.. of this warpgroup's. */
static void emit_mma(lg_buf *b, const struct lg_fp8_gemm *g, const char *prefix, const char *ps, const char *s,
		     int w)
{
	unsigned st = lg_fp8_gemm_stage_bytes(g);
	char o[32];
	plus_wg(o, sizeof o, lg_fp8_gemm_wg_rows(g) * ROWB);
	if (w > 0)
		lg_line(b, "const u64 da = lg_wg_desc(ring + %s * %u%s + %u);", s, st, o, 64u * ROWB * (unsigned)w);
	else
		lg_line(b, "const u64 da = lg_wg_desc(ring + %s * %u%s);", s, st, o);
	lg_line(b, "const u64 db = lg_wg_desc(ring + %s * %u + %u);", s, st, (unsigned)g->bm * ROWB);
	lg_line(b, "lg_wg_fence();");
	lg_comment(b, "k32 steps: 32 bytes of the swizzled rows, 2 descriptor units");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int ks = 0; ks < %d; ks++) {", BK / 32);
	lg_line(b, "%s_wgmma(%s, da + 2 * ks, db + 2 * ks, ks);", prefix, ps);
	lg_close(b);
	lg_line(b, "lg_wg_commit();");
}

/* Wait for stage `s` (`n`: its ring count) and issue its four k32 wgmmas
 * into `ps`, committed as one group (the first wave's with tile.m 256). */
static void emit_issue(lg_buf *b, const struct lg_fp8_gemm *g, const char *prefix, const char *ps, const char *s,
		       const char *n)
{
	const struct lg_wgp p = pipe_of(g);
	lg_wgp_emit_wait_full(b, &p, s, n);
	if (g->manual) {
		lg_comment(b, "the producer's copies, to the async proxy (wgmma)");
		lg_line(b, "lg_fence_proxy_async();");
	}
	emit_mma(b, g, prefix, ps, s, 0);
}

/* Stage s is free again for the producer(s). */
static void emit_release(lg_buf *b, const struct lg_fp8_gemm *g, const char *prefix)
{
	const struct lg_wgp p = pipe_of(g);
	lg_wgp_emit_release(b, &p, prefix, NULL, "s");
}

/* The stage's release once every lane read its scales (late_scales): a
 * __syncwarp before lane 0 arrives. */
static void emit_release_read(lg_buf *b, const struct lg_fp8_gemm *g, const char *prefix)
{
	lg_line(b, "__syncwarp(); // the scales read before lane 0 frees the stage");
	emit_release(b, g, prefix);
}

/* The stage's release and the promotion of `ps`: released first, unless
 * the promotion reads the stage's scales (late_scales). Then lane 0's
 * release must follow every lane's reads of them: a __syncwarp between (the
 * wgmma wait before the promotion is the last point where the warp is known
 * to be converged; tools/emu/fp8_gemm.sh, which runs lanes apart, saw the
 * refilled slot read without it). */
static void emit_promote_released(lg_buf *b, const struct lg_fp8_gemm *g, const char *prefix, const char *ps)
{
	if (!lg_fp8_gemm_late_scales(g))
		emit_release(b, g, prefix);
	emit_promote(b, g, ps);
	if (lg_fp8_gemm_late_scales(g))
		emit_release_read(b, g, prefix);
}

static void emit_deferred(lg_buf *b, const struct lg_fp8_gemm *g, const char *when);

/* One stage of a consumer warpgroup: its wgmmas into `ps`, then the
 * promotion into acc. */
static void emit_stage(lg_buf *b, const struct lg_fp8_gemm *g, const char *prefix, const char *ps)
{
	lg_line(b, "const int s = it %% %d;", g->stages);
	emit_issue(b, g, prefix, ps, "s", "it");
	if (lg_fp8_gemm_waves(g) == 1) {
		if (g->overlap) {
			lg_comment(b, "(no whole group: the tile before's epilogue under its first stage)");
			emit_deferred(b, g, "kt == 0");
		}
		emit_scales(b, g);
		lg_line(b, "lg_wg_wait(0);");
		emit_promote_released(b, g, prefix, ps);
		return;
	}
	/* waves: each awaited and promoted before the next is issued into the
	 * same partial sums (the other warpgroup's keep the tensor cores busy);
	 * the stage released after the last */
	emit_scales_of(b, g, false);
	for (int w = 0; w < lg_fp8_gemm_waves(g); w++) {
		lg_open(b, "{");
		if (w > 0) {
			emit_mma(b, g, prefix, ps, "s", w);
			lg_line(b, "const float sa0 = sl[rl + %d], sa1 = sl[rl + %d];", 64 * w, 64 * w + 8);
		} else {
			lg_line(b, "const float sa0 = sl[rl], sa1 = sl[rl + 8];");
		}
		lg_line(b, "lg_wg_wait(0);");
		bool last = w + 1 == lg_fp8_gemm_waves(g);
		if (last && !lg_fp8_gemm_late_scales(g))
			emit_release(b, g, prefix);
		emit_promote_wave(b, g, ps, w);
		if (last && lg_fp8_gemm_late_scales(g))
			emit_release_read(b, g, prefix);
		lg_close(b);
	}
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
	emit_promote_released(b, g, prefix, cur);
	lg_line(b, "it++;");
	lg_close(b);
}

/* One group of the `ahead` loop: its first stage's wgmmas issued into
 * psum0 (with `deferred`, then the tile before's epilogue under them),
 * then its stages each issuing the next before promoting. */
static void emit_group(lg_buf *b, const struct lg_fp8_gemm *g, const char *prefix, bool deferred)
{
	lg_open(b, "{");
	lg_line(b, "const int s = it %% %d;", g->stages);
	emit_issue(b, g, prefix, "psum0", "s", "it");
	if (deferred) {
		lg_comment(b, "the tile before's epilogue while this tile's first wgmmas run");
		emit_deferred(b, g, NULL);
	}
	lg_close(b);
	for (int j = 0; j < lg_fp8_gemm_group(g); j++)
		emit_stage_ahead(b, g, prefix, j & 1 ? "psum1" : "psum0", j & 1 ? "psum0" : "psum1",
				 j + 1 < lg_fp8_gemm_group(g));
}

/* A tile's reduction loop: one stage at a time, or (ahead) groups of
 * lg_fp8_gemm_group(g) stages over two buffers of partial sums (all but a group's last
 * promotion overlap the next stage's wgmmas; the other consumer
 * warpgroup's fill the rest), then the stages left one at a
 * time. Each group retires its wgmmas before the loop's back edge: ptxas
 * serialises every wgmma of a loop whose back edge a wgmma is still in
 * flight across when other instructions read an accumulator (C7514).
 * With overlap the first group is out of the loop, the tile before's
 * epilogue under its first wgmmas without a branch in the loop (in the
 * loop, behind k4 == 0, it cost more than it hid: bench/fp8-gemm.md). */
static void emit_reduction(lg_buf *b, const struct lg_fp8_gemm *g, const struct lg_fp8_sched *sc, const char *prefix)
{
	if (g->pingpong && sc->count) {
		lg_line(b, "const i64 ot = wg ? pt : two ? pt + tstep : pt; // the pair's other tile (if any)");
		sc->count(b, sc->ctx, "ot", "otn");
		lg_line(b, "const int no = wg || two ? otn : 0; // its stages");
	} else if (g->pingpong) {
		lg_line(b, "const int no = two ? nkt : 0; // the other tile's stages (every tile has nkt)");
	}
	if (g->pingpong) {
		lg_comment(b, "block kt: the pair's stage 2 kt + wg, or after the other tile's last");
		lg_open(b, "for (int kt = 0; kt < nkt; kt++) {");
		lg_line(b, "const int it = pit + kt + (kt + wg < no ? kt + wg : no);");
		emit_stage(b, g, prefix, "psum");
		lg_close(b);
		return;
	}
	if (g->ahead) {
		lg_line(b, "int k4 = 0;");
		if (g->overlap) { /* the first group out of the loop: no branch in it */
			lg_open(b, "if (nkt >= %d) {", lg_fp8_gemm_group(g));
			emit_group(b, g, prefix, true);
			lg_line(b, "k4 = %d;", lg_fp8_gemm_group(g));
			lg_close(b);
		}
		lg_open(b, "for (; k4 + %d <= nkt; k4 += %d) {", lg_fp8_gemm_group(g), lg_fp8_gemm_group(g));
		emit_group(b, g, prefix, false);
		lg_close(b);
	}
	lg_open(b, "for (int kt = %s; kt < nkt; kt++, it++) {", g->ahead ? "k4" : "0");
	emit_stage(b, g, prefix, g->ahead ? "psum0" : "psum");
	lg_close(b);
	if (g->overlap) {
		lg_comment(b, "(no stage: the tile before's epilogue here)");
		emit_deferred(b, g, "nkt == 0");
	}
}

/* The accumulator pairs (row, col), (row, col + 1) to the store, rows
 * below rend. */
static void emit_store_regs(lg_buf *b, const struct lg_fp8_gemm *g, const char *store)
{
	lg_wgp_open_pairs(b, g->bn, "oc");
	lg_wgp_emit_pair(b, store, 0, 0, "rend");
	lg_wgp_emit_pair(b, store, 8, 2, "rend");
	for (int w = 1; w < lg_fp8_gemm_waves(g); w++) { /* wave w: rows 64 w down, acc from w bn / 2 */
		int r = 64 * w, a = w * g->bn / 2;
		lg_wgp_emit_pair(b, store, r, a, "rend");
		lg_wgp_emit_pair(b, store, r + 8, a + 2, "rend");
	}
	lg_close(b);
}

/* Wave w's accumulator pairs (rows 64 w.. of this warpgroup's) to the
 * store, rows below rend; `row` (the wave's first) defined here, not live
 * through the reduction (with it, fp32 at K 2048 spilled a register:
 * ptxas). */
static void emit_store_regs_wave(lg_buf *b, const struct lg_fp8_gemm *g, const char *store, int w)
{
	int a = w * g->bn / 2;
	if (w > 0)
		lg_line(b, "const i64 row = (i64)ta + rl + %d; // wave %d's", 64 * w, w);
	else
		lg_line(b, "const i64 row = (i64)ta + rl;");
	lg_wgp_open_pairs(b, g->bn, "oc");
	lg_wgp_emit_pair(b, store, 0, a, "rend");
	lg_wgp_emit_pair(b, store, 8, a + 2, "rend");
	lg_close(b);
}

static int log2_of(int v)
{
	int n = 0;
	while ((1 << n) < v)
		n++;
	return n;
}

/* This warpgroup's 64 rows (wave `wave`'s with waves), the columns from
 * col0 that a buffer holds, through its buffer eb: pair (r, c) of row r
 * (its rows warp 16 + lane / 4 and + 8) to box c / span's row r, swizzled
 * as the tensor map's (16-byte chunk bits 4.. XOR the row bits 7..), then one thread's TMA stores of the boxes, a bulk
 * group left in flight. One named barrier a tile where the warpgroup's
 * tiles take two buffers in turn, two where they take one (and with waves). */
static void emit_store_part(lg_buf *b, const struct lg_fp8_gemm *g, int wave, int col0)
{
	int w = lg_fp8_gemm_out_span(g), e = g->c_elem, mask = w / 16 - 1, n = lg_fp8_gemm_out_slots(g), j0 = col0 / 8;
	/* tiles stored in two buffers taken in turn: the one barrier before the
	 * stores also frees the next buffer (the stores of the tile before,
	 * a whole tile back, waited for just before it); waves, whose stores
	 * follow each other within a tile, and one buffer: a barrier before
	 * the writes too */
	bool one_bar = lg_fp8_gemm_waves(g) == 1 && n > 1;
	if (lg_fp8_gemm_waves(g) > 1) {
		if (n > 1)
			lg_line(b, "u8 *const eb = epi + (wg * %d + (nt & %d)) * %d;", n, n - 1, lg_fp8_gemm_slot_bytes(g));
		else
			lg_line(b, "u8 *const eb = epi + wg * %d;", lg_fp8_gemm_slot_bytes(g));
		lg_comment(b, "eb free once this warpgroup's stores %d wave%s before have read it", n, n > 1 ? "s" : "");
		lg_line(b, "if ((threadIdx.x & 127) == 0) lg_bulk_wait_read(%d);", n - 1);
	} else if (one_bar) {
		lg_line(b, "u8 *const eb = epi + (wg * 2 + (nt & 1)) * %d;", lg_fp8_gemm_slot_bytes(g));
		lg_comment(b, "eb free: its stores two tiles back read before the last barrier");
	} else {
		if (col0) { /* the second half: eb and rb as the first's */
			lg_comment(b, "the other half: eb free once the first half's stores have read it");
		} else {
			lg_line(b, "u8 *const eb = epi + wg * %d;", lg_fp8_gemm_slot_bytes(g));
			lg_comment(b, "eb free once the stores of this warpgroup's last tile have read it");
		}
		lg_line(b, "if ((threadIdx.x & 127) == 0) lg_bulk_wait_read(0);");
	}
	if (!one_bar)
		lg_line(b, "lg_bar_id(1 + wg, 128);");
	if (!col0)
		lg_line(b, "const u32 rb = (u32)(warp * 16 + (lane >> 2)) * %d; // its row in a box", w);
	lg_line(b, "#pragma unroll");
	if (j0)
		lg_open(b, "for (int j = %d; j < %d; j++) {", j0, j0 + lg_fp8_gemm_out_cols(g) / 8);
	else
		lg_open(b, "for (int j = 0; j < %d; j++) {", lg_fp8_gemm_out_cols(g) / 8);
	lg_comment(b, "x: the pair's byte in its row; lo, hi: its rows' in the boxes");
	if (j0)
		lg_line(b, "const int x = ((j - %d) * 8 + (lane & 3) * 2) * %d;", j0, e);
	else
		lg_line(b, "const int x = (j * 8 + (lane & 3) * 2) * %d;", e);
	lg_line(b, "const u32 lo = (u32)((x >> %d) * %d + (x & %d)) + rb;", log2_of(w), 64 * w, w - 1);
	lg_line(b, "const u32 hi = lo + %d;", 8 * w);
	if (wave > 0)
		lg_line(b, "const float *const v = acc + %d + 4 * j;", wave * g->bn / 2);
	else
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
	if (one_bar) {
		lg_comment(b, "the other buffer free for the next tile: its stores have read it");
		lg_line(b, "if ((threadIdx.x & 127) == 0) lg_bulk_wait_read(0);");
	}
	lg_line(b, "lg_bar_id(1 + wg, 128);");
	lg_open(b, "if ((threadIdx.x & 127) == 0) {");
	char r[48];
	lg_line(b, "const int r0 = %s;", wave_row(r, sizeof r, g, 64 * wave));
	const char *op = g->c_add ? "lg_tma_add_2d" : "lg_tma_store_2d";
	if (col0)
		lg_line(b, "%s(%s, eb, (int)oc + %d, r0);", op, g->c_tmap, col0);
	else
		lg_line(b, "%s(%s, eb, (int)oc, r0);", op, g->c_tmap);
	for (int i = 1; i < lg_fp8_gemm_out_cols(g) * e / w; i++)
		lg_line(b, "%s(%s, eb + %d, (int)oc + %d, r0);", op, g->c_tmap, i * 64 * w, col0 + i * w / e);
	lg_line(b, "lg_bulk_commit();");
	lg_close(b);
	if (n > 1) /* only tiles (waves) stored by TMA: their bulk groups take the buffers in turn */
		lg_line(b, "nt++;");
}

/* This warpgroup's 64 rows (wave `wave`'s) through the epilogue's
 * buffers: at once, or (tile.epilogue 3) in two passes of half the
 * columns each. */
static void emit_store_tma(lg_buf *b, const struct lg_fp8_gemm *g, int wave)
{
	emit_store_part(b, g, wave, 0);
	if (lg_fp8_gemm_half_out(g))
		emit_store_part(b, g, wave, g->bn / 2);
}

static void emit_epilogue(lg_buf *b, const struct lg_fp8_gemm *g, const char *store)
{
	if (!g->c_tmap) {
		lg_comment(b, "Epilogue: accumulator pairs (row, col), (row, col + 1) to the store.");
		emit_store_regs(b, g, store);
		return;
	}
	if (lg_fp8_gemm_waves(g) > 1) {
		lg_comment(b, "Epilogue: each wave's 64 rows by TMA when all are real, else from registers.");
		char r[48];
		for (int w = 0; w < lg_fp8_gemm_waves(g); w++) {
			lg_open(b, "if (%s <= rend) {", wave_row(r, sizeof r, g, 64 * w + 64));
			emit_store_tma(b, g, w);
			lg_close(b);
			lg_open(b, "else {");
			emit_store_regs_wave(b, g, store, w);
			lg_close(b);
		}
		return;
	}
	lg_comment(b, "Epilogue: this warpgroup's rows by TMA when all are real, else from registers.");
	char r[48];
	lg_open(b, "if (%s <= rend) {", wave_row(r, sizeof r, g, 64));
	emit_store_tma(b, g, 0);
	lg_close(b);
	lg_open(b, "else {");
	emit_store_regs(b, g, store);
	lg_close(b);
}

/* With overlap, where `when` holds (a condition; NULL: always): the
 * epilogue of the tile before (pta >= 0: its ta, oc and rend saved as pta,
 * poc, prend) from acc, then acc zeroed for this tile. */
static void emit_deferred(lg_buf *b, const struct lg_fp8_gemm *g, const char *when)
{
	if (when)
		lg_open(b, "if (%s) {", when);
	lg_line(b, "if (pta >= 0) store_before();");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < %d; i++) acc[i] = 0.0f;", g->bn / 2 * lg_fp8_gemm_waves(g));
	if (when)
		lg_close(b);
}

/* With overlap, before the tile loop: store_before(), the epilogue of the
 * tile before (its ta, oc and rend saved as pta, poc, prend) from acc, a
 * lambda the loop calls where it is due (inlined: ptxas -v shows no frame
 * for acc). */
static void emit_store_before(lg_buf *b, const struct lg_fp8_gemm *g, const char *store)
{
	lg_open(b, "const auto store_before = [&]() {");
	lg_line(b, "const int ta = pta;");
	lg_line(b, "const i64 oc = poc, rend = prend;");
	if (!g->c_tmap || lg_fp8_gemm_waves(g) == 1)
		lg_line(b, "const i64 row = (i64)ta + rl;");
	emit_epilogue(b, g, store);
	lg_close_with(b, "};");
}

void lg_fp8_gemm_emit_body(lg_buf *b, const struct lg_fp8_gemm *g, const struct lg_fp8_sched *sc,
			   const char *prefix, const char *store)
{
	int regs = g->bn / 2, wr = 64 * lg_fp8_gemm_waves(g);
	emit_prologue(b, g, sc);
	emit_producer(b, g, sc);
	lg_comment(b, "Consumers: warpgroup wg, rows %d wg.. of each tile.", wr);
	if (g->ahead) {
		lg_line(b, "float psum0[%d], psum1[%d];", regs, regs);
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int i = 0; i < %d; i++) psum0[i] = psum1[i] = 0.0f;", regs);
	} else {
		lg_wgp_emit_acc(b, "psum", regs);
	}
	if (g->pingpong)
		lg_line(b, "const int rl = warp * 16 + (lane >> 2); // rows rl, rl + 8 (+ 64 w) of its tiles");
	else if (lg_fp8_gemm_waves(g) > 1)
		lg_line(b, "const int rl = wg * %d + warp * 16 + (lane >> 2); // rows rl, rl + 8 (+ 64 w) of a tile", wr);
	else
		lg_line(b, "const int rl = wg * 64 + warp * 16 + (lane >> 2); // this thread's rows rl, rl + 8 of a tile");
	if (g->pingpong)
		lg_line(b, "int pit = 0; // the ring's count at a pair's first stage");
	else
		lg_line(b, "int it = 0;");
	if (g->c_tmap && lg_fp8_gemm_waves(g) > 1 && lg_fp8_gemm_out_slots(g) > 1)
		lg_line(b, "int nt = 0; // waves stored by TMA: the epilogue's buffers in turn");
	else if (g->c_tmap && lg_fp8_gemm_out_slots(g) > 1)
		lg_line(b, "int nt = 0; // tiles stored by TMA: the epilogue's buffer alternates");
	if (g->overlap) {
		lg_line(b, "float acc[%d];", regs * lg_fp8_gemm_waves(g));
		lg_line(b, "int pta = -1; // the tile before's epilogue is due: its ta, oc, rend");
		lg_line(b, "i64 poc = 0, prend = 0;");
		emit_store_before(b, g, store);
	}
	open_tiles(b, g);
	sc->tile(b, sc->ctx, false);
	/* (else each wave's stores from registers define it) */
	if (!g->overlap && (!g->c_tmap || lg_fp8_gemm_waves(g) == 1))
		lg_line(b, "const i64 row = (i64)ta + rl;");
	if (!g->overlap)
		lg_wgp_emit_acc(b, "acc", regs * lg_fp8_gemm_waves(g));
	if (!lg_fp8_gemm_one_block(g->bn) && !g->b_rowscale) {
		lg_comment(b, "columns from split on take B's second tile scale");
		lg_line(b, "const i64 split = ((oc >> 7) + 1) * 128;");
	}
	emit_reduction(b, g, sc, prefix);
	if (g->overlap) {
		lg_line(b, "pta = ta;");
		lg_line(b, "poc = oc;");
		lg_line(b, "prend = rend;");
	} else {
		emit_epilogue(b, g, store);
	}
	if (g->pingpong)
		lg_line(b, "pit += nkt + no;");
	lg_close(b);
	if (g->overlap)
		lg_line(b, "if (pta >= 0) store_before(); // the last tile's");
	if (g->c_tmap)
		lg_line(b, "if ((threadIdx.x & 127) == 0) lg_bulk_wait(0); // the stores done before the CTA ends");
	const struct lg_wgp p = pipe_of(g);
	lg_wgp_emit_done(b, &p);
}
