/*
 * test_group_rmsnorm_gate_ref.c - family group_rmsnorm_gate (docs/kernels.md
 * K8) without a GPU: its reference (gen/ref/group_rmsnorm_gate_ref.c) on tiny
 * cases computed by hand (the forward's groups, the gate's [seq, batch,
 * dim] and [batch, seq, dim] layouts, the backward's dx, dgate and dw with
 * a per-dim and a shared weight), the declared shapes, the spec checks and
 * their messages, the launch geometry, the workspace and the tuning
 * candidates (each validates, plans and generates).
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

static lg_spec *parse(const char *pass, const char *keys)
{
	return lg_test_spec("group_rmsnorm_gate", pass, "bf16", keys);
}

/* The reference case of s at B x L, every buffer allocated (zeros). */
static void case_init(struct lg_ref_case *c, const lg_spec *s, int64_t B, int64_t L)
{
	const int64_t sizes[2] = {B, L};
	assert_int_equal(lg_ref_case_init(c, s, sizes, NULL, 0), LG_OK);
	for (int i = 0; i < c->n; i++) {
		c->buf[i].host = calloc(c->buf[i].count + 1, c->buf[i].elem);
		assert_non_null(c->buf[i].host);
	}
}

static void set_bf16(struct lg_ref_case *c, int arg, float v)
{
	uint16_t *p = c->buf[arg].host;
	for (size_t i = 0; i < c->buf[arg].count; i++)
		p[i] = lg_ref_f32_to_bf16(v);
}

static float get_bf16(const struct lg_ref_case *c, int arg, size_t i)
{
	return lg_ref_bf16_to_f32(((const uint16_t *)c->buf[arg].host)[i]);
}

enum { F_X, F_GATE, F_W, F_Y };
enum { B_DY, B_X, B_GATE, B_W, B_DX, B_DGATE, B_DW };

/* dim 32, 4 groups of 8, one token: groups 0 and 2 all 2 (r = 1/2), gate
 * 0 (sigmoid 1/2), w 1: y = 2 * 1/2 * 1 * 1/2 = 1/2; groups 1 and 3 all -1
 * (r = 1), gate 20 (sigmoid 1 - 2e-9), w 3: y = -3. Each group has its own r. */
static void test_forward_groups(void **state)
{
	(void)state;
	lg_spec *s = parse("forward", "\"dim\": 32, \"groups\": 4");
	struct lg_ref_case c;
	case_init(&c, s, 1, 1);
	uint16_t *x = c.buf[F_X].host, *g = c.buf[F_GATE].host, *w = c.buf[F_W].host;
	assert_int_equal(c.buf[F_W].count, 32);
	for (int j = 0; j < 32; j++) {
		bool even = (j / 8) % 2 == 0;
		x[j] = lg_ref_f32_to_bf16(even ? 2.0f : -1.0f);
		g[j] = lg_ref_f32_to_bf16(even ? 0.0f : 20.0f);
		w[j] = lg_ref_f32_to_bf16(even ? 1.0f : 3.0f);
	}
	lg_ref_family_get(LG_OP_GROUP_RMSNORM_GATE)->run(s, &c);
	for (int j = 0; j < 32; j++)
		assert_true(get_bf16(&c, F_Y, (size_t)j) == ((j / 8) % 2 == 0 ? 0.5f : -3.0f));
	lg_test_case_free(&c);
	lg_spec_free(s);
}

/* The shared weight [d]: all 4 groups use w[j % 8]; w = j + 1, x 1, gate
 * 20: y[j] = j % 8 + 1. */
static void test_forward_shared_weight(void **state)
{
	(void)state;
	lg_spec *s = parse("forward", "\"dim\": 32, \"groups\": 4, \"shared_weight\": true");
	struct lg_ref_case c;
	case_init(&c, s, 1, 1);
	assert_int_equal(c.buf[F_W].count, 8);
	set_bf16(&c, F_X, 1.0f);
	set_bf16(&c, F_GATE, 20.0f);
	for (int j = 0; j < 8; j++)
		((uint16_t *)c.buf[F_W].host)[j] = lg_ref_f32_to_bf16((float)(j + 1));
	lg_ref_family_get(LG_OP_GROUP_RMSNORM_GATE)->run(s, &c);
	for (int j = 0; j < 32; j++)
		assert_true(get_bf16(&c, F_Y, (size_t)j) == (float)(j % 8 + 1));
	lg_test_case_free(&c);
	lg_spec_free(s);
}

/* B = 2, L = 3: x of batch 0 is +1, of batch 1 is -1, gate 0, w 1, so y of
 * token (b, l) is +-1/2 by b. Transposed, y row l * B + b (b = row % 2);
 * untransposed, row b * L + l (b = row / 3). */
static void check_layout(bool transpose)
{
	lg_spec *s = parse("forward", transpose ? "\"dim\": 32, \"groups\": 4" :
						"\"dim\": 32, \"groups\": 4, \"transpose\": false");
	struct lg_ref_case c;
	case_init(&c, s, 2, 3);
	uint16_t *x = c.buf[F_X].host;
	for (int i = 0; i < 6 * 32; i++)
		x[i] = lg_ref_f32_to_bf16(i < 3 * 32 ? 1.0f : -1.0f); /* x [2, 3, 32]: batch major */
	set_bf16(&c, F_W, 1.0f);
	lg_ref_family_get(LG_OP_GROUP_RMSNORM_GATE)->run(s, &c);
	for (int row = 0; row < 6; row++) {
		int b = transpose ? row % 2 : row / 3;
		for (int j = 0; j < 32; j++)
			assert_true(get_bf16(&c, F_Y, (size_t)(row * 32 + j)) == (b == 0 ? 0.5f : -0.5f));
	}
	lg_test_case_free(&c);
	lg_spec_free(s);
}

static void test_forward_layouts(void **state)
{
	(void)state;
	check_layout(true);
	check_layout(false);
}

/* 4 groups of 8, each x = +1, -1, +1, ... (r = 1), gate 0 (s = 1/2), w 1,
 * dy = 1, 0, 0, ...: u = dy w s = (1/2, 0, ...), dot = sum x u = 1/2,
 * dx = r u - r^3 x dot / 8 = u - x / 16 = (7/16, 1/16, -1/16, 1/16, ...),
 * dgate = x r w dy s (1 - s) = (1/4, 0, ...), dw = x r dy s summed over
 * the 3 tokens = (3/2, 0, ...) in each group. */
static void test_backward_by_hand(void **state)
{
	(void)state;
	lg_spec *s = parse("backward", "\"dim\": 32, \"groups\": 4");
	struct lg_ref_case c;
	case_init(&c, s, 1, 3);
	for (int i = 0; i < 3 * 32; i++) {
		((uint16_t *)c.buf[B_X].host)[i] = lg_ref_f32_to_bf16(i % 2 ? -1.0f : 1.0f);
		((uint16_t *)c.buf[B_DY].host)[i] = lg_ref_f32_to_bf16(i % 8 == 0 ? 1.0f : 0.0f);
	}
	set_bf16(&c, B_W, 1.0f);
	lg_ref_family_get(LG_OP_GROUP_RMSNORM_GATE)->run(s, &c);
	for (int i = 0; i < 3 * 32; i++) {
		int j = i % 8;
		float dx = j == 0 ? 7.0f / 16 : j % 2 ? 1.0f / 16 : -1.0f / 16;
		assert_true(get_bf16(&c, B_DX, (size_t)i) == dx);
		assert_true(get_bf16(&c, B_DGATE, (size_t)i) == (j == 0 ? 0.25f : 0.0f));
	}
	const float *dw = c.buf[B_DW].host;
	for (int j = 0; j < 32; j++)
		assert_true(j % 8 == 0 ? fabsf(dw[j] - 1.5f) < 1e-5f : dw[j] == 0.0f);
	lg_test_case_free(&c);
	lg_spec_free(s);
}

/* The shared weight's dw adds over the groups too: dim 32, 4 groups, x 1,
 * gate 0, dy 1, 2 tokens: dw[j] = 2 tokens x 4 groups x 1/2 = 4. dx of a
 * constant group is 0 (r u - r^3 x dot / d = 1/2 - 1/2). */
static void test_backward_shared_weight(void **state)
{
	(void)state;
	lg_spec *s = parse("backward", "\"dim\": 32, \"groups\": 4, \"shared_weight\": true");
	struct lg_ref_case c;
	case_init(&c, s, 2, 1);
	assert_int_equal(c.buf[B_DW].count, 8);
	set_bf16(&c, B_X, 1.0f);
	set_bf16(&c, B_DY, 1.0f);
	set_bf16(&c, B_W, 1.0f);
	lg_ref_family_get(LG_OP_GROUP_RMSNORM_GATE)->run(s, &c);
	for (int j = 0; j < 8; j++)
		assert_true(fabsf(((const float *)c.buf[B_DW].host)[j] - 4.0f) < 1e-5f);
	for (int i = 0; i < 64; i++)
		assert_true(fabsf(get_bf16(&c, B_DX, (size_t)i)) < 1e-5f);
	lg_test_case_free(&c);
	lg_spec_free(s);
}

/* Declared shapes: gate [seq, batch, dim] or [batch, seq, dim]; w [dim] or [d]. */
static void test_shapes(void **state)
{
	(void)state;
	const int64_t sizes[2] = {2, 5};
	int64_t dims[8];
	int nd;
	lg_spec *s = parse("backward", "\"dim\": 64, \"groups\": 4");
	assert_int_equal(lg_arg_shape(s, B_GATE, sizes, dims, &nd), LG_OK);
	assert_int_equal(nd, 3);
	assert_true(dims[0] == 5 && dims[1] == 2 && dims[2] == 64);
	assert_int_equal(lg_arg_shape(s, B_X, sizes, dims, &nd), LG_OK);
	assert_true(dims[0] == 2 && dims[1] == 5 && dims[2] == 64);
	assert_int_equal(lg_arg_shape(s, B_DW, sizes, dims, &nd), LG_OK);
	assert_true(nd == 1 && dims[0] == 64);
	lg_spec_free(s);
	s = parse("backward", "\"dim\": 64, \"groups\": 4, \"transpose\": false, \"shared_weight\": true");
	assert_int_equal(lg_arg_shape(s, B_DGATE, sizes, dims, &nd), LG_OK);
	assert_true(dims[0] == 2 && dims[1] == 5 && dims[2] == 64);
	assert_int_equal(lg_arg_shape(s, B_W, sizes, dims, &nd), LG_OK);
	assert_true(nd == 1 && dims[0] == 16);
	lg_spec_free(s);
}

/* A spec the family refuses, and the words its message must hold. */
static void refused(const char *keys, const char *want1, const char *want2)
{
	char *json = lg_test_spec_json("group_rmsnorm_gate", "forward", "bf16", keys);
	lg_test_refused(json, keys, want1, want2);
	free(json);
}

static void test_spec_checks(void **state)
{
	(void)state;
	refused("\"dim\": 1000, \"groups\": 3", "dim: found 1000", "a multiple of groups = 3");
	refused("\"dim\": 1000, \"groups\": 4", "d = dim / groups = 250", "a multiple of 8");
	refused("\"dim\": 120, \"groups\": 3, \"tile\": {\"tokens\": 1}", "tile.tokens: found 1", "multiple of 32");
	refused("\"dim\": 2048, \"groups\": 4, \"tile\": {\"tokens\": 5}", "tile.tokens", "5");
	refused("\"dim\": 2048, \"groups\": 0", "groups", "0");
	/* backward: a token's lanes must fit a CTA (16 groups of 2048: 16 x 64 lanes, no prefetch) */
	lg_spec *s = parse("backward", "\"dim\": 32768, \"groups\": 16");
	lg_spec_free(s);
	char json[256];
	snprintf(json, sizeof json, "{\"op\": \"group_rmsnorm_gate\", \"pass\": \"backward\", \"dtype\": \"bf16\", "
		 "\"dim\": 32768, \"groups\": 16, \"tile\": {\"prefetch\": 1}}");
	assert_int_equal(lg_spec_parse(json, &s), LG_ERR_SPEC);
	assert_non_null(strstr(lg_last_error(), "at most 1024"));
	refused("\"dim\": 2044, \"groups\": 4", "dim", "multiple of 8");
	s = parse("forward", "\"dim\": 1000, \"groups\": 5");
	lg_spec_free(s);
}

static void geometry_at(const lg_spec *s, int e, int64_t B, int64_t L, struct lg_launch_dim *d)
{
	const struct lg_family *f = lg_family_get(s->op);
	struct lg_target t;
	assert_true(lg_target_parse("sm_90a", &t));
	struct lg_plan p;
	memset(&p, 0, sizeof p);
	assert_int_equal(f->plan(s, &t, &p), LG_OK);
	const int64_t sz[2] = {B, L};
	f->geometry(&p, e, sz, d);
}

/* The target shape: forward (prefetch, 2 pieces a lane, 32 lanes a group)
 * 2 tokens (256 threads) a CTA, a persistent grid of 396 CTAs (3 an SM),
 * (the device's resident CTAs once loaded), without prefetch one CTA per
 * 2 tokens; backward (prefetch: 2 pieces a lane, 32 lanes a group) a
 * persistent grid of 528 CTAs (4 an SM) of 1 token (128 threads), 2048
 * fp32 of shared memory, a 528-row workspace,
 * and the dw kernel 32 weights a CTA, also with no tokens; without
 * prefetch 2 tokens a CTA, 2 CTAs an SM. */
static void test_geometry(void **state)
{
	(void)state;
	struct lg_launch_dim d;
	lg_spec *s = parse("forward", "\"dim\": 2048, \"groups\": 4");
	geometry_at(s, 0, 2, 4096, &d);
	assert_true(d.grid[0] == 396 && d.block[0] == 256 && d.smem == 0);
	geometry_at(s, 0, 3, 7, &d);
	assert_true(d.grid[0] == 11);
	geometry_at(s, 0, 0, 7, &d);
	assert_true(d.grid[0] == 0);
	{
		const struct lg_family *f = lg_family_get(s->op);
		struct lg_target t;
		assert_true(lg_target_parse("sm_90a", &t));
		struct lg_plan p;
		memset(&p, 0, sizeof p);
		assert_int_equal(f->plan(s, &t, &p), LG_OK);
		assert_true(p.persistent[0] && p.per_sm[0] == 0);
		p.resident[0] = 500; /* what the context's occupancy query found */
		const int64_t sz[2] = {2, 4096};
		f->geometry(&p, 0, sz, &d);
		assert_true(d.grid[0] == 500);
	}
	lg_spec_free(s);
	/* a forward without prefetch: one CTA of 256 threads per 2 tokens */
	s = parse("forward", "\"dim\": 2048, \"groups\": 4, \"tile\": {\"prefetch\": 0}");
	geometry_at(s, 0, 2, 4096, &d);
	assert_true(d.grid[0] == 4096 && d.block[0] == 256 && d.smem == 0);
	geometry_at(s, 0, 3, 7, &d);
	assert_true(d.grid[0] == 11);
	lg_spec_free(s);
	s = parse("backward", "\"dim\": 2048, \"groups\": 4");
	geometry_at(s, 0, 2, 4096, &d);
	assert_true(d.grid[0] == 528 && d.block[0] == 128 && d.smem == 2048 * 4);
	geometry_at(s, 0, 1, 1, &d);
	assert_true(d.grid[0] == 1);
	geometry_at(s, 1, 0, 0, &d);
	assert_true(d.grid[0] == 64 && d.block[0] == 256); /* 32 weights a CTA */
	const struct lg_family *f = lg_family_get(s->op);
	struct lg_target t;
	assert_true(lg_target_parse("sm_90a", &t));
	struct lg_plan p;
	memset(&p, 0, sizeof p);
	assert_int_equal(f->plan(s, &t, &p), LG_OK);
	assert_int_equal(p.nentries, 2);
	assert_int_equal(f->workspace(&p), (size_t)528 * 2048 * 4);
	lg_spec_free(s);
	s = parse("backward", "\"dim\": 2048, \"groups\": 4, \"tile\": {\"prefetch\": 0}");
	geometry_at(s, 0, 2, 4096, &d);
	assert_true(d.grid[0] == 264 && d.block[0] == 128 && d.smem == 2 * 2048 * 4);
	lg_spec_free(s);
	/* 8 tokens a CTA, 1024 threads: one CTA an SM, 132 of them */
	s = parse("backward", "\"dim\": 2048, \"groups\": 4, \"tile\": {\"tokens\": 8}");
	geometry_at(s, 0, 2, 4096, &d);
	assert_true(d.grid[0] == 132 && d.block[0] == 1024 && d.smem == 8 * 2048 * 4);
	memset(&p, 0, sizeof p);
	assert_int_equal(f->plan(s, &t, &p), LG_OK);
	assert_int_equal(f->workspace(&p), (size_t)132 * 2048 * 4);
	lg_spec_free(s);
	/* the harness's sizes: batch 2, seq the token count */
	int64_t sz[LG_MAX_SIZES];
	lg_sizes_at(f, LG_PASS_FORWARD, 4096, sz);
	assert_true(sz[0] == 2 && sz[1] == 4096);
}

/* Every tuning candidate validates, plans and generates; an odd group
 * count keeps only whole warps. */
static void test_candidates(void **state)
{
	(void)state;
	static const char *const keys[] = {"\"dim\": 2048, \"groups\": 4", "\"dim\": 120, \"groups\": 3"};
	static const char *const passes[] = {"forward", "backward"};
	for (int i = 0; i < 2; i++)
		for (int p = 0; p < 2; p++) {
			lg_spec *s = parse(passes[p], keys[i]);
			const struct lg_family *f = lg_family_get(s->op);
			struct lg_target t;
			assert_true(lg_target_parse("sm_90a", &t));
			struct lg_tile_choice c[LG_MAX_CANDIDATES];
			int n = f->candidates(s, &t, c, LG_MAX_CANDIDATES);
			/* 3 groups of 40: 48 lanes a token, not 1 token a CTA */
			assert_int_equal(n, p == 0 ? (i == 0 ? 8 : 6) : (i == 0 ? 6 : 4));
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
		cmocka_unit_test(test_forward_groups),
		cmocka_unit_test(test_forward_shared_weight),
		cmocka_unit_test(test_forward_layouts),
		cmocka_unit_test(test_backward_by_hand),
		cmocka_unit_test(test_backward_shared_weight),
		cmocka_unit_test(test_shapes),
		cmocka_unit_test(test_spec_checks),
		cmocka_unit_test(test_geometry),
		cmocka_unit_test(test_candidates),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
