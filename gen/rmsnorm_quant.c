/*
 * rmsnorm_quant.c - family "rmsnorm_quant" (KERNELS.md K1): RMSNorm fused
 * with 1x128 (rowwise) and 128x1 (columnwise, transposed) blockwise e4m3
 * quantisation, forward.
 *
 * Strategy: two kernels, x read from HBM once.
 *   1. `<entry>_rms`: the reciprocal RMS of every row (fp64 sums of squares),
 *      written to rms; x is loaded with an L2 evict-last policy so that it
 *      stays in L2 (32 MB at 8192 x 2048, of 60 MB) for kernel 2.
 *   2. `<entry>`: a CTA per tile of 128 tokens (one columnwise scale block)
 *      by `cols` (128 or 256) features. Each thread owns an 8 x 8 block and
 *      computes y = (x r) w once, in registers, for both copies:
 *        rowwise: amax over the 16 lanes of a 1x128 block (butterfly),
 *                 8-byte stores of q, a scale per row and block;
 *        columnwise: amax over its 8 rows, then over the 16 row blocks
 *                 through shared memory; bytes packed 8 rows at a time into
 *                 a swizzled transposed staging tile, written as 128-byte
 *                 qt lines.
 *      x is re-read with evict-first loads (from L2) and the outputs are
 *      streaming stores, so they do not push x out of L2.
 */
#include <stdio.h>
#include <string.h>

#include "family.h"

#include "error.h"
#include "norm_common.h"
#include "templates.h"

#define ROWS 128 /* tokens per tile = one 128x1 scale block */

enum { ARG_X, ARG_W, ARG_Q, ARG_S, ARG_RMS, ARG_QT, ARG_ST, NARGS };

static const struct lg_arg fwd_args[NARGS] = {
	[ARG_X] = {"x", LG_ARG_IN, "[tokens, hidden] bf16"},
	[ARG_W] = {"w", LG_ARG_IN, "[hidden] bf16"},
	[ARG_Q] = {"q", LG_ARG_OUT, "[tokens, hidden] e4m3 (rowwise)"},
	[ARG_S] = {"s", LG_ARG_OUT, "[hidden/128, tokens] fp32 (rowwise scales)"},
	[ARG_RMS] = {"rms", LG_ARG_OUT, "[tokens] fp32 reciprocal RMS (also read by the second kernel)"},
	[ARG_QT] = {"qt", LG_ARG_OUT, "[hidden, tokens] e4m3 (columnwise, transposed)"},
	[ARG_ST] = {"st", LG_ARG_OUT, "[ceil(tokens/128), hidden] fp32 (columnwise scales)"},
};

/* Plan slots. */
#define P_CHUNK aux[0] /* columns per CTA of kernel 2: 128 or 256 */
#define P_LPR aux[1]   /* kernel 1: lanes per row */
#define P_K aux[2]     /* kernel 1: 16-byte pieces per lane */
#define P_SMEM aux[3]  /* kernel 2: dynamic shared memory bytes */

static bool rowwise(const struct lg_spec *s) { return s->quant.output != LG_QOUT_COLUMNWISE; }
static bool colwise(const struct lg_spec *s) { return s->quant.output != LG_QOUT_ROWWISE; }

static lg_status validate(const struct lg_spec *s, const char *where)
{
	int64_t h = s->dim[LG_DIM_HIDDEN];
	if (h < 128 || h > 16384 || h % 128 != 0)
		return lg_spec_error(where, "hidden: found %lld, allowed: a multiple of 128 from 128 to 16384",
				     (long long)h);
	if (s->quant.block != 128)
		return lg_spec_error(where, "quant.block: found %d, allowed: 128", s->quant.block);
	if (lg_spec_has_tile(s, LG_TILE_COLS)) {
		int c = s->tile[LG_TILE_COLS];
		if ((c != 128 && c != 256) || h % c != 0)
			return lg_spec_error(where, "tile.cols: found %d, allowed: 128 or 256, dividing hidden (%lld)",
					     c, (long long)h);
	}
	if (lg_spec_has_tile(s, LG_TILE_THREADS)) {
		int t = s->tile[LG_TILE_THREADS];
		if (t != 128 && t != 256 && t != 512 && t != 1024)
			return lg_spec_error(where, "tile.threads: found %d, allowed: 128, 256, 512, 1024 (the rms kernel)", t);
	}
	return LG_OK;
}

/* Kernel 2's shared memory: qt staging, column partial maxima, column
 * scales and inverses. */
static int64_t quant_smem(int cols)
{
	return (int64_t)cols * ROWS + 16 * cols * 4 + 2 * cols * 4;
}

static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	(void)t;
	int64_t h = s->dim[LG_DIM_HIDDEN];
	int cols = lg_spec_has_tile(s, LG_TILE_COLS) ? s->tile[LG_TILE_COLS] : 128;
	int threads = lg_spec_has_tile(s, LG_TILE_THREADS) ? s->tile[LG_TILE_THREADS] : 256;
	struct lg_rowlayout l = lg_rowlayout_make(h, 8, threads);
	p->hidden = h;
	p->tile[LG_TILE_COLS] = cols;
	p->tile[LG_TILE_THREADS] = l.threads;
	p->tile[LG_TILE_ROWS] = l.rows;
	p->P_CHUNK = cols;
	p->P_LPR = l.lpr;
	p->P_K = l.k;
	p->P_SMEM = quant_smem(cols);
	p->nentries = 2;
	snprintf(p->entry[0], sizeof p->entry[0], "%s_rms", s->entry);
	snprintf(p->entry[1], sizeof p->entry[1], "%s", s->entry);
	p->nargs = NARGS;
	for (int i = 0; i < NARGS; i++)
		p->used[i] = 1;
	if (!rowwise(s))
		p->used[ARG_Q] = p->used[ARG_S] = 0;
	if (!colwise(s))
		p->used[ARG_QT] = p->used[ARG_ST] = 0;
	return LG_OK;
}

static void geometry(const struct lg_plan *p, int e, int64_t tokens, struct lg_launch_dim *d)
{
	d->grid[2] = d->block[1] = d->block[2] = 1;
	if (e == 0) { /* rms: rows per CTA */
		d->grid[0] = (unsigned)((tokens + p->tile[LG_TILE_ROWS] - 1) / p->tile[LG_TILE_ROWS]);
		d->grid[1] = 1;
		d->block[0] = (unsigned)p->tile[LG_TILE_THREADS];
		d->smem = 0;
		return;
	}
	d->grid[0] = (unsigned)(p->hidden / p->P_CHUNK);
	d->grid[1] = (unsigned)((tokens + ROWS - 1) / ROWS);
	d->block[0] = (unsigned)(2 * p->P_CHUNK); /* 16 row blocks x cols/8 column blocks */
	d->smem = (unsigned)p->P_SMEM;
}

static double bytes(const struct lg_spec *s, int64_t m)
{
	double n = (double)s->dim[LG_DIM_HIDDEN], b = 2.0 * m * n + 2.0 * n + 4.0 * m;
	if (rowwise(s))
		b += m * n + 4.0 * m * (n / 128);
	if (colwise(s))
		b += m * n + 4.0 * ((m + 127) / 128) * n;
	return b;
}

/* ------------------------------------------------------------ emission */

struct shape {
	int n, cols, threads, lpr;
};

static struct shape shape_of(const struct lg_plan *p)
{
	struct shape k;
	k.n = (int)p->hidden;
	k.cols = (int)p->P_CHUNK;
	k.threads = 2 * k.cols;
	k.lpr = k.cols / 8; /* lanes per row block: 8 columns each */
	return k;
}

/* Kernel 1: one row per lpr lanes; x loaded with an evict-last L2 policy. */
static void emit_rms_kernel(lg_buf *b, const struct lg_plan *p)
{
	struct lg_rowlayout l = {.hidden = p->hidden, .lpr = (int)p->P_LPR, .k = (int)p->P_K,
				 .threads = p->tile[LG_TILE_THREADS], .rows = p->tile[LG_TILE_ROWS]};
	lg_comment(b, "Kernel 1: reciprocal RMS of each row; %d lanes per row, %d rows per CTA. x is", l.lpr,
		   l.rows);
	lg_comment(b, "loaded with an L2 evict-last policy: kernel 2 reads it again, from L2.");
	lg_line(b, "extern \"C\" __global__ void __launch_bounds__(%d)", l.threads);
	lg_line(b, "%s(u64 x, u64 w, u64 q, u64 s, u64 rms, u64 qt, u64 st, i64 M)", p->entry[0]);
	lg_open(b, "{");
	lg_emit_row_prologue(b, &l);
	lg_line(b, "const i64 m = (i64)blockIdx.x * %d + slot;", l.rows);
	lg_line(b, "const bool live = m < M;");
	lg_line(b, "const u64 keep = lg_policy_evict_last();");
	lg_line(b, "lg_u32x4 v[%d];", l.k);
	lg_emit_row_load(b, &l, "v", "(const u8 *)x", "lg_ld16_last", "keep");
	lg_emit_row_sumsq(b, &l, "v");
	lg_line(b, "if (live && t == 0) ((float *)rms)[m] = lg_rrms(ss);");
	lg_close(b);
	lg_line(b, "%s", "");
}

static void emit_scale(lg_buf *b, const struct lg_spec *s, const char *sc, const char *amax, const char *inv)
{
	if (s->quant.round_scale)
		lg_line(b, "const float %s = lg_scale_pow2(%s), %s = lg_inv_pow2(%s);", sc, amax, inv, sc);
	else
		lg_line(b, "const float %s = lg_scale_exact(%s), %s = 1.0f / %s;", sc, amax, inv, sc);
}

/* y = (x r) w for the thread's 8 x 8 block, in registers. */
static void emit_y(lg_buf *b, const char *w)
{
	lg_line(b, "float y[8][8];");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < 8; i++) {");
	lg_line(b, "const u32 v[4] = {xv[i].x, xv[i].y, xv[i].z, xv[i].w};");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int e = 0; e < 4; e++) {");
	lg_line(b, "y[i][2 * e] = (lg_bf16_lo(v[e]) * rr[i]) * %s[2 * e];", w);
	lg_line(b, "y[i][2 * e + 1] = (lg_bf16_hi(v[e]) * rr[i]) * %s[2 * e + 1];", w);
	lg_close(b);
	lg_close(b);
}

static void emit_rowwise(lg_buf *b, const struct lg_spec *s, const struct shape *k)
{
	lg_comment(b, "Rowwise copy: 1x128 blocks are 16 lanes; 8-byte stores of q, a scale per row.");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < 8; i++) {");
	lg_line(b, "float amax = 0.0f;");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int c = 0; c < 8; c++) amax = fmaxf(amax, fabsf(y[i][c]));");
	lg_line(b, "amax = lg_max_xor(amax, 1, 8);");
	emit_scale(b, s, "sc", "amax", "inv");
	lg_line(b, "const u32 p0 = lg_e4m3x2(lg_q(y[i][0], sc, inv), lg_q(y[i][1], sc, inv)) | (lg_e4m3x2(lg_q(y[i][2], sc, inv), lg_q(y[i][3], sc, inv)) << 16);");
	lg_line(b, "const u32 p1 = lg_e4m3x2(lg_q(y[i][4], sc, inv), lg_q(y[i][5], sc, inv)) | (lg_e4m3x2(lg_q(y[i][6], sc, inv), lg_q(y[i][7], sc, inv)) << 16);");
	lg_open(b, "if (8 * rb + i < rows) {");
	lg_line(b, "lg_st8_cs(qrow + i * %d, p0, p1);", k->n);
	lg_line(b, "if ((lb & 15) == 0) srow[i] = sc;");
	lg_close(b);
	lg_close(b);
}

static void emit_colwise(lg_buf *b, const struct lg_spec *s, const struct shape *k)
{
	lg_comment(b, "Columnwise copy: amax of each column over the thread's 8 rows, then over the 16");
	lg_comment(b, "row blocks through shared memory; one scale per column and tile.");
	lg_open(b, "{");
	lg_line(b, "float cm[8];");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int c = 0; c < 8; c++) {");
	lg_line(b, "cm[c] = fabsf(y[0][c]);");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 1; i < 8; i++) cm[c] = fmaxf(cm[c], fabsf(y[i][c]));");
	lg_close(b);
	lg_line(b, "*(float4 *)(cpart + rb * %d + lb * 8) = make_float4(cm[0], cm[1], cm[2], cm[3]);", k->cols);
	lg_line(b, "*(float4 *)(cpart + rb * %d + lb * 8 + 4) = make_float4(cm[4], cm[5], cm[6], cm[7]);", k->cols);
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_open(b, "if (threadIdx.x < %d) {", k->cols);
	lg_line(b, "float amax = cpart[threadIdx.x];");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int q = 1; q < 16; q++) amax = fmaxf(amax, cpart[q * %d + threadIdx.x]);", k->cols);
	emit_scale(b, s, "sc", "amax", "inv");
	lg_line(b, "csc[threadIdx.x] = sc;");
	lg_line(b, "cinv[threadIdx.x] = inv;");
	lg_line(b, "stg[tr * %d + k0 + threadIdx.x] = sc;", k->n);
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_comment(b, "Quantise with the column scales; pack 8 rows of a column into 8 bytes of the");
	lg_comment(b, "transposed staging tile [%d columns][128 rows], 8-byte slots XOR-swizzled by", k->cols);
	lg_comment(b, "(column / 8) %% 16 so that both its writes and its reads are conflict-free.");
	lg_open(b, "{");
	lg_line(b, "const float4 i0 = *(const float4 *)(cinv + lb * 8), i1 = *(const float4 *)(cinv + lb * 8 + 4);");
	lg_line(b, "const float ci[8] = {i0.x, i0.y, i0.z, i0.w, i1.x, i1.y, i1.z, i1.w};");
	if (!s->quant.round_scale) {
		lg_line(b, "const float4 s0 = *(const float4 *)(csc + lb * 8), s1 = *(const float4 *)(csc + lb * 8 + 4);");
		lg_line(b, "const float cs[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};");
	}
	const char *cs = s->quant.round_scale ? "0.0f" : "cs[c]";
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int c = 0; c < 8; c++) {");
	lg_line(b, "const u32 lo = lg_e4m3x2(lg_q(y[0][c], %s, ci[c]), lg_q(y[1][c], %s, ci[c])) | (lg_e4m3x2(lg_q(y[2][c], %s, ci[c]), lg_q(y[3][c], %s, ci[c])) << 16);",
		cs, cs, cs, cs);
	lg_line(b, "const u32 hi = lg_e4m3x2(lg_q(y[4][c], %s, ci[c]), lg_q(y[5][c], %s, ci[c])) | (lg_e4m3x2(lg_q(y[6][c], %s, ci[c]), lg_q(y[7][c], %s, ci[c])) << 16);",
		cs, cs, cs, cs);
	lg_line(b, "*(uint2 *)(stage + (lb * 8 + c) * 128 + ((rb ^ (lb & 15)) << 3)) = make_uint2(lo, hi);");
	lg_close(b);
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_comment(b, "qt: each column's 128 tokens are one 128-byte line; 16 bytes a thread.");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int e = threadIdx.x; e < %d; e += %d) {", k->cols * 8, k->threads);
	lg_line(b, "const int c = e >> 3, h = e & 7, sw = (c >> 3) & 15;");
	lg_line(b, "uint4 v = *(const uint4 *)(stage + c * 128 + ((h ^ (sw >> 1)) << 4));");
	lg_line(b, "if (sw & 1) v = make_uint4(v.z, v.w, v.x, v.y);");
	lg_line(b, "u8 *const dst = qtg + (k0 + c) * M + m0 + 16 * h;");
	lg_open(b, "if (vec_ok && 16 * h + 16 <= rows) {");
	lg_line(b, "lg_st16_cs(dst, lg_u32x4{v.x, v.y, v.z, v.w});");
	lg_close_with(b, "} else {");
	lg_line(b, "const u32 u[4] = {v.x, v.y, v.z, v.w};");
	lg_line(b, "for (int i = 0; i < 16 && 16 * h + i < rows; i++) dst[i] = (u8)(u[i >> 2] >> (8 * (i & 3)));");
	lg_close(b);
	lg_close(b);
}

/* Kernel 2: the outputs of one 128 x cols tile. */
static void emit_quant_kernel(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	struct shape k = shape_of(p);
	lg_comment(b, "Kernel 2: tile of 128 tokens x %d features per CTA, an 8 x 8 block per thread", k.cols);
	lg_comment(b, "(%d threads); x re-read from L2 with evict-first loads, streaming stores.", k.threads);
	lg_line(b, "extern \"C\" __global__ void __launch_bounds__(%d)", k.threads);
	lg_line(b, "%s(u64 x, u64 w, u64 q, u64 s, u64 rms, u64 qt, u64 st, i64 M)", p->entry[1]);
	lg_open(b, "{");
	lg_line(b, "extern __shared__ __align__(128) u8 smem[];");
	lg_line(b, "u8 *const stage = smem; // qt staging [%d][128] bytes", k.cols);
	lg_line(b, "float *const cpart = (float *)(stage + %d); // [16][%d] column maxima of the row blocks",
		k.cols * ROWS, k.cols);
	lg_line(b, "float *const csc = cpart + %d, *const cinv = csc + %d; // column scales, inverses",
		16 * k.cols, k.cols);
	lg_line(b, "const int lb = threadIdx.x %% %d, rb = threadIdx.x / %d;", k.lpr, k.lpr);
	lg_line(b, "const i64 tr = blockIdx.y, m0 = tr * %d, k0 = (i64)blockIdx.x * %d;", ROWS, k.cols);
	lg_line(b, "const int rows = (int)(M - m0 < %d ? M - m0 : %d);", ROWS, ROWS);
	lg_line(b, "const i64 col0 = k0 + lb * 8; // this thread's first column");
	lg_line(b, "(void)cpart; (void)csc; (void)cinv;");
	lg_line(b, "lg_u32x4 xv[8];");
	lg_line(b, "float rr[8];");
	lg_line(b, "const u8 *const xrow = (const u8 *)x + ((m0 + 8 * rb) * %d + col0) * 2;", k.n);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < 8; i++) {");
	lg_line(b, "const bool ok = 8 * rb + i < rows;");
	lg_line(b, "xv[i] = ok ? lg_ld16_cs(xrow + i * %d) : lg_u32x4{0u, 0u, 0u, 0u};", 2 * k.n);
	lg_line(b, "rr[i] = ok ? ((const float *)rms)[m0 + 8 * rb + i] : 0.0f;");
	lg_close(b);
	lg_line(b, "const lg_u32x4 wv = lg_ld16_keep((const u8 *)w + col0 * 2);");
	lg_line(b, "const float wf[8] = {lg_bf16_lo(wv.x), lg_bf16_hi(wv.x), lg_bf16_lo(wv.y), lg_bf16_hi(wv.y),");
	lg_line(b, "                     lg_bf16_lo(wv.z), lg_bf16_hi(wv.z), lg_bf16_lo(wv.w), lg_bf16_hi(wv.w)};");
	emit_y(b, "wf");
	if (rowwise(s)) {
		lg_line(b, "u8 *const qrow = (u8 *)q + (m0 + 8 * rb) * %d + col0;", k.n);
		lg_line(b, "float *const srow = (float *)s + (col0 >> 7) * M + m0 + 8 * rb;");
		emit_rowwise(b, s, &k);
	}
	if (colwise(s)) {
		lg_line(b, "u8 *const qtg = (u8 *)qt;");
		lg_line(b, "float *const stg = (float *)st;");
		lg_line(b, "const bool vec_ok = (M & 15) == 0; // 16-byte aligned qt rows");
		emit_colwise(b, s, &k);
	}
	lg_close(b);
}

static void emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	lg_emit_template(b, "bf16");
	lg_emit_e4m3(b, t);
	lg_emit_template(b, "vec");
	lg_emit_template(b, "reduce");
	lg_emit_template(b, "quant");
	lg_emit_rrms(b, s);
	lg_comment(b, "The e4m3 input of y under scale sc (inv = 1 / sc): %s.",
		   s->quant.round_scale ? "y * inv, exact for a power-of-two scale" : "y / sc correctly rounded");
	lg_line(b, "static __device__ __forceinline__ float lg_q(float y, float sc, float inv) { return %s; }",
		s->quant.round_scale ? "(void)sc, y * inv" : "lg_div_rn(y, sc, inv)");
	lg_line(b, "%s", "");
	emit_rms_kernel(b, p);
	emit_quant_kernel(b, s, p);
}

const struct lg_family lg_family_rmsnorm_quant = {
	.op = "rmsnorm_quant",
	.summary = "RMSNorm + 1x128 / 128x1 blockwise FP8 quantisation (K1)",
	.passes = 1u << LG_PASS_FORWARD,
	.dtypes = 1u << LG_DTYPE_BF16,
	.dims_required = 1u << LG_DIM_HIDDEN,
	.has_eps = true,
	.quant = 1,
	.tile_keys = (1u << LG_TILE_COLS) | (1u << LG_TILE_THREADS),
	.validate = validate,
	.plan = plan,
	.emit = emit,
	.geometry = geometry,
	.bytes = bytes,
	.nargs = {[LG_PASS_FORWARD] = NARGS},
	.args = {[LG_PASS_FORWARD] = fwd_args},
};
