/*
 * test_cross_entropy_quant_ref.c - family "cross_entropy_quant" without a
 * GPU: its reference is cross_entropy's backward reference (bf16 gradient,
 * dloss g[0] on every row) then the quantisers' (lg_ref_quant_flat) on the
 * same inputs, copy for copy and bit for bit (the nominal values), at every
 * output and scale kind, label smoothing, int32 labels and a tail; its fill
 * ignores some rows (zero gradient: their payloads 0) and gives the forward's
 * S = m = 0 there; the spec checks. With qt_pitch, qt's rows that many
 * bytes apart: each the flat copy's row then 0xff (not written).
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
#include "numeric_ref.h"
#include "ref.h"
#include "refcase.h"

enum { LOGITS, LABELS, SUM, MAX, G, Q, SC, QT, ST };   /* cross_entropy_quant's arguments */
enum { B_LOGITS, B_LABELS, B_SUM, B_MAX, B_DLOSS, B_GRAD }; /* cross_entropy backward's */

/* The reference case of s at m tokens and qt_pitch `pitch`, every buffer
 * allocated (zeros). */
static void case_init(struct lg_ref_case *c, const lg_spec *s, int64_t m, int64_t pitch)
{
	const int64_t sizes[2] = {m, pitch};
	assert_int_equal(lg_ref_case_init(c, s, sizes, NULL, 0), LG_OK);
	for (int i = 0; i < c->n; i++) {
		c->buf[i].host = calloc(c->buf[i].count + 1, c->buf[i].elem);
		assert_non_null(c->buf[i].host);
	}
}

static void check(const char *keys, int64_t m, int64_t pitch)
{
	lg_spec *s = lg_test_spec("cross_entropy_quant", "forward", "bf16", keys);
	struct lg_ref_case c;
	case_init(&c, s, m, pitch);
	const struct lg_ref_family *rf = lg_ref_family_get(s->op);
	rf->describe(s, &c);
	rf->fill(s, &c, 42);
	rf->run(s, &c);
	size_t n = (size_t)lg_ref_int(s, "vocab"), mm = (size_t)m, ignored = 0;
	bool i32 = lg_ref_int(s, "index") == 1;

	/* the same inputs through cross_entropy's backward reference */
	char bkeys[256];
	snprintf(bkeys, sizeof bkeys, "\"vocab\": %zu, \"index\": \"%s\", \"ignore_index\": %lld, "
		 "\"label_smoothing\": %.17g", n, i32 ? "int32" : "int64",
		 (long long)lg_ref_int(s, "ignore_index"), lg_ref_num(s, "label_smoothing"));
	lg_spec *bs = lg_test_spec("cross_entropy", "backward", "bf16", bkeys);
	struct lg_ref_case b;
	case_init(&b, bs, m, 0);
	memcpy(b.buf[B_LOGITS].host, c.buf[LOGITS].host, mm * n * 2);
	memcpy(b.buf[B_LABELS].host, c.buf[LABELS].host, mm * (i32 ? 4 : 8));
	memcpy(b.buf[B_SUM].host, c.buf[SUM].host, mm * 4);
	memcpy(b.buf[B_MAX].host, c.buf[MAX].host, mm * 4);
	for (size_t r = 0; r < mm; r++) {
		((float *)b.buf[B_DLOSS].host)[r] = *(const float *)c.buf[G].host;
		int64_t y = i32 ? ((const int32_t *)c.buf[LABELS].host)[r] : ((const int64_t *)c.buf[LABELS].host)[r];
		if (y == lg_ref_int(s, "ignore_index")) {
			ignored++;
			assert_true(((const float *)c.buf[SUM].host)[r] == 0.0f);
			assert_true(((const float *)c.buf[MAX].host)[r] == 0.0f);
		}
	}
	assert_true(mm < 8 || ignored > 0);
	lg_ref_family_get(bs->op)->describe(bs, &b);
	lg_ref_family_get(bs->op)->run(bs, &b);

	/* ... then quantised: the family's copies, bit for bit */
	float *y = malloc(mm * n * sizeof *y + 1);
	assert_non_null(y);
	lg_ref_widen_bf16(b.buf[B_GRAD].host, y, mm * n);
	struct lg_ref_case w;
	case_init(&w, s, m, 0);
	lg_ref_quant_flat(y, mm, n, lg_spec_quant(s), w.buf[Q].host, w.buf[SC].host, w.buf[QT].host,
			  w.buf[ST].host);
	const int outs[3] = {Q, SC, ST};
	for (int k = 0; k < 3; k++) {
		const struct lg_ref_buf *got = &c.buf[outs[k]], *want = &w.buf[outs[k]];
		assert_int_equal(got->count, want->count);
		if (got->count)
			assert_memory_equal(got->host, want->host, got->count * got->elem);
	}
	/* qt: each row the flat copy's (its zero tail included), then poison */
	size_t flat = w.buf[QT].count / n, ld = pitch ? (size_t)pitch : flat;
	bool cols = lg_spec_quant(s).output != LG_QOUT_ROWWISE;
	assert_int_equal(c.buf[QT].count, n * ld);
	for (size_t k = 0; k < n; k++) {
		const uint8_t *got = (const uint8_t *)c.buf[QT].host + k * ld;
		if (flat)
			assert_memory_equal(got, (const uint8_t *)w.buf[QT].host + k * flat, flat);
		for (size_t i = flat; i < ld; i++)
			assert_int_equal(got[i], cols ? 0xff : 0);
	}
	free(y);
	lg_test_case_free(&w);
	lg_test_case_free(&b);
	lg_test_case_free(&c);
	lg_spec_free(bs);
	lg_spec_free(s);
}

static void test_is_ce_backward_then_quant(void **state)
{
	(void)state;
	static const char *const keys[] = {
		"\"vocab\": 1024, \"quant\": {}",
		"\"vocab\": 1024, \"quant\": {\"round_scale\": false}",
		"\"vocab\": 384, \"label_smoothing\": 0.1, \"index\": \"int32\", \"quant\": {}",
		"\"vocab\": 128, \"ignore_index\": 7, \"quant\": {\"output\": \"rowwise\"}",
		"\"vocab\": 256, \"quant\": {\"output\": \"columnwise\", \"round_scale\": false}",
	};
	static const int64_t tokens[] = {1, 129, 300};
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		for (size_t t = 0; t < 3; t++)
			check(keys[i], tokens[t], 0);
}

/* qt_pitch: a chunk's columns of a wider copy (the pitch the default's at
 * 384, wider at 512 and 1024), every output kind. */
static void test_qt_pitch(void **state)
{
	(void)state;
	static const char *const keys[] = {
		"\"vocab\": 256, \"quant\": {}",
		"\"vocab\": 128, \"quant\": {\"output\": \"rowwise\"}",
		"\"vocab\": 384, \"label_smoothing\": 0.1, \"quant\": {\"output\": \"columnwise\"}",
	};
	static const int64_t points[][2] = {{300, 384}, {300, 512}, {129, 1024}, {1, 256}, {0, 128}};
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		for (size_t p = 0; p < sizeof points / sizeof points[0]; p++)
			check(keys[i], points[p][0], points[p][1]);
}

static void test_spec_checks(void **state)
{
	(void)state;
	lg_test_refused("{\"op\": \"cross_entropy_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
			"\"vocab\": 1000, \"quant\": {}}",
			"vocab", "vocab: found 1000", "a multiple of 128 from 128 to 262144");
	lg_test_refused("{\"op\": \"cross_entropy_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
			"\"vocab\": 1024, \"label_smoothing\": 1.5, \"quant\": {}}",
			"label_smoothing", "label_smoothing: found 1.5", "allowed: 0 <= e <= 1");
}

/* qt_pitch at launch: 0 or a multiple of 128 at least round_up(tokens,
 * 128) (its range and multiple: lg_size_check; the rest: check_sizes). */
static void test_qt_pitch_checks(void **state)
{
	(void)state;
	lg_spec *s = lg_test_spec("cross_entropy_quant", "forward", "bf16", "\"vocab\": 256, \"quant\": {}");
	const struct lg_family *f = lg_family_get(s->op);
	const struct lg_size *z = &f->sig[LG_PASS_FORWARD].sizes[1];
	struct lg_target t;
	struct lg_plan p;
	assert_true(lg_target_parse("sm_90a", &t));
	assert_int_equal(lg_plan_for(s, &t, &p), LG_OK);
	const int64_t ok[][2] = {{300, 0}, {300, 384}, {300, 8320}, {0, 0}, {0, 128}, {1, 128}};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		assert_int_equal(lg_size_check(p.entry[0], z, ok[i][1]), LG_OK);
		assert_int_equal(f->check_sizes(&p, ok[i]), LG_OK);
	}
	assert_int_equal(lg_size_check(p.entry[0], z, 400), LG_ERR_INVALID_ARG);
	assert_non_null(strstr(lg_last_error(), "qt_pitch = 400, allowed: a multiple of 128"));
	const int64_t narrow[2] = {300, 256};
	assert_int_equal(f->check_sizes(&p, narrow), LG_ERR_INVALID_ARG);
	assert_non_null(strstr(lg_last_error(), "qt_pitch = 256 at tokens = 300, allowed: 0 or at least "
					       "round_up(tokens, 128) = 384"));
	lg_spec_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_is_ce_backward_then_quant),
		cmocka_unit_test(test_qt_pitch),
		cmocka_unit_test(test_qt_pitch_checks),
		cmocka_unit_test(test_spec_checks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
