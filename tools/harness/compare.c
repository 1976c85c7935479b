/*
 * compare.c - output comparison by kind (compare.h):
 *   e4m3:  bit-equal for >= 1 - 1e-6 of bytes, every other byte within one
 *          e4m3 step of the reference (KERNELS.md 4.3);
 *   scale: fp32 bit-equal (4.2);
 *   fp32, bf16: |got - ref| <= rtol |ref| + atol max(1, rms(ref)) elementwise
 *               (the tolerances of 1.4, the absolute one scaled by the output).
 * Every kind counts elements still holding the 0xff poison as unwritten.
 */
#include "compare.h"

#include <math.h>
#include <string.h>

#include "numeric_ref.h"

static double value(const struct lg_ref_buf *b, const void *p, size_t i)
{
	switch (b->cmp) {
	case LG_CMP_E4M3:
		return lg_ref_e4m3_to_f32(((const uint8_t *)p)[i]);
	case LG_CMP_BF16:
		return lg_ref_bf16_to_f32(((const uint16_t *)p)[i]);
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

static const char *kind_name(enum lg_cmp c)
{
	switch (c) {
	case LG_CMP_E4M3: return "fp8";
	case LG_CMP_SCALE: return "scale";
	case LG_CMP_BF16: return "bf16";
	default: return "fp32";
	}
}

void lg_compare(const struct lg_ref_buf *b, const void *got, int max_report, FILE *out,
		struct lg_check_measure *m)
{
	memset(m, 0, sizeof *m);
	snprintf(m->name, sizeof m->name, "%s", b->name);
	snprintf(m->kind, sizeof m->kind, "%s", kind_name(b->cmp));
	m->count = b->count;
	uint64_t equal = 0, far = 0;
	double num = 0, den = 0;
	int reported = 0;
	/* fp32/bf16: the absolute tolerance is relative to the output's RMS, so
	 * that a long reduction whose result cancels to near zero is judged by
	 * the size of what it summed, not by its own small value */
	double scale = 0;
	for (size_t i = 0; i < b->count && (b->cmp == LG_CMP_FP32 || b->cmp == LG_CMP_BF16); i++) {
		double r = value(b, b->host, i);
		if (isfinite(r))
			scale += r * r;
	}
	scale = b->count ? sqrt(scale / (double)b->count) : 0;
	if (scale < 1)
		scale = 1;
	for (size_t i = 0; i < b->count; i++) {
		bool same = memcmp((const uint8_t *)got + i * b->elem, (const uint8_t *)b->host + i * b->elem,
				   b->elem) == 0;
		double r = value(b, b->host, i), g = value(b, got, i);
		if (!same && poisoned(b, got, i)) {
			m->unwritten++;
			far++;
		} else if (same) {
			equal++;
		} else {
			double d = fabs(g - r);
			bool bad;
			if (b->cmp == LG_CMP_E4M3)
				bad = !(d <= e4m3_step(r) * 1.0000001);
			else if (b->cmp == LG_CMP_SCALE)
				bad = true;
			else
				bad = !(d <= b->rtol * fabs(r) + b->atol * scale);
			if (bad)
				far++;
			if (isfinite(r) && fabs(r) > 0 && d / fabs(r) > m->max_rel)
				m->max_rel = d / fabs(r);
			if (bad && reported < max_report && out) {
				fprintf(out, "    %s[%zu]: got %.9g, expected %.9g\n", b->name, i, g, r);
				reported++;
			}
		}
		if (isfinite(r) && isfinite(g)) {
			num += (g - r) * (g - r);
			den += r * r;
		}
	}
	m->equal_frac = b->count ? (double)equal / (double)b->count : 1.0;
	m->rel_l2 = den > 0 ? sqrt(num / den) : sqrt(num);
	m->mismatches = far;
	if (b->cmp == LG_CMP_E4M3)
		m->pass = far == 0 && (double)(b->count - equal) <= 1e-6 * (double)b->count + 1e-9;
	else
		m->pass = far == 0;
	/* e4m3 tolerates differing bytes within one step; count them too */
	if (b->cmp == LG_CMP_E4M3)
		m->mismatches = b->count - equal;
}
