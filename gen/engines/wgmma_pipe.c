/*
 * wgmma_pipe.c - the sm_90a GEMMs' one TMA / mbarrier / wgmma pipeline
 * (wgmma_pipe.h says what it writes and why).
 */
#include "wgmma_pipe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family.h"

/* Items 0..n-1 (`pre` index `suf`), `per` a line: each line is `lead`, then
 * `first` (the first line) or as many spaces, the items, then `last` (the
 * last line) or `more`. False (b failed) when out of memory. */
static bool emit_list(lg_buf *b, int n, int per, const char *pre, const char *suf, const char *lead,
		      const char *first, const char *last, const char *more)
{
	for (int i = 0; i < n; i += per) {
		lg_buf l;
		lg_buf_init(&l);
		for (int j = i; j < i + per && j < n; j++) {
			if (j > i)
				lg_emit(&l, ", ");
			lg_emit(&l, "%s%d%s", pre, j, suf);
		}
		char *t = lg_buf_finish(&l, NULL);
		if (!t) {
			b->failed = true;
			return false;
		}
		lg_line(b, "%s%*s%s%s", lead, (int)strlen(first), i ? "" : first, t, i + per >= n ? last : more);
		free(t);
	}
	return true;
}

void lg_wgp_emit_mma(lg_buf *b, const char *name, int n, int k, const char *type, const char *trans, bool add)
{
	int regs = n / 2;
	char params[80];
	snprintf(params, sizeof params, "float acc[%d], u64 da, u64 db%s", regs, add ? ", int add" : "");
	lg_line(b, "static __device__ __forceinline__ void");
	lg_head(b, name, params);
	lg_open(b, "{");
	lg_line(b, "asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%d, 0;\\n\"", regs + 2);
	lg_line(b, "\t\"wgmma.mma_async.sync.aligned.m64n%dk%d.f32.%s.%s\\n\"", n, k, type, type);
	/* the accumulators' names in the instruction, 12 a line; their operands, 5 a line */
	if (!emit_list(b, regs, 12, "%", "", "\t\"", "{", "},\"", ",\""))
		return;
	lg_line(b, "\t\" %%%d, %%%d, p, 1, 1%s%s;\\n}\"", regs, regs + 1, trans ? ", " : "", trans ? trans : "");
	if (!emit_list(b, regs, 5, "\"+f\"(acc[", "])", "\t", ": ", "", ","))
		return;
	lg_line(b, "\t: \"l\"(da), \"l\"(db), \"r\"(%s));", add ? "add" : "1");
	lg_close(b);
}

void lg_wgp_emit_helpers(lg_buf *b, const struct lg_wgp *p, const char *prefix)
{
	if (p->cluster < 2)
		return;
	char name[64];
	snprintf(name, sizeof name, "%s_release", prefix);
	lg_comment(b, "A consumer warp releases a stage: on both CTAs' barriers (both producers refill it).");
	lg_line(b, "static __device__ __forceinline__ void");
	lg_head(b, name, "u64 *bar");
	lg_open(b, "{");
	lg_line(b, "for (u32 q = 0; q < %d; q++) lg_mbar_arrive_cta(bar, q);", p->cluster);
	lg_close(b);
}

void lg_wgp_emit_hold(lg_buf *b, const char *acc, int regs)
{
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < %d; i++) asm volatile(\"\" : \"+f\"(%s[i]) :: \"memory\");", regs, acc);
}

void lg_wgp_emit_head(lg_buf *b, const struct lg_spec *s, const struct lg_plan *pl, const char *entry,
		      const char *what, int cluster, int threads)
{
	lg_section(b, entry, what);
	if (cluster > 1)
		lg_emit_signature_tmaps(b, s, pl, entry, "__cluster_dims__(%d, 1, 1) __launch_bounds__(%d, 1)", cluster,
					threads);
	else
		lg_emit_signature_tmaps(b, s, pl, entry, "__launch_bounds__(%d, 1)", threads);
	lg_open(b, "{");
	lg_line(b, "extern __shared__ __align__(1024) u8 smem[];");
}

/* The ring at smem's first 1024-byte boundary, as an offset from smem: a
 * pointer made through an integer (generic) would hide the shared space from
 * NVVM, and every scale read and epilogue store through it would be a
 * generic ld/st (LD.E on the long scoreboard) instead of LDS/STS. */
void lg_wgp_emit_ring(lg_buf *b) { lg_line(b, "u8 *const ring = smem + ((1024u - (lg_smem_addr(smem) & 1023u)) & 1023u);"); }

void lg_wgp_emit_barriers(lg_buf *b, const struct lg_wgp *p, const char *at)
{
	lg_line(b, "u64 *const full = (u64 *)(%s), *const empty = full + %d;", at, p->stages);
}

void lg_wgp_emit_roles(lg_buf *b)
{
	lg_line(b, "const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;");
}

void lg_wgp_emit_init(lg_buf *b, const struct lg_wgp *p, void (*first)(lg_buf *b, void *ctx), void *ctx)
{
	lg_open(b, "if (threadIdx.x == 0) {");
	if (first)
		first(b, ctx);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int s = 0; s < %d; s++) {", p->stages);
	if (p->full_why)
		lg_line(b, "lg_mbar_init(&full[s], %d); // %s", p->full_count, p->full_why);
	else
		lg_line(b, "lg_mbar_init(&full[s], %d);", p->full_count);
	if (p->readers)
		lg_line(b, "lg_mbar_init(&empty[s], %d); // its warpgroup's warps%s", 4 * p->readers * p->cluster,
			p->cluster > 1 ? " (the cluster's)" : "");
	else
		lg_line(b, "lg_mbar_init(&empty[s], %d); // every consumer warp%s", 4 * p->consumers * p->cluster,
			p->cluster > 1 ? " of the cluster" : "");
	lg_close(b);
	lg_line(b, "lg_mbar_fence_init();");
	lg_close(b);
	if (p->cluster > 1)
		lg_line(b, "lg_cluster_sync(); // the cluster's barriers ready before any multicast");
	else
		lg_line(b, "__syncthreads();");
}

void lg_wgp_open_tiles(lg_buf *b, const struct lg_wgp *p, const char *tiles)
{
	if (p->cluster > 1)
		lg_open(b, "for (i64 tile = blockIdx.x / %d; tile < %s; tile += gridDim.x / %d) {", p->cluster, tiles,
			p->cluster);
	else
		lg_open(b, "for (i64 tile = blockIdx.x; tile < %s; tile += gridDim.x) {", tiles);
}

void lg_wgp_open_tile_pairs(lg_buf *b, const struct lg_wgp *p, const char *tiles)
{
	if (p->cluster > 1) {
		lg_line(b, "const i64 tstep = gridDim.x / %d;", p->cluster);
		lg_open(b, "for (i64 pt = blockIdx.x / %d; pt < %s; pt += 2 * tstep) {", p->cluster, tiles);
	} else {
		lg_line(b, "const i64 tstep = gridDim.x;");
		lg_open(b, "for (i64 pt = blockIdx.x; pt < %s; pt += 2 * tstep) {", tiles);
	}
}

void lg_wgp_emit_group(lg_buf *b, const char *tile, const char *rtiles, int64_t ct)
{
	const long long g = (long long)(ct * LG_WGP_RASTER);
	lg_line(b, "const i64 first = %s / %lld * %d, r = %s %% %lld;", tile, g, LG_WGP_RASTER, tile, g);
	lg_line(b, "const i64 gs = %s - first < %d ? %s - first : %d;", rtiles, LG_WGP_RASTER, rtiles, LG_WGP_RASTER);
}

void lg_wgp_emit_raster(lg_buf *b, int64_t ct, int bm, int bn, int cl, bool producer)
{
	char col[96];
	lg_comment(b, "Grouped raster: %d row tiles at a time sweep the columns.", LG_WGP_RASTER);
	lg_wgp_emit_group(b, "tile", "rtiles", ct);
	lg_line(b, "const int ta = (int)((first + r %% gs) * %d);", bm);
	lg_wgp_col(col, sizeof col, "r / gs", bn, cl);
	if (producer)
		lg_line(b, "const int tb = (int)(%s);", col);
	else
		lg_line(b, "const i64 oc = %s;", col);
}

const char *lg_wgp_col(char *out, size_t size, const char *base, int bn, int cl)
{
	if (cl > 1)
		snprintf(out, size, "(%s) * %d + rank * %d", base, bn * cl, bn);
	else
		snprintf(out, size, "(%s) * %d", base, bn);
	return out;
}

void lg_wgp_open_producer(lg_buf *b, const struct lg_wgp *p, const char *note)
{
	lg_open(b, "if (wg == %d) {", p->consumers);
	lg_comment(b, "%s", note);
	if (p->consumers > 1)
		lg_line(b, "lg_setmaxnreg_dec(%d);", p->dec);
}

void lg_wgp_emit_leave(lg_buf *b, const struct lg_wgp *p)
{
	if (p->cluster > 1)
		lg_line(b, "lg_cluster_sync(); // the other CTA is done with this one's stages");
	lg_line(b, "return;");
}

void lg_wgp_close_producer(lg_buf *b, const struct lg_wgp *p)
{
	lg_wgp_emit_leave(b, p);
	lg_close(b);
	if (p->consumers > 1)
		lg_line(b, "lg_setmaxnreg_inc(%d);", p->inc);
}

void lg_wgp_open_loader(lg_buf *b, const struct lg_wgp *p) { lg_open(b, "if (threadIdx.x == %d) {", 128 * p->consumers); }

void lg_wgp_emit_wait_empty(lg_buf *b, const struct lg_wgp *p, const char *ctr)
{
	int S = p->stages;
	lg_line(b, "const int s = %s %% %d;", ctr, S);
	lg_line(b, "if (%s >= %d) lg_mbar_wait(&empty[s], ((%s / %d) - 1) & 1);", ctr, S, ctr, S);
}

/* The stage `it` once free: sd, the bytes expected, what lands in it. */
static void fill_stage(lg_buf *b, const struct lg_wgp *p, const struct lg_wgp_fill *f, const char *ctr)
{
	lg_wgp_emit_wait_empty(b, p, ctr);
	if (f->sd)
		lg_line(b, "u8 *const sd = %s + s * %u;", f->ring ? f->ring : "ring", p->stage_bytes);
	if (f->expect)
		lg_line(b, "lg_mbar_expect(&full[s], %uu);", p->stage_bytes);
	f->stage(b, f->ctx);
}

/* lg_wgp_emit_fill's pairs: the pair's stage j is block j / 2 of its tile
 * j & 1, where that tile is and has it; the pair is done when both tiles
 * in a row have not (one loop, rolled: with the tiles' loop unrolled, the
 * compiler kept both tiles' 64-bit coordinates across the blocks, more than
 * the producer's 40 registers: ptxas, the K 2048 forward spilled 12-20
 * bytes). */
static void fill_pairs(lg_buf *b, const struct lg_wgp *p, const struct lg_wgp_fill *f)
{
	const char *k = f->k ? f->k : "kt";
	lg_line(b, "int it = 0;");
	lg_wgp_open_tile_pairs(b, p, f->tiles);
	lg_line(b, "int idle = 0; // the pair's tiles in a row without their block j / 2");
	lg_open(b, "for (int j = 0; idle < 2; j++) {");
	lg_line(b, "const int %s = j >> 1;", k);
	lg_line(b, "const i64 tile = pt + (j & 1) * tstep;");
	lg_open(b, "if (tile >= %s) {", f->tiles);
	lg_line(b, "idle++;");
	lg_line(b, "continue;");
	lg_close(b);
	if (f->tile)
		f->tile(b, f->ctx);
	lg_open(b, "if (%s >= n%s) {", k, k);
	lg_line(b, "idle++;");
	lg_line(b, "continue;");
	lg_close(b);
	lg_line(b, "idle = 0;");
	fill_stage(b, p, f, "it");
	lg_line(b, "it++;");
	lg_close(b);
	lg_close(b);
}

void lg_wgp_emit_fill(lg_buf *b, const struct lg_wgp *p, const struct lg_wgp_fill *f)
{
	if (f->pairs && f->tiles) {
		fill_pairs(b, p, f);
		return;
	}
	if (f->tiles) {
		lg_line(b, "int it = 0;");
		lg_wgp_open_tiles(b, p, f->tiles);
	}
	const char *k = f->k ? f->k : "kt";
	if (f->tile)
		f->tile(b, f->ctx);
	lg_open(b, "for (int %s = 0; %s < n%s; %s++%s) {", k, k, k, k, f->tiles ? ", it++" : "");
	fill_stage(b, p, f, f->tiles ? "it" : k);
	lg_close(b);
	if (f->tiles)
		lg_close(b);
}

void lg_wgp_emit_done(lg_buf *b, const struct lg_wgp *p)
{
	if (p->cluster > 1)
		lg_line(b, "lg_cluster_sync(); // the other CTA's arrivals on this one's barriers are done");
}

void lg_wgp_emit_wait_full(lg_buf *b, const struct lg_wgp *p, const char *s, const char *n)
{
	lg_line(b, "lg_mbar_wait(&full[%s], (%s / %d) & 1);", s, n, p->stages);
}

void lg_wgp_emit_release(lg_buf *b, const struct lg_wgp *p, const char *prefix, const char *when, const char *s)
{
	char cond[96];
	snprintf(cond, sizeof cond, "%s%slane == 0", when ? when : "", when ? " && " : "");
	if (p->cluster > 1 && !prefix) {
		lg_open(b, "if (%s) {", cond);
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (u32 r = 0; r < %d; r++) lg_mbar_arrive_cta(&empty[%s], r);", p->cluster, s);
		lg_close(b);
	} else if (p->cluster > 1)
		lg_line(b, "if (%s) %s_release(&empty[%s]);", cond, prefix, s);
	else
		lg_line(b, "if (%s) lg_mbar_arrive(&empty[%s]);", cond, s);
}

void lg_wgp_emit_acc(lg_buf *b, const char *name, int n)
{
	lg_line(b, "float %s[%d];", name, n);
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < %d; i++) %s[i] = 0.0f;", n, name);
}

void lg_wgp_open_pairs(lg_buf *b, int n, const char *col0)
{
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int j = 0; j < %d; j++) {", n / 8);
	lg_line(b, "const i64 col = %s + j * 8 + (lane & 3) * 2;", col0);
	lg_line(b, "const float *const v = acc + 4 * j;");
}

void lg_wgp_emit_pair(lg_buf *b, const char *store, int r, int i, const char *rend)
{
	char row[24];
	if (r)
		snprintf(row, sizeof row, "row + %d", r);
	else
		snprintf(row, sizeof row, "row");
	if (rend)
		lg_line(b, "if (%s < %s) %s%s, col, v[%d], v[%d]);", row, rend, store, row, i, i + 1);
	else
		lg_line(b, "%s%s, col, v[%d], v[%d]);", store, row, i, i + 1);
}
