/*
 * swiglu_common.c - plan, launch shape and emission shared by the SwiGLU +
 * FP8 families (swiglu_common.h), on the quantiser engine (quant_engine.h).
 *
 * The values, in fp32, from bf16 a = x1 (gate) and u = x2 (up), s =
 * sigmoid(a) = 1 / (1 + e^-a) with the hardware exp and reciprocal
 * (ex2.approx, rcp.approx: relative error about 2^-21 together for |a| up
 * to about 12; the references allow 2^-18):
 *   forward  y = a s u, times p (the row's prob, K6);
 *   backward dx1 = g p u s (1 + a (1 - s)), dx2 = g p a s; dp = sum a s u g.
 *
 * Strategy: the engine owns the tiles (128 tokens x 128 features a CTA, or
 * `fblocks` such tiles along the features in turn), the scales and both
 * copies; the values come in two hooks: fetch loads the 8 features of a
 * token with 16-byte loads (gate and up at the same column of x's two
 * halves) into raw registers, compute makes the values from them, so x is
 * read once by the forward. With tile.prefetch (K6's backward by
 * default) the engine issues the next feature block's fetch right after
 * this block's compute, before its barriers and stores. The backward's
 * output has K = 2n features: a block of the first half is dx1 (from g,
 * gate, up), of the second half dx2 (from g, gate, at the same input
 * column); where a CTA's blocks all lie in one half (every fblocks but the
 * backward's 2n/128), the engine compiles a copy of the block loop for
 * each half (lg_qe.cta_case), so dx1's copy computes no dx2 and dx2's
 * loads no up (K6's backward at 100 registers without prefetch against
 * 127; 176.1 us against 187.1, git history, commit 8b8e268: bench/h200-2026-12-01f). Its g and gate are
 * read by both blocks: the loads keep them in L2 (lg_ld16) and the grid
 * runs a token tile's feature blocks together, so the second read is an
 * L2 hit; up is read once (streaming). With
 * experts (K6) the engine's per-expert layout reads the counts on the
 * device; the prob of each token is loaded once a tile (prologue: the
 * forward into registers, the backward into shared memory). dprob
 * needs every gate-half block of a token: the backward of K6 gives a CTA
 * the n / 128 gate-half blocks of its token tile (another CTA the up
 * half's), or all 2n / 128; each thread adds its 8 features' terms in a
 * fixed order into its dpp[][] slots (shared memory) across the blocks,
 * and after the last gate-half block a butterfly over the 16 lanes of a
 * token (a fixed tree) gives dprob: deterministic. dx in bf16 (dx_bf16) is
 * stored from the values after each block, 16 bytes a thread.
 */
#include <stdio.h>

#include "swiglu_common.h"

#include "quant_common.h"
#include "quant_engine.h"

const int64_t lg_swiglu_threads_ok[] = {256, 512, 0};
const int64_t lg_swiglu_fblocks_ok[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 0};

enum { P_N, P_BWD, P_WEIGHTED, P_DXBF16, P_EXPERTS, P_THREADS, P_FBLOCKS, P_MIN_CTAS, P_PREFETCH, P_TILES, P_QT_STORE };

static const struct lg_swiglu_kind *kind_of(const struct lg_spec *s)
{
	return s->op == LG_OP_BATCH_SWIGLU_QUANT ? &lg_swiglu_kind_batch_swiglu_quant : &lg_swiglu_kind_swiglu_quant;
}

/* Output features: n forward, 2n backward. */
static int64_t out_features(const struct lg_spec *s, const struct lg_swiglu_kind *k)
{
	int64_t n = lg_spec_int(s, k->key_n);
	return s->pass == LG_PASS_BACKWARD ? 2 * n : n;
}

lg_status lg_swiglu_validate(const struct lg_spec *s, const char *where)
{
	const struct lg_swiglu_kind *k = kind_of(s);
	if (k->weighted && s->pass == LG_PASS_BACKWARD && lg_spec_quant(s).output != LG_QOUT_BOTH)
		return lg_spec_error(where, "quant.output: found \"%s\" in a backward spec, allowed: \"both\" "
				     "(the backward always writes both copies of dx)",
				     lg_quant_output_names[lg_spec_quant(s).output]);
	if (k->key_dx_bf16 >= 0 && s->pass == LG_PASS_FORWARD && lg_spec_int(s, k->key_dx_bf16))
		return lg_spec_error(where, "dx_bf16: found true in a forward spec, allowed: false (only the "
				     "backward writes dx)");
	int64_t nb = out_features(s, k) / 128;
	if (k->weighted && s->pass == LG_PASS_BACKWARD && lg_spec_has(s, k->key_fblocks) &&
	    lg_spec_int(s, k->key_fblocks) < nb && lg_spec_int(s, k->key_fblocks) != nb / 2)
		return lg_spec_error(where,
				     "tile.fblocks: found %lld, allowed: %lld = intermediate / 128 or at least %lld "
				     "= 2 intermediate / 128 (for dprob a CTA takes the whole gate half of its "
				     "tokens: the half, or every block)",
				     (long long)lg_spec_int(s, k->key_fblocks), (long long)(nb / 2), (long long)nb);
	return LG_OK;
}

lg_status lg_swiglu_plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	const struct lg_swiglu_kind *k = kind_of(s);
	bool bwd = s->pass == LG_PASS_BACKWARD;
	int64_t nb = out_features(s, k) / 128;
	p->v[P_N] = lg_spec_int(s, k->key_n);
	p->v[P_BWD] = bwd;
	p->v[P_WEIGHTED] = k->weighted;
	p->v[P_DXBF16] = k->key_dx_bf16 >= 0 && lg_spec_int(s, k->key_dx_bf16);
	p->v[P_EXPERTS] = k->key_experts >= 0 ? lg_spec_int(s, k->key_experts) : 0;
	/* fp32 values: 512 threads (4 tokens a thread), the engine's advice
	 * for computed values (not yet measured against 256 here) */
	p->v[P_THREADS] = lg_spec_has(s, k->key_threads) ? lg_spec_int(s, k->key_threads) : 512;
	/* feature blocks a CTA: one (K7: enough CTAs at 8192 tokens; K6's
	 * forward: 59 registers, 2 CTAs an SM at 512 threads, against 87 and 1
	 * for 4 blocks a CTA, whose loop keeps the row addresses live: the
	 * expert scan is then done for each block, its latency hidden by the
	 * other CTA); K6's backward: the gate half (dprob's terms, fixed order),
	 * the up half in a CTA of its own, or every block */
	int64_t fb = k->weighted && bwd ? nb / 2 : 1;
	if (lg_spec_has(s, k->key_fblocks))
		fb = lg_spec_int(s, k->key_fblocks);
	if (k->weighted && bwd && fb != nb / 2)
		fb = nb;
	p->v[P_FBLOCKS] = fb < nb ? fb : nb;
	p->tile[k->key_threads] = p->v[P_THREADS];
	p->tile[k->key_fblocks] = p->v[P_FBLOCKS];
	/* registers set the occupancy; none by default: K6's backward at 64
	 * registers (two CTAs an SM; probs and dprob terms in shared memory,
	 * 24 bytes spilled) measured 178.3 us against 177.4 at one CTA an SM
	 * with prefetch (65536 x 512, 256 experts, random counts), 149.4
	 * against 136.3 at whole tiles (git history, commit 8b8e268: bench/h200-2026-12-01f) */
	/* token tiles a CTA (K6): the forward 4 (the counts scan's latency
	 * paid once for them; 65536 x 512, 256 experts, git history, commit 8b8e268: bench/h200-2026-12-01f:
	 * under CUDA graphs 84.1 us at random counts and 70.4 at whole tiles
	 * against 86.4 / 72.6 at 2 and 92.6 / 80.0 at 1; `lingen bench` 85.1
	 * against 84.5 at 2, 85.7 at 1, 96.5 at 8), the backward 1 (its CTA
	 * takes the gate half's blocks in turn already, at 128 registers:
	 * 221.5 at 2) */
	/* Before sm_89 (no e4m3 cvt: lg_e4m3x2 in software, more registers)
	 * the forward takes 1: its tile loop does not fit the 64 registers of
	 * two CTAs an SM there (ptxas, batch_swiglu_quant_fwd_n256_e160_colwise
	 * on sm_80: 4 bytes spilled in the kernel and 44 in lg_expert_tiles at
	 * 4 tiles and at 2; 119 registers, one CTA an SM, with no minimum), and
	 * at 1 tile it takes 64 with no spill, two CTAs an SM as before (the
	 * other CTA hides the scan). */
	p->v[P_TILES] = 1;
	if (k->key_tiles >= 0)
		p->tile[k->key_tiles] = p->v[P_TILES] =
			lg_spec_has(s, k->key_tiles) ? lg_spec_int(s, k->key_tiles) : bwd || t->sm < 89 ? 1 : 4;
	/* the loop over tiles keeps more registers live (ptxas: K6's forward
	 * 74 at 4 tiles against 62 at 1): asking for two CTAs an SM gets 64
	 * with no spill (at 4 tiles: 85.5 us against 86.3 without the minimum) */
	p->tile[k->key_min_ctas] = p->v[P_MIN_CTAS] =
		lg_spec_has(s, k->key_min_ctas) ? lg_spec_int(s, k->key_min_ctas) : !bwd && p->v[P_TILES] > 1 ? 2 : 1;
	/* prefetch (the next block's loads in registers): only at one CTA an
	 * SM, where K6's backward takes it (223.1 / 226.2 us against 229.4 /
	 * 234.9 without, git history, commit 8b8e268: bench/h200-2026-12-01e; 177.4 against 211.9 with the
	 * halves' copies, 12-01f); off elsewhere, where it measured slower
	 * (one CTA an SM instead of two: K6 forward 109.2 against 98.7 at 4
	 * blocks a CTA, K7 backward 116.2 against 112.4) */
	bool pf_def = k->weighted && bwd && p->v[P_FBLOCKS] > 1 && p->v[P_MIN_CTAS] < 2;
	p->tile[k->key_prefetch] = p->v[P_PREFETCH] =
		lg_spec_has(s, k->key_prefetch) ? lg_spec_int(s, k->key_prefetch) : pf_def;
	p->v[P_QT_STORE] = lg_qe_plan_qt_store(s, p, k->key_qt_store);
	p->nentries = 1;
	snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
	return LG_OK;
}

/* The engine for a plan (and spec: its quant recipe; NULL for geometry). */
static struct lg_qe engine(const struct lg_spec *s, const struct lg_plan *p)
{
	bool bwd = p->v[P_BWD] != 0;
	struct lg_qe e = {.n = bwd ? 2 * p->v[P_N] : p->v[P_N], .threads = (int)p->v[P_THREADS],
			  .fblocks = (int)p->v[P_FBLOCKS], .tiles = (int)p->v[P_TILES],
			  .prefetch = p->v[P_PREFETCH] != 0, .qt_store = (enum lg_qt_store)p->v[P_QT_STORE], .vals = LG_QE_F32,
			  .layout = p->v[P_WEIGHTED] ? LG_QE_EXPERTS : LG_QE_FLAT};
	if (bwd)
		e.q = "dxq", e.s = "dxs", e.qt = "dxqt", e.st = "dxst";
	if (s) {
		e.rows = lg_quant_rowwise(s);
		e.cols = lg_quant_colwise(s);
		e.pow2 = lg_quant_pow2(s);
	}
	return e;
}

void lg_swiglu_geometry(const struct lg_plan *p, int e, const int64_t *sz, struct lg_launch_dim *d)
{
	(void)e;
	struct lg_qe q = engine(NULL, p);
	lg_qe_geometry(&q, sz[0], p->v[P_EXPERTS], d);
}

/* ------------------------------------------------------------ emission */

struct hook {
	long long n; /* intermediate */
	bool bwd, weighted, dxbf16;
	int r;       /* tokens a thread */
};

/* The SwiGLU values as device helpers (see the header comment). */
static void emit_math(lg_buf *b, const struct hook *h)
{
	lg_comment(b, "sigmoid in fp32: 1 / (1 + e^-a) by ex2.approx and rcp.approx (two MUFU ops, no");
	lg_comment(b, "division's slow path); 0 and 1 at the ends, never NaN.");
	lg_line(b, "static __device__ __forceinline__ float lg_swiglu_sig(float a)");
	lg_open(b, "{");
	lg_line(b, "return __fdividef(1.0f, 1.0f + __expf(-a));");
	lg_close(b);
	if (!h->bwd) {
		lg_comment(b, "y = silu(a) u%s.", h->weighted ? " p" : "");
		lg_line(b, "static __device__ __forceinline__ float lg_swiglu_y(float a, float u%s)",
			h->weighted ? ", float p" : "");
		lg_open(b, "{");
		lg_line(b, "return a * lg_swiglu_sig(a) * u%s;", h->weighted ? " * p" : "");
		lg_close(b);
		return;
	}
	lg_comment(b, "dx1 = g%s u s (1 + a (1 - s)), dx2 = g%s a s (s = sigmoid(a))%s.", h->weighted ? " p" : "",
		   h->weighted ? " p" : "", h->weighted ? "; dp += silu(a) u g" : "");
	lg_line(b, "static __device__ __forceinline__ void lg_swiglu_dx(float a, float u, float g%s,",
		h->weighted ? ", float p" : "");
	lg_line(b, "\tfloat &dx1, float &dx2%s)", h->weighted ? ", float &dp" : "");
	lg_open(b, "{");
	lg_line(b, "const float s = lg_swiglu_sig(a), gp = g%s;", h->weighted ? " * p" : "");
	lg_line(b, "dx1 = gp * u * s * (1.0f + a * (1.0f - s));");
	lg_line(b, "dx2 = gp * a * s;");
	if (h->weighted)
		lg_line(b, "dp += a * s * u * g;");
	lg_close(b);
}

/* Once a CTA: the probs of the tile's tokens; dprob's partial sums. The
 * forward keeps the thread's probs in registers; the backward keeps the
 * tile's probs and the thread's dprob terms in shared memory (read once a
 * row a block), so that its form at two CTAs an SM (tile.min_ctas 2, 64
 * registers) spills 24 bytes by ptxas instead of 92. */
static void prologue(lg_buf *b, const struct lg_qe *e, void *ctx)
{
	const struct hook *h = ctx;
	(void)e;
	if (!h->weighted)
		return;
	if (!h->bwd) {
		lg_comment(b, "The prob of each of the thread's tokens (a token past the tile's last:");
		lg_comment(b, "the last's).");
		lg_line(b, "float pr[%d];", h->r);
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int i = 0; i < %d; i++)", h->r);
		lg_line(b, "\tpr[i] = ((const float *)prob)[m0 + min(r0 + i, rows - 1)];");
		return;
	}
	lg_comment(b, "The prob of each token of the tile (a token past the tile's last: the last's);");
	lg_comment(b, "dprob: the thread's terms of each of its tokens, added in a fixed order.");
	lg_line(b, "__shared__ float prs[128];");
	lg_line(b, "__shared__ float dpp[%d][%d];", h->r, e->threads);
	lg_line(b, "if (threadIdx.x < 128)");
	lg_line(b, "\tprs[threadIdx.x] = ((const float *)prob)[m0 + min((int)threadIdx.x, rows - 1)];");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < %d; i++) dpp[i][threadIdx.x] = 0.0f;", h->r);
	lg_line(b, "__syncthreads();");
}

/* The raw registers of the thread's r rows: gate and up (forward), gate,
 * g and up (backward), 16 bytes a row each. */
static void raw(lg_buf *b, const struct lg_qe *e, int r, void *ctx)
{
	const struct hook *h = ctx;
	(void)e;
	lg_line(b, "lg_u32x4 ra[%d], ru[%d]; // gate, up of each row", r, r);
	if (h->bwd)
		lg_line(b, "lg_u32x4 rg[%d]; // g of each row", r);
}

/* The backward's half of a block whose first output feature is col: "true"
 * (dx1, the gate half) or "false" (dx2) where the engine's copy is
 * compiled for one (lg_qe.cta_case), else a bool expression. */
static const char *gate_half(char *buf, size_t size, const struct lg_qe *e, const struct lg_qe_row *r,
			     const struct hook *h)
{
	if (e->variant >= 0)
		return e->variant ? "true" : "false";
	snprintf(buf, size, "%s < %lld", r->col, h->n);
	return buf;
}

static void fetch(lg_buf *b, const struct lg_qe *e, const struct lg_qe_row *r, void *ctx)
{
	const struct hook *h = ctx;
	if (!h->bwd) {
		lg_comment(b, "gate at xa, up %lld bytes on; both read once (streaming)", 2 * h->n);
		lg_line(b, "const u8 *const xa = (const u8 *)x + (%s * %lld + %s) * 2;", r->row, 2 * h->n, r->col);
		lg_line(b, "ra[%s] = lg_ld16_cs(xa), ru[%s] = lg_ld16_cs(xa + %lld);", r->slot, r->slot, 2 * h->n);
		return;
	}
	char fb[96];
	const char *first = gate_half(fb, sizeof fb, e, r, h);
	if (e->variant == 1) {
		lg_comment(b, "c: the input column (the gate half: dx1)");
		lg_line(b, "const i64 c = %s;", r->col);
	} else if (e->variant == 0) {
		lg_comment(b, "c: the input column (the up half: dx2)");
		lg_line(b, "const i64 c = %s - %lld;", r->col, h->n);
	} else {
		lg_comment(b, "c: the input column; first: dx1 (the gate half), else dx2");
		lg_line(b, "const bool first = %s;", first);
		lg_line(b, "const i64 c = first ? %s : %s - %lld;", r->col, r->col, h->n);
		first = "first";
	}
	lg_line(b, "const u8 *const xa =");
	lg_line(b, "\t(const u8 *)x + (%s * %lld + c) * 2;", r->row, 2 * h->n);
	lg_comment(b, "gate, g: read by both halves (kept in L2);");
	lg_comment(b, "up: by the first only");
	lg_line(b, "ra[%s] = lg_ld16(xa);", r->slot);
	lg_line(b, "rg[%s] =", r->slot);
	lg_line(b, "\tlg_ld16((const u8 *)g + (%s * %lld + c) * 2);", r->row, h->n);
	if (e->variant == 1)
		lg_line(b, "ru[%s] = lg_ld16_cs(xa + %lld);", r->slot, 2 * h->n);
	else if (e->variant < 0) {
		lg_line(b, "ru[%s] = %s ? lg_ld16_cs(xa + %lld)", r->slot, first, 2 * h->n);
		lg_line(b, "\t: lg_u32x4{0u, 0u, 0u, 0u};");
	}
}

static void compute_forward(lg_buf *b, const struct hook *h, const struct lg_qe_row *r)
{
	lg_line(b, "const u32 aa[4] = {ra[%s].x, ra[%s].y, ra[%s].z, ra[%s].w};", r->slot, r->slot, r->slot, r->slot);
	lg_line(b, "const u32 ua[4] = {ru[%s].x, ru[%s].y, ru[%s].z, ru[%s].w};", r->slot, r->slot, r->slot, r->slot);
	if (h->weighted)
		lg_line(b, "const float pv = pr[%s - r0];", r->lrow);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int f = 0; f < 8; f++) {");
	lg_line(b, "const u32 wa = aa[f >> 1], wu = ua[f >> 1];");
	lg_line(b, "const float a = f & 1 ? lg_bf16_hi(wa) : lg_bf16_lo(wa);");
	lg_line(b, "const float u = f & 1 ? lg_bf16_hi(wu) : lg_bf16_lo(wu);");
	lg_line(b, "%s[f] = lg_swiglu_y(a, u%s);", r->dst, h->weighted ? ", pv" : "");
	lg_close(b);
}

static void compute_backward(lg_buf *b, const struct lg_qe *e, const struct hook *h, const struct lg_qe_row *r)
{
	char fb[96];
	const char *first = gate_half(fb, sizeof fb, e, r, h);
	bool up = e->variant != 0; /* the up values are used (dx1) */
	lg_line(b, "const u32 aa[4] = {ra[%s].x, ra[%s].y, ra[%s].z, ra[%s].w};", r->slot, r->slot, r->slot, r->slot);
	lg_line(b, "const u32 ga[4] = {rg[%s].x, rg[%s].y, rg[%s].z, rg[%s].w};", r->slot, r->slot, r->slot, r->slot);
	if (up)
		lg_line(b, "const u32 ua[4] = {ru[%s].x, ru[%s].y, ru[%s].z, ru[%s].w};", r->slot, r->slot, r->slot,
			r->slot);
	if (h->weighted) {
		lg_line(b, "const float pv = prs[%s];", r->lrow);
		lg_line(b, "float dps = 0.0f;");
	}
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int f = 0; f < 8; f++) {");
	lg_line(b, "const u32 wa = aa[f >> 1], wg = ga[f >> 1];");
	lg_line(b, "const float a = f & 1 ? lg_bf16_hi(wa) : lg_bf16_lo(wa);");
	if (up) {
		lg_line(b, "const u32 wu = ua[f >> 1];");
		lg_line(b, "const float u = f & 1 ? lg_bf16_hi(wu) : lg_bf16_lo(wu);");
	} else {
		lg_line(b, "const float u = 0.0f; // dx2 does not use up");
	}
	lg_line(b, "const float gv = f & 1 ? lg_bf16_hi(wg) : lg_bf16_lo(wg);");
	lg_line(b, "float d1, d2;");
	lg_line(b, "lg_swiglu_dx(a, u, gv%s, d1, d2%s);", h->weighted ? ", pv" : "", h->weighted ? ", dps" : "");
	if (e->variant >= 0)
		lg_line(b, "%s[f] = %s;", r->dst, e->variant ? "d1" : "d2");
	else
		lg_line(b, "%s[f] = %s ? d1 : d2;", r->dst, first);
	lg_close(b);
	if (h->weighted && e->variant == 1)
		lg_line(b, "dpp[%s][threadIdx.x] += dps;", r->slot);
	else if (h->weighted && e->variant < 0)
		lg_line(b, "if (%s) dpp[%s][threadIdx.x] += dps;", first, r->slot);
}

static void compute(lg_buf *b, const struct lg_qe *e, const struct lg_qe_row *r, void *ctx)
{
	const struct hook *h = ctx;
	if (h->bwd)
		compute_backward(b, e, h, r);
	else
		compute_forward(b, h, r);
}

/* After each block: dx in bf16; after the gate half's last block, dprob. */
static void epilogue(lg_buf *b, const struct lg_qe *e, void *ctx)
{
	const struct hook *h = ctx;
	if (h->dxbf16) {
		lg_comment(b, "dx in bf16: the thread's 8 values of each real token, 16 bytes.");
		lg_line(b, "#pragma unroll");
		lg_open(b, "for (int i = 0; i < %d; i++) {", h->r);
		lg_line(b, "if (r0 + i >= rows) continue;");
		lg_line(b, "u8 *const dxp = (u8 *)dx + ((m0 + r0 + i) * %lld + k0 + 8 * lb) * 2;", 2 * h->n);
		lg_line(b, "lg_st16_cs(dxp, lg_u32x4{lg_pack_bf16x2(v[i][0], v[i][1]),");
		lg_line(b, "\tlg_pack_bf16x2(v[i][2], v[i][3]), lg_pack_bf16x2(v[i][4], v[i][5]),");
		lg_line(b, "\tlg_pack_bf16x2(v[i][6], v[i][7])});");
		lg_close(b);
	}
	if (!(h->bwd && h->weighted) || e->variant == 0) /* none in the up half's copy */
		return;
	lg_comment(b, "dprob after the gate half's last block: a token's 16 lanes summed by a fixed");
	lg_comment(b, "butterfly (the same bits in every lane and on every run).");
	lg_open(b, "if (cb == %lld) {", h->n / 128 - 1);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < %d; i++) {", h->r);
	lg_line(b, "const float t = lg_sum_xor(dpp[i][threadIdx.x], 1, 8);");
	lg_line(b, "if (lb == 0 && r0 + i < rows) ((float *)dprob)[m0 + r0 + i] = t;");
	lg_close(b);
	lg_close(b);
}

void lg_swiglu_emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	(void)t;
	struct lg_qe e = engine(s, p);
	char experts[24];
	snprintf(experts, sizeof experts, "%lld", (long long)p->v[P_EXPERTS]);
	e.experts = experts;
	/* The backward's CTAs whose blocks all lie in one half (every block
	 * count dividing the half's n / 128): a copy of the loop for each
	 * half, so that dx1's copy computes no dx2 and dx2's loads no up (by
	 * ptxas on K6: 100 registers for the gate half's copy against 127
	 * for one copy of both). */
	char half[48];
	int64_t nb2 = p->v[P_N] / 128, fbl = p->v[P_FBLOCKS];
	if (p->v[P_BWD] && nb2 % fbl == 0) {
		snprintf(half, sizeof half, "cg < %lld", (long long)(nb2 / fbl));
		e.cta_case = half;
	}
	struct hook h = {.n = (long long)p->v[P_N], .bwd = p->v[P_BWD] != 0, .weighted = p->v[P_WEIGHTED] != 0,
			 .dxbf16 = p->v[P_DXBF16] != 0, .r = lg_qe_tokens_per_thread(&e)};
	struct lg_qe_hooks hk = {.ctx = &h, .raw = raw, .fetch = fetch, .compute = compute, .prologue = prologue,
				 .epilogue = h.dxbf16 || (h.bwd && h.weighted) ? epilogue : NULL};
	lg_section(b, "helpers for this spec", NULL);
	lg_qe_emit_helpers(b, &e);
	emit_math(b, &h);
	lg_section(b, p->entry[0], h.bwd ? "SwiGLU backward + blockwise FP8 of dx (K = 2n)"
				       : "SwiGLU forward + blockwise FP8 of y");
	if (h.weighted)
		lg_comment(b, "CTA: a token tile of one expert (of %lld, from counts) x %d feature blocks of 128;",
			   (long long)p->v[P_EXPERTS], (int)p->v[P_FBLOCKS]);
	else
		lg_comment(b, "CTA: a tile of 128 tokens x %d feature blocks of 128;", (int)p->v[P_FBLOCKS]);
	lg_comment(b, "%d threads, %d tokens x 8 features a thread, values from x%s in registers.", e.threads, h.r,
		   h.bwd ? " and g" : "");
	char lb[48];
	lg_emit_signature(b, s, p->entry[0], "%s", lg_launch_bounds(lb, e.threads, p->v[P_MIN_CTAS]));
	lg_open(b, "{");
	lg_qe_emit_body(b, &e, &hk);
	lg_close(b);
}

/* Tile variants for `lingen tune`: feature blocks a CTA (up to 8, the
 * output's) x threads (K6's backward: the gate half or every block), each
 * at one and two CTAs an SM (K6's forward: at 4 and 1 token tiles a CTA). */
int lg_swiglu_candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max)
{
	const struct lg_swiglu_kind *k = kind_of(s);
	static const int64_t min_ctas[] = {1, 2, 0}; /* and each again with 2 CTAs an SM */
	int n;
	if (k->weighted && s->pass == LG_PASS_BACKWARD) {
		/* the gate half (the plan's default: fblocks left out, so any
		 * n / 128 has it) and every block (the key's first value at
		 * least 2n / 128: it clamps to the output's), each at both
		 * thread counts */
		int64_t nb = out_features(s, k) / 128, every = 1;
		while (every < nb)
			every *= 2;
		int64_t fb[2] = {every, 0};
		n = lg_candidate_values(s, t, out, 0, max, k->key_threads, lg_swiglu_threads_ok);
		n = lg_candidate_grid(s, t, out, n, max, k->key_fblocks, fb, k->key_threads, lg_swiglu_threads_ok);
	} else {
		/* 1, 2, 4, 8 blocks a CTA, those the output has */
		int64_t fb[5] = {0}, nb = out_features(s, k) / 128;
		for (int i = 0, v = 1; v <= 8 && v <= nb; i++, v *= 2)
			fb[i] = v;
		n = lg_candidate_grid(s, t, out, 0, max, k->key_fblocks, fb, k->key_threads, lg_swiglu_threads_ok);
	}
	if (k->key_tiles >= 0 && s->pass == LG_PASS_FORWARD) {
		/* K6's forward: 4 token tiles a CTA (the default, at two CTAs an
		 * SM by default) and 1 (no minimum) */
		static const int64_t tiles[] = {4, 1, 0};
		return lg_candidate_times(s, t, out, 0, n, max, k->key_tiles, tiles);
	}
	return lg_candidate_times(s, t, out, 0, n, max, k->key_min_ctas, min_ctas);
}
