/*
 * gemm_emit.c - the tensor-core GEMM emitter (gemm_emit.h says what it
 * writes and why).
 *
 * Fragment layouts of mma.m16n8k16 (g = lane / 4, q = lane % 4):
 *   A (16 x 16, row-major): a0 (g, 2q..2q+1), a1 (g+8, 2q..), a2 (g, 2q+8..),
 *     a3 (g+8, 2q+8..);
 *   B (16 x 8, column-major): b0 (k 2q..2q+1, n g), b1 (k 2q+8.., n g);
 *   C: c0, c1 (g, 2q..2q+1), c2, c3 (g+8, 2q..).
 * One ldmatrix .x4 fills A's four registers, or the two of two adjacent n8
 * tiles of B. Lane l addresses row l % 8 of matrix j = l / 8; for A matrix
 * j covers rows 8 (j & 1) and reduction 8 (j >> 1), for B output 8 (j >> 1)
 * and reduction 8 (j & 1). A K-major tile is [output][reduction] in shared
 * memory (plain ldmatrix), an MN-major one [reduction][output] (.trans).
 */
#include "gemm_emit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wgmma_pipe.h"

static int esize(const struct lg_gemm_operand *o) { return o->fp32 ? 4 : 2; }

/* Whether an expression the caller gives is the literal 0 (its term left out). */
static bool is_zero(const char *expr) { return strcmp(expr, "0") == 0; }

/* nkt: the reduction tiles kt0 .. kt1 of the CTA. */
static void emit_nkt(lg_buf *b, const char *kt0, const char *kt1)
{
	if (is_zero(kt0))
		lg_line(b, "const int nkt = (int)(%s);", kt1);
	else
		lg_line(b, "const int nkt = (int)(%s - %s);", kt1, kt0);
}

/* Shared tile of an operand: rows x row bytes. out: its output extent in
 * the CTA tile (bm or bn). */
static int tile_rows(const struct lg_gemm *g, const struct lg_gemm_operand *o, int out)
{
	return o->mn_major ? g->t.bk : out;
}
static int tile_rb(const struct lg_gemm *g, const struct lg_gemm_operand *o, int out)
{
	return (o->mn_major ? out : g->t.bk) * esize(o);
}
/* Planes of an operand's shared tile: a bf16 A of `terms` terms (made by
 * the kernel, or split from fp32: lg_gemm.convert) has one a term, one
 * after another. */
static int planes(const struct lg_gemm *g, const struct lg_gemm_operand *o)
{
	return o == &g->a && !o->fp32 && g->terms > 1 ? g->terms : 1;
}
/* Bytes of one plane of an operand's shared tile. */
static unsigned plane_bytes(const struct lg_gemm *g, const struct lg_gemm_operand *o, int out)
{
	return (unsigned)(tile_rows(g, o, out) * tile_rb(g, o, out));
}
static unsigned tile_bytes(const struct lg_gemm *g, const struct lg_gemm_operand *o, int out)
{
	return plane_bytes(g, o, out) * (unsigned)planes(g, o);
}

/* The device function that splits an fp32 pair of A into its terms. */
static const char *split_fn(const struct lg_gemm *g) { return g->tf32 ? "lg_split_tf32" : "lg_split_bf16x2"; }

int lg_gemm_threads(const struct lg_gemm_tile *t) { return 32 * t->warps_m * t->warps_n; }

void lg_gemm_tile_from_spec(const struct lg_spec *s, const struct lg_gemm_tile_keys *k, struct lg_gemm_tile *t)
{
	const int key[6] = {k->bm, k->bn, k->bk, k->stages, k->warps_m, k->warps_n};
	int *const field[6] = {&t->bm, &t->bn, &t->bk, &t->stages, &t->warps_m, &t->warps_n};
	for (int i = 0; i < 6; i++)
		if (key[i] >= 0 && lg_spec_has(s, key[i]))
			*field[i] = (int)lg_spec_int(s, key[i]);
}

/* Warps for a tile the spec sized itself (unless it names them too): a
 * power of two, up to 4 across its columns and 8 in all, each warp's share
 * of rows and columns a multiple of 16 (the heuristic's tiles: 2x4, 4x2,
 * 4x1). */
void lg_gemm_fit_warps(struct lg_gemm_tile *t)
{
	int wn = 4;
	while (wn > 1 && (wn > t->bn / 32 || t->bn % wn != 0 || (t->bn / wn) % 16 != 0))
		wn /= 2;
	int wm = 8 / wn > 4 ? 4 : 8 / wn;
	while (wm > 1 && (t->bm % wm != 0 || (t->bm / wm) % 16 != 0))
		wm /= 2;
	t->warps_m = wm, t->warps_n = wn;
}

unsigned lg_gemm_smem_limit(const struct lg_target *t)
{
	return t->sm >= 90 ? 227u * 1024u : t->sm == 80 ? 163u * 1024u : 99u * 1024u;
}

/* With convert: g as the mma sees it, A its bf16 planes. */
static struct lg_gemm planes_view(const struct lg_gemm *g)
{
	struct lg_gemm v = *g;
	v.a.fp32 = false;
	v.convert = false;
	return v;
}

unsigned lg_gemm_smem(const struct lg_gemm *g)
{
	unsigned ring = (unsigned)g->t.stages * (tile_bytes(g, &g->a, g->t.bm) + tile_bytes(g, &g->b, g->t.bn));
	if (!g->convert)
		return ring;
	struct lg_gemm v = planes_view(g);
	return ring + 2u * tile_bytes(&v, &v.a, v.t.bm);
}

static bool rb_ok(int rb) { return rb == 64 || (rb >= 128 && rb % 128 == 0); }

const char *lg_gemm_tile_problem(const struct lg_gemm *g)
{
	const struct lg_gemm_tile *t = &g->t;
	if (t->warps_m < 1 || t->warps_n < 1 || lg_gemm_threads(t) > 1024)
		return "1 to 32 warps";
	if (t->bm % t->warps_m != 0 || (t->bm / t->warps_m) % 16 != 0)
		return "tile.m / tile.warps_m a multiple of 16";
	if (t->bn % t->warps_n != 0 || (t->bn / t->warps_n) % 16 != 0)
		return "tile.n / tile.warps_n a multiple of 16";
	if (t->bk % 16 != 0)
		return "tile.k a multiple of 16";
	if (!rb_ok(tile_rb(g, &g->a, t->bm)) || !rb_ok(tile_rb(g, &g->b, t->bn)))
		return "shared tile rows of 64 bytes or a multiple of 128 (tile.k 32 or 64; tile.m, tile.n "
		       "multiples of 32)";
	if (t->stages < 2 || t->stages > 8)
		return "tile.stages 2 to 8";
	if (g->tf32 && g->terms != 2)
		return "an A rounded to tf32 as 2 bf16 terms";
	if (planes(g, &g->a) > 1 && g->a.ptr)
		return "a bf16 A of several terms made by the kernel (lg_gemm_emit_mainloop_fill)";
	if (g->convert) {
		struct lg_gemm v = planes_view(g);
		if (!g->a.fp32 || !g->a.ptr)
			return "an A split in shared memory loaded and fp32";
		if (!rb_ok(tile_rb(&v, &v.a, t->bm)))
			return "bf16 planes of A with rows of 64 bytes or a multiple of 128";
		if (t->stages < 3)
			return "tile.stages 3 to 8 (dy's split takes one stage)";
	}
	return NULL;
}

/* The stage loader of one operand: its tile at output o0, reduction r0. */
static void emit_loader(lg_buf *b, const struct lg_gemm *g, const struct lg_gemm_operand *o, int out,
			const char *prefix)
{
	int rows = tile_rows(g, o, out), rb = tile_rb(g, o, out), ch = o->chunk;
	int cpr = rb / ch, total = rows * cpr, threads = lg_gemm_threads(&g->t);
	int epc = ch / esize(o); /* elements a chunk */
	int iters = (total + threads - 1) / threads;
	lg_comment(b, "Operand %s: %s %s, a [%d][%d bytes] shared tile (swizzled), %d-byte cp.async", o->name,
		   o->fp32 ? "fp32" : "bf16", o->mn_major ? "[reduction][output]" : "[output][reduction]", rows,
		   rb, ch);
	lg_comment(b, "copies of the elements at output o0.., reduction r0.. (zeros past oext, rext).");
	char params[256];
	snprintf(params, sizeof params, "u8 *s, const u8 *g, i64 o0, i64 r0, i64 oext, i64 rext, i64 ld");
	char name[64];
	snprintf(name, sizeof name, "%s_load_%s", prefix, o->name);
	lg_line(b, "static __device__ __forceinline__ void");
	lg_head(b, name, params);
	lg_open(b, "{");
	/* Narrow copies (4 or 8 bytes: rows not 16-byte multiples, e.g. dy of
	 * router_gemm at 97 experts) are many a thread; fully unrolled, ptxas
	 * keeps their 64-bit addresses live through the mainloop and spills
	 * (router_gemm_bwd_h1000_e97_bf16x3_sm80: dx 128 registers, 152 bytes
	 * spilled at 8 copies a thread; dw 255, 76 at 32). Unrolled by 4: dx
	 * 126 registers, dw 167, no spill. */
	if (ch < 16 && iters > 4)
		lg_line(b, "#pragma unroll 4 // narrow copies, many a thread: fully unrolled, they spill");
	else
		lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < %d; i++) {", iters);
	lg_line(b, "const int c = threadIdx.x + i * %d;", threads);
	if (total % threads != 0)
		lg_line(b, "if (c >= %d) break;", total);
	lg_line(b, "const int row = c / %d, cc = c %% %d;", cpr, cpr);
	if (o->mn_major) {
		lg_line(b, "const i64 r = r0 + row, o = o0 + cc * %d;", epc);
		lg_line(b, "const bool ok = o < oext && r < rext;");
		lg_line(b, "const u8 *src = ok ? g + (r * ld + o) * %d : g;", esize(o));
	} else {
		lg_line(b, "const i64 o = o0 + row, r = r0 + cc * %d;", epc);
		lg_line(b, "const bool ok = o < oext && r < rext;");
		lg_line(b, "const u8 *src = ok ? g + (o * ld + r) * %d : g;", esize(o));
	}
	lg_line(b, "lg_cp%d(s + lg_swz(row, cc * %d, %d), src, ok ? %du : 0u);", ch, ch, rb, ch);
	lg_close(b);
	lg_close(b);
}

static void emit_frag_a(lg_buf *b, const struct lg_gemm *g, const char *prefix);
static void emit_frag_b(lg_buf *b, const struct lg_gemm *g, const char *prefix);
static void emit_mma(lg_buf *b, const struct lg_gemm *g, const char *prefix);

/* The store of a produced A (a.ptr NULL): 8 values of one row at col.. (col a
 * multiple of 8) into a stage, in the layout the fragment loads read. */
static void emit_store_a(lg_buf *b, const struct lg_gemm *g, const char *prefix)
{
	int rb = tile_rb(g, &g->a, g->t.bm);
	char name[64];
	snprintf(name, sizeof name, "%s_st_a", prefix);
	if (g->a.mn_major)
		lg_comment(b, "Operand a, produced by the kernel: 8 values of reduction row `row` at output col..");
	else
		lg_comment(b, "Operand a, produced by the kernel: 8 values of row `row` at reduction col.. (a multiple");
	lg_comment(b, "%s a [%d][%d bytes] stage, as %s (swizzled as a loaded tile).",
		   g->a.mn_major ? "(a multiple of 8) of" : "of 8) of", tile_rows(g, &g->a, g->t.bm), rb,
		   g->a.fp32 ? "fp32" : "bf16");
	lg_line(b, "static __device__ __forceinline__ void");
	lg_head(b, name, "u8 *s, int row, int col, const float v[8]");
	lg_open(b, "{");
	if (g->a.fp32) {
		lg_line(b, "*(float4 *)(s + lg_swz(row, col * 4, %d)) = make_float4(v[0], v[1], v[2], v[3]);", rb);
		lg_line(b, "*(float4 *)(s + lg_swz(row, col * 4 + 16, %d)) = make_float4(v[4], v[5], v[6], v[7]);",
			rb);
	} else if (planes(g, &g->a) == 1) {
		lg_line(b, "*(uint4 *)(s + lg_swz(row, col * 2, %d)) = make_uint4(lg_pack_bf16x2(v[0], v[1]),", rb);
		lg_line(b, "	lg_pack_bf16x2(v[2], v[3]), lg_pack_bf16x2(v[4], v[5]), lg_pack_bf16x2(v[6], v[7]));");
	} else {
		lg_comment(b, "fp32 values split into %d bf16 terms, term e into plane e (%u bytes apart)", g->terms,
			   plane_bytes(g, &g->a, g->t.bm));
		lg_line(b, "u32 t[4][%d];", g->terms);
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int j = 0; j < 4; j++) %s(t[j], %d, v[2 * j], v[2 * j + 1]);", split_fn(g), g->terms);
		lg_line(b, "const u32 at = lg_swz(row, col * 2, %d);", rb);
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int e = 0; e < %d; e++)", g->terms);
		lg_line(b, "\t*(uint4 *)(s + e * %u + at) = make_uint4(t[0][e], t[1][e], t[2][e], t[3][e]);",
			plane_bytes(g, &g->a, g->t.bm));
	}
	lg_close(b);
}

/* convert: <prefix>_cvt_a, the CTA's split of an fp32 A stage into bf16
 * planes (by <prefix>_st_a of the planes' view). */
static void emit_convert(lg_buf *b, const struct lg_gemm *g, const char *prefix)
{
	struct lg_gemm v = planes_view(g);
	emit_store_a(b, &v, prefix);
	int rows = tile_rows(g, &g->a, g->t.bm), rb = tile_rb(g, &g->a, g->t.bm), cpr = rb / 32;
	int groups = rows * cpr, threads = lg_gemm_threads(&g->t), iters = (groups + threads - 1) / threads;
	char name[64];
	snprintf(name, sizeof name, "%s_cvt_a", prefix);
	lg_comment(b, "A's fp32 stage s ([%d][%d bytes]) split into the bf16 planes at d: groups of 8 values", rows,
		   rb);
	lg_comment(b, "along a row, %d a row, %d a thread.", cpr, iters);
	lg_line(b, "static __device__ __forceinline__ void");
	lg_head(b, name, "u8 *d, const u8 *s");
	lg_open(b, "{");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < %d; i++) {", iters);
	lg_line(b, "const int c = threadIdx.x + i * %d;", threads);
	if (groups % threads != 0)
		lg_line(b, "if (c >= %d) break;", groups);
	lg_line(b, "const int row = c / %d, col = c %% %d * 8;", cpr, cpr);
	lg_line(b, "const float4 lo = *(const float4 *)(s + lg_swz(row, col * 4, %d));", rb);
	lg_line(b, "const float4 hi = *(const float4 *)(s + lg_swz(row, col * 4 + 16, %d));", rb);
	lg_line(b, "const float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};");
	lg_line(b, "%s_st_a(d, row, col, v);", prefix);
	lg_close(b);
	lg_close(b);
}

void lg_gemm_emit_loaders(lg_buf *b, const struct lg_gemm *g, const char *prefix)
{
	if (g->a.ptr)
		emit_loader(b, g, &g->a, g->t.bm, prefix);
	else
		emit_store_a(b, g, prefix);
	emit_loader(b, g, &g->b, g->t.bn, prefix);
	if (g->convert)
		emit_convert(b, g, prefix);
	struct lg_gemm v = g->convert ? planes_view(g) : *g;
	emit_frag_a(b, &v, prefix);
	emit_frag_b(b, g, prefix);
	emit_mma(b, g, prefix);
}

/* A's fragments of the warp's m16 tiles at reduction step ks: af[mi][term][4]. */
static void emit_frag_a(lg_buf *b, const struct lg_gemm *g, const char *prefix)
{
	const struct lg_gemm_operand *o = &g->a;
	int rb = tile_rb(g, o, g->t.bm), wmt = g->t.bm / g->t.warps_m, mi_n = wmt / 16;
	char name[64], params[128];
	snprintf(name, sizeof name, "%s_frag_a", prefix);
	snprintf(params, sizeof params, "u32 af[%d][%d][4], const u8 *ca, int ks, int wm, int lane", mi_n, g->terms);
	lg_comment(b, "A's fragments of warp row wm's %d m16 tiles at reduction step ks (%d term%s).", mi_n, g->terms,
		   g->terms > 1 ? "s" : "");
	lg_line(b, "static __device__ __forceinline__ void");
	lg_head(b, name, params);
	lg_open(b, "{");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int mi = 0; mi < %d; mi++) {", mi_n);
	if (!o->fp32) {
		if (o->mn_major) {
			lg_line(b, "const int row = ks + (lane & 7) + (lane >> 4) * 8;");
			lg_line(b, "const int col = wm * %d + mi * 16 + ((lane >> 3) & 1) * 8;", wmt);
		} else {
			lg_line(b, "const int row = wm * %d + mi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;", wmt);
			lg_line(b, "const int col = ks + (lane >> 4) * 8;");
		}
		if (planes(g, o) == 1) {
			lg_line(b, "lg_ldsm4%s(af[mi][0], ca + lg_swz(row, col * 2, %d));", o->mn_major ? "t" : "", rb);
		} else {
			lg_line(b, "const u32 at = lg_swz(row, col * 2, %d);", rb);
			lg_line(b, "#pragma unroll");
			lg_line(b, "for (int e = 0; e < %d; e++) lg_ldsm4%s(af[mi][e], ca + e * %u + at);", g->terms,
				o->mn_major ? "t" : "", plane_bytes(g, o, g->t.bm));
		}
		lg_close(b);
		lg_close(b);
		return;
	}
	lg_comment(b, "register j: output g + 8 (j & 1), reduction 2q + 8 (j >> 1), + 1");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int j = 0; j < 4; j++) {");
	lg_line(b, "const int o = wm * %d + mi * 16 + (lane >> 2) + (j & 1) * 8;", wmt);
	lg_line(b, "const int r = ks + (lane & 3) * 2 + (j >> 1) * 8;");
	if (o->mn_major) {
		lg_line(b, "const float v0 = *(const float *)(ca + lg_swz(r, o * 4, %d));", rb);
		lg_line(b, "const float v1 = *(const float *)(ca + lg_swz(r + 1, o * 4, %d));", rb);
	} else {
		lg_line(b, "const float2 v = *(const float2 *)(ca + lg_swz(o, r * 4, %d));", rb);
		lg_line(b, "const float v0 = v.x, v1 = v.y;");
	}
	lg_line(b, "u32 t[%d];", g->terms);
	lg_line(b, "%s(t, %d, v0, v1);", split_fn(g), g->terms);
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int e = 0; e < %d; e++) af[mi][e][j] = t[e];", g->terms);
	lg_close(b);
	lg_close(b);
	lg_close(b);
}

/* B's fragments of the warp's n8 tiles, two an ldmatrix: bfr[ni][2]. */
static void emit_frag_b(lg_buf *b, const struct lg_gemm *g, const char *prefix)
{
	const struct lg_gemm_operand *o = &g->b;
	int rb = tile_rb(g, o, g->t.bn), wnt = g->t.bn / g->t.warps_n, ni_n = wnt / 8;
	char name[64], params[128];
	snprintf(name, sizeof name, "%s_frag_b", prefix);
	snprintf(params, sizeof params, "u32 bfr[%d][2], const u8 *cb, int ks, int wn, int lane", ni_n);
	lg_comment(b, "B's fragments of warp column wn's %d n8 tiles at reduction step ks.", ni_n);
	lg_line(b, "static __device__ __forceinline__ void");
	lg_head(b, name, params);
	lg_open(b, "{");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int nj = 0; nj < %d; nj++) {", ni_n / 2);
	lg_line(b, "u32 r[4];");
	if (o->mn_major) {
		lg_line(b, "const int row = ks + (lane & 7) + ((lane >> 3) & 1) * 8;");
		lg_line(b, "const int col = wn * %d + nj * 16 + (lane >> 4) * 8;", wnt);
		lg_line(b, "lg_ldsm4t(r, cb + lg_swz(row, col * 2, %d));", rb);
	} else {
		lg_line(b, "const int row = wn * %d + nj * 16 + (lane & 7) + (lane >> 4) * 8;", wnt);
		lg_line(b, "const int col = ks + ((lane >> 3) & 1) * 8;");
		lg_line(b, "lg_ldsm4(r, cb + lg_swz(row, col * 2, %d));", rb);
	}
	lg_line(b, "bfr[2 * nj][0] = r[0];");
	lg_line(b, "bfr[2 * nj][1] = r[1];");
	lg_line(b, "bfr[2 * nj + 1][0] = r[2];");
	lg_line(b, "bfr[2 * nj + 1][1] = r[3];");
	lg_close(b);
	lg_close(b);
}

/* Open the unrolled loops over the warp's mma tiles: mi, ni. */
static void open_tiles(lg_buf *b, int mi_n, int ni_n)
{
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int mi = 0; mi < %d; mi++) {", mi_n);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int ni = 0; ni < %d; ni++) {", ni_n);
}

/* The warp's mma.sync tiles of one k16 step: acc += af . bfr. */
static void emit_mma(lg_buf *b, const struct lg_gemm *g, const char *prefix)
{
	int mi_n = g->t.bm / g->t.warps_m / 16, ni_n = g->t.bn / g->t.warps_n / 8;
	char name[64], params[128];
	snprintf(name, sizeof name, "%s_mma", prefix);
	snprintf(params, sizeof params, "float acc[%d][%d][4], const u32 af[%d][%d][4], const u32 bfr[%d][2]",
		 mi_n, ni_n, mi_n, g->terms, ni_n);
	lg_comment(b, "The warp's %dx%d mma tiles of one k16 step%s.", mi_n, ni_n,
		   g->terms > 1 ? ", each term of A (the small ones first)" : "");
	lg_line(b, "static __device__ __forceinline__ void");
	lg_head(b, name, params);
	lg_open(b, "{");
	open_tiles(b, mi_n, ni_n);
	if (g->terms == 1) {
		lg_line(b, "lg_mma_bf16(acc[mi][ni], af[mi][0], bfr[ni]);");
	} else {
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int e = %d; e >= 0; e--)", g->terms - 1);
		lg_line(b, "\tlg_mma_bf16(acc[mi][ni], af[mi][e], bfr[ni]);");
	}
	lg_close(b);
	lg_close(b);
	lg_close(b);
}

/* Issue the loads of reduction tile `kt` (relative) into stage `st`. */
static void emit_stage_load(lg_buf *b, const struct lg_gemm *g, const char *prefix, const char *o0a,
			    const char *o0b, const char *kt0, const char *kt, const char *st,
			    const struct lg_gemm_fill *fill)
{
	unsigned ab = tile_bytes(g, &g->a, g->t.bm), bb = tile_bytes(g, &g->b, g->t.bn);
	lg_line(b, "const int st = %s;", st);
	if (is_zero(kt0))
		lg_line(b, "const i64 r0 = %s * %d;", kt, g->t.bk);
	else
		lg_line(b, "const i64 r0 = (%s + %s) * %d;", kt0, kt, g->t.bk);
	if (!fill) {
		lg_line(b, "%s_load_a(sa + st * %u, (const u8 *)%s, %s, r0, %s, %s, %s);", prefix, ab, g->a.ptr,
			o0a, g->a.out_ext, g->a.red_ext, g->a.ld);
		lg_line(b, "%s_load_b(sb + st * %u, (const u8 *)%s, %s, r0, %s, %s, %s);", prefix, bb, g->b.ptr,
			o0b, g->b.out_ext, g->b.red_ext, g->b.ld);
		return;
	}
	/* B's copies first, so that they fly while A is made */
	lg_line(b, "%s_load_b(sb + st * %u, (const u8 *)%s, %s, r0, %s, %s, %s);", prefix, bb, g->b.ptr, o0b,
		g->b.out_ext, g->b.red_ext, g->b.ld);
	lg_line(b, "u8 *const adst = sa + st * %u;", ab);
	fill->fill(b, g, "r0", "adst", fill->ctx);
	lg_open(b, "if (%s + 1 < nkt) {", kt);
	lg_line(b, "const i64 r1 = r0 + %d;", g->t.bk);
	fill->fetch(b, g, "r1", fill->ctx);
	lg_close(b);
}

static void emit_mainloop(lg_buf *b, const struct lg_gemm *g, const char *prefix, const char *o0a,
			  const char *o0b, const char *kt0, const char *kt1, const struct lg_gemm_fill *fill)
{
	const struct lg_gemm_tile *t = &g->t;
	int wmt = t->bm / t->warps_m, wnt = t->bn / t->warps_n, mi_n = wmt / 16, ni_n = wnt / 8;
	unsigned ab = tile_bytes(g, &g->a, t->bm), bb = tile_bytes(g, &g->b, t->bn);
	lg_comment(b, "%dx%d tile, %dx%d warps of %dx%d, reduction steps of %d, %d stages in flight.", t->bm,
		   t->bn, t->warps_m, t->warps_n, wmt, wnt, t->bk, t->stages);
	lg_line(b, "const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;");
	lg_line(b, "const int wm = warp %% %d, wn = warp / %d;", t->warps_m, t->warps_m);
	lg_line(b, "float acc[%d][%d][4];", mi_n, ni_n);
	open_tiles(b, mi_n, ni_n);
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int e = 0; e < 4; e++) acc[mi][ni][e] = 0.0f;");
	lg_close(b);
	lg_close(b);
	lg_line(b, "u8 *const sa = smem, *const sb = smem + %u;", (unsigned)t->stages * ab);
	unsigned pb = 0;
	if (g->convert) {
		struct lg_gemm v = planes_view(g);
		pb = tile_bytes(&v, &v.a, t->bm);
		lg_line(b, "u8 *const sp = smem + %u; // two buffers of A's bf16 planes, %u bytes each",
			(unsigned)t->stages * (ab + bb), pb);
	}
	emit_nkt(b, kt0, kt1);
	if (fill) {
		lg_comment(b, "A is made by the kernel: the loads of its first reduction tile.");
		lg_open(b, "if (nkt > 0) {");
		if (is_zero(kt0))
			lg_line(b, "const i64 r1 = 0;");
		else
			lg_line(b, "const i64 r1 = (i64)(%s) * %d;", kt0, g->t.bk);
		fill->fetch(b, g, "r1", fill->ctx);
		lg_close(b);
	}
	lg_comment(b, "Prologue: the first %d reduction tiles in flight, one commit group each.", t->stages - 1);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int s = 0; s < %d; s++) {", t->stages - 1);
	lg_open(b, "if (s < nkt) {");
	emit_stage_load(b, g, prefix, o0a, o0b, kt0, "s", "s", fill);
	lg_close(b);
	lg_line(b, "lg_cp_commit();");
	lg_close(b);
	if (g->convert) {
		lg_comment(b, "Tile 0's A split into planes 0.");
		lg_open(b, "if (nkt > 0) {");
		lg_line(b, "lg_cp_wait(%d);", t->stages - 2);
		lg_line(b, "__syncthreads();");
		lg_line(b, "%s_cvt_a(sp, sa);", prefix);
		lg_close(b);
	}
	if (g->convert)
		lg_line(b, "#pragma unroll 1 // a few tiles (a short reduction) would be unrolled: registers");
	lg_open(b, "for (int kt = 0; kt < nkt; kt++) {");
	if (g->convert) {
		lg_comment(b, "Tiles kt and kt + 1 have landed; every warp is done with the stage refilled next");
		lg_comment(b, "and with the planes of tile kt - 1; tile kt's planes are complete.");
		lg_line(b, "lg_cp_wait(%d);", t->stages - 3);
	} else {
		lg_comment(b, "Tile kt has landed; every warp is done with the stage refilled next.");
		lg_line(b, "lg_cp_wait(%d);", t->stages - 2);
	}
	lg_line(b, "__syncthreads();");
	lg_line(b, "const int nx = kt + %d;", t->stages - 1);
	lg_open(b, "if (nx < nkt) {");
	char st[32];
	snprintf(st, sizeof st, "nx %% %d", t->stages);
	emit_stage_load(b, g, prefix, o0a, o0b, kt0, "nx", st, fill);
	lg_close(b);
	lg_line(b, "lg_cp_commit();");
	lg_line(b, "const int cs = kt %% %d; // the stage of tile kt", t->stages);
	if (g->convert) {
		lg_line(b, "const int kn = kt + 1; // split the next tile's A into the other planes");
		lg_line(b, "if (kn < nkt) %s_cvt_a(sp + (kn & 1) * %u, sa + (kn %% %d) * %u);", prefix, pb, t->stages,
			ab);
		lg_line(b, "const u8 *const ca = sp + (kt & 1) * %u, *const cb = sb + cs * %u;", pb, bb);
	} else {
		lg_line(b, "const u8 *const ca = sa + cs * %u, *const cb = sb + cs * %u;", ab, bb);
	}
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int ks = 0; ks < %d; ks += 16) {", t->bk);
	lg_line(b, "u32 af[%d][%d][4], bfr[%d][2];", mi_n, g->terms, ni_n);
	lg_line(b, "%s_frag_a(af, ca, ks, wm, lane);", prefix);
	lg_line(b, "%s_frag_b(bfr, cb, ks, wn, lane);", prefix);
	lg_line(b, "%s_mma(acc, af, bfr);", prefix);
	lg_close(b); /* ks */
	lg_close(b); /* kt */
}

void lg_gemm_emit_mainloop(lg_buf *b, const struct lg_gemm *g, const char *prefix, const char *o0a,
			   const char *o0b, const char *kt0, const char *kt1)
{
	emit_mainloop(b, g, prefix, o0a, o0b, kt0, kt1, NULL);
}

void lg_gemm_emit_mainloop_fill(lg_buf *b, const struct lg_gemm *g, const char *prefix, const char *o0a,
				const char *o0b, const char *kt0, const char *kt1, const struct lg_gemm_fill *fill)
{
	emit_mainloop(b, g, prefix, o0a, o0b, kt0, kt1, fill);
}

void lg_gemm_emit_store_f32(lg_buf *b, const char *name, bool even)
{
	lg_line(b, "static __device__ __forceinline__ void");
	lg_head(b, name, "float *out, i64 rows, i64 cols, i64 row, i64 col, float v0, float v1");
	lg_open(b, "{");
	lg_line(b, "if (row >= rows || col >= cols) return;");
	if (even) {
		lg_comment(b, "cols even: col + 1 is in the row too");
		lg_line(b, "*(float2 *)(out + row * cols + col) = make_float2(v0, v1);");
	} else {
		lg_line(b, "out[row * cols + col] = v0;");
		lg_line(b, "if (col + 1 < cols) out[row * cols + col + 1] = v1;");
	}
	lg_close(b);
}

void lg_gemm_emit_epilogue(lg_buf *b, const struct lg_gemm *g, const char *o0a, const char *o0b,
			   const char *store)
{
	const struct lg_gemm_tile *t = &g->t;
	int wmt = t->bm / t->warps_m, wnt = t->bn / t->warps_n, mi_n = wmt / 16, ni_n = wnt / 8;
	lg_comment(b, "Epilogue: accumulator pairs (row, col), (row, col + 1) to the store.");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int mi = 0; mi < %d; mi++) {", mi_n);
	lg_line(b, "const i64 row = %s + wm * %d + mi * 16 + (lane >> 2);", o0a, wmt);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int ni = 0; ni < %d; ni++) {", ni_n);
	lg_line(b, "const i64 col = %s + wn * %d + ni * 8 + (lane & 3) * 2;", o0b, wnt);
	lg_line(b, "const float *const v = acc[mi][ni];");
	lg_line(b, "%srow, col, v[0], v[1]);", store);
	lg_line(b, "%srow + 8, col, v[2], v[3]);", store);
	lg_close(b);
	lg_close(b);
}

/* ------------------------------------------------------------ sm_90a
 *
 * wgmma m64nNk16 accumulator layout (fp32, per warpgroup): warp w of the
 * group holds rows 16 w.., lane l rows l / 4 and l / 4 + 8; of each n8
 * block j, acc[4 j], acc[4 j + 1] are (l / 4, 8 j + 2 (l % 4) + 0, 1) and
 * acc[4 j + 2], acc[4 j + 3] the same columns 8 rows down.
 */

#define G90_BK 64     /* reduction a stage: one 128-byte row of bf16 */
#define G90_ROWB 128  /* bytes of a shared row (the swizzle atom's width) */

static int consumers(const struct lg_gemm_tile *t) { return t->bm / 64; }

int lg_gemm90_threads(const struct lg_gemm_tile *t) { return lg_wgp_threads(consumers(t)); }

int lg_gemm90_cluster(const struct lg_gemm *g) { return g->cluster > 1 ? g->cluster : 1; }

/* Bytes of A's tile in a stage: bf16 rows of 128 bytes, or fp32 boxes of
 * 64 x 64 unswizzled (256-byte rows); then B's. */
static unsigned a_bytes90(const struct lg_gemm *g) { return (unsigned)g->t.bm * (g->a.fp32 ? 256u : G90_ROWB); }

static unsigned stage_bytes(const struct lg_gemm *g) { return a_bytes90(g) + (unsigned)(g->t.bn * G90_ROWB); }

/* Bytes of one buffer of an fp32 A's bf16 planes (none for a bf16 A). */
static unsigned planes_bytes90(const struct lg_gemm *g)
{
	return g->a.fp32 ? (unsigned)(g->terms * g->t.bm * G90_ROWB) : 0u;
}

unsigned lg_gemm90_smem(const struct lg_gemm *g)
{
	/* 1024 of slack to align the ring; two mbarriers a stage; two plane buffers */
	return 1024u + (unsigned)g->t.stages * (stage_bytes(g) + 16u) + 2u * planes_bytes90(g);
}

const char *lg_gemm90_tile_problem(const struct lg_gemm *g)
{
	const struct lg_gemm_tile *t = &g->t;
	if (g->b.fp32 || g->convert || (!g->a.fp32 && g->terms != 1) || g->terms < 1 || g->terms > 3)
		return "bf16 operands or an fp32 A of 1 to 3 bf16 terms (the sm_90a wgmma path)";
	if (g->tf32 && g->terms != 2)
		return "an A rounded to tf32 as 2 bf16 terms";
	if (t->bm != 64 && t->bm != 128)
		return "tile.m 64 or 128 (one consumer warpgroup a 64 rows)";
	if (t->bn < 16 || t->bn > 256 || t->bn % 16 != 0)
		return "tile.n a multiple of 16 up to 256";
	if (t->bk != G90_BK)
		return "tile.k 64 (128-byte rows of the 128-byte swizzle)";
	if (t->stages < 2 || t->stages > 8)
		return "tile.stages 2 to 8";
	if (g->b.mn_major && t->bn % 64 != 0)
		return "tile.n a multiple of 64 (boxes of 64 contiguous outputs of an MN-major B)";
	if (lg_gemm90_cluster(g) > 2 || (lg_gemm90_cluster(g) > 1 && (g->b.mn_major || g->a.fp32)))
		return "tile.cluster 1 or 2 (1 with an fp32 A or an MN-major B)";
	return NULL;
}

/* Operand o's boxes are 64 x 64 (several a tile) rather than one of 64 x
 * its rows: MN-major (64 contiguous outputs), or fp32 (one a warpgroup). */
static bool boxed64(const struct lg_gemm_operand *o) { return o->mn_major || o->fp32; }

void lg_gemm90_boxes(const struct lg_gemm *g, unsigned box_a[2], unsigned box_b[2], int *swizzle_a,
		     int *swizzle_b)
{
	box_a[0] = box_b[0] = G90_BK;
	box_a[1] = boxed64(&g->a) ? (unsigned)G90_BK : (unsigned)g->t.bm;
	box_b[1] = boxed64(&g->b) ? (unsigned)G90_BK : (unsigned)(g->t.bn / lg_gemm90_cluster(g));
	*swizzle_a = g->a.fp32 ? 0 : G90_ROWB;
	*swizzle_b = G90_ROWB;
}

/* g's pipeline: one thread's loads complete a full barrier, the producer
 * keeps the fewest registers. */
static struct lg_wgp pipe90(const struct lg_gemm *g)
{
	return (struct lg_wgp){consumers(&g->t), g->t.stages, lg_gemm90_cluster(g), stage_bytes(g), 1, NULL,
			       LG_WGP_DEC_TMA, LG_WGP_INC_TMA, 0};
}

void lg_gemm90_emit_helpers(lg_buf *b, const struct lg_gemm *g, const char *prefix)
{
	int n = g->t.bn;
	char name[64], trans[16];
	snprintf(name, sizeof name, "%s_wgmma", prefix);
	snprintf(trans, sizeof trans, "%d, %d", g->a.mn_major, g->b.mn_major);
	lg_comment(b, "acc (64 x %d, fp32) += A (64 x 16 at descriptor da) . B (%d x 16 at db)^T, both bf16", n, n);
	if (g->a.mn_major || g->b.mn_major)
		lg_comment(b, "in 128-byte swizzled shared memory, A %s, B %s (MN-major: transposed);",
			   g->a.mn_major ? "M-major" : "K-major", g->b.mn_major ? "N-major" : "K-major");
	lg_comment(b, "%sasynchronous until lg_wg_wait.",
		   g->a.mn_major || g->b.mn_major ? "" : "K-major in 128-byte swizzled shared memory; ");
	lg_wgp_emit_mma(b, name, n, 16, "bf16", trans, false);
	const struct lg_wgp p = pipe90(g);
	lg_wgp_emit_helpers(b, &p, prefix);
}

/* The producer's TMA loads of operand o's tile (`rows` outputs from `o0`, an int expression)
 * of the reduction tile at r0 into the stage at sd + off, completing on
 * full[s]: one box (K-major bf16) or rows / 64 boxes of 64 x 64. */
static void emit_tma90(lg_buf *b, const struct lg_gemm_operand *o, int rows, const char *o0, unsigned off)
{
	int nb = boxed64(o) ? rows / 64 : 1;
	unsigned box = 64u * (o->fp32 ? 256u : G90_ROWB);
	for (int j = 0; j < nb; j++) {
		char out[96], dst[32];
		if (j)
			snprintf(out, sizeof out, "%s + %d", o0, 64 * j);
		else
			snprintf(out, sizeof out, "%s", o0);
		if (off + (unsigned)j * box)
			snprintf(dst, sizeof dst, "sd + %u", off + (unsigned)j * box);
		else
			snprintf(dst, sizeof dst, "sd");
		/* coordinates, inner first: the reduction then the output (K-major), or the reverse */
		const char *c0 = o->mn_major ? out : "r0", *c1 = o->mn_major ? "r0" : out;
		lg_line(b, "lg_tma_load_2d(%s, &%s, &full[s], %s, %s);", dst, o->tmap, c0, c1);
	}
}

/* A consumer warpgroup's split of its fp32 box of A (64 rows of 256 bytes
 * at `src`, either major: rows are along the box's outer dimension) into
 * g->terms bf16 planes at `dst` (64 rows of 128 bytes, 128-byte swizzle,
 * planes `stride` bytes apart): 8 values a thread at a time (two 16-byte
 * loads, ordered so that a row's 8 lanes are free of bank conflicts), then
 * the fence to the async proxy and the warpgroup's named barrier. */
static void emit_split90(lg_buf *b, const struct lg_gemm *g, unsigned stride)
{
	lg_comment(b, "This warpgroup's fp32 box of A into %d bf16 plane%s (swizzled).", g->terms,
		   g->terms > 1 ? "s" : "");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < 4; i++) {");
	lg_comment(b, "Row r's 32-byte chunk c, chunks 4..7 upper half first: a");
	lg_comment(b, "row's 8 lanes read the 32 banks once (else c, c + 4 clash).");
	lg_line(b, "const int q = (threadIdx.x & 127) + i * 128, r = q >> 3, c = q & 7;");
	lg_line(b, "const int h = c >> 2;");
	lg_line(b, "const u8 *const p = src + r * 256 + c * 32;");
	lg_line(b, "const float4 u0 = *(const float4 *)(p + h * 16);");
	lg_line(b, "const float4 u1 = *(const float4 *)(p + (h ^ 1) * 16);");
	lg_line(b, "const float4 lo = h ? u1 : u0, hi = h ? u0 : u1;");
	lg_line(b, "u32 t[4][%d];", g->terms);
	lg_line(b, "%s(t[0], %d, lo.x, lo.y);", split_fn(g), g->terms);
	lg_line(b, "%s(t[1], %d, lo.z, lo.w);", split_fn(g), g->terms);
	lg_line(b, "%s(t[2], %d, hi.x, hi.y);", split_fn(g), g->terms);
	lg_line(b, "%s(t[3], %d, hi.z, hi.w);", split_fn(g), g->terms);
	lg_line(b, "u8 *const d = dst + r * 128 + ((c ^ (r & 7)) << 4);");
	for (int e = 0; e < g->terms; e++)
		lg_line(b, "*(uint4 *)(d%s%.0u) = make_uint4(t[0][%d], t[1][%d], t[2][%d], t[3][%d]);",
			e ? " + " : "", e * stride, e, e, e, e);
	lg_close(b);
	lg_line(b, "lg_fence_proxy_async();");
	lg_comment(b, "this warpgroup's four warps meet (named barrier 1 + wg)");
	lg_line(b, "asm volatile(\"bar.sync %%0, 128;\" :: \"r\"(1 + wg) : \"memory\");");
}

/* Persistent CTAs (lg_gemm90_emit_tiles): `tiles` output tiles in row-major
 * order of `cols` tile columns, CTA blockIdx.x taking every gridDim.x-th;
 * tiles NULL: the one tile at o0a, o0b. */
struct loop90 {
	const char *tiles;
	long long cols;
};

/* The origin o0a, o0b of tile `tile` (persistent CTAs). */
static void emit_origin90(lg_buf *b, const struct lg_gemm *g, const struct loop90 *l)
{
	lg_line(b, "const i64 o0a = tile / %lld * %d, o0b = tile %% %lld * %d;", l->cols, g->t.bm, l->cols, g->t.bn);
}

/* Thread 0's first work: the tensor maps' prefetch (an fp32 A's dw at 0
 * tokens has no map to read). */
static void emit_prefetch90(lg_buf *b, void *ctx)
{
	const struct lg_gemm *g = ctx;
	if (g->a.fp32)
		lg_open(b, "if (nkt > 0) {");
	lg_line(b, "lg_tma_prefetch(&%s);", g->a.tmap);
	lg_line(b, "lg_tma_prefetch(&%s);", g->b.tmap);
	if (g->a.fp32)
		lg_close(b);
}

/* Shared memory, the barriers and their initialisation. */
static void emit_setup90(lg_buf *b, const struct lg_gemm *g, const char *kt0, const char *kt1)
{
	const struct lg_gemm_tile *t = &g->t;
	const struct lg_wgp p = pipe90(g);
	int c = consumers(t), S = t->stages, cl = lg_gemm90_cluster(g);
	unsigned st = stage_bytes(g), pb = planes_bytes90(g);
	bool split = g->a.fp32;
	lg_comment(b, "%dx%d tile: %d consumer warpgroup%s (64 rows each) and a producer warpgroup; %d stages", t->bm,
		   t->bn, c, c > 1 ? "s" : "", S);
	if (split) {
		lg_comment(b, "of A fp32 [%d][256 B] and B [%d][128 B] at 1024-byte boundaries, two buffers of A's", t->bm,
			   t->bn);
		lg_comment(b, "%d bf16 plane%s [%d][128 B], then full[%d], empty[%d] (128-byte rows: 64 reductions", g->terms,
			   g->terms > 1 ? "s" : "", t->bm, S, S);
		lg_comment(b, "K-major, 64 outputs MN-major).");
	} else {
		lg_comment(b, "of A [%d][128 B] and B [%d][128 B] at 1024-byte boundaries, then full[%d], empty[%d].", t->bm,
			   t->bn, S, S);
	}
	lg_wgp_emit_ring(b);
	if (split)
		lg_line(b, "u8 *const planes = ring + %u; // [2][%d][%d][128 B]", (unsigned)S * st, g->terms, t->bm);
	char at[48];
	snprintf(at, sizeof at, "ring + %u", (unsigned)S * st + 2u * pb);
	lg_wgp_emit_barriers(b, &p, at);
	lg_wgp_emit_roles(b);
	emit_nkt(b, kt0, kt1);
	if (cl > 1)
		lg_line(b, "const u32 rank = blockIdx.x %% %d; // in the cluster: B rows [rank %d, (rank + 1) %d)", cl,
			t->bn / cl, t->bn / cl);
	lg_wgp_emit_init(b, &p, emit_prefetch90, (void *)g);
}

/* The producer's hooks of the pipeline's fill (struct lg_wgp_fill): the
 * tile's origin o0a, o0b as TMA's int coordinates ya, yb. */
struct fill90 {
	const struct lg_gemm *g;
	char ya[64], yb[64];
	const char *o0b, *kt0;
	const struct loop90 *l;
};

/* A persistent CTA's tile: its origin, as ints once. */
static void tile90(lg_buf *b, void *ctx)
{
	const struct fill90 *f = ctx;
	emit_origin90(b, f->g, f->l);
	lg_line(b, "const int %s = (int)o0a, %s = (int)o0b;", f->ya, f->yb);
}

/* A stage: A's and B's tiles of reduction tile kt by TMA, B's half
 * multicast in a cluster. */
static void stage90(lg_buf *b, void *ctx)
{
	const struct fill90 *f = ctx;
	const struct lg_gemm *g = f->g;
	int cl = lg_gemm90_cluster(g);
	unsigned sa = a_bytes90(g), sb = (unsigned)g->t.bn * G90_ROWB;
	if (is_zero(f->kt0))
		lg_line(b, "const int r0 = kt * %d;", G90_BK);
	else
		lg_line(b, "const int r0 = (int)((%s + kt) * %d);", f->kt0, G90_BK);
	emit_tma90(b, &g->a, g->t.bm, f->ya, 0);
	if (cl > 1) {
		lg_line(b, "const int o1 = (int)(%s) + (int)rank * %d; // this CTA's half of B", f->o0b, g->t.bn / cl);
		lg_line(b, "u8 *const sh = sd + %u + rank * %u;", sa, sb / cl);
		lg_line(b, "lg_tma_load_2d_mc(sh, &%s, &full[s], r0, o1, %u);", g->b.tmap, (1u << cl) - 1);
	} else {
		emit_tma90(b, &g->b, g->t.bn, f->yb, sa);
	}
}

/* The producer warpgroup: one thread's TMA loads of every stage. */
static void emit_producer90(lg_buf *b, const struct lg_gemm *g, const char *o0a, const char *o0b, const char *kt0,
			    const struct loop90 *l)
{
	const struct lg_wgp p = pipe90(g);
	struct fill90 f = {.g = g, .o0b = o0b, .kt0 = kt0, .l = l};
	if (l->tiles) {
		snprintf(f.ya, sizeof f.ya, "ya");
		snprintf(f.yb, sizeof f.yb, "yb");
	} else {
		snprintf(f.ya, sizeof f.ya, "(int)(%s)", o0a);
		snprintf(f.yb, sizeof f.yb, "(int)(%s)", o0b);
	}
	const struct lg_wgp_fill pf = {.ctx = &f, .tiles = l->tiles, .tile = l->tiles ? tile90 : NULL, .stage = stage90,
				       .sd = true, .expect = true};
	lg_wgp_open_producer(b, &p, "Producer: one thread refills each stage once its consumers released it.");
	lg_wgp_open_loader(b, &p);
	if (l->tiles) {
		lg_comment(b, "`it` counts the stages on across this CTA's tiles: the next tile's");
		lg_comment(b, "stages load while the consumers store this one.");
	}
	lg_wgp_emit_fill(b, &p, &pf);
	lg_close(b);
	lg_wgp_close_producer(b, &p);
}

/* The consumer warpgroups' loop over the stages (leaving acc for the epilogue). */
static void emit_consumer90(lg_buf *b, const struct lg_gemm *g, const char *prefix, const struct loop90 *l)
{
	const struct lg_wgp p = pipe90(g);
	const char *ctr = l->tiles ? "it" : "kt", *inc = l->tiles ? "kt++, it++" : "kt++";
	int S = g->t.stages, regs = g->t.bn / 2;
	unsigned sa = a_bytes90(g), st = stage_bytes(g), pb = planes_bytes90(g);
	unsigned plane = (unsigned)g->t.bm * G90_ROWB;
	bool split = g->a.fp32;
	lg_comment(b, "Consumers: warpgroup wg, rows 64 wg.. of the tile; one wgmma group in flight.");
	if (l->tiles) {
		lg_line(b, "int it = 0;");
		lg_wgp_open_tiles(b, &p, l->tiles);
		emit_origin90(b, g, l);
	}
	lg_wgp_emit_acc(b, "acc", regs);
	lg_open(b, "for (int kt = 0; kt < nkt; %s) {", inc);
	lg_line(b, "const int s = %s %% %d;", ctr, S);
	lg_wgp_emit_wait_full(b, &p, "s", ctr);
	/* a k16 step: 32 bytes along a K-major row, 16 rows of an MN-major tile (descriptor units of 16 B) */
	int ka = g->a.mn_major ? 16 * G90_ROWB / 16 : 2, kb = g->b.mn_major ? 16 * G90_ROWB / 16 : 2;
	const char *dma = g->a.mn_major ? "_mn" : "", *dmb = g->b.mn_major ? "_mn" : "";
	if (split) {
		lg_comment(b, "plane buffer %s %% 2: its last reader, the group of %s - 2, is done", ctr, ctr);
		lg_line(b, "u8 *const dst = planes + (%s & 1) * %u + wg * %u;", ctr, pb, 64u * G90_ROWB);
		lg_line(b, "const u8 *const src = ring + s * %u + wg * %u;", st, 64u * 256u);
		emit_split90(b, g, plane);
		lg_line(b, "const u64 da = lg_wg_desc%s(dst);", dma);
	} else {
		lg_line(b, "const u64 da = lg_wg_desc%s(ring + s * %u + wg * %u);", dma, st, 64u * G90_ROWB);
	}
	lg_line(b, "const u64 db = lg_wg_desc%s(ring + s * %u + %u);", dmb, st, sa);
	lg_line(b, "lg_wg_fence();");
	if (g->a.mn_major || g->b.mn_major)
		lg_comment(b, "k16 steps: %s of A, %s of B (%d, %d descriptor units)%s",
			   g->a.mn_major ? "16 rows" : "32 bytes", g->b.mn_major ? "16 rows" : "32 bytes", ka, kb,
			   g->terms > 1 ? "; a plane each" : "");
	else
		lg_comment(b, "k16 steps: 32 bytes along the swizzled row, 2 in descriptor units%s",
			   g->terms > 1 ? "; a wgmma a plane of A" : "");
	lg_line(b, "#pragma unroll");
	if (g->terms > 1) {
		lg_open(b, "for (int ks = 0; ks < %d; ks++) {", G90_BK / 16);
		for (int e = 0; e < g->terms; e++)
			lg_line(b, "%s_wgmma(acc, da + %.0u%s%d * ks, db + %d * ks);", prefix, e * plane / 16,
				e ? " + " : "", ka, kb);
		lg_close(b);
	} else {
		lg_line(b, "for (int ks = 0; ks < %d; ks++) %s_wgmma(acc, da + %d * ks, db + %d * ks);", G90_BK / 16, prefix,
			ka, kb);
	}
	lg_line(b, "lg_wg_commit();");
	lg_line(b, "lg_wg_wait(1);");
	lg_comment(b, "tile kt - 1's group is done: its stage may be refilled");
	char prev[48];
	snprintf(prev, sizeof prev, "(%s + %d) %% %d", ctr, S - 1, S);
	lg_wgp_emit_release(b, &p, prefix, "kt > 0", prev);
	lg_close(b);
	lg_line(b, "lg_wg_wait(0);");
	if (l->tiles) {
		lg_comment(b, "the tile's last stage too (the producer loads on into the next tile)");
		lg_wgp_emit_release(b, &p, prefix, "nkt > 0", prev);
	}
	lg_wgp_emit_hold(b, "acc", regs);
}

/* The stage counter is the reduction tile, or (persistent) `it`, counting on
 * across tiles. */
static void emit_mainloop90(lg_buf *b, const struct lg_gemm *g, const char *prefix, const char *o0a,
			    const char *o0b, const char *kt0, const char *kt1, const struct loop90 *l)
{
	emit_setup90(b, g, kt0, kt1);
	emit_producer90(b, g, o0a, o0b, kt0, l);
	emit_consumer90(b, g, prefix, l);
}

void lg_gemm90_emit_mainloop(lg_buf *b, const struct lg_gemm *g, const char *prefix, const char *o0a,
			     const char *o0b, const char *kt0, const char *kt1)
{
	const struct loop90 l = {NULL, 0};
	emit_mainloop90(b, g, prefix, o0a, o0b, kt0, kt1, &l);
}

void lg_gemm90_emit_tiles(lg_buf *b, const struct lg_gemm *g, const char *prefix, const char *tiles, long long cols,
			  const char *kt0, const char *kt1)
{
	const struct loop90 l = {tiles, cols};
	emit_mainloop90(b, g, prefix, "o0a", "o0b", kt0, kt1, &l);
}

void lg_gemm90_emit_tiles_end(lg_buf *b)
{
	lg_close(b);
}

void lg_gemm90_emit_epilogue(lg_buf *b, const struct lg_gemm *g, const char *o0a, const char *o0b,
			     const char *store)
{
	lg_comment(b, "Epilogue: accumulator pairs (row, col), (row, col + 1) to the store.");
	lg_line(b, "const i64 row = (i64)(%s) + wg * 64 + warp * 16 + (lane >> 2);", o0a);
	char col0[80];
	snprintf(col0, sizeof col0, "(i64)(%s)", o0b);
	lg_wgp_open_pairs(b, g->t.bn, col0);
	lg_wgp_emit_pair(b, store, 0, 0, NULL);
	lg_wgp_emit_pair(b, store, 8, 2, NULL);
	lg_close(b);
	const struct lg_wgp p = pipe90(g);
	lg_wgp_emit_done(b, &p);
}
