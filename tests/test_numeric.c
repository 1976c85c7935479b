/*
 * test_numeric.c - the CPU references' number formats (gen/ref/numeric_ref.c)
 * against hand-worked values, no GPU: the e4m3 encoder at zero, subnormals,
 * ties (to the even code), 448 and saturation; bf16 rounding at ties and
 * overflow; the blockwise scale at exact powers of two and the 1e-30 floor;
 * and the reciprocal-RMS stability test. Then, over a random sample of fp32
 * bit patterns (seed printed, LINGEN_SEED replays), the plain encoders
 * against the bit-level algorithms of templates/fp8_e4m3.cuh and of
 * RNE on the fp32 bits, which gpu_test_k1 ties to the hardware cvt.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "numeric_ref.h"
#include "ref.h"
#include "testutil.h"

static float u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static uint32_t f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static void test_e4m3_hand_worked(void **state)
{
	(void)state;
	static const struct {
		float v;
		uint8_t want;
		const char *why;
	} cases[] = {
		{0.0f, 0x00, "zero"},
		{-0.0f, 0x80, "negative zero keeps its sign"},
		{0x1p-9f, 0x01, "smallest subnormal, 1 * 2^-9"},
		{0x1p-10f, 0x00, "half the smallest subnormal: tie, to even code 0x00"},
		{0x1.000002p-10f, 0x01, "just above that half: up"},
		{0x1.8p-9f, 0x02, "1.5 * 2^-9: tie between 0x01 and 0x02, to even 0x02"},
		{0x1.4p-8f, 0x02, "2.5 * 2^-9: tie between 0x02 and 0x03, to even 0x02"},
		{0x1.cp-7f, 0x07, "largest subnormal, 7 * 2^-9"},
		{0x1.ep-7f, 0x08, "7.5 * 2^-9: tie between 0x07 and 0x08 (2^-6), to even 0x08"},
		{0x1p-6f, 0x08, "smallest normal, 2^-6"},
		{1.0f, 0x38, "one: exponent 7, mantissa 0"},
		{1.0625f, 0x38, "1 + 1/16: tie between 1 and 1.125, to even 0x38"},
		{1.1875f, 0x3a, "1.1875: tie between 1.125 (0x39) and 1.25 (0x3a), to even 0x3a"},
		{1.07f, 0x39, "nearer 1.125"},
		{-2.5f, 0xc2, "-2.5 = -1.25 * 2: exponent 8, mantissa 2"},
		{240.0f, 0x77, "1.875 * 2^7"},
		{416.0f, 0x7d, "1.625 * 2^8"},
		{432.0f, 0x7e, "tie between 416 (0x7d) and 448 (0x7e), to even 0x7e"},
		{448.0f, 0x7e, "the largest finite"},
		{460.0f, 0x7e, "between 448 and 464: 448"},
		{464.0f, 0x7e, "464, RNE's overflow point: saturates to 448"},
		{1000.0f, 0x7e, "far above: saturates"},
		{-1e30f, 0xfe, "negative: saturates to -448"},
		{INFINITY, 0x7e, "infinity saturates"},
		{-INFINITY, 0xfe, "-infinity saturates"},
		{NAN, 0x7f, "NaN"},
		{-NAN, 0x7f, "NaN of either sign gives 0x7f"},
		{0x1p-140f, 0x00, "fp32 subnormal: zero"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		uint8_t got = lg_ref_f32_to_e4m3(cases[i].v);
		if (got != cases[i].want)
			fail_msg("e4m3(%a) = 0x%02x, want 0x%02x: %s", (double)cases[i].v, got, cases[i].want,
				 cases[i].why);
	}
	/* every finite code decodes to the value the format defines and back */
	for (int b = 0; b < 256; b++) {
		if ((b & 0x7f) == 0x7f) {
			assert_true(isnan(lg_ref_e4m3_to_f32((uint8_t)b)));
			continue;
		}
		int e = (b >> 3) & 15, m = b & 7;
		double v = e ? (1 + m / 8.0) * pow(2, e - 7) : m / 512.0;
		assert_true(lg_ref_e4m3_to_f32((uint8_t)b) == (float)((b & 0x80) ? -v : v));
		assert_int_equal(lg_ref_f32_to_e4m3(lg_ref_e4m3_to_f32((uint8_t)b)), b);
	}
}

static void test_bf16_hand_worked(void **state)
{
	(void)state;
	static const struct {
		float v;
		uint16_t want;
		const char *why;
	} cases[] = {
		{1.0f, 0x3f80, "one"},
		{0x1.01p0f, 0x3f80, "1 + 2^-8: tie between 1 and 1 + 2^-7, to even 1"},
		{0x1.03p0f, 0x3f82, "1 + 3 2^-8: tie, to even 1 + 2^-6"},
		{0x1.010002p0f, 0x3f81, "just above the tie: up"},
		{0x1.fep0f, 0x3fff, "1.9921875 is a bf16"},
		{0x1.ffp0f, 0x4000, "tie above the largest bf16 below 2: to even, 2"},
		{-0x1.01p-3f, 0xbe00, "negative tie, to even"},
		{0x1p-130f, 0x0008, "fp32 subnormal, a bf16 subnormal"},
		{0x1.2p-130f, 0x0009, "1.125 * 2^-130 = 9 * 2^-133: exact bf16 subnormal"},
		{0x1.1p-130f, 0x0008, "8.5 * 2^-133: tie, to even 8"},
		{0x1.fffffep127f, 0x7f80, "FLT_MAX rounds up to infinity"},
		{0x1.fep127f, 0x7f7f, "the largest finite bf16"},
		{-INFINITY, 0xff80, "-infinity"},
		{-0.0f, 0x8000, "negative zero"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		uint16_t got = lg_ref_f32_to_bf16(cases[i].v);
		if (got != cases[i].want)
			fail_msg("bf16(%a) = 0x%04x, want 0x%04x: %s", (double)cases[i].v, got, cases[i].want,
				 cases[i].why);
	}
	assert_true(isnan(lg_ref_bf16_to_f32(lg_ref_f32_to_bf16(NAN))));
	assert_true(lg_ref_bf16_to_f32(0x3fc0) == 1.5f);
}

static void test_scale(void **state)
{
	(void)state;
	/* all zero: the 1e-30 floor; pow2 rounds it up to 2^-99 */
	assert_true(lg_ref_scale(0.0f, false) == 1e-30f);
	assert_true(lg_ref_scale(0.0f, true) == 0x1p-99f);
	assert_true(lg_ref_scale(1e-29f, false) == 1e-30f); /* 1e-29 / 448 is below the floor */
	/* amax / 448 an exact power of two stays; just above it doubles */
	assert_true(lg_ref_scale(448.0f, true) == 1.0f);
	assert_true(lg_ref_scale(448.0f * 0x1p-20f, true) == 0x1p-20f);
	assert_true(lg_ref_scale(nextafterf(448.0f, INFINITY), true) == 2.0f);
	assert_true(lg_ref_scale(nextafterf(448.0f, 0.0f), true) == 1.0f);
	assert_true(lg_ref_scale(3.0f * 448.0f, true) == 4.0f);
	assert_true(lg_ref_scale(3.0f * 448.0f, false) == 3.0f);
	/* without pow2: the correctly rounded quotient */
	assert_true(lg_ref_scale(1.0f, false) == 1.0f / 448.0f);
	assert_true(lg_ref_scale(INFINITY, true) == INFINITY);
	/* v / s: an IEEE division, then e4m3 */
	assert_int_equal(lg_ref_quant(448.0f, 1.0f, true), 0x7e);
	assert_int_equal(lg_ref_quant(3.0f, 3.0f / 448.0f * 2, false), lg_ref_f32_to_e4m3(3.0f / (3.0f / 448.0f * 2)));
	assert_int_equal(lg_ref_quant(-1.0f, 0x1p-4f, true), 0xd8); /* -16 */
}

/* A sum of squares whose r = 1/sqrt(ss/n + eps) sits on an fp32 rounding
 * midpoint is not stable (another summation order may round the other
 * way); an ordinary one is. */
static void test_rrms_stable(void **state)
{
	(void)state;
	const int64_t n = 2048;
	const double eps = 1e-6;
	assert_true(lg_ref_rrms_stable(2048.0, n, eps));
	assert_true(lg_ref_rrms_stable(0.0, n, eps)); /* an all-zero row: r = 1/sqrt(eps) */
	double mid = 1.0 + 0x1p-24; /* halfway between 1 and the next float */
	double z = 1.0 / (mid * mid);
	double ss = (z - eps) * (double)n;
	assert_false(lg_ref_rrms_stable(ss, n, eps));
	/* a little away from the midpoint (far beyond the summation error) it is stable */
	assert_true(lg_ref_rrms_stable(ss * (1 + 0x1p-30), n, eps));
	assert_true(lg_ref_rrms_stable(ss * (1 - 0x1p-30), n, eps));
}

/* templates/fp8_e4m3.cuh's algorithm, on the fp32 bits (the GPU test
 * checks it equals cvt.rn.satfinite.e4m3x2.f32 on all 2^32 inputs). */
static uint8_t e4m3_bits(float f)
{
	uint32_t u = f2u(f), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return 0x7fu;
	if (a >= 0x43e00000u)
		return (uint8_t)(sign | 0x7eu);
	if (a < 0x3c800000u)
		return (uint8_t)(sign | (uint32_t)rintf(u2f(a) * 512.0f));
	uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
	uint32_t e = (r >> 23) - 120u, m = (r >> 20) & 7u;
	if (e > 15u || (e == 15u && m == 7u))
		return (uint8_t)(sign | 0x7eu);
	return (uint8_t)(sign | (e << 3) | m);
}

/* RNE to bf16 on the fp32 bits (what cvt.rn.bf16x2.f32 does to finite values). */
static uint16_t bf16_bits(float f)
{
	uint32_t u = f2u(f);
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static void test_against_bit_algorithms(void **state)
{
	(void)state;
	uint64_t st = lg_test_seed("test_numeric");
	long bad8 = 0, bad16 = 0;
	for (long i = 0; i < 2000000; i++) {
		uint32_t u = (uint32_t)lg_ref_rand(&st);
		if (i & 1) /* half of them near the e4m3 range, 2^-12 .. 2^10 */
			u = (u & 0x807fffffu) | ((uint32_t)(115 + (u >> 23) % 22) << 23);
		float f = u2f(u);
		if (lg_ref_f32_to_e4m3(f) != e4m3_bits(f) && bad8++ < 5)
			print_error("e4m3(%a): plain 0x%02x, bits 0x%02x\n", (double)f, lg_ref_f32_to_e4m3(f),
				    e4m3_bits(f));
		if (!isnan(f) && lg_ref_f32_to_bf16(f) != bf16_bits(f) && bad16++ < 5)
			print_error("bf16(%a): plain 0x%04x, bits 0x%04x\n", (double)f, lg_ref_f32_to_bf16(f),
				    bf16_bits(f));
	}
	/* and every value halfway between two neighbouring e4m3 numbers */
	for (int c = 0; c < 126; c++) {
		float lo = lg_ref_e4m3_to_f32((uint8_t)c), hi = lg_ref_e4m3_to_f32((uint8_t)(c + 1));
		float mid = (lo + hi) / 2;
		assert_int_equal(lg_ref_f32_to_e4m3(mid), e4m3_bits(mid));
		assert_int_equal(lg_ref_f32_to_e4m3(mid), c % 2 ? c + 1 : c);
		assert_int_equal(lg_ref_f32_to_e4m3(nextafterf(mid, 0)), c);
		assert_int_equal(lg_ref_f32_to_e4m3(nextafterf(mid, INFINITY)), c + 1);
	}
	assert_int_equal(bad8, 0);
	assert_int_equal(bad16, 0);
}

/* The textbook forms the references used first (slow: libm calls), kept
 * as oracles: bf16 by frexp / ldexp / rint on the binade's spacing, e4m3
 * decoded by its formula. */
static uint16_t bf16_textbook(float f)
{
	double a = fabs((double)f);
	if (a != 0 && !isinf(a)) {
		int e;
		frexp(a, &e);
		double unit = ldexp(1.0, (e < -125 ? -125 : e) - 8);
		a = rint(a / unit) * unit;
	}
	float r = (float)(signbit(f) ? -a : a);
	return (uint16_t)(f2u(r) >> 16);
}

static float e4m3_textbook(uint8_t b)
{
	int e = (b >> 3) & 15, m = b & 7;
	float v = e == 0 ? ldexpf((float)m, -9) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
	return (b & 0x80) ? -v : v;
}

/* Every rounding case of bf16: each upper half with the low halves that
 * decide it (0, 1, just below, at and just above the tie, all ones), and
 * every e4m3 code, against the textbook forms. */
static void test_against_textbook(void **state)
{
	(void)state;
	static const uint32_t lows[] = {0, 1, 0x7fff, 0x8000, 0x8001, 0xffff, 0x1234, 0xc000};
	long bad = 0;
	for (uint32_t h = 0; h < 0x10000u; h++)
		for (size_t l = 0; l < sizeof lows / sizeof lows[0]; l++) {
			float f = u2f(h << 16 | lows[l]);
			if (isnan(f))
				continue;
			if (lg_ref_f32_to_bf16(f) != bf16_textbook(f) && bad++ < 5)
				print_error("bf16(%a): 0x%04x, textbook 0x%04x\n", (double)f, lg_ref_f32_to_bf16(f),
					    bf16_textbook(f));
		}
	assert_int_equal(bad, 0);
	assert_int_equal(lg_ref_f32_to_bf16(NAN), 0x7fc0);
	assert_int_equal(lg_ref_f32_to_bf16(-NAN), 0xffc0);
	for (int b = 0; b < 256; b++) {
		float v = lg_ref_e4m3_to_f32((uint8_t)b);
		if ((b & 0x7f) == 0x7f)
			assert_true(isnan(v));
		else
			assert_int_equal(f2u(v), f2u(e4m3_textbook((uint8_t)b)));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_e4m3_hand_worked), cmocka_unit_test(test_bf16_hand_worked),
		cmocka_unit_test(test_scale),           cmocka_unit_test(test_rrms_stable),
		cmocka_unit_test(test_against_bit_algorithms), cmocka_unit_test(test_against_textbook),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
