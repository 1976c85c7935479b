/*
 * rmsnorm_quant.c - family "rmsnorm_quant" (KERNELS.md K1): RMSNorm fused
 * with 1x128 (rowwise) and 128x1 (columnwise, transposed) blockwise e4m3
 * quantisation, forward.
 *
 * Strategy: x is read from HBM once. A CTA owns tiles of 128 tokens (one
 * columnwise scale block) by `cols` features in shared memory. The row sums
 * of squares need whole rows, so on sm_90 the CTAs sharing the 128 tokens
 * form a thread-block cluster (hidden = cluster x cols) and exchange their
 * partial sums through distributed shared memory.
 *
 * Each thread owns an 8 x 8 block (8 rows, 8 columns) of a chunk of 128 or
 * 256 columns, and computes y = (x r) w once, in registers, for both copies:
 *   rowwise: amax over the 16 lanes of a 1x128 block (butterfly), 8-byte
 *            stores of q, one scale per row and block;
 *   columnwise: amax over its 8 rows, then over the 16 row blocks through
 *            shared memory; bytes packed 8 rows at a time into a swizzled
 *            transposed staging tile, written out as 128-byte qt lines.
 *
 * Pipelined mode (the tile fits in shared memory): a persistent grid, as many
 * clusters as are co-resident, walks the row tiles with `stages` tiles in
 * flight through cp.async. Streaming mode (it does not fit, e.g. without
 * clusters and a large hidden): one tile per CTA, each chunk copied in
 * twice, for the sums of squares and for the outputs (the second time mostly
 * from L2).
 */
#include <stdio.h>
#include <string.h>

#include "family.h"

#include "error.h"
#include "norm_common.h"
#include "templates.h"

#define ROWS 128 /* tokens per tile = one 128x1 scale block */
#define SMEM_MAX_SM90 (227 * 1024)
#define SMEM_MAX_SM80 (163 * 1024)

enum { ARG_X, ARG_W, ARG_Q, ARG_S, ARG_RMS, ARG_QT, ARG_ST, NARGS };

static const struct lg_arg fwd_args[NARGS] = {
	[ARG_X] = {"x", LG_ARG_IN, "[tokens, hidden] bf16"},
	[ARG_W] = {"w", LG_ARG_IN, "[hidden] bf16"},
	[ARG_Q] = {"q", LG_ARG_OUT, "[tokens, hidden] e4m3 (rowwise)"},
	[ARG_S] = {"s", LG_ARG_OUT, "[hidden/128, tokens] fp32 (rowwise scales)"},
	[ARG_RMS] = {"rms", LG_ARG_OPT_IN, "[tokens] fp32 reciprocal RMS (optional output)"},
	[ARG_QT] = {"qt", LG_ARG_OUT, "[hidden, tokens] e4m3 (columnwise, transposed)"},
	[ARG_ST] = {"st", LG_ARG_OUT, "[ceil(tokens/128), hidden] fp32 (columnwise scales)"},
};

/* Plan slots. */
#define P_CHUNK aux[0]  /* columns per chunk: 128 or 256 */
#define P_STAGES aux[1] /* pipelined: tiles in flight; 0: streaming mode */
#define P_SMEM aux[2]   /* dynamic shared memory bytes */

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
		if (c % 128 != 0 || h % c != 0)
			return lg_spec_error(where, "tile.cols: found %d, allowed: a multiple of 128 that divides hidden (%lld)",
					     c, (long long)h);
	}
	if (lg_spec_has_tile(s, LG_TILE_CLUSTER)) {
		int c = s->tile[LG_TILE_CLUSTER];
		if (c > 8 || (h / 128) % c != 0)
			return lg_spec_error(where, "tile.cluster: found %d, allowed: 1 to 8, dividing hidden/128 (%lld)",
					     c, (long long)h / 128);
		if (lg_spec_has_tile(s, LG_TILE_COLS) && (int64_t)c * s->tile[LG_TILE_COLS] != h)
			return lg_spec_error(where, "tile: cluster (%d) x cols (%d) must equal hidden (%lld)", c,
					     s->tile[LG_TILE_COLS], (long long)h);
	}
	if (lg_spec_has_tile(s, LG_TILE_STAGES) && s->tile[LG_TILE_STAGES] > 3)
		return lg_spec_error(where, "tile.stages: found %d, allowed: 1 to 3", s->tile[LG_TILE_STAGES]);
	return LG_OK;
}

/* Default cluster size: the smallest that gives tiles of <= 256 columns,
 * else the largest portable one (8) dividing hidden/128. */
static int default_cluster(int64_t blocks)
{
	for (int c = 1; c <= 8; c++)
		if (blocks % c == 0 && blocks / c <= 2)
			return c;
	for (int c = 8; c > 1; c--)
		if (blocks % c == 0)
			return c;
	return 1;
}

/* Shared memory besides the x tiles: qt staging, column partial maxima,
 * column scales and inverses, psum[2][128], rs[128]. */
static int64_t fixed_smem(int chunk)
{
	return (int64_t)chunk * ROWS + 16 * chunk * 4 + 2 * chunk * 4 + 2 * ROWS * 8 + ROWS * 4;
}

static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	int64_t h = s->dim[LG_DIM_HIDDEN], blocks = h / 128;
	int cluster;
	if (lg_spec_has_tile(s, LG_TILE_CLUSTER))
		cluster = s->tile[LG_TILE_CLUSTER];
	else if (lg_spec_has_tile(s, LG_TILE_COLS))
		cluster = (int)(h / s->tile[LG_TILE_COLS]);
	else
		cluster = t->sm >= 90 ? default_cluster(blocks) : 1;
	if (cluster > 1 && t->sm < 90)
		return lg_fail(LG_ERR_UNSUPPORTED, "%s: tile.cluster %d needs thread-block clusters (sm_90 or newer), target is %s",
			       s->entry, cluster, t->name);
	if (cluster > 8)
		return lg_fail(LG_ERR_UNSUPPORTED, "%s: cluster of %d CTAs (hidden %lld / cols %lld) exceeds 8",
			       s->entry, cluster, (long long)h, (long long)(h / cluster));
	int cols = (int)(h / cluster), chunk = cols % 256 == 0 ? 256 : 128;
	int64_t smax = t->sm >= 90 ? SMEM_MAX_SM90 : SMEM_MAX_SM80;
	int64_t tile_bytes = (int64_t)ROWS * cols * 2, fixed = fixed_smem(chunk);
	int stages = (int)((smax - 1024 - fixed) / tile_bytes);
	if (stages > 3)
		stages = 3;
	if (lg_spec_has_tile(s, LG_TILE_STAGES)) {
		if (s->tile[LG_TILE_STAGES] > stages)
			return lg_fail(LG_ERR_UNSUPPORTED, "%s: tile.stages %d: %d tiles of %lld bytes do not fit in %s's shared memory",
				       s->entry, s->tile[LG_TILE_STAGES], s->tile[LG_TILE_STAGES],
				       (long long)tile_bytes, t->name);
		stages = s->tile[LG_TILE_STAGES];
	}
	int64_t smem = fixed + (stages > 0 ? stages * tile_bytes : (int64_t)ROWS * chunk * 2);
	if (smem > smax)
		return lg_fail(LG_ERR_UNSUPPORTED, "%s: %lld bytes of shared memory exceed %s's %lld", s->entry,
			       (long long)smem, t->name, (long long)smax);
	p->tile[LG_TILE_CLUSTER] = cluster;
	p->tile[LG_TILE_COLS] = cols;
	p->tile[LG_TILE_THREADS] = 2 * chunk; /* 16 row blocks x chunk/8 column blocks */
	p->tile[LG_TILE_STAGES] = stages;
	p->hidden = h;
	p->P_CHUNK = chunk;
	p->P_STAGES = stages;
	p->P_SMEM = smem;
	p->nentries = 1;
	p->persistent[0] = stages > 0;
	snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
	p->nargs = NARGS;
	for (int i = 0; i < NARGS; i++)
		p->used[i] = 1;
	p->used[ARG_RMS] = 0; /* optional */
	if (!rowwise(s))
		p->used[ARG_Q] = p->used[ARG_S] = 0;
	if (!colwise(s))
		p->used[ARG_QT] = p->used[ARG_ST] = 0;
	return LG_OK;
}

static void geometry(const struct lg_plan *p, int e, int64_t tokens, struct lg_launch_dim *d)
{
	int64_t tiles = (tokens + ROWS - 1) / ROWS;
	/* pipelined: as many clusters as are co-resident, each walking tiles */
	if (p->persistent[e] && p->resident[e] && (int64_t)p->resident[e] < tiles)
		tiles = p->resident[e];
	d->grid[0] = (unsigned)p->tile[LG_TILE_CLUSTER];
	d->grid[1] = (unsigned)tiles;
	d->grid[2] = 1;
	d->block[0] = (unsigned)p->tile[LG_TILE_THREADS];
	d->block[1] = d->block[2] = 1;
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
	int n, cols, cluster, threads, chunk, nchunks, stages, lpr, chunkb, tileb;
};

static struct shape shape_of(const struct lg_plan *p)
{
	struct shape k;
	k.n = (int)p->hidden;
	k.cols = p->tile[LG_TILE_COLS];
	k.cluster = p->tile[LG_TILE_CLUSTER];
	k.threads = p->tile[LG_TILE_THREADS];
	k.chunk = (int)p->P_CHUNK;
	k.nchunks = k.cols / k.chunk;
	k.stages = (int)p->P_STAGES;
	k.lpr = k.chunk / 8;           /* lanes per row block: 8 columns each */
	k.chunkb = ROWS * k.chunk * 2; /* bytes of one chunk of x */
	k.tileb = k.chunkb * k.nchunks;
	return k;
}

/* Copy chunks [j0, j1) of row tile tr of x into `dst` with cp.async (16
 * bytes a thread; rows past M zero-filled). */
static void emit_copy_fn(lg_buf *b, const struct shape *k)
{
	int per = ROWS * k->chunk / 8 / k->threads; /* 16-byte pieces a thread copies per chunk */
	lg_comment(b, "Copy chunks [j0, j1) of row tile tr (columns k0 + j * %d ...) to dst: %d cp.async", k->chunk,
		   per);
	lg_comment(b, "of 16 bytes a thread per chunk, a warp per %d-byte row segment; rows past M read as 0.",
		   k->chunk * 2);
	lg_open(b, "static __device__ __forceinline__ void lg_copy(u8 *dst, const u8 *x, i64 tr, i64 M, i64 k0, int j0, int j1) {");
	lg_line(b, "if (tr * %d >= M) return;", ROWS);
	lg_line(b, "#pragma unroll 1");
	lg_open(b, "for (int j = j0; j < j1; j++) {");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < %d; i++) {", per);
	lg_line(b, "const int e = threadIdx.x + i * %d, r = e / %d, pc = e %% %d;", k->threads, k->lpr, k->lpr);
	lg_line(b, "const i64 m = tr * %d + r;", ROWS);
	lg_line(b, "const bool ok = m < M;");
	lg_line(b, "lg_cp16(dst + (j - j0) * %d + r * %d + pc * 16, x + ((ok ? m : 0) * %d + k0 + j * %d + pc * 8) * 2, ok ? 16u : 0u);",
		k->chunkb, k->chunk * 2, k->n, k->chunk);
	lg_close(b);
	lg_close(b);
	lg_close(b);
	lg_line(b, "%s", "");
}

/* x of this thread's 8 x 8 block of chunk j into xv[8] (16 bytes a row). */
static void emit_load_x(lg_buf *b, const struct shape *k, const char *chunk)
{
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < 8; i++) xv[i] = *(const lg_u32x4 *)(%s + (8 * rb + i) * %d + lb * 16);",
		chunk, k->chunk * 2);
}

/* Row sums of squares: fp64 partials of the thread's 8 rows (ss[8]), then a
 * transposing butterfly over the lpr lanes of the row block: after it, lane
 * l holds the whole sum of one row, which lanes with the low bits clear
 * write to psum. */
static void emit_psum_butterfly(lg_buf *b, const struct shape *k)
{
	int n = 4;
	char idx[128] = "0";
	for (int m = k->lpr / 2; m >= 1; m /= 2) {
		if (n >= 1) {
			lg_open(b, "{ // exchange %d rows with lane ^ %d", n, m);
			lg_line(b, "const bool hi = (lane & %d) != 0;", m);
			lg_line(b, "#pragma unroll");
			lg_open(b, "for (int q = 0; q < %d; q++) {", n);
			lg_line(b, "const double send = hi ? ss[q] : ss[q + %d], keep = hi ? ss[q + %d] : ss[q];", n, n);
			lg_line(b, "ss[q] = keep + __shfl_xor_sync(0xffffffffu, send, %d);", m);
			lg_close(b);
			lg_close(b);
			size_t len = strlen(idx);
			snprintf(idx + len, sizeof idx - len, " + ((lane >> %d) & 1) * %d", __builtin_ctz((unsigned)m), n);
			n /= 2;
		} else {
			lg_line(b, "ss[0] += __shfl_xor_sync(0xffffffffu, ss[0], %d);", m);
		}
	}
	lg_line(b, "if ((lane & %d) == 0) psum[8 * rb + %s] = ss[0];", k->lpr / 8 - 1, idx);
}

static void emit_sumsq_acc(lg_buf *b)
{
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < 8; i++)");
	lg_line(b, "\tss[i] = lg_sumsq_bf16x2(lg_sumsq_bf16x2(lg_sumsq_bf16x2(lg_sumsq_bf16x2(ss[i], xv[i].x), xv[i].y), xv[i].z), xv[i].w);");
}

/* Reciprocal RMS of the tile's rows from every CTA's psum, added in rank
 * order so all CTAs of the cluster get the same bits. */
static void emit_rrms_exchange(lg_buf *b, const struct shape *k)
{
	if (k->cluster > 1) {
		lg_comment(b, "Whole-row sums: the partial sums of the %d CTAs of the cluster, read through", k->cluster);
		lg_comment(b, "distributed shared memory (psum is double-buffered by tile parity; one cluster");
		lg_comment(b, "barrier per tile keeps a buffer alive until every CTA has read it).");
		lg_line(b, "lg_cluster_sync();");
		lg_open(b, "if (threadIdx.x < %d) {", ROWS);
		lg_line(b, "double sum = 0.0;");
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (u32 c = 0; c < %du; c++) sum += lg_dsmem_ld_f64(&psum[threadIdx.x], c);", k->cluster);
		lg_line(b, "rs[threadIdx.x] = lg_rrms(sum);");
		lg_close(b);
	} else {
		lg_line(b, "__syncthreads();");
		lg_line(b, "if (threadIdx.x < %d) rs[threadIdx.x] = lg_rrms(psum[threadIdx.x]);", ROWS);
	}
	lg_line(b, "__syncthreads();");
	lg_line(b, "if (rmsg && blockIdx.x == 0 && threadIdx.x < rows) rmsg[m0 + threadIdx.x] = rs[threadIdx.x];");
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
	lg_line(b, "const int r = 8 * rb + i;");
	lg_open(b, "if (r < rows) {");
	lg_line(b, "lg_st8(qg + (m0 + r) * %d + col0, p0, p1);", k->n);
	lg_line(b, "if ((lb & 15) == 0) sg[(col0 >> 7) * M + m0 + r] = sc;");
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
	lg_line(b, "*(float4 *)(cpart + rb * %d + lb * 8) = make_float4(cm[0], cm[1], cm[2], cm[3]);", k->chunk);
	lg_line(b, "*(float4 *)(cpart + rb * %d + lb * 8 + 4) = make_float4(cm[4], cm[5], cm[6], cm[7]);", k->chunk);
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_open(b, "if (threadIdx.x < %d) {", k->chunk);
	lg_line(b, "float amax = cpart[threadIdx.x];");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int q = 1; q < 16; q++) amax = fmaxf(amax, cpart[q * %d + threadIdx.x]);", k->chunk);
	emit_scale(b, s, "sc", "amax", "inv");
	lg_line(b, "csc[threadIdx.x] = sc;");
	lg_line(b, "cinv[threadIdx.x] = inv;");
	lg_line(b, "stg[tr * %d + k0 + j * %d + threadIdx.x] = sc;", k->n, k->chunk);
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_comment(b, "Quantise with the column scales; pack 8 rows of a column into 8 bytes of the");
	lg_comment(b, "transposed staging tile [%d columns][128 rows], 8-byte slots XOR-swizzled by", k->chunk);
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
	lg_open(b, "for (int e = threadIdx.x; e < %d; e += %d) {", k->chunk * 8, k->threads);
	lg_line(b, "const int c = e >> 3, h = e & 7, sw = (c >> 3) & 15;");
	lg_line(b, "uint4 v = *(const uint4 *)(stage + c * 128 + ((h ^ (sw >> 1)) << 4));");
	lg_line(b, "if (sw & 1) v = make_uint4(v.z, v.w, v.x, v.y);");
	lg_line(b, "u8 *const dst = qtg + (k0 + j * %d + c) * M + m0 + 16 * h;", k->chunk);
	lg_open(b, "if (vec_ok && 16 * h + 16 <= rows) {");
	lg_line(b, "lg_st16(dst, lg_u32x4{v.x, v.y, v.z, v.w});");
	lg_close_with(b, "} else {");
	lg_line(b, "const u32 u[4] = {v.x, v.y, v.z, v.w};");
	lg_line(b, "for (int i = 0; i < 16 && 16 * h + i < rows; i++) dst[i] = (u8)(u[i >> 2] >> (8 * (i & 3)));");
	lg_close(b);
	lg_close(b);
}

/* The outputs of chunk j of the current tile, whose x is in `chunk`. */
static void emit_chunk_outputs(lg_buf *b, const struct lg_spec *s, const struct shape *k, const char *chunk,
			       bool have_x)
{
	lg_line(b, "const i64 col0 = k0 + j * %d + lb * 8; // this thread's first column", k->chunk);
	lg_line(b, "const lg_u32x4 wv = lg_ld16_keep(wg + col0 * 2);");
	lg_line(b, "const float w[8] = {lg_bf16_lo(wv.x), lg_bf16_hi(wv.x), lg_bf16_lo(wv.y), lg_bf16_hi(wv.y),");
	lg_line(b, "                    lg_bf16_lo(wv.z), lg_bf16_hi(wv.z), lg_bf16_lo(wv.w), lg_bf16_hi(wv.w)};");
	if (!have_x)
		emit_load_x(b, k, chunk);
	emit_y(b, "w");
	if (rowwise(s))
		emit_rowwise(b, s, k);
	if (colwise(s))
		emit_colwise(b, s, k);
}

static void emit_signature(lg_buf *b, const struct shape *k, const struct lg_plan *p)
{
	if (k->cluster > 1)
		lg_line(b, "extern \"C\" __global__ void __cluster_dims__(%d, 1, 1) __launch_bounds__(%d, 1)",
			k->cluster, k->threads);
	else
		lg_line(b, "extern \"C\" __global__ void __launch_bounds__(%d, 1)", k->threads);
	lg_line(b, "%s(u64 x, u64 w, u64 q, u64 s, u64 rms, u64 qt, u64 st, i64 M)", p->entry[0]);
	lg_open(b, "{");
	lg_line(b, "extern __shared__ __align__(128) u8 smem[];");
	int xbytes = k->stages ? k->stages * k->tileb : k->chunkb;
	lg_line(b, "u8 *const stage = smem + %d; // qt staging [%d][128] bytes", xbytes, k->chunk);
	lg_line(b, "float *const cpart = (float *)(stage + %d); // [16][%d] column maxima of the row blocks",
		k->chunk * ROWS, k->chunk);
	lg_line(b, "float *const csc = cpart + %d, *const cinv = csc + %d; // column scales, inverses",
		16 * k->chunk, k->chunk);
	lg_line(b, "double *const psum2 = (double *)(cinv + %d); // [2][128] partial sums of squares", k->chunk);
	lg_line(b, "float *const rs = (float *)(psum2 + %d); // [128] reciprocal RMS", 2 * ROWS);
	lg_line(b, "const int lane = threadIdx.x & 31, lb = threadIdx.x %% %d, rb = threadIdx.x / %d;", k->lpr,
		k->lpr);
	lg_line(b, "const i64 k0 = (i64)blockIdx.x * %d; // first column of this CTA", k->cols);
	lg_line(b, "const u8 *const xg = (const u8 *)x, *const wg = (const u8 *)w;");
	lg_line(b, "u8 *const qg = (u8 *)q, *const qtg = (u8 *)qt;");
	lg_line(b, "float *const sg = (float *)s, *const rmsg = (float *)rms, *const stg = (float *)st;");
	lg_line(b, "const bool vec_ok = (M & 15) == 0; // 16-byte aligned qt rows");
	lg_line(b, "const i64 tiles = (M + %d) / %d;", ROWS - 1, ROWS);
	lg_line(b, "(void)qg; (void)qtg; (void)sg; (void)stg; (void)vec_ok; (void)cpart;");
}

/* Per tile: sums of squares (x kept in registers when the tile is one
 * chunk), the cluster exchange, then the outputs of every chunk. */
static void emit_tile_body(lg_buf *b, const struct lg_spec *s, const struct shape *k)
{
	bool stream = !k->stages, one = k->nchunks == 1;
	lg_line(b, "double *const psum = psum2 + (it & 1) * %d;", ROWS);
	lg_line(b, "const i64 m0 = tr * %d;", ROWS);
	lg_line(b, "const int rows = (int)(M - m0 < %d ? M - m0 : %d);", ROWS, ROWS);
	lg_line(b, "lg_u32x4 xv[8];");
	lg_line(b, "double ss[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};");
	lg_comment(b, "Sums of squares of the thread's 8 rows (fp64).");
	lg_line(b, "#pragma unroll 1");
	lg_open(b, "for (int j = 0; j < %d; j++) {", k->nchunks);
	if (stream) {
		lg_line(b, "__syncthreads(); // the chunk buffer is free");
		lg_line(b, "lg_copy(tile, xg, tr, M, k0, j, j + 1);");
		lg_line(b, "lg_cp_commit();");
		lg_line(b, "lg_cp_wait(0);");
		lg_line(b, "__syncthreads();");
		emit_load_x(b, k, "tile");
	} else {
		char ch[64];
		snprintf(ch, sizeof ch, "(tile + j * %d)", k->chunkb);
		emit_load_x(b, k, ch);
	}
	emit_sumsq_acc(b);
	lg_close(b);
	emit_psum_butterfly(b, k);
	emit_rrms_exchange(b, k);
	lg_line(b, "float rr[8];");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < 8; i++) rr[i] = rs[8 * rb + i];");
	lg_comment(b, "Outputs, chunk by chunk.");
	lg_line(b, "#pragma unroll 1");
	lg_open(b, "for (int j = 0; j < %d; j++) {", k->nchunks);
	if (stream) {
		lg_line(b, "__syncthreads();");
		lg_line(b, "lg_copy(tile, xg, tr, M, k0, j, j + 1);");
		lg_line(b, "lg_cp_commit();");
		lg_line(b, "lg_cp_wait(0);");
		lg_line(b, "__syncthreads();");
		emit_chunk_outputs(b, s, k, "tile", false);
	} else {
		char ch[64];
		snprintf(ch, sizeof ch, "(tile + j * %d)", k->chunkb);
		lg_line(b, "if (j > 0) __syncthreads(); // staging and column scales are free");
		emit_chunk_outputs(b, s, k, ch, one);
	}
	lg_close(b);
}

static void emit_kernel(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	struct shape k = shape_of(p);
	if (k.stages) {
		lg_comment(b, "Pipelined: hidden %d = cluster %d x %d columns (%d chunk(s) of %d); persistent", k.n,
			   k.cluster, k.cols, k.nchunks, k.chunk);
		lg_comment(b, "grid over 128-row tiles, %d tile(s) of %d bytes in flight; %d threads.", k.stages,
			   k.tileb, k.threads);
	} else {
		lg_comment(b, "Streaming: hidden %d = cluster %d x %d columns in %d chunks of %d, each read", k.n,
			   k.cluster, k.cols, k.nchunks, k.chunk);
		lg_comment(b, "twice (the second time mostly from L2); one tile per CTA; %d threads.", k.threads);
	}
	emit_signature(b, &k, p);
	if (k.stages) {
		lg_comment(b, "Prologue: the first %d tile(s) in flight.", k.stages - 1);
		lg_line(b, "#pragma unroll");
		lg_open(b, "for (int ps = 0; ps < %d; ps++) {", k.stages - 1);
		lg_line(b, "lg_copy(smem + ps * %d, xg, blockIdx.y + (i64)ps * gridDim.y, M, k0, 0, %d);", k.tileb,
			k.nchunks);
		lg_line(b, "lg_cp_commit();");
		lg_close(b);
		lg_line(b, "int it = 0;");
		lg_line(b, "#pragma unroll 1");
		lg_open(b, "for (i64 tr = blockIdx.y; tr < tiles; tr += gridDim.y, it++) {");
		lg_line(b, "lg_copy(smem + ((it + %d) %% %d) * %d, xg, tr + (i64)%d * gridDim.y, M, k0, 0, %d);",
			k.stages - 1, k.stages, k.tileb, k.stages - 1, k.nchunks);
		lg_line(b, "lg_cp_commit();");
		lg_line(b, "lg_cp_wait(%d); // this thread's copies of tile tr have landed", k.stages - 1);
		lg_line(b, "__syncthreads();");
		lg_line(b, "const u8 *const tile = smem + (it %% %d) * %d;", k.stages, k.tileb);
		emit_tile_body(b, s, &k);
		lg_line(b, "__syncthreads(); // the stage is free for the copy issued next iteration");
		lg_close(b);
	} else {
		lg_line(b, "const i64 tr = blockIdx.y;");
		lg_line(b, "const int it = 0;");
		lg_line(b, "u8 *const tile = smem;");
		lg_open(b, "{");
		emit_tile_body(b, s, &k);
		lg_close(b);
	}
	if (k.cluster > 1)
		lg_line(b, "lg_cluster_sync(); // keep psum alive until every CTA has read it");
	lg_close(b);
}

static void emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	lg_emit_template(b, "bf16");
	lg_emit_e4m3(b, t);
	lg_emit_template(b, "vec");
	lg_emit_template(b, "reduce");
	lg_emit_template(b, "quant");
	lg_emit_template(b, "async");
	if (p->tile[LG_TILE_CLUSTER] > 1)
		lg_emit_template(b, "cluster");
	lg_emit_rrms(b, s);
	lg_comment(b, "The e4m3 input of y under scale sc (inv = 1 / sc): %s.",
		   s->quant.round_scale ? "y * inv, exact for a power-of-two scale" : "y / sc correctly rounded");
	lg_line(b, "static __device__ __forceinline__ float lg_q(float y, float sc, float inv) { return %s; }",
		s->quant.round_scale ? "(void)sc, y * inv" : "lg_div_rn(y, sc, inv)");
	lg_line(b, "%s", "");
	struct shape k = shape_of(p);
	emit_copy_fn(b, &k);
	emit_kernel(b, s, p);
}

const struct lg_family lg_family_rmsnorm_quant = {
	.op = "rmsnorm_quant",
	.summary = "RMSNorm + 1x128 / 128x1 blockwise FP8 quantisation (K1)",
	.passes = 1u << LG_PASS_FORWARD,
	.dtypes = 1u << LG_DTYPE_BF16,
	.dims_required = 1u << LG_DIM_HIDDEN,
	.has_eps = true,
	.quant = 1,
	.tile_keys = (1u << LG_TILE_COLS) | (1u << LG_TILE_CLUSTER) | (1u << LG_TILE_STAGES),
	.validate = validate,
	.plan = plan,
	.emit = emit,
	.geometry = geometry,
	.bytes = bytes,
	.nargs = {[LG_PASS_FORWARD] = NARGS},
	.args = {[LG_PASS_FORWARD] = fwd_args},
};
