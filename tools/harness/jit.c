/*
 * jit.c - `lingen bench --jit`: the JIT itself, by docs/performance.md's table.
 *
 * Parts, in the order they run (one process, nothing else loads NVRTC first):
 *   1. compile: for each kernel, lg_generate_for (timed) then lg_nvrtc_compile
 *      (timed); kernel 0's compile is the first of the process and includes
 *      NVRTC's start-up (dlopen, builtins), the others are warm.
 *   2. cache: a fresh folder (mkdtemp) is filled through one context, then
 *      `reps` times, each time in NEW contexts on that folder:
 *        read = lg_ctx_cubin (plan, key hash, file read, checksum);
 *        load = lg_kernel_get with the cubin already in memory
 *               (cuLibraryLoadData + entry resolution, occupancy queries);
 *        get  = lg_kernel_get from the disk cache: read + load in one call.
 *      The first repetition is a warm-up and is dropped. Median per kernel.
 *   3. launch: the first kernel, `launches` lg_kernel_launch calls (by default
 *      as many as run 0.2 s on the GPU, 256 to 20000) versus the
 *      same cuLaunchKernel calls made directly (same CUkernel, params and
 *      geometry and tensor maps, precomputed), on one stream, synchronised before and after
 *      each loop; median of `loops` loops, interleaved. Two ways:
 *        batched: a stream sync every BATCH launches, outside the timed
 *                 spans, so the driver's launch queue never fills and the
 *                 host cost is measured even when the kernel runs longer
 *                 than a launch takes to issue;
 *        back to back: no sync at all, as an application would; once the
 *                 queue is full this measures GPU time, not host cost.
 * Parts 1-2 need NVRTC only; 2's load column and 3 need a GPU and are
 * skipped (with the reason) without one.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "context.h"
#include "error.h"
#include "generate.h"
#include "gpu.h"
#include "harness.h"
#include "log.h"
#include "nvrtc.h"

#define BATCH 128
/* launches a timed loop, unless given: LOOP_GPU_S of the kernel's GPU time,
 * at least MIN_LAUNCHES (two batches), at most MAX_LAUNCHES */
#define LOOP_GPU_S 0.2
#define MIN_LAUNCHES 256
#define MAX_LAUNCHES 20000

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Median of v[0..n-1] (sorts v); -1 when n is 0. */
static double median(double *v, size_t n)
{
	if (n == 0)
		return -1;
	qsort(v, n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The q-quantile (0..1, nearest rank) of v[0..n-1] (sorts v); -1 when n is 0. */
double lg_quantile(double *v, size_t n, double q)
{
	if (n == 0)
		return -1;
	qsort(v, n, sizeof *v, cmp_double);
	size_t i = (size_t)(q * (double)n + 0.999999);
	return v[i == 0 ? 0 : i > n ? n - 1 : i - 1];
}

/* Quantile q of one field over the kernels from `from`, skipping negative
 * (not measured). */
static double quantile_of(const struct lg_jit_result *r, size_t off, size_t from, double q)
{
	double *v = calloc(r->n + 1, sizeof *v);
	if (!v)
		return -1;
	size_t m = 0;
	for (size_t i = from; i < r->n; i++) {
		double x = *(const double *)((const char *)&r->k[i] + off);
		if (x >= 0)
			v[m++] = x;
	}
	double res = lg_quantile(v, m, q);
	free(v);
	return res;
}

/* Median of one field over the kernels, skipping negative (not measured). */
static double median_of(const struct lg_jit_result *r, size_t off, size_t from)
{
	double *v = calloc(r->n + 1, sizeof *v);
	if (!v)
		return -1;
	size_t m = 0;
	for (size_t i = from; i < r->n; i++) {
		double x = *(const double *)((const char *)&r->k[i] + off);
		if (x >= 0)
			v[m++] = x;
	}
	double med = median(v, m);
	free(v);
	return med;
}

/* ------------------------------------------------------------ compile */

static lg_status compile_one(const struct lg_target *t, struct lg_jit_kernel *k)
{
	struct lg_plan plan;
	char *src = NULL;
	size_t len = 0;
	double t0 = lg_now();
	lg_status st = lg_generate_for(k->spec, t, &plan, &src, &len);
	double t1 = lg_now();
	if (st != LG_OK)
		return st;
	void *cubin = NULL;
	st = lg_nvrtc_compile(src, k->spec->entry, t->name, &cubin, &k->cubin_bytes, NULL);
	double t2 = lg_now();
	free(src);
	free(cubin);
	k->gen_ms = (t1 - t0) * 1e3;
	k->compile_ms = (t2 - t1) * 1e3;
	return st;
}

static lg_status part_compile(struct lg_jit_result *r)
{
	struct lg_target t;
	if (!lg_target_parse(r->arch, &t))
		return lg_fail(LG_ERR_INVALID_ARG, "unknown arch '%s'", r->arch);
	for (size_t i = 0; i < r->n; i++) {
		lg_status st = compile_one(&t, &r->k[i]);
		if (st != LG_OK)
			return st;
	}
	r->first_compile_ms = r->k[0].compile_ms;
	r->compile_median_ms = median_of(r, offsetof(struct lg_jit_kernel, compile_ms), 1);
	r->compile_p90_ms = quantile_of(r, offsetof(struct lg_jit_kernel, compile_ms), 1, 0.9);
	r->step_serial_ms = 0;
	for (size_t i = 0; i < r->n; i++)
		r->step_serial_ms += r->k[i].gen_ms + r->k[i].compile_ms;
	if (r->n == 1) { /* no second kernel: a warm recompile of the first */
		struct lg_jit_kernel again = r->k[0];
		lg_status st = compile_one(&t, &again);
		if (st != LG_OK)
			return st;
		r->compile_median_ms = again.compile_ms;
	}
	r->gen_median_ms = median_of(r, offsetof(struct lg_jit_kernel, gen_ms), 0);
	return lg_nvrtc_version(&r->nvrtc_major, &r->nvrtc_minor);
}

/* --------------------------------------------------------- whole step */

/* Every kernel generated and compiled again, by lg_ctx_cubins in `jobs`
 * threads (the library's batch get) on a context without a disk cache,
 * wall time. NVRTC is loaded by then (part 1). */
static lg_status part_step(struct lg_jit_result *r, int jobs)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	r->jobs = jobs > 0 ? jobs : cpus > 0 ? (int)cpus : 1;
	if ((size_t)r->jobs > r->n)
		r->jobs = (int)r->n;
	const lg_spec **specs = calloc(r->n, sizeof *specs);
	if (!specs)
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory");
	for (size_t i = 0; i < r->n; i++)
		specs[i] = r->k[i].spec;
	lg_ctx *c = NULL;
	lg_ctx_opts o = {.arch = r->arch, .cache_dir = "off", .tuning = "off"}; /* the sources of part 1 */
	lg_status st = lg_ctx_create(&o, &c);
	double t0 = lg_now();
	if (st == LG_OK)
		st = lg_ctx_cubins(c, specs, r->n, r->jobs);
	r->step_parallel_ms = (lg_now() - t0) * 1e3;
	lg_ctx_destroy(c);
	free(specs);
	return st;
}

/* -------------------------------------------------------------- cache */

static lg_status new_ctx(const struct lg_jit_result *r, const char *dir, lg_ctx **c)
{
	lg_ctx_opts o = {.arch = r->arch, .cache_dir = dir};
	return lg_ctx_create(&o, c);
}

/* One repetition: fresh contexts; times into v[i * reps + rep] per kernel. */
static lg_status cache_rep(const struct lg_jit_result *r, const char *dir, int rep, int reps,
			   double *read, double *load, double *get)
{
	lg_ctx *c = NULL;
	lg_status st = new_ctx(r, dir, &c);
	for (size_t i = 0; i < r->n && st == LG_OK; i++) {
		const void *cubin;
		size_t size;
		lg_kernel *k;
		double t0 = lg_now();
		st = lg_ctx_cubin(c, r->k[i].spec, &cubin, &size);
		double t1 = lg_now();
		read[i * (size_t)reps + (size_t)rep] = (t1 - t0) * 1e6;
		if (st != LG_OK || !r->gpu)
			continue;
		st = lg_kernel_get(c, r->k[i].spec, &k);
		load[i * (size_t)reps + (size_t)rep] = (lg_now() - t1) * 1e6;
	}
	lg_ctx_destroy(c);
	if (st != LG_OK || !r->gpu)
		return st;
	c = NULL;
	st = new_ctx(r, dir, &c);
	for (size_t i = 0; i < r->n && st == LG_OK; i++) {
		lg_kernel *k;
		double t0 = lg_now();
		st = lg_kernel_get(c, r->k[i].spec, &k);
		get[i * (size_t)reps + (size_t)rep] = (lg_now() - t0) * 1e6;
	}
	lg_ctx_destroy(c);
	return st;
}

/* Fill the folder, check every kernel is a disk hit, then time reps + 1
 * repetitions (the first dropped). */
static lg_status cache_measure(struct lg_jit_result *r, const char *dir, int reps)
{
	lg_ctx *c = NULL;
	lg_status st = new_ctx(r, dir, &c);
	for (size_t i = 0; i < r->n && st == LG_OK; i++) {
		const void *cubin;
		size_t size;
		st = lg_ctx_cubin(c, r->k[i].spec, &cubin, &size);
	}
	lg_ctx_destroy(c);
	if (st != LG_OK)
		return st;
	lg_cache *cache = lg_cache_open(dir, 0);
	struct lg_cache_entry *list = NULL;
	size_t nlist = 0;
	st = cache ? lg_cache_list(cache, &list, &nlist) : lg_fail(LG_ERR_NO_MEMORY, "out of memory");
	lg_cache_close(cache);
	free(list);
	if (st != LG_OK)
		return st;
	if (nlist < r->n)
		return lg_fail(LG_ERR_IO, "cache folder %s holds %zu entries after filling, expected %zu",
			       dir, nlist, r->n);

	size_t cells = r->n * (size_t)(reps + 1);
	double *read = calloc(cells, sizeof *read), *load = calloc(cells, sizeof *load);
	double *get = calloc(cells, sizeof *get), *v = calloc((size_t)reps + 1, sizeof *v);
	if (!read || !load || !get || !v)
		st = lg_fail(LG_ERR_NO_MEMORY, "out of memory");
	for (int rep = 0; rep <= reps && st == LG_OK; rep++)
		st = cache_rep(r, dir, rep, reps + 1, read, load, get);
	for (size_t i = 0; i < r->n && st == LG_OK; i++) {
		double *rows[3] = {read, load, get};
		double *dst[3] = {&r->k[i].read_us, &r->k[i].load_us, &r->k[i].get_us};
		for (int q = 0; q < (r->gpu ? 3 : 1); q++) {
			memcpy(v, rows[q] + i * (size_t)(reps + 1) + 1, (size_t)reps * sizeof *v);
			*dst[q] = median(v, (size_t)reps);
		}
	}
	free(read);
	free(load);
	free(get);
	free(v);
	if (st != LG_OK)
		return st;
	r->read_median_us = median_of(r, offsetof(struct lg_jit_kernel, read_us), 0);
	r->load_median_us = median_of(r, offsetof(struct lg_jit_kernel, load_us), 0);
	r->get_median_us = median_of(r, offsetof(struct lg_jit_kernel, get_us), 0);
	return LG_OK;
}

static lg_status part_cache(struct lg_jit_result *r, int reps)
{
	const char *tmp = getenv("TMPDIR");
	char *dir = NULL;
	if (asprintf(&dir, "%s/lingen-jit-XXXXXX", tmp && *tmp ? tmp : "/tmp") < 0)
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory");
	if (!mkdtemp(dir)) {
		lg_status st = lg_fail(LG_ERR_IO, "mkdtemp %s: %s", dir, strerror(errno));
		free(dir);
		return st;
	}
	lg_status st = cache_measure(r, dir, reps);
	lg_cache *cache = lg_cache_open(dir, 0);
	if (cache)
		lg_cache_clear(cache, NULL);
	lg_cache_close(cache);
	rmdir(dir);
	free(dir);
	return st;
}

/* ------------------------------------------------------------- launch */

struct launcher {
	const struct lg_cu *cu;
	const lg_kernel *k;
	CUstream stream;
	CUevent e0, e1;
	const int64_t *sizes;
	int nsizes;
	const lg_dptr *ptrs;
	int nptrs;
	void *params[LG_MAX_ARGS + LG_MAX_SIZES + 1 + LG_MAX_TMAPS];
	CUtensorMap maps[LG_MAX_TMAPS]; /* encoded once (lg_kernel_run: every launch) */
	int64_t part;
	struct lg_launch_dim d[LG_MAX_ENTRIES];
};

/* The raw baseline: exactly the driver calls lg_kernel_launch makes. */
static lg_status raw_launch(struct launcher *l)
{
	const struct lg_kernel *k = l->k;
	for (int e = 0; e < k->plan.nentries; e++) {
		const struct lg_launch_dim *d = &l->d[e];
		l->part = k->plan.part[e];
		CUresult r = l->cu->cuLaunchKernel((CUfunction)k->fn[e], d->grid[0], d->grid[1], d->grid[2],
						   d->block[0], d->block[1], d->block[2], d->smem,
						   l->stream, (void **)l->params, NULL);
		if (r != CUDA_SUCCESS)
			return lg_cu_fail(r, "cuLaunchKernel");
	}
	return LG_OK;
}

static lg_status one_launch(struct launcher *l, bool raw)
{
	if (raw)
		return raw_launch(l);
	return lg_kernel_run(l->k, (lg_stream)l->stream, l->sizes, l->nsizes, l->ptrs, l->nptrs);
}

/* Host seconds of n launches, a stream sync (untimed) every `batch`;
 * *gpu_us: GPU time per launch from events around the loop. */
static lg_status time_loop(struct launcher *l, bool raw, int n, int batch, double *host_us,
			   double *gpu_us)
{
	LG_CU_TRY(l->cu, cuStreamSynchronize, (l->stream));
	LG_CU_TRY(l->cu, cuEventRecord, (l->e0, l->stream));
	double host = 0, t = lg_now();
	for (int i = 0; i < n; i++) {
		if (i && i % batch == 0) {
			host += lg_now() - t;
			LG_CU_TRY(l->cu, cuStreamSynchronize, (l->stream));
			t = lg_now();
		}
		lg_status st = one_launch(l, raw);
		if (st != LG_OK)
			return st;
	}
	host += lg_now() - t;
	LG_CU_TRY(l->cu, cuEventRecord, (l->e1, l->stream));
	LG_CU_TRY(l->cu, cuStreamSynchronize, (l->stream));
	float ms = 0;
	LG_CU_TRY(l->cu, cuEventElapsedTime, (&ms, l->e0, l->e1));
	*host_us = host * 1e6 / n;
	*gpu_us = (double)ms * 1e3 / n;
	return LG_OK;
}

/* The four loops, interleaved, loops times; medians into *o. */
static lg_status launch_loops(struct launcher *l, struct lg_jit_launch *o)
{
	size_t nl = (size_t)o->loops;
	double *v = calloc(5 * nl, sizeof *v);
	if (!v)
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory");
	double gpu = 0;
	lg_status st = LG_OK;
	for (int w = 0; w < 200 && st == LG_OK; w++) /* warm-up: both paths */
		st = one_launch(l, w & 1);
	if (st == LG_OK && o->launches == 0) {
		/* launches a loop: as many as take LOOP_GPU_S of GPU time, within
		 * [MIN_LAUNCHES, MAX_LAUNCHES] (a 1 ms GEMM made the fixed 20000 a
		 * loop run for minutes) */
		double host_us, gpu_us = 0;
		st = time_loop(l, false, 20, 20, &host_us, &gpu_us);
		double n = gpu_us > 0 ? LOOP_GPU_S * 1e6 / gpu_us : MAX_LAUNCHES;
		o->launches = n > MAX_LAUNCHES ? MAX_LAUNCHES : n < MIN_LAUNCHES ? MIN_LAUNCHES : (int)n;
	}
	for (size_t i = 0; i < nl && st == LG_OK; i++) {
		st = time_loop(l, false, o->launches, o->batch, &v[i], &gpu);
		if (st == LG_OK)
			st = time_loop(l, true, o->launches, o->batch, &v[nl + i], &gpu);
		if (st == LG_OK)
			st = time_loop(l, false, o->launches, o->launches, &v[2 * nl + i], &gpu);
		if (st == LG_OK)
			st = time_loop(l, true, o->launches, o->launches, &v[3 * nl + i], &v[4 * nl + i]);
	}
	if (st == LG_OK) {
		o->lg_us = median(v, nl);
		o->raw_us = median(v + nl, nl);
		o->lg_b2b_us = median(v + 2 * nl, nl);
		o->raw_b2b_us = median(v + 3 * nl, nl);
		o->gpu_us = median(v + 4 * nl, nl);
	}
	free(v);
	return st;
}

static lg_status launch_setup(struct launcher *l, struct lg_gpu_case *g, const lg_kernel *k)
{
	l->k = k;
	l->cu = k->cu;
	l->sizes = g->ref.sizes;
	l->nsizes = k->nsizes;
	l->ptrs = g->ptrs;
	l->nptrs = g->ref.n;
	if (l->nptrs != k->nargs || k->plan.nentries > LG_MAX_ENTRIES)
		return lg_fail(LG_ERR_INVALID_ARG, "%s: %d buffers for %d arguments", k->plan.entry[0],
			       l->nptrs, k->nargs);
	for (int i = 0; i < l->nptrs; i++)
		l->params[i] = (void *)&l->ptrs[i];
	for (int i = 0; i < l->nsizes; i++)
		l->params[l->nptrs + i] = (void *)&l->sizes[i];
	l->params[l->nptrs + l->nsizes] = (void *)&l->part;
	for (int i = 0; i < k->plan.ntmaps; i++) {
		lg_status st = lg_kernel_tmap(k, &k->plan.tmap[i], l->sizes, l->ptrs, &l->maps[i]);
		if (st != LG_OK)
			return st;
		l->params[l->nptrs + l->nsizes + 1 + i] = (void *)&l->maps[i];
	}
	for (int e = 0; e < k->plan.nentries; e++)
		k->fam->geometry(&k->plan, e, l->sizes, &l->d[e]);
	LG_CU_TRY(l->cu, cuStreamCreate, (&l->stream, CU_STREAM_NON_BLOCKING));
	LG_CU_TRY(l->cu, cuEventCreate, (&l->e0, CU_EVENT_DEFAULT));
	LG_CU_TRY(l->cu, cuEventCreate, (&l->e1, CU_EVENT_DEFAULT));
	return LG_OK;
}

static lg_status part_launch(struct lg_jit_result *r, const struct lg_jit_opts *o)
{
	struct lg_jit_launch *L = &r->launch;
	L->spec = r->k[0].spec;
	L->tokens = o->tokens > 0 ? o->tokens : 8192;
	L->launches = o->launches > 0 ? o->launches : 0; /* 0: from the kernel's time (launch_loops) */
	L->loops = o->loops > 0 ? o->loops : 5;
	L->batch = BATCH;
	lg_ctx *c = NULL;
	lg_kernel *k = NULL;
	struct lg_gpu_case g;
	struct launcher l;
	memset(&g, 0, sizeof g);
	memset(&l, 0, sizeof l);
	lg_status st = new_ctx(r, "off", &c); /* leave the user's cache alone */
	if (st == LG_OK)
		st = lg_kernel_get(c, L->spec, &k);
	if (st == LG_OK)
		st = lg_gpu_case_init(&g, L->spec, L->tokens, NULL, 12345, k);
	if (st == LG_OK)
		st = launch_setup(&l, &g, k);
	if (st == LG_OK) {
		L->entries = k->plan.nentries;
		st = launch_loops(&l, L);
	}
	L->ran = st == LG_OK;
	if (l.stream) {
		l.cu->cuStreamSynchronize(l.stream);
		l.cu->cuStreamDestroy(l.stream);
	}
	if (l.e0)
		l.cu->cuEventDestroy(l.e0);
	if (l.e1)
		l.cu->cuEventDestroy(l.e1);
	if (g.cu)
		lg_gpu_case_free(&g);
	lg_ctx_destroy(c);
	return st;
}

/* -------------------------------------------------------------- entry */

/* A GPU is there when the driver opens, a device answers and its primary
 * context can be made current; the arch is then the device's. */
static void probe_gpu(struct lg_jit_result *r, const char *fallback)
{
	char arch[16];
	lg_status st = lg_cu_device_arch(arch);
	if (st == LG_OK)
		st = lg_cu_ensure_context(0);
	r->gpu = st == LG_OK;
	if (r->gpu) {
		snprintf(r->arch, sizeof r->arch, "%s", arch);
		return;
	}
	const char *why = lg_last_error();
	snprintf(r->no_gpu, sizeof r->no_gpu, "%s", *why ? why : lg_status_str(st));
	snprintf(r->arch, sizeof r->arch, "%s", fallback ? fallback : "sm_90a");
}

lg_status lg_jit_bench(const lg_spec *const *specs, size_t n, const struct lg_jit_opts *o,
		       struct lg_jit_result *r)
{
	memset(r, 0, sizeof *r);
	if (!specs || !n || !o)
		return lg_fail(LG_ERR_INVALID_ARG, "lg_jit_bench: no kernels");
	r->k = calloc(n, sizeof *r->k);
	if (!r->k)
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory");
	r->n = n;
	for (size_t i = 0; i < n; i++) {
		r->k[i] = (struct lg_jit_kernel){.spec = specs[i], .gen_ms = -1, .compile_ms = -1,
						 .read_us = -1, .load_us = -1, .get_us = -1};
	}
	r->first_compile_ms = r->compile_median_ms = r->gen_median_ms = -1;
	r->compile_p90_ms = r->step_serial_ms = r->step_parallel_ms = -1;
	r->read_median_us = r->load_median_us = r->get_median_us = -1;
	probe_gpu(r, o->arch);
	lg_status st = part_compile(r);
	if (st == LG_OK)
		st = part_step(r, o->jobs);
	if (st == LG_OK)
		st = part_cache(r, o->reps > 0 ? o->reps : 20);
	if (st == LG_OK && r->gpu)
		st = part_launch(r, o);
	return st;
}

void lg_jit_result_free(struct lg_jit_result *r)
{
	free(r->k);
	r->k = NULL;
	r->n = 0;
}
