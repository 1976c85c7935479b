/*
 * quant_ref.c - the blockwise FP8 quantisation of docs/kernels.md 1.2 and 1.3 in
 * plain C, shared by the references of every quantising family: an fp32
 * [m, n] array into the rowwise copy (1x128 blocks, q [m, n], scales
 * s [n/128, m]) and the columnwise copy (128x1 blocks, transposed:
 * qt [n, m], scales st [ceil(m/128), n]; the dense quantisers' flat copy
 * has rows round_up(m, 128) apart, a zero tail). A partial last token block
 * takes its amax over its real rows only. Also the same for values the GPU
 * computes only to a bound (a slack per element from the bound), and the
 * per-expert layout. The exact quantisation is the bounded one with no
 * error; both run on lg_ref_parallel_rows's threads (rows, and blocks of
 * columns of a 128-token block), bit for bit a serial run's.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

#include "numeric_ref.h"
#include "ref.h"

/* ------------------------------------------- values known to a bound */

uint16_t lg_ref_steps(uint32_t a, uint32_t b, int nbits)
{
	if (a == b)
		return 0;
	uint32_t sbit = 1u << (nbits - 1);
	int64_t oa = (a & sbit) ? -(int64_t)(a & (sbit - 1)) : (int64_t)a;
	int64_t ob = (b & sbit) ? -(int64_t)(b & (sbit - 1)) : (int64_t)b;
	int64_t d = oa > ob ? oa - ob : ob - oa;
	if (d == 0)
		d = 1;
	return d > UINT16_MAX ? UINT16_MAX : (uint16_t)d;
}

static uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

static uint16_t max16(uint16_t a, uint16_t b) { return a > b ? a : b; }

/* The scale of a block whose amax lies in [lo, hi] (nominal amax): the
 * nominal scale into *sv, the range into *slo, *shi; the slack of the
 * scale (fp32 steps; UINT16_MAX when a power-of-two scale is ambiguous). */
static uint16_t scale_tol(float amax, float lo, float hi, bool pow2, float *sv, float *slo, float *shi)
{
	*sv = lg_ref_scale(amax, pow2);
	*slo = lg_ref_scale(lo, pow2);
	*shi = lg_ref_scale(hi, pow2);
	if (pow2 && (*slo != *sv || *shi != *sv))
		return UINT16_MAX;
	return max16(lg_ref_steps(f32_bits(*sv), f32_bits(*slo), 32), lg_ref_steps(f32_bits(*sv), f32_bits(*shi), 32));
}

/* The slack of the payload of v in [v - e, v + e] under a scale in [slo,
 * shi] (positive), nominal payload nom. */
static uint16_t payload_tol(float v, float e, float slo, float shi, uint8_t nom)
{
	float lo = v - e, hi = v + e;
	float c[4] = {lo / slo, hi / slo, lo / shi, hi / shi};
	int mag = nom & 0x7f;
	if (mag >= 1 && mag <= 125 && (lo > 0) == (hi > 0) && lo != 0 && hi != 0 && (lo > 0) == !(nom & 0x80)) {
		/* the usual case, quickly: every end strictly between the midpoints
		 * next to the nominal payload rounds to it */
		double below = ((double)lg_ref_e4m3_to_f32((uint8_t)(mag - 1)) + lg_ref_e4m3_to_f32((uint8_t)mag)) / 2;
		double above = ((double)lg_ref_e4m3_to_f32((uint8_t)mag) + lg_ref_e4m3_to_f32((uint8_t)(mag + 1))) / 2;
		bool inside = true;
		for (int i = 0; i < (slo == shi ? 2 : 4); i++)
			inside = inside && fabs((double)c[i]) > below && fabs((double)c[i]) < above;
		if (inside)
			return 0;
	}
	uint16_t d = 0;
	for (int i = 0; i < (slo == shi ? 2 : 4); i++) /* one scale: two ends */
		d = max16(d, lg_ref_steps(nom, lg_ref_f32_to_e4m3(c[i]), 8));
	return d;
}

/* One quantisation in parallel: rows of the rowwise copy, and units of
 * (128-token block, COLS columns) of the columnwise one; each writes only
 * its own payloads, scales and slacks (max is the same in any order), so
 * the bits are those of a serial run. */
#define COLS 64

struct qjob {
	const float *y, *err;
	size_t m, n;
	bool pow2;
	const struct lg_ref_qout *o;
	atomic_size_t ambiguous;
};

static void rows_fn(void *ctx, size_t lo_row, size_t hi_row)
{
	struct qjob *j = ctx;
	const struct lg_ref_qout *o = j->o;
	size_t m = j->m, n = j->n, nb = n / 128, ambiguous = 0;
	for (size_t i = lo_row; i < hi_row; i++)
		for (size_t b = 0; b < nb; b++) {
			size_t at = i * n + b * 128;
			float amax = 0.0f, lo = 0.0f, hi = 0.0f;
			for (int k = 0; k < 128; k++) {
				float a = fabsf(j->y[at + (size_t)k]), e = j->err ? j->err[at + (size_t)k] : 0.0f;
				amax = fmaxf(amax, a), lo = fmaxf(lo, a - e), hi = fmaxf(hi, a + e);
			}
			float sv, slo, shi;
			uint16_t ss = scale_tol(amax, lo, hi, j->pow2, &sv, &slo, &shi);
			ambiguous += ss == UINT16_MAX;
			o->s[b * m + i] = sv;
			if (o->s_slack)
				o->s_slack[b * m + i] = ss;
			for (size_t k = 0; k < 128; k++) {
				o->q[at + k] = lg_ref_quant(j->y[at + k], sv, j->pow2);
				if (o->q_slack)
					o->q_slack[at + k] = j->err ? payload_tol(j->y[at + k], j->err[at + k], slo, shi,
										  o->q[at + k]) : 0;
			}
		}
	atomic_fetch_add(&j->ambiguous, ambiguous);
}

static void cols_fn(void *ctx, size_t lo_unit, size_t hi_unit)
{
	struct qjob *j = ctx;
	const struct lg_ref_qout *o = j->o;
	size_t m = j->m, n = j->n, nkc = (n + COLS - 1) / COLS, ambiguous = 0;
	for (size_t u = lo_unit; u < hi_unit; u++) {
		size_t t = u / nkc, k0 = u % nkc * COLS, k1 = k0 + COLS < n ? k0 + COLS : n;
		size_t r0 = t * 128, rows = m - r0 < 128 ? m - r0 : 128;
		float amax[COLS] = {0}, lo[COLS] = {0}, hi[COLS] = {0}, sv[COLS], slo[COLS], shi[COLS];
		for (size_t i = 0; i < rows; i++) /* row by row: the reads in order */
			for (size_t k = k0; k < k1; k++) {
				size_t at = (r0 + i) * n + k;
				float a = fabsf(j->y[at]), e = j->err ? j->err[at] : 0.0f;
				amax[k - k0] = fmaxf(amax[k - k0], a), lo[k - k0] = fmaxf(lo[k - k0], a - e);
				hi[k - k0] = fmaxf(hi[k - k0], a + e);
			}
		for (size_t k = k0; k < k1; k++) {
			uint16_t ss = scale_tol(amax[k - k0], lo[k - k0], hi[k - k0], j->pow2, &sv[k - k0], &slo[k - k0],
						&shi[k - k0]);
			ambiguous += ss == UINT16_MAX;
			o->st[t * n + k] = sv[k - k0];
			if (o->st_slack)
				o->st_slack[t * n + k] = ss;
		}
		size_t ld = o->qt_ld ? o->qt_ld : m;
		for (size_t i = 0; i < rows; i++)
			for (size_t k = k0; k < k1; k++) {
				size_t at = (r0 + i) * n + k, to = k * ld + r0 + i;
				o->qt[to] = lg_ref_quant(j->y[at], sv[k - k0], j->pow2);
				if (o->qt_slack)
					o->qt_slack[to] = j->err ? payload_tol(j->y[at], j->err[at], slo[k - k0], shi[k - k0],
									       o->qt[to]) : 0;
			}
		if (r0 + rows == m) /* the last block: the pitch's tail, zeros */
			for (size_t k = k0; k < k1; k++)
				for (size_t i = m; i < ld; i++) {
					o->qt[k * ld + i] = 0;
					if (o->qt_slack)
						o->qt_slack[k * ld + i] = 0;
				}
	}
	atomic_fetch_add(&j->ambiguous, ambiguous);
}

size_t lg_ref_quant_tol(const float *y, const float *err, size_t m, size_t n, struct lg_quant qr,
			const struct lg_ref_qout *o)
{
	struct qjob j = {.y = y, .err = err, .m = m, .n = n, .pow2 = qr.round_scale, .o = o};
	atomic_init(&j.ambiguous, 0);
	size_t cost = err ? 120 : 40; /* per value: a division, the e4m3 search (and the slack's) */
	if (qr.output != LG_QOUT_COLUMNWISE)
		lg_ref_parallel_rows(m, n * cost, rows_fn, &j);
	if (qr.output != LG_QOUT_ROWWISE)
		lg_ref_parallel_rows((m + 127) / 128 * ((n + COLS - 1) / COLS), 128 * COLS * cost, cols_fn, &j);
	return atomic_load(&j.ambiguous);
}

void lg_ref_quant_blockwise(const float *y, size_t m, size_t n, struct lg_quant qr, uint8_t *q, float *s,
			    uint8_t *qt, float *st)
{
	struct lg_ref_qout o = {.q = q, .s = s, .qt = qt, .st = st};
	lg_ref_quant_tol(y, NULL, m, n, qr, &o); /* exact values: the nominal copies, no slack */
}

void lg_ref_describe_copies(struct lg_ref_case *c, int q, int s, int qt, int st)
{
	c->buf[q].cmp = c->buf[qt].cmp = LG_CMP_E4M3_ULP; /* bit-equal: ulps 0 */
	c->buf[s].cmp = c->buf[st].cmp = LG_CMP_SCALE;
}

void lg_ref_quant_flat(const float *y, size_t m, size_t n, struct lg_quant qr, uint8_t *q, float *s, uint8_t *qt,
		       float *st)
{
	struct lg_ref_qout o = {.q = q, .s = s, .qt = qt, .st = st, .qt_ld = lg_ref_qt_pitch(m)};
	lg_ref_quant_tol(y, NULL, m, n, qr, &o);
}

/* The same copy, the pointers of one expert's segment. */
static struct lg_ref_qout segment(const struct lg_ref_qout *o, size_t start, size_t strow, size_t n)
{
	struct lg_ref_qout e = *o;
#define AT(p, off) e.p = o->p ? o->p + (off) : NULL
	AT(q, start * n), AT(q_slack, start * n), AT(s, start * (n / 128)), AT(s_slack, start * (n / 128));
	AT(qt, start * n), AT(qt_slack, start * n), AT(st, strow * n), AT(st_slack, strow * n);
#undef AT
	return e;
}

size_t lg_ref_quant_experts_tol(const float *y, const float *err, size_t m, size_t n, const int32_t *counts,
				size_t experts, struct lg_quant qr, const struct lg_ref_qout *o, size_t st_rows)
{
	bool rows = qr.output != LG_QOUT_COLUMNWISE, cols = qr.output != LG_QOUT_ROWWISE;
	/* what the kernel leaves alone keeps the harness's 0xff poison */
	if (rows) {
		memset(o->q, 0xff, m * n);
		memset(o->s, 0xff, m * (n / 128) * sizeof *o->s);
	}
	if (cols) {
		memset(o->qt, 0xff, m * n);
		memset(o->st, 0xff, st_rows * n * sizeof *o->st);
	}
	size_t start = 0, strow = 0, ambiguous = 0;
	for (size_t e = 0; e < experts; e++) {
		size_t c = counts[e] > 0 ? (size_t)counts[e] : 0;
		if (c == 0)
			continue;
		if (start + c > m) /* past the capacity: the kernel writes nothing for it */
			break;
		struct lg_ref_qout seg = segment(o, start, strow, n);
		ambiguous += lg_ref_quant_tol(y + start * n, err ? err + start * n : NULL, c, n, qr, &seg);
		start += c;
		strow += (c + 127) / 128;
	}
	return ambiguous;
}

/* Rows of varied magnitude (2^-8 .. 2^8), a few rows of +0 and of -0, rows
 * far below the 1e-30 scale floor and far above 448, outliers, and an
 * all-zero feature: scales of every size, floored scales, zero blocks
 * (rowwise and columnwise) and signed zeros get exercised. Each row from
 * its own stream, the rows in parallel. */
struct quant_input {
	uint16_t *x;
	size_t m, n, zero_col;
	uint64_t base;
};

static void quant_input_rows(void *ctx, size_t lo, size_t hi)
{
	const struct quant_input *f = ctx;
	size_t m = f->m, n = f->n;
	for (size_t i = lo; i < hi; i++) {
		uint64_t st = lg_ref_stream(f->base, i);
		uint16_t *row = f->x + i * n;
		uint64_t kind = lg_ref_rand(&st) % 101;
		float scale = ldexpf(1.0f, (int)(lg_ref_rand(&st) % 17) - 8);
		if (m > 1 && kind == 0)
			scale = 0.0f;
		else if (kind == 1)
			scale = 0x1p-120f; /* amax / 448 below 1e-30 */
		else if (kind == 2)
			scale = 0x1p100f;
		for (size_t k = 0; k < n; k++)
			row[k] = lg_ref_f32_to_bf16(lg_ref_randn(&st) * scale);
		if (m > 1 && kind == 3)
			for (size_t k = 0; k < n; k++)
				row[k] = 0x8000; /* -0: amax 0, payload -0 (0x80) */
		if (scale != 0.0f && lg_ref_rand(&st) % 7 == 0) {
			size_t k = (size_t)(lg_ref_rand(&st) % n);
			row[k] = lg_ref_f32_to_bf16(lg_ref_bf16_to_f32(row[k]) * 40.0f);
		}
		if (m > 1)
			row[f->zero_col] = 0;
	}
}

void lg_ref_fill_quant_input(uint16_t *x, size_t m, size_t n, uint64_t *st)
{
	struct quant_input f = {x, m, n, 0, 0};
	f.zero_col = (size_t)(lg_ref_rand(st) % n);
	f.base = lg_ref_rand(st);
	lg_ref_parallel_rows(m, n * 16, quant_input_rows, &f);
}

void lg_ref_quant_experts(const float *y, size_t m, size_t n, const int32_t *counts, size_t experts,
			  struct lg_quant qr, uint8_t *q, float *s, uint8_t *qt, float *st, size_t st_rows)
{
	bool rows = qr.output != LG_QOUT_COLUMNWISE, cols = qr.output != LG_QOUT_ROWWISE;
	/* what the kernel leaves alone keeps the harness's 0xff poison */
	if (rows) {
		memset(q, 0xff, m * n);
		memset(s, 0xff, m * (n / 128) * sizeof *s);
	}
	if (cols) {
		memset(qt, 0xff, m * n);
		memset(st, 0xff, st_rows * n * sizeof *st);
	}
	size_t start = 0, trow = 0;
	for (size_t e = 0; e < experts; e++) {
		size_t c = counts[e] > 0 ? (size_t)counts[e] : 0;
		if (c == 0)
			continue;
		if (start + c > m) /* past the capacity: the kernel writes nothing for it */
			break;
		lg_ref_quant_blockwise(y + start * n, c, n, qr, rows ? q + start * n : NULL,
				       rows ? s + start * (n / 128) : NULL, cols ? qt + start * n : NULL,
				       cols ? st + trow * n : NULL);
		start += c;
		trow += (c + 127) / 128;
	}
}

void lg_ref_fill_norm_input(uint16_t *x, int64_t m, size_t n, double eps, uint64_t *state)
{
	uint64_t st = *state;
	for (int64_t i = 0; i < m; i++) {
		float scale = ldexpf(1.0f, (int)(lg_ref_rand(&st) % 13) - 6);
		if (m > 1 && lg_ref_rand(&st) % 97 == 0)
			scale = 0.0f;
		uint16_t *row = x + (size_t)i * n;
		do { /* a row whose r the GPU's summation order could change: draw again */
			lg_ref_fill_bf16(row, n, scale, &st);
			if (scale != 0.0f && lg_ref_rand(&st) % 7 == 0) {
				size_t k = (size_t)(lg_ref_rand(&st) % n);
				row[k] = lg_ref_f32_to_bf16(lg_ref_bf16_to_f32(row[k]) * 40.0f);
			}
		} while (!lg_ref_rrms_stable(lg_ref_sumsq_bf16(row, n), (int64_t)n, eps));
	}
	*state = st;
}
