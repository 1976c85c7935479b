/*
 * test_cross_entropy_ref.c - family cross_entropy (docs/kernels.md K9) without a
 * GPU: its reference (gen/ref/cross_entropy_ref.c) on cases computed by hand
 * (one row, every label ignored, an odd vocab, label smoothing as torch
 * defines it), the vocab-parallel pieces against the whole row (shard
 * statistics + merge = the full forward; the shards' backward = slices of
 * the full one; the fused forward's gradient = the backward's), the
 * declared shapes and label types, the spec checks and their messages,
 * entry names, the launch geometry and the tuning candidates.
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

enum { F_LOGITS, F_LABELS, F_STATS_IN, F_G, F_LOSS, F_SUM, F_MAX, F_STATS, F_GRAD };
enum { B_LOGITS, B_LABELS, B_SUM, B_MAX, B_DLOSS, B_GRAD };

static lg_spec *parse(const char *pass, const char *dtype, const char *keys)
{
	return lg_test_spec("cross_entropy", pass, dtype, keys);
}

/* The reference case of s at the sizes (tokens, vocab_start, shards),
 * every buffer the spec uses allocated (zeros). */
static void case_init(struct lg_ref_case *c, const lg_spec *s, int64_t M, int64_t v0, int64_t ns)
{
	const int64_t sizes[3] = {M, v0, ns};
	unsigned char used[LG_MAX_ARGS];
	lg_spec_uses(s, used);
	assert_int_equal(lg_ref_case_init(c, s, sizes, used, 0), LG_OK);
	for (int i = 0; i < c->n; i++) {
		c->buf[i].host = c->buf[i].count ? calloc(c->buf[i].count, c->buf[i].elem) : NULL;
		assert_true(!c->buf[i].count || c->buf[i].host);
	}
}

static float f32_at(const struct lg_ref_case *c, int arg, size_t i)
{
	return ((const float *)c->buf[arg].host)[i];
}

static void set_f32(struct lg_ref_case *c, int arg, size_t i, float v)
{
	((float *)c->buf[arg].host)[i] = v;
}

static void set_label(struct lg_ref_case *c, int arg, size_t i, int64_t v)
{
	if (c->buf[arg].elem == 4)
		((int32_t *)c->buf[arg].host)[i] = (int32_t)v;
	else
		((int64_t *)c->buf[arg].host)[i] = v;
}

static void near(double got, double want, double rel)
{
	if (!(fabs(got - want) <= rel * fabs(want) + 1e-30))
		fail_msg("got %.9g, expected %.9g (relative %g)", got, want, rel);
}

/* One row of 4 fp32 logits 0, 1, 2, 3, label 2: m = 3, S = sum e^(x - 3),
 * loss = log(e^0 + e^1 + e^2 + e^3) - 2; bf16 logits (exact here) give the
 * same; int32 labels the same. */
static void test_one_row(void **state)
{
	(void)state;
	static const char *const variants[][2] = {{"fp32", ""}, {"bf16", ""}, {"fp32", ", \"index\": \"int32\""}};
	double S = exp(-3.0) + exp(-2.0) + exp(-1.0) + 1.0;
	for (int v = 0; v < 3; v++) {
		char keys[128];
		snprintf(keys, sizeof keys, "\"vocab\": 4%s", variants[v][1]);
		lg_spec *s = parse("forward", variants[v][0], keys);
		struct lg_ref_case c;
		case_init(&c, s, 1, 0, 1);
		assert_int_equal(c.buf[F_LABELS].elem, v == 2 ? 4 : 8);
		for (int j = 0; j < 4; j++) {
			if (v == 1)
				((uint16_t *)c.buf[F_LOGITS].host)[j] = lg_ref_f32_to_bf16((float)j);
			else
				set_f32(&c, F_LOGITS, (size_t)j, (float)j);
		}
		set_label(&c, F_LABELS, 0, 2);
		lg_ref_family_get(s->op)->run(s, &c);
		near(f32_at(&c, F_LOSS, 0), log(S) + 3.0 - 2.0, 1e-7);
		near(f32_at(&c, F_SUM, 0), S, 1e-7);
		assert_true(f32_at(&c, F_MAX, 0) == 3.0f);
		lg_test_case_free(&c);
		lg_spec_free(s);
	}
}

/* Every label ignored (ignore_index -1 here): loss, S, m 0; the backward's
 * and the fused forward's gradients all zero. */
static void test_all_ignored(void **state)
{
	(void)state;
	lg_spec *s = parse("forward", "bf16", "\"vocab\": 37, \"ignore_index\": -1, \"fused\": true");
	struct lg_ref_case c;
	case_init(&c, s, 5, 0, 1);
	lg_ref_family_get(s->op)->fill(s, &c, 7);
	for (size_t r = 0; r < 5; r++) {
		set_label(&c, F_LABELS, r, -1);
		set_f32(&c, F_LOSS, r, 9.0f);
	}
	lg_ref_family_get(s->op)->run(s, &c);
	for (size_t r = 0; r < 5; r++)
		assert_true(f32_at(&c, F_LOSS, r) == 0.0f && f32_at(&c, F_SUM, r) == 0.0f &&
			    f32_at(&c, F_MAX, r) == 0.0f);
	for (size_t i = 0; i < c.buf[F_GRAD].count; i++)
		assert_int_equal(((uint16_t *)c.buf[F_GRAD].host)[i], 0);
	lg_test_case_free(&c);
	lg_spec_free(s);
	s = parse("backward", "fp32", "\"vocab\": 37, \"ignore_index\": -1");
	case_init(&c, s, 3, 0, 1);
	lg_ref_family_get(s->op)->fill(s, &c, 8);
	for (size_t r = 0; r < 3; r++)
		set_label(&c, B_LABELS, r, -1);
	lg_ref_family_get(s->op)->run(s, &c);
	for (size_t i = 0; i < c.buf[B_GRAD].count; i++)
		assert_true(f32_at(&c, B_GRAD, i) == 0.0f);
	lg_test_case_free(&c);
	lg_spec_free(s);
}

/* An odd vocab (13), random rows: the loss is lse - x_y by a direct sum;
 * each row's gradient sums to 0 (softmax sums to 1) and its label's
 * gradient is (p_y - 1) g. */
static void test_odd_vocab(void **state)
{
	(void)state;
	lg_spec *s = parse("forward", "fp32", "\"vocab\": 13");
	struct lg_ref_case c;
	case_init(&c, s, 9, 0, 1);
	lg_ref_family_get(s->op)->fill(s, &c, 11);
	lg_ref_family_get(s->op)->run(s, &c);
	const float *x = c.buf[F_LOGITS].host;
	const int64_t *y = c.buf[F_LABELS].host;
	int live = 0;
	for (size_t r = 0; r < 9; r++) {
		if (y[r] == -100) {
			assert_true(f32_at(&c, F_LOSS, r) == 0.0f);
			continue;
		}
		live++;
		double S = 0;
		for (int j = 0; j < 13; j++)
			S += exp((double)x[r * 13 + (size_t)j]);
		near(f32_at(&c, F_LOSS, r), log(S) - x[r * 13 + (size_t)y[r]], 1e-6);
	}
	assert_true(live > 0);
	lg_test_case_free(&c);
	lg_spec_free(s);

	s = parse("backward", "fp32", "\"vocab\": 13");
	case_init(&c, s, 9, 0, 1);
	lg_ref_family_get(s->op)->fill(s, &c, 12);
	lg_ref_family_get(s->op)->run(s, &c);
	y = c.buf[B_LABELS].host;
	x = c.buf[B_LOGITS].host;
	for (size_t r = 0; r < 9; r++) {
		double sum = 0, g = f32_at(&c, B_DLOSS, r);
		for (size_t j = 0; j < 13; j++)
			sum += f32_at(&c, B_GRAD, r * 13 + j);
		if (y[r] == -100)
			continue;
		assert_true(fabs(sum) <= 1e-5 * fabs(g) + 1e-6);
		double p = exp(x[r * 13 + (size_t)y[r]] - f32_at(&c, B_MAX, r)) / f32_at(&c, B_SUM, r);
		near(f32_at(&c, B_GRAD, r * 13 + (size_t)y[r]), (p - 1.0) * g, 1e-5);
	}
	lg_test_case_free(&c);
	lg_spec_free(s);
}

/* Label smoothing e on logits 0, 1, 2 (label 0), exactly torch's: loss =
 * (1 - e)(lse - x_0) + e (lse - mean x); gradient p - (1 - e) onehot - e /
 * 3. e = 0.1, and e = 1 (torch's upper end: the uniform target). */
static void test_label_smoothing(void **state)
{
	(void)state;
	static const char *const es[] = {"0.1", "1"};
	for (int i = 0; i < 2; i++) {
		char keys[96];
		snprintf(keys, sizeof keys, "\"vocab\": 3, \"label_smoothing\": %s, \"fused\": true", es[i]);
		lg_spec *s = parse("forward", "fp32", keys);
		double e = atof(es[i]);
		struct lg_ref_case c;
		case_init(&c, s, 1, 0, 1);
		for (int j = 0; j < 3; j++)
			set_f32(&c, F_LOGITS, (size_t)j, (float)j);
		set_label(&c, F_LABELS, 0, 0);
		set_f32(&c, F_G, 0, 1.0f);
		lg_ref_family_get(s->op)->run(s, &c);
		double lse = log(1.0 + exp(1.0) + exp(2.0));
		near(f32_at(&c, F_LOSS, 0), (1.0 - e) * lse + e * (lse - 1.0), 1e-7);
		for (int j = 0; j < 3; j++)
			near(f32_at(&c, F_GRAD, (size_t)j), exp(j - lse) - (j == 0 ? 1.0 - e : 0.0) - e / 3.0, 1e-6);
		lg_test_case_free(&c);
		lg_spec_free(s);
	}
}

/* Rows of 40 columns cut into shards of 16, 16 and 8: each shard's
 * statistics (part shard, at its vocab_start), gathered [3, M, 6] and
 * merged, give the full forward's loss, S and m; each shard's backward is
 * that slice of the full backward. With and without label smoothing. */
static void test_shards_merge(void **state)
{
	(void)state;
	static const int64_t start[3] = {0, 16, 32}, width[3] = {16, 16, 8};
	for (int ls = 0; ls < 2; ls++) {
		const char *smooth = ls ? ", \"label_smoothing\": 0.2" : "";
		char keys[160];
		const size_t M = 6;
		snprintf(keys, sizeof keys, "\"vocab\": 40%s", smooth);
		lg_spec *full = parse("forward", "fp32", keys);
		struct lg_ref_case f;
		case_init(&f, full, (int64_t)M, 0, 1);
		lg_ref_family_get(full->op)->fill(full, &f, 21 + (uint64_t)ls);
		lg_ref_family_get(full->op)->run(full, &f);
		float *gathered = calloc(3 * M * 6, sizeof *gathered);
		assert_non_null(gathered);
		for (int k = 0; k < 3; k++) {
			snprintf(keys, sizeof keys, "\"vocab\": %lld, \"part\": \"shard\", \"classes\": 40%s",
				 (long long)width[k], smooth);
			lg_spec *sh = parse("forward", "fp32", keys);
			struct lg_ref_case c;
			case_init(&c, sh, (int64_t)M, start[k], 1);
			assert_null(c.buf[F_LOSS].host);
			for (size_t r = 0; r < M; r++) {
				memcpy((float *)c.buf[F_LOGITS].host + r * (size_t)width[k],
				       (float *)f.buf[F_LOGITS].host + r * 40 + start[k], (size_t)width[k] * 4);
				set_label(&c, F_LABELS, r, ((int64_t *)f.buf[F_LABELS].host)[r]);
			}
			lg_ref_family_get(sh->op)->run(sh, &c);
			memcpy(gathered + (size_t)k * M * 6, c.buf[F_STATS].host, M * 6 * 4);
			lg_test_case_free(&c);
			lg_spec_free(sh);
		}
		snprintf(keys, sizeof keys, "\"vocab\": 40, \"part\": \"merge\"%s", smooth);
		lg_spec *mg = parse("forward", "bf16", keys);
		struct lg_ref_case c;
		case_init(&c, mg, (int64_t)M, 0, 3);
		assert_null(c.buf[F_LOGITS].host);
		assert_int_equal(c.buf[F_STATS_IN].count, 3 * M * 6);
		memcpy(c.buf[F_STATS_IN].host, gathered, 3 * M * 6 * 4);
		memcpy(c.buf[F_LABELS].host, f.buf[F_LABELS].host, M * 8);
		lg_ref_family_get(mg->op)->run(mg, &c);
		for (size_t r = 0; r < M; r++) {
			near(f32_at(&c, F_LOSS, r), f32_at(&f, F_LOSS, r), 1e-6);
			near(f32_at(&c, F_SUM, r), f32_at(&f, F_SUM, r), 1e-6);
			assert_true(f32_at(&c, F_MAX, r) == f32_at(&f, F_MAX, r));
		}
		/* the backward: full rows, then each shard's columns */
		snprintf(keys, sizeof keys, "\"vocab\": 40%s", smooth);
		lg_spec *fb = parse("backward", "fp32", keys);
		struct lg_ref_case b;
		case_init(&b, fb, (int64_t)M, 0, 1);
		memcpy(b.buf[B_LOGITS].host, f.buf[F_LOGITS].host, M * 40 * 4);
		memcpy(b.buf[B_LABELS].host, f.buf[F_LABELS].host, M * 8);
		memcpy(b.buf[B_SUM].host, c.buf[F_SUM].host, M * 4);
		memcpy(b.buf[B_MAX].host, c.buf[F_MAX].host, M * 4);
		for (size_t r = 0; r < M; r++)
			set_f32(&b, B_DLOSS, r, 0.5f + (float)r);
		lg_ref_family_get(fb->op)->run(fb, &b);
		for (int k = 0; k < 3; k++) {
			snprintf(keys, sizeof keys, "\"vocab\": %lld, \"part\": \"shard\", \"classes\": 40%s",
				 (long long)width[k], smooth);
			lg_spec *sb = parse("backward", "fp32", keys);
			struct lg_ref_case d;
			case_init(&d, sb, (int64_t)M, start[k], 1);
			for (size_t r = 0; r < M; r++)
				memcpy((float *)d.buf[B_LOGITS].host + r * (size_t)width[k],
				       (float *)f.buf[F_LOGITS].host + r * 40 + start[k], (size_t)width[k] * 4);
			memcpy(d.buf[B_LABELS].host, f.buf[F_LABELS].host, M * 8);
			memcpy(d.buf[B_SUM].host, b.buf[B_SUM].host, M * 4);
			memcpy(d.buf[B_MAX].host, b.buf[B_MAX].host, M * 4);
			memcpy(d.buf[B_DLOSS].host, b.buf[B_DLOSS].host, M * 4);
			lg_ref_family_get(sb->op)->run(sb, &d);
			for (size_t r = 0; r < M; r++)
				for (size_t j = 0; j < (size_t)width[k]; j++)
					assert_true(f32_at(&d, B_GRAD, r * (size_t)width[k] + j) ==
						    f32_at(&b, B_GRAD, r * 40 + (size_t)start[k] + j));
			lg_test_case_free(&d);
			lg_spec_free(sb);
		}
		lg_test_case_free(&b);
		lg_spec_free(fb);
		lg_test_case_free(&c);
		lg_spec_free(mg);
		free(gathered);
		lg_test_case_free(&f);
		lg_spec_free(full);
	}
}

/* The fused forward's gradient is the backward's with g[0] on every row. */
static void test_fused_is_backward(void **state)
{
	(void)state;
	lg_spec *s = parse("forward", "bf16", "\"vocab\": 29, \"fused\": true, \"label_smoothing\": 0.05");
	lg_spec *bw = parse("backward", "bf16", "\"vocab\": 29, \"label_smoothing\": 0.05");
	struct lg_ref_case c, b;
	case_init(&c, s, 7, 0, 1);
	lg_ref_family_get(s->op)->fill(s, &c, 31);
	lg_ref_family_get(s->op)->run(s, &c);
	case_init(&b, bw, 7, 0, 1);
	memcpy(b.buf[B_LOGITS].host, c.buf[F_LOGITS].host, 7 * 29 * 2);
	memcpy(b.buf[B_LABELS].host, c.buf[F_LABELS].host, 7 * 8);
	memcpy(b.buf[B_SUM].host, c.buf[F_SUM].host, 7 * 4);
	memcpy(b.buf[B_MAX].host, c.buf[F_MAX].host, 7 * 4);
	for (size_t r = 0; r < 7; r++)
		set_f32(&b, B_DLOSS, r, f32_at(&c, F_G, 0));
	lg_ref_family_get(bw->op)->run(bw, &b);
	size_t differ = 0;
	for (size_t i = 0; i < 7 * 29; i++) {
		float x = lg_ref_bf16_to_f32(((uint16_t *)c.buf[F_GRAD].host)[i]);
		float y = lg_ref_bf16_to_f32(((uint16_t *)b.buf[B_GRAD].host)[i]);
		/* S and m rounded to fp32 for the backward: at most one bf16 step */
		assert_true(fabsf(x - y) <= 1e-2f * fabsf(y) + 1e-9f);
		differ += x != y;
	}
	assert_true(differ < 7 * 29 / 10);
	lg_test_case_free(&c);
	lg_test_case_free(&b);
	lg_spec_free(s);
	lg_spec_free(bw);
}

/* Arguments: the labels' element type follows `index`; which arguments a
 * part uses; shapes. */
static void test_args(void **state)
{
	(void)state;
	const int64_t sizes[3] = {5, 0, 4};
	int64_t dims[8];
	int nd;
	lg_spec *s = parse("forward", "bf16", "\"vocab\": 100, \"part\": \"merge\", \"index\": \"int32\"");
	const struct lg_family *f = lg_family_get(s->op);
	assert_int_equal(lg_arg_elem(s, &f->sig[LG_PASS_FORWARD].args[F_LABELS]), LG_ELEM_I32);
	assert_int_equal(lg_arg_shape(s, F_STATS_IN, sizes, dims, &nd), LG_OK);
	assert_true(nd == 3 && dims[0] == 4 && dims[1] == 5 && dims[2] == 6);
	unsigned char used[LG_MAX_ARGS];
	memset(used, 1, sizeof used);
	f->uses(s, used);
	assert_true(!used[F_LOGITS] && used[F_STATS_IN] && !used[F_G] && used[F_LOSS] && !used[F_STATS] &&
		    !used[F_GRAD]);
	lg_spec_free(s);
	s = parse("forward", "fp32", "\"vocab\": 100, \"fused\": true, \"inplace\": true");
	assert_int_equal(lg_arg_elem(s, &f->sig[LG_PASS_FORWARD].args[F_LABELS]), LG_ELEM_I64);
	assert_int_equal(lg_arg_elem(s, &f->sig[LG_PASS_FORWARD].args[F_GRAD]), LG_ELEM_FP32);
	memset(used, 1, sizeof used);
	f->uses(s, used);
	assert_true(used[F_LOGITS] && !used[F_STATS_IN] && used[F_G] && !used[F_GRAD]);
	lg_spec_free(s);
	s = parse("forward", "bf16", "\"vocab\": 100, \"part\": \"shard\"");
	memset(used, 1, sizeof used);
	f->uses(s, used);
	assert_true(used[F_STATS] && !used[F_LOSS] && !used[F_SUM] && !used[F_MAX]);
	lg_spec_free(s);
}

/* A spec the family refuses, and the words its message must hold. */
static void refused(const char *pass, const char *keys, const char *want1, const char *want2)
{
	char *json = lg_test_spec_json("cross_entropy", pass, "bf16", keys);
	lg_test_refused(json, keys, want1, want2);
	free(json);
}

static void test_spec_checks(void **state)
{
	(void)state;
	refused("forward", "\"vocab\": 100, \"label_smoothing\": -0.5", "label_smoothing: found -0.5", "0 <= e <= 1");
	refused("forward", "\"vocab\": 100, \"label_smoothing\": 1.5", "label_smoothing: found 1.5", "0 <= e <= 1");
	refused("forward", "\"vocab\": 100, \"label_smoothing\": 7", "label_smoothing: found 7", "2");
	refused("backward", "\"vocab\": 100, \"part\": \"merge\"", "part: found \"merge\"", "\"shard\"");
	refused("backward", "\"vocab\": 100, \"fused\": true", "fused: found true", "part \"full\"");
	refused("forward", "\"vocab\": 100, \"fused\": true, \"part\": \"shard\"", "fused", "part \"full\"");
	refused("forward", "\"vocab\": 100, \"inplace\": true", "inplace: found true", "fused");
	refused("forward", "\"vocab\": 100, \"classes\": 200", "classes: found 200", "only a shard");
	refused("forward", "\"vocab\": 100, \"part\": \"shard\", \"classes\": 50", "classes: found 50",
		"at least vocab = 100");
	refused("forward", "\"vocab\": 100, \"index\": \"int16\"", "index", "int32");
	refused("forward", "\"vocab\": 0", "vocab", "0");
	refused("forward", "\"vocab\": 100, \"tile\": {\"threads\": 96}", "tile.threads", "96");
	refused("forward", "\"vocab\": 100, \"tile\": {\"unroll\": 3}", "tile.unroll", "3");
	refused("forward", "\"vocab\": 160, \"tile\": {\"cluster\": 2}", "tile.cluster: found 2",
		"without fused");
	refused("forward", "\"vocab\": 50257, \"fused\": true, \"tile\": {\"cluster\": 4}",
		"tile.cluster: found 4 with vocab 50257", "a multiple of 8");
	refused("forward", "\"vocab\": 157184, \"fused\": true, \"tile\": {\"cluster\": 3}", "tile.cluster",
		"3");
	char json[256];
	snprintf(json, sizeof json, "{\"op\": \"cross_entropy\", \"pass\": \"forward\", \"dtype\": \"fp32\", "
		 "\"vocab\": 157184, \"fused\": true, \"tile\": {\"cluster\": 2}}");
	lg_spec *f = NULL;
	assert_int_equal(lg_spec_parse(json, &f), LG_ERR_SPEC);
	assert_non_null(strstr(lg_last_error(), "fits 200 KiB"));
	lg_spec *s = parse("backward", "bf16", "\"vocab\": 100, \"part\": \"shard\", \"classes\": 400, \"inplace\": true");
	lg_spec_free(s);
}

/* Entry names tell apart every key that changes the code, and stay
 * identifiers (a negative ignore_index is "m<digits>"). */
static void test_names(void **state)
{
	(void)state;
	lg_spec *s = parse("forward", "bf16", "\"vocab\": 50257, \"ignore_index\": -1, \"index\": \"int32\", "
					      "\"label_smoothing\": 0.1, \"fused\": true");
	assert_string_equal(lg_spec_entry(s), "lg_cross_entropy_fwd_bf16_v50257_i32_iim1_ls0p1_fused");
	lg_spec_free(s);
	s = parse("forward", "bf16", "\"vocab\": 50257, \"ignore_index\": 7");
	assert_string_equal(lg_spec_entry(s), "lg_cross_entropy_fwd_bf16_v50257_ii7");
	lg_spec_free(s);
	s = parse("backward", "bf16", "\"vocab\": 50257, \"label_smoothing\": 1");
	assert_string_equal(lg_spec_entry(s), "lg_cross_entropy_bwd_bf16_v50257_ls1");
	lg_spec_free(s);
}

static void geometry_at(const lg_spec *s, int64_t M, struct lg_launch_dim *d)
{
	const struct lg_family *f = lg_family_get(s->op);
	struct lg_target t;
	assert_true(lg_target_parse("sm_90a", &t));
	struct lg_plan p;
	memset(&p, 0, sizeof p);
	assert_int_equal(f->plan(s, &t, &p), LG_OK);
	const int64_t sz[3] = {M, 0, 2};
	f->geometry(&p, 0, sz, d);
}

/* One row a CTA (512 threads; fused 1024); the merge one row a thread. */
static void test_geometry(void **state)
{
	(void)state;
	struct lg_launch_dim d;
	lg_spec *s = parse("forward", "bf16", "\"vocab\": 157184");
	geometry_at(s, 8192, &d);
	assert_true(d.grid[0] == 8192 && d.block[0] == 512 && d.smem == 0);
	geometry_at(s, 0, &d);
	assert_true(d.grid[0] == 0);
	lg_spec_free(s);
	/* fused: a cluster of 4 CTAs of 512 threads a row (sm_90a), each a
	 * quarter of the row's 19648 pieces in shared memory */
	s = parse("forward", "bf16", "\"vocab\": 157184, \"fused\": true");
	geometry_at(s, 3, &d);
	assert_true(d.grid[0] == 12 && d.block[0] == 512 && d.smem == 4912 * 16);
	lg_spec_free(s);
	s = parse("forward", "fp32", "\"vocab\": 157184, \"fused\": true");
	geometry_at(s, 1, &d);
	assert_true(d.grid[0] == 8 && d.smem == 4912 * 16); /* 8 CTAs: 39296 pieces */
	lg_spec_free(s);
	/* an odd vocab, or cluster 1: one CTA of 1024 threads a row, from L2 */
	s = parse("forward", "bf16", "\"vocab\": 50257, \"fused\": true");
	geometry_at(s, 1, &d);
	assert_true(d.grid[0] == 1 && d.block[0] == 1024 && d.smem == 0);
	lg_spec_free(s);
	s = parse("forward", "bf16", "\"vocab\": 157184, \"fused\": true, \"tile\": {\"cluster\": 1}");
	geometry_at(s, 5, &d);
	assert_true(d.grid[0] == 5 && d.block[0] == 1024 && d.smem == 0);
	lg_spec_free(s);
	/* sm_80 has no clusters: the default is 1, a cluster is refused */
	s = parse("forward", "bf16", "\"vocab\": 157184, \"fused\": true");
	struct lg_target t80;
	struct lg_plan p80;
	assert_true(lg_target_parse("sm_80", &t80));
	memset(&p80, 0, sizeof p80);
	assert_int_equal(lg_family_get(s->op)->plan(s, &t80, &p80), LG_OK);
	assert_int_equal(p80.tile[lg_family_key(lg_family_get(s->op), "tile.cluster")], 1);
	lg_spec_free(s);
	s = parse("forward", "bf16", "\"vocab\": 157184, \"fused\": true, \"tile\": {\"cluster\": 2}");
	memset(&p80, 0, sizeof p80);
	assert_int_equal(lg_family_get(s->op)->plan(s, &t80, &p80), LG_ERR_SPEC);
	assert_non_null(strstr(lg_last_error(), "clusters need sm_90"));
	lg_spec_free(s);
	s = parse("forward", "bf16", "\"vocab\": 157184, \"part\": \"merge\"");
	geometry_at(s, 1000, &d);
	assert_true(d.grid[0] == 4 && d.block[0] == 256);
	lg_spec_free(s);
	s = parse("backward", "fp32", "\"vocab\": 7, \"tile\": {\"threads\": 128}");
	geometry_at(s, 3, &d);
	assert_true(d.grid[0] == 3 && d.block[0] == 128);
	lg_spec_free(s);
}

/* Every tuning candidate validates, plans and generates. */
static void test_candidates(void **state)
{
	(void)state;
	static const char *const specs[][3] = {
		{"forward", "bf16", "\"vocab\": 157184"},
		{"backward", "fp32", "\"vocab\": 50257, \"inplace\": true"},
		{"forward", "bf16", "\"vocab\": 100003, \"fused\": true"},
		{"forward", "bf16", "\"vocab\": 157184, \"part\": \"merge\""},
		{"forward", "bf16", "\"vocab\": 157184, \"fused\": true"},
	};
	/* the fused forward at an aligned vocab: 6 tiles of one CTA a row, and
	 * clusters of 2, 4 and 8 with 256, 512 or 1024 threads */
	static const int want[] = {6, 6, 6, 4, 15};
	for (int i = 0; i < 5; i++) {
		lg_spec *s = parse(specs[i][0], specs[i][1], specs[i][2]);
		const struct lg_family *f = lg_family_get(s->op);
		struct lg_target t;
		assert_true(lg_target_parse("sm_90a", &t));
		struct lg_tile_choice c[LG_MAX_CANDIDATES];
		int n = f->candidates(s, &t, c, LG_MAX_CANDIDATES);
		assert_int_equal(n, want[i]);
		for (int j = 0; j < n; j++) {
			struct lg_spec v;
			assert_int_equal(lg_spec_with_tile(s, &c[j], &v), LG_OK);
			char *src = NULL;
			struct lg_plan pl;
			if (lg_generate_for(&v, &t, &pl, &src, NULL) != LG_OK)
				fail_msg("%s: %s", v.entry, lg_last_error());
			assert_non_null(strstr(src, v.entry));
			free(src);
		}
		lg_spec_free(s);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_row),
		cmocka_unit_test(test_all_ignored),
		cmocka_unit_test(test_odd_vocab),
		cmocka_unit_test(test_label_smoothing),
		cmocka_unit_test(test_shards_merge),
		cmocka_unit_test(test_fused_is_backward),
		cmocka_unit_test(test_args),
		cmocka_unit_test(test_spec_checks),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_geometry),
		cmocka_unit_test(test_candidates),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
