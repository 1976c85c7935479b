/*
 * cross_entropy_emit.c - the kernels' source of family "cross_entropy"
 * (docs/kernels.md K9): the forward (streaming, or a cluster a row when
 * fused), the backward and the shards' merge. The math and the strategy are
 * the header comment of cross_entropy.c.
 */
#include <math.h>
#include <stdio.h>

#include "cross_entropy.h"
#include "cross_entropy_grad.h"

#include "error.h"
#include "json.h" /* lg_json_fp32_ok */
#include "templates.h"

struct shape {
	int64_t v, c;     /* vocab (columns of this kernel's rows), classes */
	int esz, vec;     /* bytes per logit, logits per 16 bytes */
	int threads, unroll;
	bool f32, aligned; /* every row starts 16-byte aligned */
	bool smooth, i32, bwd, fused, inplace;
	int part;
	double e;
	int64_t ignore;
};

static struct shape shape_of(const struct lg_spec *s, const struct lg_plan *p)
{
	struct shape k = {.v = lg_spec_int(s, K_VOCAB), .f32 = s->dtype == LG_DTYPE_FP32,
			  .threads = (int)p->v[P_THREADS], .unroll = (int)p->v[P_UNROLL],
			  .i32 = lg_spec_int(s, K_INDEX) == 1, .bwd = p->v[P_BWD] != 0, .fused = p->v[P_FUSED] != 0,
			  .inplace = p->v[P_INPLACE] != 0, .part = (int)p->v[P_PART],
			  .e = lg_spec_num(s, K_SMOOTH), .ignore = lg_spec_int(s, K_IGNORE)};
	k.c = lg_spec_int(s, K_CLASSES) ? lg_spec_int(s, K_CLASSES) : k.v;
	k.esz = k.f32 ? 4 : 2;
	k.vec = 16 / k.esz;
	k.aligned = (k.v * k.esz) % 16 == 0;
	k.smooth = k.e > 0.0;
	return k;
}

/* The shared helper that reads value i of a 16-byte piece (templates/). */
static const char *at_of(const struct shape *k)
{
	return k->f32 ? "lg_f32_at" : "lg_bf16_at";
}

/* -inf in fp32 (NVRTC has no math.h). */
static void emit_ninf(lg_buf *b)
{
	lg_line(b, "static __device__ __forceinline__ float lg_ce_ninf() { return __int_as_float(0xff800000); }");
}

static void emit_helpers(lg_buf *b, const struct shape *k)
{
	bool one = !k->bwd || !k->aligned; /* a single logit: the forward's target, unaligned ends */
	if (!k->bwd)
		emit_ninf(b);
	lg_ce_emit_exp(b);
	if (!k->bwd && !k->f32) {
		lg_comment(b, "The max of a 16-byte piece's eight bf16, as a bf16x2 word (max of its halves).");
		lg_line(b, "static __device__ __forceinline__ u32 lg_ce_max8(lg_u32x4 v)");
		lg_open(b, "{");
		lg_line(b, "return lg_max_bf16x2(lg_max_bf16x2(v.x, v.y), lg_max_bf16x2(v.z, v.w));");
		lg_close(b);
	}
	if (one) {
		lg_comment(b, "Logit j of a row (byte pointer) as fp32.");
		lg_line(b, "static __device__ __forceinline__ float lg_ce_one(const u8 *row, i64 j)");
		lg_open(b, "{");
		if (k->f32)
			lg_line(b, "return ((const float *)row)[j];");
		else
			lg_line(b, "return lg_u2f((u32)((const u16 *)row)[j] << 16);");
		lg_close(b);
	}
	if ((k->bwd || k->fused) && !k->aligned) {
		lg_comment(b, "Store one gradient value at column j of a row (byte pointer).");
		lg_line(b, "static __device__ __forceinline__ void lg_ce_put(u8 *row, i64 j, float v)");
		lg_open(b, "{");
		if (k->f32)
			lg_line(b, "((float *)row)[j] = v;");
		else
			lg_line(b, "((u16 *)row)[j] = (u16)(lg_pack_bf16x2(v, 0.0f) & 0xffffu);");
		lg_close(b);
	}
}

/* The row's geometry: xr (its bytes), the head values before its first
 * 16-byte boundary (h), its whole pieces (nb) from byte offset hb, and
 * the tail values after them (tl). */
static void emit_row_geometry(lg_buf *b, const struct shape *k, const char *ptr)
{
	lg_line(b, "const u8 *const xr = (const u8 *)%s + row * %lld;", ptr, (long long)(k->v * k->esz));
	if (k->aligned) {
		lg_line(b, "const i64 nb = %lld; // whole pieces (rows start 16-byte aligned)",
			(long long)(k->v / k->vec));
	} else {
		lg_comment(b, "Rows are not 16-byte aligned: head values, whole pieces, tail values.");
		lg_line(b, "const int h = (int)(((16u - (u32)((u64)xr & 15u)) & 15u) / %d);", k->esz);
		lg_line(b, "const int hh = h < %lld ? h : %lld;", (long long)k->v, (long long)k->v);
		lg_line(b, "const i64 nb = (%lld - hh) / %d;", (long long)k->v, k->vec);
		lg_line(b, "const int tl = (int)(%lld - hh - nb * %d);", (long long)k->v, k->vec);
	}
	if (k->aligned)
		lg_line(b, "const u8 *const xb = xr; // the whole pieces");
	else
		lg_line(b, "const u8 *const xb = xr + hh * %d; // the whole pieces", k->esz);
}

/* The label of the row: y (i64), ign. Labels need only be 4-byte aligned
 * (a slice of int32 labels at any element): an int64 one is read as its
 * two 32-bit words. */
static void emit_label(lg_buf *b, const struct shape *k)
{
	lg_ce_emit_label(b, k->i32, k->ignore, "row");
}

void lg_ce_emit_label(lg_buf *b, bool i32, int64_t ignore, const char *row)
{
	if (i32) {
		lg_line(b, "const i64 y = (i64)((const int *)labels)[%s];", row);
	} else {
		lg_line(b, "const u32 *const yw = (const u32 *)labels + 2 * %s; // 4-byte aligned", row);
		lg_line(b, "const i64 y = (i64)((u64)yw[0] | (u64)yw[1] << 32);");
	}
	lg_line(b, "const bool ign = y == %lldLL;", (long long)ignore);
}

void lg_ce_emit_exp(lg_buf *b)
{
	lg_comment(b, "e^d for d <= 0 in fp32: ex2.approx(d log2 e), 0 for -inf.");
	lg_line(b, "static __device__ __forceinline__ float lg_ce_exp(float d)");
	lg_open(b, "{");
	lg_line(b, "float r;");
	lg_line(b, "asm(\"ex2.approx.ftz.f32 %%0, %%1;\" : \"=f\"(r) : \"f\"(d * 1.44269504088896341f));");
	lg_line(b, "return r;");
	lg_close(b);
}

lg_status lg_ce_check_smoothing(double e, int64_t classes, const char *where)
{
	if (!(e >= 0.0 && e <= 1.0)) /* torch's range: e = 1 is the uniform target */
		return lg_spec_error(where, "label_smoothing: found %g, allowed: 0 <= e <= 1", e);
	if (!lg_json_fp32_ok(e / (double)classes)) /* e / classes is a constant of the kernel */
		return lg_spec_error(where, "label_smoothing: found %g, whose share of each of %lld classes, %g, "
					    "is not an fp32 normal; allowed: 0, or at least %g",
				     e, (long long)classes, e / (double)classes, 0x1p-126 * (double)classes);
	return LG_OK;
}

void lg_ce_emit_shares(lg_buf *b, double e, int64_t classes)
{
	char e1[LG_FLOAT_LITERAL_MAX], ec[LG_FLOAT_LITERAL_MAX];
	lg_float_literal(1.0 - e, e1);
	lg_float_literal(e / (double)classes, ec);
	lg_line(b, "const float gy = %s * g0, ge = %s * g0;", e1, ec);
}

/* The loads of one step of the forward's streaming pass into v[]: pieces
 * [base, base + threads x unroll), `checked` when some may be past nb
 * (those read as -inf). */
static void emit_fwd_load(lg_buf *b, const struct shape *k, bool checked, bool keep)
{
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int u = 0; u < %d; u++) {", k->unroll);
	lg_line(b, "const i64 c = base + u * %d + t;", k->threads);
	if (checked)
		lg_line(b, "v[u] = lg_u32x4{%s};", k->f32 ? "0xff800000u, 0xff800000u, 0xff800000u, 0xff800000u"
							  : "0xff80ff80u, 0xff80ff80u, 0xff80ff80u, 0xff80ff80u");
	lg_line(b, "%sv[u] = %s;", checked ? "if (c < nb) " : "",
		keep ? "lg_ld16_last(xb + c * 16, pol)" : "lg_ld16(xb + c * 16)");
	lg_close(b);
}

/* The loads of the step at base: whole (the step ends by nb) or checked. */
static void emit_fwd_load_step(lg_buf *b, const struct shape *k)
{
	lg_open(b, "if (base + %d <= nb) {", k->threads * k->unroll);
	emit_fwd_load(b, k, false, k->fused);
	lg_close(b);
	lg_open(b, "else if (base < nb) {");
	emit_fwd_load(b, k, true, k->fused);
	lg_close(b);
}

/* bm: the max of the piece v (arr false) or of the n pieces v[0..n) as
 * fp32; bf16 by packed max.bf16x2 (exact), 3 of them a piece. */
static void emit_piece_max(lg_buf *b, const struct shape *k, bool arr, int n)
{
	if (k->f32) {
		lg_line(b, "float bm = lg_ce_ninf();");
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int u = 0; u < %d; u++)", n);
		lg_line(b, "\tfor (int i = 0; i < %d; i++) bm = fmaxf(bm, %s(%s, i));", k->vec, at_of(k),
			arr ? "v[u]" : "v");
	} else {
		lg_line(b, "u32 pm = lg_ce_max8(%s);", arr ? "v[0]" : "v");
		if (n > 1) {
			lg_line(b, "#pragma unroll");
			lg_line(b, "for (int u = 1; u < %d; u++) pm = lg_max_bf16x2(pm, lg_ce_max8(v[u]));", n);
		}
		lg_line(b, "const float bm = fmaxf(lg_bf16_lo(pm), lg_bf16_hi(pm));");
	}
}

/* The math of one step on v[] (`checked`: pieces past nb read as -inf):
 * the step's max (bf16: packed max.bf16x2, exact), the rescale of st when
 * it grows, and exp(x - mt) of each piece summed in fp32, then into st in
 * fp64. */
static void emit_fwd_math(lg_buf *b, const struct shape *k, bool checked)
{
	emit_piece_max(b, k, true, k->unroll);
	lg_open(b, "if (bm > mt) {");
	lg_line(b, "st *= (double)lg_ce_exp(mt - bm);");
	lg_line(b, "mt = bm;");
	lg_close(b);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int u = 0; u < %d; u++) {", k->unroll);
	lg_line(b, "float p = 0.0f;");
	if (k->smooth)
		lg_line(b, "float q = 0.0f;");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < %d; i++) {", k->vec);
	lg_line(b, "const float x = %s(v[u], i);", at_of(k));
	lg_line(b, "p += lg_ce_exp(x - mt);");
	if (k->smooth)
		lg_line(b, "q += %sx;", checked ? "x == lg_ce_ninf() ? 0.0f : " : "");
	lg_close(b);
	lg_line(b, "st += (double)p;");
	if (k->smooth)
		lg_line(b, "sx += (double)q;");
	lg_close(b);
}

static void emit_cta_reduce(lg_buf *b, const struct shape *k, const char *m, const char *sum);

/* The forward's pass over one row, its first step's loads already in v[]
 * (issued before the label is known): mt, st (and sx) per thread, then the
 * CTA's M, S (and SX) in every thread. Each step's math runs on v[] while
 * nothing else is in flight for this thread; the other warps, and the
 * other CTAs of the SM, keep the loads going. */
static void emit_fwd_pass(lg_buf *b, const struct shape *k)
{
	int step = k->threads * k->unroll;
	lg_line(b, "float mt = lg_ce_ninf();");
	lg_line(b, "double st = 0.0%s;", k->smooth ? ", sx = 0.0" : "");
	if (!k->aligned) {
		lg_comment(b, "The head and tail values: one a thread (at most 7 each).");
		lg_open(b, "for (int j = t; j < hh + tl; j += %d) {", k->threads);
		lg_line(b, "const float x = lg_ce_one(xr, j < hh ? j : hh + nb * %d + (j - hh));", k->vec);
		lg_line(b, "if (x > mt) { st *= (double)lg_ce_exp(mt - x); mt = x; }");
		lg_line(b, "st += (double)lg_ce_exp(x - mt);");
		if (k->smooth)
			lg_line(b, "sx += (double)x;");
		lg_close(b);
	}
	lg_open(b, "while (base + %d <= nb) {", step);
	emit_fwd_math(b, k, false);
	lg_line(b, "base += %d;", step);
	emit_fwd_load_step(b, k);
	lg_close(b);
	lg_open(b, "if (base < nb) {");
	emit_fwd_math(b, k, true);
	lg_close(b);
	emit_cta_reduce(b, k, "mr", "S");
}

/* The CTA's max and sum from each thread's mt, st (and sx): const float
 * <m>, const double <sum> in every thread (and the shared bX: the sum of
 * the logits). Each warp merges by shuffles; then warp 0 merges the warps'
 * (max, sum) pairs, one a lane, the fp64 e^(m_w - m) of all at once. */
static void emit_cta_reduce(lg_buf *b, const struct shape *k, const char *m, const char *sum)
{
	int nw = k->threads / 32;
	lg_comment(b, "The CTA's max and sum: log-sum-exp merges in fp64, warps then warp 0 (a warp a lane).");
	lg_line(b, "__shared__ float sm[%d];", nw);
	if (k->smooth)
		lg_line(b, "__shared__ double ss[%d], sq[%d];", nw, nw);
	else
		lg_line(b, "__shared__ double ss[%d];", nw);
	lg_line(b, "__shared__ float bM;");
	lg_line(b, "__shared__ double bS%s;", k->smooth ? ", bX" : "");
	lg_line(b, "const float mw = lg_max_xor(mt, 1, 16);");
	lg_line(b, "double sw = mt == lg_ce_ninf() ? 0.0 : st * (double)lg_ce_exp(mt - mw);");
	lg_line(b, "sw = lg_dsum_xor(sw, 1, 16);");
	if (k->smooth)
		lg_line(b, "sx = lg_dsum_xor(sx, 1, 16);");
	lg_open(b, "if ((t & 31) == 0) {");
	lg_line(b, "sm[t >> 5] = mw;");
	lg_line(b, "ss[t >> 5] = sw;");
	if (k->smooth)
		lg_line(b, "sq[t >> 5] = sx;");
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_open(b, "if (t < 32) {");
	lg_line(b, "const float mo = t < %d ? sm[t] : lg_ce_ninf();", nw);
	lg_line(b, "const float mr = lg_max_xor(mo, 1, %d);", nw / 2);
	lg_line(b, "double S = mo == lg_ce_ninf() ? 0.0 : ss[t] * exp((double)mo - (double)mr);");
	lg_line(b, "S = lg_dsum_xor(S, 1, %d);", nw / 2);
	if (k->smooth)
		lg_line(b, "const double X = lg_dsum_xor(t < %d ? sq[t] : 0.0, 1, %d);", nw, nw / 2);
	lg_open(b, "if (t == 0) {");
	lg_line(b, "bM = mr;");
	lg_line(b, "bS = S;");
	if (k->smooth)
		lg_line(b, "bX = X;");
	lg_close(b);
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_line(b, "const float %s = bM;", m);
	lg_line(b, "const double %s = bS;", sum);
}

/* The gradient of one value x at column expression `col` (local): gv. */
static void emit_grad_value(lg_buf *b, const struct shape *k, const char *x, const char *col)
{
	(void)k;
	lg_line(b, "float gv = lg_ce_exp(%s - mr) * gs - ge;", x);
	lg_line(b, "if (%s == yl) gv -= gy;", col);
}

/* The gradient of the 16-byte piece `v` (piece `c` of the row's whole
 * pieces, stored at gb + <dst> * 16), from mr, gs, ge, gy and the label's
 * piece yq and value yr. */
static void emit_grad_piece(lg_buf *b, const struct shape *k, const char *v, const char *c, const char *dst)
{
	lg_line(b, "float o[%d];", k->vec);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < %d; i++) {", k->vec);
	lg_line(b, "o[i] = lg_ce_exp(%s(%s, i) - mr) * gs - ge;", at_of(k), v);
	lg_close(b);
	lg_line(b, "if (%s == yq)", c);
	lg_line(b, "\tfor (int i = 0; i < %d; i++) o[i] -= i == yr ? gy : 0.0f;", k->vec);
	lg_line(b, "lg_st16_cs(gb + %s * 16, %s(o));", dst, k->f32 ? "lg_pack_f32x4" : "lg_pack_bf16x8");
}

/* The streaming gradient pass over the row: grad (or the logits in place)
 * from M, gs = g / S, gy = (1 - e) g, ge = e g / C, yl the local label. */
static void emit_grad_pass(lg_buf *b, const struct shape *k, bool last_read)
{
	int step = k->threads * k->unroll;
	lg_line(b, "u8 *const gr = (u8 *)%s + row * %lld;", k->inplace ? "logits" : "grad",
		(long long)(k->v * k->esz));
	lg_line(b, "u8 *const gb = gr + (xb - xr);");
	if (!k->aligned) {
		lg_open(b, "for (int j = t; j < hh + tl; j += %d) {", k->threads);
		lg_line(b, "const i64 col = j < hh ? j : hh + nb * %d + (j - hh);", k->vec);
		lg_line(b, "const float x = lg_ce_one(xr, col);");
		emit_grad_value(b, k, "x", "col");
		lg_line(b, "lg_ce_put(gr, col, gv);");
		lg_close(b);
	}
	lg_line(b, "const i64 yb = yl - (i64)(xb - xr) / %d; // the label's place among the pieces' values",
		k->esz);
	lg_line(b, "const i64 yq = yb >= 0 ? yb / %d : -1; // its piece", k->vec);
	lg_line(b, "const int yr = (int)(yb - yq * %d); // its value in the piece", k->vec);
	lg_open(b, "for (i64 base = 0; base < nb; base += %d) {", step);
	lg_line(b, "lg_u32x4 v[%d];", k->unroll);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int u = 0; u < %d; u++) {", k->unroll);
	lg_line(b, "const i64 c = base + u * %d + t;", k->threads);
	lg_line(b, "if (c < nb) v[u] = %s(xb + c * 16);", last_read ? "lg_ld16_cs" : "lg_ld16");
	lg_close(b);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int u = 0; u < %d; u++) {", k->unroll);
	lg_line(b, "const i64 c = base + u * %d + t;", k->threads);
	lg_line(b, "if (c >= nb) continue;");
	emit_grad_piece(b, k, "v[u]", "c", "c");
	lg_close(b);
	lg_close(b);
}

/* Zeros over the gradient's row (an ignored row). */
static void emit_zero_row(lg_buf *b, const struct shape *k)
{
	lg_line(b, "u8 *const gr = (u8 *)%s + row * %lld;", k->inplace ? "logits" : "grad",
		(long long)(k->v * k->esz));
	if (k->aligned) {
		lg_line(b, "for (i64 c = t; c < %lld; c += %d)", (long long)(k->v / k->vec), k->threads);
		lg_line(b, "\tlg_st16_cs(gr + c * 16, lg_u32x4{0u, 0u, 0u, 0u});");
	} else {
		lg_line(b, "for (i64 j = t; j < %lld; j += %d) lg_ce_put(gr, j, 0.0f);", (long long)k->v,
			k->threads);
	}
}

static void emit_forward(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	struct shape k = shape_of(s, p);
	char ls[LG_FLOAT_LITERAL_MAX];
	lg_double_literal(k.e, ls);
	lg_section(b, p->entry[0], k.part == PART_SHARD ? "cross entropy, one vocab shard's statistics"
					    : k.fused ? "cross entropy, fused forward + backward"
						      : "cross entropy, forward");
	/* the plain forward and the shard: as many threads an SM as the
	 * registers of `unroll` pieces a thread allow (8: 1024 threads at 64
	 * registers, 2 CTAs of 512, one's loads going on while the other starts
	 * or reduces its row; fewer: 1536 at 40 (2048 at 32 spills in the
	 * unaligned fp32 forms)); the fused one keeps one CTA an SM (L2 reuse) */
	int per_sm = k.unroll >= 8 ? 1024 : 1536;
	int ctas = k.fused || k.threads >= per_sm ? 1 : per_sm / k.threads;
	lg_comment(b, "One row a CTA of %d threads (%d an SM), %d 16-byte loads in flight each a step; %lld columns.",
		   k.threads, ctas, k.unroll, (long long)k.v);
	lg_emit_signature(b, s, p->entry[0], "__launch_bounds__(%d, %d)", k.threads, ctas);
	lg_open(b, "{");
	lg_line(b, "const i64 row = blockIdx.x;");
	lg_line(b, "const int t = threadIdx.x;");
	emit_label(b, &k);
	if (k.fused)
		lg_line(b, "const u64 pol = lg_policy_evict_last();");
	emit_row_geometry(b, &k, "logits");
	lg_comment(b, "The first step's loads, in flight while the label arrives (an ignored row wastes them).");
	lg_line(b, "lg_u32x4 v[%d];", k.unroll);
	lg_line(b, "i64 base = 0;");
	emit_fwd_load_step(b, &k);
	lg_open(b, "if (ign) {");
	lg_open(b, "if (t == 0) {");
	if (k.part == PART_SHARD) {
		lg_line(b, "for (int i = 0; i < %d; i++) ((float *)stats)[row * %d + i] = 0.0f;", STATS, STATS);
	} else {
		lg_line(b, "((float *)loss)[row] = 0.0f;");
		lg_line(b, "if (sum_exp) ((float *)sum_exp)[row] = 0.0f;");
		lg_line(b, "if (max_logit) ((float *)max_logit)[row] = 0.0f;");
	}
	lg_close(b);
	if (k.fused)
		emit_zero_row(b, &k);
	lg_line(b, "return;");
	lg_close(b);
	lg_line(b, "const i64 yl = y%s; // the label's column in these rows", k.part == PART_SHARD ? " - V0" : "");
	lg_line(b, "const float xy = yl >= 0 && yl < %lld ? lg_ce_one(xr, yl) : lg_ce_ninf();", (long long)k.v);
	emit_fwd_pass(b, &k);
	lg_open(b, "if (t == 0) {");
	if (k.part == PART_SHARD) {
		lg_line(b, "float *const o = (float *)stats + row * %d;", STATS);
		lg_line(b, "const float shi = (float)S;");
		lg_line(b, "o[0] = mr;");
		lg_line(b, "o[1] = shi;");
		lg_line(b, "o[2] = (float)(S - (double)shi);");
		lg_line(b, "o[3] = xy;");
		if (k.smooth) {
			lg_line(b, "const float xhi = (float)bX;");
			lg_line(b, "o[4] = xhi;");
			lg_line(b, "o[5] = (float)(bX - (double)xhi);");
		} else {
			lg_line(b, "o[4] = 0.0f;");
			lg_line(b, "o[5] = 0.0f;");
		}
	} else {
		lg_line(b, "const double lse = log(S) + (double)mr;");
		if (k.smooth) {
			lg_line(b, "const double e = %s; // label smoothing", ls);
			lg_line(b, "const double l = (1.0 - e) * (lse - (double)xy) + e * (lse - bX / %lld.0);",
				(long long)k.c);
		} else
			lg_line(b, "const double l = lse - (double)xy;");
		lg_line(b, "((float *)loss)[row] = (float)l;");
		lg_line(b, "if (sum_exp) ((float *)sum_exp)[row] = (float)S;");
		lg_line(b, "if (max_logit) ((float *)max_logit)[row] = mr;");
	}
	lg_close(b);
	if (k.fused) {
		lg_comment(b, "The gradient, streaming the row again (from L2, kept there by the first pass).");
		lg_line(b, "const float g0 = *(const float *)g;");
		lg_line(b, "const float gs = (float)((double)g0 / S);");
		lg_ce_emit_shares(b, k.e, k.c);
		emit_grad_pass(b, &k, true);
	}
	lg_close(b);
}

/* The fused forward with a cluster of n CTAs a row (sm_90+, rows of whole
 * 16-byte pieces): CTA r copies its slice of the row, pieces [r per, (r +
 * 1) per), into shared memory with cp.async, every copy in flight at once
 * (in at most 8 commit groups a thread, each waited for before its pieces'
 * math: each thread reads back only the pieces it copied itself); the CTAs
 * merge their (max, sum) through distributed shared memory, then write the
 * gradient from shared memory. The logits are read from HBM once. */
/* The cluster forward's sizes: n CTAs of T threads a row, each holding per
 * pieces (steps a thread, copied in groups of chunk). */
struct cluster {
	int n, T, steps, chunk, groups;
	long long per, nb, rowb;
};

/* Every copy of the CTA's slice in flight; an ignored row waits for them and writes zeros. */
static void emit_cluster_copy(lg_buf *b, const struct cluster *c)
{
	lg_comment(b, "Every copy of the slice in flight: %d groups of %d pieces a thread.", c->groups, c->chunk);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int g = 0; g < %d; g++) {", c->groups);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int j = 0; j < %d; j++) {", c->chunk);
	lg_line(b, "const int c = t + (g * %d + j) * %d;", c->chunk, c->T);
	lg_line(b, "if (c < np) lg_cp16(&rs[c], xs + c * 16, 16);");
	lg_close(b);
	lg_line(b, "lg_cp_commit();");
	lg_close(b);
	lg_comment(b, "An ignored row (its copies already issued): wait for them, write zeros.");
	lg_open(b, "if (ign) {");
	lg_line(b, "lg_cp_wait(0);");
	lg_open(b, "if (rank == 0 && t == 0) {");
	lg_line(b, "((float *)loss)[row] = 0.0f;");
	lg_line(b, "if (sum_exp) ((float *)sum_exp)[row] = 0.0f;");
	lg_line(b, "if (max_logit) ((float *)max_logit)[row] = 0.0f;");
	lg_close(b);
	lg_line(b, "for (int c = t; c < np; c += %d) lg_st16_cs(gb + c * 16, lg_u32x4{0u, 0u, 0u, 0u});", c->T);
	lg_line(b, "return;");
	lg_close(b);
}

/* The CTA's max and sum of exp (and sum of logits) over its slice, group by group as the copies land. */
static void emit_cluster_pass(lg_buf *b, const struct shape *k, const struct cluster *c)
{
	lg_line(b, "float mt = lg_ce_ninf();");
	lg_line(b, "double st = 0.0%s;", k->smooth ? ", sx = 0.0" : "");
	for (int g = 0; g < c->groups; g++) {
		lg_open(b, "{");
		lg_line(b, "lg_cp_wait(%d);", c->groups - 1 - g);
		lg_line(b, "#pragma unroll");
		lg_open(b, "for (int j = 0; j < %d; j++) {", c->chunk);
		if (g)
			lg_line(b, "const int c = t + (%d + j) * %d;", g * c->chunk, c->T);
		else
			lg_line(b, "const int c = t + j * %d;", c->T);
		lg_line(b, "if (c >= np) continue;");
		lg_line(b, "const lg_u32x4 v = rs[c];");
		lg_line(b, "float pe = 0.0f%s;", k->smooth ? ", q = 0.0f" : "");
		emit_piece_max(b, k, false, 1);
		lg_line(b, "if (bm > mt) { st *= (double)lg_ce_exp(mt - bm); mt = bm; }");
		lg_line(b, "#pragma unroll");
		lg_open(b, "for (int i = 0; i < %d; i++) {", k->vec);
		lg_line(b, "pe += lg_ce_exp(%s(v, i) - mt);", at_of(k));
		if (k->smooth)
			lg_line(b, "q += %s(v, i);", at_of(k));
		lg_close(b);
		lg_line(b, "st += (double)pe;");
		if (k->smooth)
			lg_line(b, "sx += (double)q;");
		lg_close(b);
		lg_close(b);
	}
}

/* The row's max and sum from every CTA's, through distributed shared memory; rank 0 writes the loss. */
static void emit_cluster_merge(lg_buf *b, const struct shape *k, const struct cluster *c, const char *ls)
{
	emit_cta_reduce(b, k, "mc", "Sc");
	lg_comment(b, "The cluster's max and sum: each CTA's, read through distributed shared memory.");
	lg_open(b, "if (t == 0) {");
	lg_line(b, "cred[0] = (double)mc;");
	lg_line(b, "cred[1] = Sc;");
	lg_line(b, "cred[2] = %s;", k->smooth ? "bX" : "0.0");
	lg_close(b);
	lg_line(b, "lg_cluster_sync();");
	lg_line(b, "__shared__ float cm;");
	lg_line(b, "__shared__ double cS%s;", k->smooth ? ", cX" : "");
	lg_open(b, "if (t == 0) {");
	lg_line(b, "double mk[%d], sk[%d]%s;", c->n, c->n, k->smooth ? ", X = 0.0" : "");
	lg_line(b, "float m = lg_ce_ninf();");
	lg_open(b, "for (int r = 0; r < %d; r++) {", c->n);
	lg_line(b, "mk[r] = lg_dsmem_ld_f64(&cred[0], (u32)r);");
	lg_line(b, "sk[r] = lg_dsmem_ld_f64(&cred[1], (u32)r);");
	if (k->smooth)
		lg_line(b, "X += lg_dsmem_ld_f64(&cred[2], (u32)r);");
	lg_line(b, "m = fmaxf(m, (float)mk[r]);");
	lg_close(b);
	lg_line(b, "double S = 0.0;");
	lg_line(b, "for (int r = 0; r < %d; r++) S += sk[r] > 0.0 ? sk[r] * exp(mk[r] - (double)m) : 0.0;", c->n);
	lg_line(b, "cm = m;");
	lg_line(b, "cS = S;");
	if (k->smooth)
		lg_line(b, "cX = X;");
	lg_close(b);
	lg_line(b, "lg_cluster_sync(); // every CTA has read cred before any leaves; cm, cS%s seen",
		k->smooth ? ", cX" : "");
	lg_line(b, "const float mr = cm;");
	lg_line(b, "const double S = cS%s;", k->smooth ? ", X = cX" : "");
	lg_line(b, "const i64 yl = y;");
	lg_open(b, "if (rank == 0 && t == 0) {");
	lg_line(b, "const u8 *const xr = (const u8 *)logits + row * %lld;", c->rowb);
	lg_line(b, "const float xy = yl >= 0 && yl < %lld ? lg_ce_one(xr, yl) : lg_ce_ninf();", (long long)k->v);
	lg_line(b, "const double lse = log(S) + (double)mr;");
	if (k->smooth) {
		lg_line(b, "const double e = %s; // label smoothing", ls);
		lg_line(b, "const double l = (1.0 - e) * (lse - (double)xy) + e * (lse - X / %lld.0);", (long long)k->c);
	} else {
		lg_line(b, "const double l = lse - (double)xy;");
	}
	lg_line(b, "((float *)loss)[row] = (float)l;");
	lg_line(b, "if (sum_exp) ((float *)sum_exp)[row] = (float)S;");
	lg_line(b, "if (max_logit) ((float *)max_logit)[row] = mr;");
	lg_close(b);
}

/* The gradient of the CTA's slice, from shared memory. */
static void emit_cluster_grad(lg_buf *b, const struct shape *k, const struct cluster *c)
{
	lg_comment(b, "The gradient of the slice, from shared memory.");
	lg_line(b, "const float g0 = *(const float *)g;");
	lg_line(b, "const float gs = (float)((double)g0 / S);");
	lg_ce_emit_shares(b, k->e, k->c);
	lg_line(b, "const i64 yq = yl >= 0 ? yl / %d : -1; // the label's piece", k->vec);
	lg_line(b, "const int yr = (int)(yl - yq * %d); // its value in the piece", k->vec);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int k = 0; k < %d; k++) {", c->steps);
	lg_line(b, "const int c = t + k * %d;", c->T);
	lg_line(b, "if (c >= np) continue;");
	lg_line(b, "const lg_u32x4 v = rs[c];");
	emit_grad_piece(b, k, "v", "(c0 + c)", "c");
	lg_close(b);
}

static void emit_forward_cluster(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	struct shape k = shape_of(s, p);
	int n = (int)p->v[P_CLUSTER], T = k.threads;
	long long per = (long long)p->v[P_PER], nb = (long long)(k.v / k.vec), rowb = (long long)(k.v * k.esz);
	int steps = (int)((per + T - 1) / T), chunk = (steps + 7) / 8, groups = (steps + chunk - 1) / chunk;
	const struct cluster c = {n, T, steps, chunk, groups, per, nb, rowb};
	char ls[LG_FLOAT_LITERAL_MAX];
	lg_double_literal(k.e, ls);
	lg_section(b, p->entry[0], "cross entropy, fused forward + backward, a cluster a row");
	lg_comment(b, "A cluster of %d CTAs of %d threads a row; CTA r holds pieces [r %lld, (r + 1) %lld) of", n, T,
		   per, per);
	lg_comment(b, "the row's %lld in shared memory (%d a thread, copied in %d groups).", nb, steps, groups);
	lg_emit_signature(b, s, p->entry[0], "__cluster_dims__(%d, 1, 1) __launch_bounds__(%d)", n, T);
	lg_open(b, "{");
	lg_line(b, "extern __shared__ __align__(16) lg_u32x4 rs[]; // this CTA's slice of the row");
	lg_line(b, "__shared__ double cred[3]; // the CTA's max, sum, sum of logits, for the cluster");
	lg_line(b, "const i64 row = blockIdx.x / %d;", n);
	lg_line(b, "const u32 rank = blockIdx.x %% %d; // the CTA's rank in its cluster", n);
	lg_line(b, "const int t = threadIdx.x;");
	emit_label(b, &k);
	lg_line(b, "const i64 c0 = (i64)rank * %lld; // the slice's first piece", per);
	lg_line(b, "const int np = (int)(c0 >= %lld ? 0 : %lld - c0 < %lld ? %lld - c0 : %lld); // its pieces", nb, nb,
		per, nb, per);
	lg_line(b, "u8 *const gb = (u8 *)%s + row * %lld + c0 * 16; // the slice's gradient",
		k.inplace ? "logits" : "grad", rowb);
	lg_line(b, "const u8 *const xs = (const u8 *)logits + row * %lld + c0 * 16; // the slice", rowb);
	emit_cluster_copy(b, &c);
	emit_cluster_pass(b, &k, &c);
	emit_cluster_merge(b, &k, &c, ls);
	emit_cluster_grad(b, &k, &c);
	lg_close(b);
}

static void emit_backward(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	struct shape k = shape_of(s, p);
	char e1[32], ec[32];
	lg_float_literal(1.0 - k.e, e1);
	lg_float_literal(k.e / (double)k.c, ec);
	lg_section(b, p->entry[0], k.part == PART_SHARD ? "cross entropy backward, one vocab shard"
					    : "cross entropy backward");
	lg_comment(b, "One row a CTA of %d threads, %d 16-byte loads in flight each a step; %lld columns;",
		   k.threads, k.unroll, (long long)k.v);
	lg_comment(b, "grad = (e^(x - m) / S - %s [v == y] - %s) g%s.", e1, ec, k.inplace ? ", over the logits" : "");
	lg_emit_signature(b, s, p->entry[0], "__launch_bounds__(%d)", k.threads);
	lg_open(b, "{");
	lg_line(b, "const i64 row = blockIdx.x;");
	lg_line(b, "const int t = threadIdx.x;");
	emit_label(b, &k);
	lg_open(b, "if (ign) {");
	emit_zero_row(b, &k);
	lg_line(b, "return;");
	lg_close(b);
	emit_row_geometry(b, &k, "logits");
	lg_line(b, "const i64 yl = y%s; // the label's column in these rows", k.part == PART_SHARD ? " - V0" : "");
	lg_line(b, "const float mr = ((const float *)max_logit)[row];");
	lg_line(b, "const float g0 = ((const float *)dloss)[row];");
	lg_line(b, "const float gs = g0 / ((const float *)sum_exp)[row];");
	lg_ce_emit_shares(b, k.e, k.c);
	emit_grad_pass(b, &k, true);
	lg_close(b);
}

static void emit_merge(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	struct shape k = shape_of(s, p);
	char ls[32];
	lg_double_literal(k.e, ls);
	lg_section(b, p->entry[0], "cross entropy, the merge of the vocab shards' statistics");
	lg_comment(b, "One row a thread; stats_in [NS, M, %d]: m, S hi, S lo, target, sum x hi, lo.", STATS);
	lg_emit_signature(b, s, p->entry[0], "__launch_bounds__(%d)", k.threads);
	lg_open(b, "{");
	lg_line(b, "const i64 row = (i64)blockIdx.x * %d + threadIdx.x;", k.threads);
	lg_line(b, "if (row >= M) return;");
	emit_label(b, &k);
	lg_open(b, "if (ign) {");
	lg_line(b, "((float *)loss)[row] = 0.0f;");
	lg_line(b, "if (sum_exp) ((float *)sum_exp)[row] = 0.0f;");
	lg_line(b, "if (max_logit) ((float *)max_logit)[row] = 0.0f;");
	lg_line(b, "return;");
	lg_close(b);
	lg_line(b, "const float *const st = (const float *)stats_in;");
	lg_line(b, "float mx = lg_ce_ninf(), xy = lg_ce_ninf();");
	lg_open(b, "for (i64 k = 0; k < NS; k++) {");
	lg_line(b, "const float *const o = st + (k * M + row) * %d;", STATS);
	lg_line(b, "mx = fmaxf(mx, o[0]);");
	lg_line(b, "xy = fmaxf(xy, o[3]);");
	lg_close(b);
	lg_line(b, "double S = 0.0%s;", k.smooth ? ", X = 0.0" : "");
	lg_open(b, "for (i64 k = 0; k < NS; k++) {");
	lg_line(b, "const float *const o = st + (k * M + row) * %d;", STATS);
	lg_line(b, "const double sk = (double)o[1] + (double)o[2];");
	lg_line(b, "if (sk > 0.0) S += sk * exp((double)o[0] - (double)mx);");
	if (k.smooth)
		lg_line(b, "X += (double)o[4] + (double)o[5];");
	lg_close(b);
	lg_line(b, "const double lse = log(S) + (double)mx;");
	if (k.smooth) {
		lg_line(b, "const double e = %s; // label smoothing", ls);
		lg_line(b, "const double l = (1.0 - e) * (lse - (double)xy) + e * (lse - X / %lld.0);", (long long)k.c);
	} else
		lg_line(b, "const double l = lse - (double)xy;");
	lg_line(b, "((float *)loss)[row] = (float)l;");
	lg_line(b, "if (sum_exp) ((float *)sum_exp)[row] = (float)S;");
	lg_line(b, "if (max_logit) ((float *)max_logit)[row] = mx;");
	lg_close(b);
}

void lg_cross_entropy_emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	(void)t;
	struct shape k = shape_of(s, p);
	if (k.part == PART_MERGE) {
		lg_section(b, "helpers for this spec", NULL);
		emit_ninf(b);
		emit_merge(b, s, p);
		return;
	}
	lg_section(b, "helpers for this spec", NULL);
	emit_helpers(b, &k);
	if (k.bwd)
		emit_backward(b, s, p);
	else if (p->v[P_CLUSTER] > 1)
		emit_forward_cluster(b, s, p);
	else
		emit_forward(b, s, p);
}
