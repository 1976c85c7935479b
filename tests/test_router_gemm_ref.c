/*
 * test_router_gemm_ref.c - family router_gemm (docs/kernels.md K3) without a
 * GPU: its reference (gen/ref/router_gemm_ref.c) on tiny cases computed by
 * hand (forward logits, backward dx and dw), the declared shapes, the spec
 * checks and their messages, the launch geometry and workspace, the
 * generated source's shape (mma.sync, ldmatrix .trans, the fp32 split),
 * and the tuning candidates (each validates, plans and generates).
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
#include "nvrtc.h"
#include "ref.h"
#include "refcase.h"

enum { F_X, F_W, F_Y };
enum { B_DY, B_X, B_W, B_DX, B_DW, B_WS };

static lg_spec *parse(const char *pass, const char *keys)
{
	return lg_test_spec("router_gemm", pass, "bf16", keys);
}

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

/* x [2, 8], w [3, 8]: logits by hand. */
static void test_forward_by_hand(void **state)
{
	(void)state;
	lg_spec *s = parse("forward", "\"hidden\": 8, \"experts\": 3");
	struct lg_ref_case c;
	case_init(&c, s, 2);
	const float x[16] = {1, 2, 3, 4, 5, 6, 7, 8, -1, 0.5f, 0, 0, 0, 0, 0, 2};
	float w[24] = {0};
	w[0] = 1;                         /* expert 0: x[0] */
	for (int k = 0; k < 8; k++)
		w[8 + k] = 1;             /* expert 1: the row sum */
	w[16 + 7] = -0.25f;               /* expert 2: -x[7] / 4 */
	set_bf16(&c, F_X, x);
	set_bf16(&c, F_W, w);
	lg_ref_family_get(s->op)->run(s, &c);
	const float *y = c.buf[F_Y].host;
	const float want[6] = {1, 36, -2, -1, 1.5f, -0.5f};
	for (int i = 0; i < 6; i++)
		assert_float_equal(y[i], want[i], 0.0);
	lg_test_case_free(&c);
	lg_spec_free(s);
}

/* dy [2, 2] fp32, x [2, 8], w [2, 8]: dx = dy w (bf16), dw = dy^T x (fp32). */
static void test_backward_by_hand(void **state)
{
	(void)state;
	lg_spec *s = parse("backward", "\"hidden\": 8, \"experts\": 2");
	struct lg_ref_case c;
	case_init(&c, s, 2);
	float *dy = c.buf[B_DY].host;
	dy[0] = 1.0f, dy[1] = 0.5f, dy[2] = -2.0f, dy[3] = 0.0f;
	float x[16], w[16];
	for (int k = 0; k < 8; k++) {
		x[k] = (float)k, x[8 + k] = 1.0f;
		w[k] = 1.0f, w[8 + k] = (float)(k % 2);
	}
	set_bf16(&c, B_X, x);
	set_bf16(&c, B_W, w);
	lg_ref_family_get(s->op)->run(s, &c);
	for (int k = 0; k < 8; k++) {
		/* dx[0] = 1 w0 + 0.5 w1, dx[1] = -2 w0 */
		assert_float_equal(bf16_at(&c, B_DX, (size_t)k), 1.0f + 0.5f * (float)(k % 2), 0.0);
		assert_float_equal(bf16_at(&c, B_DX, (size_t)(8 + k)), -2.0f, 0.0);
		/* dw[0] = 1 x0 - 2 x1, dw[1] = 0.5 x0 */
		const float *dw = c.buf[B_DW].host;
		assert_float_equal(dw[k], (float)k - 2.0f, 0.0);
		assert_float_equal(dw[8 + k], 0.5f * (float)k, 0.0);
	}
	lg_test_case_free(&c);
	lg_spec_free(s);
}

/* The reference multiplies dy as each precision declares it: dy = 1 +
 * 2^-10 + 2^-20 is 1 in bf16, 1 + 2^-10 in two bf16 terms, exact in three
 * (dw = dy x with x = 1); 1 + 2^-11 + 2^-20 is 1 + 2^-10 in tf32 (past
 * half its last place: rounded up). The tolerances are the fp32 sums'. */
static void test_precisions(void **state)
{
	(void)state;
	const char *const prec[] = {"bf16", "bf16x2", "bf16x3", "tf32"};
	const double want[] = {1.0, 1.0 + 0x1p-10, 1.0 + 0x1p-10 + 0x1p-20, 1.0 + 0x1p-10};
	for (int i = 0; i < 4; i++) {
		char keys[128];
		snprintf(keys, sizeof keys, "\"hidden\": 8, \"experts\": 1, \"precision\": \"%s\"", prec[i]);
		lg_spec *s = parse("backward", keys);
		struct lg_ref_case c;
		case_init(&c, s, 1);
		lg_ref_family_get(s->op)->describe(s, &c);
		assert_int_equal(c.buf[B_DW].cmp, LG_CMP_FP32);
		assert_int_equal(c.buf[B_DX].cmp, LG_CMP_BF16);
		assert_true(c.buf[B_DW].atol <= 2e-5 && c.buf[B_DW].rtol <= 2e-5);
		((float *)c.buf[B_DY].host)[0] = (float)(i == 3 ? 1.0 + 0x1p-11 + 0x1p-20 : want[2]);
		float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
		set_bf16(&c, B_X, ones);
		set_bf16(&c, B_W, ones);
		lg_ref_family_get(s->op)->run(s, &c);
		for (int k = 0; k < 8; k++)
			assert_float_equal(((const float *)c.buf[B_DW].host)[k], (float)want[i], 0.0);
		lg_test_case_free(&c);
		lg_spec_free(s);
	}
}

/* fp32 v rounded to tf32 (10 fraction bits) as cvt.rna.tf32.f32 does:
 * to nearest, ties away from zero. */
static double tf32(float v)
{
	uint32_t u;
	memcpy(&u, &v, sizeof u);
	u = (u + 0x1000u) & ~0x1fffu;
	memcpy(&v, &u, sizeof v);
	return v;
}

/* The largest |got - want| over the rms of want. */
static double err_of_rms(const double *want, size_t n, double (*got)(const void *, size_t), const void *p)
{
	double rms = 0.0, worst = 0.0;
	for (size_t i = 0; i < n; i++) {
		rms += want[i] * want[i];
		worst = fmax(worst, fabs(got(p, i) - want[i]));
	}
	return worst / sqrt(rms / (double)n);
}
static double at_f32(const void *p, size_t i) { return ((const float *)p)[i]; }
static double at_bf16(const void *p, size_t i) { return lg_ref_bf16_to_f32(((const uint16_t *)p)[i]); }
static double at_f64(const void *p, size_t i) { return ((const double *)p)[i]; }

/* What each backward precision loses against dx, dw of the fp32 dy
 * (float64 sums), measured on the reference (which multiplies dy as each
 * precision declares it, exactly: the GPU adds only its fp32 summation),
 * beside linghe's tf32 (dy rounded to tf32, the same float64 sums; precision
 * tf32 gives the same), as the
 * largest error over the rms. dw (fp32): bf16 ~2^-9 of each dy, tf32
 * ~2^-12, bf16x2 ~2^-17, bf16x3 only dw's own fp32 rounding. dx is bf16:
 * its output rounding (2^-9) dominates at every precision but bf16.
 * Measured (hidden 256, 64 experts, 512 tokens, seed 2048): printed;
 * documented in router_gemm.c's header. */
static void test_precision_errors(void **state)
{
	(void)state;
	const size_t M = 512, K = 256, N = 64;
	double *dw = calloc(N * K, sizeof *dw), *dw32 = calloc(N * K, sizeof *dw32);
	double *dx = calloc(M * K, sizeof *dx), *dx32 = calloc(M * K, sizeof *dx32);
	assert_true(dw && dw32 && dx && dx32);
	const char *const prec[] = {"bf16", "bf16x2", "bf16x3", "tf32"};
	double got_dw[5], got_dx[5];
	for (int p = 0; p < 4; p++) {
		char keys[128];
		snprintf(keys, sizeof keys, "\"hidden\": 256, \"experts\": 64, \"precision\": \"%s\"", prec[p]);
		lg_spec *s = parse("backward", keys);
		struct lg_ref_case c;
		case_init(&c, s, (int64_t)M);
		lg_ref_family_get(s->op)->fill(s, &c, 2048);
		if (p == 0) { /* float64 sums of the fp32 dy, and of its tf32 rounding */
			const float *dy = c.buf[B_DY].host;
			for (size_t m = 0; m < M; m++)
				for (size_t n = 0; n < N; n++) {
					double d = dy[m * N + n], d32 = tf32(dy[m * N + n]);
					for (size_t k = 0; k < K; k++) {
						double x = bf16_at(&c, B_X, m * K + k), w = bf16_at(&c, B_W, n * K + k);
						dw[n * K + k] += d * x, dw32[n * K + k] += d32 * x;
						dx[m * K + k] += d * w, dx32[m * K + k] += d32 * w;
					}
				}
			for (size_t i = 0; i < M * K; i++) /* linghe's dx is bf16 too */
				dx32[i] = lg_ref_bf16_to_f32(lg_ref_f32_to_bf16((float)dx32[i]));
			for (size_t i = 0; i < N * K; i++)
				dw32[i] = (float)dw32[i];
			got_dw[4] = err_of_rms(dw, N * K, at_f64, dw32);
			got_dx[4] = err_of_rms(dx, M * K, at_f64, dx32);
		}
		lg_ref_family_get(s->op)->run(s, &c);
		got_dw[p] = err_of_rms(dw, N * K, at_f32, c.buf[B_DW].host);
		got_dx[p] = err_of_rms(dx, M * K, at_bf16, c.buf[B_DX].host);
		printf("precision %-6s: dw %.3g, dx %.3g of the rms\n", prec[p], got_dw[p], got_dx[p]);
		lg_test_case_free(&c);
		lg_spec_free(s);
	}
	printf("linghe's tf32  : dw %.3g, dx %.3g of the rms\n", got_dw[4], got_dx[4]);
	/* precision tf32 is linghe's: the same products, only dw's float64 sums of them rounded once */
	assert_true(fabs(got_dw[3] - got_dw[4]) < 1e-6 && fabs(got_dx[3] - got_dx[4]) < 1e-3);
	/* dw: bf16 > tf32 > bf16x2 > bf16x3, each by its bits */
	assert_true(got_dw[0] > 4.0 * got_dw[3] && got_dw[3] > 16.0 * got_dw[1] && got_dw[1] > 4.0 * got_dw[2]);
	assert_true(got_dw[0] < 1e-2 && got_dw[3] < 1e-3 && got_dw[1] < 2e-5 && got_dw[2] < 1e-6);
	/* dx: bf16 output rounding, half an ulp of bf16 (values up to ~4 rms) */
	assert_true(got_dx[0] < 4e-2 && got_dx[1] < 2e-2 && got_dx[2] < 2e-2 && got_dx[3] < 2e-2);
	free(dw);
	free(dw32);
	free(dx);
	free(dx32);
}

static void test_shapes(void **state)
{
	(void)state;
	const int64_t sizes[1] = {5};
	int64_t dims[8];
	int nd;
	lg_spec *s = parse("backward", "\"hidden\": 64, \"experts\": 3");
	assert_int_equal(lg_arg_shape(s, B_DY, sizes, dims, &nd), LG_OK);
	assert_true(nd == 2 && dims[0] == 5 && dims[1] == 3);
	assert_int_equal(lg_arg_shape(s, B_DX, sizes, dims, &nd), LG_OK);
	assert_true(nd == 2 && dims[0] == 5 && dims[1] == 64);
	assert_int_equal(lg_arg_shape(s, B_DW, sizes, dims, &nd), LG_OK);
	assert_true(nd == 2 && dims[0] == 3 && dims[1] == 64);
	lg_spec_free(s);
	s = parse("forward", "\"hidden\": 64, \"experts\": 3");
	assert_int_equal(lg_arg_shape(s, F_Y, sizes, dims, &nd), LG_OK);
	assert_true(nd == 2 && dims[0] == 5 && dims[1] == 3);
	lg_spec_free(s);
}

/* A spec the family refuses, and the words its message must hold. */
static void refused(const char *pass, const char *keys, const char *want1, const char *want2)
{
	char *json = lg_test_spec_json("router_gemm", pass, "bf16", keys);
	lg_test_refused(json, keys, want1, want2);
	free(json);
}

static void test_spec_checks(void **state)
{
	(void)state;
	refused("forward", "\"hidden\": 1001, \"experts\": 8", "hidden", "multiple of 8");
	refused("forward", "\"hidden\": 1000, \"experts\": 0", "experts", "0");
	refused("forward", "\"hidden\": 1000", "experts", "");
	refused("backward", "\"hidden\": 1000, \"experts\": 8, \"precision\": \"fp32\"", "precision", "tf32");
	refused("forward", "\"hidden\": 1000, \"experts\": 8, \"tile\": {\"m\": 96}", "tile.m", "96");
	refused("forward", "\"hidden\": 1000, \"experts\": 8, \"tile\": {\"m\": 32, \"warps_m\": 4}", "tile",
		"multiple of 16");
	refused("forward", "\"hidden\": 1000, \"experts\": 8, \"tile\": {\"split\": 2}", "tile.split",
		"forward");
	refused("forward", "\"hidden\": 1000, \"experts\": 8, \"tile\": {\"stages\": 9}", "stages", "9");
	refused("forward", "\"hidden\": 1000, \"experts\": 8, \"tile\": {\"dx_m\": 64}", "tile.dx_m", "backward");
	refused("backward", "\"hidden\": 1000, \"experts\": 8, \"tile\": {\"dx_m\": 32, \"dx_warps_m\": 4}",
		"tile", "dx_m 32");
	/* odd sizes are fine */
	lg_spec_free(parse("forward", "\"hidden\": 1000, \"experts\": 1"));
	lg_spec_free(parse("backward", "\"hidden\": 8, \"experts\": 97, \"precision\": \"bf16x3\""));
	lg_spec_free(parse("backward", "\"hidden\": 8, \"experts\": 97, \"precision\": \"tf32\""));
}

/* The target shape: forward on sm_90a 64 x 2 tiles of 128x128 (one grid
 * dimension: a grouped raster), two consumer warpgroups and a producer, 7
 * stages of 32 KB, tensor maps of x and w in boxes of 64 x 128 with the
 * 128-byte swizzle; on sm_80 and sm_90 (no "a") 64 x 2 tiles of 256
 * threads, 4 cp.async stages, no tensor map; backward dx's 64 x 8 tiles
 * of 512 threads, dw's 2 x 16 tiles x 4 slices, then the sum of the slices
 * (a 4-slice workspace), dw also at 0 tokens, dy's bf16 planes; persistent
 * dx CTAs (sm_90a); a tile too big for sm_80's shared memory. */
static void test_geometry(void **state)
{
	(void)state;
	const struct lg_family *f = lg_family_get(LG_OP_ROUTER_GEMM);
	struct lg_launch_dim d;
	struct lg_plan p;
	lg_spec *s = parse("forward", "\"hidden\": 2048, \"experts\": 256");
	lg_test_plan(s, "sm_90a", &p, LG_OK);
	assert_int_equal(p.nentries, 1);
	int64_t M = 8192;
	f->geometry(&p, 0, &M, &d);
	assert_true(d.grid[0] == 64 * 2 && d.grid[1] == 1 && d.block[0] == 384);
	assert_int_equal(d.smem, 1024 + 7 * (32768 + 16));
	assert_int_equal(p.ntmaps, 2);
	assert_true(p.tmap[0].arg == 0 && p.tmap[0].box[0] == 64 && p.tmap[0].box[1] == 128);
	assert_true(p.tmap[1].arg == 1 && p.tmap[1].box[0] == 64 && p.tmap[1].box[1] == 128);
	assert_true(p.tmap[0].swizzle == 128 && p.tmap[1].swizzle == 128);
	for (int a = 0; a < 2; a++) {
		lg_test_plan(s, a ? "sm_90" : "sm_80", &p, LG_OK);
		f->geometry(&p, 0, &M, &d);
		assert_true(d.grid[0] == 64 * 2 && d.block[0] == 256 && d.smem == 4 * 16384);
		assert_int_equal(p.ntmaps, 0);
	}
	lg_test_plan(s, "sm_90a", &p, LG_OK);
	M = 0;
	f->geometry(&p, 0, &M, &d);
	assert_int_equal(d.grid[0], 0);
	assert_int_equal(f->workspace(&p), 0);
	lg_spec_free(s);
}

/* The backward's three kernels on sm_90a and sm_90, and dy in 3 terms on sm_80. */
static void test_geometry_backward(void **state)
{
	(void)state;
	const struct lg_family *f = lg_family_get(LG_OP_ROUTER_GEMM);
	struct lg_launch_dim d;
	struct lg_plan p;
	int64_t M = 0;
	lg_spec *s;
	s = parse("backward", "\"hidden\": 2048, \"experts\": 256");
	/* sm_90a: wgmma; dx 64 x 8 tiles of 128 x 256, 3 stages of fp32 dy (32 KB) and w (32 KB), two
	 * buffers of dy's plane (16 KB); dw 2 x 16 tiles of 128 x 128 x 4 slices, 4 stages of fp32 dy
	 * (32 KB) and x (16 KB); two consumer warpgroups and the producer; dy's fp32 boxes unswizzled */
	lg_test_plan(s, "sm_90a", &p, LG_OK);
	assert_int_equal(p.nentries, 3);
	assert_true(!p.early[0] && p.early[1] && !p.early[2]);
	M = 8192;
	f->geometry(&p, 0, &M, &d);
	assert_true(d.grid[0] == 64 * 8 && d.block[0] == 384);
	assert_int_equal(d.smem, 1024 + 3 * (65536 + 16) + 2 * 16384);
	f->geometry(&p, 1, &M, &d);
	assert_true(d.grid[0] == 2 * 16 * 4 && d.block[0] == 384);
	assert_int_equal(d.smem, 1024 + 4 * (49152 + 16) + 2 * 16384);
	assert_int_equal(f->workspace(&p), (size_t)4 * 256 * 2048 * 4);
	assert_int_equal(p.ntmaps, 3);
	assert_true(p.tmap[0].arg == 0 && p.tmap[0].box[0] == 64 && p.tmap[0].box[1] == 64 && p.tmap[0].swizzle == 0);
	assert_true(p.tmap[1].arg == 2 && p.tmap[1].box[0] == 64 && p.tmap[1].box[1] == 64 && p.tmap[1].swizzle == 128);
	assert_true(p.tmap[2].arg == 1 && p.tmap[2].box[0] == 64 && p.tmap[2].box[1] == 64 && p.tmap[2].swizzle == 128);
	lg_test_plan(s, "sm_90", &p, LG_OK); /* mma.sync */
	assert_int_equal(p.nentries, 3);
	assert_true(!p.early[0] && p.early[1] && !p.early[2]); /* dw may start beside dx's last wave */
	/* dx: 64 x 8 tiles of 128 x 256, 16 warps; 4 stages of fp32 dy and bf16 w, two of dy's planes */
	f->geometry(&p, 0, &M, &d);
	assert_true(d.grid[0] == 64 * 8 && d.grid[1] == 1 && d.block[0] == 512);
	assert_true(d.smem == 4 * (16384 + 16384) + 2 * 8192);
	f->geometry(&p, 1, &M, &d); /* dw: 2 x 16 tiles x 4 slices */
	assert_true(d.grid[0] == 2 * 16 * 4 && d.grid[1] == 1 && d.block[0] == 256);
	assert_true(d.smem == 4 * (16384 + 8192) + 2 * 8192);
	f->geometry(&p, 2, &M, &d);
	assert_true(d.grid[0] == 256 * 2048 / 4 / 256 && d.block[0] == 256 && d.smem == 0);
	assert_int_equal(f->workspace(&p), (size_t)4 * 256 * 2048 * 4);
	M = 0;
	f->geometry(&p, 0, &M, &d);
	assert_int_equal(d.grid[0], 0);
	f->geometry(&p, 1, &M, &d);
	assert_int_equal(d.grid[0], 2 * 16 * 4);
	lg_spec_free(s);
	/* dy in 3 terms: 3 planes; dx's tile by its own keys, its stages as many as fit sm_80 */
	s = parse("backward", "\"hidden\": 2048, \"experts\": 256, \"precision\": \"bf16x3\", \"tile\": "
			      "{\"dx_m\": 64, \"dx_n\": 128, \"dx_k\": 64, \"dx_warps_m\": 2, \"dx_warps_n\": 2}");
	lg_test_plan(s, "sm_80", &p, LG_OK);
	assert_false(p.early[1]);
	f->geometry(&p, 0, &M, &d);
	assert_true(d.block[0] == 128 && d.smem == 3 * (16384 + 16384) + 2 * 3 * 8192);
	M = 1000;
	f->geometry(&p, 0, &M, &d);
	assert_int_equal(d.grid[0], 16 * 16);
	f->geometry(&p, 1, &M, &d);
	assert_true(d.block[0] == 256 && d.smem == 4 * (16384 + 8192) + 2 * 3 * 8192);
	lg_spec_free(s);
}

/* Persistent dx CTAs (sm_90a), and one slice: no sum, no workspace. */
static void test_geometry_persistent(void **state)
{
	(void)state;
	const struct lg_family *f = lg_family_get(LG_OP_ROUTER_GEMM);
	struct lg_launch_dim d;
	struct lg_plan p;
	int64_t M = 0;
	lg_spec *s;
	/* persistent dx (sm_90a): one CTA an SM, at most one a tile; not on mma.sync */
	s = parse("backward", "\"hidden\": 2048, \"experts\": 256, \"tile\": {\"dx_persistent\": 1}");
	lg_test_plan(s, "sm_90a", &p, LG_OK);
	assert_true(p.persistent[0] && !p.persistent[1] && p.per_sm[0] == 1);
	assert_int_equal(p.tile[lg_family_key(f, "tile.dx_persistent")], 1);
	M = 8192;
	f->geometry(&p, 0, &M, &d);
	assert_true(d.grid[0] == 132 && d.block[0] == 384);
	assert_int_equal(d.smem, 1024 + 3 * (65536 + 16) + 2 * 16384);
	p.resident[0] = 114; /* what the context found co-resident */
	f->geometry(&p, 0, &M, &d);
	assert_int_equal(d.grid[0], 114);
	M = 1000; /* 8 x 8 tiles */
	f->geometry(&p, 0, &M, &d);
	assert_int_equal(d.grid[0], 64);
	M = 0;
	f->geometry(&p, 0, &M, &d);
	assert_int_equal(d.grid[0], 0);
	lg_test_plan(s, "sm_90", &p, LG_ERR_SPEC);
	assert_non_null(strstr(lg_last_error(), "tile.dx_persistent"));
	lg_spec_free(s);
	s = parse("backward", "\"hidden\": 2048, \"experts\": 256");
	lg_test_plan(s, "sm_90a", &p, LG_OK);
	assert_true(!p.persistent[0] && p.tile[lg_family_key(f, "tile.dx_persistent")] == 0);
	lg_spec_free(s);

	/* one slice: no sum, no workspace */
	s = parse("backward", "\"hidden\": 7168, \"experts\": 256, \"tile\": {\"split\": 1}");
	for (int a = 0; a < 2; a++) {
		lg_test_plan(s, a ? "sm_90a" : "sm_90", &p, LG_OK);
		assert_int_equal(p.nentries, 2);
		assert_int_equal(f->workspace(&p), 0);
	}
	lg_spec_free(s);
}

/* Tiles that do not fit or do not run (sm_80's shared memory, wgmma's tiles), clusters. */
static void test_geometry_tiles(void **state)
{
	(void)state;
	const struct lg_family *f = lg_family_get(LG_OP_ROUTER_GEMM);
	struct lg_launch_dim d;
	struct lg_plan p;
	int64_t M = 0;
	lg_spec *s;
	s = parse("forward", "\"hidden\": 2048, \"experts\": 256, \"tile\": {\"m\": 256, \"n\": 256, \"k\": 64, "
			     "\"warps_m\": 4, \"warps_n\": 2, \"stages\": 8}");
	lg_test_plan(s, "sm_80", &p, LG_ERR_SPEC);
	assert_non_null(strstr(lg_last_error(), "shared memory"));
	lg_spec_free(s);

	/* the wgmma path: a 128x256 tile for a large GEMM, tiles it cannot run */
	s = parse("forward", "\"hidden\": 8192, \"experts\": 8192");
	lg_test_plan(s, "sm_90a", &p, LG_OK);
	assert_true(p.tile[lg_family_key(f, "tile.m")] == 128 && p.tile[lg_family_key(f, "tile.n")] == 256);
	assert_int_equal(p.tmap[1].box[1], 256);
	lg_spec_free(s);
	s = parse("forward", "\"hidden\": 2048, \"experts\": 256, \"tile\": {\"k\": 32}");
	lg_test_plan(s, "sm_90a", &p, LG_ERR_SPEC);
	assert_non_null(strstr(lg_last_error(), "tile.k 64"));
	lg_test_plan(s, "sm_80", &p, LG_OK);
	lg_spec_free(s);
	/* a cluster of 2 along the tokens: whole clusters of row tiles, w's box halved */
	s = parse("forward", "\"hidden\": 2048, \"experts\": 256, \"tile\": {\"cluster\": 2}");
	lg_test_plan(s, "sm_90a", &p, LG_OK);
	assert_int_equal(p.cluster[0], 2);
	assert_true(p.tmap[0].box[1] == 128 && p.tmap[1].box[1] == 64);
	M = 8192;
	f->geometry(&p, 0, &M, &d);
	assert_int_equal(d.grid[0], 64 * 2);
	M = 8191 - 128; /* 63 row tiles: 64 */
	f->geometry(&p, 0, &M, &d);
	assert_int_equal(d.grid[0], 64 * 2);
	M = 1;
	f->geometry(&p, 0, &M, &d);
	assert_int_equal(d.grid[0], 2 * 2);
	lg_test_plan(s, "sm_80", &p, LG_ERR_SPEC);
	assert_non_null(strstr(lg_last_error(), "tile.cluster"));
	lg_spec_free(s);
	s = parse("backward", "\"hidden\": 2048, \"experts\": 256, \"tile\": {\"cluster\": 2}");
	lg_test_plan(s, "sm_90a", &p, LG_ERR_SPEC);
	assert_non_null(strstr(lg_last_error(), "tile.cluster"));
	lg_spec_free(s);
	s = parse("forward", "\"hidden\": 2048, \"experts\": 256, \"tile\": {\"m\": 256}");
	lg_test_plan(s, "sm_90a", &p, LG_ERR_SPEC);
	assert_non_null(strstr(lg_last_error(), "tile.m 64 or 128"));
	lg_spec_free(s);
	s = parse("forward", "\"hidden\": 2048, \"experts\": 256, \"tile\": {\"n\": 256, \"stages\": 8}");
	lg_test_plan(s, "sm_90a", &p, LG_ERR_SPEC);
	assert_non_null(strstr(lg_last_error(), "shared memory"));
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
	lg_spec *s = parse("backward", "\"hidden\": 1000, \"experts\": 7, \"precision\": \"bf16x2\"");
	assert_int_equal(lg_generate_for(s, &t, &p, &src, NULL), LG_OK);
	assert_non_null(strstr(src, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"));
	assert_non_null(strstr(src, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"));
	/* dy split into 2 bf16 planes in shared memory once a tile, read by ldmatrix */
	assert_non_null(strstr(src, "lg_split_bf16x2(t[j], 2, v[2 * j], v[2 * j + 1])"));
	assert_non_null(strstr(src, "dx_cvt_a(sp + (kn & 1) * "));
	assert_null(strstr(src, "lg_split_bf16x2(t, 2, v0, v1)"));
	assert_non_null(strstr(src, "lg_cp4(")); /* 7 experts: dy rows are not 16-byte aligned */
	assert_non_null(strstr(src, "_dx("));
	assert_non_null(strstr(src, "_dw("));
	assert_non_null(strstr(src, "_dwsum("));
	free(src);
	lg_spec_free(s);
	/* dx of 8 warps: two CTAs an SM (16 warps), registers capped by __launch_bounds__; 3 dy
	 * terms: one (shared memory); mma.sync (sm_90) */
	assert_true(lg_target_parse("sm_90", &t));
	s = parse("backward", "\"hidden\": 2048, \"experts\": 256, \"tile\": {\"dx_m\": 64, \"dx_warps_m\": 2}");
	assert_int_equal(lg_generate_for(s, &t, &p, &src, NULL), LG_OK);
	assert_non_null(strstr(src, "__launch_bounds__(256, 2)\nlg_router_gemm_bwd_bf16_h2048_e256_txm64xwm2_dx("));
	free(src);
	lg_spec_free(s);
	s = parse("backward", "\"hidden\": 2048, \"experts\": 256, \"precision\": \"bf16x3\", \"tile\": "
			      "{\"dx_m\": 64, \"dx_warps_m\": 2}");
	assert_int_equal(lg_generate_for(s, &t, &p, &src, NULL), LG_OK);
	assert_non_null(
		strstr(src, "__launch_bounds__(256, 1)\nlg_router_gemm_bwd_bf16_h2048_e256_bf16x3_txm64xwm2_dx("));
	free(src);
	/* sm_90a: wgmma, dx's B (w) N-major, dw's A (dy) M-major and B (x) N-major; dy as 3 planes */
	assert_true(lg_target_parse("sm_90a", &t));
	assert_int_equal(lg_generate_for(s, &t, &p, &src, NULL), LG_OK);
	assert_null(strstr(src, "ldmatrix"));
	assert_non_null(strstr(src, "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16"));
	assert_non_null(strstr(src, " p, 1, 1, 0, 1;"));
	assert_non_null(strstr(src, " p, 1, 1, 1, 1;"));
	assert_non_null(strstr(src, "lg_wg_desc_mn("));
	assert_non_null(strstr(src, "lg_split_bf16x2(t[0], 3, lo.x, lo.y);"));
	assert_non_null(strstr(src, "const __grid_constant__ lg_tmap tm_dy,"));
	assert_non_null(strstr(src, "_dwsum("));
	free(src);
	lg_spec_free(s);
	/* persistent dx: the tile loop, the stage count across tiles, the last stage released */
	s = parse("backward", "\"hidden\": 2048, \"experts\": 256, \"tile\": {\"dx_persistent\": 1}");
	assert_int_equal(lg_generate_for(s, &t, &p, &src, NULL), LG_OK);
	assert_non_null(strstr(src, "for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {"));
	assert_non_null(strstr(src, "const i64 o0a = tile / 8 * 128, o0b = tile % 8 * 256;"));
	assert_non_null(strstr(src, "lg_mbar_wait(&full[s], (it / 3) & 1);"));
	assert_non_null(strstr(src, "if (nkt > 0 && lane == 0) lg_mbar_arrive(&empty[(it + 2) % 3]);"));
	free(src);
	lg_spec_free(s);
	s = parse("forward", "\"hidden\": 2048, \"experts\": 256");
	assert_int_equal(lg_generate_for(s, &t, &p, &src, NULL), LG_OK);
	assert_null(strstr(src, "ldmatrix"));
	assert_non_null(strstr(src, "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16"));
	assert_non_null(strstr(src, "cp.async.bulk.tensor.2d"));
	assert_non_null(strstr(src, "const __grid_constant__ lg_tmap tm_x,"));
	assert_non_null(strstr(src, "const __grid_constant__ lg_tmap tm_w)"));
	assert_non_null(strstr(src, "setmaxnreg"));
	free(src);
	assert_true(lg_target_parse("sm_90", &t)); /* no wgmma without the "a" */
	assert_int_equal(lg_generate_for(s, &t, &p, &src, NULL), LG_OK);
	assert_null(strstr(src, "wgmma"));
	assert_non_null(strstr(src, "mma.sync.aligned.m16n8k16"));
	free(src);
	lg_spec_free(s);
	/* tf32: dy rounded by cvt.rna before its split into 2 planes, on every path (wgmma; mma.sync at
	 * 96 and at 7 experts: the CTA's convert) */
	static const char *const tf[][2] = {{"sm_90a", "96"}, {"sm_80", "96"}, {"sm_90a", "7"}};
	for (int i = 0; i < 3; i++) {
		char keys[128];
		snprintf(keys, sizeof keys, "\"hidden\": 1000, \"experts\": %s, \"precision\": \"tf32\"", tf[i][1]);
		s = parse("backward", keys);
		assert_true(lg_target_parse(tf[i][0], &t));
		assert_int_equal(lg_generate_for(s, &t, &p, &src, NULL), LG_OK);
		assert_non_null(strstr(src, "cvt.rna.tf32.f32"));
		assert_non_null(strstr(src, "lg_split_tf32(t[0], 2, lo.x, lo.y);") || strstr(src, "lg_split_tf32(t[j], 2,"));
		free(src);
		lg_spec_free(s);
	}
}

/* sm_86 and sm_89 (99 KB of shared memory a CTA): the backward's default
 * tiles (dx 128 x 256, dw 128 x 128, with dy's planes: 112-120 KB at 3
 * stages) are halved until they fit, at each precision, at the target and
 * at hidden 7168; each plans within the limit, has tuning candidates,
 * generates and compiles (NVRTC, sm_89; tf32's split too). A tile the spec sizes is not
 * halved: refused. */
static void test_small_smem(void **state)
{
	(void)state;
	static const char *const keys[] = {
		"\"hidden\": 2048, \"experts\": 256",
		"\"hidden\": 2048, \"experts\": 256, \"precision\": \"bf16x2\"",
		"\"hidden\": 2048, \"experts\": 256, \"precision\": \"bf16x3\"",
		"\"hidden\": 7168, \"experts\": 160, \"precision\": \"bf16x3\"",
		"\"hidden\": 1000, \"experts\": 7, \"precision\": \"bf16x2\"",
		"\"hidden\": 2048, \"experts\": 256, \"precision\": \"tf32\"",
	};
	const struct lg_family *f = lg_family_get(LG_OP_ROUTER_GEMM);
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		for (int a = 0; a < 2; a++) {
			const char *arch = a ? "sm_89" : "sm_86";
			lg_spec *s = parse("backward", keys[i]);
			struct lg_plan p;
			lg_test_plan(s, arch, &p, LG_OK);
			const int64_t M = 1000;
			for (int e = 0; e < p.nentries; e++) {
				struct lg_launch_dim d;
				f->geometry(&p, e, &M, &d);
				if (d.smem > 101376)
					fail_msg("%s on %s: entry %d asks %u bytes of shared memory", keys[i], arch, e,
						 d.smem);
			}
			struct lg_target tc;
			assert_true(lg_target_parse(arch, &tc));
			struct lg_tile_choice c[LG_MAX_CANDIDATES];
			if (f->candidates(s, &tc, c, LG_MAX_CANDIDATES) < 4) /* lingen tune has tiles to try */
				fail_msg("%s on %s: fewer than 4 tuning candidates", keys[i], arch);
			if (a == 1 && i != 1 && i != 4) {
				struct lg_target t;
				assert_true(lg_target_parse(arch, &t));
				char *src = NULL;
				assert_int_equal(lg_generate_for(s, &t, &p, &src, NULL), LG_OK);
				void *cubin = NULL;
				char *log = NULL;
				size_t size = 0;
				if (lg_nvrtc_compile(src, lg_spec_entry(s), arch, &cubin, &size, &log) != LG_OK)
					fail_msg("%s for %s: %s", keys[i], arch, lg_last_error());
				free(cubin);
				free(log);
				free(src);
			}
			lg_spec_free(s);
		}
	lg_spec *s = parse("backward", "\"hidden\": 2048, \"experts\": 256, \"tile\": {\"dx_n\": 256}");
	struct lg_plan p;
	lg_test_plan(s, "sm_89", &p, LG_ERR_SPEC);
	assert_non_null(strstr(lg_last_error(), "tile.dx_stages"));
	lg_spec_free(s);
}

/* Every tuning candidate validates, plans and generates. */
static void test_candidates(void **state)
{
	(void)state;
	static const char *const keys[] = {"\"hidden\": 2048, \"experts\": 256", "\"hidden\": 1000, \"experts\": 1"};
	static const char *const passes[] = {"forward", "backward"};
	for (int i = 0; i < 2; i++)
		for (int q = 0; q < 2; q++) {
			lg_spec *s = parse(passes[q], keys[i]);
			const struct lg_family *f = lg_family_get(s->op);
			struct lg_target t;
			assert_true(lg_target_parse("sm_90a", &t));
			struct lg_tile_choice c[LG_MAX_CANDIDATES];
			int n = f->candidates(s, &t, c, LG_MAX_CANDIDATES);
			/* the sm_90a backward: wgmma's (7 tiles, 4 with persistent dx, 4 splits) */
			assert_int_equal(n, q == 0 ? 9 : 15);
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
		cmocka_unit_test(test_forward_by_hand),
		cmocka_unit_test(test_backward_by_hand),
		cmocka_unit_test(test_precisions),
		cmocka_unit_test(test_precision_errors),
		cmocka_unit_test(test_shapes),
		cmocka_unit_test(test_spec_checks),
		cmocka_unit_test(test_geometry),
		cmocka_unit_test(test_geometry_backward),
		cmocka_unit_test(test_geometry_persistent),
		cmocka_unit_test(test_geometry_tiles),
		cmocka_unit_test(test_small_smem),
		cmocka_unit_test(test_source),
		cmocka_unit_test(test_candidates),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
