/*
 * quant_body.c - the quantiser body shared by quant_engine.c and
 * quant_tile.c (quant_body.h): the values from the family's hooks (loads
 * issued together, the next block's prefetched), the thread's block maxima
 * (on the bf16 bits, two values an instruction, or on fp32), the column
 * maxima across the CTA, and the one quantising pass: the rowwise bytes
 * straight to q (a half warp stores a token's 128-byte line), the
 * columnwise bytes, two tokens per e4m3x2, into a swizzled shared tile
 * that the emitter's store writes to qt. The scales between the maxima and
 * the pass, and the qt store, are the emitter's (struct lg_qb_ops).
 */
#include "quant_body.h"

#include "code.h"

#include <stdlib.h>

#define TILE 128

const char *lg_qb_name(const char *name, const char *def)
{
	return name ? name : def;
}

int lg_qb_fblocks(const struct lg_qe *e)
{
	int nb = (int)(e->n / TILE);
	return e->fblocks <= 1 ? 1 : e->fblocks > nb ? nb : e->fblocks;
}

/* Feature groups of a token tile (CTAs along the features). */
int64_t lg_qb_groups(const struct lg_qe *e)
{
	int64_t nb = e->n / TILE, fb = lg_qb_fblocks(e);
	return (nb + fb - 1) / fb;
}

/* Whether the hooks split the values (fetch, compute) and the engine
 * prefetches the next feature block. */
static bool split(const struct lg_qb *k)
{
	return k->h->fetch && k->h->compute;
}

static bool prefetching(const struct lg_qb *k)
{
	return k->e->prefetch && k->fb > 1 && split(k);
}

/* The hook `fn` for each of the thread's rows at column col (an i64
 * expression), in an unrolled loop. */
static void emit_rows(lg_buf *b, const struct lg_qb *k, const char *col,
		      void (*fn)(lg_buf *, const struct lg_qe *, const struct lg_qe_row *, void *))
{
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < %d; i++) {", k->r);
	struct lg_qe_row r = {.row = "qe_row", .lrow = "(r0 + i)", .col = col, .dst = "v[i]",
			      .valid = "(r0 + i < rows)", .slot = "i"};
	/* the hook's code first, so that qe_row is declared only where it is read */
	lg_buf hook;
	lg_buf_init(&hook);
	hook.depth = b->depth;
	fn(&hook, k->e, &r, k->h->ctx);
	size_t len = 0;
	char *text = lg_buf_finish(&hook, &len);
	if (!text) {
		b->failed = true;
		return;
	}
	if (lg_code_names(text, r.row))
		lg_line(b, "const i64 qe_row = m0 + r0 + min(i, rows - 1 - r0);");
	lg_raw(b, text, len);
	free(text);
	lg_close(b);
}

/* With split hooks: the raw registers, before the feature-block loop. */
static void emit_raw(lg_buf *b, const struct lg_qb *k)
{
	if (split(k))
		k->h->raw(b, k->e, k->r, k->h->ctx);
}

/* With prefetch: the loads of the CTA's first feature block, before the
 * feature-block loop. */
static void emit_first_fetch(lg_buf *b, const struct lg_qb *k)
{
	if (!prefetching(k))
		return;
	lg_comment(b, "The first feature block's loads (each block's compute is followed by the next's).");
	lg_open(b, "if (r0 < rows) {");
	lg_line(b, "const i64 qe_col = (i64)cg * %d + 8 * lb; // the thread's first feature", 128 * k->fb);
	emit_rows(b, k, "qe_col", k->h->fetch);
	lg_close(b);
}

/* v: the thread's R tokens x 8 features, from the family's hook. */
static void emit_values(lg_buf *b, const struct lg_qb *k)
{
	lg_comment(b, "The values: %d tokens x 8 features a thread (the family's code, a token",
		   k->r);
	lg_comment(b, "a step; a token past the tile's last computes the last one's, then counts");
	lg_comment(b, "as 0).");
	if (k->bf16)
		lg_line(b, "lg_u32x4 v[%d];", k->r);
	else
		lg_line(b, "float v[%d][8];", k->r);
	lg_comment(b, "A thread whose tokens are all absent (a short tile: experts' last tiles)");
	lg_comment(b, "neither loads nor computes; the others run straight-line code, loads");
	lg_comment(b, "first.");
	lg_open(b, "if (r0 < rows) {");
	lg_line(b, "const i64 qe_col = k0 + 8 * lb; // the thread's first feature");
	if (!split(k)) {
		emit_rows(b, k, "qe_col", k->h->values);
	} else {
		if (!prefetching(k))
			emit_rows(b, k, "qe_col", k->h->fetch);
		emit_rows(b, k, "qe_col", k->h->compute);
		if (prefetching(k)) {
			lg_comment(b, "The next feature block's loads, in flight during this block's stores.");
			lg_open(b, "if (cb + 1 < cb_end) {");
			lg_line(b, "const i64 qe_next = qe_col + 128;");
			emit_rows(b, k, "qe_next", k->h->fetch);
			lg_close(b);
		}
	}
	lg_close_with(b, "} // r0 < rows");
	lg_open(b, "if (rows < 128) { // a tile short of tokens: the absent ones count as 0");
	lg_line(b, "#pragma unroll");
	if (k->bf16) {
		lg_line(b, "for (int i = 0; i < %d; i++)", k->r);
		lg_line(b, "\tif (r0 + i >= rows) v[i] = lg_u32x4{0u, 0u, 0u, 0u};");
	} else {
		lg_line(b, "for (int i = 0; i < %d; i++)", k->r);
		lg_line(b, "\tif (r0 + i >= rows)");
		lg_line(b, "\t\tfor (int j = 0; j < 8; j++) v[i][j] = 0.0f;");
	}
	lg_close(b);
}

static void emit_thread_amax_bf16(lg_buf *b, const struct lg_qb *k)
{
	bool rows = k->rmax;
	lg_comment(b, "Block maxima of the thread's values on the bf16 bits (sign bits cleared).");
	if (rows) {
		lg_comment(b, "rmax[p]: tokens r0 + 2p (low half), r0 + 2p + 1 (high) over its 8 features.");
		lg_line(b, "u32 rmax[%d];", k->r / 2);
	}
	if (k->cmax) {
		lg_comment(b, "cmax[j]: features 8 lb + 2j (low half), 8 lb + 2j + 1 (high) over %d tokens.",
			   k->r);
		lg_line(b, "u32 cmax[4] = {0u, 0u, 0u, 0u};");
	}
	lg_line(b, "#pragma unroll");
	if (rows) { /* two tokens at a time: their row maxima share a word */
		lg_open(b, "for (int p = 0; p < %d; p++) {", k->r / 2);
		lg_line(b, "u32 pr[2];");
		lg_line(b, "#pragma unroll");
		lg_open(b, "for (int i = 0; i < 2; i++) {");
		lg_line(b, "const lg_u32x4 w = v[2 * p + i];");
	} else {
		lg_open(b, "for (int i = 0; i < %d; i++) {", k->r);
		lg_line(b, "const lg_u32x4 w = v[i];");
	}
	lg_line(b, "const u32 a[4] = {w.x & 0x7fff7fffu, w.y & 0x7fff7fffu,");
	lg_line(b, "\tw.z & 0x7fff7fffu, w.w & 0x7fff7fffu};");
	if (rows) {
		lg_line(b, "pr[i] = lg_max_bf16x2(lg_max_bf16x2(a[0], a[1]),");
		lg_line(b, "\tlg_max_bf16x2(a[2], a[3]));");
	}
	if (k->cmax) {
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int j = 0; j < 4; j++) cmax[j] = lg_max_bf16x2(cmax[j], a[j]);");
	}
	lg_close(b);
	if (rows) {
		lg_comment(b, "even features' maxima of both tokens against the odd features'");
		lg_line(b, "rmax[p] = lg_max_bf16x2(__byte_perm(pr[0], pr[1], 0x5410),");
		lg_line(b, "\t__byte_perm(pr[0], pr[1], 0x7632));");
		lg_close(b);
	}
}

static void emit_thread_amax_f32(lg_buf *b, const struct lg_qb *k)
{
	bool rows = k->rmax;
	lg_comment(b, "Block maxima of |v| over the thread's values:");
	if (rows) {
		lg_comment(b, "rmax[i]: token r0 + i over its 8 features.");
		lg_line(b, "float rmax[%d];", k->r);
	}
	if (k->cmax) {
		lg_comment(b, "cmax[j]: feature 8 lb + j over its %d tokens; the 0 a max starts from", k->r);
		lg_comment(b, "joins once, at the scale (a max that ignores NaN is order-free: same bits).");
		lg_line(b, "float cmax[8];");
	}
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < %d; i++) {", k->r);
	if (rows)
		lg_line(b, "float a = 0.0f;");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int j = 0; j < 8; j++) {");
	if (rows)
		lg_line(b, "a = fmaxf(a, fabsf(v[i][j]));");
	if (k->cmax)
		lg_line(b, "cmax[j] = i == 0 ? fabsf(v[i][j]) : fmaxf(cmax[j], fabsf(v[i][j]));");
	lg_close(b);
	if (rows)
		lg_line(b, "rmax[i] = a;");
	lg_close(b);
}

/* Column maxima across the CTA: cpart after the barrier. */
void lg_qb_emit_col_amax(lg_buf *b, const struct lg_qb *k)
{
	lg_comment(b, "Column amax: the warp's two token blocks (lanes l, l ^ 16), then the %d warps", k->warps);
	lg_comment(b, "through shared memory.");
	lg_line(b, "#pragma unroll");
	if (k->bf16) {
		lg_line(b, "for (int j = 0; j < 4; j++)");
		lg_line(b, "\tcmax[j] = lg_max_bf16x2(cmax[j], __shfl_xor_sync(~0u, cmax[j], 16));");
		lg_line(b, "if ((threadIdx.x & 16) == 0)");
		lg_line(b, "\t*(uint4 *)&cpart[threadIdx.x >> 5][4 * lb] =");
		lg_line(b, "\t\tmake_uint4(cmax[0], cmax[1], cmax[2], cmax[3]);");
	} else {
		lg_line(b, "for (int j = 0; j < 8; j++)");
		lg_line(b, "\tcmax[j] = fmaxf(cmax[j], __shfl_xor_sync(~0u, cmax[j], 16));");
		lg_open(b, "if ((threadIdx.x & 16) == 0) {");
		lg_line(b, "float *const cp = &cpart[threadIdx.x >> 5][8 * lb];");
		lg_line(b, "*(float4 *)cp = make_float4(cmax[0], cmax[1], cmax[2], cmax[3]);");
		lg_line(b, "*(float4 *)(cp + 4) = make_float4(cmax[4], cmax[5], cmax[6], cmax[7]);");
		lg_close(b);
	}
	lg_line(b, "__syncthreads();");
}

/* y0, y1: the fp32 values of the pair's two tokens r0 + 2p, r0 + 2p + 1. */
static void emit_quantise_pair_values(lg_buf *b, const struct lg_qb *k)
{
	lg_line(b, "float y0[8], y1[8]; // tokens r0 + 2p and r0 + 2p + 1");
	if (!k->bf16) {
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int j = 0; j < 8; j++)");
		lg_line(b, "\ty0[j] = v[2 * p][j], y1[j] = v[2 * p + 1][j];");
		return;
	}
	lg_line(b, "const lg_u32x4 w0 = v[2 * p], w1 = v[2 * p + 1];");
	lg_line(b, "const u32 a[4] = {w0.x, w0.y, w0.z, w0.w},");
	lg_line(b, "\tb[4] = {w1.x, w1.y, w1.z, w1.w};");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int e = 0; e < 4; e++) { // bf16 -> fp32 is exact");
	lg_line(b, "y0[2 * e] = lg_bf16_lo(a[e]),");
	lg_line(b, "\ty0[2 * e + 1] = lg_bf16_hi(a[e]);");
	lg_line(b, "y1[2 * e] = lg_bf16_lo(b[e]),");
	lg_line(b, "\ty1[2 * e + 1] = lg_bf16_hi(b[e]);");
	lg_close(b);
}

/* The pair's two q rows: 8 bytes each, to qrow. */
static void emit_quantise_pair_rows(lg_buf *b, const struct lg_qb *k)
{
	long long n = (long long)k->e->n;
	const char *a0, *a1;
	k->ops->row_args(b, k, &a0, &a1);
	lg_line(b, "u32 qa[2], qb[2];");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int e = 0; e < 2; e++) {");
	lg_line(b, "qa[e] = lg_e4m3x4(lg_q(y0[4 * e], %s),", a0);
	lg_line(b, "\tlg_q(y0[4 * e + 1], %s),", a0);
	lg_line(b, "\tlg_q(y0[4 * e + 2], %s),", a0);
	lg_line(b, "\tlg_q(y0[4 * e + 3], %s));", a0);
	lg_line(b, "qb[e] = lg_e4m3x4(lg_q(y1[4 * e], %s),", a1);
	lg_line(b, "\tlg_q(y1[4 * e + 1], %s),", a1);
	lg_line(b, "\tlg_q(y1[4 * e + 2], %s),", a1);
	lg_line(b, "\tlg_q(y1[4 * e + 3], %s));", a1);
	lg_close(b);
	lg_line(b, "if (r0 + 2 * p < rows) lg_st8_cs(qrow + 2 * p * %lld, qa[0], qa[1]);", n);
	lg_line(b, "if (r0 + 2 * p + 1 < rows)");
	lg_line(b, "\tlg_st8_cs(qrow + (2 * p + 1) * %lld, qb[0], qb[1]);", n);
}

/* The pair's column bytes: one e4m3x2 a feature into cw. */
static void emit_quantise_pair_cols(lg_buf *b, const struct lg_qb *k)
{
	const char *ca = k->cq;
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int c = 0; c < 8; c++) {");
	lg_line(b, "const u32 h = lg_e4m3x2(lg_q(y0[c], %s),", ca);
	lg_line(b, "\tlg_q(y1[c], %s));", ca);
	if (k->r / 4 == 2)
		lg_line(b, "cw[c][p / 2] = p %% 2 == 0 ? h : cw[c][p / 2] | h << 16;");
	else
		lg_line(b, "cw[c] = p == 0 ? h : cw[c] | h << 16;");
	lg_close(b);
}

/* The column words into the staging tile, then the emitter's store of the
 * tile to qt. */
static void emit_stage_and_store(lg_buf *b, const struct lg_qb *k)
{
	bool two = k->r / 4 == 2;
	lg_comment(b, "Stage the columns: token byte t of feature c's line at t ^ (8 (c / 8)), so");
	if (two)
		lg_comment(b, "the 8-byte stores of a half warp (lb = 0..15) hit 16 distinct bank pairs.");
	else
		lg_comment(b, "the 4-byte stores of a warp (two token blocks) hit 32 distinct banks.");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int c = 0; c < 8; c++)");
	if (two) {
		lg_line(b, "\t*(uint2 *)(stage + (8 * lb + c) * 128 + (r0 ^ (8 * lb))) =");
		lg_line(b, "\t\tmake_uint2(cw[c][0], cw[c][1]);");
	} else
		lg_line(b, "\t*(u32 *)(stage + (8 * lb + c) * 128 + (r0 ^ (8 * lb))) = cw[c];");
	lg_line(b, "__syncthreads();");
	k->ops->store_qt(b, k);
}

/* One pass over the thread's values: q rows, and the column bytes into the
 * staging tile, then the qt lines. */
static void emit_quantise(lg_buf *b, const struct lg_qb *k)
{
	const struct lg_qe *e = k->e;
	lg_comment(b, "Quantise every value once per copy%s", e->rows && e->cols ? ":" : ".");
	if (e->rows)
		lg_comment(b, "  rowwise: with its %s scale; a half warp stores a token's q line.",
			   k->rword);
	if (e->cols) {
		k->ops->col_setup(b, k);
		lg_line(b, "u32 cw[8]%s;", k->r / 4 == 2 ? "[2]" : "");
	}
	if (e->rows)
		lg_line(b, "u8 *const qrow = (u8 *)%s + (m0 + r0) * %lld + k0 + 8 * lb;", k->q, (long long)e->n);
	if (e->cols) {
		lg_comment(b, "A thread whose tokens are all absent has nothing to store but zero bytes");
		lg_comment(b, "(+0 quantises to 0x00 under any scale).");
		lg_open(b, "if (r0 >= rows) {");
		lg_line(b, "#pragma unroll");
		if (k->r / 4 == 2)
			lg_line(b, "for (int c = 0; c < 8; c++) cw[c][0] = cw[c][1] = 0u;");
		else
			lg_line(b, "for (int c = 0; c < 8; c++) cw[c] = 0u;");
		lg_close_with(b, "} else {");
	} else {
		lg_open(b, "if (r0 < rows) { // else: no token of this thread to store");
	}
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int p = 0; p < %d; p++) {", k->r / 2);
	emit_quantise_pair_values(b, k);
	if (e->rows)
		emit_quantise_pair_rows(b, k);
	if (e->cols)
		emit_quantise_pair_cols(b, k);
	lg_close(b);
	lg_close_with(b, "} // r0 < rows");
	if (e->cols)
		emit_stage_and_store(b, k);
}

/* The feature-block loop (or the one block) for the engine as given
 * (its variant set). */
static void emit_blocks(lg_buf *b, const struct lg_qb *k)
{
	const struct lg_qe *e = k->e;
	const struct lg_qe_hooks *h = k->h;
	emit_first_fetch(b, k);
	if (k->fb > 1) {
		lg_line(b, "const int cb_end = cg * %d + %d < %lld ? cg * %d + %d : %lld;", k->fb, k->fb,
			(long long)k->nb, k->fb, k->fb, (long long)k->nb);
		lg_open(b, "for (int cb = cg * %d; cb < cb_end; cb++) { // the feature blocks of this CTA", k->fb);
	} else {
		lg_line(b, "const int cb = cg; // the feature block");
	}
	lg_line(b, "const i64 k0 = (i64)cb * 128; // its first feature");
	if (h->block)
		h->block(b, e, h->ctx);
	emit_values(b, k);
	if (k->bf16)
		emit_thread_amax_bf16(b, k);
	else
		emit_thread_amax_f32(b, k);
	k->ops->scales(b, k);
	emit_quantise(b, k);
	if (h->epilogue)
		h->epilogue(b, e, h->ctx);
	if (k->fb > 1)
		lg_close(b);
}

void lg_qb_init(struct lg_qb *k, const struct lg_qe *e, const struct lg_qe_hooks *h, const struct lg_qb_ops *ops)
{
	*k = (struct lg_qb){.ev = *e, .h = h, .ops = ops, .r = lg_qe_tokens_per_thread(e), .warps = e->threads / 32,
			    .fb = lg_qb_fblocks(e), .nb = e->n / TILE, .bf16 = e->vals == LG_QE_BF16,
			    .rmax = e->rows, .cmax = e->cols, .q = lg_qb_name(e->q, "q"), .s = lg_qb_name(e->s, "s"),
			    .qt = lg_qb_name(e->qt, "qt"), .st = lg_qb_name(e->st, "st"),
			    .m = lg_qb_name(e->m, "M")};
	k->ev.variant = -1;
	k->e = &k->ev;
}

void lg_qb_emit_smem(lg_buf *b, const struct lg_qb *k)
{
	if (k->e->cols) {
		lg_comment(b, "qt staging (128 features x 128 tokens, swizzled).");
		lg_line(b, "__shared__ __align__(16) u8 stage[128 * 128];");
	}
	if (k->cmax) {
		if (k->bf16)
			lg_line(b, "__shared__ __align__(16) u32 cpart[%d][64]; // each warp's column amax, bf16x2", k->warps);
		else
			lg_line(b, "__shared__ __align__(16) float cpart[%d][128]; // each warp's column amax", k->warps);
	}
}

void lg_qb_emit_thread_place(lg_buf *b, const struct lg_qb *k)
{
	lg_comment(b, "lb: this thread's block of 8 features; rb: its block of %d tokens.", k->r);
	lg_line(b, "const int lb = threadIdx.x & 15, rb = threadIdx.x >> 4;");
	lg_line(b, "const int r0 = %d * rb; // this thread's first token in the tile", k->r);
}

void lg_qb_emit_tile_place(lg_buf *b, const struct lg_qb *k)
{
	const struct lg_qe *e = k->e;
	int64_t g = lg_qb_groups(e);
	if (e->tile) {
		lg_line(b, "const i64 tt = %s; // token tile", e->tile);
		lg_line(b, "const int cg = %s; // feature group", e->group ? e->group : "0");
	} else if (g > 1) {
		lg_line(b, "const i64 tt = blockIdx.x / %lldu; // token tile", (long long)g);
		lg_line(b, "const int cg = blockIdx.x %% %lldu; // feature group", (long long)g);
	} else {
		lg_line(b, "const i64 tt = blockIdx.x; // token tile");
		lg_line(b, "const int cg = 0; // feature group");
	}
	lg_line(b, "const i64 m0 = tt * 128; // the tile's first token");
	lg_line(b, "const int rows = (int)(%s - m0 < 128 ? %s - m0 : 128); // tokens in the tile", k->m, k->m);
}

void lg_qb_emit_body(lg_buf *b, struct lg_qb *k)
{
	const struct lg_qe_hooks *h = k->h;
	if (h->prologue)
		h->prologue(b, k->e, h->ctx);
	emit_raw(b, k);
	if (!k->e->cta_case) {
		emit_blocks(b, k);
		return;
	}
	lg_comment(b, "Two copies of the feature blocks, each compiled for its case (the condition is");
	lg_comment(b, "the same in every thread of the CTA; the copies are not indented: the hooks'");
	lg_comment(b, "lines keep their width).");
	for (int v = 1; v >= 0; v--) {
		k->ev.variant = v;
		lg_line(b, v ? "if (%s) {" : "} else { // not %s", k->e->cta_case);
		emit_blocks(b, k);
	}
	lg_line(b, "}");
}
