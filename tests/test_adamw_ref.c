/*
 * test_adamw_ref.c - the CPU reference of family "adamw" (no GPU): one step
 * worked by hand, weight decay alone, the lerp's two forms (beta1 above and
 * below 0.5) against the fp64 formula, several steps against the fp64
 * formula within a few fp32 ulps, the spec's hyperparameters, refusals of
 * negative ones, and bf16 moments rounded to nearest even (a reference that
 * rounded toward zero gives other bits, so gpu_test_adamw, bit for bit,
 * fails such a kernel).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "family.h"
#include "lingen.h"
#include "list_ref.h"
#include "numeric_ref.h"

static const struct lg_ref_adamw_hp torch_default = {0.9, 0.999, 1e-8, 0.01, false, false, false};

static void test_by_hand(void **state)
{
	(void)state;
	struct lg_ref_adamw_hp h = torch_default;
	h.weight_decay = 0;
	float p = 1.0f, g = 1.0f, m = 0.0f, v = 0.0f;
	lg_ref_adamw_step(&h, &p, &g, &m, &v, 1, 1.0f, 0.1f);
	assert_true(m == 0.1f);          /* fma(0.1, 1 - 0, 0) */
	assert_true(v == 0.001f * 1.0f); /* (0.001 g) g */
	/* m / bc1 = 1, sqrt(v / bc2) = 1: p = 1 - 0.1 / (1 + 1e-8) */
	assert_true(fabs(p - 0.9) < 1e-7);
}

static void test_weight_decay(void **state)
{
	(void)state;
	float p[3] = {2.0f, -3.0f, 0.5f}, g[3] = {0}, m[3] = {0}, v[3] = {0};
	lg_ref_adamw_step(&torch_default, p, g, m, v, 3, 1.0f, 0.5f);
	float d = (float)(1.0 - 0.5 * 0.01);
	assert_true(p[0] == 2.0f * d && p[1] == -3.0f * d && p[2] == 0.5f * d);
}

/* Steps against the formula in fp64: a few fp32 ulps of the update. */
static void check_formula(double beta1)
{
	struct lg_ref_adamw_hp h = torch_default;
	h.beta1 = beta1;
	float p = 0.75f, m = 0, v = 0;
	double P = p, M = 0, V = 0;
	for (int t = 1; t <= 10; t++) {
		float g = (float)sin(t * 1.7);
		lg_ref_adamw_step(&h, &p, &g, &m, &v, 1, (float)t, 1e-2f);
		double lr = (double)1e-2f;
		P *= 1 - lr * h.weight_decay;
		M = M + (1 - h.beta1) * (g - M);
		V = h.beta2 * V + (1 - h.beta2) * (double)g * g;
		double bc1 = 1 - pow(h.beta1, t), bc2 = 1 - pow(h.beta2, t);
		P -= lr / bc1 * M / (sqrt(V) / sqrt(bc2) + h.eps);
		assert_true(fabs(m - M) <= 4e-7 * fabs(M) + 1e-12);
		assert_true(fabs(p - P) <= 1e-6);
	}
}

static void test_formula(void **state)
{
	(void)state;
	check_formula(0.9); /* lerp as m + w (g - m) */
	check_formula(0.3); /* lerp as g - (1 - w) (g - m) */
}

static void test_hp_of_spec(void **state)
{
	(void)state;
	lg_spec *s = NULL;
	assert_int_equal(lg_spec_parse("{\"op\": \"adamw\", \"pass\": \"forward\", \"dtype\": \"fp32\", "
				       "\"grad\": \"bf16\", \"moments\": \"bf16\", \"beta2\": 0.95, "
				       "\"weight_decay\": 0.1}", &s), LG_OK);
	struct lg_ref_adamw_hp h = lg_ref_adamw_hp_of(s);
	assert_true(h.beta1 == 0.9 && h.beta2 == 0.95 && h.eps == 1e-8 && h.weight_decay == 0.1);
	assert_true(h.grad_bf16 && h.moments_bf16);
	lg_spec_free(s);
	assert_int_not_equal(lg_spec_parse("{\"op\": \"adamw\", \"pass\": \"forward\", \"dtype\": \"fp32\", "
					   "\"weight_decay\": -0.5}", &s), LG_OK);
	assert_non_null(strstr(lg_last_error(), "weight_decay"));
	assert_int_not_equal(lg_spec_parse("{\"op\": \"adamw\", \"pass\": \"forward\", \"dtype\": \"bf16\"}", &s),
			     LG_OK);
}

static void test_bf16_moments_rne(void **state)
{
	(void)state;
	struct lg_ref_adamw_hp h = torch_default;
	h.moments_bf16 = true;
	enum { N = 4096 };
	static float p[2][N], g[N];
	static uint16_t m[2][N], v[2][N];
	for (int i = 0; i < N; i++) {
		g[i] = (float)sin(i * 0.37) * 3.0f;
		p[0][i] = p[1][i] = (float)cos(i * 0.11);
		m[0][i] = m[1][i] = lg_ref_f32_to_bf16((float)sin(i * 0.05) * 0.1f);
		v[0][i] = v[1][i] = lg_ref_f32_to_bf16(1e-3f * (float)(1 + i % 7));
	}
	lg_ref_adamw_step(&h, p[0], g, m[0], v[0], N, 3.0f, 1e-3f);
	lg_ref_bf16_rz_for_tests(true);
	lg_ref_adamw_step(&h, p[1], g, m[1], v[1], N, 3.0f, 1e-3f);
	lg_ref_bf16_rz_for_tests(false);
	int differ = 0;
	for (int i = 0; i < N; i++)
		differ += m[0][i] != m[1][i] || v[0][i] != v[1][i];
	assert_true(differ > N / 8); /* the rounding of about half the values tells */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_by_hand),
		cmocka_unit_test(test_weight_decay),
		cmocka_unit_test(test_formula),
		cmocka_unit_test(test_hp_of_spec),
		cmocka_unit_test(test_bf16_moments_rne),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
