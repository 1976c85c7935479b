/*
 * qk_norm_rope_emit.c - the kernels' source of family "qk_norm_rope"
 * (docs/kernels.md K2): the forward and the backward's two kernels (rows,
 * then the weight gradients). The strategy is the header comment of
 * qk_norm_rope.c.
 */
#include <stdio.h>

#include "qk_norm_rope.h"

#include "error.h"
#include "templates.h"

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
	lg_line(b, "static __device__ __forceinline__ i64 lg_tokens(i64 S, i64 %s) { return %s; }",
		k->varlen ? "/* B */" : "B", k->varlen ? "S" : "S * B");
	lg_comment(b, "The rotary position of qkv row n%s.",
		   k->varlen ? ": its index in its sequence (cu: global bounds / cp_size)" : "");
	lg_line(b, "static __device__ __forceinline__ i64 lg_position(i64 n, i64 S, i64 B, const int *%s)",
		k->varlen ? "cu" : " /* cu */"); /* the sequences' bounds: varlen only */
	lg_open(b, "{");
	if (!k->varlen && k->cp == 1) {
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

/* The piece helpers: reciprocal RMS, bf16 unpack / pack, loads and stores of a lane's two pieces. */
static void emit_piece_helpers(lg_buf *b, const struct lg_spec *s, const struct shape *k)
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
}

/* RoPE of two halves, the RMSNorm of a piece (and its backward's pieces), the logistic function. */
static void emit_math_helpers(lg_buf *b, const struct shape *k)
{
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
}

/* Where a qkv row's outputs and heads sit: lg_out_row, lg_qkv_slot. */
static void emit_layout_helpers(lg_buf *b, const struct shape *k)
{
	lg_comment(b, "The [batch, seq] row of the outputs of qkv row n.");
	bool same = k->bs || k->varlen; /* the outputs' rows are qkv's */
	lg_line(b, "static __device__ __forceinline__ i64 lg_out_row(i64 n, i64 %s, i64 %s)", same ? "/* S */" : "S",
		same ? "/* B */" : "B");
	lg_open(b, "{");
	if (same) {
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

static void emit_helpers(lg_buf *b, const struct lg_spec *s, const struct shape *k)
{
	emit_piece_helpers(b, s, k);
	emit_math_helpers(b, k);
	emit_position(b, k);
	emit_layout_helpers(b, k);
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

void lg_qk_norm_rope_emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
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
