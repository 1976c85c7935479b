/*
 * check.c - `lingen check`: run a kernel on the GPU with random inputs of a
 * given seed and poisoned outputs, and compare with the CPU reference. Also
 * where seeds come from: LINGEN_SEED, or the clock.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "env.h"
#include "error.h"
#include "gpu.h"
#include "harness.h"

uint64_t lg_check_fresh_seed(void)
{
	static uint64_t calls;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t st = ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^ (++calls << 48);
	return lg_ref_rand(&st) >> 1; /* mixed, below 2^63 */
}

lg_status lg_check_env_seed(uint64_t *seed, bool *set)
{
	const char *v = lg_env_get(LG_ENV_SEED);
	*set = v != NULL;
	if (!v)
		return LG_OK;
	char *end;
	errno = 0;
	long long n = strtoll(v, &end, 10);
	if (errno || end == v || *end || n < 0)
		return lg_fail(LG_ERR_INVALID_ARG, "LINGEN_SEED: found '%s', expected an integer from 0 to %lld", v,
			       (long long)INT64_MAX);
	*seed = (uint64_t)n;
	return LG_OK;
}

lg_status lg_check_kernel(lg_ctx *ctx, const lg_spec *s, const struct lg_check_opts *o,
			  struct lg_check_result *r)
{
	memset(r, 0, sizeof *r);
	FILE *out = o->out ? o->out : stdout;
	lg_status st = lg_cu_ensure_context(0);
	if (st != LG_OK)
		return st;
	lg_kernel *k;
	st = lg_kernel_get(ctx, s, &k);
	if (st != LG_OK)
		return st;
	r->seed = o->seed;
	struct lg_gpu_case g;
	st = lg_gpu_case_init(&g, s, o->tokens, o->sizes, o->seed, k);
	const struct lg_family *f = s->fam;
	bool dropped[LG_MAX_ARGS] = {false};
	for (int i = 0; st == LG_OK && o->no_optional && i < g.ref.n; i++)
		if ((f->sig[s->pass].args[i].role == LG_ARG_OPT_IN || f->sig[s->pass].args[i].role == LG_ARG_OPT_OUT) &&
		    k->plan.used[i] != LG_ARG_REQUIRED) {
			g.ptrs[i] = 0; /* recomputed (inputs) or not written (outputs) */
			dropped[i] = true;
		}
	if (st == LG_OK)
		st = lg_gpu_case_poison(&g);
	if (st == LG_OK)
		st = lg_gpu_case_launch(&g, k, NULL);
	if (st == LG_OK)
		st = lg_gpu_case_download(&g);
	if (st != LG_OK) {
		lg_gpu_case_free(&g);
		return st;
	}
	lg_gpu_case_check(&g, s, dropped, o->max_report ? o->max_report : 5, out, r);
	lg_gpu_case_free(&g);
	return LG_OK;
}
