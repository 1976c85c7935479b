/*
 * qk_norm_rope.c - family "qk_norm_rope" (docs/kernels.md K2): split a fused qkv
 * projection into q, k, v; RMSNorm over each q and k head vector (weights
 * q_weight, k_weight [head_dim]); rotate-half RoPE over the first
 * R = rotary_fraction * head_dim features of each q and k head; v copied;
 * outputs in [batch, seq, heads, head_dim]. Optional SiLU on the input. The
 * backward writes dqkv in the input's layout and dq_weight, dk_weight fp32.
 *
 * The rotation (with a = v[0:R/2], b = v[R/2:R], c/s = cos/sin of
 * freqs[p, 0:R/2], freqs [seq, R] fp32 in the cat(f, f) layout):
 *   out[0:R/2] = a c - b s,  out[R/2:R] = b c + a s,  out[R:D] = v[R:D].
 *
 * Strategy: a head vector of D features is held by D/16 lanes (4, 8 or 16:
 * a lane group never straddles a warp), two 16-byte pieces each: a
 * rotating lane holds pieces l and l + R/16, the halves a and b of the
 * same 8 angles, so the rotation needs no shuffle; the other lanes hold two
 * pieces of [R, D). The RMS is a butterfly over the lane group in fp32. A
 * CTA takes `tokens` tokens at a time (the default: the count whose lane
 * groups idle least, see default_tokens); it first puts in shared memory
 * sin and cos of each token's R/2 angles (sincosf, computed once per
 * position and shared by the token's heads), the tokens' output rows (one
 * division each) and, once, both norm weights as floats. Each lane group
 * then keeps one token and walks its q heads, then its k and v heads, with
 * a stride of the lane groups a token (so a round's weight, and whether
 * it is a q head, are known when the code is generated), issuing the
 * loads of tile.batch heads (default 2, backward 1) before working on
 * them. With tile.prefetch (the default) the first batch of q heads (and
 * in the forward, when the q heads are one batch, that of the k | v heads)
 * is loaded before the sin/cos table is built and the CTA synchronises,
 * so that DRAM latency overlaps the table's (freqs load, sincosf,
 * __syncthreads) instead of following it: at the target shape (D 128,
 * 16 | 4 heads, 4 tokens of 256 threads) the forward then has all its
 * 3 heads a lane group in flight from the start. qkv is read once and
 * each output written once, 16 bytes a lane. Loops run the same number of
 * times in every lane of a warp (the shuffles need all lanes); past the
 * last token or head a lane loads and stores nothing.
 * What bounds it: latency (ncu, forward at the target: DRAM 55%, issue
 * 40%, half the stalls on the loads, each CTA waiting on the table and
 * then on its loads) and instructions (about 70 a 16-byte piece in the
 * forward), so registers are kept low for occupancy: ptxas (13.0, sm_90a,
 * 256 threads) gives the forward 63-64 registers with prefetch at its
 * default tile.min_ctas 4 (4 CTAs an SM; 48-58 without) and the backward
 * 80 (3 CTAs an SM, its default tile.min_ctas; its default grid is 3 CTAs
 * an SM of an H200).
 * Arithmetic: fp32 throughout (the RMS as 1 / sqrtf, IEEE; SiLU with expf);
 * sin and cos by sincosf, the accurate library version (NVRTC without fast
 * math), not __sinf / __cosf, whose error grows with the angle (positions
 * up to thousands of radians).
 * The backward runs a persistent grid (tile.ctas CTAs) whose lane groups
 * keep their dq_weight and dk_weight partial sums in a shared-memory row
 * each (every lane adds to its own 32 floats: no atomics; 128 bytes a
 * thread, so at most 256 threads), adds the rows in lane-group order and
 * writes one workspace row per CTA; a second entry point adds the rows
 * (32 row groups per column, each in CTA order, then the groups in order),
 * so the weight gradients are deterministic.
 */
#include <stdio.h>

#include "family.h"

#include "error.h"
#include "templates.h"

/* SMs of an H200. The backward's grid is static, not the device's: its
 * CTAs' dq_weight / dk_weight partials and their fixed-order sum are laid
 * out by the plan, so the weight gradients are the same bits on every
 * device (elsewhere only the wave's fit changes). */
#define SMS 132
#define PMAX (2 * SMS) /* the fewest CTAs of the backward's persistent grid (tile.ctas) */
#define PDEF (3 * SMS) /* its default: 3 CTAs an SM (tile.min_ctas 3 by default in the backward) */
#define DW_COLS 32 /* columns of the weight gradients per CTA of the dw kernel */

enum {
	K_HEAD_DIM,
	K_Q_HEADS,
	K_KV_HEADS,
	K_ROTARY,
	K_ORDER,
	K_HEADS,
	K_SILU,
	K_VARLEN,
	K_MSCALE,
	K_CP_SIZE,
	K_CP_RANK,
	K_EPS,
	K_TILE,
	K_TOKENS,
	K_THREADS,
	K_CTAS,
	K_MIN_CTAS,
	K_BATCH,
	K_PREFETCH,
	NKEYS
};
static const int64_t head_dims[] = {64, 128, 256, 0};
static const int64_t tokens_ok[] = {1, 2, 4, 8, 0}, threads_ok[] = {128, 256, 512, 0};
static const int64_t ctas_ok[] = {PMAX, PDEF, 2 * PMAX, 4 * PMAX, 0};
static const int64_t batch_ok[] = {1, 2, 4, 0};
static const char *const order_names[] = {"seq_batch", "batch_seq"};
static const char *const order_words[] = {"sb", "bs"};
static const char *const heads_names[] = {"interleaved", "plain"};
static const char *const heads_words[] = {"il", "plain"};
static const char *const silu_words[] = {"nosilu", "silu"};
static const char *const varlen_words[] = {"fixed", "varlen"};
static const struct lg_key keys[NKEYS] = {
	[K_HEAD_DIM] = {.path = "head_dim", .type = LG_KEY_INT, .flags = LG_KEY_REQUIRED | LG_KEY_SHAPE,
			.min = 64, .max = 256, .only = head_dims, .naming = LG_NAME_ALWAYS, .rank = 10,
			.abbrev = "d", .doc = "features per head (D)"},
	[K_Q_HEADS] = {.path = "q_heads", .type = LG_KEY_INT, .flags = LG_KEY_REQUIRED | LG_KEY_SHAPE,
		       .min = 1, .max = 1024, .naming = LG_NAME_ALWAYS, .rank = 11, .abbrev = "hq",
		       .doc = "query heads (H), a multiple of kv_heads"},
	[K_KV_HEADS] = {.path = "kv_heads", .type = LG_KEY_INT, .flags = LG_KEY_REQUIRED | LG_KEY_SHAPE,
			.min = 1, .max = 1024, .naming = LG_NAME_ALWAYS, .rank = 12, .abbrev = "hkv",
			.doc = "key and value heads (h)"},
	[K_ROTARY] = {.path = "rotary_fraction", .type = LG_KEY_NUMBER, .lo = 0.0, .hi = 2.0,
		      .has_def = true, .def_num = 0.5, .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 20,
		      .abbrev = "rf",
		      .doc = "rotated share of head_dim (0.5 Ling, 1 Qwen3); R = fraction x D, a multiple of 16"},
	[K_ORDER] = {.path = "qkv_order", .type = LG_KEY_ENUM, .values = order_names, .nvalues = 2,
		     .has_def = true, .def = 0, .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 21,
		     .words = order_words, .doc = "qkv [seq, batch, .] (Megatron) or [batch, seq, .]"},
	[K_HEADS] = {.path = "head_layout", .type = LG_KEY_ENUM, .values = heads_names, .nvalues = 2,
		     .has_def = true, .def = 0, .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 22,
		     .words = heads_words,
		     .doc = "heads of a token: per kv group [q x H/h, k, v] (interleaved), or all q | k | v"},
	[K_SILU] = {.path = "silu", .type = LG_KEY_BOOL, .has_def = true, .def = 0,
		    .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 23, .words = silu_words,
		    .doc = "SiLU on the input first (q, k and v)"},
	[K_VARLEN] = {.path = "varlen", .type = LG_KEY_BOOL, .has_def = true, .def = 0,
		      .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 24, .words = varlen_words,
		      .doc = "packed sequences: qkv [T, 1, .] (seq = T tokens, batch = sequences), "
			     "positions restart at each cu_seqlens boundary"},
	[K_MSCALE] = {.path = "mscale", .type = LG_KEY_NUMBER, .lo = 0.0, .hi = 1e30, .has_def = true,
		      .def_num = 1.0, .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 25, .abbrev = "ms",
		      .doc = "multiplies cos and sin (YaRN-style attention scaling)"},
	[K_CP_SIZE] = {.path = "cp_size", .type = LG_KEY_INT, .min = 1, .max = 1024, .has_def = true,
		       .def = 1, .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 26, .abbrev = "cp",
		       .doc = "context-parallel ranks: each holds two zig-zag halves of every sequence"},
	[K_CP_RANK] = {.path = "cp_rank", .type = LG_KEY_INT, .min = 0, .max = 1023, .has_def = true,
		       .def = 0, .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 27, .abbrev = "cr",
		       .doc = "this rank (< cp_size): its halves are rank and 2 cp_size - 1 - rank"},
	[K_EPS] = LG_KEY_EPS,
	[K_TILE] = LG_KEY_TILE_OBJ,
	[K_TOKENS] = LG_KEY_TILE("tokens", "n", 1, 8, tokens_ok, "tokens a CTA takes at a time"),
	[K_THREADS] = LG_KEY_TILE("threads", "t", 128, 512, threads_ok, "threads per CTA"),
	[K_MIN_CTAS] = LG_KEY_TILE_MIN_CTAS,
	[K_CTAS] = LG_KEY_TILE("ctas", "g", PMAX, 4 * PMAX, ctas_ok,
			       "backward: CTAs of the persistent grid (workspace rows)"),
	[K_BATCH] = LG_KEY_TILE("batch", "b", 1, 4, batch_ok,
				"rounds of a lane group whose loads are issued together (default: forward 2, "
				"backward 1)"),
	[K_PREFETCH] = LG_KEY_TILE("prefetch", "p", 0, 2, NULL,
				   "1 (the default): the first batch of q heads (forward: and of k | v heads) "
				   "loaded before the sin/cos table is built; 2: the backward's k | v too"),
};

/* The fixed form also needs seq x batch below 2^31 (check_sizes); the
 * varlen form indexes tokens by seq alone (batch: the binary search of cu). */
#define TOKENS_MAX (1 << 22)
static const struct lg_size sizes[] = {
	{"seq", "S", 0, TOKENS_MAX, "positions (S); varlen: tokens (T)", 0},
	/* check and bench at N tokens: seq N, batch 2 */
	{"batch", "B", 0, TOKENS_MAX, "sequences (B; seq x batch below 2^31); varlen: sequences in cu_seqlens", 2},
};

#define QKV_SHAPE "pick(qkv_order, seq, batch), pick(varlen, pick(qkv_order, batch, seq), 1), " \
		  "(q_heads + 2 * kv_heads) * head_dim"
#define OUT_SHAPE(heads) "pick(varlen, batch, 1), seq, " heads ", head_dim"
#define FREQS_SHAPE "seq * cp_size, head_dim * rotary_fraction"
#define CU_DOC "varlen: cumulative global sequence lengths, from 0 (this rank's tokens of " \
	       "sequence i: [cu[i] / cp_size, cu[i + 1] / cp_size))"
enum { F_QKV, F_QW, F_KW, F_FREQS, F_CU, F_Q, F_K, F_V, F_NARGS };
enum { B_GQ, B_GK, B_GV, B_QKV, B_QW, B_KW, B_FREQS, B_CU, B_DQKV, B_DQW, B_DKW, B_WS, B_NARGS };

static const struct lg_arg fwd_args[F_NARGS] = {
	[F_QKV] = {"qkv", LG_ARG_IN, LG_ELEM_BF16, QKV_SHAPE, 16, "fused projection, heads as head_layout"},
	[F_QW] = {"q_weight", LG_ARG_IN, LG_ELEM_BF16, "head_dim", 16, "q norm weight"},
	[F_KW] = {"k_weight", LG_ARG_IN, LG_ELEM_BF16, "head_dim", 16, "k norm weight"},
	[F_FREQS] = {"freqs", LG_ARG_IN, LG_ELEM_FP32, FREQS_SHAPE, 4,
		     "angles of positions 0.., cat(f, f): only [:, 0:R/2] is read"},
	[F_CU] = {"cu_seqlens", LG_ARG_OPT_IN, LG_ELEM_I32, "batch + 1", 4, CU_DOC},
	[F_Q] = {"q", LG_ARG_OUT, LG_ELEM_BF16, OUT_SHAPE("q_heads"), 16, NULL},
	[F_K] = {"k", LG_ARG_OUT, LG_ELEM_BF16, OUT_SHAPE("kv_heads"), 16, NULL},
	[F_V] = {"v", LG_ARG_OUT, LG_ELEM_BF16, OUT_SHAPE("kv_heads"), 16, NULL},
};

static const struct lg_arg bwd_args[B_NARGS] = {
	[B_GQ] = {"gq", LG_ARG_IN, LG_ELEM_BF16, OUT_SHAPE("q_heads"), 16, NULL},
	[B_GK] = {"gk", LG_ARG_IN, LG_ELEM_BF16, OUT_SHAPE("kv_heads"), 16, NULL},
	[B_GV] = {"gv", LG_ARG_IN, LG_ELEM_BF16, OUT_SHAPE("kv_heads"), 16, NULL},
	[B_QKV] = {"qkv", LG_ARG_IN, LG_ELEM_BF16, QKV_SHAPE, 16, "the forward's input"},
	[B_QW] = {"q_weight", LG_ARG_IN, LG_ELEM_BF16, "head_dim", 16, NULL},
	[B_KW] = {"k_weight", LG_ARG_IN, LG_ELEM_BF16, "head_dim", 16, NULL},
	[B_FREQS] = {"freqs", LG_ARG_IN, LG_ELEM_FP32, FREQS_SHAPE, 4, NULL},
	[B_CU] = {"cu_seqlens", LG_ARG_OPT_IN, LG_ELEM_I32, "batch + 1", 4, CU_DOC},
	[B_DQKV] = {"dqkv", LG_ARG_OUT, LG_ELEM_BF16, QKV_SHAPE, 16, "in qkv's layout"},
	[B_DQW] = {"dq_weight", LG_ARG_OUT, LG_ELEM_FP32, "head_dim", 16, "overwritten, deterministic"},
	[B_DKW] = {"dk_weight", LG_ARG_OUT, LG_ELEM_FP32, "head_dim", 16, "overwritten, deterministic"},
	[B_WS] = {"workspace", LG_ARG_WORKSPACE, LG_ELEM_U8, NULL, 16, NULL},
};

/* Plan values. */
enum { P_D, P_H, P_HKV, P_R, P_TOKENS, P_THREADS, P_BWD, P_CTAS, P_VARLEN, P_MIN_CTAS, P_BATCH, P_PREFETCH };

/* The rotated width R (0 when the fraction does not give a whole number). */
static int64_t rotated(const struct lg_spec *s)
{
	double r = lg_spec_num(s, K_ROTARY) * (double)lg_spec_int(s, K_HEAD_DIM);
	return r == (double)(int64_t)r ? (int64_t)r : 0;
}

/* Rounds of `gt` lane groups over n heads. */
static int64_t rounds_of(int64_t n, int64_t gt)
{
	return (n + gt - 1) / gt;
}

/* The share of a token's lane-group rounds that hold a head, with `gt`
 * lane groups a token: q heads and k | v heads are walked separately. */
static double use_of(int64_t hq, int64_t hkv, int64_t gt)
{
	return (double)(hq + 2 * hkv) / (double)((rounds_of(hq, gt) + rounds_of(2 * hkv, gt)) * gt);
}

/* The default tokens a CTA takes: the most of its lane-group rounds used
 * (4 first, then 8, 2, 1 on a tie). */
static int64_t default_tokens(int64_t d, int64_t hq, int64_t hkv, int64_t threads)
{
	static const int64_t order[] = {4, 8, 2, 1};
	int64_t groups = threads / (d / 16), best = 0;
	for (int i = 0; i < 4; i++)
		if (best == 0 || use_of(hq, hkv, groups / order[i]) > use_of(hq, hkv, groups / best))
			best = order[i];
	return best;
}

static lg_status validate(const struct lg_spec *s, const char *where)
{
	int64_t d = lg_spec_int(s, K_HEAD_DIM), hq = lg_spec_int(s, K_Q_HEADS), hkv = lg_spec_int(s, K_KV_HEADS);
	double f = lg_spec_num(s, K_ROTARY);
	if (hq % hkv != 0)
		return lg_spec_error(where, "q_heads: found %lld, allowed: a multiple of kv_heads (%lld)",
				     (long long)hq, (long long)hkv);
	if (lg_spec_has(s, K_CTAS) && s->pass != LG_PASS_BACKWARD)
		return lg_spec_error(where, "tile.ctas: found %lld, allowed: only in the backward (its persistent grid)",
				     (long long)lg_spec_int(s, K_CTAS));
	if (s->pass == LG_PASS_BACKWARD && lg_spec_has(s, K_THREADS) && lg_spec_int(s, K_THREADS) > 256)
		return lg_spec_error(where, "tile.threads: found %lld, allowed: 128 or 256 in the backward (its lane "
					    "groups' weight partials in 48 KiB of static shared memory)",
				     (long long)lg_spec_int(s, K_THREADS));
	if (f > 1.0)
		return lg_spec_error(where, "rotary_fraction: found %g, allowed: above 0, at most 1", f);
	if (lg_spec_int(s, K_VARLEN) && lg_spec_int(s, K_ORDER) != 0)
		return lg_spec_error(where, "qkv_order: found \"batch_seq\", allowed: \"seq_batch\" with varlen "
					    "(packed tokens [T, 1, .])");
	if (lg_spec_int(s, K_CP_RANK) >= lg_spec_int(s, K_CP_SIZE))
		return lg_spec_error(where, "cp_rank: found %lld, allowed: 0 to cp_size - 1 (%lld)",
				     (long long)lg_spec_int(s, K_CP_RANK), (long long)lg_spec_int(s, K_CP_SIZE) - 1);
	int64_t r = rotated(s);
	if (r == 0 || r % 16 != 0)
		return lg_spec_error(where, "rotary_fraction: found %g (rotated width %g of head_dim %lld), "
					    "allowed: a fraction giving a whole, even width that is a multiple "
					    "of 16 (16-byte pieces), e.g. 0.5 or 1",
				     f, f * (double)d, (long long)d);
	return LG_OK;
}

static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	(void)t;
	bool bwd = s->pass == LG_PASS_BACKWARD;
	p->v[P_D] = lg_spec_int(s, K_HEAD_DIM);
	p->v[P_H] = lg_spec_int(s, K_Q_HEADS);
	p->v[P_HKV] = lg_spec_int(s, K_KV_HEADS);
	p->v[P_R] = rotated(s);
	p->v[P_BWD] = bwd;
	p->v[P_VARLEN] = lg_spec_int(s, K_VARLEN);
	p->tile[K_THREADS] = p->v[P_THREADS] = lg_spec_has(s, K_THREADS) ? lg_spec_int(s, K_THREADS) : 256;
	p->tile[K_TOKENS] = p->v[P_TOKENS] = lg_spec_has(s, K_TOKENS) ? lg_spec_int(s, K_TOKENS)
						    : default_tokens(p->v[P_D], p->v[P_H], p->v[P_HKV], p->v[P_THREADS]);
	p->v[P_CTAS] = lg_spec_has(s, K_CTAS) ? lg_spec_int(s, K_CTAS) : PDEF;
	p->tile[K_BATCH] = p->v[P_BATCH] = lg_spec_has(s, K_BATCH) ? lg_spec_int(s, K_BATCH) : bwd ? 1 : 2;
	p->tile[K_PREFETCH] = p->v[P_PREFETCH] = lg_spec_has(s, K_PREFETCH) ? lg_spec_int(s, K_PREFETCH) : 1;
	/* ptxas 13.0, sm_90a, 256 threads: forward 49-62 registers a thread
	 * (4 CTAs an SM) with no minimum, 65 with prefetch (the loads held
	 * across the table), so it then asks for 1024 threads an SM (64
	 * registers, no spill at D 128); backward 76 without SiLU, 102 with it, so the
	 * backward asks for 3 CTAs an SM (80 registers), which its default
	 * persistent grid fills */
	p->tile[K_MIN_CTAS] = p->v[P_MIN_CTAS] = lg_spec_has(s, K_MIN_CTAS) ? lg_spec_int(s, K_MIN_CTAS)
						 : bwd ? 3 : p->v[P_PREFETCH] ? 1024 / p->v[P_THREADS] : 1;
	if (bwd)
		p->tile[K_CTAS] = p->v[P_CTAS];
	p->nentries = bwd ? 2 : 1;
	snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
	if (bwd)
		snprintf(p->entry[1], sizeof p->entry[1], "%s_dw", s->entry);
	p->early[1] = bwd && t->sm >= 90;
	return LG_OK;
}

/* The fixed form's tokens (qkv rows) seq x batch below 2^31: the 32-bit
 * divisions of lg_position and lg_out_row, and the forward's grid. */
static lg_status check_sizes(const struct lg_plan *p, const int64_t *sz)
{
	if (p->v[P_VARLEN] || sz[0] * sz[1] < ((int64_t)1 << 31))
		return LG_OK;
	return lg_fail(LG_ERR_INVALID_ARG, "%s: seq x batch = %lld x %lld, allowed: a product below 2^31 "
		       "(tokens indexed in 32 bits)", p->entry[0], (long long)sz[0], (long long)sz[1]);
}

static int64_t ctas(const struct lg_plan *p, int64_t tokens)
{
	int64_t n = (tokens + p->v[P_TOKENS] - 1) / p->v[P_TOKENS];
	return p->v[P_BWD] && n > p->v[P_CTAS] ? p->v[P_CTAS] : n;
}

static void geometry(const struct lg_plan *p, int e, const int64_t *sz, struct lg_launch_dim *d)
{
	d->grid[1] = d->grid[2] = d->block[1] = d->block[2] = 1;
	d->smem = 0;
	if (e == 1) { /* the weight gradients: 32 columns a CTA, also at 0 tokens */
		d->grid[0] = (unsigned)(2 * p->v[P_D] / DW_COLS);
		d->block[0] = 1024;
		return;
	}
	d->grid[0] = (unsigned)ctas(p, p->v[P_VARLEN] ? sz[0] : sz[0] * sz[1]);
	d->block[0] = (unsigned)p->v[P_THREADS];
}

static size_t workspace(const struct lg_plan *p)
{
	return p->v[P_BWD] ? (size_t)p->v[P_CTAS] * 2 * (size_t)p->v[P_D] * 4 : 0;
}

/* ------------------------------------------------------------ emission */

/* The kernel's shape, for the emitters below. A head vector of d features
 * is held by `lanes` = d / 16 lanes, two 16-byte pieces each; a CTA's
 * `groups` lane groups take `tokens` tokens, `gt` lane groups a token. */
struct shape {
	int64_t d, hq, hkv, r, heads; /* heads: q_heads + 2 kv_heads per token */
	int lanes, groups, gt, tokens, threads, ctas, min_ctas;
	int64_t nq, nkv; /* rounds of a lane group: over the q heads, over the k and v heads */
	int bq, bkv;     /* rounds whose loads are issued together */
	bool bs, plain, silu, bwd, pdl; /* pdl: the dw entry launches early (sm_90+) */
	bool varlen, pf, pf2; /* the first batches loaded before the table; pf2: tile.prefetch 2 */
	int64_t cp, cp_rank;
	double mscale;
};

static struct shape shape_of(const struct lg_spec *s, const struct lg_plan *p)
{
	struct shape k = {.d = p->v[P_D], .hq = p->v[P_H], .hkv = p->v[P_HKV], .r = p->v[P_R],
			  .tokens = (int)p->v[P_TOKENS], .threads = (int)p->v[P_THREADS], .ctas = (int)p->v[P_CTAS],
			  .min_ctas = (int)p->v[P_MIN_CTAS],
			  .bs = lg_spec_int(s, K_ORDER) == 1, .plain = lg_spec_int(s, K_HEADS) == 1,
			  .silu = lg_spec_int(s, K_SILU) != 0, .bwd = p->v[P_BWD] != 0,
			  .pdl = p->early[1], .varlen = p->v[P_VARLEN] != 0, .pf = p->v[P_PREFETCH] != 0,
			  .pf2 = p->v[P_PREFETCH] == 2,
			  .cp = lg_spec_int(s, K_CP_SIZE),
			  .cp_rank = lg_spec_int(s, K_CP_RANK), .mscale = lg_spec_num(s, K_MSCALE)};
	k.heads = k.hq + 2 * k.hkv;
	k.lanes = (int)(k.d / 16);
	k.groups = k.threads / k.lanes;
	k.gt = k.groups / k.tokens;
	k.nq = rounds_of(k.hq, k.gt);
	k.nkv = rounds_of(2 * k.hkv, k.gt);
	/* tile.batch rounds loaded together: 8 registers a round (x), 16 in
	 * the backward (x and g); with prefetch, a batch of q heads and one of
	 * k | v heads are held at once */
	int64_t most = p->v[P_BATCH];
	k.bq = (int)(k.nq < most ? k.nq : most);
	k.bkv = (int)(k.nkv < most ? k.nkv : most);
	return k;
}

/* lg_tokens(S, B): the qkv rows; lg_position(n, S, B, cu): the rotary
 * position of row n (docs/kernels.md K2, K2b). */
static void emit_position(lg_buf *b, const struct shape *k)
{
	lg_comment(b, "The tokens (qkv rows): %s.", k->varlen ? "S, packed sequences" : "S x B");
	lg_line(b, "static __device__ __forceinline__ i64 lg_tokens(i64 S, i64 B) { return %s; }",
		k->varlen ? "(void)B, S" : "S * B");
	lg_comment(b, "The rotary position of qkv row n%s.",
		   k->varlen ? ": its index in its sequence (cu: global bounds / cp_size)" : "");
	lg_line(b, "static __device__ __forceinline__ i64 lg_position(i64 n, i64 S, i64 B, const int *cu)");
	lg_open(b, "{");
	if (!k->varlen && k->cp == 1) {
		lg_line(b, "(void)cu;");
		lg_line(b, "return %s; // 32-bit: S B < 2^31", k->bs ? "(u32)n % (u32)S" : "(u32)n / (u32)B");
		lg_close(b);
		return;
	}
	if (k->varlen) {
		lg_line(b, "i64 lo = 0, start = 0%s;", k->cp > 1 ? ", l = S" : "");
		lg_open(b, "if (B > 0) { // the last sequence starting at or before n");
		lg_line(b, "i64 hi = B - 1;");
		lg_open(b, "while (lo < hi) {");
		lg_line(b, "const i64 mid = (lo + hi + 1) / 2;");
		lg_line(b, "if ((i64)cu[mid] / %lld <= n) lo = mid; else hi = mid - 1;", (long long)k->cp);
		lg_close(b);
		lg_line(b, "start = (i64)cu[lo] / %lld;", (long long)k->cp);
		if (k->cp > 1)
			lg_line(b, "l = (i64)cu[lo + 1] / %lld - start;", (long long)k->cp);
		lg_close(b);
		lg_line(b, "const i64 i = n - start;");
	} else {
		lg_line(b, "(void)cu;");
		lg_line(b, "const i64 i = %s, l = S; // 32-bit: S B < 2^31", k->bs ? "(u32)n % (u32)S" : "(u32)n / (u32)B");
	}
	if (k->cp > 1) {
		lg_comment(b, "Context parallel: this rank holds halves %lld and %lld of each sequence.",
			   (long long)k->cp_rank, (long long)(2 * k->cp - 1 - k->cp_rank));
		lg_line(b, "const i64 h = l / 2;");
		lg_line(b, "const i64 p = i < h ? %lld * h + i : %lld * h + (i - h);", (long long)k->cp_rank,
			(long long)(2 * k->cp - 1 - k->cp_rank));
	} else {
		lg_line(b, "const i64 p = i;");
	}
	lg_comment(b, "Within the freqs table whatever cu holds.");
	lg_line(b, "return p < 0 ? 0 : p >= S * %lld ? S * %lld - 1 : p;", (long long)k->cp, (long long)k->cp);
	lg_close(b);
}

static void emit_helpers(lg_buf *b, const struct lg_spec *s, const struct shape *k)
{
	char eps[LG_FLOAT_LITERAL_MAX];
	lg_float_literal(lg_spec_num(s, K_EPS), eps);
	lg_comment(b, "Reciprocal RMS of a head vector from its fp32 sum of squares.");
	lg_line(b, "static __device__ __forceinline__ float lg_rrms_head(float sumsq)");
	lg_open(b, "{");
	lg_line(b, "return 1.0f / sqrtf(sumsq / %lld.0f + %s);", (long long)k->d, eps);
	lg_close(b);
	lg_comment(b, "The 8 bf16 of a piece as floats, and back (round to nearest even).");
	lg_line(b, "static __device__ __forceinline__ void lg_unpack8(lg_u32x4 v, float *f)");
	lg_open(b, "{");
	lg_line(b, "const u32 w[4] = {v.x, v.y, v.z, v.w};");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int e = 0; e < 4; e++) f[2 * e] = lg_bf16_lo(w[e]), f[2 * e + 1] = lg_bf16_hi(w[e]);");
	lg_close(b);
	lg_line(b, "static __device__ __forceinline__ lg_u32x4 lg_ld16_if(const void *p, bool live)");
	lg_open(b, "{");
	lg_line(b, "return live ? lg_ld16(p) : lg_u32x4{0u, 0u, 0u, 0u};");
	lg_close(b);
	lg_line(b, "static __device__ __forceinline__ lg_u32x4 lg_pack8(const float *f)");
	lg_open(b, "{");
	lg_line(b, "return lg_u32x4{lg_pack_bf16x2(f[0], f[1]), lg_pack_bf16x2(f[2], f[3]),");
	lg_line(b, "\tlg_pack_bf16x2(f[4], f[5]), lg_pack_bf16x2(f[6], f[7])};");
	lg_close(b);
	lg_comment(b, "8 floats of shared memory (16-byte aligned), two 16-byte reads.");
	lg_line(b, "static __device__ __forceinline__ void lg_lds8(const float *p, float *f)");
	lg_open(b, "{");
	lg_line(b, "const float4 u = ((const float4 *)p)[0], w = ((const float4 *)p)[1];");
	lg_line(b, "f[0] = u.x, f[1] = u.y, f[2] = u.z, f[3] = u.w;");
	lg_line(b, "f[4] = w.x, f[5] = w.y, f[6] = w.z, f[7] = w.w;");
	lg_close(b);
	lg_comment(b, "The lane's two pieces of a head (features e0.., e1..): loads (zeros when not");
	lg_comment(b, "live), as floats, stores.");
	lg_line(b, "static __device__ __forceinline__ void lg_ld2(const u8 *p, int e0, int e1, bool live,");
	lg_line(b, "\tlg_u32x4 &a, lg_u32x4 &b)");
	lg_open(b, "{");
	lg_line(b, "a = lg_ld16_if(p + e0 * 2, live), b = lg_ld16_if(p + e1 * 2, live);");
	lg_close(b);
	lg_line(b, "static __device__ __forceinline__ void lg_unpack2(lg_u32x4 a, lg_u32x4 b, float *fa, float *fb)");
	lg_open(b, "{");
	lg_line(b, "lg_unpack8(a, fa), lg_unpack8(b, fb);");
	lg_close(b);
	lg_line(b, "static __device__ __forceinline__ void lg_st2(u8 *p, int e0, int e1, const float *a, const float *b)");
	lg_open(b, "{");
	lg_line(b, "lg_st16(p + e0 * 2, lg_pack8(a)), lg_st16(p + e1 * 2, lg_pack8(b));");
	lg_close(b);
	lg_comment(b, "The sum of squares of the two pieces (two chains).");
	lg_line(b, "static __device__ __forceinline__ float lg_sumsq2(const float *a, const float *b)");
	lg_open(b, "{");
	lg_line(b, "float sa = 0.0f, sb = 0.0f;");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int e = 0; e < 8; e++) sa += a[e] * a[e], sb += b[e] * b[e];");
	lg_line(b, "return sa + sb;");
	lg_close(b);
	lg_comment(b, "%s rotate-half RoPE of the halves a, b (8 floats each) by the angles",
		   k->bwd ? "Transposed" : "The");
	lg_comment(b, "whose cos and sin are at c and s (shared memory): %s.",
		   k->bwd ? "a c + b s, b c - a s" : "a c - b s, b c + a s");
	lg_line(b, "static __device__ __forceinline__ void lg_rope8(float *a, float *b, const float *c, const float *s)");
	lg_open(b, "{");
	lg_line(b, "float cs[8], sn[8];");
	lg_line(b, "lg_lds8(c, cs), lg_lds8(s, sn);");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int e = 0; e < 8; e++) {");
	lg_line(b, "const float x = a[e], y = b[e];");
	lg_line(b, "a[e] = x * cs[e] %c y * sn[e];", k->bwd ? '+' : '-');
	lg_line(b, "b[e] = y * cs[e] %c x * sn[e];", k->bwd ? '-' : '+');
	lg_close(b);
	lg_close(b);
	if (k->bwd) {
		lg_comment(b, "p[0..7] += u r g (shared memory, 16-byte aligned; one lane's own floats).");
		lg_line(b, "static __device__ __forceinline__ void lg_acc8(float *p, const float *u, float r, "
			   "const float *g)");
		lg_open(b, "{");
		lg_line(b, "float f[8];");
		lg_line(b, "lg_lds8(p, f);");
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int e = 0; e < 8; e++) f[e] += u[e] * r * g[e];");
		lg_line(b, "((float4 *)p)[0] = make_float4(f[0], f[1], f[2], f[3]);");
		lg_line(b, "((float4 *)p)[1] = make_float4(f[4], f[5], f[6], f[7]);");
		lg_close(b);
		lg_comment(b, "The RMSNorm backward of a piece: g = r g w - c3 u, w at p (shared memory).");
		lg_line(b, "static __device__ __forceinline__ void lg_dnorm8(float *g, const float *u, float r, float c3,");
		lg_line(b, "\tconst float *p)");
		lg_open(b, "{");
		lg_line(b, "float w[8];");
		lg_line(b, "lg_lds8(p, w);");
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int e = 0; e < 8; e++) g[e] = r * g[e] * w[e] - c3 * u[e];");
		lg_close(b);
		lg_comment(b, "sum u g w of a piece, w at p (shared memory).");
		lg_line(b, "static __device__ __forceinline__ float lg_dot8(const float *u, const float *g, const float *p)");
		lg_open(b, "{");
		lg_line(b, "float w[8], d = 0.0f;");
		lg_line(b, "lg_lds8(p, w);");
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int e = 0; e < 8; e++) d += u[e] * g[e] * w[e];");
		lg_line(b, "return d;");
		lg_close(b);
	} else {
		lg_comment(b, "The RMSNorm of a piece: y = (y r) w, w at p (shared memory).");
		lg_line(b, "static __device__ __forceinline__ void lg_norm8(float *y, float r, const float *p)");
		lg_open(b, "{");
		lg_line(b, "float w[8];");
		lg_line(b, "lg_lds8(p, w);");
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int e = 0; e < 8; e++) y[e] = (y[e] * r) * w[e];");
		lg_close(b);
	}
	if (k->silu) {
		lg_comment(b, "The logistic function, with an accurate exp (expf).");
		lg_line(b, "static __device__ __forceinline__ float lg_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }");
	}
	emit_position(b, k);
	lg_comment(b, "The [batch, seq] row of the outputs of qkv row n.");
	lg_line(b, "static __device__ __forceinline__ i64 lg_out_row(i64 n, i64 S, i64 B)");
	lg_open(b, "{");
	if (k->bs || k->varlen) {
		lg_line(b, "(void)S, (void)B;");
		lg_line(b, "return n;%s", k->varlen ? " // packed: [1, T]" : "");
	} else {
		lg_comment(b, "32-bit division: S B < 2^31 (the sizes' bounds).");
		lg_line(b, "const u32 m = (u32)n, b = (u32)B;");
		lg_line(b, "return (i64)(m %% b) * S + m / b;");
	}
	lg_close(b);
	lg_comment(b, "Where head j of a token (q heads, then k, then v) sits in its qkv row, in heads.");
	lg_line(b, "static __device__ __forceinline__ int lg_qkv_slot(int j)");
	lg_open(b, "{");
	if (k->plain) {
		lg_comment(b, "plain: q | k | v");
		lg_line(b, "return j;");
	} else {
		int64_t w = k->hq / k->hkv;
		lg_comment(b, "interleaved: per kv group g, [%lld q heads, k, v]", (long long)w);
		lg_line(b, "if (j < %lld) return j + 2 * (j / %lld);", (long long)k->hq, (long long)w);
		lg_line(b, "if (j < %lld) return (j - %lld) * %lld + %lld;", (long long)(k->hq + k->hkv),
			(long long)k->hq, (long long)(w + 2), (long long)w);
		lg_line(b, "return (j - %lld) * %lld + %lld;", (long long)(k->hq + k->hkv), (long long)(w + 2),
			(long long)(w + 1));
	}
	lg_close(b);
}

/* j, live, isv (kv) of round i0 + ib; with `out`, ho and po: the output
 * head (the backward: the gradient's); with `in`, px: the qkv head. */
static void emit_round(lg_buf *b, const struct shape *k, bool kv, bool out, bool in)
{
	lg_line(b, "const int j = jg + (i0 + ib) * %d; // %s", k->gt, kv ? "k heads, then v heads" : "q head");
	lg_line(b, "const bool live = tok && j < %lld;", (long long)(kv ? 2 * k->hkv : k->hq));
	if (kv && (out || !in || k->bwd))
		lg_line(b, "const bool isv = j >= %lld;", (long long)k->hkv);
	if (in) {
		if (kv)
			lg_line(b, "const u8 *const px = xrow + lg_qkv_slot(%lld + j) * %lld;", (long long)k->hq,
				(long long)(k->d * 2));
		else
			lg_line(b, "const u8 *const px = xrow + lg_qkv_slot(j) * %lld;", (long long)(k->d * 2));
	}
	if (!out)
		return;
	if (kv) {
		lg_line(b, "const i64 ho = ob * %lld + (isv ? j - %lld : j);", (long long)k->hkv, (long long)k->hkv);
		lg_line(b, "%su8 *const po = (%su8 *)(isv ? %s : %s) + ho * %lld;", k->bwd ? "const " : "",
			k->bwd ? "const " : "", k->bwd ? "gv" : "v", k->bwd ? "gk" : "k", (long long)(k->d * 2));
	} else {
		lg_line(b, "%su8 *const po = (%su8 *)%s + (ob * %lld + j) * %lld;", k->bwd ? "const " : "",
			k->bwd ? "const " : "", k->bwd ? "gq" : "q", (long long)k->hq, (long long)(k->d * 2));
	}
}

/* The lane group's token n (qkv row), whether it exists and its qkv row. */
static void emit_token(lg_buf *b, const struct shape *k)
{
	lg_line(b, "const i64 n = n0 + tl; // the lane group's token (qkv row)");
	lg_line(b, "const bool tok = n < N;");
	lg_line(b, "const u8 *const xrow = (const u8 *)qkv + n * %lld;", (long long)(k->heads * k->d * 2));
}

/* Whether the tokens' output rows are a shared table (one division a
 * token) rather than one division a lane: all but the backward with
 * prefetch, whose first gradient loads need them before the table. */
static bool orow_table(const struct shape *k)
{
	return !(k->pf && k->bwd);
}

/* Whether the first batch of q heads (kv false) or of k | v heads is
 * loaded before the sin/cos table, with prefetch: the q heads' always, the
 * k | v heads' in the forward when the q heads are one batch (else it
 * would be held across the q heads' later batches), in the backward only
 * with tile.prefetch 2 (16 more registers than 3 CTAs an SM allow: for
 * 2 CTAs an SM, with tile.batch covering the q heads all heads of the lane
 * group are in flight before the table). */
static bool preloaded(const struct shape *k, bool kv)
{
	return k->pf && (!kv || ((!k->bwd || k->pf2) && k->nq <= k->bq));
}

/* The loads of a batch of rounds (i0 + ib) of q heads (kv false) or k | v
 * heads: x into <c>xa, <c>xb (and the backward's g into <c>ga, <c>gb). */
static void emit_load_rounds(lg_buf *b, const struct shape *k, bool kv, const char *c)
{
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int ib = 0; ib < %d; ib++) {", kv ? k->bkv : k->bq);
	emit_round(b, k, kv, k->bwd, true);
	lg_line(b, "lg_ld2(px, e0, e1, live, %sxa[ib], %sxb[ib]);", c, c);
	if (k->bwd)
		lg_line(b, "lg_ld2(po, e0, e1, live, %sga[ib], %sgb[ib]);", c, c);
	lg_close(b);
}

/* Declares a batch's registers <c>xa, <c>xb (<c>ga, <c>gb) and loads them;
 * `pre`: the first batch, before the table (c: "q" or "k", for its kind),
 * which emit_heads_open takes over. */
static void emit_loads(lg_buf *b, const struct shape *k, bool kv, bool pre)
{
	int batch = kv ? k->bkv : k->bq;
	const char *c = pre ? (kv ? "k" : "q") : "";
	lg_line(b, "lg_u32x4 %sxa[%d], %sxb[%d];", c, batch, c, batch);
	if (k->bwd)
		lg_line(b, "lg_u32x4 %sga[%d], %sgb[%d];", c, batch, c, batch);
	if (pre) {
		lg_open(b, "{");
		lg_line(b, "const int i0 = 0;");
	}
	emit_load_rounds(b, k, kv, c);
	if (pre)
		lg_close(b);
}

/* Declarations shared by both kernels: the lane's pieces, its lane group's
 * token and first head, the sin/cos table, and (the backward) the opening
 * of the persistent loop over token groups; with prefetch, the first
 * batches' loads (emit_loads) before the table. Leaves n, tok, xrow, ob. */
static void emit_walk_open(lg_buf *b, const struct shape *k)
{
	int64_t half = k->r / 2, rp = k->r / 16;
	lg_line(b, "__shared__ __align__(16) float ct[%d][%lld], st[%d][%lld]; // cos, sin of each token's R/2 angles",
		k->tokens, (long long)half, k->tokens, (long long)half);
	if (orow_table(k))
		lg_line(b, "__shared__ i64 orow[%d]; // the tokens' [batch, seq] rows", k->tokens);
	lg_line(b, "const int l = threadIdx.x %% %d; // the lane in its group", k->lanes);
	lg_line(b, "const int grp = threadIdx.x / %d; // the lane group", k->lanes);
	lg_line(b, "const int tl = grp / %d, jg = grp %% %d; // its token of the CTA's, its first head", k->gt,
		k->gt);
	lg_comment(b, "Rotating lanes hold pieces l and l + %lld (the halves a, b of [0, %lld)); the others",
		   (long long)rp, (long long)k->r);
	lg_comment(b, "two of [%lld, %lld), %lld features apart. e0, e1: the pieces' first features.",
		   (long long)k->r, (long long)k->d, (long long)(k->d - k->r) / 2);
	lg_line(b, "const bool rot = l < %lld;", (long long)rp);
	lg_line(b, "const int e0 = (rot ? l : l + %lld) * 8, e1 = e0 + (rot ? %lld : %lld);", (long long)rp,
		(long long)half, (long long)(k->d - k->r) / 2);
	lg_line(b, "__shared__ __align__(16) float wt[2][%lld]; // q_weight | k_weight as floats", (long long)k->d);
	lg_line(b, "for (int i = threadIdx.x; i < %lld; i += %d) // read after the first __syncthreads", (long long)(2 * k->d),
		k->threads);
	lg_line(b, "\twt[i / %lld][i %% %lld] = lg_u2f((u32)((const unsigned short *)(i < %lld ? q_weight",
		(long long)k->d, (long long)k->d, (long long)k->d);
	lg_line(b, "\t\t: k_weight))[i %% %lld] << 16);", (long long)k->d);
	lg_line(b, "const i64 N = lg_tokens(S, B);");
	if (k->bwd) {
		lg_open(b, "for (i64 n0 = (i64)blockIdx.x * %d; n0 < N; n0 += lg_ctas(N) * %d) {", k->tokens,
			k->tokens);
	} else {
		lg_line(b, "const i64 n0 = (i64)blockIdx.x * %d; // the CTA's tokens", k->tokens);
	}
	if (k->pf) {
		emit_token(b, k);
		if (!orow_table(k))
			lg_line(b, "const i64 ob = lg_out_row(n, S, B); // the output row");
		lg_comment(b, "The first loads (prefetch), in flight while the table is built.");
		emit_loads(b, k, false, true);
		if (preloaded(k, true))
			emit_loads(b, k, true, true);
	}
	if (k->bwd)
		lg_line(b, "__syncthreads(); // the previous tokens' table is no longer read");
	lg_comment(b, "sin and cos once per token, shared by its heads.");
	lg_open(b, "for (int i = threadIdx.x; i < %lld; i += %d) {", (long long)(k->tokens * half), k->threads);
	lg_line(b, "const i64 nt = n0 + i / %lld; // its token", (long long)half);
	lg_line(b, "if (nt >= N) break;");
	lg_line(b, "const i64 p = lg_position(nt, S, B, (const int *)cu_seqlens);");
	lg_line(b, "float sn, cn;");
	lg_line(b, "sincosf(((const float *)freqs)[p * %lld + i %% %lld], &sn, &cn);", (long long)k->r,
		(long long)half);
	if (k->mscale != 1.0) {
		char ms[LG_FLOAT_LITERAL_MAX];
		lg_float_literal(k->mscale, ms);
		lg_line(b, "sn *= %s, cn *= %s; // mscale", ms, ms);
	}
	lg_line(b, "ct[i / %lld][i %% %lld] = cn, st[i / %lld][i %% %lld] = sn;", (long long)half,
		(long long)half, (long long)half, (long long)half);
	lg_close(b);
	if (orow_table(k)) {
		lg_comment(b, "The tokens' output rows (one 32-bit division each, not one a lane).");
		lg_line(b, "if (threadIdx.x < %d) orow[threadIdx.x] = lg_out_row(n0 + threadIdx.x, S, B);", k->tokens);
	}
	lg_line(b, "__syncthreads();");
	if (!k->pf)
		emit_token(b, k);
	if (orow_table(k))
		lg_line(b, "const i64 ob = orow[tl];");
}

/* One kind of heads of the lane group's token: q (kv false: hq heads, q
 * weight) or k then v (2 kv_heads, k weight). Opens the loop over its
 * rounds, `batch` at a time, issues their loads (x, and g in the backward;
 * with prefetch the first batch's are those of emit_walk_open) and opens
 * the loop over them that does the work (emit_round's names). */
static void emit_heads_open(lg_buf *b, const struct shape *k, bool kv)
{
	int64_t nr = kv ? k->nkv : k->nq;
	int batch = kv ? k->bkv : k->bq;
	const char *c = kv ? "k" : "q";
	lg_comment(b, "%s heads jg, jg + %d, ...: %lld round(s), the loads of %d at a time.", kv ? "k then v" : "q",
		   k->gt, (long long)nr, batch);
	lg_open(b, "for (int i0 = 0; i0 < %lld; i0 += %d) {", (long long)nr, batch);
	if (preloaded(k, kv)) {
		lg_line(b, "lg_u32x4 *const xa = %sxa, *const xb = %sxb; // the first batch: prefetched", c, c);
		if (k->bwd)
			lg_line(b, "lg_u32x4 *const ga = %sga, *const gb = %sgb;", c, c);
		if (nr > batch) {
			lg_open(b, "if (i0 > 0) {");
			emit_load_rounds(b, k, kv, "");
			lg_close(b);
		}
	} else {
		emit_loads(b, k, kv, false);
	}
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int ib = 0; ib < %d; ib++) {", batch);
	emit_round(b, k, kv, !k->bwd, k->bwd);
}

/* Closes emit_heads_open's loops. */
static void emit_heads_close(lg_buf *b)
{
	lg_close(b); /* the rounds of the batch */
	lg_close(b); /* the batches */
}

/* The forward's work on one head (ya, yb: the lane's two pieces). */
static void emit_forward_head(lg_buf *b, const struct shape *k, bool kv)
{
	lg_line(b, "float ya[8], yb[8];");
	lg_line(b, "lg_unpack2(xa[ib], xb[ib], ya, yb);");
	if (k->silu) {
		lg_line(b, "#pragma unroll");
		lg_open(b, "for (int e = 0; e < 8; e++) { // SiLU");
		lg_line(b, "ya[e] *= lg_sigmoid(ya[e]);");
		lg_line(b, "yb[e] *= lg_sigmoid(yb[e]);");
		lg_close(b);
	}
	lg_comment(b, "RMS of the head vector (lane group), fp32: a fixed butterfly, every lane.");
	lg_line(b, "const float r = lg_rrms_head(lg_sum_xor(lg_sumsq2(ya, yb), 1, %d));", k->lanes / 2);
	if (kv)
		lg_open(b, "if (!isv) { // v: copied");
	lg_line(b, "lg_norm8(ya, r, &wt[%d][e0]), lg_norm8(yb, r, &wt[%d][e1]);", kv, kv);
	lg_line(b, "if (rot) lg_rope8(ya, yb, &ct[tl][e0], &st[tl][e0]);");
	if (kv)
		lg_close(b);
	lg_line(b, "if (live) lg_st2(po, e0, e1, ya, yb);");
}

static void emit_forward(lg_buf *b, const struct lg_spec *s, const struct shape *k, const char *name)
{
	lg_section(b, name, "q/k RMSNorm + RoPE + split, forward");
	lg_comment(b, "%d lanes a head vector, %d lane groups a CTA, %d tokens: %d lane groups a token.", k->lanes,
		   k->groups, k->tokens, k->gt);
	char lb[48];
	lg_emit_signature(b, s, name, "%s", lg_launch_bounds(lb, k->threads, k->min_ctas));
	lg_open(b, "{");
	emit_walk_open(b, k);
	for (int kv = 0; kv < 2; kv++) {
		emit_heads_open(b, k, kv);
		emit_forward_head(b, k, kv);
		emit_heads_close(b);
	}
	lg_close(b);
}

/* The backward's work on one head: dqkv from x, g (two pieces each). */
static void emit_backward_head(lg_buf *b, const struct shape *k, bool kv)
{
	lg_line(b, "float x0[8], x1[8], g0[8], g1[8];");
	lg_line(b, "lg_unpack2(xa[ib], xb[ib], x0, x1);");
	lg_line(b, "lg_unpack2(ga[ib], gb[ib], g0, g1);");
	if (k->silu) {
		lg_line(b, "float u0[8], u1[8], s0[8], s1[8]; // SiLU: u = x s(x)");
		lg_line(b, "#pragma unroll");
		lg_open(b, "for (int e = 0; e < 8; e++) {");
		lg_line(b, "s0[e] = lg_sigmoid(x0[e]), s1[e] = lg_sigmoid(x1[e]);");
		lg_line(b, "u0[e] = x0[e] * s0[e], u1[e] = x1[e] * s1[e];");
		lg_close(b);
	} else {
		lg_line(b, "const float *const u0 = x0, *const u1 = x1;");
	}
	lg_line(b, "if (rot%s) lg_rope8(g0, g1, &ct[tl][e0], &st[tl][e0]);", kv ? " && !isv" : "");
	lg_comment(b, "Butterflies over the lane group (every lane).");
	lg_line(b, "const float ss = lg_sum_xor(lg_sumsq2(u0, u1), 1, %d);", k->lanes / 2);
	lg_line(b, "float dot = lg_dot8(u0, g0, &wt[%d][e0]);", kv);
	lg_line(b, "dot = lg_sum_xor(dot + lg_dot8(u1, g1, &wt[%d][e1]), 1, %d);", kv, k->lanes / 2);
	lg_open(b, "if (live%s) {", kv ? " && !isv" : "");
	lg_comment(b, "du = r g w - r^3 u dot / D; the lane group's dw += u r g.");
	lg_line(b, "const float r = lg_rrms_head(ss);");
	lg_line(b, "const float c3 = r * r * r * (dot / %lld.0f);", (long long)k->d);
	lg_line(b, "float *const acc = dwp[grp]%s%.0lld;", kv ? " + " : "", (long long)(kv ? k->d : 0));
	lg_line(b, "lg_acc8(acc + e0, u0, r, g0), lg_acc8(acc + e1, u1, r, g1);");
	lg_line(b, "lg_dnorm8(g0, u0, r, c3, &wt[%d][e0]);", kv);
	lg_line(b, "lg_dnorm8(g1, u1, r, c3, &wt[%d][e1]);", kv);
	lg_close(b);
	if (k->silu) {
		lg_comment(b, "Through the SiLU: d/dx x s(x) = s (1 + x (1 - s)).");
		lg_line(b, "#pragma unroll");
		lg_open(b, "for (int e = 0; e < 8; e++) {");
		lg_line(b, "g0[e] *= s0[e] * (1.0f + x0[e] * (1.0f - s0[e]));");
		lg_line(b, "g1[e] *= s1[e] * (1.0f + x1[e] * (1.0f - s1[e]));");
		lg_close(b);
	}
	lg_line(b, "u8 *const pd = (u8 *)dqkv + (px - (const u8 *)qkv); // in dqkv");
	lg_line(b, "if (live) lg_st2(pd, e0, e1, g0, g1);");
}

static void emit_backward_rows(lg_buf *b, const struct lg_spec *s, const struct shape *k, const char *name)
{
	lg_section(b, name, "q/k RMSNorm + RoPE + split, backward: dqkv and weight partials");
	lg_comment(b, "Persistent grid of min(ceil(S B / %d), %d) CTAs; %d lanes a head vector, %d lane groups",
		   k->tokens, k->ctas, k->lanes, k->groups);
	lg_comment(b, "a CTA, %d a token.", k->gt);
	lg_line(b, "static __device__ __forceinline__ i64 lg_ctas(i64 N)");
	lg_open(b, "{");
	if (k->tokens > 1)
		lg_line(b, "const i64 n = (N + %d) / %d;", k->tokens - 1, k->tokens);
	else
		lg_line(b, "const i64 n = N;");
	lg_line(b, "return n < %d ? n : %d;", k->ctas, k->ctas);
	lg_close(b);
	lg_line(b, "%s", "");
	char lb[48];
	lg_emit_signature(b, s, name, "%s", lg_launch_bounds(lb, k->threads, k->min_ctas));
	lg_open(b, "{");
	lg_line(b, "__shared__ __align__(16) float dwp[%d][%lld]; // lane groups' partials: dq_weight | dk_weight",
		k->groups, (long long)(2 * k->d));
	lg_line(b, "for (int i = threadIdx.x; i < %lld; i += %d) dwp[i / %lld][i %% %lld] = 0.0f;",
		(long long)(k->groups * 2 * k->d), k->threads, (long long)(2 * k->d), (long long)(2 * k->d));
	if (k->pdl)
		lg_line(b, "asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\"); // dw may be scheduled");
	emit_walk_open(b, k);
	for (int kv = 0; kv < 2; kv++) {
		emit_heads_open(b, k, kv);
		emit_backward_head(b, k, kv);
		emit_heads_close(b);
	}
	lg_close(b); /* the token groups */
	lg_comment(b, "The lane groups' partials, added in group order: one workspace row per CTA.");
	lg_line(b, "__syncthreads();");
	lg_open(b, "for (int col = threadIdx.x; col < %lld; col += %d) {", (long long)(2 * k->d), k->threads);
	lg_line(b, "float sum = 0.0f;");
	lg_line(b, "for (int g = 0; g < %d; g++) sum += dwp[g][col];", k->groups);
	lg_line(b, "((float *)ws)[(i64)blockIdx.x * %lld + col] = sum;", (long long)(2 * k->d));
	lg_close(b);
	lg_close(b);
}

static void emit_backward_dw(lg_buf *b, const struct lg_spec *s, const struct shape *k, const char *name)
{
	lg_section(b, name, "dq_weight and dk_weight from the partials");
	lg_comment(b, "%d columns a CTA (of dq_weight | dk_weight); its 32 row groups each add every 32nd", DW_COLS);
	lg_comment(b, "workspace row in CTA order, then group 0 adds the groups in order: deterministic.");
	lg_emit_signature(b, s, name, "__launch_bounds__(1024)");
	lg_open(b, "{");
	lg_line(b, "__shared__ float grp[32][%d]; // the row groups' sums", DW_COLS);
	if (k->pdl)
		lg_line(b, "asm volatile(\"griddepcontrol.wait;\" ::: \"memory\"); // the partials are written");
	lg_line(b, "const int lane = threadIdx.x %% %d, rg = threadIdx.x / %d;", DW_COLS, DW_COLS);
	lg_line(b, "const int col = blockIdx.x * %d + lane;", DW_COLS);
	lg_line(b, "const i64 n = lg_ctas(lg_tokens(S, B));");
	lg_line(b, "float sum = 0.0f;");
	lg_line(b, "#pragma unroll 4");
	lg_line(b, "for (i64 i = rg; i < n; i += 32) sum += ((const float *)ws)[i * %lld + col];",
		(long long)(2 * k->d));
	lg_line(b, "grp[rg][lane] = sum;");
	lg_line(b, "__syncthreads();");
	lg_line(b, "if (rg != 0) return;");
	lg_line(b, "for (int g = 1; g < 32; g++) sum += grp[g][lane];");
	lg_line(b, "if (col < %lld) ((float *)dq_weight)[col] = sum;", (long long)k->d);
	lg_line(b, "else ((float *)dk_weight)[col - %lld] = sum;", (long long)k->d);
	lg_close(b);
}

static void emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	(void)t;
	struct shape k = shape_of(s, p);
	lg_section(b, "helpers for this spec", NULL);
	emit_helpers(b, s, &k);
	if (k.bwd) {
		emit_backward_rows(b, s, &k, p->entry[0]);
		emit_backward_dw(b, s, &k, p->entry[1]);
	} else {
		emit_forward(b, s, &k, p->entry[0]);
	}
}

/* cu_seqlens is read only by the varlen form. */
static void uses(const struct lg_spec *s, unsigned char *used)
{
	if (!lg_spec_int(s, K_VARLEN))
		used[s->pass == LG_PASS_FORWARD ? F_CU : B_CU] = 0;
}

/* Tile variants for `lingen tune`: tokens at a time x threads per CTA
 * (the backward at most 256; 512 only with 4 or more tokens, the 1 and 2
 * token forms were twice as slow); the backward also with a persistent grid of
 * 2, 4 and 8 CTAs an SM, the forward with registers for 1 and 3 CTAs an
 * SM (tile.min_ctas); both without prefetch and with other batches. */
static int candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max)
{
	static const int64_t tok[] = {1, 2, 4, 8}, thr[] = {128, 256, 512};
	int n = 0;
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 3 - (tok[i] < 4); j++) { /* 512 threads: 4 tokens or more */
			struct lg_tile_choice c = lg_tile1(K_TOKENS, tok[i]);
			c.v[K_THREADS] = thr[j];
			c.set |= 1u << K_THREADS;
			n = lg_candidate_add(s, t, out, n, max, c);
		}
	/* the backward's persistent grid of 2, 4 and 8 CTAs an SM, registers
	 * capped for 2, 4 and 4 resident */
	for (int i = 0; s->pass == LG_PASS_BACKWARD && i < 4; i++) {
		if (ctas_ok[i] == PDEF)
			continue;
		struct lg_tile_choice c = lg_tile1(K_CTAS, ctas_ok[i]);
		c.v[K_MIN_CTAS] = ctas_ok[i] == PMAX ? 2 : 4;
		c.set |= 1u << K_MIN_CTAS;
		n = lg_candidate_add(s, t, out, n, max, c);
	}
	/* the forward's default tile with registers uncapped and capped for 3
	 * CTAs an SM (the default caps them for 4) */
	for (int m = 1; s->pass == LG_PASS_FORWARD && m <= 3; m += 2)
		n = lg_candidate_add(s, t, out, n, max, lg_tile1(K_MIN_CTAS, m));
	/* without prefetch; other batches (the backward's 2 with 2 CTAs an
	 * SM, for its registers) */
	n = lg_candidate_add(s, t, out, n, max, lg_tile1(K_PREFETCH, 0));
	for (int i = 0; batch_ok[i]; i++) {
		if (batch_ok[i] == (s->pass == LG_PASS_BACKWARD ? 1 : 2))
			continue;
		struct lg_tile_choice c = lg_tile1(K_BATCH, batch_ok[i]);
		if (s->pass == LG_PASS_BACKWARD) {
			c.v[K_CTAS] = PMAX, c.v[K_MIN_CTAS] = 2;
			c.set |= (1u << K_CTAS) | (1u << K_MIN_CTAS);
		}
		n = lg_candidate_add(s, t, out, n, max, c);
	}
	return n;
}

/* What a launch computes: the comment of its typed launcher (lingen_ops.h). */
static const char doc_forward[] =
	"K2: split qkv + q/k RMSNorm + rotate-half RoPE + transpose, forward (op \"qk_norm_rope\"):\n"
	"  qkv [seq, batch, (H + 2h) * D] bf16 (qkv_order \"seq_batch\", the default; [batch, seq,\n"
	"  ...] for \"batch_seq\"), heads as head_layout; q_weight, k_weight [D] bf16; freqs [seq *\n"
	"  cp_size, R] fp32 (R = rotary_fraction * D, cat(f, f): only [:, 0:R/2] is read); q [batch,\n"
	"  seq, H, D], k_out and v [batch, seq, h, D] bf16; cu_seqlens 0. K2b (varlen): seq = T\n"
	"  packed tokens, batch = the number of sequences: qkv [T, 1, ...], cu_seqlens [batch + 1]\n"
	"  int32 (cumulative global lengths from 0; this rank's tokens of sequence i are rows cu[i] /\n"
	"  cp_size .. cu[i + 1] / cp_size - 1), q [1, T, H, D], k_out and v [1, T, h, D].";
static const char doc_backward[] =
	"Its backward: gq, gk, gv as q, k, v; qkv, the weights, freqs and cu_seqlens as in the\n"
	"  forward; dqkv in qkv's layout bf16; dq_weight, dk_weight [D] fp32 (overwritten,\n"
	"  deterministic). workspace: lg_kernel_workspace_size(k).";

const struct lg_family lg_family_qk_norm_rope = {
	.op = "qk_norm_rope",
	.summary = "split qkv + q/k RMSNorm + rotate-half RoPE (partial) + [b, s, h, d] (K2)",
	.passes = (1u << LG_PASS_FORWARD) | (1u << LG_PASS_BACKWARD),
	.dtypes = 1u << LG_DTYPE_BF16,
	.nkeys = NKEYS,
	.keys = keys,
	.sig = {[LG_PASS_FORWARD] = {2, sizes, F_NARGS, fwd_args, doc_forward},
		[LG_PASS_BACKWARD] = {2, sizes, B_NARGS, bwd_args, doc_backward}},
	.validate = validate,
	.uses = uses,
	.plan = plan,
	.emit = emit,
	.geometry = geometry,
	.workspace = workspace,
	.check_sizes = check_sizes,
	.candidates = candidates,
};
