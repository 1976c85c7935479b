/*
 * test_adamw_fp8_ref.c - the CPU reference of family "adamw_fp8" (no GPU):
 * its FP8 copies are those of fp8_quant_weight's reference (transposed) run
 * on the weight after adamw's reference step, at the target shape and odd
 * ones (rows not a multiple of 128, both scale recipes); expert weights'
 * per-expert transposed copies (expert_rows); the case's inputs
 * are left as filled (the harness may launch again); a tile worked by hand
 * (an fp32 weight); the buffers as declared; refusals of bad specs.
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
#include "list_ref.h"
#include "numeric_ref.h"
#include "ref.h"

enum { P, G, M, V, STEP, LR, Q, S, QT, ST, NBUF };

static lg_spec *spec(const char *json)
{
	lg_spec *s = NULL;
	if (lg_spec_parse(json, &s) != LG_OK)
		fail_msg("%s: %s", json, lg_last_error());
	return s;
}

/* A case of s at `rows`, its buffers allocated (zeros). */
static void case_make(const lg_spec *s, int64_t rows, struct lg_ref_case *c)
{
	struct lg_target t;
	struct lg_plan p;
	assert_true(lg_target_parse("sm_90a", &t));
	assert_int_equal(lg_plan_for(s, &t, &p), LG_OK);
	int64_t sizes[LG_MAX_SIZES] = {rows};
	assert_int_equal(lg_ref_case_init(c, s, sizes, p.used, 0), LG_OK);
	for (int i = 0; i < c->n; i++) {
		c->buf[i].host = calloc(c->buf[i].count ? c->buf[i].count : 1, c->buf[i].elem);
		assert_non_null(c->buf[i].host);
	}
}

static void case_free(struct lg_ref_case *c)
{
	for (int i = 0; i < c->n; i++)
		free(c->buf[i].host);
}

static size_t bytes(const struct lg_ref_case *c, int i)
{
	return c->buf[i].count * c->buf[i].elem;
}

/* The adamw_fp8 spec json (bf16 weight) at rows x hidden against adamw's
 * step then fp8_quant_weight's reference. */
static void check_bf16(const char *json, int64_t rows, const char *fq_json, uint64_t seed)
{
	lg_spec *s = spec(json), *f = spec(fq_json);
	int64_t n = lg_ref_int(s, "hidden");
	struct lg_ref_case c, w;
	case_make(s, rows, &c);
	case_make(f, rows, &w);
	assert_int_equal(c.n, NBUF);
	const size_t want[NBUF] = {(size_t)(rows * n), (size_t)(rows * n * (lg_ref_int(s, "grad") ? 2 : 4)),
				   (size_t)(rows * n * (lg_ref_int(s, "moments") ? 2 : 4)),
				   (size_t)(rows * n * (lg_ref_int(s, "moments") ? 2 : 4)), 1, 1,
				   (size_t)(rows * n), (size_t)((rows + 127) / 128 * (n / 128)),
				   (size_t)(rows * n), (size_t)((rows + 127) / 128 * (n / 128))};
	for (int i = 0; i < NBUF; i++)
		assert_int_equal(c.buf[i].count, want[i]);
	const struct lg_ref_family *rf = lg_ref_family_get(s->op), *rq = lg_ref_family_get(f->op);
	rf->describe(s, &c);
	assert_int_equal(c.buf[Q].cmp, LG_CMP_E4M3_ULP);
	assert_int_equal(c.buf[QT].cmp, LG_CMP_E4M3_ULP);
	assert_int_equal(c.buf[S].cmp, LG_CMP_SCALE);
	assert_int_equal(c.buf[ST].cmp, LG_CMP_SCALE);
	rf->fill(s, &c, seed);
	void *keep[4];
	for (int i = 0; i < 4; i++) {
		keep[i] = malloc(bytes(&c, i));
		assert_non_null(keep[i]);
		memcpy(keep[i], c.buf[i].host, bytes(&c, i));
	}
	rf->run(s, &c);
	for (int i = 0; i < 4; i++) /* the inputs as filled */
		assert_memory_equal(keep[i], c.buf[i].host, bytes(&c, i));
	/* adamw's step of the weight, then fp8_quant_weight's copies of it */
	struct lg_ref_adamw_hp h = lg_ref_adamw_hp_of(s);
	assert_true(h.param_bf16);
	lg_ref_adamw_step(&h, keep[0], keep[1], keep[2], keep[3], (size_t)(rows * n), *(float *)c.buf[STEP].host,
			  *(float *)c.buf[LR].host);
	memcpy(w.buf[0].host, keep[0], bytes(&c, P));
	rq->run(f, &w);
	assert_memory_equal(w.buf[1].host, c.buf[Q].host, bytes(&c, Q));
	assert_memory_equal(w.buf[2].host, c.buf[S].host, bytes(&c, S));
	assert_memory_equal(w.buf[3].host, c.buf[QT].host, bytes(&c, QT));
	assert_memory_equal(w.buf[4].host, c.buf[ST].host, bytes(&c, ST));
	for (int i = 0; i < 4; i++)
		free(keep[i]);
	case_free(&c);
	case_free(&w);
	lg_spec_free(s);
	lg_spec_free(f);
}

#define AF(dtype, h, rest) \
	"{\"op\": \"adamw_fp8\", \"pass\": \"forward\", \"dtype\": \"" dtype "\", \"hidden\": " #h rest "}"
#define FQW(h, pow2)                                                                                \
	"{\"op\": \"fp8_quant_weight\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": " #h \
	", \"quant\": {\"round_scale\": " #pow2 "}, \"transposed\": true}"

static void test_as_quant_weight(void **state)
{
	(void)state;
	/* the training example's expert weight (bf16 grads and moments), and odd ones */
	check_bf16(AF("bf16", 512, ", \"quant\": {\"round_scale\": true}, \"grad\": \"bf16\", "
				    "\"moments\": \"bf16\", \"beta2\": 0.95, \"weight_decay\": 0.1"),
		   256, FQW(512, true), 1);
	check_bf16(AF("bf16", 384, ", \"quant\": {\"round_scale\": true}"), 1000, FQW(384, true), 2);
	check_bf16(AF("bf16", 128, ", \"quant\": {\"round_scale\": false}, \"moments\": \"bf16\""), 130,
		   FQW(128, false), 3);
	check_bf16(AF("bf16", 256, ", \"quant\": {\"round_scale\": true}"), 1, FQW(256, true), 4);
}

/* expert_rows: q and s as the flat spec's, qt and st each expert's own,
 * the flat ones rearranged: expert e's qt [K, c_e] at element e N K (what
 * lingen.nn._quant.experts_transposed gives: qt_e[k, i] = qt[k, e N + i])
 * and st [K/128, cdiv(c_e, 128)] at e N/128 K/128; a short last expert. */
static void check_experts(const char *flat_json, const char *json, int64_t rows, size_t er)
{
	lg_spec *s = spec(json), *f = spec(flat_json);
	size_t n = (size_t)lg_ref_int(s, "hidden"), m = (size_t)rows, mb = (m + 127) / 128, nb = n / 128;
	assert_int_equal(lg_ref_int(s, "expert_rows"), (int64_t)er);
	struct lg_ref_case c, w;
	case_make(s, rows, &c);
	case_make(f, rows, &w);
	const struct lg_ref_family *rf = lg_ref_family_get(s->op);
	rf->fill(s, &c, 7);
	rf->fill(f, &w, 7);
	rf->run(s, &c);
	rf->run(f, &w);
	assert_memory_equal(w.buf[Q].host, c.buf[Q].host, bytes(&c, Q));
	assert_memory_equal(w.buf[S].host, c.buf[S].host, bytes(&c, S));
	const uint8_t *qt = w.buf[QT].host, *qe = c.buf[QT].host;
	const float *st = w.buf[ST].host, *se = c.buf[ST].host;
	for (size_t e0 = 0; e0 < m; e0 += er) {
		size_t ce = m - e0 < er ? m - e0 : er, cb = (ce + 127) / 128;
		for (size_t k = 0; k < n; k++)
			for (size_t i = 0; i < ce; i++)
				assert_int_equal(qe[e0 * n + k * ce + i], qt[k * m + e0 + i]);
		for (size_t b = 0; b < nb; b++)
			for (size_t j = 0; j < cb; j++)
				assert_true(se[e0 / 128 * nb + b * cb + j] == st[b * mb + e0 / 128 + j]);
	}
	case_free(&c);
	case_free(&w);
	lg_spec_free(s);
	lg_spec_free(f);
}

static void test_experts(void **state)
{
	(void)state;
	check_experts(AF("bf16", 512, ", \"quant\": {}, \"grad\": \"bf16\", \"moments\": \"bf16\""),
		      AF("bf16", 512, ", \"quant\": {}, \"grad\": \"bf16\", \"moments\": \"bf16\", "
				      "\"expert_rows\": 256"),
		      4 * 256, 256);
	check_experts(AF("bf16", 384, ", \"quant\": {}"), AF("bf16", 384, ", \"quant\": {}, \"expert_rows\": 256"),
		      1000, 256);
	check_experts(AF("fp32", 128, ", \"quant\": {\"round_scale\": false}"),
		      AF("fp32", 128, ", \"quant\": {\"round_scale\": false}, \"expert_rows\": 384"), 3 * 384, 384);
}

/* An fp32 weight: its fp32 values quantised (no bf16 rounding). One tile
 * of 0.5 with -1792 at (3, 9), lr 0 and no gradient: the weight is kept,
 * s = 4 (pow2: 1792 / 448), the payloads 0.125 and -448; exact: s = 1792 /
 * 448 = 4 too. */
static void test_fp32_by_hand(void **state)
{
	(void)state;
	float *w = malloc(128 * 128 * sizeof *w);
	uint8_t *q = malloc(128 * 128), *qt = malloc(128 * 128);
	float s = 0, st = 0;
	assert_true(w && q && qt);
	for (int i = 0; i < 128 * 128; i++)
		w[i] = 0.5f;
	w[3 * 128 + 9] = -1792.0f;
	for (int pow2 = 0; pow2 < 2; pow2++) {
		lg_ref_weight_tiles(w, false, 128, 128, pow2, q, &s, qt, &st);
		assert_true(s == 4.0f && st == 4.0f);
		assert_int_equal(q[3 * 128 + 9], 0xfe);  /* -448 */
		assert_int_equal(qt[9 * 128 + 3], 0xfe);
		assert_int_equal(q[0], 0x20);            /* 0.125 = 2^-3 */
		assert_int_equal(qt[127 * 128 + 5], 0x20);
	}
	free(w), free(q), free(qt);
}

static void test_refusals(void **state)
{
	(void)state;
	lg_spec *s = NULL;
	/* hidden not a multiple of 128 (as fp8_quant_weight) */
	assert_int_not_equal(lg_spec_parse(AF("bf16", 300, ", \"quant\": {}"), &s), LG_OK);
	assert_non_null(strstr(lg_last_error(), "hidden"));
	assert_int_not_equal(lg_spec_parse(AF("e4m3", 256, ", \"quant\": {}"), &s), LG_OK);
	assert_int_not_equal(lg_spec_parse(AF("bf16", 256, ", \"quant\": {\"output\": \"rowwise\"}"), &s), LG_OK);
	assert_non_null(strstr(lg_last_error(), "quant.output"));
	assert_int_not_equal(lg_spec_parse(AF("bf16", 256, ", \"quant\": {}, \"beta1\": -0.5"), &s), LG_OK);
	assert_non_null(strstr(lg_last_error(), "beta1"));
	assert_int_not_equal(lg_spec_parse(AF("bf16", 256, ", \"quant\": {}, \"tile\": {\"threads\": 128}"), &s),
			     LG_OK);
	assert_null(s);
	/* expert_rows a multiple of 128 (no tile across two experts) */
	assert_int_not_equal(lg_spec_parse(AF("bf16", 256, ", \"quant\": {}, \"expert_rows\": 200"), &s), LG_OK);
	assert_non_null(strstr(lg_last_error(), "expert_rows"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_as_quant_weight),
		cmocka_unit_test(test_experts),
		cmocka_unit_test(test_fp32_by_hand),
		cmocka_unit_test(test_refusals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
