/*
 * quant_tile.c - the weight-tile FP8 quantiser (quant_tile.h) over the
 * shared quantiser body (quant_body.h).
 *
 * Strategy: the body's CTA, registers and passes as for activations (a
 * 128 x 128 tile a CTA, or `fblocks` of them along the features in turn;
 * the values loaded once by 16-byte loads); the body's column maxima
 * reduced once more, by the warps that hold them and then across those
 * warps, to the tile's amax; one scale (tsc, its inverse tinv) that every
 * thread takes for both copies: the rowwise q lines, and the transposed
 * bytes through the body's staging tile to qt lines of rows M (per
 * expert: the expert's rows) apart, 16-byte pieces where those rows are
 * 16-byte aligned, else realigned to memory's chunks
 * (lg_emit_qt_lines_flat).
 */
#include "quant_tile.h"

#include "error.h"
#include "quant_body.h"
#include "quant_common.h"

/* The block's scales: one for the whole 128 x 128 tile, the body's column
 * maxima (cpart) reduced by the warps that hold them, then every thread
 * takes the scale (tsc, tinv); s (and st) get it. */
static void emit_tile_scale(lg_buf *b, const struct lg_qb *k)
{
	int nt = k->bf16 ? 64 : 128; /* threads holding column maxima: whole warps */
	lg_qb_emit_col_amax(b, k);
	lg_comment(b, "Tile amax: the column maxima over the %d threads holding them, a butterfly,", nt);
	lg_comment(b, "then across those %d warps.", nt / 32);
	lg_open(b, "if (threadIdx.x < %d) {", nt);
	if (k->bf16) {
		lg_line(b, "u32 a = cpart[0][threadIdx.x];");
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int k = 1; k < %d; k++) a = lg_max_bf16x2(a, cpart[k][threadIdx.x]);", k->warps);
		lg_line(b, "float t = fmaxf(lg_bf16_lo(a), lg_bf16_hi(a));");
	} else {
		lg_line(b, "float t = fmaxf(0.0f, cpart[0][threadIdx.x]); // the 0 the maxima start from");
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int k = 1; k < %d; k++) t = fmaxf(t, cpart[k][threadIdx.x]);", k->warps);
	}
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int m = 16; m > 0; m >>= 1)");
	lg_line(b, "\tt = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, m));");
	lg_line(b, "if ((threadIdx.x & 31) == 0) tmax[threadIdx.x >> 5] = t;");
	lg_close(b);
	lg_line(b, "__syncthreads();");
	if (nt == 64)
		lg_line(b, "const float tamax = fmaxf(tmax[0], tmax[1]);");
	else
		lg_line(b, "const float tamax = fmaxf(fmaxf(tmax[0], tmax[1]), fmaxf(tmax[2], tmax[3]));");
	lg_emit_scale(b, k->e->pow2, "tsc", "tamax", "tinv");
	lg_line(b, "if (threadIdx.x == 0) ((float *)%s)[tt * %lld + cb] = tsc;", k->s, (long long)k->nb);
	if (k->e->cols && k->e->expert_rows) /* the expert's st [K / 128, cdiv(qen, 128)] */
		lg_line(b, "if (threadIdx.x == 0) stg[cb * ((qen + 127) / 128) + lm0 / 128] = tsc;");
	else if (k->e->cols) /* the transposed copy's scales: st [K / 128, cdiv(M, 128)] */
		lg_line(b, "if (threadIdx.x == 0) ((float *)%s)[cb * ((%s + 127) / 128) + tt] = tsc;", k->st, k->m);
}

/* The transposed copy's words cw: with the tile's scale. */
static void emit_col_setup(lg_buf *b, const struct lg_qb *k)
{
	lg_comment(b, "  transposed: with the tile's scale, two rows an e4m3x2; cw[c] gets the");
	lg_comment(b, "  %d bytes of column 8 lb + c, row r0 first.", k->r);
}

/* Both rows of a pair take the tile's scale. */
static void row_args(lg_buf *b, const struct lg_qb *k, const char **a0, const char **a1)
{
	(void)b;
	*a0 = *a1 = lg_quant_q_args(k->e->pow2, "tsc, tinv", "tinv");
}

/* The staged tile to the transposed copy: rows M apart (the expert's:
 * qen apart). */
static void store_qt(lg_buf *b, const struct lg_qb *k)
{
	if (k->e->expert_rows)
		lg_emit_qt_lines_flat(b, k->e->threads, "qtg", "qen", "lm0");
	else
		lg_emit_qt_lines_flat(b, k->e->threads, "qtg", k->m, "m0");
}

static const struct lg_qb_ops tile_ops = {
	.scales = emit_tile_scale, .col_setup = emit_col_setup, .row_args = row_args, .store_qt = store_qt};

/* Shared memory, the thread's place, the tile's place; with the transposed
 * copy its base (and with expert_rows the tile's expert). */
static void emit_place(lg_buf *b, const struct lg_qb *k)
{
	const struct lg_qe *e = k->e;
	lg_qb_emit_smem(b, k);
	lg_line(b, "__shared__ float tmax[4]; // the tile amax of each warp that reduces it");
	lg_qb_emit_thread_place(b, k);
	lg_qb_emit_tile_place(b, k);
	if (e->cols && e->expert_rows) {
		long long n = (long long)e->expert_rows;
		lg_line(b, "const i64 qex = m0 / %lld; // the tile's expert (%lld rows each)", n, n);
		lg_line(b, "const i64 qe0 = qex * %lld; // its first row", n);
		lg_line(b, "const i64 qen = %s - qe0 < %lld ? %s - qe0 : %lld; // its rows", k->m, n, k->m, n);
		lg_line(b, "const i64 lm0 = m0 - qe0; // the tile's first row in the expert");
		lg_line(b, "u8 *const qtg = (u8 *)%s + qe0 * %lld; // the expert's qt [%lld, qen]", k->qt,
			(long long)e->n, (long long)e->n);
		lg_line(b, "float *const stg = (float *)%s + qe0 / 128 * %lld; // its st [%lld, cdiv(qen, 128)]",
			k->st, (long long)k->nb, (long long)k->nb);
	} else if (e->cols) {
		lg_line(b, "u8 *const qtg = (u8 *)%s; // columnwise data [%lld, %s]", k->qt, (long long)e->n, k->m);
	}
}

void lg_qtile_emit_body(lg_buf *b, const struct lg_qe *e, const struct lg_qe_hooks *h)
{
	struct lg_qb k;
	LG_ASSERT(e->layout == LG_QE_TILE128 && e->rows);
	lg_qb_init(&k, e, h, &tile_ops);
	k.rmax = false; /* one scale a tile: the column maxima give it */
	k.cmax = true;
	k.rword = "tile's";
	k.cq = lg_quant_q_args(e->pow2, "tsc, tinv", "tinv");
	emit_place(b, &k);
	lg_qb_emit_body(b, &k);
}
