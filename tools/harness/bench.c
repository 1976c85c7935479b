/*
 * bench.c - `lingen bench`: GPU time of a kernel by docs/performance.md's method.
 * Variants timed: the kernel alone, CUDA events around each launch, the L2
 * flushed (a 256 MB memset) before every repetition, the median reported;
 * and the device-to-device copy ceiling in the same process (the read
 * ceiling is read_ceiling.c's).
 */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "gpu.h"
#include "harness.h"

#define FLUSH_BYTES (256u << 20)

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

struct timer {
	const struct lg_cu *cu;
	CUevent e0, e1;
	CUdeviceptr flush;
};

static lg_status timer_init(struct timer *t)
{
	memset(t, 0, sizeof *t);
	lg_status st = lg_cu_get(&t->cu);
	if (st == LG_OK)
		st = lg_cu_ensure_context(0);
	if (st != LG_OK)
		return st;
	LG_CU_TRY(t->cu, cuEventCreate, (&t->e0, CU_EVENT_DEFAULT));
	LG_CU_TRY(t->cu, cuEventCreate, (&t->e1, CU_EVENT_DEFAULT));
	LG_CU_TRY(t->cu, cuMemAlloc, (&t->flush, FLUSH_BYTES));
	return LG_OK;
}

static void timer_free(struct timer *t)
{
	if (t->e0)
		t->cu->cuEventDestroy(t->e0);
	if (t->e1)
		t->cu->cuEventDestroy(t->e1);
	if (t->flush)
		t->cu->cuMemFree(t->flush);
}

/* Median (and min) of reps timings of fn, flushing L2 before each. */
static lg_status time_median(struct timer *t, int reps, lg_status (*fn)(void *), void *arg,
			     double *median_us, double *min_us)
{
	double *v = calloc((size_t)reps, sizeof *v);
	if (!v)
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory");
	lg_status st = LG_OK;
	for (int i = 0; i < reps && st == LG_OK; i++) {
		CUresult r = t->cu->cuMemsetD8Async(t->flush, (unsigned char)i, FLUSH_BYTES, NULL);
		if (r == CUDA_SUCCESS)
			r = t->cu->cuEventRecord(t->e0, NULL);
		if (r != CUDA_SUCCESS) {
			st = lg_cu_fail(r, "timing");
			break;
		}
		st = fn(arg);
		if (st != LG_OK)
			break;
		r = t->cu->cuEventRecord(t->e1, NULL);
		if (r == CUDA_SUCCESS)
			r = t->cu->cuEventSynchronize(t->e1);
		float ms = 0;
		if (r == CUDA_SUCCESS)
			r = t->cu->cuEventElapsedTime(&ms, t->e0, t->e1);
		if (r != CUDA_SUCCESS)
			st = lg_cu_fail(r, "timing");
		v[i] = ms * 1e3;
	}
	if (st == LG_OK) {
		qsort(v, (size_t)reps, sizeof *v, cmp_double);
		*median_us = v[reps / 2];
		*min_us = v[0];
	}
	free(v);
	return st;
}

lg_status lg_bench_time_median(int reps, lg_status (*fn)(void *), void *arg, double *median_us,
				double *min_us)
{
	struct timer t;
	double mn = 0;
	lg_status st = timer_init(&t);
	if (st == LG_OK)
		st = time_median(&t, reps, fn, arg, median_us, min_us ? min_us : &mn);
	timer_free(&t);
	return st;
}

struct copy_arg {
	const struct lg_cu *cu;
	CUdeviceptr a, b;
	size_t bytes;
};

static lg_status run_copy(void *p)
{
	struct copy_arg *c = p;
	CUresult r = c->cu->cuMemcpyDtoDAsync(c->b, c->a, c->bytes, NULL);
	return r == CUDA_SUCCESS ? LG_OK : lg_cu_fail(r, "cuMemcpyDtoDAsync");
}

lg_status lg_bench_copy_ceiling(double *gbps)
{
	struct timer t;
	lg_status st = timer_init(&t);
	struct copy_arg c = {t.cu, 0, 0, (size_t)1 << 30};
	if (st == LG_OK && t.cu->cuMemAlloc(&c.a, c.bytes) != CUDA_SUCCESS)
		st = lg_fail(LG_ERR_CUDA, "cannot allocate 2 GiB for the copy ceiling");
	if (st == LG_OK && t.cu->cuMemAlloc(&c.b, c.bytes) != CUDA_SUCCESS)
		st = lg_fail(LG_ERR_CUDA, "cannot allocate 2 GiB for the copy ceiling");
	if (st == LG_OK && t.cu->cuMemsetD8(c.a, 0x3c, c.bytes) != CUDA_SUCCESS)
		st = lg_fail(LG_ERR_CUDA, "cuMemsetD8 failed");
	double med = 0, mn = 0;
	if (st == LG_OK)
		st = run_copy(&c);
	if (st == LG_OK)
		st = time_median(&t, 20, run_copy, &c, &med, &mn);
	if (st == LG_OK)
		*gbps = 2.0 * (double)c.bytes / (med * 1e-6) / 1e9;
	if (c.a)
		t.cu->cuMemFree(c.a);
	if (c.b)
		t.cu->cuMemFree(c.b);
	timer_free(&t);
	return st;
}

struct kernel_arg {
	const lg_kernel *k;
	struct lg_gpu_case *g;
	int64_t tokens;
};

static lg_status run_kernel(void *p)
{
	struct kernel_arg *a = p;
	return lg_gpu_case_launch(a->g, a->k, NULL);
}

lg_status lg_bench_kernel(lg_ctx *ctx, const lg_spec *s, const struct lg_bench_opts *o,
			  struct lg_bench_result *r)
{
	memset(r, 0, sizeof *r);
	struct timer t;
	lg_status st = timer_init(&t);
	lg_kernel *k = NULL;
	if (st == LG_OK)
		st = lg_kernel_get(ctx, s, &k);
	struct lg_gpu_case g;
	memset(&g, 0, sizeof g);
	if (st == LG_OK)
		st = lg_gpu_case_init(&g, s, o->tokens, NULL, 12345, k);
	struct kernel_arg a = {k, &g, o->tokens};
	int warm = o->warmup > 0 ? o->warmup : 10, reps = o->reps > 0 ? o->reps : 50;
	for (int i = 0; i < warm && st == LG_OK; i++)
		st = run_kernel(&a);
	if (st == LG_OK)
		st = time_median(&t, reps, run_kernel, &a, &r->median_us, &r->min_us);
	if (st == LG_OK) {
		r->bytes = lg_bytes_moved(s, k->plan.used, g.ref.sizes);
		r->gbps = r->bytes / (r->median_us * 1e-6) / 1e9;
	}
	if (g.cu)
		lg_gpu_case_free(&g);
	timer_free(&t);
	return st;
}
