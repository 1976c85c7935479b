/*
 * gpu_test_adamw.c - family "adamw" on the GPU (label "gpu"): several
 * steps of the fused AdamW kernel over a list of parameters against the
 * plain-C reference (gen/ref/adamw_ref.c), bit for bit: p, m and v after
 * every step. The list: odd sizes (1 element, 8191, 8193, 3 chunks and a
 * tail), a tensor of no element, starts not 16-byte aligned (the element
 * path), chunks cut at 8192 elements and at 1000; fp32 state, bf16 params,
 * grads and moments, other betas and no weight decay; every tile the list engine
 * sweeps; an empty table. The step count and learning rate are device
 * memory, changed between launches without touching the kernel.
 * The scalars of a step come from fp64 pow on each side; the device's may
 * differ from glibc's by an fp64 ulp, which could move an fp32 scalar only
 * within 2^-29 of a rounding boundary: not met by these steps.
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

#define NT 8
static const int64_t counts[NT] = {1, 8191, 8193, 0, 3 * 8192 + 77, 4096, 513, 20000};
static const int mis[NT] = {0, 0, 0, 0, 0, 1, 3, 0}; /* elements past a 16-byte boundary */

/* One array (p, g, m or v) of every tensor, in one arena, host and device. */
struct arr {
	int eb; /* bytes an element */
	size_t off[NT], bytes;
	unsigned char *host;
	CUdeviceptr dev;
};

static void arr_make(struct arr *a, int eb)
{
	memset(a, 0, sizeof *a);
	a->eb = eb;
	size_t at = 0;
	for (int i = 0; i < NT; i++) {
		at = (at + 15) / 16 * 16 + (size_t)mis[i] * (size_t)eb;
		a->off[i] = at;
		at += (size_t)counts[i] * (size_t)eb;
	}
	a->bytes = at + 16;
	a->host = calloc(1, a->bytes);
	assert_non_null(a->host);
	CU(cuMemAlloc(&a->dev, a->bytes));
}

static void arr_free(struct arr *a)
{
	cu->cuMemFree(a->dev);
	free(a->host);
}

/* Random values of scale `scale` (positive with `pos`) into every tensor. */
static void arr_fill(struct arr *a, uint64_t *st, double scale, bool pos)
{
	for (int i = 0; i < NT; i++)
		for (int64_t j = 0; j < counts[i]; j++) {
			double u = (double)(lg_test_rand(st) >> 11) * 0x1p-53;
			float v = (float)((pos ? u : 2 * u - 1) * scale);
			unsigned char *p = a->host + a->off[i] + (size_t)j * (size_t)a->eb;
			if (a->eb == 4) {
				memcpy(p, &v, 4);
			} else {
				uint16_t h = lg_ref_f32_to_bf16(v);
				memcpy(p, &h, 2);
			}
		}
	CU(cuMemcpyHtoD(a->dev, a->host, a->bytes));
}

/* The table: every tensor cut into chunks of `chunk` elements. */
static CUdeviceptr table_make(const struct arr *a, int64_t chunk, int64_t *items)
{
	int64_t rows = 0;
	for (int i = 0; i < NT; i++)
		rows += (counts[i] + chunk - 1) / chunk;
	int64_t *t = calloc((size_t)rows * 6 + 6, sizeof *t), r = 0;
	assert_non_null(t);
	for (int i = 0; i < NT; i++)
		for (int64_t e = 0; e < counts[i]; e += chunk, r++) {
			for (int k = 0; k < 4; k++)
				t[r * 6 + k] = (int64_t)(a[k].dev + a[k].off[i] + (size_t)e * (size_t)a[k].eb);
			t[r * 6 + 4] = counts[i] - e < chunk ? counts[i] - e : chunk;
		}
	CUdeviceptr d;
	CU(cuMemAlloc(&d, (size_t)rows * 48 + 48));
	CU(cuMemcpyHtoD(d, t, (size_t)rows * 48 + 48));
	free(t);
	*items = rows;
	return d;
}

static lg_kernel *kernel(const char *json, struct lg_ref_adamw_hp *hp)
{
	lg_spec *s = NULL;
	lg_kernel *k = NULL;
	if (lg_spec_parse(json, &s) != LG_OK)
		fail_msg("%s: %s", json, lg_last_error());
	if (lg_kernel_get(ctx, s, &k) != LG_OK)
		fail_msg("%s: %s", json, lg_last_error());
	*hp = lg_ref_adamw_hp_of(s);
	lg_spec_free(s);
	return k;
}

/* Array k of the device equal to the reference's host copy, bit for bit. */
static void expect_equal(const struct arr *a, const char *name, const char *json, int step)
{
	unsigned char *got = malloc(a->bytes);
	assert_non_null(got);
	CU(cuMemcpyDtoH(got, a->dev, a->bytes));
	for (int i = 0; i < NT; i++) {
		size_t o = a->off[i], n = (size_t)counts[i] * (size_t)a->eb;
		if (!memcmp(got + o, a->host + o, n))
			continue;
		for (size_t j = 0; j < n; j += (size_t)a->eb)
			if (memcmp(got + o + j, a->host + o + j, (size_t)a->eb)) {
				uint32_t x = 0, y = 0;
				memcpy(&x, got + o + j, (size_t)a->eb), memcpy(&y, a->host + o + j, (size_t)a->eb);
				free(got);
				fail_msg("%s step %d: %s of tensor %d, element %zu: 0x%x, the reference 0x%x", json, step,
					 name, i, j / (size_t)a->eb, x, y);
			}
	}
	free(got);
}

/* steps AdamW steps of the spec json over the list, chunks of `chunk`. */
static void check(const char *json, int64_t chunk, int steps)
{
	struct lg_ref_adamw_hp hp;
	lg_kernel *k = kernel(json, &hp);
	struct arr a[4];
	arr_make(&a[0], hp.param_bf16 ? 2 : 4);
	arr_make(&a[1], hp.grad_bf16 ? 2 : 4);
	arr_make(&a[2], hp.moments_bf16 ? 2 : 4);
	arr_make(&a[3], hp.moments_bf16 ? 2 : 4);
	uint64_t st = seed ^ (uint64_t)chunk;
	arr_fill(&a[0], &st, 1.0, false);
	arr_fill(&a[2], &st, 0.01, false);
	arr_fill(&a[3], &st, 1e-4, true);
	int64_t items;
	CUdeviceptr table = table_make(a, chunk, &items), scal;
	CU(cuMemAlloc(&scal, 8));
	for (int s = 1; s <= steps; s++) {
		arr_fill(&a[1], &st, s == 2 ? 1e-3 : 1.0, false);
		float host[2] = {(float)s, s == 3 ? 3e-4f : 1e-3f}; /* step, lr */
		CU(cuMemcpyHtoD(scal, host, 8));
		if (lg_adamw(k, NULL, items, table, scal, scal + 4) != LG_OK)
			fail_msg("%s: lg_adamw: %s", json, lg_last_error());
		for (int i = 0; i < NT; i++)
			lg_ref_adamw_step(&hp, a[0].host + a[0].off[i], a[1].host + a[1].off[i],
					  a[2].host + a[2].off[i], a[3].host + a[3].off[i], (size_t)counts[i], host[0],
					  host[1]);
		CU(cuCtxSynchronize());
		expect_equal(&a[0], "p", json, s);
		expect_equal(&a[2], "m", json, s);
		expect_equal(&a[3], "v", json, s);
	}
	cu->cuMemFree(table), cu->cuMemFree(scal);
	for (int i = 0; i < 4; i++)
		arr_free(&a[i]);
}

#define FP32 "{\"op\": \"adamw\", \"pass\": \"forward\", \"dtype\": \"fp32\""

static void test_fp32(void **state)
{
	(void)state;
	check(FP32 "}", 8192, 4);
	check(FP32 ", \"weight_decay\": 0.1}", 1000, 3);
}

static void test_bf16(void **state)
{
	(void)state;
	check(FP32 ", \"grad\": \"bf16\", \"moments\": \"bf16\", \"beta1\": 0.8, \"beta2\": 0.95, "
		   "\"weight_decay\": 0.1}", 8192, 4);
	check(FP32 ", \"moments\": \"bf16\", \"beta1\": 0.3, \"eps\": 1e-6, \"weight_decay\": 0}", 8192, 3);
	check(FP32 ", \"grad\": \"bf16\"}", 1000, 3);
	/* a bf16 model's own weights and gradients (the training example) */
	check(FP32 ", \"param\": \"bf16\", \"grad\": \"bf16\", \"beta2\": 0.95}", 8192, 4);
	check(FP32 ", \"param\": \"bf16\", \"grad\": \"bf16\", \"moments\": \"bf16\", "
		   "\"weight_decay\": 0.1}", 1000, 3);
	check(FP32 ", \"param\": \"bf16\"}", 8192, 2);
}

static void test_tiles(void **state)
{
	(void)state;
	check(FP32 ", \"tile\": {\"threads\": 128, \"per_sm\": 1, \"unroll\": 1}}", 8192, 2);
	check(FP32 ", \"moments\": \"bf16\", \"tile\": {\"threads\": 1024, \"per_sm\": 2, \"unroll\": 8}}",
	      8192, 2);
	check(FP32 ", \"grad\": \"bf16\", \"tile\": {\"threads\": 512, \"per_sm\": 4, \"unroll\": 2}}", 1000, 2);
}

static void test_empty(void **state)
{
	(void)state;
	struct lg_ref_adamw_hp hp;
	lg_kernel *k = kernel(FP32 "}", &hp);
	CUdeviceptr d;
	CU(cuMemAlloc(&d, 64));
	assert_int_equal(lg_adamw(k, NULL, 0, d, d, d + 4), LG_OK);
	CU(cuCtxSynchronize());
	cu->cuMemFree(d);
}

int main(void)
{
	lg_test_require_gpu("gpu_test_adamw");
	seed = lg_test_seed("gpu_test_adamw");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fp32),
		cmocka_unit_test(test_bf16),
		cmocka_unit_test(test_tiles),
		cmocka_unit_test(test_empty),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
