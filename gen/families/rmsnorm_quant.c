/*
 * rmsnorm_quant.c - family "rmsnorm_quant" (docs/kernels.md K1): RMSNorm fused
 * with 1x128 (rowwise) and 128x1 (columnwise, transposed) blockwise e4m3
 * quantisation, forward.
 *
 * Strategy: x is read from HBM once, by two kernels.
 *   1. `<entry>_rows`: `lpr` lanes per row, the row in registers. fp64 sum of
 *      squares (lg_sumsq_bf16x8: 3 instructions a value), reciprocal RMS
 *      (written to rms), then the rowwise copy: when a lane holds 2 or 4
 *      pieces (h2048: 4), a 1x128 block is 8 lanes of 16 values
 *      (pieces i and i + 8 of the block, the pair8 row layout: half the amax
 *      shuffles and scale computations a value), else 16 lanes of 8; amax by
 *      butterfly, 8-byte stores of q, one scale per row and block. This
 *      kernel is bound by instruction issue (ncu: ~20 instructions a value
 *      before the pair8 layout and the cheaper sum of squares, IPC ~0.6 a
 *      scheduler), not by DRAM. When the columnwise copy is wanted, x is
 *      loaded with an L2 evict-last policy so that it stays in L2 (32 MB at
 *      8192 x 2048, of 60 MB) for kernel 2.
 *   2. `<entry>` (columnwise copy only): a CTA per tile of 128 tokens (one
 *      128x1 scale block) by 128 features; each thread owns 4 rows x 8
 *      columns and computes y = (x r) w once, in registers. Column amax over
 *      its rows, then over the 32 row blocks (a shuffle, then shared
 *      memory); bytes packed 4 rows at a time into a swizzled transposed
 *      staging tile, written out as 128-byte qt lines. x is re-read (from L2
 *      where it is still there) with evict-first loads; stores are streaming.
 *   On sm_90 kernel 2 is launched as a programmatic dependent of kernel 1
 *   and waits for it with griddepcontrol.wait.
 *
 * Tile options (the defaults are what measured fastest on the H200; the
 * variants' runs: git history, commit e1d4ab9: bench/README.md): `threads`
 * and `rows` shape kernel 1; `stages` N cuts the
 * tokens into N slices, each a kernel-1 launch then a kernel-2 launch (the
 * `part` argument), so that x is re-read while still in L2; `cluster` =
 * hidden/128 (sm_90, hidden <= 2048) selects the fused form: one persistent
 * kernel, a cluster of hidden/128 CTAs per 128-token tile exchanging row sums
 * through distributed shared memory, x read once into registers through
 * cp.async stages.
 *
 * `slab` (sm_90, hidden a multiple of slab, hidden/slab <= 8) selects the
 * one-pass TMA form: one persistent kernel, a cluster of hidden/slab CTAs
 * per 128-token tile, each CTA's 128 x slab piece of x loaded by TMA (boxes
 * of up to 256 features x 128 tokens, tails zero-filled) into a ring of
 * shared-memory stages (2 where they fit in 227 KB: slab <= 256; or
 * `stages`), so that the next tile's load overlaps this tile's math and x
 * is read from HBM once by few instructions. fp64 row partial sums are
 * exchanged through distributed shared memory (one cluster barrier a tile);
 * then each 128 x 128 block of the slab is worked as in the fused form
 * (512 threads, 4 rows x 8 features a thread): y from shared memory, the
 * rowwise block, the columnwise block (all 128 tokens are in the CTA), qt
 * through the swizzled staging tile. One CTA an SM (16 warps). Correct on
 * the H200 (then gpu_test_k1:test_k1_slab; now the rmsnorm_quant case file) but slower than the two kernels at
 * 8192 x 2048 (git history, commit 8b8e268: bench/h200-2026-12-01d, bench/k1-fused.json): slab 256
 * 44.6 us (1 stage: 36.7), slab 512 50.3, the default 34.2: the per-element
 * work is the fused form's (~20 instructions) at 16 warps an SM, with a
 * cluster barrier a tile; a producer warp, packed e4m3x2 math and 2 CTAs
 * an SM are what it lacks.
 */
#include <stdio.h>
#include <string.h>

#include "family.h"

#include "error.h"
#include "norm_common.h"
#include "quant_common.h"
#include "quant_engine.h"
#include "templates.h"

#define ROWS 128 /* tokens per tile = one 128x1 scale block */

enum { K_HIDDEN, K_EPS, K_QUANT, K_TILE = K_QUANT + LG_QUANT_KEYS, K_ROWS, K_THREADS, K_CLUSTER,
       K_STAGES, K_SLAB, K_QT_STORE, NKEYS };
static const int64_t threads_ok[] = {128, 256, 512, 1024, 0};
static const int64_t slab_ok[] = {128, 256, 512, 0};
static const struct lg_key keys[NKEYS] = {
	[K_HIDDEN] = LG_KEY_DIM("hidden", "h", 128, 16384, 128, "features per row"),
	[K_EPS] = LG_KEY_EPS,
	LG_KEYS_QUANT(K_QUANT),
	[K_TILE] = LG_KEY_TILE_OBJ,
	[K_ROWS] = LG_KEY_TILE("rows", "r", 1, 64, NULL,
			       "rows per CTA of the rms kernel (threads / rows lanes per row, a power of two >= 16)"),
	[K_THREADS] = LG_KEY_TILE("threads", "t", 128, 1024, threads_ok, "threads per CTA of the rms kernel"),
	[K_CLUSTER] = LG_KEY_TILE("cluster", "cl", 1, 128, NULL,
				  "1: two kernels; hidden/128: one fused kernel, a cluster per 128 tokens (sm_90+)"),
	[K_STAGES] = LG_KEY_TILE("stages", "st", 1, 4, NULL,
				 "fused: x tiles in flight; two kernels: token slices"),
	[K_SLAB] = LG_KEY_TILE("slab", "sl", 128, 512, slab_ok,
			       "one-pass TMA form (sm_90+): features per CTA, a cluster of hidden/slab <= 8 CTAs"),
	[K_QT_STORE] = LG_QE_KEY_QT_STORE,
};

static const struct lg_size sizes[] = {
	{"tokens", "M", 0, (int64_t)65535 * 128, "rows of x (128-token tiles on a grid's y)", 0, 0},
};

enum { ARG_X, ARG_W, ARG_Q, ARG_S, ARG_RMS, ARG_QT, ARG_ST, NARGS };

static const struct lg_arg fwd_args[NARGS] = {
	[ARG_X] = {"x", LG_ARG_IN, LG_ELEM_BF16, "tokens, hidden", 16, NULL},
	[ARG_W] = {"w", LG_ARG_IN, LG_ELEM_BF16, "hidden", 16, NULL},
	[ARG_Q] = {"q", LG_ARG_OUT, LG_ELEM_E4M3, "tokens, hidden", 16, "rowwise (0 for columnwise)"},
	[ARG_S] = {"s", LG_ARG_OUT, LG_ELEM_FP32, "hidden / 128, tokens", 16, "rowwise scales, transposed"},
	[ARG_RMS] = {"rms", LG_ARG_OUT, LG_ELEM_FP32, "tokens", 16,
		     "reciprocal RMS (also read by the second kernel)"},
	[ARG_QT] = {"qt", LG_ARG_OUT, LG_ELEM_E4M3, "hidden, " LG_QT_PITCH, 16,
		    "columnwise, transposed, rows 128-byte aligned, zeros past tokens (0 for rowwise)"},
	[ARG_ST] = {"st", LG_ARG_OUT, LG_ELEM_FP32, "cdiv(tokens, 128), hidden", 16, "columnwise scales"},
};

/* Plan values: kernel 1's row layout, then ours. */
enum {
	P_HIDDEN = LG_ROW_HIDDEN,
	P_LPR = LG_ROW_LPR,         /* kernel 1: lanes per row */
	P_K = LG_ROW_K,             /* kernel 1: 16-byte pieces per lane */
	P_ROWS = LG_ROW_ROWS,       /* kernel 1: rows per CTA */
	P_THREADS = LG_ROW_THREADS, /* kernel 1: threads per CTA */
	P_FUSED = LG_ROW_VALUES,    /* 1: one fused kernel with a cluster of hidden/128 CTAs */
	P_STAGES,                   /* fused: x tiles in flight per CTA; two kernels: parts */
	P_SLAB,                     /* one-pass TMA form: features per CTA (0: not that form) */
	P_QT_STORE,                 /* the qt store (tile.qt_store; the former one: two kernels only) */
};
#define COLS 128     /* kernel 2: features per tile */
#define K2_THREADS 512 /* kernel 2: 32 row blocks of 4 x 16 column blocks of 8 */


#define FUSED_MAX_CLUSTER 16 /* non-portable above 8: allowed on sm_90 */
#define SLAB_MAX_CLUSTER 8   /* the one-pass TMA form: portable cluster sizes */

/* Checks across keys that hold on every target (the rest is plan()'s). */
static lg_status validate(const struct lg_spec *s, const char *where)
{
	int64_t h = lg_spec_int(s, K_HIDDEN), cl = lg_spec_int(s, K_CLUSTER);
	if (lg_spec_has(s, K_CLUSTER) && cl != 1 && cl != h / COLS)
		return lg_spec_error(where, "tile.cluster: found %lld, allowed: 1 (two kernels) or hidden/128 = %lld (fused)",
				     (long long)cl, (long long)h / COLS);
	if (lg_spec_has(s, K_CLUSTER) && cl > FUSED_MAX_CLUSTER)
		return lg_spec_error(where, "tile.cluster: found %lld, allowed: 1 (the fused form takes hidden <= %d)",
				     (long long)cl, FUSED_MAX_CLUSTER * COLS);
	if (lg_spec_has(s, K_SLAB)) {
		int64_t sl = lg_spec_int(s, K_SLAB);
		if (lg_spec_has(s, K_CLUSTER))
			return lg_spec_error(where, "tile.slab: found with tile.cluster, allowed: one of the two");
		if (h % sl || h / sl > SLAB_MAX_CLUSTER)
			return lg_spec_error(where, "tile.slab: found %lld, allowed: a divisor of hidden = %lld, at least "
						    "hidden/%d", (long long)sl, (long long)h, SLAB_MAX_CLUSTER);
	}
	if (lg_spec_has(s, K_ROWS)) {
		int64_t threads = lg_spec_has(s, K_THREADS) ? lg_spec_int(s, K_THREADS) : 128;
		int64_t rows = lg_spec_int(s, K_ROWS), lpr = threads / rows;
		if (threads % rows || lpr < 16 || (lpr & (lpr - 1))) {
			char ok[64] = "";
			size_t n = 0;
			for (int64_t l = 16; l <= threads; l *= 2)
				n += (size_t)snprintf(ok + n, sizeof ok - n, "%s%lld", n ? ", " : "", (long long)(threads / l));
			return lg_spec_error(where, "tile.rows: found %lld, allowed: %s (a power of two >= 16 lanes per "
						    "row of tile.threads = %lld)", (long long)rows, ok, (long long)threads);
		}
	}
	return LG_OK;
}

/* Kernel 2's shared memory: qt staging, column partial maxima, column
 * scales and inverses. */
#define K2_SMEM (COLS * ROWS + 16 * COLS * 4 + 2 * COLS * 4)
/* The fused kernel adds psum[2][128] (fp64), rs[128] and its x stages. */
#define FUSED_SMEM(stages) (K2_SMEM + 2 * ROWS * 8 + ROWS * 4 + (stages) * ROWS * COLS * 2)
/* The one-pass TMA form: qt staging, column maxima, scales, psum[2][128]
 * (fp64), rs[128] and the stage mbarriers, then (1024-byte aligned) its x
 * stages of 128 tokens x slab features. */
#define SLAB_HEAD 29696 /* K2_SMEM + 2 * ROWS * 8 + ROWS * 4 + 8 * 8, rounded up to 1024 */
#define SLAB_STAGE(slab) ((slab) * ROWS * 2)
#define SLAB_SMEM(slab, stages) (SLAB_HEAD + (stages) * SLAB_STAGE(slab))
#define SLAB_SMEM_MAX (227 * 1024)
#define SLAB_BOX(slab) ((slab) < 256 ? (slab) : 256) /* TMA box columns (at most 256) */
_Static_assert(SLAB_HEAD >= K2_SMEM + 2 * ROWS * 8 + ROWS * 4 + 8 * 8 && SLAB_HEAD % 1024 == 0, "SLAB_HEAD");

/* The one-pass TMA form: sm_90, a cluster of hidden/slab CTAs, x stages in
 * shared memory (2 where they fit, or tile.stages). */
static lg_status plan_slab(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	int64_t h = lg_spec_int(s, K_HIDDEN), sl = lg_spec_int(s, K_SLAB);
	if (t->sm < 90)
		return lg_fail(LG_ERR_SPEC, "%s: tile.slab: found %lld, allowed for %s: none (the one-pass form "
					    "needs TMA and clusters, sm_90 or newer)", s->entry, (long long)sl, t->name);
	int64_t st = SLAB_SMEM(sl, 2) <= SLAB_SMEM_MAX ? 2 : 1;
	if (lg_spec_has(s, K_STAGES))
		st = lg_spec_int(s, K_STAGES);
	if (SLAB_SMEM(sl, st) > SLAB_SMEM_MAX)
		return lg_fail(LG_ERR_SPEC, "%s: tile.stages: found %lld, allowed at tile.slab = %lld: at most %lld "
					    "(%d KB of shared memory)", s->entry, (long long)st, (long long)sl,
			       (long long)((SLAB_SMEM_MAX - SLAB_HEAD) / SLAB_STAGE(sl)), SLAB_SMEM_MAX / 1024);
	struct lg_rowlayout l = lg_rowlayout_make(h, 4, 128); /* unused by this form; keeps the plan whole */
	lg_rowlayout_save(&l, p);
	p->v[P_FUSED] = 1;
	p->v[P_SLAB] = p->tile[K_SLAB] = sl;
	p->v[P_STAGES] = p->tile[K_STAGES] = st;
	p->tile[K_CLUSTER] = h / sl;
	/* (the key left out of the tile unless given, as before tile.qt_store 3) */
	p->v[P_QT_STORE] = lg_spec_has(s, K_QT_STORE) ? lg_qe_plan_qt_store(s, p, K_QT_STORE) : LG_QT_WHOLE;
	p->nentries = 1;
	p->persistent[0] = true;
	p->cluster[0] = (unsigned)(h / sl);
	p->ntmaps = 1;
	p->tmap[0] = (struct lg_tmap_decl){.arg = ARG_X, .box = {(unsigned)SLAB_BOX(sl), ROWS}, .swizzle = 0};
	snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
	return LG_OK;
}

static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	int64_t h = lg_spec_int(s, K_HIDDEN);
	if (lg_spec_has(s, K_SLAB))
		return plan_slab(s, t, p);
	/* Measured on H200 at 8192 x 2048 (git history, commit e1d4ab9:
	 * bench/README.md, its table against docs/performance.md's goals): the two-kernel
	 * form is the faster default; the fused cluster kernel is a tile option. */
	bool fused = false;
	if (lg_spec_has(s, K_CLUSTER)) {
		fused = lg_spec_int(s, K_CLUSTER) > 1 || h == COLS;
		if (fused && (t->sm < 90 || h / COLS > FUSED_MAX_CLUSTER))
			return lg_fail(LG_ERR_SPEC, "%s: tile.cluster: found %lld, allowed for %s: 1 (the fused form "
						    "needs sm_90 or newer and hidden <= %d)",
				       s->entry, (long long)h / COLS, t->name, FUSED_MAX_CLUSTER * COLS);
	}
	int threads = lg_spec_has(s, K_THREADS) ? (int)lg_spec_int(s, K_THREADS) : 128;
	int kmax = 4; /* 16-byte pieces per lane; tile.rows (rows per CTA) sets it */
	if (lg_spec_has(s, K_ROWS)) {
		int lpr = threads / (int)lg_spec_int(s, K_ROWS);
		if (lpr < 16 || (lpr & (lpr - 1)))
			return lg_fail(LG_ERR_SPEC, "%s: tile.threads / tile.rows = %d lanes per row, allowed: a power of two >= 16",
				       s->entry, lpr);
		kmax = (int)((h / 8 + lpr - 1) / lpr);
	}
	struct lg_rowlayout l = lg_rowlayout_make(h, kmax, threads);
	lg_rowlayout_save(&l, p);
	p->v[P_QT_STORE] = lg_qe_plan_qt_store(s, p, K_QT_STORE);
	p->tile[K_THREADS] = l.threads;
	p->tile[K_ROWS] = l.rows;
	p->v[P_FUSED] = fused;
	if (fused) {
		p->nentries = 1;
		p->tile[K_STAGES] = p->v[P_STAGES] = lg_spec_has(s, K_STAGES) ? lg_spec_int(s, K_STAGES) : 2;
		p->persistent[0] = true;
		p->cluster[0] = (unsigned)(h / COLS);
		p->tile[K_CLUSTER] = h / COLS;
		snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
	} else {
		/* Columnwise: the tokens in `parts` slices, each a rows launch then a
		 * columnwise launch, so that a slice's x (8 MB at 2048 x 2048) is
		 * still in L2 when it is read the second time; on sm_90 each launch
		 * may start while the one before drains (programmatic dependent
		 * launch). */
		/* Default 1: measured on H200 at 8192 x 2048, 2 and 4 slices were
		 * slower (36.7, 43.5 us against 35.3; git history, commit e1d4ab9:
		 * bench/README.md). */
		int parts = lg_quant_colwise(s) && lg_spec_has(s, K_STAGES) ? (int)lg_spec_int(s, K_STAGES) : 1;
		p->tile[K_STAGES] = p->v[P_STAGES] = parts;
		p->nentries = lg_quant_colwise(s) ? 2 * parts : 1;
		for (int e = 0; e < p->nentries; e++) {
			p->part[e] = e / 2;
			p->early[e] = e > 0 && t->sm >= 90;
			snprintf(p->entry[e], sizeof p->entry[e], "%s%s", s->entry, e % 2 ? "" : "_rows");
		}
		p->tile[K_CLUSTER] = 1;
	}
	return LG_OK;
}

static void geometry(const struct lg_plan *p, int e, const int64_t *sz, struct lg_launch_dim *d)
{
	const int64_t tokens = sz[0];
	d->grid[2] = d->block[1] = d->block[2] = 1;
	if (p->v[P_FUSED]) { /* a cluster of hidden/128 (hidden/slab) CTAs per 128-token tile */
		d->grid[0] = (unsigned)(p->v[P_HIDDEN] / (p->v[P_SLAB] ? p->v[P_SLAB] : COLS));
		d->grid[1] = (unsigned)((tokens + ROWS - 1) / ROWS);
		if (p->persistent[e] && p->resident[e] && p->resident[e] < d->grid[1])
			d->grid[1] = p->resident[e];
		d->block[0] = K2_THREADS;
		d->smem = (unsigned)(p->v[P_SLAB] ? SLAB_SMEM(p->v[P_SLAB], p->v[P_STAGES]) : FUSED_SMEM(p->v[P_STAGES]));
		return;
	}
	/* slice `part` of the tokens: tiles [t0, t1) of 128 (an empty slice
	 * still launches one CTA, which returns at once) */
	int64_t tiles = (tokens + ROWS - 1) / ROWS, per = (tiles + p->v[P_STAGES] - 1) / p->v[P_STAGES];
	int64_t t0 = p->part[e] * per, t1 = t0 + per < tiles ? t0 + per : tiles;
	int64_t n = t1 > t0 ? t1 - t0 : 0;
	if (e % 2 == 0) { /* rows: rows per CTA */
		int64_t rows = n ? (t1 * ROWS < tokens ? t1 * ROWS : tokens) - t0 * ROWS : 0;
		int64_t ctas = (rows + p->v[P_ROWS] - 1) / p->v[P_ROWS];
		d->grid[0] = (unsigned)(ctas ? ctas : 1);
		d->grid[1] = 1;
		d->block[0] = (unsigned)p->v[P_THREADS];
		d->smem = 0;
		return;
	}
	d->grid[0] = (unsigned)(p->v[P_HIDDEN] / COLS);
	d->grid[1] = (unsigned)(n ? n : 1);
	d->block[0] = K2_THREADS;
	d->smem = 0; /* the quant engine's shared memory is static */
}

/* ------------------------------------------------------------ emission */


/* The next launch (programmatic dependent launch) may be scheduled. */
static void emit_launch_dependents(lg_buf *b)
{
	lg_comment(b, "The next launch may be scheduled.");
	lg_line(b, "asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");");
}

/* t0, t1: the 128-token tiles of slice `part` of `parts` (parts > 1). */
static void emit_slice(lg_buf *b, int parts)
{
	lg_line(b, "const i64 tiles = (M + %d) / %d, per = (tiles + %d) / %d;", ROWS - 1, ROWS, parts - 1, parts);
	lg_line(b, "const i64 t0 = part * per, t1 = t0 + per < tiles ? t0 + per : tiles; // this launch's tiles");
}

/* Kernel 1's rowwise copy with the pair8 layout: slots 2j, 2j + 1 are
 * pieces i, i + 8 of one 1x128 block, so a block is 8 lanes of 16 values:
 * half the shuffles and scale computations a value of 16 lanes of 8. */
static void emit_rows_rowwise_pairs(lg_buf *b, const struct lg_spec *s, const struct lg_rowlayout *l)
{
	const char *qa = lg_quant_q_args(lg_quant_pow2(s), "sc, inv", "inv");
	lg_comment(b, "Rowwise copy: y = (x r) w; a 1x128 block is pieces i and i + 8 of 8 lanes.");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int j = 0; j < %d; j++) {", l->k / 2);
	lg_emit_row_piece(b, l, "(2 * j)");
	lg_line(b, "const bool ok = live && c < %lld;", (long long)(l->hidden / 8));
	lg_line(b, "float y[16], amax = 0.0f;");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int h = 0; h < 2; h++) {");
	lg_line(b, "const lg_u32x4 xh = v[2 * j + h], wh = wv[2 * j + h];");
	lg_line(b, "const u32 xv[4] = {xh.x, xh.y, xh.z, xh.w};");
	lg_line(b, "const u32 ww[4] = {wh.x, wh.y, wh.z, wh.w};");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int e = 0; e < 4; e++) {");
	lg_line(b, "float *const yp = y + 8 * h + 2 * e;");
	lg_line(b, "yp[0] = (lg_bf16_lo(xv[e]) * r) * lg_bf16_lo(ww[e]);");
	lg_line(b, "yp[1] = (lg_bf16_hi(xv[e]) * r) * lg_bf16_hi(ww[e]);");
	lg_line(b, "amax = fmaxf(amax, fmaxf(fabsf(yp[0]), fabsf(yp[1])));");
	lg_close(b);
	lg_close(b);
	lg_line(b, "amax = lg_max_xor(amax, 1, 4);");
	lg_emit_scale(b, lg_quant_pow2(s), "sc", "amax", "inv");
	lg_line(b, "u32 pk[4];");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int e = 0; e < 4; e++)");
	lg_line(b, "	pk[e] = lg_e4m3x4(lg_q(y[4 * e], %s), lg_q(y[4 * e + 1], %s),", qa, qa);
	lg_line(b, "		lg_q(y[4 * e + 2], %s), lg_q(y[4 * e + 3], %s));", qa, qa);
	lg_open(b, "if (ok) {");
	lg_line(b, "u8 *const qp = (u8 *)q + m * %lld + c * 8;", (long long)l->hidden);
	lg_line(b, "lg_st8_cs(qp, pk[0], pk[1]);");
	lg_line(b, "lg_st8_cs(qp + 64, pk[2], pk[3]);");
	lg_line(b, "if ((t & 7) == 0) ((float *)s)[(i64)(c >> 4) * M + m] = sc;");
	lg_close(b);
	lg_close(b);
}

/* Kernel 1: reciprocal RMS and the rowwise copy, lpr lanes per row. */
static void emit_rows_kernel(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	struct lg_rowlayout l = lg_rowlayout_load(p);
	/* a lane holds 16 values of a 1x128 block (not at 8 pieces a lane: 94 registers
	 * against 80, 2 CTAs of 256 an SM against 3) */
	l.pair8 = lg_quant_rowwise(s) && (l.k == 2 || l.k == 4);
	int64_t pieces = p->v[P_HIDDEN] / 8;
	lg_section(b, p->entry[0], lg_quant_rowwise(s) ? "reciprocal RMS, rowwise copy" : "reciprocal RMS");
	lg_comment(b, "Kernel 1: reciprocal RMS%s of each row; %d lanes per row, %d pieces of 8",
		   lg_quant_rowwise(s) ? " and the rowwise copy" : "", l.lpr, l.k);
	lg_comment(b, "columns each, %d rows per CTA.%s", l.rows,
		   lg_quant_colwise(s) ? " x is loaded with an L2 evict-last policy: kernel 2 re-reads it." : "");
	lg_emit_signature(b, s, p->entry[0], "__launch_bounds__(%d)", l.threads);
	lg_open(b, "{");
	lg_emit_row_prologue(b, &l, false);
	if (p->early[1] && lg_quant_colwise(s))
		emit_launch_dependents(b);
	if (p->v[P_STAGES] > 1) {
		emit_slice(b, (int)p->v[P_STAGES]);
		if (l.rows > 1)
			lg_line(b, "const i64 m = t0 * %d + (i64)blockIdx.x * %d + slot;", ROWS, l.rows);
		else
			lg_line(b, "const i64 m = t0 * %d + blockIdx.x;", ROWS);
		lg_line(b, "const bool live = m < (t1 * %d < M ? t1 * %d : M);", ROWS, ROWS);
	} else {
		lg_emit_row_index(b, &l);
	}
	lg_line(b, "lg_u32x4 v[%d];", l.k);
	if (lg_quant_colwise(s)) {
		lg_line(b, "const u64 keep = lg_policy_evict_last();");
		lg_emit_row_load(b, &l, "v", "(const u8 *)x", "lg_ld16_last", "keep");
	} else {
		lg_emit_row_load(b, &l, "v", "(const u8 *)x", "lg_ld16_cs", NULL);
	}
	if (lg_quant_rowwise(s))
		lg_emit_row_weights(b, &l, "wv", "w");
	lg_emit_row_sumsq(b, &l, "v");
	lg_line(b, "const float r = lg_rrms(ss);");
	lg_line(b, "if (live && t == 0) ((float *)rms)[m] = r;");
	if (!lg_quant_rowwise(s)) {
		lg_close(b);
		return;
	}
	if (l.pair8) {
		emit_rows_rowwise_pairs(b, s, &l);
		lg_close(b);
		return;
	}
	lg_comment(b, "Rowwise copy: y = (x r) w; a 1x128 block is 16 consecutive pieces (16 lanes).");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int k = 0; k < %d; k++) {", l.k);
	lg_line(b, "const int c = t + k * %d;", l.lpr);
	lg_line(b, "const bool ok = live && c < %lld;", (long long)pieces);
	lg_line(b, "const u32 xv[4] = {v[k].x, v[k].y, v[k].z, v[k].w};");
	lg_line(b, "const u32 ww[4] = {wv[k].x, wv[k].y, wv[k].z, wv[k].w};");
	lg_line(b, "float y[8], amax = 0.0f;");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int e = 0; e < 4; e++) {");
	lg_line(b, "y[2 * e] = (lg_bf16_lo(xv[e]) * r) * lg_bf16_lo(ww[e]);");
	lg_line(b, "y[2 * e + 1] = (lg_bf16_hi(xv[e]) * r) * lg_bf16_hi(ww[e]);");
	lg_line(b, "amax = fmaxf(amax, fmaxf(fabsf(y[2 * e]), fabsf(y[2 * e + 1])));");
	lg_close(b);
	lg_line(b, "amax = lg_max_xor(amax, 1, 8);");
	lg_emit_pack8(b, lg_quant_pow2(s), "y");
	lg_open(b, "if (ok) {");
	lg_line(b, "lg_st8_cs((u8 *)q + m * %lld + c * 8, p0, p1);", (long long)p->v[P_HIDDEN]);
	lg_line(b, "if ((c & 15) == 0) ((float *)s)[(i64)(c >> 4) * M + m] = sc;");
	lg_close(b);
	lg_close(b);
	lg_close(b);
}

/* The tile's first token and row count. */
static void emit_tile_rows(lg_buf *b, const char *tile_row)
{
	lg_line(b, "const i64 tr = %s, m0 = tr * %d;", tile_row, ROWS);
	lg_line(b, "const int rows = (int)(M - m0 < %d ? M - m0 : %d);", ROWS, ROWS);
}

/* Declarations every tile kernel starts with: shared memory, the thread's
 * 4 x 8 block (row block rb, column block lb), the tile (unless tile_row is
 * NULL: a persistent kernel declares it per tile). */
static void emit_tile_prologue(lg_buf *b, const char *tile_row, bool cols, bool decl)
{
	if (decl)
		lg_line(b, "extern __shared__ __align__(128) u8 smem[];");
	lg_line(b, "u8 *const stage = smem; // qt staging [%d columns][128 tokens], 4-byte slots swizzled", COLS);
	lg_line(b, "float *const cpart = (float *)(stage + %d); // [16][%d] column maxima of row-block pairs",
		COLS * ROWS, COLS);
	lg_line(b, "float *const csc = cpart + %d, *const cinv = csc + %d; // column scales, inverses",
		16 * COLS, COLS);
	lg_line(b, "const int lb = threadIdx.x & 15, rb = threadIdx.x >> 4; // column block, row block");
	if (cols)
		lg_line(b, "const i64 k0 = (i64)blockIdx.x * %d, col0 = k0 + lb * 8; // this thread's first column",
			COLS);
	if (tile_row)
		emit_tile_rows(b, tile_row);
}

/* y[4][8] = (x r) w in registers, from xv and rr[4]; the tile's absent rows
 * (4 rb + i >= rows) +0: their x is zero-filled, but 0 times a negative w is
 * -0, which quantises to 0x80, and qt's tail must be +0 bytes. */
static void emit_tile_y(lg_buf *b)
{
	lg_line(b, "const lg_u32x4 wv = lg_ld16_keep((const u8 *)w + col0 * 2);");
	lg_line(b, "const u32 ww[4] = {wv.x, wv.y, wv.z, wv.w};");
	lg_line(b, "float y[4][8];");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < 4; i++) {");
	lg_line(b, "const u32 xw[4] = {xv[i].x, xv[i].y, xv[i].z, xv[i].w};");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int e = 0; e < 4; e++) {");
	lg_line(b, "y[i][2 * e] = (lg_bf16_lo(xw[e]) * rr[i]) * lg_bf16_lo(ww[e]);");
	lg_line(b, "y[i][2 * e + 1] = (lg_bf16_hi(xw[e]) * rr[i]) * lg_bf16_hi(ww[e]);");
	lg_close(b);
	lg_line(b, "if (4 * rb + i >= rows) // absent: +0 (0 * a negative w is -0)");
	lg_line(b, "\tfor (int c = 0; c < 8; c++) y[i][c] = 0.0f;");
	lg_close(b);
}

/* The one-kernel forms' qt store: tile.qt_store 3 (write-back), else the
 * whole evict-first stores (the former store, 1, is the two kernels' only). */
static enum lg_qt_store tile_qt_store(const struct lg_plan *p)
{
	return p->v[P_QT_STORE] == LG_QT_WB ? LG_QT_WB : LG_QT_WHOLE;
}

/* The columnwise copy of the tile from y: amax over the thread's 4 rows,
 * the row-block pair (a shuffle), then the 16 pairs through shared memory;
 * bytes through the swizzled staging tile to 128-byte qt lines. */
static void emit_tile_colwise(lg_buf *b, const struct lg_spec *s, int64_t n, enum lg_qt_store store)
{
	lg_line(b, "float cm[8];");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int c = 0; c < 8; c++) {");
	lg_line(b, "cm[c] = fmaxf(fmaxf(fabsf(y[0][c]), fabsf(y[1][c])),");
	lg_line(b, "\tfmaxf(fabsf(y[2][c]), fabsf(y[3][c])));");
	lg_line(b, "cm[c] = fmaxf(cm[c], __shfl_xor_sync(0xffffffffu, cm[c], 16));");
	lg_close(b);
	lg_open(b, "if ((threadIdx.x & 16) == 0) {");
	lg_line(b, "*(float4 *)(cpart + (rb >> 1) * %d + lb * 8) =", COLS);
	lg_line(b, "\tmake_float4(cm[0], cm[1], cm[2], cm[3]);");
	lg_line(b, "*(float4 *)(cpart + (rb >> 1) * %d + lb * 8 + 4) =", COLS);
	lg_line(b, "\tmake_float4(cm[4], cm[5], cm[6], cm[7]);");
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_open(b, "if (threadIdx.x < %d) {", COLS);
	lg_line(b, "float amax = cpart[threadIdx.x];");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int q2 = 1; q2 < 16; q2++)");
	lg_line(b, "\tamax = fmaxf(amax, cpart[q2 * %d + threadIdx.x]);", COLS);
	lg_emit_scale(b, lg_quant_pow2(s), "sc", "amax", "inv");
	if (!lg_quant_pow2(s)) /* lg_q needs the scale only when it is not a power of two */
		lg_line(b, "csc[threadIdx.x] = sc;");
	lg_line(b, "cinv[threadIdx.x] = inv;");
	lg_line(b, "((float *)st)[tr * %lld + k0 + threadIdx.x] = sc;", (long long)n);
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_comment(b, "Quantise with the column scales; 4 rows of a column make one 4-byte slot of the");
	lg_comment(b, "staging tile, slot index XOR (2 x column / 8): conflict-free writes and reads.");
	lg_open(b, "{");
	lg_line(b, "const float4 i0 = *(const float4 *)(cinv + lb * 8);");
	lg_line(b, "const float4 i1 = *(const float4 *)(cinv + lb * 8 + 4);");
	lg_line(b, "const float ci[8] = {i0.x, i0.y, i0.z, i0.w, i1.x, i1.y, i1.z, i1.w};");
	if (!lg_quant_pow2(s)) {
		lg_line(b, "const float4 s0 = *(const float4 *)(csc + lb * 8);");
		lg_line(b, "const float4 s1 = *(const float4 *)(csc + lb * 8 + 4);");
		lg_line(b, "const float cs[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};");
	}
	const char *qa = lg_quant_q_args(lg_quant_pow2(s), "cs[c], ci[c]", "ci[c]");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int c = 0; c < 8; c++) {");
	lg_line(b, "const u32 v4 = lg_e4m3x4(");
	lg_line(b, "\tlg_q(y[0][c], %s), lg_q(y[1][c], %s),", qa, qa);
	lg_line(b, "\tlg_q(y[2][c], %s), lg_q(y[3][c], %s));", qa, qa);
	lg_line(b, "*(u32 *)(stage + (lb * 8 + c) * 128 + ((rb ^ (lb << 1)) << 2)) = v4;");
	lg_close(b);
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_emit_qt_lines(b, K2_THREADS, store);
}

/* The rowwise copy of the tile from y: the tile's 128 columns are one 1x128
 * block, 16 lanes. */
static void emit_tile_rowwise(lg_buf *b, const struct lg_spec *s, int64_t n, const char *kblock)
{
	lg_comment(b, "Rowwise copy: the tile's 128 columns are one 1x128 block (16 lanes).");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < 4; i++) {");
	lg_line(b, "float amax = 0.0f;");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int c = 0; c < 8; c++) amax = fmaxf(amax, fabsf(y[i][c]));");
	lg_line(b, "amax = lg_max_xor(amax, 1, 8);");
	lg_emit_pack8(b, lg_quant_pow2(s), "y[i]");
	lg_open(b, "if (4 * rb + i < rows) {");
	lg_line(b, "lg_st8_cs((u8 *)q + (m0 + 4 * rb + i) * %lld + col0, p0, p1);", (long long)n);
	lg_line(b, "if (lb == 0) ((float *)s)[%s * M + m0 + 4 * rb + i] = sc;", kblock);
	lg_close(b);
	lg_close(b);
}

/* Kernel 2's hooks on the quant engine: y = (x r) w in fp32, as the
 * fused kernel computes it (norm_common.h: lg_norm_qe_values, _block). */
static void k2_prologue(lg_buf *b, const struct lg_qe *e, void *ctx)
{
	(void)e;
	if (((const struct lg_plan *)ctx)->early[1]) {
		lg_comment(b, "Wait until the rows launch before this one is done, its rms visible.");
		lg_line(b, "asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");");
	}
}

/* Kernel 2 (two-kernel mode): the columnwise copy of one 128 x 128 tile, by
 * the quant engine (fp32 values, 512 threads: 4 tokens x 8 features a
 * thread) on this family's grid: features on x, tiles on y in reverse. */
static void emit_cols_kernel(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	lg_section(b, p->entry[1], "columnwise copy");
	lg_comment(b, "Kernel 2: the columnwise copy of a tile of 128 tokens x %d features (the quant", COLS);
	lg_comment(b, "engine); x re-read from L2 (evict first), streaming stores.");
	lg_emit_signature(b, s, p->entry[1], "__launch_bounds__(%d, 2)", K2_THREADS);
	lg_open(b, "{");
	if (p->early[1])
		emit_launch_dependents(b);
	lg_comment(b, "Tiles in the reverse of kernel 1's order: the rows it read last are the likeliest");
	lg_comment(b, "to be still in L2.");
	const char *tile;
	if (p->v[P_STAGES] > 1) {
		emit_slice(b, (int)p->v[P_STAGES]);
		lg_line(b, "if (t0 + (i64)blockIdx.y >= t1) return; // an empty slice");
		tile = "t1 - 1 - (i64)blockIdx.y";
	} else {
		lg_line(b, "const i64 tiles = (M + %d) / %d;", ROWS - 1, ROWS);
		lg_line(b, "if (tiles == 0) return; // no tokens: the one CTA launched has nothing to do");
		tile = "tiles - 1 - (i64)blockIdx.y";
	}
	struct lg_qe e = {.n = p->v[P_HIDDEN], .threads = K2_THREADS, .cols = true, .pow2 = lg_quant_pow2(s),
			  .vals = LG_QE_F32, .layout = LG_QE_FLAT, .tile = tile, .group = "(int)blockIdx.x",
			  .qt_store = (enum lg_qt_store)p->v[P_QT_STORE]};
	struct lg_qe_hooks h = {.values = lg_norm_qe_values, .prologue = k2_prologue, .block = lg_norm_qe_block,
				.ctx = (void *)p};
	lg_qe_emit_body(b, &e, &h);
	lg_close(b);
}

/* `lg_copy_tile(dst, x, tile, M, k0)`: 128 rows x 128 columns of x into
 * shared memory by cp.async, 4 pieces of 16 bytes a thread; rows past M
 * zero-filled; nothing past the last tile. */
static void emit_copy_tile(lg_buf *b, int64_t n)
{
	lg_line(b, "static __device__ __forceinline__ void lg_copy_tile(u8 *dst, u64 x, i64 tile, i64 M, i64 k0)");
	lg_open(b, "{");
	lg_line(b, "if (tile * %d >= M) return;", ROWS);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < 4; i++) {");
	lg_line(b, "const int r = (threadIdx.x >> 4) + 32 * i, pc = threadIdx.x & 15;");
	lg_line(b, "const i64 m = tile * %d + r;", ROWS);
	lg_line(b, "const bool ok = m < M;");
	lg_line(b, "lg_cp16(dst + r * %d + pc * 16,", COLS * 2);
	lg_line(b, "\t(const u8 *)x + ((ok ? m : 0) * %lld + k0 + pc * 8) * 2, ok ? 16u : 0u);", (long long)n);
	lg_close(b);
	lg_close(b);
	lg_line(b, "%s", "");
}

/* The row sums ps[4] (this CTA's columns, reduced over the 16 column lanes)
 * into psum, exchanged over the cluster's `cl` CTAs in rank order: rs[] the
 * tile's reciprocal RMS, written to rms by rank 0. */
static void emit_row_rrms(lg_buf *b, int cl)
{
	lg_open(b, "if (lb == 0) {");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < 4; i++) psum[4 * rb + i] = ps[i];");
	lg_close(b);
	if (cl > 1) {
		lg_line(b, "lg_cluster_sync();");
		lg_open(b, "if (threadIdx.x < %d) {", ROWS);
		lg_line(b, "double sum = 0.0;");
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (u32 c = 0; c < %du; c++) // in rank order", cl);
		lg_line(b, "\tsum += lg_dsmem_ld_f64(&psum[threadIdx.x], c);");
		lg_line(b, "rs[threadIdx.x] = lg_rrms(sum);");
		lg_close(b);
	} else {
		lg_line(b, "__syncthreads();");
		lg_line(b, "if (threadIdx.x < %d) rs[threadIdx.x] = lg_rrms(psum[threadIdx.x]);", ROWS);
	}
	lg_line(b, "__syncthreads();");
	lg_line(b, "if (blockIdx.x == 0 && threadIdx.x < rows)");
	lg_line(b, "\t((float *)rms)[m0 + threadIdx.x] = rs[threadIdx.x];");
}

/* Fused mode (sm_90, hidden <= 2048): one kernel, a cluster of hidden/128
 * CTAs per 128-token tile; row sums exchanged through distributed shared
 * memory; x read once. Persistent: the clusters that fit walk the tiles,
 * the next tile's x in flight (cp.async) while the current one is worked. */
static void emit_fused_kernel(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	int cl = (int)(p->v[P_HIDDEN] / COLS), st = (int)p->v[P_STAGES];
	lg_section(b, p->entry[0], "RMSNorm and the copies, fused");
	lg_comment(b, "Fused: a cluster of %d CTAs (one per 128 features) per 128-token tile; each thread", cl);
	lg_comment(b, "holds 4 rows x 8 columns of y in registers; x is read once from HBM, %d tile(s) in", st);
	lg_comment(b, "flight per CTA (cp.async); the row sums of squares are exchanged through");
	lg_comment(b, "distributed shared memory (double-buffered by tile parity, one cluster barrier per");
	lg_comment(b, "tile); both copies follow.");
	emit_copy_tile(b, p->v[P_HIDDEN]);
	if (cl > 1)
		lg_emit_signature(b, s, p->entry[0], "__cluster_dims__(%d, 1, 1) __launch_bounds__(%d, %d)", cl,
				  K2_THREADS, st > 2 ? 1 : 2);
	else
		lg_emit_signature(b, s, p->entry[0], "__launch_bounds__(%d, 2)", K2_THREADS);
	lg_open(b, "{");
	emit_tile_prologue(b, NULL, true, true);
	lg_line(b, "double *const psum2 = (double *)(cinv + %d); // [2][128] partial sums of squares", COLS);
	lg_line(b, "float *const rs = (float *)(psum2 + %d); // [128] reciprocal RMS", 2 * ROWS);
	lg_line(b, "u8 *const xs = (u8 *)(rs + %d); // [%d stage%s][128][128] bf16 tiles of x", ROWS, st,
		st > 1 ? "s" : "");
	lg_line(b, "const i64 tiles = (M + %d) / %d;", ROWS - 1, ROWS);
	if (st > 2) {
		lg_line(b, "#pragma unroll");
		lg_open(b, "for (int ps = 0; ps < %d; ps++) {", st - 1);
		lg_line(b, "lg_copy_tile(xs + ps * %d, x, blockIdx.y + (i64)ps * gridDim.y, M, k0);", ROWS * COLS * 2);
		lg_line(b, "lg_cp_commit();");
		lg_close(b);
	} else if (st == 2) {
		lg_line(b, "lg_copy_tile(xs, x, blockIdx.y, M, k0);");
		lg_line(b, "lg_cp_commit();");
	}
	lg_line(b, "int it = 0;");
	lg_line(b, "#pragma unroll 1");
	lg_open(b, "for (i64 t = blockIdx.y; t < tiles; t += gridDim.y, it++) {");
	if (st > 2)
		lg_line(b, "lg_copy_tile(xs + ((it + %d) %% %d) * %d, x, t + (i64)%d * gridDim.y, M, k0);", st - 1, st,
			ROWS * COLS * 2, st - 1);
	else if (st == 2)
		lg_line(b, "lg_copy_tile(xs + ((it + 1) %% 2) * %d, x, t + gridDim.y, M, k0);", ROWS * COLS * 2);
	else
		lg_line(b, "lg_copy_tile(xs, x, t, M, k0);");
	lg_line(b, "lg_cp_commit();");
	lg_line(b, "lg_cp_wait(%d); // this thread's copies of tile t have landed", st - 1);
	lg_line(b, "__syncthreads();");
	emit_tile_rows(b, "t");
	lg_line(b, "double *const psum = psum2 + (it & 1) * %d;", ROWS);
	if (st > 1)
		lg_line(b, "const u8 *const xt = xs + (it %% %d) * %d;", st, ROWS * COLS * 2);
	else
		lg_line(b, "const u8 *const xt = xs;");
	lg_line(b, "lg_u32x4 xv[4];");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < 4; i++)");
	lg_line(b, "\txv[i] = *(const lg_u32x4 *)(xt + (4 * rb + i) * %d + lb * 16);", COLS * 2);
	lg_comment(b, "Partial sums of squares of the 4 rows over this CTA's 128 columns (fp64).");
	lg_line(b, "double ps[4];");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < 4; i++) {");
	lg_line(b, "ps[i] = lg_sumsq_bf16x8(0.0, xv[i]);");
	lg_line(b, "ps[i] = lg_dsum_xor(ps[i], 1, 8);");
	lg_close(b);
	emit_row_rrms(b, cl);
	lg_line(b, "float rr[4];");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < 4; i++) rr[i] = rs[4 * rb + i]; // absent rows: y = +0 (below)");
	emit_tile_y(b);
	if (lg_quant_rowwise(s))
		emit_tile_rowwise(b, s, p->v[P_HIDDEN], "blockIdx.x");
	if (lg_quant_colwise(s))
		emit_tile_colwise(b, s, p->v[P_HIDDEN], tile_qt_store(p));
	lg_line(b, "__syncthreads(); // staging, scales and the x stage are free");
	lg_close(b);
	if (cl > 1)
		lg_line(b, "lg_cluster_sync(); // keep psum alive until every CTA has read it");
	lg_close(b);
}

/* The one-pass TMA form's x loads: tile `tile` of this CTA's slab into
 * stage `sl`, completing on full[sl] (thread 0). */
static void emit_slab_load(lg_buf *b, int64_t slab, const char *sl, const char *tile)
{
	int box = SLAB_BOX((int)slab), nbox = (int)(slab / box);
	lg_line(b, "u8 *const d = xs + %s * %d;", sl, (int)SLAB_STAGE(slab));
	lg_line(b, "const int r = (int)%s * %d;", tile, ROWS);
	lg_line(b, "u64 *const fb = &full[%s];", sl);
	lg_line(b, "lg_mbar_expect(fb, %du);", (int)SLAB_STAGE(slab));
	if (nbox == 1) {
		lg_line(b, "lg_tma_load_2d(d, &tm_x, fb, kx, r);");
		return;
	}
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int bx = 0; bx < %d; bx++)", nbox);
	lg_line(b, "\tlg_tma_load_2d(d + bx * %d, &tm_x, fb, kx + bx * %d, r);", box * ROWS * 2, box);
}

/* xb: this thread's 16 bytes of its first row (4 rb) of block kb of the slab
 * (xt: of block 0): box kb / (box/128), columns (kb % (box/128)) * 128 of it. */
static void emit_slab_block(lg_buf *b, int box)
{
	if (box == COLS)
		lg_line(b, "const u8 *const xb = xt + kb * %d;", box * ROWS * 2);
	else
		lg_line(b, "const u8 *const xb = xt + (kb / %d) * %d + (kb %% %d) * 256;", box / COLS, box * ROWS * 2,
			box / COLS);
}

/* `lg_slab_block(xb, ...)`: one 128 x 128 block of the one-pass form (first
 * column k0), its x in shared memory at xb (this thread's first row, rows
 * `rowb` bytes apart): y, then the rowwise and the columnwise copies. */
static void emit_slab_block_fn(lg_buf *b, const struct lg_spec *s, int64_t n, int rowb, enum lg_qt_store store)
{
	lg_line(b, "static __device__ __forceinline__ void lg_slab_block(const u8 *xb, u64 w, u64 q, u64 s, u64 qt,");
	lg_line(b, "\tu64 st, i64 M, i64 tr, int rows, i64 k0, const float *rr, u8 *smem)");
	lg_open(b, "{");
	emit_tile_prologue(b, NULL, false, false);
	lg_line(b, "const i64 m0 = tr * %d, col0 = k0 + lb * 8; // this thread's first column", ROWS);
	lg_line(b, "lg_u32x4 xv[4];");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < 4; i++) xv[i] = *(const lg_u32x4 *)(xb + i * %d);", rowb);
	emit_tile_y(b);
	if (lg_quant_rowwise(s))
		emit_tile_rowwise(b, s, n, "(k0 >> 7)");
	if (lg_quant_colwise(s))
		emit_tile_colwise(b, s, n, store);
	lg_close(b);
	lg_line(b, "%s", "");
}

/* One-pass TMA form (sm_90): a cluster of hidden/slab CTAs per 128-token
 * tile, each CTA a slab of 128 tokens x slab features loaded by TMA into a
 * ring of shared-memory stages; row sums exchanged through distributed
 * shared memory; then, per 128 x 128 block of the slab, y, the rowwise and
 * the columnwise copies (the tile's 128 tokens are all in the CTA).
 * Persistent: the next tiles' x are in flight while this one is worked. */
static void emit_slab_kernel(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	int64_t slab = p->v[P_SLAB], n = p->v[P_HIDDEN];
	int cl = (int)(n / slab), st = (int)p->v[P_STAGES], nb = (int)(slab / COLS), box = SLAB_BOX((int)slab);
	lg_section(b, p->entry[0], "RMSNorm and the copies, one pass (TMA slabs)");
	lg_comment(b, "One pass: a cluster of %d CTA(s) per 128-token tile, each CTA 128 tokens x %lld features", cl,
		   (long long)slab);
	lg_comment(b, "of x, loaded once by TMA into a ring of %d shared-memory stage(s) (box %d x %d, rows past", st,
		   box, ROWS);
	lg_comment(b, "M zero-filled); fp64 row partial sums exchanged through distributed shared memory");
	lg_comment(b, "(double-buffered by tile parity, one cluster barrier per tile); then per 128 x 128");
	lg_comment(b, "block: y = (x r) w, the rowwise and the columnwise copies.");
	emit_slab_block_fn(b, s, n, box * 2, tile_qt_store(p));
	if (cl > 1)
		lg_emit_signature_tmaps(b, s, p, p->entry[0], "__cluster_dims__(%d, 1, 1) __launch_bounds__(%d, 1)", cl,
					K2_THREADS);
	else
		lg_emit_signature_tmaps(b, s, p, p->entry[0], "__launch_bounds__(%d, 1)", K2_THREADS);
	lg_open(b, "{");
	emit_tile_prologue(b, NULL, false, true);
	lg_line(b, "double *const psum2 = (double *)(cinv + %d); // [2][128] partial sums of squares", COLS);
	lg_line(b, "float *const rs = (float *)(psum2 + %d); // [128] reciprocal RMS", 2 * ROWS);
	lg_line(b, "u64 *const full = (u64 *)(rs + %d); // [%d] stage mbarriers", ROWS, st);
	lg_line(b, "u8 *const xs = smem + %d; // [%d][%d][128][%d] bf16: stage, box, token, feature", SLAB_HEAD, st,
		(int)(slab / box), box);
	lg_line(b, "const int kx = (int)blockIdx.x * %d; // this CTA's first feature", (int)slab);
	lg_line(b, "const i64 tiles = (M + %d) / %d;", ROWS - 1, ROWS);
	lg_open(b, "if (threadIdx.x == 0) {");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < %d; i++) lg_mbar_init(&full[i], 1);", st);
	lg_line(b, "lg_mbar_fence_init();");
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_open(b, "if (threadIdx.x == 0) {");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int ps = 0; ps < %d; ps++) {", st);
	lg_line(b, "const i64 tp = blockIdx.y + (i64)ps * gridDim.y;");
	lg_line(b, "if (tp >= tiles) break;");
	emit_slab_load(b, slab, "ps", "tp");
	lg_close(b);
	lg_close(b);
	lg_line(b, "int it = 0;");
	lg_line(b, "#pragma unroll 1");
	lg_open(b, "for (i64 t = blockIdx.y; t < tiles; t += gridDim.y, it++) {");
	lg_line(b, "const int sl = %s;", st > 1 ? "it % 2" : "0");
	lg_line(b, "lg_mbar_wait(&full[sl], (u32)(it / %d) & 1u); // tile t's x has landed", st);
	emit_tile_rows(b, "t");
	lg_line(b, "double *const psum = psum2 + (it & 1) * %d;", ROWS);
	lg_line(b, "const u8 *const xt = xs + sl * %d + rb * %d + lb * 16; // block 0, mine",
		(int)SLAB_STAGE(slab), 4 * box * 2);
	lg_comment(b, "Partial sums of squares of the 4 rows over this CTA's %lld features (fp64).", (long long)slab);
	lg_line(b, "double ps[4] = {0.0, 0.0, 0.0, 0.0};");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int kb = 0; kb < %d; kb++) {", nb);
	emit_slab_block(b, box);
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < 4; i++)");
	lg_line(b, "\tps[i] = lg_sumsq_bf16x8(ps[i], *(const lg_u32x4 *)(xb + i * %d));", box * 2);
	lg_close(b);
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < 4; i++) ps[i] = lg_dsum_xor(ps[i], 1, 8);");
	emit_row_rrms(b, cl);
	lg_line(b, "float rr[4];");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < 4; i++) rr[i] = rs[4 * rb + i]; // absent rows: y = +0 (below)");
	lg_line(b, "#pragma unroll 1");
	lg_open(b, "for (int kb = 0; kb < %d; kb++) {", nb);
	emit_slab_block(b, box);
	lg_line(b, "lg_slab_block(xb, w, q, s, qt, st, M, tr, rows, kx + kb * %d, rr, smem);", COLS);
	lg_close(b);
	lg_line(b, "__syncthreads(); // stage sl, the staging tile and the scales are free");
	lg_open(b, "if (threadIdx.x == 0) {");
	lg_line(b, "const i64 tn = t + (i64)%d * gridDim.y;", st);
	lg_open(b, "if (tn < tiles) {");
	emit_slab_load(b, slab, "sl", "tn");
	lg_close(b);
	lg_close(b);
	lg_close(b);
	if (cl > 1)
		lg_line(b, "lg_cluster_sync(); // keep psum alive until every CTA has read it");
	lg_close(b);
}

static void emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	(void)t;
	lg_section(b, "helpers for this spec", NULL);
	lg_emit_rrms(b, s);
	lg_line(b, "%s", "");
	lg_emit_quant_q(b, lg_quant_pow2(s));
	if (p->v[P_SLAB]) {
		emit_slab_kernel(b, s, p);
		return;
	}
	if (p->v[P_FUSED]) {
		emit_fused_kernel(b, s, p);
		return;
	}
	emit_rows_kernel(b, s, p);
	if (lg_quant_colwise(s))
		emit_cols_kernel(b, s, p);
}

/* Tile variants for `lingen tune`: the two-kernel form at 128, 256 and 512
 * threads (rows per CTA from the heuristic) and at 256 threads x 8 rows;
 * the fused cluster form with 1 and 2 x tiles in flight where it runs
 * (sm_90+, hidden <= 2048); the one-pass TMA form at every slab that gives
 * a portable cluster (sm_90+). */
static int candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out,
		      int max)
{
	static const int64_t threads[] = {128, 256, 512, 0};
	int n = lg_candidate_values(s, t, out, 0, max, K_THREADS, threads);
	struct lg_tile_choice c = lg_tile1(K_THREADS, 256);
	c.v[K_ROWS] = 8;
	c.set |= (uint64_t)1 << K_ROWS;
	n = lg_candidate_add(s, t, out, n, max, c);
	int64_t cluster = lg_spec_int(s, K_HIDDEN) / COLS;
	if (t->sm >= 90 && cluster <= FUSED_MAX_CLUSTER)
		for (int stages = 1; stages <= 2; stages++) {
			c = lg_tile1(K_CLUSTER, cluster);
			c.v[K_STAGES] = stages;
			c.set |= (uint64_t)1 << K_STAGES;
			n = lg_candidate_add(s, t, out, n, max, c);
		}
	if (t->sm >= 90)
		for (const int64_t *sl = slab_ok; *sl; sl++)
			if (lg_spec_int(s, K_HIDDEN) % *sl == 0 && lg_spec_int(s, K_HIDDEN) / *sl <= SLAB_MAX_CLUSTER)
				n = lg_candidate_add(s, t, out, n, max, lg_tile1(K_SLAB, *sl));
	return n;
}

static void uses(const struct lg_spec *s, unsigned char *used)
{
	lg_quant_uses(s, used, ARG_Q, ARG_S, ARG_QT, ARG_ST);
}

/* What a launch computes: the comment of its typed launcher (lingen_ops.h). */
static const char doc_forward[] =
	"K1: RMSNorm + blockwise FP8 quantisation, forward (op \"rmsnorm_quant\").\n"
	"  x [tokens, hidden] bf16, w [hidden] bf16;\n"
	"  q  [tokens, hidden] e4m3, s  [hidden/128, tokens] fp32   (rowwise)\n"
	"  qt [hidden, round_up(tokens, 128)] e4m3 (zeros past tokens),\n"
	"  st [ceil(tokens/128), hidden] fp32 (columnwise)\n"
	"  rms [tokens] fp32 (reciprocal RMS): required, also the hand-over between\n"
	"  the kernel's two passes.\n"
	"Copies the spec's quant.output did not ask for take 0.";

const struct lg_family lg_family_rmsnorm_quant = {
	.op = "rmsnorm_quant",
	.summary = "RMSNorm + 1x128 / 128x1 blockwise FP8 quantisation (K1)",
	.passes = 1u << LG_PASS_FORWARD,
	.dtypes = 1u << LG_DTYPE_BF16,
	.nkeys = NKEYS,
	.keys = keys,
	.sig = {[LG_PASS_FORWARD] = {1, sizes, NARGS, fwd_args, doc_forward}},
	.validate = validate,
	.uses = uses,
	.plan = plan,
	.emit = emit,
	.geometry = geometry,
	.candidates = candidates,
};
