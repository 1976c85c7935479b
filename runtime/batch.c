/*
 * batch.c - many kernels of one context at once: the cubins in a pool of
 * threads (NVRTC is thread-safe per program, and a context's cache and
 * memory cache take threads: context.c), then, for lg_kernels_get, every
 * load on the calling thread (the CUDA context it has current). A model's
 * step compiled cold costs about its slowest kernel, not the sum
 * (bench/jit-load.md).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "context.h"
#include "error.h"

struct pool {
	lg_ctx *ctx;
	const lg_spec *const *specs;
	size_t n;
	atomic_size_t next;
	pthread_mutex_t mu;     /* guards the first failure below */
	size_t bad;             /* index of the first failure (n: none) */
	lg_status st;
	char msg[LG_ERROR_MAX]; /* its message, from the worker's thread */
};

static void *worker(void *arg)
{
	struct pool *p = arg;
	for (size_t i; (i = atomic_fetch_add(&p->next, 1)) < p->n;) {
		const void *cubin;
		size_t size;
		lg_status st = lg_ctx_cubin(p->ctx, p->specs[i], &cubin, &size);
		if (st == LG_OK)
			continue;
		pthread_mutex_lock(&p->mu);
		if (i < p->bad) { /* the first by index, as a serial loop would report */
			p->bad = i;
			p->st = st;
			snprintf(p->msg, sizeof p->msg, "%s", lg_last_error());
		}
		pthread_mutex_unlock(&p->mu);
	}
	return NULL;
}

lg_status lg_ctx_cubins(lg_ctx *ctx, const lg_spec *const *specs, size_t n, int jobs)
{
	lg_clear_error();
	if (!ctx || (n && !specs))
		return lg_fail(LG_ERR_INVALID_ARG, "lg_ctx_cubins: arguments must not be NULL");
	for (size_t i = 0; i < n; i++)
		if (!specs[i])
			return lg_fail(LG_ERR_INVALID_ARG, "lg_ctx_cubins: specs[%zu] is NULL", i);
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	size_t threads = jobs > 0 ? (size_t)jobs : cpus > 0 ? (size_t)cpus : 1;
	if (threads > n)
		threads = n ? n : 1;
	struct pool p = {.ctx = ctx, .specs = specs, .n = n, .bad = n};
	pthread_mutex_init(&p.mu, NULL);
	pthread_t *tid = calloc(threads, sizeof *tid);
	size_t started = 0;
	for (size_t i = 1; tid && i < threads; i++, started++)
		if (pthread_create(&tid[i], NULL, worker, &p) != 0)
			break;
	worker(&p); /* the calling thread is one of the pool (all of it without tid) */
	for (size_t i = 1; i <= started; i++)
		pthread_join(tid[i], NULL);
	free(tid);
	pthread_mutex_destroy(&p.mu);
	if (p.bad < n)
		return lg_fail(p.st, "%s", p.msg);
	return LG_OK;
}

lg_status lg_kernels_get(lg_ctx *ctx, const lg_spec *const *specs, size_t n, int jobs, lg_kernel **out)
{
	if (!out && n)
		return lg_fail(LG_ERR_INVALID_ARG, "lg_kernels_get: out must not be NULL");
	lg_status st = lg_ctx_cubins(ctx, specs, n, jobs);
	for (size_t i = 0; st == LG_OK && i < n; i++)
		st = lg_kernel_get(ctx, specs[i], &out[i]); /* the cubin from memory: load only */
	return st;
}
