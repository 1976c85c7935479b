/*
 * qk_norm_rope_ref.c - CPU reference of family "qk_norm_rope" (docs/kernels.md
 * K2), in float64: per token (s, b) and head, u = x (or silu(x)); q and k
 * heads y = u r w with r = 1 / sqrt(sum u^2 / D + eps), then rotate-half
 * over [0, R) with the angles freqs[p, 0:R/2] (times mscale) at the token's
 * position p (its sequence index s; varlen: its index in its packed
 * sequence; context parallel: the zig-zag halves remapped); v heads u. The backward is
 * the exact transpose: the gradient un-rotated, the RMSNorm backward
 * (du = r g w - r^3 u (sum u g w) / D, dw += u r g), then through the SiLU.
 *
 * How exact: the GPU works in fp32 (an fp32 RMS, fp32 products, IEEE
 * sqrtf and division, accurate sincosf and expf). Each bf16 output is the
 * float64 value rounded once, bit for bit, but where the GPU's fp32 error
 * bound reaches another bf16 value (a slack there): REL of each product's
 * magnitude (the rotation's two terms counted apart), SUM_REL d of the
 * magnitudes summed in the backward's dot, ONE_MINUS_S of the SiLU
 * derivative's 1 - s, all with a wide margin. So a kernel rounding toward
 * zero fails (tests/test_compare.c). The weight gradients (long fp32 sums)
 * keep a relative tolerance.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "numeric_ref.h"
#include "ref.h"

enum { F_QKV, F_QW, F_KW, F_FREQS, F_CU, F_Q, F_K, F_V };
#define REL 0x1p-16
#define SUM_REL 0x1p-22
#define ONE_MINUS_S 0x1p-19
enum { B_GQ, B_GK, B_GV, B_QKV, B_QW, B_KW, B_FREQS, B_CU, B_DQKV, B_DQW, B_DKW };

/* The spec's numbers, read by key name. */
struct dims {
	size_t d, hq, hkv, r, heads, seq, batch;
	bool bs, plain, silu, varlen;
	size_t nseq, cp, cp_rank; /* varlen: sequences in cu (the size "batch"), batch 1 */
	double eps, mscale;
	const int32_t *cu;        /* varlen: cumulative global sequence lengths */
};

static struct dims dims_of(const struct lg_spec *s, const struct lg_ref_case *c)
{
	struct dims k = {.d = (size_t)lg_ref_int(s, "head_dim"), .hq = (size_t)lg_ref_int(s, "q_heads"),
			 .hkv = (size_t)lg_ref_int(s, "kv_heads"), .seq = (size_t)c->sizes[0],
			 .batch = (size_t)c->sizes[1], .bs = lg_ref_int(s, "qkv_order") == 1,
			 .plain = lg_ref_int(s, "head_layout") == 1, .silu = lg_ref_int(s, "silu") != 0,
			 .eps = lg_ref_num(s, "eps"), .varlen = lg_ref_int(s, "varlen") != 0,
			 .cp = (size_t)lg_ref_int(s, "cp_size"), .cp_rank = (size_t)lg_ref_int(s, "cp_rank"),
			 .mscale = lg_ref_num(s, "mscale")};
	k.r = (size_t)(lg_ref_num(s, "rotary_fraction") * (double)k.d);
	if (k.varlen) {
		k.nseq = k.batch, k.batch = 1;
		k.cu = c->buf[s->pass == LG_PASS_FORWARD ? F_CU : B_CU].host;
	}
	k.heads = k.hq + 2 * k.hkv;
	return k;
}

/* Head j of a token (q heads, k heads, v heads) in its qkv row. */
static size_t slot_of(const struct dims *k, size_t j)
{
	if (k->plain)
		return j;
	size_t w = k->hq / k->hkv;
	if (j < k->hq)
		return j / w * (w + 2) + j % w;
	if (j < k->hq + k->hkv)
		return (j - k->hq) * (w + 2) + w;
	return (j - k->hq - k->hkv) * (w + 2) + w + 1;
}

/* The qkv row of (s, b), and the output row (b, s). */
static size_t in_row(const struct dims *k, size_t s, size_t b) { return k->bs ? b * k->seq + s : s * k->batch + b; }

/* The rotary position of token (s, b): its index in its sequence (varlen:
 * the last sequence of cu starting at or before s), the context-parallel
 * halves remapped, kept within the freqs table [seq * cp, R]. */
static size_t position(const struct dims *k, size_t s)
{
	int64_t i = (int64_t)s, l = (int64_t)k->seq, cp = (int64_t)k->cp;
	if (k->varlen && k->nseq > 0) {
		size_t j = 0;
		for (size_t q = 1; q < k->nseq; q++)
			if ((int64_t)k->cu[q] / cp <= (int64_t)s)
				j = q;
		int64_t start = (int64_t)k->cu[j] / cp;
		i = (int64_t)s - start;
		l = (int64_t)k->cu[j + 1] / cp - start;
	}
	int64_t p = i;
	if (cp > 1) {
		int64_t h = l / 2, r = (int64_t)k->cp_rank;
		p = i < h ? r * h + i : (2 * cp - 1 - r) * h + (i - h);
	}
	int64_t top = (int64_t)(k->seq * k->cp) - 1;
	return (size_t)(p < 0 ? 0 : p > top ? top : p);
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	if (s->pass == LG_PASS_FORWARD) {
		for (int i = F_Q; i <= F_V; i++)
			c->buf[i].cmp = LG_CMP_BF16_ULP, c->buf[i].ulps = 0;
		return;
	}
	c->buf[B_DQKV].cmp = LG_CMP_BF16_ULP, c->buf[B_DQKV].ulps = 0;
	c->buf[B_DQW].cmp = LG_CMP_FP32, c->buf[B_DQW].rtol = 1e-3, c->buf[B_DQW].atol = 1e-3;
	c->buf[B_DKW].cmp = LG_CMP_FP32, c->buf[B_DKW].rtol = 1e-3, c->buf[B_DKW].atol = 1e-3;
}

/* qkv of varied scale per token, weights near 1, RoPE angles p theta^(-2i/R)
 * (cat(f, f)), gradients of unit scale. */
static void fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed)
{
	struct dims k = dims_of(s, c);
	bool fwd = s->pass == LG_PASS_FORWARD;
	uint64_t st = seed;
	uint16_t *qkv = c->buf[fwd ? F_QKV : B_QKV].host;
	size_t width = k.heads * k.d, rows = k.seq * k.batch;
	if (k.varlen) { /* random global lengths (cp times the local ones), some empty */
		int32_t *cu = c->buf[fwd ? F_CU : B_CU].host;
		size_t left = k.seq;
		cu[0] = 0;
		for (size_t q = 0; q < k.nseq; q++) {
			size_t len = q + 1 == k.nseq ? left : lg_ref_rand(&st) % (left + 1);
			len = q % 5 == 3 ? 0 : len;
			cu[q + 1] = cu[q] + (int32_t)(len * k.cp);
			left -= len;
		}
		cu[k.nseq] += (int32_t)(left * k.cp);
	}
	for (size_t n = 0; n < rows; n++)
		lg_ref_fill_bf16(qkv + n * width, width, ldexpf(1.0f, (int)(lg_ref_rand(&st) % 9) - 4), &st);
	for (int w = 0; w < 2; w++) {
		uint16_t *wt = c->buf[(fwd ? F_QW : B_QW) + w].host;
		lg_ref_fill_norm_weight(wt, k.d, &st);
	}
	float *fr = c->buf[fwd ? F_FREQS : B_FREQS].host;
	size_t half = k.r / 2;
	for (size_t p = 0; p < k.seq * k.cp; p++)
		for (size_t i = 0; i < k.r; i++)
			fr[p * k.r + i] = (float)((double)p * pow(10000.0, -2.0 * (double)(i % half) / (double)k.r));
	if (fwd)
		return;
	size_t bs = k.batch * k.seq * k.d;
	lg_ref_fill_bf16(c->buf[B_GQ].host, bs * k.hq, 1.0f, &st);
	lg_ref_fill_bf16(c->buf[B_GK].host, bs * k.hkv, 1.0f, &st);
	lg_ref_fill_bf16(c->buf[B_GV].host, bs * k.hkv, 1.0f, &st);
}

/* One head vector: u from x (silu or not), and for q and k r. */
static double load_u(const struct dims *k, const uint16_t *x, double *u)
{
	double ss = 0.0;
	for (size_t i = 0; i < k->d; i++) {
		double v = lg_ref_bf16_to_f32(x[i]);
		u[i] = k->silu ? v * sigmoid(v) : v;
		ss += u[i] * u[i];
	}
	return 1.0 / sqrt(ss / (double)k->d + k->eps);
}

/* out = rotate(y) over [0, R) (transpose: its transpose), angles fr[0:R/2];
 * mag[i]: the sum of the magnitudes of out[i]'s terms (for its bound). */
static void rotate(const struct dims *k, const float *fr, const double *y, double *out, double *mag,
		   bool transpose)
{
	size_t h = k->r / 2;
	double sg = transpose ? -1.0 : 1.0;
	for (size_t i = 0; i < k->d; i++)
		out[i] = y[i], mag[i] = fabs(y[i]);
	for (size_t i = 0; i < h; i++) {
		double cs = k->mscale * cos((double)fr[i]), sn = k->mscale * sin((double)fr[i]);
		out[i] = y[i] * cs - sg * y[i + h] * sn;
		out[i + h] = y[i + h] * cs + sg * y[i] * sn;
		mag[i] = fabs(y[i] * cs) + fabs(y[i + h] * sn);
		mag[i + h] = fabs(y[i + h] * cs) + fabs(y[i] * sn);
	}
}

/* A bf16 output's slack, allocated (zeroed) here, freed with its host. */
static uint16_t *slack_of(struct lg_ref_buf *b)
{
	free(b->slack);
	b->slack = calloc(b->count ? b->count : 1, sizeof *b->slack);
	LG_ASSERT(b->slack);
	return b->slack;
}

/* The output (or gradient) tensor of head j, and the head's index in it. */
static size_t head_in(const struct dims *k, size_t j, int *which)
{
	*which = j < k->hq ? 0 : j < k->hq + k->hkv ? 1 : 2;
	return j < k->hq ? j : j < k->hq + k->hkv ? j - k->hq : j - k->hq - k->hkv;
}

static void run_fwd(const struct dims *k, struct lg_ref_case *c)
{
	const uint16_t *qkv = c->buf[F_QKV].host, *wq = c->buf[F_QW].host, *wk = c->buf[F_KW].host;
	const float *freqs = c->buf[F_FREQS].host;
	uint16_t *outs[3] = {c->buf[F_Q].host, c->buf[F_K].host, c->buf[F_V].host};
	uint16_t *slack[3] = {slack_of(&c->buf[F_Q]), slack_of(&c->buf[F_K]), slack_of(&c->buf[F_V])};
	size_t nh[3] = {k->hq, k->hkv, k->hkv};
	double *u = malloc(4 * k->d * sizeof *u), *y = u + k->d, *o = y + k->d, *mag = o + k->d;
	LG_ASSERT(u);
	for (size_t s = 0; s < k->seq; s++)
		for (size_t b = 0; b < k->batch; b++)
			for (size_t j = 0; j < k->heads; j++) {
				int which;
				size_t hh = head_in(k, j, &which);
				const uint16_t *x = qkv + (in_row(k, s, b) * k->heads + slot_of(k, j)) * k->d;
				double r = load_u(k, x, u);
				const uint16_t *w = which == 0 ? wq : wk;
				for (size_t i = 0; i < k->d; i++)
					y[i] = which == 2 ? u[i] : u[i] * r * lg_ref_bf16_to_f32(w[i]);
				if (which == 2) {
					memcpy(o, y, k->d * sizeof *o);
					for (size_t i = 0; i < k->d; i++) /* u: x, or silu(x) in fp32 */
						mag[i] = k->silu ? fabs(y[i]) : 0.0;
				} else {
					rotate(k, freqs + position(k, s) * k->r, y, o, mag, false);
				}
				size_t at = ((b * k->seq + s) * nh[which] + hh) * k->d;
				for (size_t i = 0; i < k->d; i++)
					outs[which][at + i] = lg_ref_bf16_bounded(o[i], REL * mag[i], &slack[which][at + i]);
			}
	free(u);
}

static void run_bwd(const struct dims *k, struct lg_ref_case *c)
{
	const uint16_t *qkv = c->buf[B_QKV].host, *wq = c->buf[B_QW].host, *wk = c->buf[B_KW].host;
	const uint16_t *gs[3] = {c->buf[B_GQ].host, c->buf[B_GK].host, c->buf[B_GV].host};
	const float *freqs = c->buf[B_FREQS].host;
	uint16_t *dqkv = c->buf[B_DQKV].host, *slack = slack_of(&c->buf[B_DQKV]);
	size_t nh[3] = {k->hq, k->hkv, k->hkv};
	double *u = malloc(7 * k->d * sizeof *u), *g = u + k->d, *gh = g + k->d, *acc = gh + k->d;
	double *mag = acc + 2 * k->d, *gerr = mag + k->d;
	LG_ASSERT(u);
	memset(acc, 0, 2 * k->d * sizeof *acc);
	for (size_t s = 0; s < k->seq; s++)
		for (size_t b = 0; b < k->batch; b++)
			for (size_t j = 0; j < k->heads; j++) {
				int which;
				size_t hh = head_in(k, j, &which);
				size_t xo = (in_row(k, s, b) * k->heads + slot_of(k, j)) * k->d;
				double r = load_u(k, qkv + xo, u);
				const uint16_t *gsrc = gs[which] + ((b * k->seq + s) * nh[which] + hh) * k->d;
				for (size_t i = 0; i < k->d; i++)
					g[i] = lg_ref_bf16_to_f32(gsrc[i]), gerr[i] = 0.0;
				if (which < 2) {
					const uint16_t *w = which == 0 ? wq : wk;
					rotate(k, freqs + position(k, s) * k->r, g, gh, mag, true);
					double dot = 0.0, adot = 0.0, d = (double)k->d;
					for (size_t i = 0; i < k->d; i++) {
						dot += u[i] * gh[i] * lg_ref_bf16_to_f32(w[i]);
						adot += fabs(u[i] * lg_ref_bf16_to_f32(w[i])) * mag[i];
					}
					for (size_t i = 0; i < k->d; i++) {
						double wv = lg_ref_bf16_to_f32(w[i]), a = r * gh[i] * wv;
						double bb = r * r * r * u[i] * dot / d;
						acc[which * k->d + i] += u[i] * r * gh[i];
						g[i] = a - bb;
						gerr[i] = REL * (fabs(r * wv) * mag[i] + fabs(bb)) +
							  fabs(r * r * r * u[i] / d) * SUM_REL * d * adot;
					}
				}
				for (size_t i = 0; i < k->d; i++) {
					double x = lg_ref_bf16_to_f32(qkv[xo + i]), sg = sigmoid(x);
					double f = k->silu ? sg * (1.0 + x * (1.0 - sg)) : 1.0;
					double ferr = k->silu ? REL * fabs(f) + sg * fabs(x) * ONE_MINUS_S : 0.0;
					dqkv[xo + i] = lg_ref_bf16_bounded(g[i] * f, fabs(f) * gerr[i] + fabs(g[i]) * ferr,
									   &slack[xo + i]);
				}
			}
	float *dw[2] = {c->buf[B_DQW].host, c->buf[B_DKW].host};
	for (int w = 0; w < 2; w++)
		for (size_t i = 0; i < k->d; i++)
			dw[w][i] = (float)acc[(size_t)w * k->d + i];
	free(u);
}

static void run(const struct lg_spec *s, struct lg_ref_case *c)
{
	struct dims k = dims_of(s, c);
	if (s->pass == LG_PASS_FORWARD)
		run_fwd(&k, c);
	else
		run_bwd(&k, c);
}

const struct lg_ref_family lg_ref_qk_norm_rope = {describe, fill, run};
