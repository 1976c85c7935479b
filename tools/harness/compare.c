/*
 * compare.c - output comparison by kind (compare.h):
 *   e4m3:  bit-equal for >= 1 - 1e-6 of bytes, every other byte within one
 *          e4m3 step of the reference (docs/kernels.md 4.3);
 *   scale: fp32 bit-equal (4.2);
 *   fp32, bf16: |got - ref| <= rtol |ref| + atol max(1, rms(ref)) elementwise
 *               (the tolerances of 1.4, the absolute one scaled by the output);
 *   exact: bit-equal, any element type (int32 row maps, int64 counts);
 *   e4m3, bf16, fp32 by ulps: every element within ulps (+ its slack) steps
 *               of its format from the reference; 0 ulps is bit-equality.
 * Every kind counts elements still holding the 0xff poison as unwritten.
 * Elements are compared in pieces on lg_ref_parallel_rows's threads, each
 * piece's sums kept apart and added in order (the same measures whatever
 * the threads); the first mismatches are then printed in index order.
 */
#include "compare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "numeric_ref.h"

static bool is_ulp(enum lg_cmp c)
{
	return c == LG_CMP_E4M3_ULP || c == LG_CMP_BF16_ULP || c == LG_CMP_FP32_ULP;
}

static double value(const struct lg_ref_buf *b, const void *p, size_t i)
{
	switch (b->cmp) {
	case LG_CMP_E4M3:
	case LG_CMP_E4M3_ULP:
		return lg_ref_e4m3_to_f32(((const uint8_t *)p)[i]);
	case LG_CMP_BF16:
	case LG_CMP_BF16_ULP:
		return lg_ref_bf16_to_f32(((const uint16_t *)p)[i]);
	case LG_CMP_EXACT:
		if (b->elem == 8)
			return (double)((const int64_t *)p)[i];
		return ((const float *)p)[i];
	default:
		return ((const float *)p)[i];
	}
}

static bool poisoned(const struct lg_ref_buf *b, const void *p, size_t i)
{
	const uint8_t *e = (const uint8_t *)p + i * b->elem;
	for (size_t k = 0; k < b->elem; k++)
		if (e[k] != 0xff)
			return false;
	return true;
}

/* One e4m3 step at the magnitude of v (the spacing of its binade). */
static double e4m3_step(double v)
{
	double a = fabs(v);
	if (a < 0x1p-6)
		return 0x1p-9;
	return ldexp(1.0, (int)floor(log2(a)) - 3);
}

/* The element's bits, and whether they are a NaN, for the _ULP kinds. */
static uint32_t bits(const struct lg_ref_buf *b, const void *p, size_t i, bool *nan)
{
	uint32_t u = 0, mag;
	memcpy(&u, (const uint8_t *)p + i * b->elem, b->elem); /* little-endian */
	switch (b->cmp) {
	case LG_CMP_E4M3_ULP:
		mag = u & 0x7fu;
		*nan = mag == 0x7fu;
		break;
	case LG_CMP_BF16_ULP:
		mag = u & 0x7fffu;
		*nan = mag > 0x7f80u;
		break;
	default:
		mag = u & 0x7fffffffu;
		*nan = mag > 0x7f800000u;
		break;
	}
	return u;
}

/* Distance in steps of the format between two encodings (sign-magnitude):
 * the number of representable values between them, plus one. Equal bits
 * are 0 apart; +0 and -0 are 1 apart (so 0 ulps is bit-equality); a NaN is
 * infinitely far from anything but itself. */
static uint64_t ulp_distance(const struct lg_ref_buf *b, const void *got, const void *ref, size_t i)
{
	bool gn, rn;
	uint32_t g = bits(b, got, i, &gn), r = bits(b, ref, i, &rn);
	if (g == r)
		return 0;
	if (gn || rn)
		return UINT64_MAX;
	uint32_t sbit = 1u << (8 * b->elem - 1);
	int64_t og = (g & sbit) ? -(int64_t)(g & (sbit - 1)) : (int64_t)g;
	int64_t orr = (r & sbit) ? -(int64_t)(r & (sbit - 1)) : (int64_t)r;
	uint64_t d = (uint64_t)(og > orr ? og - orr : orr - og);
	return d ? d : 1;
}

static const char *kind_name(enum lg_cmp c)
{
	switch (c) {
	case LG_CMP_E4M3:
	case LG_CMP_E4M3_ULP:
		return "fp8";
	case LG_CMP_SCALE: return "scale";
	case LG_CMP_EXACT: return "exact";
	case LG_CMP_BF16:
	case LG_CMP_BF16_ULP:
		return "bf16";
	default: return "fp32";
	}
}

/* What the elements of one piece add to the measures. */
struct part {
	uint64_t equal, far, unwritten, slack, at_bound, max_ulps;
	double max_rel, num, den, sumsq;
};

/* Are the element's bytes the same? (The usual answer: a word compare.) */
static bool same_bytes(const struct lg_ref_buf *b, const void *got, size_t i)
{
	const uint8_t *g = (const uint8_t *)got + i * b->elem, *r = (const uint8_t *)b->host + i * b->elem;
	switch (b->elem) {
	case 1:
		return *g == *r;
	case 2: {
		uint16_t x, y;
		memcpy(&x, g, 2), memcpy(&y, r, 2);
		return x == y;
	}
	case 4: {
		uint32_t x, y;
		memcpy(&x, g, 4), memcpy(&y, r, 4);
		return x == y;
	}
	case 8: {
		uint64_t x, y;
		memcpy(&x, g, 8), memcpy(&y, r, 8);
		return x == y;
	}
	default:
		return memcmp(g, r, b->elem) == 0;
	}
}

/* Element i against its reference, into p; true when it is outside its
 * tolerance (or unwritten). scale: the fp32/bf16 kinds' rms(ref), >= 1. */
static bool element(const struct lg_ref_buf *b, const void *got, size_t i, double scale, struct part *p)
{
	bool same = same_bytes(b, got, i), ulp = is_ulp(b->cmp), bad = false;
	double r = value(b, b->host, i);
	if (same) { /* the common path: equal bits, |g - r| = 0 */
		p->equal++;
		if (ulp && b->slack && b->slack[i])
			p->slack++;
		if (isfinite(r))
			p->den += r * r;
		return false;
	}
	double g = value(b, got, i);
	if (poisoned(b, got, i)) {
		p->unwritten++;
		bad = true;
	} else if (ulp) {
		uint64_t bound = (uint64_t)b->ulps + (b->slack ? b->slack[i] : 0);
		uint64_t d = ulp_distance(b, got, b->host, i);
		if (b->slack && b->slack[i])
			p->slack++;
		if (d > p->max_ulps)
			p->max_ulps = d > (1ull << 32) ? 1ull << 32 : d;
		if (d && d == bound)
			p->at_bound++;
		bad = d > bound;
		if (isfinite(r) && fabs(r) > 0 && fabs(g - r) / fabs(r) > p->max_rel)
			p->max_rel = fabs(g - r) / fabs(r);
	} else {
		double d = fabs(g - r);
		if (b->cmp == LG_CMP_E4M3)
			bad = !(d <= e4m3_step(r) * 1.0000001);
		else if (b->cmp == LG_CMP_SCALE || b->cmp == LG_CMP_EXACT)
			bad = true;
		else
			bad = !(d <= b->rtol * fabs(r) + b->atol * scale);
		if (isfinite(r) && fabs(r) > 0 && d / fabs(r) > p->max_rel)
			p->max_rel = d / fabs(r);
	}
	if (bad)
		p->far++;
	if (isfinite(r) && isfinite(g)) {
		p->num += (g - r) * (g - r);
		p->den += r * r;
	}
	return bad;
}

/* Pieces of a fixed size, each summed on its own and the pieces added in
 * order: the measures do not depend on the thread count. */
#define PIECE 65536

struct job {
	const struct lg_ref_buf *b;
	const void *got;
	double scale;
	struct part *parts;
};

static void sumsq_pieces(void *ctx, size_t lo, size_t hi)
{
	struct job *j = ctx;
	for (size_t c = lo; c < hi; c++) {
		size_t end = (c + 1) * PIECE < j->b->count ? (c + 1) * PIECE : j->b->count;
		double ss = 0;
		for (size_t i = c * PIECE; i < end; i++) {
			double r = value(j->b, j->b->host, i);
			if (isfinite(r))
				ss += r * r;
		}
		j->parts[c].sumsq = ss;
	}
}

static void compare_pieces(void *ctx, size_t lo, size_t hi)
{
	struct job *j = ctx;
	for (size_t c = lo; c < hi; c++) {
		size_t end = (c + 1) * PIECE < j->b->count ? (c + 1) * PIECE : j->b->count;
		for (size_t i = c * PIECE; i < end; i++)
			element(j->b, j->got, i, j->scale, &j->parts[c]);
	}
}

void lg_compare(const struct lg_ref_buf *b, const void *got, int max_report, FILE *out,
		struct lg_check_measure *m)
{
	memset(m, 0, sizeof *m);
	snprintf(m->name, sizeof m->name, "%s", b->name);
	snprintf(m->kind, sizeof m->kind, "%s", kind_name(b->cmp));
	m->count = b->count;
	m->ulp_bound = is_ulp(b->cmp) ? b->ulps : -1;
	size_t np = (b->count + PIECE - 1) / PIECE;
	struct part *parts = calloc(np ? np : 1, sizeof *parts);
	if (!parts) {
		fprintf(stderr, "lg_compare: out of memory\n");
		abort();
	}
	struct job j = {b, got, 0, parts};
	/* fp32/bf16: the absolute tolerance is relative to the output's RMS, so
	 * that a long reduction whose result cancels to near zero is judged by
	 * the size of what it summed, not by its own small value */
	double scale = 0;
	if (b->cmp == LG_CMP_FP32 || b->cmp == LG_CMP_BF16) {
		lg_ref_parallel_rows(np, PIECE * 4, sumsq_pieces, &j);
		for (size_t c = 0; c < np; c++)
			scale += parts[c].sumsq;
	}
	scale = b->count ? sqrt(scale / (double)b->count) : 0;
	if (scale < 1)
		scale = 1;
	j.scale = scale;
	lg_ref_parallel_rows(np, PIECE * 8, compare_pieces, &j);
	struct part t = {0};
	for (size_t c = 0; c < np; c++) {
		const struct part *p = &parts[c];
		t.equal += p->equal, t.far += p->far, t.unwritten += p->unwritten, t.slack += p->slack;
		t.at_bound += p->at_bound;
		t.max_ulps = p->max_ulps > t.max_ulps ? p->max_ulps : t.max_ulps;
		t.max_rel = p->max_rel > t.max_rel ? p->max_rel : t.max_rel;
		t.num += p->num, t.den += p->den;
	}
	free(parts);
	/* the first mismatches, in order */
	int reported = 0;
	for (size_t i = 0; t.far && out && i < b->count && reported < max_report; i++) {
		struct part dummy = {0};
		if (!element(b, got, i, scale, &dummy))
			continue;
		double r = value(b, b->host, i), g = value(b, got, i);
		if (is_ulp(b->cmp) && !poisoned(b, got, i))
			fprintf(out, "    %s[%zu]: got %.9g, expected %.9g (%llu ulps, bound %llu)\n", b->name, i, g, r,
				(unsigned long long)ulp_distance(b, got, b->host, i),
				(unsigned long long)b->ulps + (b->slack ? b->slack[i] : 0));
		else
			fprintf(out, "    %s[%zu]: got %.9g, expected %.9g\n", b->name, i, g, r);
		reported++;
	}
	m->unwritten = t.unwritten, m->slack = t.slack, m->at_bound = t.at_bound, m->max_ulps = t.max_ulps;
	m->max_rel = t.max_rel;
	m->equal_frac = b->count ? (double)t.equal / (double)b->count : 1.0;
	m->rel_l2 = t.den > 0 ? sqrt(t.num / t.den) : sqrt(t.num);
	m->mismatches = t.far;
	if (b->cmp == LG_CMP_E4M3)
		m->pass = t.far == 0 && (double)(b->count - t.equal) <= 1e-6 * (double)b->count + 1e-9;
	else
		m->pass = t.far == 0;
	/* e4m3 tolerates differing bytes within one step; count them too */
	if (b->cmp == LG_CMP_E4M3)
		m->mismatches = b->count - t.equal;
}
