/*
 * gpu_test_adamw_fp8.c - family "adamw_fp8" on the GPU (label "gpu"):
 * several steps of the fused kernel against the plain-C references, bit
 * for bit: the weight, exp_avg and exp_avg_sq after every step against
 * adamw's reference step (lg_ref_adamw_step), and q, s, qt, st against the
 * reference copies of the stepped weight (lg_ref_weight_tiles, which
 * test_adamw_fp8_ref checks against fp8_quant_weight's reference). Shapes:
 * the training example's expert weights (w1 of 8 experts as [8 x 1024,
 * 2048], w2 as [8 x 2048, 512]: bf16 weight, grads and moments), rows not a
 * multiple of 128 (1000 x 384, 130 x 128, 1 x 256), fp32 moments and
 * grads, an fp32 weight with exact scales, 256 threads a tile; no rows.
 * Also the kernel's copies against the fp8_quant_weight kernel run on the
 * stepped weight (the bytes the forward would have made). Expert weights
 * (expert_rows: the experts' own transposed copies) against the flat
 * reference rearranged per expert (lg_ref_experts_transposed, as
 * lingen.nn._quant.experts_transposed), and fp8_quant_weight's flat copy
 * against the same flat reference: the kernel's qt, st are
 * fp8_quant_weight's rearranged per expert, bit for bit.
 * Exits with LG_TEST_SKIP (ctest: skipped) without a CUDA device or driver;
 * random inputs print their seed (LINGEN_SEED replays).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cuda.h"
#include "family.h"
#include "list_ref.h"
#include "numeric_ref.h"
#include "testutil.h"

static lg_ctx *ctx;
static const struct lg_cu *cu;
static uint64_t seed;

static int setup(void **state)
{
	(void)state;
	if (lg_test_gpu_ctx(&ctx) != 0)
		return -1;
	return lg_cu_get(&cu) == LG_OK ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	lg_ctx_destroy(ctx);
	return 0;
}

#define CU(call)                                                                                     \
	do {                                                                                         \
		CUresult r_ = cu->call;                                                              \
		if (r_ != CUDA_SUCCESS)                                                              \
			fail_msg("%s: CUDA error %d", #call, (int)r_);                              \
	} while (0)

/* One buffer, host and device. */
struct buf {
	size_t bytes;
	unsigned char *host;
	CUdeviceptr dev;
};

static void buf_make(struct buf *b, size_t bytes)
{
	b->bytes = bytes ? bytes : 16;
	b->host = calloc(1, b->bytes);
	assert_non_null(b->host);
	CU(cuMemAlloc(&b->dev, b->bytes));
	CU(cuMemsetD8(b->dev, 0xff, b->bytes));
}

static void buf_free(struct buf *b)
{
	cu->cuMemFree(b->dev);
	free(b->host);
}

/* n random values of scale `scale` (positive with pos), fp32 or bf16, to
 * the host and the device. */
static void buf_fill(struct buf *b, bool bf16, size_t n, double scale, bool pos, uint64_t *st)
{
	for (size_t j = 0; j < n; j++) {
		double u = (double)(lg_test_rand(st) >> 11) * 0x1p-53;
		float v = (float)((pos ? u : 2 * u - 1) * scale);
		if (bf16)
			((uint16_t *)b->host)[j] = lg_ref_f32_to_bf16(v);
		else
			((float *)b->host)[j] = v;
	}
	CU(cuMemcpyHtoD(b->dev, b->host, b->bytes));
}

/* The device copy equal to `want`, bit for bit. */
static void expect_equal(const struct buf *b, const void *want, size_t bytes, int eb, const char *name,
			 const char *json, int step)
{
	unsigned char *got = malloc(bytes ? bytes : 1);
	assert_non_null(got);
	CU(cuMemcpyDtoH(got, b->dev, bytes));
	if (memcmp(got, want, bytes)) {
		for (size_t j = 0; j < bytes; j += (size_t)eb)
			if (memcmp(got + j, (const unsigned char *)want + j, (size_t)eb)) {
				uint32_t x = 0, y = 0;
				memcpy(&x, got + j, (size_t)eb), memcpy(&y, (const unsigned char *)want + j, (size_t)eb);
				free(got);
				fail_msg("%s step %d: %s element %zu: 0x%x, the reference 0x%x (seed %llu)", json, step,
					 name, j / (size_t)eb, x, y, (unsigned long long)seed);
			}
	}
	free(got);
}

static lg_kernel *kernel(const char *json, lg_spec **sp)
{
	lg_spec *s = NULL;
	lg_kernel *k = NULL;
	if (lg_spec_parse(json, &s) != LG_OK)
		fail_msg("%s: %s", json, lg_last_error());
	if (lg_kernel_get(ctx, s, &k) != LG_OK)
		fail_msg("%s: %s", json, lg_last_error());
	*sp = s;
	return k;
}

enum { W, GR, M, V, NSTATE };

/* steps steps of spec json at rows; with fq (an fp8_quant_weight spec of
 * the same hidden, transposed), also its kernel on the stepped weight. */
static void check(const char *json, int64_t rows, int steps, const char *fq)
{
	lg_spec *s;
	lg_kernel *k = kernel(json, &s);
	struct lg_ref_adamw_hp hp = lg_ref_adamw_hp_of(s);
	bool pow2 = lg_spec_quant(s).round_scale;
	size_t n = (size_t)lg_ref_int(s, "hidden"), e = (size_t)rows * n, mb = ((size_t)rows + 127) / 128;
	size_t ns = mb * (n / 128);
	int eb[NSTATE] = {hp.param_bf16 ? 2 : 4, hp.grad_bf16 ? 2 : 4, hp.moments_bf16 ? 2 : 4,
			  hp.moments_bf16 ? 2 : 4};
	struct buf a[NSTATE], q, sc, qt, st, scal;
	for (int i = 0; i < NSTATE; i++)
		buf_make(&a[i], e * (size_t)eb[i]);
	buf_make(&q, e), buf_make(&qt, e), buf_make(&sc, ns * 4), buf_make(&st, ns * 4), buf_make(&scal, 8);
	uint8_t *rq = malloc(e ? e : 1), *rqt = malloc(e ? e : 1), *rqe = malloc(e ? e : 1);
	float *rs = malloc(ns * 4 + 4), *rst = malloc(ns * 4 + 4), *rse = malloc(ns * 4 + 4);
	assert_true(rq && rqt && rqe && rs && rst && rse);
	size_t er = (size_t)lg_ref_int(s, "expert_rows"); /* 0: the flat transposed copy */
	uint64_t r = seed ^ (uint64_t)rows * 0x9e3779b97f4a7c15ull ^ n;
	if (hp.param_bf16)
		lg_ref_fill_quant_input((uint16_t *)a[W].host, (size_t)rows, n, &r);
	else
		for (size_t j = 0; j < e; j++)
			((float *)a[W].host)[j] = lg_ref_randn(&r);
	CU(cuMemcpyHtoD(a[W].dev, a[W].host, a[W].bytes));
	buf_fill(&a[M], hp.moments_bf16, e, 0.01, false, &r);
	buf_fill(&a[V], hp.moments_bf16, e, 1e-4, true, &r);
	for (int t = 1; t <= steps; t++) {
		buf_fill(&a[GR], hp.grad_bf16, e, t == 2 ? 1e-3 : 1.0, false, &r);
		float host[2] = {(float)t, t == 3 ? 3e-4f : 1e-2f}; /* step, lr */
		CU(cuMemcpyHtoD(scal.dev, host, 8));
		if (lg_adamw_fp8_forward(k, NULL, rows, a[W].dev, a[GR].dev, a[M].dev, a[V].dev, scal.dev,
					 scal.dev + 4, q.dev, sc.dev, qt.dev, st.dev) != LG_OK)
			fail_msg("%s: %s", json, lg_last_error());
		lg_ref_adamw_step(&hp, a[W].host, a[GR].host, a[M].host, a[V].host, e, host[0], host[1]);
		lg_ref_weight_tiles(a[W].host, hp.param_bf16, (size_t)rows, n, pow2, rq, rs, rqt, rst);
		if (er)
			lg_ref_experts_transposed(rqt, rst, (size_t)rows, n, er, rqe, rse);
		CU(cuCtxSynchronize());
		expect_equal(&a[W], a[W].host, e * (size_t)eb[W], eb[W], "w", json, t);
		expect_equal(&a[M], a[M].host, e * (size_t)eb[M], eb[M], "exp_avg", json, t);
		expect_equal(&a[V], a[V].host, e * (size_t)eb[V], eb[V], "exp_avg_sq", json, t);
		expect_equal(&q, rq, e, 1, "q", json, t);
		expect_equal(&qt, er ? rqe : rqt, e, 1, "qt", json, t);
		expect_equal(&sc, rs, ns * 4, 4, "s", json, t);
		expect_equal(&st, er ? rse : rst, ns * 4, 4, "st", json, t);
	}
	if (fq) { /* fp8_quant_weight's kernel on the stepped weight: the same bytes */
		lg_spec *f;
		lg_kernel *kq = kernel(fq, &f);
		CU(cuMemsetD8(q.dev, 0, q.bytes));
		CU(cuMemsetD8(qt.dev, 0, qt.bytes));
		CU(cuMemsetD8(sc.dev, 0, sc.bytes));
		CU(cuMemsetD8(st.dev, 0, st.bytes));
		if (lg_fp8_quant_weight_forward(kq, NULL, rows, a[W].dev, q.dev, sc.dev, qt.dev, st.dev) != LG_OK)
			fail_msg("%s: %s", fq, lg_last_error());
		CU(cuCtxSynchronize());
		expect_equal(&q, rq, e, 1, "fp8_quant_weight q", json, steps);
		expect_equal(&qt, rqt, e, 1, "fp8_quant_weight qt", json, steps);
		expect_equal(&sc, rs, ns * 4, 4, "fp8_quant_weight s", json, steps);
		expect_equal(&st, rst, ns * 4, 4, "fp8_quant_weight st", json, steps);
		lg_spec_free(f);
	}
	for (int i = 0; i < NSTATE; i++)
		buf_free(&a[i]);
	buf_free(&q), buf_free(&qt), buf_free(&sc), buf_free(&st), buf_free(&scal);
	free(rq), free(rqt), free(rqe), free(rs), free(rst), free(rse);
	lg_spec_free(s);
}

#define AF(dtype, h, rest)                                                                              \
	"{\"op\": \"adamw_fp8\", \"pass\": \"forward\", \"dtype\": \"" dtype "\", \"hidden\": " #h            \
	", \"quant\": {\"round_scale\": true}" rest "}"
#define AF_EXACT(dtype, h, rest)                                                                        \
	"{\"op\": \"adamw_fp8\", \"pass\": \"forward\", \"dtype\": \"" dtype "\", \"hidden\": " #h            \
	", \"quant\": {\"round_scale\": false}" rest "}"
#define FQW(h)                                                                                       \
	"{\"op\": \"fp8_quant_weight\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": " #h \
	", \"quant\": {\"round_scale\": true}, \"transposed\": true}"
#define TRAIN ", \"grad\": \"bf16\", \"moments\": \"bf16\", \"beta2\": 0.95, \"weight_decay\": 0.1"

static void test_target(void **state)
{
	(void)state;
	/* as lingen.optim.AdamW steps them: the experts' own transposed copies */
	check(AF("bf16", 2048, TRAIN ", \"expert_rows\": 1024"), 8 * 1024, 3, FQW(2048));
	check(AF("bf16", 512, TRAIN ", \"expert_rows\": 2048"), 8 * 2048, 2, FQW(512));
	check(AF("bf16", 2048, TRAIN), 8 * 1024, 2, FQW(2048));
}

static void test_odd(void **state)
{
	(void)state;
	check(AF("bf16", 384, ""), 1000, 3, FQW(384));
	check(AF("bf16", 128, ", \"moments\": \"bf16\", \"beta1\": 0.3"), 130, 3, FQW(128));
	check(AF("bf16", 256, ", \"grad\": \"bf16\", \"weight_decay\": 0"), 1, 2, FQW(256));
	check(AF("bf16", 384, TRAIN ", \"tile\": {\"threads\": 256}"), 1000, 2, NULL);
	/* experts of 256 rows, a short last one (232 rows); one expert of 128 */
	check(AF("bf16", 384, ", \"expert_rows\": 256"), 1000, 2, FQW(384));
	check(AF("fp32", 256, ", \"expert_rows\": 128, \"tile\": {\"threads\": 256}"), 128, 2, NULL);
	check(AF_EXACT("bf16", 128, ", \"expert_rows\": 384"), 3 * 384, 2, NULL);
	check(AF_EXACT("bf16", 256, ""), 300, 2, NULL);
	check(AF_EXACT("fp32", 256, ""), 300, 3, NULL);
	check(AF("fp32", 384, ", \"grad\": \"bf16\", \"tile\": {\"threads\": 256}"), 129, 2, NULL);
	check(AF("bf16", 256, ""), 0, 1, NULL);
}

int main(void)
{
	lg_test_require_gpu("gpu_test_adamw_fp8");
	seed = lg_test_seed("gpu_test_adamw_fp8");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_target),
		cmocka_unit_test(test_odd),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
