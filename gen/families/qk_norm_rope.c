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
 * loads of tile.batch heads (default 2; varlen, backward 1) before
 * working on them. With tile.prefetch (the default) the first batch of q
 * heads (and in the forward, when the q heads are one batch, that of the
 * k | v heads) is loaded before the sin/cos table is built and the CTA
 * synchronises, so that DRAM latency overlaps the table's (freqs load,
 * sincosf, __syncthreads) instead of following it: at the target shape
 * (D 128, 16 | 4 heads, 4 tokens of 256 threads) the forward then has all
 * its 3 heads a lane group in flight from the start. qkv is read once and
 * each output written once, 16 bytes a lane. Loops run the same number of
 * times in every lane of a warp (the shuffles need all lanes); past the
 * last token or head a lane loads and stores nothing.
 * What bounds it: latency (ncu, forward at the target: DRAM 55%, issue
 * 40%, half the stalls on the loads, each CTA waiting on the table and
 * then on its loads) and instructions (about 70 a 16-byte piece in the
 * forward), so registers are kept low for occupancy: ptxas (13.0, sm_90a,
 * 256 threads) gives the forward 60-64 registers with prefetch and no
 * minimum (4 CTAs an SM; tile.min_ctas 4 spilled) and the backward
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

#include "qk_norm_rope.h"

#include "error.h"
#include "templates.h"

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
				"1 with varlen; backward 1)"),
	[K_PREFETCH] = LG_KEY_TILE("prefetch", "p", 0, 2, NULL,
				   "1 (the default): the first batch of q heads (forward: and of k | v heads) "
				   "loaded before the sin/cos table is built; 2: the backward's k | v too"),
};

/* The fixed form also needs seq x batch below 2^31 (check_sizes); the
 * varlen form indexes tokens by seq alone (batch: the binary search of cu). */
#define TOKENS_MAX (1 << 22)
static const struct lg_size sizes[] = {
	{"seq", "S", 0, TOKENS_MAX, "positions (S); varlen: tokens (T)", 0, 0},
	/* check and bench at N tokens: seq N, batch 2 */
	{"batch", "B", 0, TOKENS_MAX, "sequences (B; seq x batch below 2^31); varlen: sequences in cu_seqlens", 2, 0},
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

/* The rotated width R (0 when the fraction does not give a whole number). */
static int64_t rotated(const struct lg_spec *s)
{
	double r = lg_spec_num(s, K_ROTARY) * (double)lg_spec_int(s, K_HEAD_DIM);
	return r == (double)(int64_t)r ? (int64_t)r : 0;
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
	/* batch: the forward 2, but 1 with varlen, whose table loop (a binary
	 * search of cu_seqlens a token, beside sincosf) runs while the first
	 * batch is held in registers: at batch 2 and the 64 registers of 4
	 * CTAs an SM ptxas 13.0 (sm_90a, default tile) spilled 8 bytes at D 128
	 * 12 | 4 heads (with cp_size 2 too), 8 at D 256, 4 at D 64 8 | 8, and
	 * with no minimum it takes 65-69 (3 CTAs an SM); at batch 1: 64, 64,
	 * 59 registers (56 at 16 | 4), no spill */
	p->tile[K_BATCH] = p->v[P_BATCH] = lg_spec_has(s, K_BATCH) ? lg_spec_int(s, K_BATCH)
						   : bwd || p->v[P_VARLEN] ? 1 : 2;
	p->tile[K_PREFETCH] = p->v[P_PREFETCH] = lg_spec_has(s, K_PREFETCH) ? lg_spec_int(s, K_PREFETCH) : 1;
	/* The forward asks no minimum: NVRTC 13.0's ptxas (sm_90a and sm_80,
	 * 256 threads, the default batch) then takes 60-64 registers a thread
	 * (4 CTAs an SM) with no spill at D 64, 128, 256, 8 to 32 q heads,
	 * varlen or not; asking for 1024 threads an SM (tile.min_ctas 4, the
	 * default before issue 27) spilled 8 bytes at the target shape (D 128,
	 * 16 | 4 heads) with prefetch. The backward: 76 registers without SiLU,
	 * 102 with it, so it asks for 3 CTAs an SM (80 registers), which its
	 * default persistent grid fills. */
	p->tile[K_MIN_CTAS] = p->v[P_MIN_CTAS] = lg_spec_has(s, K_MIN_CTAS) ? lg_spec_int(s, K_MIN_CTAS)
						 : bwd ? 3 : 1;
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
	.emit = lg_qk_norm_rope_emit,
	.geometry = geometry,
	.workspace = workspace,
	.check_sizes = check_sizes,
	.candidates = candidates,
};
