/*
 * test_rmsnorm_router_ref.c - family rmsnorm_router (docs/kernels.md K3b)
 * without a GPU: its reference (gen/ref/rmsnorm_router_ref.c) by hand and as
 * the composition it fuses (rmsnorm_quant's rms and rowwise copy,
 * router_gemm's logits of the written y), a partial last quant block, the
 * error of each `precision` against the float64 logits of fp32 y
 * (measured and printed), the declared shapes, the spec checks and their
 * messages, the launch geometry, the generated source's shape and the
 * tuning candidates.
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
#include "rmsnorm_router_ref.h"
#include "refcase.h"

enum { X, W, RW, Y, RMS, LOGITS, Q, S, QT, ST };

static lg_spec *parse_op(const char *op, const char *keys)
{
	char json[512];
	snprintf(json, sizeof json, "{\"op\": \"%s\", \"pass\": \"forward\", \"dtype\": \"bf16\", %s}", op, keys);
	lg_spec *s = NULL;
	if (lg_spec_parse(json, &s) != LG_OK)
		fail_msg("%s: %s", json, lg_last_error());
	return s;
}

static lg_spec *parse(const char *keys) { return parse_op("rmsnorm_router", keys); }

/* The reference case of s at M tokens, every buffer allocated (zeros). */
static void case_init(struct lg_ref_case *c, const lg_spec *s, int64_t M)
{
	const int64_t sizes[1] = {M};
	assert_int_equal(lg_ref_case_init(c, s, sizes, NULL, 0), LG_OK);
	for (int i = 0; i < c->n; i++) {
		c->buf[i].host = calloc(c->buf[i].count + 1, c->buf[i].elem);
		assert_non_null(c->buf[i].host);
	}
}

static void set_bf16(struct lg_ref_case *c, int arg, const float *v)
{
	uint16_t *p = c->buf[arg].host;
	for (size_t i = 0; i < c->buf[arg].count; i++)
		p[i] = lg_ref_f32_to_bf16(v[i]);
}

static float bf16_at(const struct lg_ref_case *c, int arg, size_t i)
{
	return lg_ref_bf16_to_f32(((const uint16_t *)c->buf[arg].host)[i]);
}

/* x [2, 8]: a row of 2s (r = 1/2) and a row of 0s (y = 0); w = 3; route_w
 * [2, 8]: feature 0, and the sum of every feature. */
static void test_by_hand(void **state)
{
	(void)state;
	lg_spec *s = parse("\"hidden\": 8, \"experts\": 2, \"eps\": 1e-30, \"quant\": {\"output\": \"rowwise\"}");
	struct lg_ref_case c;
	case_init(&c, s, 2);
	float x[16] = {0}, w[8], rw[16] = {0};
	for (int k = 0; k < 8; k++)
		x[k] = 2.0f, w[k] = 3.0f, rw[8 + k] = 1.0f;
	rw[0] = 1.0f;
	set_bf16(&c, X, x);
	set_bf16(&c, W, w);
	set_bf16(&c, RW, rw);
	lg_ref_family_get(s->op)->run(s, &c);
	const float *rms = c.buf[RMS].host, *lg = c.buf[LOGITS].host, *sc = c.buf[S].host;
	assert_float_equal(rms[0], 0.5f, 0.0);
	for (int k = 0; k < 8; k++) {
		assert_float_equal(bf16_at(&c, Y, (size_t)k), 3.0f, 0.0);
		assert_float_equal(bf16_at(&c, Y, (size_t)(8 + k)), 0.0f, 0.0);
		/* amax 3: s = 2^ceil(log2(3 / 448)) = 2^-7, q = 384 */
		assert_float_equal(lg_ref_e4m3_to_f32(((const uint8_t *)c.buf[Q].host)[k]), 384.0f, 0.0);
	}
	assert_float_equal(sc[0], 1.0f / 128.0f, 0.0);
	assert_float_equal(sc[1], lg_ref_scale(0.0f, true), 0.0); /* the zero row: the floor */
	assert_float_equal(lg[0], 3.0f, 0.0);
	assert_float_equal(lg[1], 24.0f, 0.0);
	assert_float_equal(lg[2], 0.0f, 0.0);
	assert_float_equal(lg[3], 0.0f, 0.0);
	lg_test_case_free(&c);
	lg_spec_free(s);
}

/* A random case of spec s at M tokens (filled by the reference's fill). */
static void random_case(struct lg_ref_case *c, const lg_spec *s, int64_t M, uint64_t seed)
{
	case_init(c, s, M);
	lg_ref_family_get(s->op)->fill(s, c, seed);
	lg_ref_family_get(s->op)->run(s, c);
}

/* The fused pass is the composition it replaces: rmsnorm_quant's rms and
 * copies of y (both copies, hidden 256), router_gemm's logits of the y
 * written (precision bf16), bit for bit. */
static void test_is_the_composition(void **state)
{
	(void)state;
	const uint64_t seed = 0x3b3b;
	printf("seed %llu\n", (unsigned long long)seed);
	const int64_t M = 131;
	lg_spec *s = parse("\"hidden\": 256, \"experts\": 24, \"quant\": {\"output\": \"both\", \"round_scale\": false}");
	struct lg_ref_case c;
	random_case(&c, s, M, seed);

	lg_spec *k1 = parse_op("rmsnorm_quant", "\"hidden\": 256, \"quant\": {\"output\": \"both\", \"round_scale\": false}");
	struct lg_ref_case a;
	case_init(&a, k1, M);
	enum { KX, KW, KQ, KS, KRMS, KQT, KST };
	memcpy(a.buf[KX].host, c.buf[X].host, c.buf[X].count * 2);
	memcpy(a.buf[KW].host, c.buf[W].host, c.buf[W].count * 2);
	lg_ref_family_get(k1->op)->run(k1, &a);
	assert_memory_equal(a.buf[KRMS].host, c.buf[RMS].host, (size_t)M * 4);
	assert_memory_equal(a.buf[KQ].host, c.buf[Q].host, (size_t)M * 256);
	assert_memory_equal(a.buf[KS].host, c.buf[S].host, (size_t)M * 2 * 4);
	assert_memory_equal(a.buf[KQT].host, c.buf[QT].host, (size_t)M * 256);
	assert_memory_equal(a.buf[KST].host, c.buf[ST].host, (size_t)2 * 256 * 4);

	lg_spec *k3 = parse_op("router_gemm", "\"hidden\": 256, \"experts\": 24");
	struct lg_ref_case b;
	case_init(&b, k3, M);
	memcpy(b.buf[0].host, c.buf[Y].host, c.buf[Y].count * 2);
	memcpy(b.buf[1].host, c.buf[RW].host, c.buf[RW].count * 2);
	lg_ref_family_get(k3->op)->run(k3, &b);
	assert_memory_equal(b.buf[2].host, c.buf[LOGITS].host, (size_t)M * 24 * 4);
	lg_test_case_free(&a);
	lg_test_case_free(&b);
	lg_test_case_free(&c);
	lg_spec_free(k1);
	lg_spec_free(k3);
	lg_spec_free(s);
}

/* hidden 1000: the last 1x128 block has 104 features; its scale is of
 * their amax and q holds exactly hidden bytes a row. */
static void test_partial_block(void **state)
{
	(void)state;
	const uint64_t seed = 1000;
	printf("seed %llu\n", (unsigned long long)seed);
	const int64_t M = 9;
	for (int pow2 = 0; pow2 < 2; pow2++) {
		char keys[160];
		snprintf(keys, sizeof keys,
			 "\"hidden\": 1000, \"experts\": 3, \"quant\": {\"output\": \"rowwise\", \"round_scale\": %s}",
			 pow2 ? "true" : "false");
		lg_spec *s = parse(keys);
		struct lg_ref_case c;
		random_case(&c, s, M, seed);
		assert_int_equal(c.buf[Q].count, (size_t)M * 1000);
		assert_int_equal(c.buf[S].count, (size_t)M * 8);
		float *y = malloc(M * 1000 * sizeof *y);
		assert_non_null(y);
		lg_ref_rmsnorm_router_y(c.buf[X].host, c.buf[W].host, M, 1000, 1e-6, y, NULL);
		for (int64_t m = 0; m < M; m++) {
			float amax = 0.0f;
			for (int k = 896; k < 1000; k++)
				amax = fmaxf(amax, fabsf(y[m * 1000 + k]));
			const float sc = ((const float *)c.buf[S].host)[7 * M + m];
			assert_float_equal(sc, lg_ref_scale(amax, pow2), 0.0);
			for (int k = 896; k < 1000; k++)
				assert_int_equal(((const uint8_t *)c.buf[Q].host)[m * 1000 + k],
						 lg_ref_quant(y[m * 1000 + k], sc, pow2));
		}
		free(y);
		lg_test_case_free(&c);
		lg_spec_free(s);
	}
}

/* What each precision loses against the float64 logits of fp32 y (linghe:
 * tf32, about 2^-11 of each y), as the largest error over the rms of the
 * logits: bf16 y rounds each y by up to 2^-9, bf16x2 2^-17, bf16x3 keeps
 * it. Measured (hidden 2048, 256 experts, 64 tokens): printed. */
static void test_precision_errors(void **state)
{
	(void)state;
	const uint64_t seed = 2048;
	printf("seed %llu\n", (unsigned long long)seed);
	const size_t M = 64, K = 2048, N = 256;
	lg_spec *s = parse("\"hidden\": 2048, \"experts\": 256, \"quant\": {\"output\": \"rowwise\"}");
	struct lg_ref_case c;
	case_init(&c, s, (int64_t)M);
	lg_ref_family_get(s->op)->fill(s, &c, seed);
	float *y = malloc(M * K * sizeof *y);
	double *exact = malloc(M * N * sizeof *exact), *got = malloc(M * N * sizeof *got);
	assert_true(y && exact && got);
	lg_ref_rmsnorm_router_y(c.buf[X].host, c.buf[W].host, M, K, 1e-6, y, NULL);
	lg_ref_rmsnorm_router_logits(y, c.buf[RW].host, M, K, N, 0, exact);
	double rms = 0.0;
	for (size_t i = 0; i < M * N; i++)
		rms += exact[i] * exact[i];
	rms = sqrt(rms / (double)(M * N));
	const double bound[4] = {0.0, 1e-2, 1e-4, 1e-7};
	double last = INFINITY;
	for (int terms = 1; terms <= 3; terms++) {
		lg_ref_rmsnorm_router_logits(y, c.buf[RW].host, M, K, N, terms, got);
		double worst = 0.0;
		for (size_t i = 0; i < M * N; i++)
			worst = fmax(worst, fabs(got[i] - exact[i]));
		printf("precision %s: largest logit error %.3g of the logits' rms %.3g (%.3g)\n",
		       terms == 1 ? "bf16" : terms == 2 ? "bf16x2" : "bf16x3", worst, rms, worst / rms);
		assert_true(worst / rms < bound[terms]);
		assert_true(worst < last || worst == 0.0);
		last = worst;
	}
	free(y);
	free(exact);
	free(got);
	lg_test_case_free(&c);
	lg_spec_free(s);
}

static void test_shapes(void **state)
{
	(void)state;
	const int64_t sizes[1] = {5};
	int64_t dims[8];
	int nd;
	lg_spec *s = parse("\"hidden\": 1000, \"experts\": 3, \"quant\": {\"output\": \"rowwise\"}");
	assert_int_equal(lg_arg_shape(s, LOGITS, sizes, dims, &nd), LG_OK);
	assert_true(nd == 2 && dims[0] == 5 && dims[1] == 3);
	assert_int_equal(lg_arg_shape(s, S, sizes, dims, &nd), LG_OK);
	assert_true(nd == 2 && dims[0] == 8 && dims[1] == 5);
	assert_int_equal(lg_arg_shape(s, RW, sizes, dims, &nd), LG_OK);
	assert_true(nd == 2 && dims[0] == 3 && dims[1] == 1000);
	assert_int_equal(lg_arg_shape(s, RMS, sizes, dims, &nd), LG_OK);
	assert_true(nd == 1 && dims[0] == 5);
	lg_spec_free(s);
}

/* A spec the family refuses, and the words its message must hold. */
static void refused(const char *keys, const char *want1, const char *want2)
{
	char *json = lg_test_spec_json("rmsnorm_router", "forward", "bf16", keys);
	lg_test_refused(json, keys, want1, want2);
	free(json);
}

static void test_spec_checks(void **state)
{
	(void)state;
	refused("\"hidden\": 1001, \"experts\": 8, \"quant\": {}", "hidden", "multiple of 8");
	refused("\"hidden\": 1024, \"experts\": 0, \"quant\": {}", "experts", "0");
	refused("\"hidden\": 1024, \"quant\": {}", "experts", "");
	refused("\"hidden\": 1024, \"experts\": 8", "quant", "");
	refused("\"hidden\": 1024, \"experts\": 8, \"precision\": \"tf32\", \"quant\": {}", "precision", "bf16x3");
	refused("\"hidden\": 1024, \"experts\": 8, \"quant\": {\"output\": \"columnwise\"}", "quant.output",
		"rmsnorm_quant");
	refused("\"hidden\": 1000, \"experts\": 8, \"quant\": {\"output\": \"both\"}", "quant.output",
		"multiple of 128");
	refused("\"hidden\": 1024, \"experts\": 8, \"quant\": {}, \"tile\": {\"m\": 48}", "tile.m", "48");
	refused("\"hidden\": 1024, \"experts\": 8, \"quant\": {}, \"tile\": {\"n\": 48}", "tile.n", "48");
	refused("\"hidden\": 1024, \"experts\": 8, \"quant\": {}, \"tile\": {\"m\": 32, \"warps_m\": 4}", "tile",
		"multiple of 16");
	refused("\"hidden\": 1024, \"experts\": 8, \"quant\": {}, \"tile\": {\"n\": 32, \"warps_n\": 4}", "tile",
		"tile.n / tile.warps_n");
	refused("\"hidden\": 1024, \"experts\": 8, \"quant\": {}, \"tile\": {\"stages\": 5}", "stages", "5");
	/* odd sizes are fine */
	lg_spec_free(parse("\"hidden\": 1000, \"experts\": 1, \"quant\": {\"output\": \"rowwise\"}"));
	lg_spec_free(parse("\"hidden\": 8, \"experts\": 97, \"precision\": \"bf16x3\", \"quant\": {\"output\": \"rowwise\"}"));
}

/* The target shape: 128 CTAs of 64 tokens x 256 experts; on sm_90a 288
 * threads (two consumer warpgroups, a producer warp) in clusters of 2,
 * three A buffers of 16 KB and two route_w stages of 64 KB (with their
 * mbarriers) and the alignment slack; on sm_80 256 threads, two route_w stages of 64 KB and
 * two A stages of 16 KB; "both" adds the columnwise entry over 16 x 64
 * tiles; fp32 A (bf16x3) on sm_80 halves the experts a CTA to fit; bf16x3
 * on sm_90a keeps two A buffers; nothing launched at 0 tokens. */
static void test_geometry(void **state)
{
	(void)state;
	const struct lg_family *f = lg_family_get(LG_OP_RMSNORM_ROUTER);
	struct lg_launch_dim d;
	struct lg_plan p;
	lg_spec *s = parse("\"hidden\": 2048, \"experts\": 256, \"quant\": {\"output\": \"rowwise\"}");
	lg_test_plan(s, "sm_90a", &p, LG_OK);
	assert_int_equal(p.nentries, 1);
	int64_t M = 8192;
	f->geometry(&p, 0, &M, &d);
	assert_true(d.grid[0] == 128 && d.grid[1] == 1 && d.block[0] == 288);
	assert_int_equal(d.smem, 1024 + 3 * 16384 + 2 * (65536 + 16) + 64 * 4);
	/* clusters of 2 CTAs, each loading half of route_w's rows (multicast) */
	assert_true(p.ntmaps == 1 && p.tmap[0].box[0] == 64 && p.tmap[0].box[1] == 128 && p.tmap[0].swizzle == 128);
	assert_int_equal(p.cluster[0], 2);
	M = 1;
	f->geometry(&p, 0, &M, &d);
	assert_int_equal(d.grid[0], 2); /* whole clusters: the second tile past M */
	M = 0;
	f->geometry(&p, 0, &M, &d);
	assert_int_equal(d.grid[0], 0);
	lg_test_plan(s, "sm_80", &p, LG_OK);
	M = 8192;
	f->geometry(&p, 0, &M, &d);
	assert_true(d.grid[0] == 128 && d.grid[1] == 1 && d.block[0] == 256);
	assert_int_equal(d.smem, 2 * (16384 + 65536) + 64 * 4);
	assert_int_equal(p.ntmaps, 0);
	lg_spec_free(s);

	s = parse("\"hidden\": 2048, \"experts\": 256, \"precision\": \"bf16x3\", \"quant\": {\"output\": \"rowwise\"}");
	lg_test_plan(s, "sm_90a", &p, LG_OK);
	M = 8192;
	f->geometry(&p, 0, &M, &d);
	assert_int_equal(d.smem, 1024 + 2 * 3 * 16384 + 2 * (65536 + 16) + 64 * 4);
	lg_spec_free(s);

	s = parse("\"hidden\": 2048, \"experts\": 256, \"quant\": {\"output\": \"both\"}");
	lg_test_plan(s, "sm_90a", &p, LG_OK);
	assert_int_equal(p.nentries, 2);
	assert_non_null(strstr(p.entry[1], "_cols"));
	M = 8192;
	f->geometry(&p, 1, &M, &d);
	assert_true(d.grid[0] == 16 && d.grid[1] == 64 && d.block[0] == 512 && d.smem == 0);
	M = 0;
	f->geometry(&p, 1, &M, &d);
	assert_true(d.grid[0] == 0 || d.grid[1] == 0);
	lg_spec_free(s);

	s = parse("\"hidden\": 2048, \"experts\": 256, \"precision\": \"bf16x3\", \"quant\": {\"output\": \"rowwise\"}");
	lg_test_plan(s, "sm_80", &p, LG_OK);
	M = 8192;
	f->geometry(&p, 0, &M, &d);
	assert_int_equal(d.grid[0], 128 * 2);
	assert_true(d.smem <= 163 * 1024);
	lg_spec_free(s);

	s = parse("\"hidden\": 2048, \"experts\": 256, \"precision\": \"bf16x3\", \"quant\": {\"output\": \"rowwise\"}, "
		  "\"tile\": {\"n\": 256, \"stages\": 4}");
	lg_test_plan(s, "sm_90a", &p, LG_ERR_SPEC);
	assert_non_null(strstr(lg_last_error(), "shared memory"));
	lg_spec_free(s);

	/* 300 experts: two column tiles a row tile */
	s = parse("\"hidden\": 2048, \"experts\": 300, \"quant\": {\"output\": \"rowwise\"}");
	lg_test_plan(s, "sm_90a", &p, LG_OK);
	M = 127;
	f->geometry(&p, 0, &M, &d);
	assert_int_equal(d.grid[0], 2 * 2);
	lg_spec_free(s);
}

/* What the generated code is made of. */
static void test_source(void **state)
{
	(void)state;
	struct lg_target t;
	assert_true(lg_target_parse("sm_90a", &t));
	struct lg_plan p;
	char *src = NULL;
	lg_spec *s = parse("\"hidden\": 1000, \"experts\": 7, \"precision\": \"bf16x2\", \"quant\": {\"output\": \"rowwise\"}");
	/* sm_90a: wgmma on route_w's TMA stages and A buffers the kernel writes */
	assert_int_equal(lg_generate_for(s, &t, &p, &src, NULL), LG_OK);
	assert_non_null(strstr(src, "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16"));
	assert_non_null(strstr(src, "lg_tma_load_2d_mc(sh, tm, fs, k0, e0, 3)"));
	assert_non_null(strstr(src, "lg_split_bf16x2(t[j], 2, v[2 * j], v[2 * j + 1])"));
	assert_non_null(strstr(src, "lg_st_a90(dst, lr, lb * 8, yv)"));
	assert_non_null(strstr(src, "lg_fence_proxy_async()"));
	assert_null(strstr(src, "mma.sync"));
	free(src);
	/* sm_80 (and a warp grid on sm_90a): mma.sync, A stages in fp32 */
	assert_true(lg_target_parse("sm_80", &t));
	assert_int_equal(lg_generate_for(s, &t, &p, &src, NULL), LG_OK);
	assert_non_null(strstr(src, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"));
	assert_non_null(strstr(src, "lg_split_bf16x2(t, 2, v0, v1)"));
	assert_non_null(strstr(src, "lg_make_a("));
	assert_non_null(strstr(src, "lg_fetch_a("));
	assert_non_null(strstr(src, "make_float4")); /* fp32 A stages */
	assert_null(strstr(src, "a_load_a")); /* A is never copied from memory */
	assert_null(strstr(src, "_cols"));
	free(src);
	lg_spec_free(s);
	assert_true(lg_target_parse("sm_90a", &t));
	s = parse("\"hidden\": 1000, \"experts\": 96, \"quant\": {\"output\": \"rowwise\"}, "
		  "\"tile\": {\"warps_m\": 2, \"warps_n\": 4}");
	assert_int_equal(lg_generate_for(s, &t, &p, &src, NULL), LG_OK);
	assert_non_null(strstr(src, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"));
	assert_null(strstr(src, "wgmma"));
	free(src);
	lg_spec_free(s);
	s = parse("\"hidden\": 2048, \"experts\": 256, \"quant\": {\"output\": \"both\"}");
	assert_int_equal(lg_generate_for(s, &t, &p, &src, NULL), LG_OK);
	assert_non_null(strstr(src, "_cols("));
	assert_null(strstr(src, "lg_split_bf16x2"));
	free(src);
	lg_spec_free(s);
}

/* Every tuning candidate validates, plans and generates. */
static void test_candidates(void **state)
{
	(void)state;
	static const char *const keys[] = {
		"\"hidden\": 2048, \"experts\": 256, \"quant\": {\"output\": \"rowwise\"}",
		"\"hidden\": 1000, \"experts\": 1, \"quant\": {\"output\": \"rowwise\"}",
		"\"hidden\": 7168, \"experts\": 256, \"precision\": \"bf16x3\", \"quant\": {\"output\": \"both\"}"};
	static const char *const arch[] = {"sm_90a", "sm_80"};
	for (int i = 0; i < 3; i++)
		for (int a = 0; a < 2; a++) {
			lg_spec *s = parse(keys[i]);
			const struct lg_family *f = lg_family_get(s->op);
			struct lg_target t;
			assert_true(lg_target_parse(arch[a], &t));
			struct lg_tile_choice c[LG_MAX_CANDIDATES];
			int n = f->candidates(s, &t, c, LG_MAX_CANDIDATES);
			if (n < 4)
				fail_msg("%s on %s: %d candidates", s->entry, arch[a], n);
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
		cmocka_unit_test(test_by_hand),
		cmocka_unit_test(test_is_the_composition),
		cmocka_unit_test(test_partial_block),
		cmocka_unit_test(test_precision_errors),
		cmocka_unit_test(test_shapes),
		cmocka_unit_test(test_spec_checks),
		cmocka_unit_test(test_geometry),
		cmocka_unit_test(test_source),
		cmocka_unit_test(test_candidates),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
