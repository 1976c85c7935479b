/*
 * numeric_ref.c - number formats for the CPU references (numeric_ref.h),
 * written from the definitions of the formats and of docs/kernels.md 1.2, with
 * nothing taken from the generator's bit tricks (templates/; the GPU
 * rounds with cvt instructions): bf16 rounding on the integer significand
 * of the fp32 encoding, the e4m3 encoder a nearest-value search over the
 * 127 non-negative finite e4m3 numbers, the power-of-two scale
 * 2^ceil(log2 s), and v / s a plain IEEE division. The tests check these
 * against hand-worked values and against the slow textbook forms
 * (tests/test_numeric.c); gpu_test_families checks the GPU's kernels against them.
 */
#include "numeric_ref.h"

#include <math.h>
#include <string.h>

#include "ref.h" /* lg_ref_steps */

/* ------------------------------------------------------------------ bf16 */

/* A bf16 is the upper half of an fp32: sign, 8 exponent bits, 7 fraction bits. */
float lg_ref_bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

/* Round to the nearest bf16, ties to the even significand. A bf16 is the
 * fp32 encoding's upper half, so the bf16 numbers are the fp32 numbers
 * whose low 16 bits are zero, and the encoding is sign-magnitude with the
 * magnitudes in increasing order: the fp32 significand (with its exponent
 * above it) is rounded to a multiple of 2^16 as an integer, to nearest,
 * ties to the even multiple. A carry out of the significand moves to the
 * next binade, and out of the largest finite binade to infinity, as IEEE
 * rounding does; subnormals are the same integers with exponent 0. */
static _Atomic bool round_toward_zero; /* lg_ref_bf16_rz_for_tests */

void lg_ref_bf16_rz_for_tests(bool on) { round_toward_zero = on; }

/* RNE whatever the test switch says (the bound of lg_ref_bf16_bounded). */
static uint16_t bf16_rne(float f)
{
	if (isnan(f))
		return signbit(f) ? 0xffc0 : 0x7fc0;
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	uint32_t sign = u & 0x80000000u, mag = u & 0x7fffffffu, low = mag & 0xffffu;
	mag -= low;
	if (low > 0x8000u || (low == 0x8000u && (mag & 0x10000u)))
		mag += 0x10000u;
	return (uint16_t)((sign | mag) >> 16);
}

uint16_t lg_ref_f32_to_bf16(float f)
{
	if (round_toward_zero && !isnan(f)) {
		uint32_t u;
		memcpy(&u, &f, sizeof u);
		return (uint16_t)(u >> 16);
	}
	return bf16_rne(f);
}

uint16_t lg_ref_bf16_bounded(double v, double err, uint16_t *slack)
{
	uint16_t out = lg_ref_f32_to_bf16((float)v), rne = bf16_rne((float)v);
	uint16_t lo = bf16_rne((float)(v - err)), hi = bf16_rne((float)(v + err));
	uint16_t a = lg_ref_steps(rne, lo, 16), b = lg_ref_steps(rne, hi, 16);
	*slack = a > b ? a : b;
	return out;
}

/* ------------------------------------------------------------------ e4m3 */

/* The 127 non-negative finite e4m3 numbers, by code 0x00 .. 0x7e, which
 * is increasing order: codes 0-7 are the subnormals c 2^-9, code c >= 8 is
 * (1 + m/8) 2^(e-7) = (8 + m) 2^(e-10) with e = c >> 3, m = c & 7. */
#define E4M3(c) ((c) < 8 ? (c) * 0x1p-9 : (double)(8 + ((c) & 7)) * (double)(1u << ((c) >> 3)) * 0x1p-10)
#define E4M3x8(c) E4M3(c), E4M3(c + 1), E4M3(c + 2), E4M3(c + 3), E4M3(c + 4), E4M3(c + 5), \
		  E4M3(c + 6), E4M3(c + 7)
static const double e4m3_value[128] = {
	E4M3x8(0),  E4M3x8(8),  E4M3x8(16), E4M3x8(24), E4M3x8(32), E4M3x8(40),
	E4M3x8(48), E4M3x8(56), E4M3x8(64), E4M3x8(72), E4M3x8(80), E4M3x8(88),
	E4M3x8(96), E4M3x8(104), E4M3x8(112), E4M3(120), E4M3(121), E4M3(122),
	E4M3(123), E4M3(124), E4M3(125), E4M3(126), INFINITY, /* [127]: the search's sentinel */
};

/* e4m3 "fn": sign, 4 exponent bits (bias 7), 3 mantissa bits; no
 * infinities; 0x7f and 0xff are NaN; the largest finite is 0x7e = 448.
 * The magnitude is the table's (the formula of each code above). */
float lg_ref_e4m3_to_f32(uint8_t b)
{
	if ((b & 0x7f) == 0x7f)
		return (b & 0x80) ? -NAN : NAN;
	float v = (float)e4m3_value[b & 0x7f]; /* exact: 4 significant bits */
	return (b & 0x80) ? -v : v;
}

/* Round to the nearest e4m3 number, ties to the even code (even mantissa),
 * by searching the table; magnitudes above 448, infinities included,
 * saturate to 448; NaN gives 0x7f whatever its sign (what the hardware
 * cvt.rn.satfinite does). */
uint8_t lg_ref_f32_to_e4m3(float f)
{
	if (isnan(f))
		return 0x7f;
	uint8_t sign = signbit(f) ? 0x80 : 0x00;
	double a = fabs((double)f);
	if (a >= e4m3_value[126])
		return (uint8_t)(sign | 126);
	/* the largest lo with value[lo] <= a (value[127] the sentinel), by
	 * halving steps in the 8 codes of a's binade: |f| in [2^(E-127),
	 * 2^(E-126)) for fp32 exponent field E, whose first e4m3 code is
	 * (E - 120) 8; below 2^-6, the subnormal codes 0 .. 7 */
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	int e = (int)((u >> 23) & 0xff), lo = e >= 121 ? (e - 120) * 8 : 0;
	for (int step = 4; step; step /= 2)
		lo += step & -(int)(e4m3_value[lo + step] <= a);
	/* both differences are exact in double (a and the neighbours are floats
	 * within a factor of two of each other, or the lower one is 0); the
	 * upper neighbour when nearer, or as near with lo odd (ties to even) */
	double below = a - e4m3_value[lo], above = e4m3_value[lo + 1] - a;
	int up = (above < below) | ((above == below) & (lo & 1));
	return (uint8_t)(sign | (lo + up));
}

/* ---------------------------------------------------------- scales, rms */

float lg_ref_scale(float amax, bool pow2)
{
	float s = fmaxf(amax / 448.0f, 1e-30f); /* fp32 division, the 1e-30 floor */
	if (!pow2 || isinf(s))
		return s;
	/* the smallest power of two >= s: 2^ceil(log2 s). log2 of an exact
	 * power of two must give an integer; the two loops make the result
	 * right even if the library's log2 is an ulp off there. */
	double p = exp2(ceil(log2((double)s)));
	while (p < s)
		p *= 2;
	while (p / 2 >= s)
		p /= 2;
	return (float)p;
}

uint8_t lg_ref_quant(float v, float s, bool pow2)
{
	(void)pow2; /* a power-of-two s makes the division exact; no special case */
	return lg_ref_f32_to_e4m3(v / s);
}

float lg_ref_rrms(double sumsq, int64_t n, double eps)
{
	return (float)(1.0 / sqrt(sumsq / (double)n + eps));
}

/* Any fp64 sum of n non-negative terms, in any order, is within
 * (n - 1) 2^-53 (to first order) of the exact sum, and so is sumsq: two
 * sums are within 2 n 2^-53 of each other (and a margin). Every step of
 * lg_ref_rrms is a correctly rounded monotone operation, so if both ends of
 * that interval give the same fp32, every sum in it does. */
bool lg_ref_rrms_stable(double sumsq, int64_t n, double eps)
{
	double d = (2.0 * (double)n + 8.0) * 0x1p-53;
	double lo = nextafter(sumsq * (1.0 - d), 0.0), hi = nextafter(sumsq * (1.0 + d), INFINITY);
	if (lo < 0)
		lo = 0;
	return lg_ref_rrms(lo, n, eps) == lg_ref_rrms(hi, n, eps);
}
