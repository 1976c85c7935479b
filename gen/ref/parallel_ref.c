/*
 * parallel_ref.c - the CPU references' one parallel loop (ref.h):
 * lg_ref_parallel_rows runs fn over [0, n) in pieces on a few POSIX
 * threads. Rows are handed out in pieces from an atomic counter (rows of
 * uneven cost balance), and every row is computed by the same code as in a
 * serial run, so a reference whose rows are independent gives the same
 * bits whatever the thread count (tests/test_ref_parallel.c checks it).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "env.h"
#include "ref.h"

#define MAX_THREADS 64

static _Atomic int threads_set; /* lg_ref_threads_set; 0: the default */

void lg_ref_threads_set(int n)
{
	atomic_store(&threads_set, n > 0 ? (n > MAX_THREADS ? MAX_THREADS : n) : 0);
}

int lg_ref_threads(void)
{
	int n = atomic_load(&threads_set);
	if (n > 0)
		return n;
	const char *v = lg_env_get(LG_ENV_REF_THREADS);
	long t = v ? strtol(v, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
	return t < 1 ? 1 : t > MAX_THREADS ? MAX_THREADS : (int)t;
}

struct job {
	lg_ref_rows_fn fn;
	void *ctx;
	size_t n, piece;
	atomic_size_t next;
};

static void *worker(void *arg)
{
	struct job *j = arg;
	for (;;) {
		size_t lo = atomic_fetch_add(&j->next, j->piece);
		if (lo >= j->n)
			return NULL;
		j->fn(j->ctx, lo, j->n - lo < j->piece ? j->n : lo + j->piece);
	}
}

/* Below this much work (cost x rows) a thread is not worth its start. */
#define MIN_WORK (1u << 18)

void lg_ref_parallel_rows(size_t n, size_t cost, lg_ref_rows_fn fn, void *ctx)
{
	size_t work = n * (cost ? cost : 1), t = (size_t)lg_ref_threads();
	if (t > work / MIN_WORK)
		t = work / MIN_WORK;
	if (t > n)
		t = n;
	if (t <= 1) {
		if (n)
			fn(ctx, 0, n);
		return;
	}
	/* about 8 pieces a thread */
	struct job j = {.fn = fn, .ctx = ctx, .n = n, .piece = (n + 8 * t - 1) / (8 * t)};
	atomic_init(&j.next, 0);
	pthread_t th[MAX_THREADS];
	size_t started = 0;
	for (size_t i = 1; i < t; i++)
		if (pthread_create(&th[started], NULL, worker, &j) == 0)
			started++; /* a thread that does not start: the others do its rows */
	worker(&j);
	for (size_t i = 0; i < started; i++)
		pthread_join(th[i], NULL);
}
