/*
 * test_lists_ref.c - the tensor-list families grad_norm (docs/kernels.md K10)
 * and count_zero (K11) on the CPU: the references against values worked
 * by hand (fp32, bf16, -0.0, NaN, a long sum), the references over a host
 * table, the table a list uploads (items cut at 16 KiB from each tensor's
 * aligned base, the checks of lg_tensor_list_create), spec errors and
 * their messages, entry names, the launch geometry and workspace, and the
 * tuning candidates (each validates, plans and generates).
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
#include "generate.h"
#include "lingen.h"
#include "list.h"
#include "list_ref.h"
#include "numeric_ref.h"
#include "refcase.h"

static lg_spec *parse(const char *json)
{
	lg_spec *s = NULL;
	if (lg_spec_parse(json, &s) != LG_OK)
		fail_msg("%s: %s", json, lg_last_error());
	return s;
}

/* Norms and counts of small lists, worked by hand. */
static void test_reference_by_hand(void **state)
{
	(void)state;
	const float a[] = {3.0f, -4.0f, 0.0f, -0.0f};
	const uint16_t b[] = {lg_ref_f32_to_bf16(12.0f), lg_ref_f32_to_bf16(-0.0f), lg_ref_f32_to_bf16(0.5f)};
	struct lg_ref_tensor t[] = {{a, LG_LIST_FP32, 4}, {b, LG_LIST_BF16, 3}, {a, LG_LIST_FP32, 0}};
	assert_true(lg_ref_list_norm(t, 3, LG_REF_ORD_2, false) == 9 + 16 + 144 + 0.25);
	assert_true(lg_ref_list_norm(t, 3, LG_REF_ORD_2, true) == sqrt(169.25));
	assert_true(lg_ref_list_norm(t, 3, LG_REF_ORD_1, true) == 3 + 4 + 12 + 0.5);
	assert_true(lg_ref_list_norm(t, 3, LG_REF_ORD_INF, true) == 12);
	assert_int_equal(lg_ref_list_count_zero(t, 3), 3); /* 0.0, -0.0 (fp32), -0.0 (bf16) */
	/* no element: 0 */
	assert_true(lg_ref_list_norm(t, 0, LG_REF_ORD_2, true) == 0);
	assert_true(lg_ref_list_norm(t + 2, 1, LG_REF_ORD_INF, true) == 0);
	assert_int_equal(lg_ref_list_count_zero(t + 2, 1), 0);
	/* a NaN: the max and the sums are NaN, it is not a zero */
	const float n[] = {1.0f, NAN, 2.0f};
	struct lg_ref_tensor tn = {n, LG_LIST_FP32, 3};
	assert_true(isnan(lg_ref_list_norm(&tn, 1, LG_REF_ORD_INF, true)));
	assert_true(isnan(lg_ref_list_norm(&tn, 1, LG_REF_ORD_2, true)));
	assert_int_equal(lg_ref_list_count_zero(&tn, 1), 0);
	/* the compensated sum: 1 + 2^-60 a million times, then -1, keeps the small parts */
	enum { N = 1000001 };
	float *big = malloc(N * sizeof *big);
	assert_non_null(big);
	big[0] = 1.0f;
	for (int i = 1; i < N; i++)
		big[i] = 0x1p-40f; /* squares 2^-80 each: lost in a plain fp64 sum next to 1 */
	struct lg_ref_tensor tb = {big, LG_LIST_FP32, N};
	double ss = lg_ref_list_norm(&tb, 1, LG_REF_ORD_2, false);
	assert_true(ss == 1.0 + (N - 1) * 0x1p-80);
	free(big);
}

/* The references over a host table (as the harness hands them). */
static void test_reference_rows(void **state)
{
	(void)state;
	const float a[] = {1.0f, 0.0f, 2.0f};
	const uint16_t b[] = {lg_ref_f32_to_bf16(-3.0f), 0};
	unsigned char table[2 * LG_LIST_ROW_BYTES];
	uint64_t pa = (uint64_t)(uintptr_t)a, pb = (uint64_t)(uintptr_t)b;
	uint32_t v[4] = {3, LG_LIST_FP32, 2, LG_LIST_BF16};
	memcpy(table, &pa, 8), memcpy(table + 8, &v[0], 4), memcpy(table + 12, &v[1], 4);
	memcpy(table + 16, &pb, 8), memcpy(table + 24, &v[2], 4), memcpy(table + 28, &v[3], 4);
	struct lg_ref_tensor *t = lg_ref_list_rows(table, 2);
	assert_non_null(t);
	assert_true(t[0].data == a && t[0].count == 3 && t[0].elem == LG_LIST_FP32);
	assert_true(t[1].data == b && t[1].count == 2 && t[1].elem == LG_LIST_BF16);
	assert_true(lg_ref_list_norm(t, 2, LG_REF_ORD_2, false) == 14);
	assert_int_equal(lg_ref_list_count_zero(t, 2), 2);
	free(t);
	assert_null(lg_ref_list_rows(table, 0));
}

struct row {
	uint64_t p;
	uint32_t n, e;
};

/* The table: items of at most 16 KiB cut at multiples of 16 KiB from each
 * tensor's 16-byte-aligned base, in tensor order; no item for an empty
 * tensor. */
static void test_table_rows(void **state)
{
	(void)state;
	const lg_dptr base = 0x100000;
	/* fp32 at base + 4: 4095 elements up to base + 16384, then the rest */
	const lg_dptr ptrs[] = {base + 4, 0, base + 0x20000, base + 0x40002};
	const int elems[] = {LG_LIST_FP32, LG_LIST_BF16, LG_LIST_BF16, LG_LIST_BF16};
	const int64_t counts[] = {10000, 0, 8192, 1};
	void *rows = NULL;
	int64_t items = -1;
	assert_int_equal(lg_tensor_list_rows(ptrs, elems, counts, 4, &rows, &items), LG_OK);
	assert_int_equal(items, 3 + 1 + 1);
	const struct row *r = rows;
	assert_true(r[0].p == base + 4 && r[0].n == 4095 && r[0].e == LG_LIST_FP32);
	assert_true(r[1].p == base + 16384 && r[1].n == 4096);
	assert_true(r[2].p == base + 32768 && r[2].n == 10000 - 4095 - 4096);
	assert_true(r[3].p == base + 0x20000 && r[3].n == 8192 && r[3].e == LG_LIST_BF16); /* exactly 16 KiB */
	assert_true(r[4].p == base + 0x40002 && r[4].n == 1);
	uint64_t total = 0;
	for (int i = 0; i < 3; i++)
		total += r[i].n;
	assert_int_equal(total, 10000);
	free(rows);
	/* no tensor, no row */
	assert_int_equal(lg_tensor_list_rows(ptrs, elems, counts, 0, &rows, &items), LG_OK);
	assert_int_equal(items, 0);
	assert_null(rows);
}

/* lg_tensor_list_create refuses bad tensors before touching a device. */
static void test_table_errors(void **state)
{
	(void)state;
	lg_tensor_list *l = NULL;
	const lg_dptr ok = 0x1000, odd = 0x1002;
	const int fp32 = LG_LIST_FP32, bad = 7;
	const int64_t one = 1, neg = -1;
	assert_int_equal(lg_tensor_list_create(&ok, &bad, &one, 1, &l), LG_ERR_INVALID_ARG);
	assert_non_null(strstr(lg_last_error(), "element type 7"));
	assert_int_equal(lg_tensor_list_create(&ok, &fp32, &neg, 1, &l), LG_ERR_INVALID_ARG);
	assert_non_null(strstr(lg_last_error(), "-1 elements"));
	assert_int_equal(lg_tensor_list_create(&odd, &fp32, &one, 1, &l), LG_ERR_INVALID_ARG);
	assert_non_null(strstr(lg_last_error(), "0x1002"));
	assert_int_equal(lg_tensor_list_create(NULL, &fp32, &one, 1, &l), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_tensor_list_create(&ok, &fp32, &one, 1, NULL), LG_ERR_INVALID_ARG);
	assert_null(l);
	/* the accessors of no list */
	assert_int_equal(lg_tensor_list_items(NULL), 0);
	assert_int_equal(lg_tensor_list_table(NULL), 0);
	lg_tensor_list_destroy(NULL);
	/* a launcher without a list */
	assert_int_equal(lg_grad_norm(NULL, NULL, NULL, 0, 0), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_count_zero(NULL, NULL, NULL, 0, 0), LG_ERR_INVALID_ARG);
}

static void refused(const char *json, const char *want1, const char *want2)
{
	lg_test_refused(json, json, want1, want2);
}

#define GN "{\"op\": \"grad_norm\", \"pass\": \"forward\", \"dtype\": \"fp32\""
#define CZ "{\"op\": \"count_zero\", \"pass\": \"forward\", \"dtype\": \"bf16\""

static void test_spec_checks(void **state)
{
	(void)state;
	refused(GN ", \"ord\": \"3\"}", "ord", "\"inf\"");
	refused(GN ", \"ord\": \"1\", \"norm\": false}", "norm: found false", "only with ord \"2\"");
	refused(GN ", \"tile\": {\"threads\": 512, \"per_sm\": 8}}", "tile.per_sm: found 8", "at most 4");
	refused(GN ", \"tile\": {\"unroll\": 3}}", "tile.unroll", "3");
	refused(GN ", \"tile\": {\"threads\": 96}}", "tile.threads", "96");
	refused(GN ", \"hidden\": 2048}", "hidden: found 2048", "not used by op grad_norm");
	refused(CZ ", \"ord\": \"2\"}", "ord", "not used by op count_zero");
	refused("{\"op\": \"count_zero\", \"pass\": \"backward\", \"dtype\": \"bf16\"}", "pass", "forward");
	/* entry names */
	static const char *const names[][2] = {
		{GN "}", "lg_grad_norm_fwd_fp32_l2"},
		{GN ", \"norm\": false}", "lg_grad_norm_fwd_fp32_l2_sumsq"},
		{GN ", \"ord\": \"inf\", \"mixed\": true}", "lg_grad_norm_fwd_fp32_linf_mixed"},
		{CZ "}", "lg_count_zero_fwd_bf16"},
		{CZ ", \"mixed\": true, \"tile\": {\"unroll\": 8}}", "lg_count_zero_fwd_bf16_mixed_tu8"},
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		lg_spec *s = parse(names[i][0]);
		assert_string_equal(lg_spec_entry(s), names[i][1]);
		lg_spec_free(s);
	}
}

/* A fixed grid of 132 x per_sm CTAs and one final CTA, at any item count
 * (0 too: the result is written); the workspace holds 8 bytes a CTA. */
static void test_geometry(void **state)
{
	(void)state;
	static const char *const specs[] = {GN "}", CZ ", \"tile\": {\"threads\": 512, \"per_sm\": 2}}"};
	static const unsigned want[][2] = {{528, 256}, {264, 512}};
	for (int i = 0; i < 2; i++) {
		lg_spec *s = parse(specs[i]);
		const struct lg_family *f = lg_family_get(s->op);
		struct lg_target t;
		struct lg_plan p;
		assert_true(lg_target_parse("sm_90a", &t));
		assert_int_equal(lg_plan_for(s, &t, &p), LG_OK);
		assert_int_equal(p.nentries, 2);
		assert_true(p.early[1]);
		static const int64_t items[] = {0, 1, 144000};
		for (int j = 0; j < 3; j++) {
			struct lg_launch_dim d;
			f->geometry(&p, 0, &items[j], &d);
			assert_true(d.grid[0] == want[i][0] && d.block[0] == want[i][1] && d.grid[1] == 1);
			f->geometry(&p, 1, &items[j], &d);
			assert_true(d.grid[0] == 1 && d.block[0] == 256);
		}
		assert_int_equal(f->workspace(&p), want[i][0] * 8);
		assert_true(lg_target_parse("sm_80", &t));
		assert_int_equal(lg_plan_for(s, &t, &p), LG_OK);
		assert_false(p.early[1]);
		lg_spec_free(s);
	}
}

static void test_candidates(void **state)
{
	(void)state;
	static const char *const specs[] = {GN "}", CZ ", \"mixed\": true}"};
	for (int i = 0; i < 2; i++) {
		lg_spec *s = parse(specs[i]);
		const struct lg_family *f = lg_family_get(s->op);
		struct lg_target t;
		assert_true(lg_target_parse("sm_90a", &t));
		struct lg_tile_choice c[LG_MAX_CANDIDATES];
		int n = f->candidates(s, &t, c, LG_MAX_CANDIDATES);
		assert_true(n >= 8);
		for (int j = 0; j < n; j++) {
			struct lg_spec v;
			struct lg_plan p;
			char *src = NULL;
			assert_int_equal(lg_spec_with_tile(s, &c[j], &v), LG_OK);
			if (lg_generate_for(&v, &t, &p, &src, NULL) != LG_OK)
				fail_msg("%s: %s", v.entry, lg_last_error());
			assert_non_null(strstr(src, p.entry[0]));
			free(src);
		}
		lg_spec_free(s);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reference_by_hand),
		cmocka_unit_test(test_reference_rows),
		cmocka_unit_test(test_table_rows),
		cmocka_unit_test(test_table_errors),
		cmocka_unit_test(test_spec_checks),
		cmocka_unit_test(test_geometry),
		cmocka_unit_test(test_candidates),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
