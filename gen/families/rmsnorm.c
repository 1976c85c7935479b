/*
 * rmsnorm.c - family "rmsnorm" (docs/kernels.md K1, plain): RMSNorm forward
 * (y bf16 + reciprocal RMS) and backward (dx bf16, dw fp32).
 *
 * Strategy: `lpr` lanes share one row, each holding up to 8 (forward) or 4
 * (backward) 16-byte pieces of it in registers, so x is read once; the row
 * reductions are warp butterflies, plus a fixed-order pass through shared
 * memory when a row spans several warps. Outputs are stored evict-first.
 *
 * Forward: bound by HBM (x read, y written once: 64 MB at 8192 x 2048),
 * so what counts is the bytes in flight on every SM (Little's law: ~4.5
 * TB/s x ~0.7 us is ~24 KB an SM). By default (tile.stages 3) the grid is
 * persistent, one wave of tile.per_sm CTAs an SM (128 threads, one row a
 * warp: 3 at hidden 2048, 4 at 4096, 2 at other widths up to 2048; 1 of
 * 256 above) on the device it runs on
 * (the context's occupancy query, capped at per_sm), and the rows come
 * through a ring of `stages` rows a row slot in shared memory: each lane
 * copies its pieces of the row stages - 1 ahead with cp.async, which holds
 * no registers while in flight, then waits for this row's group and reads
 * back only the pieces it copied (no barrier). At hidden 2048 that is 8
 * warps x 2 rows x 4 KB = 64 KB an SM in flight with w and one row in
 * registers (167 a thread), where tile.prefetch 1 (the register prefetch:
 * each lane loads its next row into registers before this row's math)
 * has 32 KB at 254 registers. H200, 8192 x 2048: 20.5 us with 3 CTAs an
 * SM (21.6 with 2, 23.9 register-prefetched); 8192 x 4096: 38.5 us with 4
 * of 128 threads, 2 stages (41.6 with 1 of 256): not yet the goals (17.5,
 * 35), git history, commit 8b8e268: bench/h200-2026-12-01d. Under 255
 * registers a thread (a register-prefetch grid of more than 256 threads
 * an SM, a staged one of more than 512) w is prefetched into L1 and read
 * from there a piece at a time instead of being kept in registers (per_sm
 * 4 with prefetch: 26.6 us against 22.5 at 8192 x 2048).
 *
 * Backward: a persistent grid (tile.per_sm CTAs an SM, 2 of 128 threads
 * by default, two rows of 64 lanes a CTA at hidden 2048) whose rows of x
 * and dy (and their rms) are loaded into registers a row ahead (the
 * default, tile.prefetch 1: 32 KB an SM in flight, 240 registers; 34.7 us
 * on the H200 at 8192 x 2048; 3 or 4 CTAs an SM spill) or come through the
 * forward's cp.async ring (tile.stages N: 4 row slots an SM x 2 rows x
 * 8 KB = 64 KB in flight at hidden 2048, 197 registers, but 39.2 us at 3
 * stages: the ring's extra shared-memory round trip costs more than the
 * bytes in flight gain here). Its CTAs keep their dw
 * partial sums in registers, reduce them across row slots in shared
 * memory, and write one row of a workspace (one per CTA); a second entry
 * point adds the workspace rows in a fixed order, so dw is deterministic.
 * Its grid stays SMS x per_sm (a compile-time 132, the H200's SMs): the
 * workspace is sized and the dw kernel's row count emitted before the
 * device is known. On another device the result is the same; only a
 * partial second wave (fewer SMs) or idle SMs (more) cost time.
 */
#include <stdio.h>

#include "family.h"

#include "error.h"
#include "norm_common.h"
#include "templates.h"

/* SMs of an H200: the backward's grid (one wave of tile.per_sm CTAs each,
 * one workspace row a CTA) and the forward's before the context has
 * counted the device's (struct lg_plan.resident). */
#define SMS 132

enum { K_HIDDEN, K_EPS, K_TILE, K_ROWS, K_THREADS, K_PREFETCH, K_PER_SM, K_STAGES, NKEYS };
static const int64_t rows_ok[] = {1, 2, 4, 8, 16, 0}, threads_ok[] = {128, 256, 512, 1024, 0},
		     per_sm_ok[] = {1, 2, 3, 4, 0};
static const struct lg_key keys[NKEYS] = {
	/* rows are read in 16-byte pieces: any multiple of 8 features */
	[K_HIDDEN] = LG_KEY_DIM("hidden", "h", 8, 16384, 8, "features per row"),
	[K_EPS] = LG_KEY_EPS,
	[K_TILE] = LG_KEY_TILE_OBJ,
	[K_ROWS] = LG_KEY_TILE("rows", "r", 1, 16, rows_ok, "rows per CTA (threads follow)"),
	[K_THREADS] = LG_KEY_TILE("threads", "t", 128, 1024, threads_ok, "threads per CTA"),
	[K_PREFETCH] = LG_KEY_TILE("prefetch", "p", 0, 1, NULL,
				   "1: a persistent grid whose lanes load their next row before this row's math"),
	[K_PER_SM] = LG_KEY_TILE("per_sm", "s", 1, 4, per_sm_ok,
				 "persistent grid: CTAs an SM (the grid is one wave of them; registers are capped to fit)"),
	[K_STAGES] = LG_KEY_TILE("stages", "st", 0, 4, NULL,
				 "a persistent grid whose rows come through a cp.async ring of this many "
				 "rows a row slot in shared memory (0: the register prefetch)"),
};

static const struct lg_size sizes[] = {
	{"tokens", "M", 0, INT32_MAX, "rows of x", 0, 0},
};

enum { F_X, F_W, F_Y, F_RMS, F_NARGS };
enum { B_DY, B_X, B_W, B_RMS, B_DX, B_DW, B_WS, B_NARGS };

static const struct lg_arg fwd_args[F_NARGS] = {
	[F_X] = {"x", LG_ARG_IN, LG_ELEM_BF16, "tokens, hidden", 16, NULL},
	[F_W] = {"w", LG_ARG_IN, LG_ELEM_BF16, "hidden", 16, NULL},
	[F_Y] = {"y", LG_ARG_OUT, LG_ELEM_BF16, "tokens, hidden", 16, "x * r * w"},
	[F_RMS] = {"rms", LG_ARG_OPT_OUT, LG_ELEM_FP32, "tokens", 16, "reciprocal RMS r"},
};

static const struct lg_arg bwd_args[B_NARGS] = {
	[B_DY] = {"dy", LG_ARG_IN, LG_ELEM_BF16, "tokens, hidden", 16, NULL},
	[B_X] = {"x", LG_ARG_IN, LG_ELEM_BF16, "tokens, hidden", 16, NULL},
	[B_W] = {"w", LG_ARG_IN, LG_ELEM_BF16, "hidden", 16, NULL},
	[B_RMS] = {"rms", LG_ARG_OPT_IN, LG_ELEM_FP32, "tokens", 16, "reciprocal RMS (0: recomputed)"},
	[B_DX] = {"dx", LG_ARG_OUT, LG_ELEM_BF16, "tokens, hidden", 16, NULL},
	[B_DW] = {"dw", LG_ARG_OUT, LG_ELEM_FP32, "hidden", 16, "overwritten, deterministic"},
	[B_WS] = {"workspace", LG_ARG_WORKSPACE, LG_ELEM_U8, NULL, 16, NULL},
};

/* Plan values: the row layout, then ours. */
enum {
	P_HIDDEN = LG_ROW_HIDDEN,
	P_LPR = LG_ROW_LPR,
	P_K = LG_ROW_K,
	P_ROWS = LG_ROW_ROWS,
	P_THREADS = LG_ROW_THREADS,
	P_SMEM = LG_ROW_VALUES, /* dynamic shared memory (backward) */
	P_BWD,                  /* 1 for the backward */
	P_PREFETCH,             /* the next row loaded ahead (a persistent grid) */
	P_PER_SM,               /* persistent grid: CTAs an SM */
	P_W_L1,                 /* w read from L1 per piece, not kept in registers */
	P_STAGES,               /* forward: rows a row slot has in the cp.async ring (0: none) */
};

/* tile.per_sm by default: 2 CTAs of 128 threads an SM (w kept in
 * registers). H200, 8192 x 2048 forward: 2 a SM 22.50 us, 3 25.57, 4 (w
 * from L1) 26.59 (git history, commit 8b8e268: bench/h200-2026-12-01c/bench-run4.txt): the L1 reads of
 * w cost more than the rows in flight gain. */
static int64_t per_sm_of(const struct lg_spec *s, const struct lg_rowlayout *l)
{
	if (lg_spec_has(s, K_PER_SM))
		return lg_spec_int(s, K_PER_SM);
	/* the forward's ring at 128 threads, H200 8192 tokens: per_sm 3 at hidden
	 * 2048 (20.5 us against 21.6 with 2), 4 at 4096 (38.5 against 41.6 with
	 * 256 threads, 1 an SM); git history, commit 8b8e268: bench/h200-2026-12-01d */
	if (s->pass == LG_PASS_FORWARD && l->threads == 128 && (l->hidden == 2048 || l->hidden == 4096))
		return l->hidden == 2048 ? 3 : 4;
	return l->threads <= 128 ? 2 : 1;
}

/* The row layout of a spec: `threads` (else the default), or `rows` rows
 * of as many lanes as the row needs. */
static struct lg_rowlayout layout(const struct lg_spec *s)
{
	bool bwd = s->pass == LG_PASS_BACKWARD;
	int64_t h = lg_spec_int(s, K_HIDDEN);
	/* measured on H200 at 8192 x 2048: the backward is fastest with 128; so is
	 * the forward up to hidden 2048 (with prefetch: 22.4 us against 23.3) */
	int threads = lg_spec_has(s, K_THREADS) ? (int)lg_spec_int(s, K_THREADS)
			: bwd || h <= 2048 || h == 4096 ? 128 : 256;
	struct lg_rowlayout l = lg_rowlayout_make(h, bwd ? 4 : 8, threads);
	if (lg_spec_has(s, K_ROWS))
		l = lg_rowlayout_make(h, bwd ? 4 : 8, (int)lg_spec_int(s, K_ROWS) * l.lpr);
	return l;
}

/* Shared memory an SM gives its CTAs (sm_90: 228 KB, less 1 KB a CTA;
 * sm_80: 164 KB; sm_86, sm_89: 100 KB), the cp.async ring's budget. */
#define SMEM_SM90 (227 * 1024)
static int64_t smem_sm(const struct lg_target *t)
{
	return t->sm >= 90 ? SMEM_SM90 : t->sm == 80 || t->sm == 87 ? 163 * 1024 : 99 * 1024;
}

/* Bytes of a ring stage: a row of every row slot of x (and the
 * backward's dy), then the backward's rms, a float a thread. */
static int64_t stage_bytes(bool bwd, const struct lg_rowlayout *l)
{
	return bwd ? 2 * l->rows * l->hidden * 2 + l->threads * 4 : l->rows * l->hidden * 2;
}

/* Dynamic shared memory of a CTA: the backward's dw partials, then the ring. */
static int64_t cta_smem(bool bwd, int64_t stages, const struct lg_rowlayout *l)
{
	return (bwd ? l->rows * l->hidden * 4 : 0) + stages * stage_bytes(bwd, l);
}

/* tile.stages: given, or without tile.prefetch, 3 (two rows a slot in
 * flight while the third is worked on) or, where the ring would not fit
 * per_sm CTAs an SM, 2, else 0. */
static int64_t stages_of(const struct lg_spec *s, const struct lg_rowlayout *l, int64_t per_sm, int64_t smem)
{
	bool bwd = s->pass == LG_PASS_BACKWARD;
	if (lg_spec_has(s, K_STAGES))
		return lg_spec_int(s, K_STAGES);
	if (lg_spec_has(s, K_PREFETCH) || bwd) /* the backward's ring measured slower on the H200:
						  39.2 us against 34.7 prefetched at 8192 x 2048 */
		return 0;
	for (int64_t n = 3; n >= 2; n--)
		if (cta_smem(bwd, n, l) * per_sm <= smem)
			return n;
	return 0;
}

static lg_status validate(const struct lg_spec *s, const char *where)
{
	struct lg_rowlayout l = layout(s);
	if (l.threads > 1024)
		return lg_spec_error(where, "tile.rows: found %lld, allowed: 1 to %d (rows x %d lanes per row <= 1024 threads)",
				     (long long)lg_spec_int(s, K_ROWS), 1024 / l.lpr, l.lpr);
	if (l.threads * per_sm_of(s, &l) > 2048)
		return lg_spec_error(where, "tile.per_sm: found %lld with %d threads a CTA, allowed: at most %d (2048 threads an SM)",
				     (long long)per_sm_of(s, &l), l.threads, 2048 / l.threads);
	if (lg_spec_has(s, K_STAGES) && lg_spec_int(s, K_STAGES) && lg_spec_has(s, K_PREFETCH) &&
	    lg_spec_int(s, K_PREFETCH))
		return lg_spec_error(where, "tile.stages: found %lld with tile.prefetch 1, allowed: one of the two",
				     (long long)lg_spec_int(s, K_STAGES));
	bool bwd = s->pass == LG_PASS_BACKWARD;
	int64_t ring = cta_smem(bwd, stages_of(s, &l, per_sm_of(s, &l), SMEM_SM90), &l) * per_sm_of(s, &l);
	if (ring > SMEM_SM90)
		return lg_spec_error(where, "tile.stages: %lld rows of %lld slots of %lld bytes for %lld CTAs an SM "
				     "need %lld bytes of shared memory, allowed: at most %d",
				     (long long)lg_spec_int(s, K_STAGES), (long long)l.rows, (long long)l.hidden * 2,
				     (long long)per_sm_of(s, &l), (long long)ring, SMEM_SM90);
	return LG_OK;
}

static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	bool bwd = s->pass == LG_PASS_BACKWARD;
	int64_t h = lg_spec_int(s, K_HIDDEN);
	struct lg_rowlayout l = layout(s);
	if (l.threads > 1024)
		return lg_fail(LG_ERR_SPEC, "%s: %d threads per CTA (rows x %d lanes) exceed 1024",
			       s->entry, l.threads, l.lpr);
	lg_rowlayout_save(&l, p);
	p->tile[K_THREADS] = l.threads;
	p->tile[K_ROWS] = l.rows;
	p->v[P_BWD] = bwd;
	/* prefetch by default where it measured faster on the H200: the backward,
	 * and the forward up to hidden 2048 (at 128, 1024 and 8192 tokens) and
	 * 256 threads (two CTAs an SM: 512 threads would spill) */
	p->v[P_PER_SM] = per_sm_of(s, &l);
	int64_t smem = smem_sm(t);
	p->v[P_STAGES] = stages_of(s, &l, p->v[P_PER_SM], smem);
	if (cta_smem(bwd, p->v[P_STAGES], &l) * p->v[P_PER_SM] > smem)
		return lg_fail(LG_ERR_SPEC, "%s: tile.stages %lld: %lld bytes of shared memory an SM, sm_%d has %lld",
			       s->entry, (long long)p->v[P_STAGES],
			       (long long)(cta_smem(bwd, p->v[P_STAGES], &l) * p->v[P_PER_SM]), t->sm, (long long)smem);
	p->tile[K_STAGES] = p->v[P_STAGES];
	p->v[P_PREFETCH] = lg_spec_has(s, K_PREFETCH) ? lg_spec_int(s, K_PREFETCH) != 0
						      : !p->v[P_STAGES] && (bwd || (h <= 2048 && l.threads <= 256));
	p->tile[K_PREFETCH] = p->v[P_PREFETCH];
	if (p->v[P_PREFETCH] || p->v[P_STAGES] || bwd)
		p->tile[K_PER_SM] = p->v[P_PER_SM];
	/* the forward's persistent grid is one wave on the device it runs on */
	p->persistent[0] = !bwd && (p->v[P_PREFETCH] || p->v[P_STAGES]);
	p->per_sm[0] = p->persistent[0] ? (unsigned)p->v[P_PER_SM] : 0;
	/* below 255 registers a thread, a persistent grid's two rows (this one
	 * and the next) and w do not fit without spills: w then comes from L1,
	 * one piece at a time as it is used; the staged form holds one row, so
	 * w stays in registers down to 128 a thread */
	p->v[P_W_L1] = p->v[P_STAGES] ? l.threads * p->v[P_PER_SM] > 512
				      : p->v[P_PREFETCH] && l.threads * p->v[P_PER_SM] > 256;
	p->v[P_SMEM] = cta_smem(bwd, p->v[P_STAGES], &l);
	p->nentries = bwd ? 2 : 1;
	snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
	if (bwd)
		snprintf(p->entry[1], sizeof p->entry[1], "%s_dw", s->entry);
	p->early[1] = bwd && t->sm >= 90; /* the dw reduction may start while the rows drain */
	return LG_OK;
}

/* CTAs of the rows kernel: a CTA a `rows` rows, at most one wave of a
 * persistent grid: the CTAs the device holds (the forward), or SMS x
 * per_sm (the backward, whose dw kernel sums that many workspace rows). */
static int64_t ctas(const struct lg_plan *p, int64_t tokens)
{
	int64_t rows = p->v[P_ROWS], n = (tokens + rows - 1) / rows;
	int64_t pmax = p->persistent[0] && p->resident[0] ? p->resident[0] : SMS * p->v[P_PER_SM];
	return (p->v[P_BWD] || p->persistent[0]) && n > pmax ? pmax : n;
}

static void geometry(const struct lg_plan *p, int e, const int64_t *sz, struct lg_launch_dim *d)
{
	d->grid[1] = d->grid[2] = d->block[1] = d->block[2] = 1;
	if (e == 1) {
		lg_dw_reduce_geometry(p->v[P_HIDDEN], true, d);
		return;
	}
	d->grid[0] = (unsigned)ctas(p, sz[0]);
	d->block[0] = (unsigned)p->v[P_THREADS];
	d->smem = (unsigned)p->v[P_SMEM];
}

static size_t workspace(const struct lg_plan *p)
{
	return p->v[P_BWD] ? (size_t)(SMS * p->v[P_PER_SM]) * (size_t)p->v[P_HIDDEN] * 4 : 0;
}

/* ------------------------------------------------------------ emission */


/* `lg_ctas(M)`: the CTAs of a persistent grid, min(ceil(M / rows), SMS x per_sm). */
static void emit_ctas(lg_buf *b, const struct lg_plan *p)
{
	int rows = (int)p->v[P_ROWS], pmax = (int)(SMS * p->v[P_PER_SM]);
	lg_comment(b, "Persistent grid of min(ceil(M / %d), %d) CTAs (%lld an SM); %lld lanes per row, %lld pieces each.",
		   rows, pmax, (long long)p->v[P_PER_SM], (long long)p->v[P_LPR], (long long)p->v[P_K]);
	if (rows > 1) {
		lg_line(b, "static __device__ __forceinline__ i64 lg_ctas(i64 M)");
		lg_open(b, "{");
		lg_line(b, "i64 n = (M + %d) / %d;", rows - 1, rows);
		lg_line(b, "return n < %d ? n : %d;", pmax, pmax);
		lg_close(b);
	} else {
		lg_line(b, "static __device__ __forceinline__ i64 lg_ctas(i64 M) { return M < %d ? M : %d; }", pmax,
			pmax);
	}
	lg_line(b, "%s", "");
}

/* The loads of row mp (when livep) into <dst[i]>n; with rn (the start of
 * a statement: "float rn = "), its rms too. */
static void emit_next_loads(lg_buf *b, const struct lg_rowlayout *l, int n, const char *const *dst,
			    const char *const *src, const char *rn)
{
	for (int i = 0; i < n; i++) {
		char nm[16];
		snprintf(nm, sizeof nm, "%sn", dst[i]);
		lg_emit_row_load_at(b, l, nm, src[i], "lg_ld16", NULL, "mp", "livep");
	}
	if (rn)
		lg_line(b, "%srms && livep ? ((const float *)rms)[mp] : 0.0f;", rn);
}

/* `stride` (rows of the whole grid) and `first` (the CTA's first row). */
static void emit_stride(lg_buf *b, int rows)
{
	if (rows > 1)
		lg_line(b, "const i64 stride = (i64)gridDim.x * %d, first = (i64)blockIdx.x * %d;", rows, rows);
	else
		lg_line(b, "const i64 stride = gridDim.x, first = blockIdx.x;");
}

/* The cp.async copies of this lane's pieces of row mq (if mq < M) of
 * each of the n tensors src[i] into ring stage `st` (and, with rms, its
 * rms into the lane's cell), closed as one group (empty past the rows). */
static void emit_ring_copy(lg_buf *b, const struct lg_plan *p, const struct lg_rowlayout *l, int n,
			   const char *const *src, bool rms)
{
	int64_t tb = (int64_t)l->rows * l->hidden * 2; /* a tensor's rows in a stage */
	lg_line(b, "u8 *const sq = rs + st * %lld; // its stage", (long long)stage_bytes(p->v[P_BWD], l));
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int k = 0; k < %d; k++) {", l->k);
	lg_line(b, "const int c = t + k * %d;", l->lpr);
	lg_line(b, "if (mq >= M || c >= %lld) continue;", (long long)(l->hidden / 8));
	for (int i = 0; i < n; i++)
		lg_line(b, "lg_cp16(sq + %.0lld%sc * 16, %s + (mq * %lld + c * 8) * 2, 16);", (long long)(i * tb),
			i ? " + " : "", src[i], (long long)l->hidden);
	lg_close(b);
	if (rms)
		lg_line(b, "if (rms && mq < M) lg_cp4(rcell + st * %lld, (const float *)rms + mq, 4);",
			(long long)stage_bytes(p->v[P_BWD], l));
	lg_line(b, "lg_cp_commit();");
}

/* The staged form: open the persistent loop over rows m (each with
 * `live`) whose pieces of the n tensors src[i] reach `lg_u32x4 dst[i][k]`
 * (with rms, its rms `float rc`) through a ring of P_STAGES stages in
 * shared memory at `ring` (an expression; NULL: dynamic shared memory): a
 * lane copies the row stages - 1 ahead (cp.async: no registers held while
 * in flight), waits for row m's group and reads back only what it copied,
 * so no barrier. */
static void emit_ring_loop(lg_buf *b, const struct lg_plan *p, const struct lg_rowlayout *l, int n,
			   const char *const *dst, const char *const *src, bool rms, const char *ring)
{
	int rows = l->rows, st = (int)p->v[P_STAGES];
	int64_t sb = stage_bytes(p->v[P_BWD], l), tb = (int64_t)rows * l->hidden * 2;
	lg_comment(b, "Rows through a ring of %d stages a row slot in shared memory, %d ahead.", st, st - 1);
	if (ring)
		lg_line(b, "u8 *const ring = %s; // [stage][tensor][row slot][hidden] bf16 (+ rms)", ring);
	else
		lg_line(b, "extern __shared__ __align__(16) u8 ring[]; // [stage][row slot][hidden] bf16");
	if (rows > 1)
		lg_line(b, "u8 *const rs = ring + slot * %lld; // this row slot's stage 0", (long long)l->hidden * 2);
	else
		lg_line(b, "u8 *const rs = ring;");
	if (rms)
		lg_line(b, "u8 *const rcell = ring + %lld + threadIdx.x * 4; // the lane's rms", (long long)(n * tb));
	emit_stride(b, rows);
	if (st > 1) {
		lg_line(b, "#pragma unroll");
		lg_open(b, "for (int st = 0; st < %d; st++) {", st - 1);
		lg_line(b, "const i64 mq = first%s + st * stride;", rows > 1 ? " + slot" : "");
		emit_ring_copy(b, p, l, n, src, rms);
		lg_close(b);
	}
	lg_line(b, "int sr = 0; // the stage of row m");
	lg_open(b, "for (i64 base = first; base < M; base += stride) {");
	lg_line(b, "const i64 m = base%s;", rows > 1 ? " + slot" : "");
	lg_line(b, "const bool live = m < M;");
	lg_open(b, "{");
	lg_line(b, "const i64 mq = m + %d * stride;", st - 1);
	lg_line(b, "const int st = sr + %d < %d ? sr + %d : sr - 1; // (sr + %d) %% %d", st - 1, st, st - 1,
		st - 1, st);
	emit_ring_copy(b, p, l, n, src, rms);
	lg_close(b);
	lg_line(b, "lg_cp_wait(%d); // row m's group is in", st - 1);
	for (int i = 0; i < n; i++)
		lg_line(b, "lg_u32x4 %s[%d];", dst[i], l->k);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int k = 0; k < %d; k++) {", l->k);
	lg_line(b, "const int c = t + k * %d;", l->lpr);
	lg_line(b, "const bool in = live && c < %lld;", (long long)(l->hidden / 8));
	lg_line(b, "const u8 *const sp = rs + sr * %lld + c * 16; // piece c of row m", (long long)sb);
	for (int i = 0; i < n; i++)
		lg_line(b, "%s[k] = in ? *(const lg_u32x4 *)(sp%s%.0lld) : lg_u32x4{0u, 0u, 0u, 0u};", dst[i],
			i ? " + " : "", (long long)(i * tb));
	lg_close(b);
	if (rms)
		lg_line(b, "const float rc = rms && live ? *(const float *)(rcell + sr * %lld) : 0.0f;", (long long)sb);
	lg_line(b, "sr = sr + 1 < %d ? sr + 1 : 0;", st);
}

/* Open the persistent loop over rows m (each with `live`) and load row m's
 * pieces of each of the n tensors src[i] into lg_u32x4 dst[i][k]; with
 * prefetch, from registers the previous iteration filled, loading the next
 * row (and its rms, if `rms`) meanwhile; `float rc` is then row m's rms. */
static void emit_row_loop(lg_buf *b, const struct lg_plan *p, const struct lg_rowlayout *l, int n,
			  const char *const *dst, const char *const *src, bool rms)
{
	int rows = (int)p->v[P_ROWS], k = (int)p->v[P_K];
	bool pre = p->v[P_PREFETCH];
	emit_stride(b, rows);
	if (pre) {
		lg_comment(b, "Each lane loads its next row before this row's math.");
		for (int i = 0; i < n; i++)
			lg_line(b, "lg_u32x4 %sn[%d];", dst[i], k);
		lg_line(b, "i64 mp = first%s;", rows > 1 ? " + slot" : "");
		lg_line(b, "bool livep = mp < M;");
		emit_next_loads(b, l, n, dst, src, rms ? "float rn = " : NULL);
	}
	lg_open(b, "for (i64 base = first; base < M; base += stride) {");
	lg_line(b, "const i64 m = base%s;", rows > 1 ? " + slot" : "");
	lg_line(b, "const bool live = m < M;");
	for (int i = 0; i < n; i++)
		lg_line(b, "lg_u32x4 %s[%d];", dst[i], k);
	if (!pre) {
		for (int i = 0; i < n; i++)
			lg_emit_row_load(b, l, dst[i], src[i], "lg_ld16", NULL);
		return;
	}
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int k = 0; k < %d; k++) {", k);
	for (int i = 0; i < n; i++)
		lg_line(b, "%s[k] = %sn[k];", dst[i], dst[i]);
	lg_close(b);
	if (rms)
		lg_line(b, "const float rc = rn;");
	lg_line(b, "mp = m + stride;");
	lg_line(b, "livep = mp < M;");
	emit_next_loads(b, l, n, dst, src, rms ? "rn = " : NULL);
}

/* `const u32 ww[4]`: the bf16 pairs of w's piece k (column piece c), from
 * registers wv or, with P_W_L1, from L1 (zero past the row). */
static void emit_w_piece(lg_buf *b, const struct lg_plan *p)
{
	int64_t pieces = p->v[P_HIDDEN] / 8;
	if (!p->v[P_W_L1]) {
		lg_line(b, "const u32 ww[4] = {wv[k].x, wv[k].y, wv[k].z, wv[k].w};");
		return;
	}
	if (pieces % p->v[P_LPR]) { /* the last piece k has lanes past the row */
		lg_line(b, "const lg_u32x4 wk = c < %lld ? lg_ld16_keep((const u8 *)w + c * 16) // L1",
			(long long)pieces);
		lg_line(b, "\t: lg_u32x4{0u, 0u, 0u, 0u};");
	} else {
		lg_line(b, "const lg_u32x4 wk = lg_ld16_keep((const u8 *)w + c * 16); // from L1");
	}
	lg_line(b, "const u32 ww[4] = {wk.x, wk.y, wk.z, wk.w};");
}

/* w in registers wv, or with P_W_L1 only prefetched into L1 (so its later
 * reads a piece at a time do not each wait on L2). */
static void emit_w(lg_buf *b, const struct lg_plan *p, const struct lg_rowlayout *l)
{
	if (!p->v[P_W_L1]) {
		lg_emit_row_weights(b, l, "wv", "w");
		return;
	}
	lg_comment(b, "w into L1, read from there a piece at a time.");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int k = 0; k < %d; k++) {", l->k);
	lg_line(b, "const int c = t + k * %d;", l->lpr);
	lg_line(b, "if (c < %lld) lg_prefetch_l1((const u8 *)w + c * 16);", (long long)(l->hidden / 8));
	lg_close(b);
}

static void emit_forward(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	int64_t pieces = p->v[P_HIDDEN] / 8;
	bool pre = p->v[P_PREFETCH] || p->v[P_STAGES]; /* a persistent grid */
	lg_section(b, p->entry[0], "RMSNorm forward");
	lg_comment(b, "%lld lanes per row, %lld 16-byte pieces each; %d rows per CTA.", (long long)p->v[P_LPR],
		   (long long)p->v[P_K], (int)p->v[P_ROWS]);
	if (pre)
		lg_comment(b, "A persistent grid: one wave of %lld CTAs an SM on the device it runs on.",
			   (long long)p->v[P_PER_SM]);
	/* persistent: per_sm CTAs an SM, registers capped to fit them */
	if (pre)
		lg_emit_signature(b, s, p->entry[0], "__launch_bounds__(%d, %d)", (int)p->v[P_THREADS],
				  (int)p->v[P_PER_SM]);
	else
		lg_emit_signature(b, s, p->entry[0], "__launch_bounds__(%d)", (int)p->v[P_THREADS]);
	lg_open(b, "{");
	struct lg_rowlayout l = lg_rowlayout_load(p);
	lg_emit_row_prologue(b, &l, false);
	lg_line(b, "const u8 *const xg = (const u8 *)x;");
	if (pre) {
		static const char *const dst[] = {"v"}, *const src[] = {"xg"};
		emit_w(b, p, &l);
		if (p->v[P_STAGES])
			emit_ring_loop(b, p, &l, 1, dst, src, false, NULL);
		else
			emit_row_loop(b, p, &l, 1, dst, src, false);
	} else {
		lg_emit_row_index(b, &l);
		lg_line(b, "lg_u32x4 v[%lld];", (long long)p->v[P_K]);
		lg_emit_row_load(b, &l, "v", "xg", "lg_ld16", NULL);
		lg_emit_row_weights(b, &l, "wv", "w");
	}
	lg_emit_row_sumsq(b, &l, "v");
	lg_line(b, "const float r = lg_rrms(ss);");
	lg_comment(b, "y = (x * r) * w in fp32, rounded to bf16 (RNE).");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int k = 0; k < %lld; k++) {", (long long)p->v[P_K]);
	lg_line(b, "const int c = t + k * %lld;", (long long)p->v[P_LPR]);
	lg_line(b, "if (!live || c >= %lld) continue;", (long long)pieces);
	lg_line(b, "const u32 xv[4] = {v[k].x, v[k].y, v[k].z, v[k].w};");
	emit_w_piece(b, p);
	lg_line(b, "u32 o[4];");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int e = 0; e < 4; e++)");
	lg_line(b, "\to[e] = lg_pack_bf16x2((lg_bf16_lo(xv[e]) * r) * lg_bf16_lo(ww[e]),");
	lg_line(b, "\t\t(lg_bf16_hi(xv[e]) * r) * lg_bf16_hi(ww[e]));");
	lg_line(b, "lg_st16_cs((u8 *)y + (m * %lld + c * 8) * 2,", (long long)p->v[P_HIDDEN]);
	lg_line(b, "\tlg_u32x4{o[0], o[1], o[2], o[3]});");
	lg_close(b);
	lg_line(b, "if (rms && live && t == 0) ((float *)rms)[m] = r;");
	if (pre)
		lg_close(b);
	lg_close(b);
}

/* The end of the backward's first kernel: the CTA's dw partial sums (of its row slots,
 * in a fixed order) to its workspace row. */
static void emit_dw_partials(lg_buf *b, const struct lg_plan *p)
{
	int64_t pieces = p->v[P_HIDDEN] / 8, h = p->v[P_HIDDEN];
	int rows = (int)p->v[P_ROWS], threads = (int)p->v[P_THREADS];
	if (rows > 1)
		lg_comment(b, "Add the row slots' dw partials in a fixed order; one workspace row per CTA.");
	else
		lg_comment(b, "The CTA's dw partials to its workspace row.");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int k = 0; k < %lld; k++) {", (long long)p->v[P_K]);
	lg_line(b, "const int c = t + k * %lld;", (long long)p->v[P_LPR]);
	lg_line(b, "if (c < %lld)", (long long)pieces);
	if (rows > 1)
		lg_line(b, "\tfor (int e = 0; e < 8; e++) dwp[slot * %lld + c * 8 + e] = acc[k][e];", (long long)h);
	else
		lg_line(b, "\tfor (int e = 0; e < 8; e++) dwp[c * 8 + e] = acc[k][e];");
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_open(b, "for (int col = threadIdx.x; col < %lld; col += %d) {", (long long)h, threads);
	if (rows > 1) {
		lg_line(b, "float sum = 0.0f;");
		lg_line(b, "for (int sl = 0; sl < %d; sl++) sum += dwp[sl * %lld + col];", rows, (long long)h);
		lg_line(b, "((float *)ws)[(i64)blockIdx.x * %lld + col] = sum;", (long long)h);
	} else {
		lg_line(b, "((float *)ws)[(i64)blockIdx.x * %lld + col] = dwp[col];", (long long)h);
	}
	lg_close(b);
}

/* The backward's first kernel: dx, and the CTA's dw partial sums. */
static void emit_backward_rows(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	int64_t pieces = p->v[P_HIDDEN] / 8, h = p->v[P_HIDDEN];
	int threads = (int)p->v[P_THREADS];
	lg_section(b, p->entry[0], "RMSNorm backward, dx and dw partials");
	emit_ctas(b, p);
	lg_emit_signature(b, s, p->entry[0], "__launch_bounds__(%d, %d)", threads, (int)p->v[P_PER_SM]);
	lg_open(b, "{");
	lg_line(b, "extern __shared__ __align__(16) float dwp[]; // [rows per CTA][hidden] dw partial sums");
	struct lg_rowlayout l = lg_rowlayout_load(p);
	lg_emit_row_prologue(b, &l, true);
	if (p->early[1]) {
		lg_comment(b, "The dw kernel may be scheduled.");
		lg_line(b, "asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");");
	}
	lg_line(b, "const u8 *const xg = (const u8 *)x, *const gg = (const u8 *)dy;");
	emit_w(b, p, &l);
	lg_line(b, "float acc[%lld][8];", (long long)p->v[P_K]);
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int k = 0; k < %lld; k++)", (long long)p->v[P_K]);
	lg_line(b, "\tfor (int e = 0; e < 8; e++) acc[k][e] = 0.0f;");
	static const char *const dst[] = {"xv", "gv"}, *const src[] = {"xg", "gg"};
	bool pre = p->v[P_PREFETCH] || p->v[P_STAGES]; /* rc: row m's rms */
	if (p->v[P_STAGES]) {
		char ring[64];
		snprintf(ring, sizeof ring, "(u8 *)dwp + %lld", (long long)(l.rows * l.hidden * 4));
		emit_ring_loop(b, p, &l, 2, dst, src, true, ring);
	} else {
		emit_row_loop(b, p, &l, 2, dst, src, true);
	}
	lg_line(b, "float r;");
	lg_open(b, "if (rms) {");
	lg_line(b, pre ? "r = rc;" : "r = live ? ((const float *)rms)[m] : 0.0f;");
	lg_close_with(b, "} else {");
	lg_emit_row_sumsq(b, &l, "xv");
	lg_line(b, "r = lg_rrms(ss);");
	lg_close(b);
	lg_comment(b, "dot = sum x * g * w over the row (fp32).");
	lg_line(b, "float dot = 0.0f;");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int k = 0; k < %lld; k++) {", (long long)p->v[P_K]);
	if (p->v[P_W_L1])
		lg_line(b, "const int c = t + k * %lld;", (long long)p->v[P_LPR]);
	lg_line(b, "const u32 a[4] = {xv[k].x, xv[k].y, xv[k].z, xv[k].w};");
	lg_line(b, "const u32 g[4] = {gv[k].x, gv[k].y, gv[k].z, gv[k].w};");
	emit_w_piece(b, p);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int e = 0; e < 4; e++) {");
	lg_line(b, "dot += lg_bf16_lo(a[e]) * lg_bf16_lo(g[e]) * lg_bf16_lo(ww[e]);");
	lg_line(b, "dot += lg_bf16_hi(a[e]) * lg_bf16_hi(g[e]) * lg_bf16_hi(ww[e]);");
	lg_close(b);
	lg_close(b);
	lg_emit_row_sum(b, &l, "float", "dot");
	lg_comment(b, "dx = r g w - r^3 x dot / hidden (bf16); dw += x g r (fp32, in registers).");
	lg_line(b, "const float c3 = r * r * r * (dot / %lld.0f);", (long long)h);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int k = 0; k < %lld; k++) {", (long long)p->v[P_K]);
	lg_line(b, "const int c = t + k * %lld;", (long long)p->v[P_LPR]);
	lg_line(b, "if (!live || c >= %lld) continue;", (long long)pieces);
	lg_line(b, "const u32 a[4] = {xv[k].x, xv[k].y, xv[k].z, xv[k].w};");
	lg_line(b, "const u32 g[4] = {gv[k].x, gv[k].y, gv[k].z, gv[k].w};");
	emit_w_piece(b, p);
	lg_line(b, "u32 o[4];");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int e = 0; e < 4; e++) {");
	lg_line(b, "const float x0 = lg_bf16_lo(a[e]), x1 = lg_bf16_hi(a[e]);");
	lg_line(b, "const float g0 = lg_bf16_lo(g[e]), g1 = lg_bf16_hi(g[e]);");
	lg_line(b, "o[e] = lg_pack_bf16x2(r * g0 * lg_bf16_lo(ww[e]) - c3 * x0,");
	lg_line(b, "\tr * g1 * lg_bf16_hi(ww[e]) - c3 * x1);");
	lg_line(b, "acc[k][2 * e] += x0 * g0 * r;");
	lg_line(b, "acc[k][2 * e + 1] += x1 * g1 * r;");
	lg_close(b);
	lg_line(b, "lg_st16_cs((u8 *)dx + (m * %lld + c * 8) * 2,", (long long)h);
	lg_line(b, "\tlg_u32x4{o[0], o[1], o[2], o[3]});");
	lg_close(b);
	lg_close(b);
	emit_dw_partials(b, p);
	lg_close(b);
}

static void emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	(void)t;
	lg_section(b, "helpers for this spec", NULL);
	lg_emit_rrms(b, s);
	if (p->v[P_BWD]) {
		emit_backward_rows(b, s, p);
		lg_emit_dw_reduce(b, s, p->entry[1], p->v[P_HIDDEN], p->early[1], "lg_ctas(M)", true);
	} else {
		emit_forward(b, s, p);
	}
}

/* Tile variants for `lingen tune`: 128, 256 and 512 threads per CTA (rows
 * per CTA follow), the backward also 1024 where it plans, each without and
 * with prefetch; the forward's persistent forms: the register prefetch
 * with 128 threads and 2, 3 or 4 CTAs an SM, or 256 threads and 2; the
 * cp.async ring with 2 to 4 stages and 1 to 4 CTAs an SM (those whose
 * ring fits); the backward's ring with 128 threads and 2, 3 or 4 CTAs an
 * SM, or 256 and 1. */
static int candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out,
		      int max)
{
	/* the persistent forward: {threads, per_sm, stages (0: prefetch 1)}; 512 threads would spill */
	static const int64_t fwd[] = {128, 256, 512, 0},
			     fwd_pre[][3] = {{128, 2, 0}, {128, 3, 0}, {128, 4, 0}, {256, 2, 0}, {128, 2, 2},
					     {128, 2, 3}, {128, 2, 4}, {128, 3, 3}, {128, 4, 2}, {256, 1, 3},
					     {256, 2, 2}, {256, 2, 3}},
			     bwd_ring[][3] = {{128, 2, 3}, {128, 3, 3}, {128, 4, 2}, {256, 1, 3}};
	bool bwd = s->pass == LG_PASS_BACKWARD;
	int n = 0;
	for (int pre = 0; pre < (bwd ? 2 : 1); pre++)
		for (const int64_t *v = bwd ? threads_ok : fwd; *v; v++) {
			struct lg_tile_choice c = lg_tile1(K_THREADS, *v);
			c.v[K_PREFETCH] = pre;
			c.set |= 1ull << K_PREFETCH;
			n = lg_candidate_add(s, t, out, n, max, c);
		}
	const int64_t(*pre)[3] = bwd ? bwd_ring : fwd_pre;
	size_t npre = bwd ? sizeof bwd_ring / sizeof bwd_ring[0] : sizeof fwd_pre / sizeof fwd_pre[0];
	for (size_t i = 0; i < npre; i++) {
		struct lg_tile_choice c = lg_tile1(K_THREADS, pre[i][0]);
		int key = pre[i][2] ? K_STAGES : K_PREFETCH;
		c.v[key] = pre[i][2] ? pre[i][2] : 1;
		c.v[K_PER_SM] = pre[i][1];
		c.set |= 1ull << key | 1ull << K_PER_SM;
		n = lg_candidate_add(s, t, out, n, max, c);
	}
	return n;
}

/* What a launch computes: the comment of its typed launcher (lingen_ops.h). */
static const char doc_forward[] =
	"Plain RMSNorm forward (op \"rmsnorm\", pass \"forward\"):\n"
	"  y [tokens, hidden] bf16 = x * r * w; rms [tokens] fp32 optional.";
static const char doc_backward[] =
	"RMSNorm backward (op \"rmsnorm\", pass \"backward\"):\n"
	"  dy, x [tokens, hidden] bf16, w [hidden] bf16, rms [tokens] fp32 or 0\n"
	"  (recomputed); dx [tokens, hidden] bf16, dw [hidden] fp32 (overwritten,\n"
	"  deterministic). workspace: lg_kernel_workspace_size(k) bytes.";

const struct lg_family lg_family_rmsnorm = {
	.op = "rmsnorm",
	.summary = "RMSNorm forward (bf16 + rms) and backward (dx bf16, dw fp32) (K1)",
	.passes = (1u << LG_PASS_FORWARD) | (1u << LG_PASS_BACKWARD),
	.dtypes = 1u << LG_DTYPE_BF16,
	.nkeys = NKEYS,
	.keys = keys,
	.sig = {[LG_PASS_FORWARD] = {1, sizes, F_NARGS, fwd_args, doc_forward},
		[LG_PASS_BACKWARD] = {1, sizes, B_NARGS, bwd_args, doc_backward}},
	.validate = validate,
	.plan = plan,
	.emit = emit,
	.geometry = geometry,
	.workspace = workspace,
	.candidates = candidates,
};
