/*
 * test_ref_rand.c - the references' random numbers (gen/ref/registry_ref.c):
 * lg_ref_randn (the ziggurat) is the standard normal distribution, judged
 * on 2^21 draws: mean and variance, the fraction beyond several points
 * (among them the ziggurat's tail start R = 3.4426, where its method
 * changes), symmetry, and the Kolmogorov-Smirnov distance to the normal
 * CDF; each bound is several standard errors wide (or, for KS, p < 1e-4),
 * so a correct generator fails with negligible probability whatever the
 * seed. Also: streams of lg_ref_stream differ, bf16 fills are bf16 of
 * normals.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "numeric_ref.h"
#include "ref.h"
#include "testutil.h"

#define N (1u << 21)

static uint64_t seed;

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return x < y ? -1 : x > y;
}

static double normal_cdf(double x)
{
	return 0.5 * erfc(-x / sqrt(2.0));
}

static void test_normal(void **state)
{
	(void)state;
	float *z = malloc(N * sizeof *z);
	assert_non_null(z);
	uint64_t st = seed;
	double sum = 0, sumsq = 0;
	for (size_t i = 0; i < N; i++) {
		z[i] = lg_ref_randn(&st);
		assert_true(isfinite(z[i]));
		sum += z[i], sumsq += (double)z[i] * z[i];
	}
	double mean = sum / N, var = sumsq / N - mean * mean;
	printf("mean %.3g, variance %.6f\n", mean, var);
	assert_true(fabs(mean) < 5.0 / sqrt(N));
	assert_true(fabs(var - 1.0) < 5.0 * sqrt(2.0 / N));
	/* P(|z| > t) and P(z > t) against the normal's, 6 standard errors */
	static const double points[] = {0.25, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.2, 3.442619855899, 3.7, 4.0};
	for (size_t p = 0; p < sizeof points / sizeof points[0]; p++) {
		double t = points[p];
		size_t both = 0, up = 0;
		for (size_t i = 0; i < N; i++)
			both += fabs(z[i]) > t, up += z[i] > t;
		double pb = 2 * normal_cdf(-t), pu = normal_cdf(-t);
		double fb = (double)both / N, fu = (double)up / N;
		double sb = sqrt(pb * (1 - pb) / N), su = sqrt(pu * (1 - pu) / N);
		printf("|z| > %.4f: %.6g (normal %.6g), z > t: %.6g (%.6g)\n", t, fb, pb, fu, pu);
		assert_true(fabs(fb - pb) < 6 * sb + 1.0 / N);
		assert_true(fabs(fu - pu) < 6 * su + 1.0 / N);
	}
	/* Kolmogorov-Smirnov: sqrt(N) D > 2.2 has probability ~1e-4 */
	qsort(z, N, sizeof *z, cmp_float);
	double d = 0;
	for (size_t i = 0; i < N; i++) {
		double f = normal_cdf(z[i]);
		double lo = fabs(f - (double)i / N), hi = fabs((double)(i + 1) / N - f);
		d = fmax(d, fmax(lo, hi));
	}
	printf("KS: sqrt(N) D = %.3f\n", d * sqrt(N));
	assert_true(d * sqrt(N) < 2.2);
	free(z);
}

/* Neighbouring streams are unrelated; a bf16 fill gives bf16(scale z). */
static void test_streams_and_fill(void **state)
{
	(void)state;
	uint64_t a = lg_ref_stream(seed, 0), b = lg_ref_stream(seed, 1), c = lg_ref_stream(seed + 1, 0);
	assert_true(a != b && a != c && b != c);
	size_t same = 0;
	for (int i = 0; i < 1000; i++)
		same += lg_ref_rand(&a) == lg_ref_rand(&b);
	assert_int_equal(same, 0);
	uint16_t *p = malloc(100000 * sizeof *p);
	assert_non_null(p);
	uint64_t st = seed;
	lg_ref_fill_bf16(p, 100000, 4.0f, &st);
	double sumsq = 0;
	for (size_t i = 0; i < 100000; i++) {
		float v = lg_ref_bf16_to_f32(p[i]);
		assert_true(isfinite(v));
		sumsq += (double)v * v;
	}
	printf("fill: rms %.4f (4)\n", sqrt(sumsq / 100000));
	assert_true(fabs(sqrt(sumsq / 100000) - 4.0) < 0.05);
	free(p);
}

int main(void)
{
	seed = lg_test_seed("test_ref_rand");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_normal),
		cmocka_unit_test(test_streams_and_fill),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
