/*
 * rmsnorm_quant.c - family "rmsnorm_quant" (KERNELS.md K1): RMSNorm fused
 * with 1x128 (rowwise) and 128x1 (columnwise, transposed) blockwise e4m3
 * quantisation, forward.
 *
 * Strategy: x is read from HBM once. A CTA owns tiles of 128 tokens (one
 * columnwise scale block) by `cols` features and keeps each in shared
 * memory. The row sums of squares need whole rows, so on sm_90 the CTAs that
 * share the 128 tokens form a thread-block cluster (hidden = cluster * cols)
 * and exchange their partial sums through distributed shared memory; each
 * then normalises its own tile and writes the rowwise copy (q, s) and the
 * transposed copy (qt, st) from that one read.
 *
 * Pipelined mode (the tile fits in shared memory): a persistent grid, as many
 * clusters as are co-resident, walks the row tiles; `stages` tiles are in
 * flight at once through cp.async, so the loads of the next tiles overlap
 * the arithmetic and the stores of the current one. Streaming mode (the tile
 * does not fit, e.g. no clusters before sm_90 and a large hidden): one tile
 * per CTA, its columns read in chunks twice, the second time mostly from L2,
 * once the row sums are known.
 *
 * Shared-memory tile: 128 rows of `chunk` bf16, in 16-byte pieces whose
 * position within a row is XOR-swizzled by (row / 16) % 8, so that the
 * row-major passes and the column pass (8 rows groups of 16 rows at once)
 * are both free of bank conflicts.
 */
#include <stdio.h>

#include "family.h"

#include "error.h"
#include "norm_common.h"
#include "templates.h"

#define ROWS 128                      /* tokens per tile = one 128x1 scale block */
#define PIPE_MAX (200 * 1024)         /* shared-memory bytes for pipelined tiles */
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
#define P_CHUNK aux[0]  /* columns per shared-memory chunk: 128 or 256 */
#define P_STAGES aux[1] /* pipelined: tiles in flight; 0: streaming mode */
#define P_SMEM aux[2]   /* dynamic shared memory bytes */
#define P_MINB aux[3]   /* CTAs per SM for __launch_bounds__ */

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
	if (lg_spec_has_tile(s, LG_TILE_THREADS)) {
		int t = s->tile[LG_TILE_THREADS];
		if (t != 128 && t != 256 && t != 512)
			return lg_spec_error(where, "tile.threads: found %d, allowed: 128, 256, 512", t);
	}
	if (lg_spec_has_tile(s, LG_TILE_STAGES) && s->tile[LG_TILE_STAGES] > 3)
		return lg_spec_error(where, "tile.stages: found %d, allowed: 0 (streaming) to 3",
				     s->tile[LG_TILE_STAGES]);
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
	int cols = (int)(h / cluster);
	int chunk = cols % 256 == 0 ? 256 : 128;
	int64_t smax = t->sm >= 90 ? SMEM_MAX_SM90 : SMEM_MAX_SM80;
	int64_t tile_bytes = (int64_t)ROWS * cols * 2, smem, pipe_max = PIPE_MAX < smax - 4096 ? PIPE_MAX : smax - 4096;
	int stages = (int)(pipe_max / tile_bytes);
	if (stages > 3)
		stages = 3;
	if (lg_spec_has_tile(s, LG_TILE_STAGES)) {
		if (s->tile[LG_TILE_STAGES] > stages)
			return lg_fail(LG_ERR_UNSUPPORTED, "%s: tile.stages %d: %d tiles of %lld bytes exceed %d bytes of shared memory",
				       s->entry, s->tile[LG_TILE_STAGES], s->tile[LG_TILE_STAGES],
				       (long long)tile_bytes, (int)pipe_max);
		stages = s->tile[LG_TILE_STAGES];
	}
	if (stages > 0)
		smem = stages * tile_bytes + 2 * ROWS * 8 + ROWS * 4;
	else
		smem = (int64_t)ROWS * chunk * 2 + ROWS * 8 + ROWS * 4;
	if (smem > smax)
		return lg_fail(LG_ERR_UNSUPPORTED, "%s: %lld bytes of shared memory exceed %s's %lld", s->entry,
			       (long long)smem, t->name, (long long)smax);
	int threads = lg_spec_has_tile(s, LG_TILE_THREADS) ? s->tile[LG_TILE_THREADS]
							    : (stages > 0 && smem > smax / 2 ? 512 : 256);

	p->tile[LG_TILE_CLUSTER] = cluster;
	p->tile[LG_TILE_COLS] = cols;
	p->tile[LG_TILE_THREADS] = threads;
	p->tile[LG_TILE_STAGES] = stages;
	p->hidden = h;
	p->P_CHUNK = chunk;
	p->P_STAGES = stages;
	p->P_SMEM = smem;
	int minb = (int)((smax - 1024) / smem);
	if (minb > 2048 / threads)
		minb = 2048 / threads;
	p->P_MINB = minb < 1 ? 1 : minb;
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
	int n, cols, cluster, threads, warps, chunk, nchunks, stages, lpr, rpl, iters, chunkb;
};

static struct shape shape_of(const struct lg_plan *p)
{
	struct shape k;
	k.n = (int)p->hidden;
	k.cols = p->tile[LG_TILE_COLS];
	k.cluster = p->tile[LG_TILE_CLUSTER];
	k.threads = p->tile[LG_TILE_THREADS];
	k.warps = k.threads / 32;
	k.chunk = (int)p->P_CHUNK;
	k.nchunks = k.cols / k.chunk;
	k.stages = (int)p->P_STAGES;
	k.lpr = k.chunk / 8;                /* lanes per row: one 16-byte piece each */
	k.rpl = 32 / k.lpr;                 /* rows per warp-wide access */
	k.iters = ROWS / (k.warps * k.rpl); /* warp-wide accesses per chunk */
	k.chunkb = ROWS * k.chunk * 2;      /* bytes of one chunk in shared memory */
	return k;
}

static void emit_helpers(lg_buf *b, const struct shape *k)
{
	lg_comment(b, "Byte offset of 16-byte piece pc of tile row r: XOR-swizzled by (r / 16) %% 8.");
	lg_open(b, "static __device__ __forceinline__ u32 lg_tile_off(int r, int pc) {");
	lg_line(b, "return (u32)(r * %d + ((pc ^ ((r >> 4) & 7)) << 4));", k->chunk * 2);
	lg_close(b);
	lg_line(b, "%s", "");
	if (!k->stages)
		return;
	lg_comment(b, "Start the copy of row tile tr (columns k0..k0+%d) into a stage: %d cp.async of", k->cols,
		   k->nchunks * k->iters);
	lg_comment(b, "16 bytes per thread; rows past M are zero-filled. No-op past the last tile.");
	lg_open(b, "static __device__ __forceinline__ void lg_load_tile(u8 *stage, const u8 *x, i64 tr, i64 M, i64 k0) {");
	lg_line(b, "if (tr * %d >= M) return;", ROWS);
	lg_line(b, "const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, pc = lane & %d;", k->lpr - 1);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int j = 0; j < %d; j++) {", k->nchunks);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < %d; i++) {", k->iters);
	lg_line(b, "const int r = (warp + %d * i) * %d + lane / %d;", k->warps, k->rpl, k->lpr);
	lg_line(b, "const i64 m = tr * %d + r;", ROWS);
	lg_line(b, "const bool ok = m < M;");
	lg_line(b, "lg_cp16(stage + j * %d + lg_tile_off(r, pc), x + ((ok ? m : 0) * %d + k0 + j * %d + pc * 8) * 2, ok ? 16u : 0u);",
		k->chunkb, k->n, k->chunk);
	lg_close(b);
	lg_close(b);
	lg_close(b);
	lg_line(b, "%s", "");
}

/* Sum the squares of 16-byte pieces v[i] of row r into psum[r] (fp64):
 * a butterfly over the lanes of each row, then one lane writes. */
static void emit_psum_store(lg_buf *b, const struct shape *k, const char *acc, bool add)
{
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < %d; i++) {", k->iters);
	lg_line(b, "const int r = (warp + %d * i) * %d + lane / %d;", k->warps, k->rpl, k->lpr);
	lg_line(b, "const double a = lg_dsum_xor(%s[i], 1, %d);", acc, k->lpr / 2);
	lg_line(b, "if (pc == 0) psum[r] = %sa;", add ? "(j == 0 ? 0.0 : psum[r]) + " : "");
	lg_close(b);
}

static void emit_sumsq4(lg_buf *b, const char *dst, const char *v)
{
	lg_line(b, "%s = lg_sumsq_bf16x2(lg_sumsq_bf16x2(lg_sumsq_bf16x2(lg_sumsq_bf16x2(%s, %s.x), %s.y), %s.z), %s.w);",
		dst, dst, v, v, v, v);
}

/* Streaming mode: load chunk j of the tile into registers (rows past `rows`
 * read as zeros), then either store it to `buf` or add its squares to psum. */
static void emit_load_chunk(lg_buf *b, const struct shape *k, bool store, const char *buf)
{
	lg_open(b, "{");
	lg_line(b, "lg_u32x4 v[%d];", k->iters);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < %d; i++) {", k->iters);
	lg_line(b, "const int r = (warp + %d * i) * %d + lane / %d;", k->warps, k->rpl, k->lpr);
	lg_line(b, "v[i] = lg_u32x4{0u, 0u, 0u, 0u};");
	lg_line(b, "if (r < rows) v[i] = lg_ld16(xt + (i64)r * %d + (j * %d + pc * 8) * 2);", k->n * 2,
		k->chunk);
	lg_close(b);
	if (store) {
		lg_line(b, "#pragma unroll");
		lg_open(b, "for (int i = 0; i < %d; i++) {", k->iters);
		lg_line(b, "const int r = (warp + %d * i) * %d + lane / %d;", k->warps, k->rpl, k->lpr);
		lg_line(b, "*(lg_u32x4 *)(%s + lg_tile_off(r, pc)) = v[i];", buf);
		lg_close(b);
	} else {
		lg_line(b, "double acc[%d];", k->iters);
		lg_line(b, "#pragma unroll");
		lg_open(b, "for (int i = 0; i < %d; i++) {", k->iters);
		lg_line(b, "acc[i] = 0.0;");
		emit_sumsq4(b, "acc[i]", "v[i]");
		lg_close(b);
		emit_psum_store(b, k, "acc", true);
	}
	lg_close(b);
}

/* Pipelined mode: the squares of the whole tile, read from shared memory. */
static void emit_sumsq_smem(lg_buf *b, const struct shape *k)
{
	lg_open(b, "{");
	lg_line(b, "double acc[%d];", k->iters);
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < %d; i++) acc[i] = 0.0;", k->iters);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int j = 0; j < %d; j++) {", k->nchunks);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < %d; i++) {", k->iters);
	lg_line(b, "const int r = (warp + %d * i) * %d + lane / %d;", k->warps, k->rpl, k->lpr);
	lg_line(b, "const lg_u32x4 v = *(const lg_u32x4 *)(tile + j * %d + lg_tile_off(r, pc));", k->chunkb);
	emit_sumsq4(b, "acc[i]", "v");
	lg_close(b);
	lg_close(b);
	emit_psum_store(b, k, "acc", false);
	lg_close(b);
}

static void emit_scale(lg_buf *b, const struct lg_spec *s, const char *sc, const char *amax,
		       const char *inv)
{
	if (s->quant.round_scale) {
		lg_line(b, "const float %s = lg_scale_pow2(%s), %s = lg_inv_pow2(%s);", sc, amax, inv, sc);
	} else {
		lg_line(b, "const float %s = lg_scale_exact(%s), %s = 1.0f / %s;", sc, amax, inv, sc);
	}
}


static void emit_row_pass(lg_buf *b, const struct lg_spec *s, const struct shape *k, const char *buf)
{
	lg_comment(b, "Rowwise copy: each lane normalises 8 columns of a row; 16 lanes make one");
	lg_comment(b, "1x128 block, whose amax is a butterfly over those lanes. 8-byte fp8 stores.");
	lg_open(b, "{");
	lg_line(b, "const lg_u32x4 wv = lg_ld16_keep(wg + (k0 + j * %d + pc * 8) * 2);", k->chunk);
	lg_line(b, "const float w[8] = {lg_bf16_lo(wv.x), lg_bf16_hi(wv.x), lg_bf16_lo(wv.y), lg_bf16_hi(wv.y),");
	lg_line(b, "                    lg_bf16_lo(wv.z), lg_bf16_hi(wv.z), lg_bf16_lo(wv.w), lg_bf16_hi(wv.w)};");
	lg_line(b, "#pragma unroll 4");
	lg_open(b, "for (int i = 0; i < %d; i++) {", k->iters);
	lg_line(b, "const int r = (warp + %d * i) * %d + lane / %d;", k->warps, k->rpl, k->lpr);
	lg_line(b, "const lg_u32x4 v = *(const lg_u32x4 *)(%s + lg_tile_off(r, pc));", buf);
	lg_line(b, "const float rr = rs[r];");
	lg_line(b, "const u32 xv[4] = {v.x, v.y, v.z, v.w};");
	lg_line(b, "float y[8], amax = 0.0f;");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int e = 0; e < 4; e++) {");
	lg_line(b, "y[2 * e] = (lg_bf16_lo(xv[e]) * rr) * w[2 * e];");
	lg_line(b, "y[2 * e + 1] = (lg_bf16_hi(xv[e]) * rr) * w[2 * e + 1];");
	lg_line(b, "amax = fmaxf(amax, fmaxf(fabsf(y[2 * e]), fabsf(y[2 * e + 1])));");
	lg_close(b);
	lg_line(b, "amax = lg_max_xor(amax, 1, 8);");
	emit_scale(b, s, "sc", "amax", "inv");
	lg_line(b, "u32 p[2];");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int e = 0; e < 2; e++)");
	lg_line(b, "\tp[e] = lg_e4m3x2(lg_q(y[4 * e], sc, inv), lg_q(y[4 * e + 1], sc, inv)) |");
	lg_line(b, "\t       (lg_e4m3x2(lg_q(y[4 * e + 2], sc, inv), lg_q(y[4 * e + 3], sc, inv)) << 16);");
	lg_open(b, "if (r < rows) {");
	lg_line(b, "lg_st8(qg + (m0 + r) * %d + k0 + j * %d + pc * 8, p[0], p[1]);", k->n, k->chunk);
	lg_line(b, "if ((pc & 15) == 0) sg[(i64)((k0 + j * %d + pc * 8) / 128) * M + m0 + r] = sc;",
		k->chunk);
	lg_close(b);
	lg_close(b);
	lg_close(b);
}

static void emit_col_pass(lg_buf *b, const struct lg_spec *s, const struct shape *k, const char *buf)
{
	lg_comment(b, "Columnwise copy: a warp takes 8 columns x 128 rows; lane = pair + 4 * group,");
	lg_comment(b, "a group being 16 consecutive rows. The 128x1 amax is a butterfly over the 8");
	lg_comment(b, "groups; each lane writes 16 consecutive tokens of 2 columns of qt (16-byte");
	lg_comment(b, "stores; 8 lanes fill one 128-byte line).");
	lg_open(b, "for (int pcc = warp; pcc < %d; pcc += %d) {", k->chunk / 8, k->warps);
	lg_line(b, "const int g = lane >> 2, cp = lane & 3;");
	lg_line(b, "const i64 col = k0 + j * %d + pcc * 8 + 2 * cp;", k->chunk);
	lg_line(b, "const u32 wp = *(const u32 *)(wg + col * 2);");
	lg_line(b, "const float wa = lg_bf16_lo(wp), wb = lg_bf16_hi(wp);");
	lg_line(b, "float ya[16], yb[16], ama = 0.0f, amb = 0.0f;");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < 16; i++) {");
	lg_line(b, "const u32 v = *(const u32 *)(%s + lg_tile_off(16 * g + i, pcc) + cp * 4);", buf);
	lg_line(b, "ya[i] = (lg_bf16_lo(v) * rr[i]) * wa;");
	lg_line(b, "yb[i] = (lg_bf16_hi(v) * rr[i]) * wb;");
	lg_line(b, "ama = fmaxf(ama, fabsf(ya[i]));");
	lg_line(b, "amb = fmaxf(amb, fabsf(yb[i]));");
	lg_close(b);
	lg_line(b, "ama = lg_max_xor(ama, 4, 16);");
	lg_line(b, "amb = lg_max_xor(amb, 4, 16);");
	emit_scale(b, s, "sa", "ama", "ia");
	emit_scale(b, s, "sb", "amb", "ib");
	lg_line(b, "u32 qa[4], qb[4];");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int e = 0; e < 4; e++) {");
	lg_line(b, "qa[e] = lg_e4m3x2(lg_q(ya[4 * e], sa, ia), lg_q(ya[4 * e + 1], sa, ia)) |");
	lg_line(b, "        (lg_e4m3x2(lg_q(ya[4 * e + 2], sa, ia), lg_q(ya[4 * e + 3], sa, ia)) << 16);");
	lg_line(b, "qb[e] = lg_e4m3x2(lg_q(yb[4 * e], sb, ib), lg_q(yb[4 * e + 1], sb, ib)) |");
	lg_line(b, "        (lg_e4m3x2(lg_q(yb[4 * e + 2], sb, ib), lg_q(yb[4 * e + 3], sb, ib)) << 16);");
	lg_close(b);
	lg_line(b, "u8 *pa = qtg + col * M + m0 + 16 * g;");
	lg_open(b, "if (vec_ok && 16 * g + 16 <= rows) {");
	lg_line(b, "lg_st16(pa, lg_u32x4{qa[0], qa[1], qa[2], qa[3]});");
	lg_line(b, "lg_st16(pa + M, lg_u32x4{qb[0], qb[1], qb[2], qb[3]});");
	lg_close_with(b, "} else {");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < 16; i++) {");
	lg_open(b, "if (16 * g + i < rows) {");
	lg_line(b, "pa[i] = (u8)(qa[i >> 2] >> (8 * (i & 3)));");
	lg_line(b, "pa[M + i] = (u8)(qb[i >> 2] >> (8 * (i & 3)));");
	lg_close(b);
	lg_close(b);
	lg_close(b);
	lg_open(b, "if (g == 0) {");
	lg_line(b, "stg[tr * %d + col] = sa;", k->n);
	lg_line(b, "stg[tr * %d + col + 1] = sb;", k->n);
	lg_close(b);
	lg_close(b);
}

/* Reciprocal RMS of the tile's rows from the partial sums (psum) of every
 * CTA of the cluster, added in rank order so every CTA gets the same bits.
 * Pipelined kernels keep two psum buffers (by tile parity) and one cluster
 * barrier per tile; streaming kernels arrive here and wait before exit. */
static void emit_rrms_exchange(lg_buf *b, const struct shape *k)
{
	if (k->cluster > 1) {
		lg_comment(b, "Whole-row sums: the partial sums of the %d CTAs of the cluster, through", k->cluster);
		lg_comment(b, "distributed shared memory.");
		lg_line(b, "lg_cluster_sync();");
		lg_open(b, "if (threadIdx.x < %d) {", ROWS);
		lg_line(b, "double sum = 0.0;");
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (u32 c = 0; c < %du; c++) sum += lg_dsmem_ld_f64(&psum[threadIdx.x], c);", k->cluster);
		lg_line(b, "rs[threadIdx.x] = lg_rrms(sum);");
		lg_close(b);
		if (!k->stages)
			lg_line(b, "lg_cluster_arrive(); // done reading the other CTAs' psum");
	} else {
		lg_line(b, "__syncthreads();");
		lg_line(b, "if (threadIdx.x < %d) rs[threadIdx.x] = lg_rrms(psum[threadIdx.x]);", ROWS);
	}
	lg_line(b, "__syncthreads();");
	lg_line(b, "if (rmsg && blockIdx.x == 0 && threadIdx.x < rows) rmsg[m0 + threadIdx.x] = rs[threadIdx.x];");
}

static void emit_signature(lg_buf *b, const struct shape *k, const struct lg_plan *p)
{
	if (k->cluster > 1)
		lg_line(b, "extern \"C\" __global__ void __cluster_dims__(%d, 1, 1) __launch_bounds__(%d, %lld)",
			k->cluster, k->threads, (long long)p->P_MINB);
	else
		lg_line(b, "extern \"C\" __global__ void __launch_bounds__(%d, %lld)", k->threads,
			(long long)p->P_MINB);
	lg_line(b, "%s(u64 x, u64 w, u64 q, u64 s, u64 rms, u64 qt, u64 st, i64 M)", p->entry[0]);
	lg_open(b, "{");
	lg_line(b, "extern __shared__ __align__(128) u8 smem[];");
	lg_line(b, "const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, pc = lane & %d;", k->lpr - 1);
	lg_line(b, "const i64 k0 = (i64)blockIdx.x * %d; // first column of this CTA", k->cols);
	lg_line(b, "const u8 *const wg = (const u8 *)w;");
	lg_line(b, "u8 *const qg = (u8 *)q;");
	lg_line(b, "float *const sg = (float *)s;");
	lg_line(b, "float *const rmsg = (float *)rms;");
	lg_line(b, "u8 *const qtg = (u8 *)qt;");
	lg_line(b, "float *const stg = (float *)st;");
}

/* Normalise, quantise and write every chunk of the tile in `tile`. */
static void emit_tile_passes(lg_buf *b, const struct lg_spec *s, const struct shape *k, bool reload)
{
	if (colwise(s)) {
		lg_line(b, "const bool vec_ok = (M & 15) == 0; // 16-byte aligned qt rows");
		lg_line(b, "float rr[16];");
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int i = 0; i < 16; i++) rr[i] = rs[16 * (lane >> 2) + i];");
	}
	char buf[64];
	snprintf(buf, sizeof buf, reload ? "tile" : "(tile + j * %d)", k->chunkb);
	lg_line(b, "#pragma unroll 1");
	lg_open(b, "for (int j = 0; j < %d; j++) {", k->nchunks);
	if (reload) {
		lg_line(b, "if (j > 0) __syncthreads(); // the previous chunk is consumed");
		emit_load_chunk(b, k, true, buf);
		lg_line(b, "__syncthreads();");
	}
	if (rowwise(s))
		emit_row_pass(b, s, k, buf);
	if (colwise(s))
		emit_col_pass(b, s, k, buf);
	lg_close(b);
}

static void emit_kernel_stream(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	struct shape k = shape_of(p);
	lg_comment(b, "Streaming: hidden %d = cluster %d x %d columns in %d chunk(s) of %d, read twice (the",
		   k.n, k.cluster, k.cols, k.nchunks, k.chunk);
	lg_comment(b, "second time mostly from L2); one 128-row tile per CTA; %d threads.", k.threads);
	emit_signature(b, &k, p);
	lg_line(b, "u8 *const tile = smem;");
	lg_line(b, "double *const psum = (double *)(smem + %d); // this CTA's partial sums of squares", k.chunkb);
	lg_line(b, "float *const rs = (float *)(psum + %d); // reciprocal RMS of the 128 rows", ROWS);
	lg_line(b, "const i64 tr = blockIdx.y, m0 = tr * %d;", ROWS);
	lg_line(b, "const int rows = (int)(M - m0 < %d ? M - m0 : %d);", ROWS, ROWS);
	lg_line(b, "const u8 *const xt = (const u8 *)x + (m0 * %d + k0) * 2;", k.n);
	lg_comment(b, "Pass 1: sums of squares (fp64), 16-byte loads all in flight before use.");
	lg_line(b, "#pragma unroll 1");
	lg_open(b, "for (int j = 0; j < %d; j++) {", k.nchunks);
	emit_load_chunk(b, &k, false, "tile");
	lg_close(b);
	emit_rrms_exchange(b, &k);
	lg_comment(b, "Pass 2: reload each chunk into shared memory, normalise, quantise, write.");
	emit_tile_passes(b, s, &k, true);
	if (k.cluster > 1)
		lg_line(b, "lg_cluster_wait(); // keep psum alive until every CTA has read it");
	lg_close(b);
}

static void emit_kernel_pipe(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	struct shape k = shape_of(p);
	int tileb = k.chunkb * k.nchunks;
	lg_comment(b, "Pipelined: hidden %d = cluster %d x %d columns; persistent grid over 128-row", k.n,
		   k.cluster, k.cols);
	lg_comment(b, "tiles, %d tile(s) of %d bytes in flight (cp.async); %d threads.", k.stages, tileb,
		   k.threads);
	emit_signature(b, &k, p);
	lg_line(b, "double *const psum2 = (double *)(smem + %d); // [2][128] partial sums, by tile parity",
		k.stages * tileb);
	lg_line(b, "float *const rs = (float *)(psum2 + %d); // reciprocal RMS of the 128 rows", 2 * ROWS);
	lg_line(b, "const u8 *const xg = (const u8 *)x;");
	lg_line(b, "const i64 tiles = (M + %d) / %d;", ROWS - 1, ROWS);
	lg_comment(b, "Prologue: the first %d tile(s) in flight.", k.stages - 1);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int ps = 0; ps < %d; ps++) {", k.stages - 1);
	lg_line(b, "lg_load_tile(smem + ps * %d, xg, blockIdx.y + (i64)ps * gridDim.y, M, k0);", tileb);
	lg_line(b, "lg_cp_commit();");
	lg_close(b);
	lg_line(b, "int it = 0;");
	lg_line(b, "#pragma unroll 1");
	lg_open(b, "for (i64 tr = blockIdx.y; tr < tiles; tr += gridDim.y, it++) {");
	lg_line(b, "lg_load_tile(smem + ((it + %d) %% %d) * %d, xg, tr + (i64)%d * gridDim.y, M, k0);",
		k.stages - 1, k.stages, tileb, k.stages - 1);
	lg_line(b, "lg_cp_commit();");
	lg_line(b, "lg_cp_wait(%d); // this thread's copies of tile tr have landed", k.stages - 1);
	lg_line(b, "__syncthreads();");
	lg_line(b, "u8 *const tile = smem + (it %% %d) * %d;", k.stages, tileb);
	lg_line(b, "double *const psum = psum2 + (it & 1) * %d;", ROWS);
	lg_line(b, "const i64 m0 = tr * %d;", ROWS);
	lg_line(b, "const int rows = (int)(M - m0 < %d ? M - m0 : %d);", ROWS, ROWS);
	emit_sumsq_smem(b, &k);
	emit_rrms_exchange(b, &k);
	emit_tile_passes(b, s, &k, false);
	lg_line(b, "__syncthreads(); // the stage is free for the copy issued next iteration");
	lg_close(b);
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
	if (p->P_STAGES)
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
	emit_helpers(b, &k);
	if (k.stages)
		emit_kernel_pipe(b, s, p);
	else
		emit_kernel_stream(b, s, p);
}

const struct lg_family lg_family_rmsnorm_quant = {
	.op = "rmsnorm_quant",
	.summary = "RMSNorm + 1x128 / 128x1 blockwise FP8 quantisation (K1)",
	.passes = 1u << LG_PASS_FORWARD,
	.dtypes = 1u << LG_DTYPE_BF16,
	.dims_required = 1u << LG_DIM_HIDDEN,
	.has_eps = true,
	.quant = 1,
	.tile_keys = (1u << LG_TILE_COLS) | (1u << LG_TILE_THREADS) | (1u << LG_TILE_CLUSTER) |
		     (1u << LG_TILE_STAGES),
	.validate = validate,
	.plan = plan,
	.emit = emit,
	.geometry = geometry,
	.bytes = bytes,
	.nargs = {[LG_PASS_FORWARD] = NARGS},
	.args = {[LG_PASS_FORWARD] = fwd_args},
};
