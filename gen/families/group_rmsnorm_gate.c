/*
 * group_rmsnorm_gate.c - family "group_rmsnorm_gate" (docs/kernels.md K8): the
 * linear-attention output gate, group RMSNorm times a sigmoid gate, forward
 * (y bf16) and backward (dx, dgate bf16; dw fp32, deterministic).
 *
 * x is [batch, seq, dim]; gate, y, dy and dgate are [seq, batch, dim] with
 * `transpose` (the default, as linghe) or [batch, seq, dim] without. Each
 * row of dim is split into `groups` contiguous groups of d = dim / groups
 * values, each normalised on its own: r = rsqrt(sum_group x^2 / d + eps).
 * The weight is [dim], or [d] shared by every group (`shared_weight`).
 *
 * Strategy: a "unit" is one group of one token, d contiguous values in
 * every tensor. `lpr` lanes share a unit (the RMSNorm row layout of
 * norm_common.h with d as the row), each holding a few 16-byte pieces of
 * it (tile.pieces at most; kmax_of says how many by default), so every
 * input is read once and every output written once, 16 bytes at a time. A
 * CTA holds `tile.tokens` whole tokens (all their groups), so each thread
 * keeps one group for the whole launch: its weight pieces stay in
 * registers and, in the backward, its dw partial sums in its own slice of
 * shared memory (not registers: 4 CTAs of 128 threads an SM instead of 3).
 * Both passes loop over tokens with a grid stride, so every token count
 * works (no multiple of anything needed; a token past the last is loaded
 * as zeros and stores nothing); with transpose a token's (b, l) is stepped
 * along (no 64-bit division in the loop). With tile.prefetch the grid is
 * persistent and loads the next token's inputs before the current one's
 * reductions and stores (fewer pieces a lane, so that both fit in
 * registers): the default of both passes where a token's lanes fit a CTA
 * (the forward with 2 pieces a lane where they fit: 32 lanes a group of
 * 512, 79 registers, 3 CTAs of 256 threads an SM; without prefetch one CTA
 * per tile.tokens tokens, no loop). The forward's persistent grid is the
 * CTAs the device holds (the context's occupancy query); the backward's
 * is 132 x tile.per_sm (4 CTAs an SM up to 128 threads with prefetch, 2 up
 * to 256, else 1), fixed at plan time because the workspace holds a row
 * per CTA and the dw kernel sums that many.
 *
 * Arithmetic (per element: three bf16 unpacks, a sigmoid of two MUFU ops
 * (ex2.approx, rcp.approx), a few FMAs): what bounded the forward on the
 * H200 was issue (ncu: 61% issue-busy, DRAM 50%, fixed-latency stalls), so
 * by default (tile.fsum) the sum of squares is fp32 and r = rsqrt.approx
 * of it, not the RMSNorm families' fp64 sum and correctly rounded fp64
 * 1 / sqrt (tile.fsum 0): r is then within a few fp32 ulps of the float64
 * reference, far inside the two bf16 ulps the outputs are checked to. What
 * bounds it then: latency (few bytes in flight at low occupancy), so
 * pieces a lane are traded for resident warps (tile.pieces, tile.per_sm).
 * The backward's CTAs write one workspace row of dw partials each (their
 * unit slots added in a fixed order through shared memory), and a second
 * entry point adds the rows, 8 row slices a column, in a fixed order: dw
 * is deterministic.
 */
#include <stdio.h>

#include "family.h"

#include "error.h"
#include "norm_common.h"
#include "templates.h"

#define SMS 132     /* SMs of an H200: the backward's grid (workspace rows) is SMS x per_sm */
#define FMAX 65536 /* CTAs of the forward's grid at most (then it loops) */
#define PREFETCH_DEFAULT true
/* Shared memory the backward may ask for (sm_80: 163 KiB); the lanes of a
 * token within 1024 keep tokens x dim x 4 bytes below it, this is a guard. */
#define SMEM_MAX (160 * 1024)

enum { K_DIM, K_GROUPS, K_EPS, K_TRANSPOSE, K_SHARED, K_TILE, K_TOKENS, K_PREFETCH, K_PIECES, K_FSUM, K_PER_SM, NKEYS };
static const int64_t tokens_ok[] = {1, 2, 3, 4, 6, 8, 12, 16, 0};
static const int64_t pieces_ok[] = {1, 2, 4, 8, 0};
static const char *const transpose_words[2] = {"bsd", "sbd"};
static const char *const shared_words[2] = {"wdim", "wshared"};
static const struct lg_key keys[NKEYS] = {
	[K_DIM] = LG_KEY_DIM("dim", "d", 32, 65536, 8, "features per token: groups x d (d a multiple of 8)"),
	[K_GROUPS] = {.path = "groups", .type = LG_KEY_INT, .min = 1, .max = 64,
		      .has_def = true, .def = 4, .naming = LG_NAME_ALWAYS, .rank = 11, .abbrev = "g",
		      .doc = "groups per row (linghe's group_size): d = dim / groups, a multiple of 8"},
	[K_EPS] = LG_KEY_EPS,
	[K_TRANSPOSE] = {.path = "transpose", .type = LG_KEY_BOOL, .has_def = true, .def = 1,
			 .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 20, .words = transpose_words,
			 .doc = "gate, y, dy, dgate are [seq, batch, dim] (false: [batch, seq, dim])"},
	[K_SHARED] = {.path = "shared_weight", .type = LG_KEY_BOOL, .has_def = true, .def = 0,
		      .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 21, .words = shared_words,
		      .doc = "one weight [dim / groups] shared by every group (false: [dim])"},
	[K_TILE] = LG_KEY_TILE_OBJ,
	[K_TOKENS] = LG_KEY_TILE("tokens", "m", 1, 16, tokens_ok,
				 "tokens per CTA (threads = tokens x groups x lanes per group)"),
	[K_PREFETCH] = LG_KEY_TILE("prefetch", "p", 0, 1, NULL,
				   "1: a persistent grid that loads the next token's inputs before the math of "
				   "the current one (default: the backward where it fits)"),
	[K_PIECES] = LG_KEY_TILE("pieces", "k", 1, 8, pieces_ok,
				 "16-byte pieces a lane at most (lanes per group = d / 8 / pieces, rounded up "
				 "to a power of two from 16)"),
	[K_FSUM] = LG_KEY_TILE("fsum", "f", 0, 1, NULL,
			       "1 (default): sum of squares and r = rsqrt in fp32; 0: fp64 sum, r correctly "
			       "rounded from it (the RMSNorm families' form)"),
	[K_PER_SM] = LG_KEY_TILE("per_sm", "s", 1, 8, NULL,
				 "CTAs an SM a persistent grid asks for (__launch_bounds__ minimum; the "
				 "backward's grid is 132 x per_sm)"),
};

/* The harness (lingen check / bench --tokens N) runs at batch 2, seq N. */
static const struct lg_size sizes[] = {
	{"batch", "B", 0, INT32_MAX, "batch (x's first dimension)", 2, 0},
	{"seq", "L", 0, INT32_MAX, "sequence length (x's second dimension)", 0, 0},
};

/* The gate's layout: [seq, batch, dim] with transpose (1), else [batch,
 * seq, dim]; the weight's length: dim, or d when shared. */
#define GATE_SHAPE "seq * transpose + batch * (1 - transpose), batch * transpose + seq * (1 - transpose), dim"
#define W_SHAPE "dim / (1 + (groups - 1) * shared_weight)"

enum { F_X, F_GATE, F_W, F_Y, F_NARGS };
enum { B_DY, B_X, B_GATE, B_W, B_DX, B_DGATE, B_DW, B_WS, B_NARGS };

static const struct lg_arg fwd_args[F_NARGS] = {
	[F_X] = {"x", LG_ARG_IN, LG_ELEM_BF16, "batch, seq, dim", 16, NULL},
	[F_GATE] = {"gate", LG_ARG_IN, LG_ELEM_BF16, GATE_SHAPE, 16, NULL},
	[F_W] = {"w", LG_ARG_IN, LG_ELEM_BF16, W_SHAPE, 16, NULL},
	[F_Y] = {"y", LG_ARG_OUT, LG_ELEM_BF16, GATE_SHAPE, 16, "x * r * w * sigmoid(gate)"},
};

static const struct lg_arg bwd_args[B_NARGS] = {
	[B_DY] = {"dy", LG_ARG_IN, LG_ELEM_BF16, GATE_SHAPE, 16, NULL},
	[B_X] = {"x", LG_ARG_IN, LG_ELEM_BF16, "batch, seq, dim", 16, NULL},
	[B_GATE] = {"gate", LG_ARG_IN, LG_ELEM_BF16, GATE_SHAPE, 16, NULL},
	[B_W] = {"w", LG_ARG_IN, LG_ELEM_BF16, W_SHAPE, 16, NULL},
	[B_DX] = {"dx", LG_ARG_OUT, LG_ELEM_BF16, "batch, seq, dim", 16, NULL},
	[B_DGATE] = {"dgate", LG_ARG_OUT, LG_ELEM_BF16, GATE_SHAPE, 16, NULL},
	[B_DW] = {"dw", LG_ARG_OUT, LG_ELEM_FP32, W_SHAPE, 16, "overwritten, deterministic"},
	[B_WS] = {"workspace", LG_ARG_WORKSPACE, LG_ELEM_U8, NULL, 16, NULL},
};

/* Plan values: the unit layout (a row layout over d), then ours. */
enum {
	P_D = LG_ROW_HIDDEN,
	P_LPR = LG_ROW_LPR,
	P_K = LG_ROW_K,
	P_ROWS = LG_ROW_ROWS, /* units per CTA: groups x tokens per CTA */
	P_THREADS = LG_ROW_THREADS,
	P_TPC = LG_ROW_VALUES, /* tokens per CTA */
	P_GROUPS,
	P_WLEN, /* the weight's length */
	P_BWD,
	P_PER_SM, /* CTAs per SM of a persistent grid (launch bounds) */
	P_PREFETCH,
	P_FSUM, /* the sum of squares and r in fp32 */
};

/* tile.fsum: fp32 unless the spec asks for the fp64 form. */
static bool fsum_of(const struct lg_spec *s)
{
	return !lg_spec_has(s, K_FSUM) || lg_spec_int(s, K_FSUM) != 0;
}

/* A token's lanes fit one CTA with at most kmax pieces a lane. */
static bool fits(const struct lg_spec *s, int kmax)
{
	int64_t groups = lg_spec_int(s, K_GROUPS), d = lg_spec_int(s, K_DIM) / groups;
	return lg_rowlayout_make(d, kmax, 1).lpr * groups <= 1024;
}

/* Pieces a lane at most, and whether the token loop prefetches (the
 * spec's choice, else the default: the backward where a token's lanes fit
 * a CTA, not yet measured against off on the GPU; the forward where they
 * fit with 4 pieces, the faster at every tile.tokens in
 * git history, commit 8b8e268: bench/h200-2026-11-30-issue10/tune.txt). tile.pieces if given, else
 * the forward 2 where they fit (ptxas 13.0 at the target, fsum: 79
 * registers with prefetch, 64 without; 128 with 4), else 4, else (without
 * prefetch) 8; the backward 2 with prefetch (1 where a group at 2 spans
 * several warps and 1 fits: its cross-warp sums take registers, and at
 * the 128 a thread that 2 CTAs of 256 an SM leave, ptxas 13.0 spilled 12
 * bytes at dim 4096, 2 groups; 1 piece: 512 threads, one CTA an SM, the
 * same threads an SM, 107 registers, no spill), else 4, or 8 where 4 do
 * not fit. */
static int kmax_of(const struct lg_spec *s, bool *pf)
{
	bool bwd = s->pass == LG_PASS_BACKWARD;
	if (lg_spec_has(s, K_PREFETCH))
		*pf = lg_spec_int(s, K_PREFETCH) != 0;
	else
		*pf = bwd ? PREFETCH_DEFAULT && fits(s, 2) : fits(s, 4);
	if (lg_spec_has(s, K_PIECES))
		return (int)lg_spec_int(s, K_PIECES);
	if (!bwd)
		return fits(s, 2) ? 2 : fits(s, 4) || *pf ? 4 : 8;
	if (*pf) {
		int64_t d = lg_spec_int(s, K_DIM) / lg_spec_int(s, K_GROUPS);
		return lg_rowlayout_make(d, 2, 1).lpr > 32 && fits(s, 1) ? 1 : 2;
	}
	return fits(s, 4) ? 4 : 8;
}

/* The unit layout of a spec: lanes per unit for d, then tile.tokens tokens
 * per CTA, else the fewest that give 256 (forward) or 128 (backward)
 * threads, a whole number of warps. */
static struct lg_rowlayout layout(const struct lg_spec *s, int *tpc)
{
	bool bwd = s->pass == LG_PASS_BACKWARD;
	int64_t groups = lg_spec_int(s, K_GROUPS), d = lg_spec_int(s, K_DIM) / groups;
	bool pf;
	int kmax = kmax_of(s, &pf);
	int64_t unit = lg_rowlayout_make(d, kmax, 1).lpr * groups; /* lanes per token */
	int64_t n = 1;
	if (lg_spec_has(s, K_TOKENS))
		n = lg_spec_int(s, K_TOKENS);
	else
		while ((unit * n < (bwd ? 128 : 256) || unit * n % 32 != 0) && unit * (n + 1) <= 1024)
			n++;
	*tpc = (int)n;
	int64_t threads = unit * n;
	return lg_rowlayout_make(d, kmax, threads > 1024 ? 2048 : (int)threads);
}

/* CTAs an SM of a persistent grid (the backward, a prefetching forward),
 * the __launch_bounds__ minimum: tile.per_sm, else the backward 4 up to
 * 128 threads with prefetch (dw partials in shared memory, fp32 sums:
 * 128 registers a thread at the target, 167 unbounded; 5 spill), 2 up to
 * 256, else 1; the prefetching forward 768 threads an SM (79 registers at
 * the target with 2 pieces a lane; 1024 threads, 64 registers, spill 28
 * bytes), else 1024 (ptxas 13.0). */
static int64_t per_sm_of(const struct lg_spec *s, const struct lg_rowlayout *l, bool pf)
{
	if (lg_spec_has(s, K_PER_SM))
		return lg_spec_int(s, K_PER_SM);
	if (s->pass == LG_PASS_BACKWARD)
		return l->threads <= 128 && pf ? 4 : l->threads <= 256 ? 2 : 1;
	int64_t n = pf ? 768 : 1024;
	return l->threads <= n ? n / l->threads : 1;
}

static lg_status validate(const struct lg_spec *s, const char *where)
{
	int64_t dim = lg_spec_int(s, K_DIM), groups = lg_spec_int(s, K_GROUPS);
	if (dim % groups != 0)
		return lg_spec_error(where, "dim: found %lld, allowed: a multiple of groups = %lld", (long long)dim,
				     (long long)groups);
	if ((dim / groups) % 8 != 0)
		return lg_spec_error(where,
				     "dim: found %lld with groups = %lld, so d = dim / groups = %lld; allowed: "
				     "d a multiple of 8 (each group is read in 16-byte pieces of 8 bf16)",
				     (long long)dim, (long long)groups, (long long)(dim / groups));
	int tpc;
	struct lg_rowlayout l = layout(s, &tpc);
	if (l.threads > 1024 || l.threads % 32 != 0)
		return lg_spec_error(where,
				     "tile.tokens: found %d, allowed: tokens x %lld threads (groups x %d lanes "
				     "per group) a multiple of 32 and at most 1024",
				     tpc, (long long)(groups * l.lpr), l.lpr);
	bool pf;
	kmax_of(s, &pf);
	if (l.threads * per_sm_of(s, &l, pf) > 2048)
		return lg_spec_error(where, "tile.per_sm: found %lld with %d threads a CTA, allowed: at most %d (2048 "
				     "threads an SM)", (long long)per_sm_of(s, &l, pf), l.threads, 2048 / l.threads);
	if (s->pass == LG_PASS_BACKWARD && (int64_t)tpc * dim * 4 > SMEM_MAX)
		return lg_spec_error(where,
				     "tile.tokens: found %d with dim %lld, allowed: at most %lld (the backward keeps "
				     "tokens x dim fp32 dw partials in %d KiB of shared memory)",
				     tpc, (long long)dim, (long long)(SMEM_MAX / (dim * 4)), SMEM_MAX / 1024);
	return LG_OK;
}

static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	bool bwd = s->pass == LG_PASS_BACKWARD;
	int tpc;
	struct lg_rowlayout l = layout(s, &tpc);
	if (l.threads > 1024 || l.threads % 32 != 0)
		return lg_fail(LG_ERR_SPEC, "%s: %d threads per CTA (tokens x groups x %d lanes) are not a "
			       "multiple of 32 up to 1024", s->entry, l.threads, l.lpr);
	int64_t groups = lg_spec_int(s, K_GROUPS);
	lg_rowlayout_save(&l, p);
	p->tile[K_TOKENS] = p->v[P_TPC] = tpc;
	p->v[P_GROUPS] = groups;
	p->v[P_WLEN] = lg_spec_int(s, K_SHARED) ? l.hidden : l.hidden * groups;
	p->v[P_BWD] = bwd;
	bool pf;
	kmax_of(s, &pf);
	p->v[P_PER_SM] = per_sm_of(s, &l, pf);
	p->v[P_PREFETCH] = pf;
	p->tile[K_PREFETCH] = p->v[P_PREFETCH];
	p->tile[K_PIECES] = l.k;
	p->v[P_FSUM] = p->tile[K_FSUM] = fsum_of(s);
	if (bwd || pf)
		p->tile[K_PER_SM] = p->v[P_PER_SM];
	/* the forward's persistent grid is one wave of the CTAs the device
	 * holds (the occupancy query, all that fit); the backward's stays
	 * SMS x per_sm, the rows of its workspace, sized at plan time */
	p->persistent[0] = !bwd && pf;
	p->per_sm[0] = 0;
	p->nentries = bwd ? 2 : 1;
	snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
	if (bwd)
		snprintf(p->entry[1], sizeof p->entry[1], "%s_dw", s->entry);
	p->early[1] = bwd && t->sm >= 90; /* the dw reduction may start while the rows drain */
	return LG_OK;
}

static int64_t ctas(const struct lg_plan *p, int64_t tokens)
{
	int64_t n = (tokens + p->v[P_TPC] - 1) / p->v[P_TPC], max = FMAX;
	if (p->v[P_BWD])
		max = SMS * p->v[P_PER_SM];
	else if (p->persistent[0])
		max = p->resident[0] ? p->resident[0] : SMS * p->v[P_PER_SM];
	return n > max ? max : n;
}

static void geometry(const struct lg_plan *p, int e, const int64_t *sz, struct lg_launch_dim *d)
{
	d->grid[1] = d->grid[2] = d->block[1] = d->block[2] = 1;
	if (e == 1) {
		lg_dw_reduce_geometry(p->v[P_WLEN], true, d);
		return;
	}
	d->grid[0] = (unsigned)ctas(p, sz[0] * sz[1]);
	d->block[0] = (unsigned)p->v[P_THREADS];
	d->smem = p->v[P_BWD] ? (unsigned)(p->v[P_ROWS] * p->v[P_D] * 4) : 0;
}

static size_t workspace(const struct lg_plan *p)
{
	return p->v[P_BWD] ? (size_t)(SMS * p->v[P_PER_SM]) * (size_t)p->v[P_WLEN] * 4 : 0;
}

/* ------------------------------------------------------------ emission */

/* The kernel's shape, for the emitters below. */
struct shape {
	struct lg_rowlayout l;
	int64_t d, dim, pieces; /* pieces: 16-byte pieces of a unit */
	int groups, tpc;
	bool transpose, shared, fsum;
	const char *slot; /* the unit within the CTA ("0" with one unit) */
};

static struct shape shape_of(const struct lg_spec *s, const struct lg_plan *p)
{
	struct shape k = {.l = lg_rowlayout_load(p), .d = p->v[P_D], .groups = (int)p->v[P_GROUPS],
			  .tpc = (int)p->v[P_TPC], .transpose = lg_spec_int(s, K_TRANSPOSE) != 0,
			  .shared = lg_spec_int(s, K_SHARED) != 0, .fsum = p->v[P_FSUM] != 0};
	k.dim = k.d * k.groups;
	k.pieces = k.d / 8;
	k.slot = k.l.rows > 1 ? "slot" : "0";
	return k;
}

/* The sigmoid, and with fsum the fp32 sum of squares and r. */
static void emit_helpers(lg_buf *b, const struct lg_spec *s, int64_t d, bool fsum)
{
	lg_comment(b, "sigmoid in fp32: 1 / (1 + e^-v) by ex2.approx and rcp.approx (two MUFU ops, no");
	lg_comment(b, "division's slow path); 0 and 1 at the ends, never NaN.");
	lg_line(b, "static __device__ __forceinline__ float lg_sigmoid(float v)");
	lg_open(b, "{");
	lg_line(b, "return __fdividef(1.0f, 1.0f + __expf(-v));");
	lg_close(b);
	if (!fsum) {
		lg_emit_rrms_n(b, s, d);
		return;
	}
	char eps[LG_FLOAT_LITERAL_MAX];
	lg_double_literal(lg_spec_num(s, K_EPS), eps);
	lg_comment(b, "Sum of squares of the eight bf16 in v, added to acc in fp32 (in order).");
	lg_line(b, "static __device__ __forceinline__ float lg_ssq8(float acc, lg_u32x4 v)");
	lg_open(b, "{");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < 8; i++) {");
	lg_line(b, "const float e = lg_bf16_at(v, i);");
	lg_line(b, "acc = fmaf(e, e, acc);");
	lg_close(b);
	lg_line(b, "return acc;");
	lg_close(b);
	lg_comment(b, "Reciprocal RMS of a group from its fp32 sum of squares (rsqrt.approx: 2 ulp).");
	lg_line(b, "static __device__ __forceinline__ float lg_rrmsf(float ss)");
	lg_open(b, "{");
	lg_line(b, "return rsqrtf(ss * (1.0f / %lld.0f) + (float)(%s));", (long long)d, eps);
	lg_close(b);
}

/* `const float r` of the current token's unit (xv), every lane of it. */
static void emit_r(lg_buf *b, const struct shape *k)
{
	if (!k->fsum) {
		lg_emit_row_sumsq(b, &k->l, "xv");
		lg_line(b, "const float r = lg_rrms(ss);");
		return;
	}
	lg_comment(b, "Sum of squares in fp32: one chain per piece, added in a fixed order.");
	lg_line(b, "float sk[%d];", k->l.k);
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int k = 0; k < %d; k++) sk[k] = lg_ssq8(0.0f, xv[k]);", k->l.k);
	lg_line(b, "float ss = sk[0];");
	if (k->l.k > 1) {
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int k = 1; k < %d; k++) ss += sk[k];", k->l.k);
	}
	lg_emit_row_sum(b, &k->l, "float", "ss");
	lg_line(b, "const float r = lg_rrmsf(ss);");
}

/* The thread's group and token slot, and its weight pieces (kept for the
 * whole launch). */
static void emit_unit_setup(lg_buf *b, const struct shape *k)
{
	if (k->l.rows > 1) {
		lg_line(b, "const int g = slot %% %d, ts = slot / %d; // the unit's group, token in the CTA",
			k->groups, k->groups);
	} else {
		lg_line(b, "const int g = 0, ts = 0; // one unit per CTA");
	}
	lg_line(b, "const i64 M = B * L;");
	if (k->shared)
		lg_line(b, "const u8 *const wu = (const u8 *)w; // shared by every group");
	else
		lg_line(b, "const u8 *const wu = (const u8 *)w + g * %lld;", (long long)k->d * 2);
	lg_line(b, "lg_u32x4 wv[%d];", k->l.k);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int k = 0; k < %d; k++) {", k->l.k);
	lg_line(b, "const int c = t + k * %d;", k->l.lpr);
	lg_line(b, "wv[k] = lg_u32x4{0u, 0u, 0u, 0u};");
	lg_line(b, "if (c < %lld) wv[k] = lg_ld16_keep(wu + c * 16);", (long long)k->pieces);
	lg_close(b);
}

/* Token m (b * L + l) of the unit: live<sfx>, and the byte offsets
 * ox<sfx> (x, dx) and og<sfx> (gate, y, dy, dgate) of its group; declared
 * (`type` "const ") or assigned (type ""). With transpose, b and l are
 * tb<sfx> and tl<sfx> (emit_stride). */
static void emit_token(lg_buf *b, const struct shape *k, const char *m, const char *sfx, const char *type)
{
	lg_line(b, "%s%slive%s = %s < M;", type, *type ? "bool " : "", sfx, m);
	lg_line(b, "%s%sox%s = (%s * %lld + g * %lld) * 2;", type, *type ? "i64 " : "", sfx, m, (long long)k->dim,
		(long long)k->d);
	if (k->transpose)
		lg_line(b, "%s%sog%s = ((tl%s * B + tb%s) * %lld + g * %lld) * 2; // [L, B, dim]", type,
			*type ? "i64 " : "", sfx, sfx, sfx, (long long)k->dim, (long long)k->d);
	else
		lg_line(b, "%s%sog%s = ox%s;", type, *type ? "i64 " : "", sfx, sfx);
}

/* The grid stride in tokens, and with transpose the first token's b and l
 * (tb, tl) and the stride's (sq, sr): the loop steps them without a 64-bit
 * division (emit_step). */
static void emit_stride(lg_buf *b, const struct shape *k, const char *ctas)
{
	lg_line(b, "const i64 stride = (i64)%s * %d;", ctas, k->tpc);
	if (!k->transpose)
		return;
	lg_comment(b, "The token's (b, l) = (tb, tl), stepped by the stride's (sq, sr): no division in the loop.");
	lg_line(b, "const i64 m0 = (i64)blockIdx.x * %d + ts;", k->tpc);
	lg_line(b, "const i64 sq = L > 0 ? stride / L : 0, sr = L > 0 ? stride %% L : 0;");
	lg_line(b, "i64 tb = L > 0 ? m0 / L : 0, tl = L > 0 ? m0 %% L : 0;");
}

/* (tb<to>, tl<to>) = (tb, tl) one stride on (declared when to is not ""). */
static void emit_step(lg_buf *b, const struct shape *k, const char *to)
{
	if (!k->transpose)
		return;
	if (*to)
		lg_line(b, "i64 tb%s = tb + sq, tl%s = tl + sr;", to, to);
	else
		lg_line(b, "tb += sq, tl += sr;");
	lg_open(b, "if (tl%s >= L) {", to);
	lg_line(b, "tl%s -= L;", to);
	lg_line(b, "tb%s++;", to);
	lg_close(b);
}

/* The persistent token loop's head: token m, live, ox, og. */
static void emit_unit_head(lg_buf *b, const struct shape *k, const char *ctas)
{
	emit_unit_setup(b, k);
	emit_stride(b, k, ctas);
	lg_open(b, "for (i64 base = (i64)blockIdx.x * %d; base < M; base += stride) {", k->tpc);
	lg_line(b, "const i64 m = base + ts; // token b * L + l");
	emit_token(b, k, "m", "", "const ");
}

/* dst[k] = the unit's pieces of tensor `ptr` at byte offset <off><sfx>;
 * zeros when !live<sfx> or past the unit. */
static void emit_load(lg_buf *b, const struct shape *k, const char *dst, const char *ptr, const char *off,
		      const char *sfx)
{
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int k = 0; k < %d; k++) {", k->l.k);
	lg_line(b, "const int c = t + k * %d;", k->l.lpr);
	lg_line(b, "%s[k] = lg_u32x4{0u, 0u, 0u, 0u};", dst);
	lg_line(b, "if (live%s && c < %lld) %s[k] = lg_ld16((const u8 *)%s + %s%s + c * 16);", sfx,
		(long long)k->pieces, dst, ptr, off, sfx);
	lg_close(b);
}

/* The loop over the thread's pieces in the unit, opened: piece k at c. */
static void open_pieces(lg_buf *b, const struct shape *k)
{
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int k = 0; k < %d; k++) {", k->l.k);
	lg_line(b, "const int c = t + k * %d;", k->l.lpr);
	lg_line(b, "if (!live || c >= %lld) continue;", (long long)k->pieces);
}

/* x, gate (and dy in the backward) of the token at offsets ox<sfx>,
 * og<sfx> into xv, gv, dv (v 'v') or xn, gn, dn (v 'n'). */
static void emit_loads(lg_buf *b, const struct shape *k, const char *sfx, char v, bool bwd)
{
	const char *const names[2][3] = {{"xv", "gv", "dv"}, {"xn", "gn", "dn"}};
	const char *const *dst = names[v == 'n'];
	if (bwd)
		lg_line(b, "lg_u32x4 x%c[%d], g%c[%d], d%c[%d];", v, k->l.k, v, k->l.k, v, k->l.k);
	else
		lg_line(b, "lg_u32x4 x%c[%d], g%c[%d];", v, k->l.k, v, k->l.k);
	emit_load(b, k, dst[0], "x", "ox", sfx);
	emit_load(b, k, dst[1], "gate", "og", sfx);
	if (bwd)
		emit_load(b, k, dst[2], "dy", "og", sfx);
}

typedef void (*emit_body_fn)(lg_buf *b, const struct shape *k);

/* The token loop of a pass (grid stride `ctas` CTAs): each token's
 * inputs, then body on them (xv, gv, dv, live, ox, og). With prefetch the
 * next token's inputs are loaded before the current one's body, so they
 * are in flight through its reductions and stores. */
static void emit_token_loop(lg_buf *b, const struct shape *k, const char *ctas, bool prefetch, bool bwd,
			    emit_body_fn body)
{
	if (!prefetch) {
		emit_unit_head(b, k, ctas);
		emit_loads(b, k, "", 'v', bwd);
		body(b, k);
		emit_step(b, k, "");
		lg_close(b); /* the token loop */
		return;
	}
	emit_unit_setup(b, k);
	emit_stride(b, k, ctas);
	lg_line(b, "i64 base = (i64)blockIdx.x * %d;", k->tpc);
	lg_line(b, "bool live;");
	lg_line(b, "i64 ox, og;");
	emit_token(b, k, "(base + ts)", "", "");
	emit_loads(b, k, "", 'v', bwd);
	lg_open(b, "for (; base < M; base += stride) {");
	lg_comment(b, "The next token's inputs, in flight during this one's math.");
	lg_line(b, "const i64 mn = base + stride + ts;");
	emit_step(b, k, "n");
	emit_token(b, k, "mn", "n", "const ");
	emit_loads(b, k, "n", 'n', bwd);
	body(b, k);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int k = 0; k < %d; k++) {", k->l.k);
	lg_line(b, "xv[k] = xn[k];");
	lg_line(b, "gv[k] = gn[k];");
	if (bwd)
		lg_line(b, "dv[k] = dn[k];");
	lg_close(b);
	lg_line(b, "live = liven;");
	lg_line(b, "ox = oxn;");
	lg_line(b, "og = ogn;");
	if (k->transpose)
		lg_line(b, "tb = tbn, tl = tln;");
	lg_close(b); /* the token loop */
}

/* The forward's math on the current token: y. */
static void emit_forward_math(lg_buf *b, const struct shape *k)
{
	emit_r(b, k);
	lg_comment(b, "y = ((x * r) * w) * sigmoid(gate) in fp32, rounded to bf16 (RNE).");
	open_pieces(b, k);
	lg_line(b, "float v[8];");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < 8; i++) {");
	lg_line(b, "v[i] = (lg_bf16_at(xv[k], i) * r) * lg_bf16_at(wv[k], i);");
	lg_line(b, "v[i] *= lg_sigmoid(lg_bf16_at(gv[k], i));");
	lg_close(b);
	lg_line(b, "lg_st16((u8 *)y + og + c * 16, lg_pack_bf16x8(v));");
	lg_close(b);
}

static void emit_forward(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	struct shape k = shape_of(s, p);
	lg_section(b, p->entry[0], "group RMSNorm x sigmoid gate, forward");
	lg_comment(b, "%d groups of %lld; %d lanes per group, %d 16-byte pieces each; %d token%s per CTA,",
		   k.groups, (long long)k.d, k.l.lpr, k.l.k, k.tpc, k.tpc > 1 ? "s" : "");
	if (p->v[P_PREFETCH]) {
		lg_comment(b, "persistent (%d CTAs an SM), the next token's inputs loaded before this one's math.",
			   (int)p->v[P_PER_SM]);
		lg_emit_signature(b, s, p->entry[0], "__launch_bounds__(%d, %d)", k.l.threads, (int)p->v[P_PER_SM]);
	} else {
		lg_comment(b, "grid-stride over tokens.");
		lg_emit_signature(b, s, p->entry[0], "__launch_bounds__(%d)", k.l.threads);
	}
	lg_open(b, "{");
	lg_emit_row_prologue_sums(b, &k.l, !k.fsum, k.fsum);
	emit_token_loop(b, &k, "gridDim.x", p->v[P_PREFETCH] != 0, false, emit_forward_math);
	lg_close(b);
}

/* Backward, per element (s = sigmoid(gate), u = dy w s):
 *   dx = r u - r^3 x (sum_unit x u) / d, dgate = r x w dy s (1 - s),
 *   dw += r x dy s. */
static void emit_backward_math(lg_buf *b, const struct shape *k)
{
	lg_comment(b, "dot = sum over the unit of x * dy * w * s (fp32), s = sigmoid(gate).");
	lg_line(b, "float dot = 0.0f, sg[%d][8];", k->l.k);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int k = 0; k < %d; k++) {", k->l.k);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < 8; i++) {");
	lg_line(b, "const float se = lg_sigmoid(lg_bf16_at(gv[k], i));");
	lg_line(b, "sg[k][i] = se;");
	lg_line(b, "const float ds = lg_bf16_at(dv[k], i) * se;");
	lg_line(b, "dot += lg_bf16_at(xv[k], i) * (ds * lg_bf16_at(wv[k], i));");
	lg_close(b);
	lg_close(b);
	lg_emit_row_sum(b, &k->l, "float", "dot");
	lg_comment(b, "dx = r u - c3 x, dgate = r x u (1 - s) (bf16); dw += r x dy s (fp32, the lane's");
	lg_comment(b, "partials of piece c in shared memory: values 0-3 at dwq[c], 4-7 at dwq[c + %lld]).",
		   (long long)k->pieces);
	lg_line(b, "const float c3 = r * r * r * (dot * (1.0f / %lld.0f));", (long long)k->d);
	open_pieces(b, k);
	lg_line(b, "float vx[8], vg[8], vw[8];");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < 8; i++) {");
	lg_line(b, "const float xe = lg_bf16_at(xv[k], i), se = sg[k][i];");
	lg_line(b, "const float ds = lg_bf16_at(dv[k], i) * se;");
	lg_line(b, "const float u = ds * lg_bf16_at(wv[k], i);");
	lg_line(b, "vx[i] = r * u - c3 * xe;");
	lg_line(b, "vg[i] = (r * xe) * u * (1.0f - se);");
	lg_line(b, "vw[i] = (r * xe) * ds;");
	lg_close(b);
	lg_line(b, "float4 a = dwq[c], e = dwq[c + %lld];", (long long)k->pieces);
	lg_line(b, "a.x += vw[0], a.y += vw[1], a.z += vw[2], a.w += vw[3];");
	lg_line(b, "e.x += vw[4], e.y += vw[5], e.z += vw[6], e.w += vw[7];");
	lg_line(b, "dwq[c] = a, dwq[c + %lld] = e;", (long long)k->pieces);
	lg_line(b, "lg_st16((u8 *)dx + ox + c * 16, lg_pack_bf16x8(vx));");
	lg_line(b, "lg_st16((u8 *)dgate + og + c * 16, lg_pack_bf16x8(vg));");
	lg_close(b);
}

/* The backward's math on the current token: dx, dgate, dw partials. */
static void emit_backward_body(lg_buf *b, const struct shape *k)
{
	emit_r(b, k);
	emit_backward_math(b, k);
}

/* The backward's first kernel: dx, dgate, and the CTA's dw partial sums. */
static void emit_backward_rows(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	struct shape k = shape_of(s, p);
	int per_sm = (int)p->v[P_PER_SM], pmax = SMS * per_sm;
	lg_section(b, p->entry[0], "group RMSNorm x sigmoid gate, backward: dx, dgate, dw partials");
	lg_comment(b, "Persistent grid of min(ceil(B L / %d), %d) CTAs (%d an SM) of %d token%s; %d groups",
		   k.tpc, pmax, per_sm, k.tpc, k.tpc > 1 ? "s" : "", k.groups);
	lg_comment(b, "of %lld, %d lanes per group, %d 16-byte pieces each.", (long long)k.d, k.l.lpr, k.l.k);
	lg_line(b, "static __device__ __forceinline__ i64 lg_ctas(i64 M)");
	lg_open(b, "{");
	if (k.tpc > 1)
		lg_line(b, "const i64 n = (M + %d) / %d;", k.tpc - 1, k.tpc);
	else
		lg_line(b, "const i64 n = M;");
	lg_line(b, "return n < %d ? n : %d;", pmax, pmax);
	lg_close(b);
	lg_line(b, "%s", "");
	lg_emit_signature(b, s, p->entry[0], "__launch_bounds__(%d, %d)", k.l.threads, per_sm);
	lg_open(b, "{");
	lg_line(b, "extern __shared__ __align__(16) float dwp[]; // [units per CTA][%lld] dw partial sums",
		(long long)k.d);
	lg_emit_row_prologue_sums(b, &k.l, !k.fsum, true);
	if (p->early[1]) {
		lg_comment(b, "The dw kernel may be scheduled.");
		lg_line(b, "asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");");
	}
	lg_comment(b, "The unit's dw partials, each lane's own (no other lane touches them until the end).");
	lg_line(b, "float4 *const dwq = (float4 *)(dwp + %s * %lld);", k.slot, (long long)k.d);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int k = 0; k < %d; k++) {", k.l.k);
	lg_line(b, "const int c = t + k * %d;", k.l.lpr);
	lg_line(b, "if (c < %lld) dwq[c] = dwq[c + %lld] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);",
		(long long)k.pieces, (long long)k.pieces);
	lg_close(b);
	emit_token_loop(b, &k, "lg_ctas(B * L)", p->v[P_PREFETCH] != 0, true, emit_backward_body);
	lg_comment(b, "The unit slots' dw partials, added in a fixed order; one workspace row per CTA.");
	lg_comment(b, "Value j of a slot is at (j & 4) * %lld + (j >> 3) * 4 + (j & 3) (see dwq).",
		   (long long)k.d / 8);
	lg_line(b, "__syncthreads();");
	lg_open(b, "for (int col = threadIdx.x; col < %lld; col += %d) {", (long long)p->v[P_WLEN], k.l.threads);
	lg_line(b, "float sum = 0.0f;");
	if (k.shared) {
		lg_comment(b, "shared weight: every unit slot (token major, then group) adds to col");
		lg_line(b, "const int o = (col & 4) * %lld + (col >> 3) * 4 + (col & 3);", (long long)k.d / 8);
		lg_line(b, "for (int u = 0; u < %d; u++) sum += dwp[u * %lld + o];", k.l.rows, (long long)k.d);
	} else {
		lg_comment(b, "col is value col %% %lld of group col / %lld: that group's slot of each token",
			   (long long)k.d, (long long)k.d);
		lg_line(b, "const int gc = col / %lld, j = col %% %lld;", (long long)k.d, (long long)k.d);
		lg_line(b, "const int o = (j & 4) * %lld + (j >> 3) * 4 + (j & 3);", (long long)k.d / 8);
		lg_line(b, "for (int u = 0; u < %d; u++) sum += dwp[(u * %d + gc) * %lld + o];", k.tpc, k.groups,
			(long long)k.d);
	}
	lg_line(b, "((float *)ws)[(i64)blockIdx.x * %lld + col] = sum;", (long long)p->v[P_WLEN]);
	lg_close(b);
	lg_close(b);
}

static void emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	(void)t;
	lg_section(b, "helpers for this spec", NULL);
	emit_helpers(b, s, p->v[P_D], p->v[P_FSUM] != 0);
	if (p->v[P_BWD]) {
		emit_backward_rows(b, s, p);
		lg_emit_dw_reduce(b, s, p->entry[1], p->v[P_WLEN], p->early[1], "lg_ctas(B * L)", true);
	} else {
		emit_forward(b, s, p);
	}
}

/* Tile variants for `lingen tune`: 1, 2, 4 and 8 tokens per CTA (the
 * backward up to 4), each with and without prefetch (those that make
 * whole warps within 1024 threads). */
static int candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out,
		      int max)
{
	static const int64_t tpc[] = {1, 2, 4, 8};
	int n = 0, ntpc = s->pass == LG_PASS_BACKWARD ? 3 : 4;
	for (int pf = 1; pf >= 0; pf--)
		for (int i = 0; i < ntpc; i++) {
			struct lg_tile_choice c = lg_tile1(K_TOKENS, tpc[i]);
			c.v[K_PREFETCH] = pf;
			c.set |= (uint64_t)1 << K_PREFETCH;
			n = lg_candidate_add(s, t, out, n, max, c);
		}
	return n;
}

/* What a launch computes: the comment of its typed launcher (lingen_ops.h). */
static const char doc_forward[] =
	"K8: group RMSNorm x sigmoid gate, forward (op \"group_rmsnorm_gate\"):\n"
	"  x [batch, seq, dim] bf16; gate [seq, batch, dim] bf16 (transpose,\n"
	"  the default) or [batch, seq, dim]; w [dim] bf16, or [dim / groups]\n"
	"  with shared_weight; y = x * r * w * sigmoid(gate) in gate's layout.";
static const char doc_backward[] =
	"Its backward: dy in gate's layout; dx [batch, seq, dim] bf16, dgate in\n"
	"  gate's layout bf16, dw fp32 in w's shape (overwritten, deterministic).\n"
	"  workspace: lg_kernel_workspace_size(k) bytes.";

const struct lg_family lg_family_group_rmsnorm_gate = {
	.op = "group_rmsnorm_gate",
	.summary = "group RMSNorm x sigmoid gate: forward, backward (dx, dgate; dw fp32) (K8)",
	.passes = (1u << LG_PASS_FORWARD) | (1u << LG_PASS_BACKWARD),
	.dtypes = 1u << LG_DTYPE_BF16,
	.nkeys = NKEYS,
	.keys = keys,
	.sig = {[LG_PASS_FORWARD] = {2, sizes, F_NARGS, fwd_args, doc_forward},
		[LG_PASS_BACKWARD] = {2, sizes, B_NARGS, bwd_args, doc_backward}},
	.validate = validate,
	.plan = plan,
	.emit = emit,
	.geometry = geometry,
	.workspace = workspace,
	.candidates = candidates,
};
