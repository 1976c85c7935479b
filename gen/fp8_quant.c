/*
 * fp8_quant.c - family "fp8_quant" (KERNELS.md 1.3): the standalone
 * blockwise FP8 activation quantiser, forward. x [tokens, hidden] bf16 into
 * the rowwise copy (1x128 blocks: q [tokens, hidden] e4m3, scales
 * s [hidden/128, tokens], tokens contiguous) and the columnwise copy (128x1
 * blocks, physically transposed: qt [hidden, tokens], scales
 * st [ceil(tokens/128), hidden]); quant.output picks the copies.
 *
 * Strategy: x is read once, 16 bytes a load, by one kernel. A CTA owns a
 * tile of 128 tokens (one 128x1 block) by 128 features (one 1x128 block);
 * tiles run along the grid's x, token tile major, so a wave reads whole rows
 * of x. Thread (rb, lb) holds features 8 lb .. 8 lb + 7 of R = 2048 / threads
 * consecutive tokens in registers: a half warp holds R whole 128-feature
 * rows. Block maxima are taken on the bf16 bits (sign cleared, max.bf16x2:
 * exact, two values an instruction): rows by a butterfly over the half
 * warp, columns over the thread's R rows, the warp's two row blocks and the
 * warps (shared memory). Each lane computes one row's scale and hands the
 * inverse around by shuffles (s gets contiguous stores); 64 threads compute
 * the column scales (st: one 512-byte row a tile). One pass then quantises
 * every value twice: with its row's scale into q (a half warp stores one
 * 128-byte line a row), with its column's into R bytes of the column (two
 * rows per e4m3x2), staged in a swizzled shared tile that leaves as
 * 128-byte qt lines (quant_common.h).
 *
 * Tile option: `threads` 256 (8 tokens a thread; the default with power-of-
 * two scales) or 512 (4 tokens; the default with exact scales, whose
 * divides need more registers).
 * A tail tile (tokens not a multiple of 128) zeroes its rows past the last
 * token, which then count as 0 in every amax, and stores nothing past it.
 */
#include <stdio.h>

#include "family.h"

#include "quant_common.h"

#define TILE 128 /* tokens and features of a CTA's tile: one 128x1 and one 1x128 block */
#define HIDDEN_MAX 65536
/* The grid is one CTA per tile along x (at most 2^31 - 1): tokens such that
 * ceil(tokens / 128) * (HIDDEN_MAX / 128) stays within it. */
#define TOKENS_MAX ((int64_t)(INT32_MAX / (HIDDEN_MAX / TILE)) * TILE)

enum { K_HIDDEN, K_QUANT, K_TILE = K_QUANT + LG_QUANT_KEYS, K_THREADS, NKEYS };
static const int64_t threads_ok[] = {256, 512, 0};
static const struct lg_key keys[NKEYS] = {
	[K_HIDDEN] = LG_KEY_DIM("hidden", "h", 128, HIDDEN_MAX, 128, "features per row"),
	LG_KEYS_QUANT(K_QUANT),
	[K_TILE] = LG_KEY_TILE_OBJ,
	[K_THREADS] = LG_KEY_TILE("threads", "t", 256, 512, threads_ok,
				  "threads per 128 x 128 tile: 256 (8 tokens a thread) or 512 (4 tokens)"),
};

static const struct lg_size sizes[] = {
	{"tokens", "M", 0, TOKENS_MAX, "rows of x (one CTA per 128 tokens x 128 features)", 0},
};

enum { ARG_X, ARG_Q, ARG_S, ARG_QT, ARG_ST, NARGS };
/* Alignment: x is read 16 bytes at a time, q written 8, s 4, st 8 (two
 * features), qt 16 (when its rows are: tokens % 16 == 0). */
static const struct lg_arg fwd_args[NARGS] = {
	[ARG_X] = {"x", LG_ARG_IN, LG_ELEM_BF16, "tokens, hidden", 16, NULL},
	[ARG_Q] = {"q", LG_ARG_OUT, LG_ELEM_E4M3, "tokens, hidden", 8, "rowwise (0 for columnwise)"},
	[ARG_S] = {"s", LG_ARG_OUT, LG_ELEM_FP32, "hidden / 128, tokens", 4,
		   "rowwise scales, transposed (0 for columnwise)"},
	[ARG_QT] = {"qt", LG_ARG_OUT, LG_ELEM_E4M3, "hidden, tokens", 16, "columnwise, transposed (0 for rowwise)"},
	[ARG_ST] = {"st", LG_ARG_OUT, LG_ELEM_FP32, "cdiv(tokens, 128), hidden", 8,
		    "columnwise scales (0 for rowwise)"},
};

/* Plan values. */
enum { P_HIDDEN, P_THREADS, P_R /* tokens a thread */ };


static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	(void)t;
	/* Power-of-two scales: 256 threads (71 registers on sm_90a, 3 CTAs an
	 * SM); measured on H200 at 8192 x 2048, 22.21 us against 22.66 at 512
	 * (bench/h200-2026-11-30-families). The exact divide needs 102
	 * registers at 256 threads, 58 at 512: 512 (not measured against 256). */
	int threads = lg_spec_has(s, K_THREADS) ? (int)lg_spec_int(s, K_THREADS) : lg_quant_pow2(s) ? 256 : 512;
	p->v[P_HIDDEN] = lg_spec_int(s, K_HIDDEN);
	p->tile[K_THREADS] = p->v[P_THREADS] = threads;
	p->v[P_R] = TILE * 16 / threads;
	p->nentries = 1;
	snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
	return LG_OK;
}

/* One CTA per 128 x 128 tile; no tokens, no tiles: nothing is launched. */
static void geometry(const struct lg_plan *p, int e, const int64_t *sz, struct lg_launch_dim *d)
{
	(void)e;
	d->grid[0] = (unsigned)((sz[0] + TILE - 1) / TILE * (p->v[P_HIDDEN] / TILE));
	d->grid[1] = d->grid[2] = 1;
	d->block[0] = (unsigned)p->v[P_THREADS];
	d->block[1] = d->block[2] = 1;
	d->smem = 0;
}

/* ------------------------------------------------------------ emission */

/* The kernel's shape, for the emitters below. */
struct shape {
	int64_t n;      /* hidden */
	int64_t nb;     /* 128-feature blocks per row */
	int threads, r; /* threads per CTA, tokens a thread */
	int warps;
	bool rows, cols, pow2;
};

static void emit_max_bf16x2(lg_buf *b)
{
	lg_comment(b, "Maximum of each half of two bf16x2 words (max.bf16x2, sm_80+): exact, so on");
	lg_comment(b, "|x| (sign bits cleared) it gives block amax two values an instruction.");
	lg_line(b, "static __device__ __forceinline__ u32 lg_max_bf16x2(u32 a, u32 b)");
	lg_open(b, "{");
	lg_line(b, "u32 d;");
	lg_line(b, "asm(\"max.bf16x2 %%0, %%1, %%2;\" : \"=r\"(d) : \"r\"(a), \"r\"(b));");
	lg_line(b, "return d;");
	lg_close(b);
}

/* Shared memory, the thread's place in the tile, the tile's place in x. */
static void emit_prologue(lg_buf *b, const struct shape *k)
{
	if (k->cols) {
		lg_comment(b, "qt staging (128 features x 128 tokens, swizzled); each warp's column amax,");
		lg_comment(b, "feature pairs as bf16x2.");
		lg_line(b, "__shared__ __align__(16) u8 stage[128 * 128];");
		lg_line(b, "__shared__ __align__(16) u32 cpart[%d][64];", k->warps);
		lg_line(b, "__shared__ __align__(16) float cinv[128]; // 1 / column scale");
		if (!k->pow2)
			lg_line(b, "__shared__ __align__(16) float csc[128]; // column scales");
	}
	lg_comment(b, "lb: this thread's block of 8 features; rb: its block of %d tokens.", k->r);
	lg_line(b, "const int lb = threadIdx.x & 15, rb = threadIdx.x >> 4;");
	lg_line(b, "const int r0 = %d * rb; // this thread's first token in the tile", k->r);
	if (k->nb > 1) {
		lg_line(b, "const i64 tile = blockIdx.x / %lldu; // token tile", (long long)k->nb);
		lg_line(b, "const int cb = blockIdx.x %% %lldu; // feature block", (long long)k->nb);
	} else {
		lg_line(b, "const i64 tile = blockIdx.x; // token tile");
		lg_line(b, "const int cb = 0; // feature block");
	}
	lg_line(b, "const i64 m0 = tile * 128, k0 = (i64)cb * 128; // the tile's first token and feature");
	lg_line(b, "const int rows = (int)(M - m0 < 128 ? M - m0 : 128); // tokens in the tile");
}

/* xv[R]: the thread's R tokens x 8 features, 16-byte streaming loads, all
 * issued before any use (a load under a condition lets the compiler start
 * the work on the first rows before the last loads are issued). */
static void emit_load(lg_buf *b, const struct shape *k)
{
	lg_comment(b, "x, read once: %d tokens x 16 bytes a thread (a half warp reads a token's 256 bytes),",
		   k->r);
	lg_comment(b, "every load issued before any use. Tokens past M load the tile's last token instead");
	lg_comment(b, "(in bounds) and are then zeroed: they count as 0 in every amax.");
	lg_line(b, "const u8 *const xt = (const u8 *)x + (m0 * %lld + k0 + 8 * lb) * 2;", (long long)k->n);
	lg_line(b, "lg_u32x4 xv[%d];", k->r);
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < %d; i++) xv[i] = lg_ld16_cs(xt + min(r0 + i, rows - 1) * %lld);", k->r,
		(long long)(2 * k->n));
	lg_open(b, "if (rows < 128) { // the last tile, short of tokens");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < %d; i++)", k->r);
	lg_line(b, "\tif (r0 + i >= rows) xv[i] = lg_u32x4{0u, 0u, 0u, 0u};");
	lg_close(b);
}

/* rmax[R/2]: rows 2p (low half) and 2p + 1 (high half) over the thread's 8
 * features; cmax[4]: features 2j (low), 2j + 1 (high) over its R tokens. */
static void emit_thread_amax(lg_buf *b, const struct shape *k)
{
	lg_comment(b, "Block maxima of the thread's values on the bf16 bits (|x|: sign bits cleared).");
	if (k->rows)
		lg_comment(b, "rmax[p]: tokens r0 + 2p (low half) and r0 + 2p + 1 (high half) over its 8 features.");
	if (k->cols)
		lg_comment(b, "cmax[j]: features 8 lb + 2j (low half) and 8 lb + 2j + 1 (high half) over its %d tokens.",
			   k->r);
	if (k->rows)
		lg_line(b, "u32 rmax[%d];", k->r / 2);
	if (k->cols)
		lg_line(b, "u32 cmax[4] = {0u, 0u, 0u, 0u};");
	lg_line(b, "#pragma unroll");
	if (k->rows) { /* two tokens at a time: their row maxima share a word */
		lg_open(b, "for (int p = 0; p < %d; p++) {", k->r / 2);
		lg_line(b, "u32 pr[2];");
		lg_line(b, "#pragma unroll");
		lg_open(b, "for (int i = 0; i < 2; i++) {");
		lg_line(b, "const lg_u32x4 w = xv[2 * p + i];");
	} else {
		lg_open(b, "for (int i = 0; i < %d; i++) {", k->r);
		lg_line(b, "const lg_u32x4 w = xv[i];");
	}
	lg_line(b, "const u32 a[4] = {w.x & 0x7fff7fffu, w.y & 0x7fff7fffu,");
	lg_line(b, "\tw.z & 0x7fff7fffu, w.w & 0x7fff7fffu};");
	if (k->rows)
		lg_line(b, "pr[i] = lg_max_bf16x2(lg_max_bf16x2(a[0], a[1]), lg_max_bf16x2(a[2], a[3]));");
	if (k->cols) {
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int j = 0; j < 4; j++) cmax[j] = lg_max_bf16x2(cmax[j], a[j]);");
	}
	lg_close(b);
	if (k->rows) {
		lg_comment(b, "even features' maxima of both tokens against the odd features'");
		lg_line(b, "rmax[p] = lg_max_bf16x2(__byte_perm(pr[0], pr[1], 0x5410),");
		lg_line(b, "\t__byte_perm(pr[0], pr[1], 0x7632));");
		lg_close(b);
	}
}

/* Row scales: one lane a row, s stores, the inverses (and with exact
 * scales the scales) of the thread's R rows in ri[] (rs[]). */
static void emit_row_scales(lg_buf *b, const struct shape *k)
{
	lg_comment(b, "Row amax: a butterfly over the 16 lanes of the half warp (one row block).");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int m = 1; m < 16; m <<= 1) {");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int p = 0; p < %d; p++)", k->r / 2);
	lg_line(b, "\trmax[p] = lg_max_bf16x2(rmax[p], __shfl_xor_sync(0xffffffffu, rmax[p], m));");
	lg_close(b);
	lg_comment(b, "Row scales, a lane a row: lane lb takes token r0 + lb %% %d; lanes 0..%d of each half warp",
		   k->r, k->r - 1);
	lg_comment(b, "store them (s is [hidden / 128, M]: %d contiguous bytes a warp), then every lane",
		   8 * k->r);
	lg_comment(b, "fetches the inverses of its %d tokens from the lanes that own them.", k->r);
	lg_line(b, "const int own = lb & %d;", k->r - 1);
	lg_line(b, "const u32 rp = %s;",
		k->r == 8 ? "own < 2 ? rmax[0] : own < 4 ? rmax[1] : own < 6 ? rmax[2] : rmax[3]"
			  : "own < 2 ? rmax[0] : rmax[1]");
	lg_line(b, "const float ramax = own & 1 ? lg_bf16_hi(rp) : lg_bf16_lo(rp);");
	lg_emit_scale(b, k->pow2, "rsc", "ramax", "rinv");
	lg_line(b, "if (lb < %d && r0 + lb < rows) ((float *)s)[cb * M + m0 + r0 + lb] = rsc;", k->r);
	lg_line(b, "float ri[%d];", k->r);
	if (!k->pow2)
		lg_line(b, "float rs[%d];", k->r);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < %d; i++) {", k->r);
	lg_line(b, "ri[i] = __shfl_sync(0xffffffffu, rinv, (threadIdx.x & 16) + i);");
	if (!k->pow2)
		lg_line(b, "rs[i] = __shfl_sync(0xffffffffu, rsc, (threadIdx.x & 16) + i);");
	lg_close(b);
}

/* Column scales into st and shared memory (cinv, csc); the barrier after
 * leaves them visible to every thread. */
static void emit_col_scales(lg_buf *b, const struct shape *k)
{
	lg_comment(b, "Column amax: the warp's two row blocks (lanes l, l ^ 16), then the %d warps through",
		   k->warps);
	lg_comment(b, "shared memory.");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int j = 0; j < 4; j++)");
	lg_line(b, "\tcmax[j] = lg_max_bf16x2(cmax[j], __shfl_xor_sync(0xffffffffu, cmax[j], 16));");
	lg_line(b, "if ((threadIdx.x & 16) == 0)");
	lg_line(b, "\t*(uint4 *)&cpart[threadIdx.x >> 5][4 * lb] =");
	lg_line(b, "\t\tmake_uint4(cmax[0], cmax[1], cmax[2], cmax[3]);");
	lg_line(b, "__syncthreads();");
	lg_comment(b, "Column scales: thread t < 64 for features 2t, 2t + 1; st gets one 512-byte row a tile.");
	lg_open(b, "if (threadIdx.x < 64) {");
	lg_line(b, "u32 a = cpart[0][threadIdx.x];");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int w = 1; w < %d; w++) a = lg_max_bf16x2(a, cpart[w][threadIdx.x]);", k->warps);
	lg_emit_scale(b, k->pow2, "sc0", "lg_bf16_lo(a)", "inv0");
	lg_emit_scale(b, k->pow2, "sc1", "lg_bf16_hi(a)", "inv1");
	lg_line(b, "float *const str = (float *)st + tile * %lld + k0; // this tile's row of st", (long long)k->n);
	lg_line(b, "*(float2 *)(str + 2 * threadIdx.x) = make_float2(sc0, sc1);");
	lg_line(b, "*(float2 *)(cinv + 2 * threadIdx.x) = make_float2(inv0, inv1);");
	if (!k->pow2)
		lg_line(b, "*(float2 *)(csc + 2 * threadIdx.x) = make_float2(sc0, sc1);");
	lg_close(b);
	lg_line(b, "__syncthreads();");
}

/* One pass over the thread's values: q rows, and the column bytes into the
 * staging tile. */
static void emit_quantise(lg_buf *b, const struct shape *k)
{
	int words = k->r / 4; /* u32 words of a column's R bytes */
	lg_comment(b, "Quantise every value once per copy%s", k->rows && k->cols ? ":" : ".");
	if (k->rows)
		lg_comment(b, "  rowwise: with its token's scale; a half warp stores a token's 128-byte q line.");
	if (k->cols)
		lg_comment(b, "  columnwise: with its feature's scale, two tokens per e4m3x2; cw[c] collects the %d bytes",
			   k->r);
	if (k->cols)
		lg_comment(b, "  of feature 8 lb + c, token r0 first.");
	if (k->cols) {
		lg_line(b, "const float4 c0 = *(const float4 *)(cinv + 8 * lb);");
		lg_line(b, "const float4 c1 = *(const float4 *)(cinv + 8 * lb + 4);");
		lg_line(b, "const float ci[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};");
		if (!k->pow2) {
			lg_line(b, "const float4 s0 = *(const float4 *)(csc + 8 * lb);");
			lg_line(b, "const float4 s1 = *(const float4 *)(csc + 8 * lb + 4);");
			lg_line(b, "const float cs[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};");
		}
		lg_line(b, "u32 cw[8]%s;", words == 2 ? "[2]" : "");
	}
	if (k->rows)
		lg_line(b, "u8 *const qrow = (u8 *)q + (m0 + r0) * %lld + k0 + 8 * lb;", (long long)k->n);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int p = 0; p < %d; p++) {", k->r / 2);
	lg_line(b, "const lg_u32x4 w0 = xv[2 * p], w1 = xv[2 * p + 1];");
	lg_line(b, "const u32 a[4] = {w0.x, w0.y, w0.z, w0.w}, b[4] = {w1.x, w1.y, w1.z, w1.w};");
	lg_line(b, "float y0[8], y1[8]; // tokens r0 + 2p and r0 + 2p + 1 (bf16 -> fp32 is exact)");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int e = 0; e < 4; e++) {");
	lg_line(b, "y0[2 * e] = lg_bf16_lo(a[e]), y0[2 * e + 1] = lg_bf16_hi(a[e]);");
	lg_line(b, "y1[2 * e] = lg_bf16_lo(b[e]), y1[2 * e + 1] = lg_bf16_hi(b[e]);");
	lg_close(b);
	if (k->rows) {
		const char *a0 = lg_quant_q_args(k->pow2, "s0, i0", "i0"), *a1 = lg_quant_q_args(k->pow2, "s1, i1", "i1");
		lg_line(b, "const float i0 = ri[2 * p], i1 = ri[2 * p + 1];");
		if (!k->pow2)
			lg_line(b, "const float s0 = rs[2 * p], s1 = rs[2 * p + 1];");
		lg_line(b, "u32 qa[2], qb[2];");
		lg_line(b, "#pragma unroll");
		lg_open(b, "for (int e = 0; e < 2; e++) {");
		lg_line(b, "qa[e] = lg_e4m3x4(lg_q(y0[4 * e], %s), lg_q(y0[4 * e + 1], %s),", a0, a0);
		lg_line(b, "\tlg_q(y0[4 * e + 2], %s), lg_q(y0[4 * e + 3], %s));", a0, a0);
		lg_line(b, "qb[e] = lg_e4m3x4(lg_q(y1[4 * e], %s), lg_q(y1[4 * e + 1], %s),", a1, a1);
		lg_line(b, "\tlg_q(y1[4 * e + 2], %s), lg_q(y1[4 * e + 3], %s));", a1, a1);
		lg_close(b);
		lg_line(b, "if (r0 + 2 * p < rows) lg_st8_cs(qrow + 2 * p * %lld, qa[0], qa[1]);", (long long)k->n);
		lg_line(b, "if (r0 + 2 * p + 1 < rows) lg_st8_cs(qrow + (2 * p + 1) * %lld, qb[0], qb[1]);",
			(long long)k->n);
	}
	if (k->cols) {
		const char *ca = lg_quant_q_args(k->pow2, "cs[c], ci[c]", "ci[c]");
		lg_line(b, "#pragma unroll");
		lg_open(b, "for (int c = 0; c < 8; c++) {");
		lg_line(b, "const u32 h =");
		lg_line(b, "\tlg_e4m3x2(lg_q(y0[c], %s), lg_q(y1[c], %s));", ca, ca);
		if (words == 2)
			lg_line(b, "cw[c][p / 2] = p %% 2 == 0 ? h : cw[c][p / 2] | h << 16;");
		else
			lg_line(b, "cw[c] = p == 0 ? h : cw[c] | h << 16;");
		lg_close(b);
	}
	lg_close(b);
	if (!k->cols)
		return;
	lg_comment(b, "Stage the columns: token byte t of feature c's 128-byte line sits at t ^ (8 (c / 8)), so");
	if (words == 2)
		lg_comment(b, "the 8-byte stores of a half warp (one row block, lb = 0..15) hit 16 distinct bank pairs.");
	else
		lg_comment(b, "the 4-byte stores of a warp (two row blocks, lb = 0..15) hit 32 distinct banks.");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int c = 0; c < 8; c++)");
	if (words == 2) {
		lg_line(b, "\t*(uint2 *)(stage + (8 * lb + c) * 128 + (r0 ^ (8 * lb))) =");
		lg_line(b, "\t\tmake_uint2(cw[c][0], cw[c][1]);");
	} else
		lg_line(b, "\t*(u32 *)(stage + (8 * lb + c) * 128 + (r0 ^ (8 * lb))) = cw[c];");
	lg_line(b, "__syncthreads();");
	lg_emit_qt_lines(b, k->threads);
}

static void emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	struct shape k = {.n = p->v[P_HIDDEN], .nb = p->v[P_HIDDEN] / TILE, .threads = (int)p->v[P_THREADS],
			  .r = (int)p->v[P_R], .warps = (int)p->v[P_THREADS] / 32, .rows = lg_quant_rowwise(s),
			  .cols = lg_quant_colwise(s), .pow2 = lg_quant_pow2(s)};
	(void)t;
	lg_section(b, "helpers for this spec", NULL);
	lg_emit_quant_q(b, k.pow2);
	emit_max_bf16x2(b);
	lg_section(b, p->entry[0], "blockwise FP8 quantisation");
	lg_comment(b, "One CTA per tile of 128 tokens x 128 features (%lld feature blocks a token tile):", (long long)k.nb);
	lg_comment(b, "thread (rb, lb) holds tokens %d rb .. %d rb + %d x features 8 lb .. 8 lb + 7 (%d threads).",
		   k.r, k.r, k.r - 1, k.threads);
	lg_emit_signature(b, s, p->entry[0], "__launch_bounds__(%d)", k.threads);
	lg_open(b, "{");
	emit_prologue(b, &k);
	emit_load(b, &k);
	emit_thread_amax(b, &k);
	if (k.rows)
		emit_row_scales(b, &k);
	if (k.cols)
		emit_col_scales(b, &k);
	emit_quantise(b, &k);
	lg_close(b);
}

/* Tile variants for `lingen tune`: 256 and 512 threads per tile. */
static int candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out,
		      int max)
{
	return lg_candidate_values(s, t, out, 0, max, K_THREADS, threads_ok);
}

static void uses(const struct lg_spec *s, unsigned char *used)
{
	lg_quant_uses(s, used, ARG_Q, ARG_S, ARG_QT, ARG_ST);
}

const struct lg_family lg_family_fp8_quant = {
	.op = "fp8_quant",
	.summary = "blockwise FP8 quantisation of activations: 1x128 rowwise, 128x1 columnwise transposed",
	.passes = 1u << LG_PASS_FORWARD,
	.dtypes = 1u << LG_DTYPE_BF16,
	.nkeys = NKEYS,
	.keys = keys,
	.sig = {[LG_PASS_FORWARD] = {1, sizes, NARGS, fwd_args}},
	.uses = uses,
	.plan = plan,
	.emit = emit,
	.geometry = geometry,
	.candidates = candidates,
};
