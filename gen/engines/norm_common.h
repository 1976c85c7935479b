/*
 * norm_common.h - emission shared by the RMSNorm families: the reciprocal
 * RMS from a float64 sum of squares, and the "row layout" in which `lpr`
 * lanes share one row of x, each holding up to a few 16-byte pieces of it
 * in registers. (The fp8 conversion is in quant_common.h.)
 */
#ifndef LG_NORM_COMMON_H
#define LG_NORM_COMMON_H

#include "family.h"

/* `lg_rrms(double S)`: (float)(1 / sqrt(S 2^-256 / hidden + eps)), every
 * step in correctly rounded fp64, as the CPU reference computes it from the
 * unscaled sum: S is the sum of squares scaled by 2^256, as
 * lg_sumsq_bf16x2 / _x8 accumulate it (the exact multiply takes it off). */
void lg_emit_rrms(lg_buf *b, const struct lg_spec *s);
/* The same over n values (the family's key "eps"; no key "hidden" needed). */
void lg_emit_rrms_n(lg_buf *b, const struct lg_spec *s, int64_t n);

/* lpr lanes per row (16 to 1024, a power of two), k pieces of 16 bytes
 * each (piece c of a row is held by lane c % lpr), threads per CTA.
 * pair8 (k even; set by the family after make / load): piece slot k of lane
 * t is instead c = 16 (t / 8 + (k / 2) lpr / 8) + t % 8 + 8 (k % 2), so
 * slots 2j and 2j + 1 are pieces i and i + 8 of one 128-feature block
 * (8 lanes a block, each 128-byte line still one warp segment). */
struct lg_rowlayout {
	int64_t hidden;
	int lpr, k, threads, rows; /* rows = threads / lpr rows per CTA */
	bool pair8;
};
/* The smallest lpr that gives each lane at most kmax pieces; threads is
 * raised to lpr if smaller. */
struct lg_rowlayout lg_rowlayout_make(int64_t hidden, int kmax, int threads);
/* A row layout kept in the first plan values (a family's own start at
 * LG_ROW_VALUES). */
enum { LG_ROW_HIDDEN, LG_ROW_LPR, LG_ROW_K, LG_ROW_ROWS, LG_ROW_THREADS, LG_ROW_VALUES };
void lg_rowlayout_save(const struct lg_rowlayout *l, struct lg_plan *p);
struct lg_rowlayout lg_rowlayout_load(const struct lg_plan *p);

/* Declares t (lane within the row), slot (row within the CTA; none with one
 * row per CTA), and, when a row spans several warps, lane (within the warp)
 * and the shared scratch the row sums go through: fp64 always, fp32 too if
 * fsum (the kernel calls lg_emit_row_sum with "float"). */
void lg_emit_row_prologue(lg_buf *b, const struct lg_rowlayout *l, bool fsum);
/* The same with the fp64 scratch only if dsum (no lg_emit_row_sum with
 * "double" follows). */
void lg_emit_row_prologue_sums(lg_buf *b, const struct lg_rowlayout *l, bool dsum, bool fsum);
/* `const i64 m` = the CTA's row of this lane (blockIdx.x rows of
 * l->rows), `const bool live = m < M`. */
void lg_emit_row_index(lg_buf *b, const struct lg_rowlayout *l);
/* dst[k] = the pieces of row m of `base` (bf16 [.., hidden]); zeros when
 * !live or past the row. `ld` is the load function (lg_ld16, ...), called as
 * ld(pointer) or ld(pointer, extra) when extra is not NULL. */
void lg_emit_row_load(lg_buf *b, const struct lg_rowlayout *l, const char *dst, const char *base,
		      const char *ld, const char *extra);
/* The same for the row `m` (an expression) when `live` (another). */
void lg_emit_row_load_at(lg_buf *b, const struct lg_rowlayout *l, const char *dst, const char *base,
			 const char *ld, const char *extra, const char *m, const char *live);
/* `lg_u32x4 dst[k]` = the lane's pieces of the weight w (bf16 [hidden]),
 * zeros past the row; loaded at once, so that their latency overlaps the
 * loads of x and the row reductions (small batches wait on nothing else). */
void lg_emit_row_weights(lg_buf *b, const struct lg_rowlayout *l, const char *dst, const char *w);
/* `const int c` = the piece of slot `k` (an int expression) of lane t. */
void lg_emit_row_piece(lg_buf *b, const struct lg_rowlayout *l, const char *k);
/* `double ss` = the row's sum of squares (fp64), in every lane of the row. */
void lg_emit_row_sumsq(lg_buf *b, const struct lg_rowlayout *l, const char *v);
/* var (float or double) summed over the lanes of each row, in a fixed order. */
void lg_emit_row_sum(lg_buf *b, const struct lg_rowlayout *l, const char *type, const char *var);

/* The second kernel of a deterministic weight-gradient backward: dw[col],
 * col < n, = the fp32 sum of the `ctas` workspace rows (an expression over
 * the entry's run-time sizes, e.g. "lg_ctas(M)") in CTA order. With early,
 * it waits (griddepcontrol.wait) for the first kernel's partial sums.
 * 256 threads a CTA; not sliced: a thread a column (grid ceil(n / 256));
 * sliced: 32 columns a CTA, each summed by 8 warps over every 8th row and
 * the 8 sums added in order (grid ceil(n / 32)): 8 times the loads in
 * flight, the same result for the same rows. */
void lg_emit_dw_reduce(lg_buf *b, const struct lg_spec *s, const char *entry, int64_t n, bool early,
		       const char *ctas, bool sliced);
/* Its launch shape for n columns (launched also at 0 tokens: dw = 0). */
void lg_dw_reduce_geometry(int64_t n, bool sliced, struct lg_launch_dim *d);

/* The quant engine's hooks (quant_engine.h) for the copies of an RMSNorm
 * output y = (x r) w, in fp32 as the norm computes it, from the kernel's
 * arguments x (bf16 [*, n], re-read with evict-first loads: it is expected
 * in L2), rms (the saved reciprocal RMS, fp32 [*]) and w (bf16 [n]):
 * block loads the 8 weights of the thread's features, values a row. ctx
 * unused. rmsnorm_quant's columnwise kernel and rmsnorm_router's. */
struct lg_qe;
struct lg_qe_row;
void lg_norm_qe_block(lg_buf *b, const struct lg_qe *e, void *ctx);
void lg_norm_qe_values(lg_buf *b, const struct lg_qe *e, const struct lg_qe_row *r, void *ctx);

#endif
