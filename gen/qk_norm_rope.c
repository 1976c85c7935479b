/*
 * qk_norm_rope.c - family "qk_norm_rope" (KERNELS.md K2): split a fused qkv
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
 * Strategy: a head vector of D features is held by D/8 lanes, one 16-byte
 * piece each (8, 16 or 32 lanes: a lane group never straddles a warp). The
 * RMS is a butterfly over the group in fp32; the partner piece of the
 * rotation (R/2 features away: R a multiple of 16) comes from a shuffle. A
 * CTA takes `tokens` tokens at a time: it first puts sin and cos of each
 * token's R/2 angles in shared memory (sincosf, the accurate version:
 * computed once per position and shared by the token's heads), then its
 * lane groups walk the tokens' heads in output order (q, k, v), issuing the
 * loads of up to 8 heads (backward: 4) before working on them. qkv is read
 * once and each output written once, 16 bytes a lane. Loops run the same
 * number of times in every lane of a warp (the shuffles need all lanes);
 * past the last token a lane loads and stores nothing.
 * Arithmetic: fp32 throughout (the RMS as 1 / sqrtf, IEEE; SiLU with expf);
 * sin and cos by sincosf, the accurate library version (NVRTC without fast
 * math), not __sinf / __cosf, whose error grows with the angle (positions
 * up to thousands of radians).
 * The backward runs a persistent grid (tile.ctas CTAs) whose lanes keep
 * their dq_weight and dk_weight partial sums (8 columns each) in
 * registers, adds the lane groups' partials in shared memory in slot order
 * and writes one workspace row per CTA; a second entry point adds the rows
 * (32 row groups per column, each in CTA order, then the groups in order),
 * so the weight gradients are deterministic.
 */
#include <stdio.h>

#include "family.h"

#include "error.h"
#include "json.h" /* lg_json_number_text */
#include "templates.h"

#define PMAX 264 /* CTAs of the backward's persistent grid by default (2 per SM on H200) */
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
	NKEYS
};
static const int64_t head_dims[] = {64, 128, 256, 0};
static const int64_t tokens_ok[] = {1, 2, 4, 8, 0}, threads_ok[] = {128, 256, 512, 0};
static const int64_t ctas_ok[] = {PMAX, 2 * PMAX, 4 * PMAX, 0};
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
};

static const struct lg_size sizes[] = {
	/* seq x batch < 2^31: the forward's grid, one CTA per `tokens` tokens */
	{"seq", "S", 0, 1 << 22, "positions (S); varlen: tokens (T)", 0},
	/* check and bench at N tokens: seq N, batch 2 */
	{"batch", "B", 0, 511, "sequences (B); varlen: sequences in cu_seqlens", 2},
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
enum { P_D, P_H, P_HKV, P_R, P_TOKENS, P_THREADS, P_BWD, P_CTAS, P_VARLEN, P_MIN_CTAS };

/* The rotated width R (0 when the fraction does not give a whole number). */
static int64_t rotated(const struct lg_spec *s)
{
	double r = lg_spec_num(s, K_ROTARY) * (double)lg_spec_int(s, K_HEAD_DIM);
	return r == (double)(int64_t)r ? (int64_t)r : 0;
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
	p->tile[K_TOKENS] = p->v[P_TOKENS] = lg_spec_has(s, K_TOKENS) ? lg_spec_int(s, K_TOKENS) : bwd ? 2 : 4;
	p->tile[K_THREADS] = p->v[P_THREADS] = lg_spec_has(s, K_THREADS) ? lg_spec_int(s, K_THREADS) : 256;
	p->v[P_CTAS] = lg_spec_has(s, K_CTAS) ? lg_spec_int(s, K_CTAS) : PMAX;
	/* 93-123 registers a thread at 256 threads (ptxas): 2 CTAs an SM; a
	 * higher minimum is a tuning choice */
	p->tile[K_MIN_CTAS] = p->v[P_MIN_CTAS] = lg_spec_has(s, K_MIN_CTAS) ? lg_spec_int(s, K_MIN_CTAS) : 1;
	if (bwd)
		p->tile[K_CTAS] = p->v[P_CTAS];
	p->nentries = bwd ? 2 : 1;
	snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
	if (bwd)
		snprintf(p->entry[1], sizeof p->entry[1], "%s_dw", s->entry);
	p->early[1] = bwd && t->sm >= 90;
	return LG_OK;
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

/* The kernel's shape, for the emitters below. */
struct shape {
	int64_t d, hq, hkv, r, heads; /* heads: q_heads + 2 kv_heads per token */
	int lanes, slots, tokens, threads, ctas, min_ctas;
	int64_t units; /* tokens x heads: (token, head) units a CTA takes at a time */
	int batch;     /* units a lane group loads before working on them */
	bool bs, plain, silu, bwd, pdl; /* pdl: the dw entry launches early (sm_90+) */
	bool varlen;
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
			  .pdl = p->early[1], .varlen = p->v[P_VARLEN] != 0, .cp = lg_spec_int(s, K_CP_SIZE),
			  .cp_rank = lg_spec_int(s, K_CP_RANK), .mscale = lg_spec_num(s, K_MSCALE)};
	k.heads = k.hq + 2 * k.hkv;
	k.lanes = (int)(k.d / 8);
	k.slots = k.threads / k.lanes;
	k.units = k.tokens * k.heads;
	int64_t rounds = (k.units + k.slots - 1) / k.slots, most = k.bwd ? 4 : 8; /* registers */
	k.batch = (int)(rounds < most ? rounds : most);
	return k;
}

/* lg_tokens(S, B): the qkv rows; lg_position(n, S, B, cu): the rotary
 * position of row n (KERNELS.md K2, K2b). */
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
		lg_line(b, "return %s;", k->bs ? "n % S" : "n / B");
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
		lg_line(b, "const i64 i = %s, l = S;", k->bs ? "n %% S" : "n / B");
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
	char eps[32];
	lg_json_number_text(lg_spec_num(s, K_EPS), eps);
	lg_comment(b, "Reciprocal RMS of a head vector from its fp32 sum of squares.");
	lg_line(b, "static __device__ __forceinline__ float lg_rrms_head(float sumsq)");
	lg_open(b, "{");
	lg_line(b, "return 1.0f / sqrtf(sumsq / %lld.0f + %sf);", (long long)k->d, eps);
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
	if (k->silu) {
		lg_comment(b, "The logistic function, with an accurate exp (expf).");
		lg_line(b, "static __device__ __forceinline__ float lg_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }");
	}
	emit_position(b, k);
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

/* Declarations shared by both kernels' token loops: lane, slot, the sin/cos
 * table, and the opening of the loop over units (token, head). */
static void emit_walk_open(lg_buf *b, const struct shape *k)
{
	int64_t half = k->r / 2;
	lg_line(b, "__shared__ float ct[%d][%lld], st[%d][%lld]; // cos, sin of each token's R/2 angles",
		k->tokens, (long long)half, k->tokens, (long long)half);
	lg_line(b, "const int c = threadIdx.x %% %d; // the lane's piece: features 8c .. 8c + 7", k->lanes);
	lg_line(b, "const int slot = threadIdx.x / %d; // the lane group", k->lanes);
	lg_line(b, "const i64 N = lg_tokens(S, B);");
	if (k->bwd) {
		lg_open(b, "for (i64 n0 = (i64)blockIdx.x * %d; n0 < N; n0 += lg_ctas(N) * %d) {", k->tokens,
			k->tokens);
		lg_line(b, "__syncthreads(); // the previous tokens' table is no longer read");
	} else {
		lg_line(b, "const i64 n0 = (i64)blockIdx.x * %d; // the CTA's tokens", k->tokens);
	}
	lg_comment(b, "sin and cos once per token, shared by its heads.");
	lg_open(b, "for (int i = threadIdx.x; i < %lld; i += %d) {", (long long)(k->tokens * half), k->threads);
	lg_line(b, "const i64 n = n0 + i / %lld;", (long long)half);
	lg_line(b, "if (n >= N) break;");
	lg_line(b, "const i64 p = lg_position(n, S, B, (const int *)cu_seqlens);");
	lg_line(b, "float sn, cn;");
	lg_line(b, "sincosf(((const float *)freqs)[p * %lld + i %% %lld], &sn, &cn);", (long long)k->r,
		(long long)half);
	if (k->mscale != 1.0) {
		char ms[32];
		lg_json_number_text(k->mscale, ms);
		lg_line(b, "sn *= %sf, cn *= %sf; // mscale", ms, ms);
	}
	lg_line(b, "ct[i / %lld][i %% %lld] = cn, st[i / %lld][i %% %lld] = sn;", (long long)half,
		(long long)half, (long long)half, (long long)half);
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_comment(b, "Units (token, head) in output order, %d a lane group at a time: their loads first", k->batch);
	lg_comment(b, "(in flight together), then the work. Every lane of a warp runs every iteration.");
	lg_open(b, "for (int u0 = 0; u0 < %lld; u0 += %d) {", (long long)k->units, k->slots * k->batch);
	lg_line(b, "lg_u32x4 xr[%d];", k->batch);
	if (k->bwd)
		lg_line(b, "lg_u32x4 gr[%d];", k->batch);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int ub = 0; ub < %d; ub++) {", k->batch);
	lg_line(b, "const lg_unit t = lg_unit_at(n0, u0 + ub * %d + slot, c, N, S, B);", k->slots);
	lg_line(b, "xr[ub] = lg_ld16_if((const u8 *)qkv + t.xo, t.live);");
	if (k->bwd) {
		lg_line(b, "const u64 gp = t.isq ? gq : t.isv ? gv : gk;");
		lg_line(b, "gr[ub] = lg_ld16_if((const u8 *)gp + t.oo, t.live);");
	}
	lg_close(b);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int ub = 0; ub < %d; ub++) {", k->batch);
	lg_line(b, "const lg_unit t = lg_unit_at(n0, u0 + ub * %d + slot, c, N, S, B);", k->slots);
	lg_line(b, "const int tl = t.tl;");
	lg_line(b, "const bool live = t.live, isq = t.isq, isv = t.isv;");
}

/* The unit helper: where unit u of the token group at n0 reads and writes. */
static void emit_unit(lg_buf *b, const struct shape *k)
{
	lg_comment(b, "Unit u of the tokens from n0 (past the last: a copy of it, not live): tl, j: its");
	lg_comment(b, "token in the group and head (q, k, v heads in order); xo, oo: this lane's bytes");
	lg_comment(b, "into qkv and into q, k or v (the gradients likewise).");
	lg_line(b, "struct lg_unit { i64 xo, oo; int tl, j; bool live, isq, isv; };");
	lg_line(b, "static __device__ __forceinline__ lg_unit lg_unit_at(i64 n0, int u, int c, i64 N, i64 S, i64 B)");
	lg_open(b, "{");
	lg_line(b, "lg_unit t;");
	lg_line(b, "const int un = min(u, %lld);", (long long)(k->units - 1));
	lg_line(b, "t.tl = un / %lld, t.j = un %% %lld;", (long long)k->heads, (long long)k->heads);
	lg_line(b, "const i64 n = n0 + t.tl; // the qkv row");
	lg_line(b, "t.live = u < %lld && n < N;", (long long)k->units);
	if (k->bs || k->varlen)
		lg_line(b, "const i64 ob = n; // the [batch, seq] row%s", k->varlen ? " (packed: [1, T])" : "");
	else
		lg_line(b, "const i64 ob = (n %% B) * S + n / B; // the [batch, seq] row");
	lg_line(b, "t.xo = (n * %lld + (i64)lg_qkv_slot(t.j) * %lld + c * 8) * 2;", (long long)(k->heads * k->d),
		(long long)k->d);
	lg_line(b, "t.isq = t.j < %lld, t.isv = t.j >= %lld;", (long long)k->hq, (long long)(k->hq + k->hkv));
	lg_line(b, "const i64 hh = t.isq ? t.j : t.isv ? t.j - %lld : t.j - %lld; // head in q, k or v",
		(long long)(k->hq + k->hkv), (long long)k->hq);
	lg_line(b, "t.oo = ((ob * (t.isq ? %lld : %lld) + hh) * %lld + c * 8) * 2;", (long long)k->hq,
		(long long)k->hkv, (long long)k->d);
	lg_line(b, "return t;");
	lg_close(b);
}

/* The rotation of y (8 floats, the lane's piece) in place; cs[tl] is the
 * token's table. Every lane calls it (shuffles). g: the backward's
 * transpose (the sign of the partner's term flips). */
static void emit_rotate(lg_buf *b, const struct shape *k, const char *y, bool transpose)
{
	int64_t hp = k->r / 16; /* pieces in R/2 */
	lg_comment(b, "%s over [0, %lld): partner piece %lld lanes away.",
		   transpose ? "Transposed RoPE" : "Rotate-half RoPE", (long long)k->r, (long long)hp);
	lg_line(b, "const bool lo = c < %lld, rot = c < %lld;", (long long)hp, (long long)(2 * hp));
	lg_line(b, "const int src = lo ? c + %lld : rot ? c - %lld : c;", (long long)hp, (long long)hp);
	lg_line(b, "const int from = (threadIdx.x & 31 & ~%d) + src;", k->lanes - 1);
	lg_line(b, "float pr[8];");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int e = 0; e < 8; e++) pr[e] = __shfl_sync(~0u, %s[e], from);", y);
	lg_open(b, "if (rot && !isv) {");
	lg_comment(b, "%s", transpose ? "first half: g c + g' s; second half: g c - g' s"
				      : "first half: a c - b s; second half: b c + a s");
	lg_line(b, "const float sg = lo ? %s : %s;", transpose ? "1.0f" : "-1.0f", transpose ? "-1.0f" : "1.0f");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int e = 0; e < 8; e++) {");
	lg_line(b, "const int a = (c %% %lld) * 8 + e; // the angle", (long long)hp);
	lg_line(b, "%s[e] = %s[e] * ct[tl][a] + sg * pr[e] * st[tl][a];", y, y);
	lg_close(b);
	lg_close(b);
}

/* wf: the q or k weight's piece as floats. */
static void emit_weight(lg_buf *b)
{
	lg_line(b, "const u64 wsrc = isq ? q_weight : k_weight;");
	lg_line(b, "float wf[8];");
	lg_line(b, "lg_unpack8(lg_ld16_keep((const u8 *)wsrc + c * 16), wf);");
}

static void emit_forward(lg_buf *b, const struct lg_spec *s, const struct shape *k, const char *name)
{
	lg_section(b, name, "q/k RMSNorm + RoPE + split, forward");
	lg_comment(b, "%d lanes a head vector, %d lane groups a CTA, %d tokens at a time.", k->lanes, k->slots,
		   k->tokens);
	char lb[48];
	lg_emit_signature(b, s, name, "%s", lg_launch_bounds(lb, k->threads, k->min_ctas));
	lg_open(b, "{");
	emit_walk_open(b, k);
	lg_line(b, "float x[8];");
	lg_line(b, "lg_unpack8(xr[ub], x);");
	if (k->silu) {
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int e = 0; e < 8; e++) x[e] = x[e] * lg_sigmoid(x[e]); // SiLU");
	}
	lg_comment(b, "RMS over the head vector (lane group): fp32, a fixed butterfly.");
	lg_line(b, "float ss = 0.0f;");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int e = 0; e < 8; e++) ss += x[e] * x[e];");
	lg_line(b, "ss = lg_sum_xor(ss, 1, %d);", k->lanes / 2);
	lg_open(b, "if (!isv) {");
	lg_line(b, "const float r = lg_rrms_head(ss);");
	emit_weight(b);
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int e = 0; e < 8; e++) x[e] = (x[e] * r) * wf[e];");
	lg_close(b);
	emit_rotate(b, k, "x", false);
	lg_line(b, "if (live) lg_st16((u8 *)(isq ? q : t.j < %lld ? k : v) + t.oo, lg_pack8(x));",
		(long long)(k->hq + k->hkv));
	lg_close(b); /* the units */
	lg_close(b); /* the batches of units */
	lg_close(b);
}

static void emit_backward_rows(lg_buf *b, const struct lg_spec *s, const struct shape *k, const char *name)
{
	lg_section(b, name, "q/k RMSNorm + RoPE + split, backward: dqkv and weight partials");
	lg_comment(b, "Persistent grid of min(ceil(S B / %d), %d) CTAs; %d lanes a head vector.", k->tokens,
		   k->ctas, k->lanes);
	lg_line(b, "static __device__ __forceinline__ i64 lg_ctas(i64 N)");
	lg_open(b, "{");
	lg_line(b, "const i64 n = (N + %d) / %d;", k->tokens - 1, k->tokens);
	lg_line(b, "return n < %d ? n : %d;", k->ctas, k->ctas);
	lg_close(b);
	lg_line(b, "%s", "");
	char lb[48];
	lg_emit_signature(b, s, name, "%s", lg_launch_bounds(lb, k->threads, k->min_ctas));
	lg_open(b, "{");
	lg_line(b, "__shared__ float dwp[%d][%lld]; // lane groups' partials: dq_weight | dk_weight", k->slots,
		(long long)(2 * k->d));
	if (k->pdl)
		lg_line(b, "asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\"); // dw may be scheduled");
	lg_line(b, "float aq[8], ak[8];");
	lg_line(b, "for (int e = 0; e < 8; e++) aq[e] = ak[e] = 0.0f;");
	emit_walk_open(b, k);
	lg_line(b, "float x[8], g[8];");
	lg_line(b, "lg_unpack8(xr[ub], x);");
	lg_line(b, "lg_unpack8(gr[ub], g);");
	lg_line(b, "float u[8];");
	if (k->silu) {
		lg_line(b, "float sg[8];");
		lg_line(b, "#pragma unroll");
		lg_open(b, "for (int e = 0; e < 8; e++) { // SiLU");
		lg_line(b, "sg[e] = lg_sigmoid(x[e]);");
		lg_line(b, "u[e] = x[e] * sg[e];");
		lg_close(b);
	} else {
		lg_line(b, "for (int e = 0; e < 8; e++) u[e] = x[e];");
	}
	emit_rotate(b, k, "g", true);
	lg_line(b, "float ss = 0.0f, dot = 0.0f;");
	emit_weight(b);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int e = 0; e < 8; e++) {");
	lg_line(b, "ss += u[e] * u[e];");
	lg_line(b, "dot += u[e] * g[e] * wf[e];");
	lg_close(b);
	lg_line(b, "ss = lg_sum_xor(ss, 1, %d);", k->lanes / 2);
	lg_line(b, "dot = lg_sum_xor(dot, 1, %d);", k->lanes / 2);
	lg_open(b, "if (!isv && live) {");
	lg_comment(b, "du = r g w - r^3 u dot / D; weight partial += u r g.");
	lg_line(b, "const float r = lg_rrms_head(ss);");
	lg_line(b, "const float c3 = r * r * r * (dot / %lld.0f);", (long long)k->d);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int e = 0; e < 8; e++) {");
	lg_line(b, "const float pw = u[e] * r * g[e];");
	lg_line(b, "if (isq) aq[e] += pw; else ak[e] += pw;");
	lg_line(b, "g[e] = r * g[e] * wf[e] - c3 * u[e];");
	lg_close(b);
	lg_close(b);
	if (k->silu) {
		lg_comment(b, "Through the SiLU: d/dx x s(x) = s (1 + x (1 - s)).");
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int e = 0; e < 8; e++)");
		lg_line(b, "\tg[e] *= sg[e] * (1.0f + x[e] * (1.0f - sg[e]));");
	}
	lg_line(b, "if (live) lg_st16((u8 *)dqkv + t.xo, lg_pack8(g));");
	lg_close(b);
	lg_close(b);
	lg_close(b);
	lg_comment(b, "The lane groups' partials, added in slot order: one workspace row per CTA.");
	lg_open(b, "for (int e = 0; e < 8; e++) {");
	lg_line(b, "dwp[slot][c * 8 + e] = aq[e];");
	lg_line(b, "dwp[slot][%lld + c * 8 + e] = ak[e];", (long long)k->d);
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_open(b, "for (int col = threadIdx.x; col < %lld; col += %d) {", (long long)(2 * k->d), k->threads);
	lg_line(b, "float sum = 0.0f;");
	lg_line(b, "for (int sl = 0; sl < %d; sl++) sum += dwp[sl][col];", k->slots);
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
	emit_unit(b, &k);
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

/* Tile variants for `lingen tune`: tokens at a time x threads per CTA;
 * the backward also with a persistent grid of 2 and 4 x 264 CTAs, the
 * forward with 3 and 4 CTAs an SM (tile.min_ctas). */
static int candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max)
{
	static const int64_t tok[] = {1, 2, 4, 8}, thr[] = {128, 256, 512};
	int n = 0;
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 3; j++) {
			struct lg_tile_choice c = lg_tile1(K_TOKENS, tok[i]);
			c.v[K_THREADS] = thr[j];
			c.set |= 1u << K_THREADS;
			n = lg_candidate_add(s, t, out, n, max, c);
		}
	for (int i = 1; s->pass == LG_PASS_BACKWARD && i < 3; i++)
		n = lg_candidate_add(s, t, out, n, max, lg_tile1(K_CTAS, ctas_ok[i]));
	/* the default tile with registers capped for 3 and 4 CTAs an SM */
	for (int m = 3; s->pass == LG_PASS_FORWARD && m <= 4; m++)
		n = lg_candidate_add(s, t, out, n, max, lg_tile1(K_MIN_CTAS, m));
	return n;
}

const struct lg_family lg_family_qk_norm_rope = {
	.op = "qk_norm_rope",
	.summary = "split qkv + q/k RMSNorm + rotate-half RoPE (partial) + [b, s, h, d] (K2)",
	.passes = (1u << LG_PASS_FORWARD) | (1u << LG_PASS_BACKWARD),
	.dtypes = 1u << LG_DTYPE_BF16,
	.nkeys = NKEYS,
	.keys = keys,
	.sig = {[LG_PASS_FORWARD] = {2, sizes, F_NARGS, fwd_args},
		[LG_PASS_BACKWARD] = {2, sizes, B_NARGS, bwd_args}},
	.validate = validate,
	.uses = uses,
	.plan = plan,
	.emit = emit,
	.geometry = geometry,
	.workspace = workspace,
	.candidates = candidates,
};
