/*
 * compile_all.c - compile kernels x archs in parallel (compile_all.h).
 *
 * Jobs are taken from one counter by N worker threads (the calling thread
 * is one of them). A worker creates its context for an arch on first use;
 * each job copies its cubin and plan out of the context, so the results
 * outlive the workers.
 */
#include "compile_all.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "bundle.h"  /* lg_bundle_checksum */
#include "context.h" /* lg_ctx_plan, lg_ctx_relocatable */
#include "error.h"
#include "jitlink.h"
#include "nvrtc.h"

struct run {
	struct lg_compile_set *set;
	pthread_mutex_t mu; /* guards next, done, stop and the progress lines */
	size_t next, done;
	bool stop;
};

static void job_fail(struct lg_compiled *j, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void job_fail(struct lg_compiled *j, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	j->code = code;
	if (vasprintf(&j->error, fmt, ap) < 0)
		j->error = strdup("out of memory");
	va_end(ap);
}

/* Compile (or fetch) one cubin and its plan. */
static void run_job(const struct lg_compile_set *s, lg_ctx *ctx, struct lg_compiled *j)
{
	double t0 = lg_cli_now();
	const void *cubin;
	const char *entry = lg_spec_entry(j->k->spec);
	lg_status st = lg_ctx_cubin(ctx, j->k->spec, &cubin, &j->size);
	if (st == LG_OK)
		st = lg_ctx_plan(ctx, j->k->spec, &j->plan);
	if (st != LG_OK) {
		job_fail(j, lg_cli_status_exit(st), "%s: kernels[%zu] (%s, %s): %s", j->k->path, j->k->index, entry,
			 s->archs[j->arch], lg_cli_error(st));
		return;
	}
	char *canon = lg_spec_canonical(j->k->spec);
	if (!canon) {
		job_fail(j, LG_EXIT_FAIL, "out of memory");
		return;
	}
	char *given = lg_plan_given_json(j->k->spec, &j->plan);
	if (!given) {
		free(canon);
		job_fail(j, LG_EXIT_FAIL, "out of memory");
		return;
	}
	j->checksum = lg_bundle_checksum(canon, entry, s->archs[j->arch], given, cubin, j->size);
	free(given);
	free(canon);
	if (!(j->cubin = malloc(j->size)))
		job_fail(j, LG_EXIT_FAIL, "out of memory");
	else
		memcpy(j->cubin, cubin, j->size);
	if (!j->error && s->relocatable && !j->plan.sass_ffma &&
	    lg_ctx_relocatable(ctx, j->k->spec, &j->rdc_own, &j->rdc, &j->rdc_size) != LG_OK) {
		j->rdc = NULL;
		if (!(j->rdc_error = strdup(lg_last_error())))
			job_fail(j, LG_EXIT_FAIL, "out of memory");
	}
	j->ms = 1e3 * (lg_cli_now() - t0);
}

struct worker {
	struct run *r;
	lg_ctx **ctx; /* one per arch, created on first use */
};

static lg_ctx *worker_ctx(struct worker *w, struct lg_compiled *j)
{
	if (!w->ctx[j->arch]) {
		lg_ctx_opts o = {.arch = w->r->set->archs[j->arch]};
		lg_status st = lg_ctx_create(&o, &w->ctx[j->arch]);
		if (st != LG_OK) {
			w->ctx[j->arch] = NULL;
			job_fail(j, lg_cli_ctx_exit(st), "context for %s: %s", o.arch, lg_cli_error(st));
		}
	}
	return w->ctx[j->arch];
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct run *r = w->r;
	struct lg_compile_set *s = r->set;
	for (;;) {
		pthread_mutex_lock(&r->mu);
		while (!r->stop && r->next < s->n && s->c[r->next].skipped)
			r->next++;
		struct lg_compiled *j = !r->stop && r->next < s->n ? &s->c[r->next++] : NULL;
		pthread_mutex_unlock(&r->mu);
		if (!j)
			break;
		lg_ctx *ctx = worker_ctx(w, j);
		if (ctx)
			run_job(s, ctx, j);
		pthread_mutex_lock(&r->mu);
		r->done++;
		if (j->error)
			r->stop = true;
		else
			fprintf(stderr, "[%zu/%zu] %s %s (%.1f ms)\n", r->done, s->n - s->nskipped, lg_spec_entry(j->k->spec),
				s->archs[j->arch], j->ms);
		pthread_mutex_unlock(&r->mu);
	}
	for (int i = 0; i < s->narch; i++)
		if (w->ctx[i])
			lg_ctx_destroy(w->ctx[i]);
	return NULL;
}

/* Run the jobs in n threads (the calling thread is one of them). */
static int run_workers(struct run *r, int n)
{
	struct worker *w = calloc((size_t)n, sizeof *w);
	pthread_t *tid = calloc((size_t)n, sizeof *tid);
	int rc = w && tid ? LG_EXIT_OK : lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	int started = 0;
	for (int i = 0; rc == LG_EXIT_OK && i < n; i++) {
		w[i].r = r;
		w[i].ctx = calloc((size_t)r->set->narch, sizeof *w[i].ctx);
		if (!w[i].ctx)
			rc = lg_cli_fail(LG_EXIT_FAIL, "out of memory");
		else if (i > 0 && pthread_create(&tid[i], NULL, worker_main, &w[i]) != 0)
			rc = lg_cli_fail(LG_EXIT_FAIL, "cannot start a thread");
		else if (i > 0)
			started++;
	}
	if (rc != LG_EXIT_OK) {
		pthread_mutex_lock(&r->mu);
		r->stop = true;
		pthread_mutex_unlock(&r->mu);
	} else {
		worker_main(&w[0]);
	}
	for (int i = 1; i <= started; i++)
		pthread_join(tid[i], NULL);
	for (int i = 0; w && i < n; i++)
		free(w[i].ctx);
	free(w);
	free(tid);
	return rc;
}

/* Print the first failure in full (an NVRTC log can be long) and the first
 * line of the others; the exit status of the first. */
static int report_failures(const struct lg_compile_set *s)
{
	int rc = LG_EXIT_OK;
	for (size_t i = 0; i < s->n; i++) {
		const char *e = s->c[i].error;
		if (!e)
			continue;
		int len = rc ? (int)strcspn(e, "\n") : (int)strlen(e);
		int code = lg_cli_fail(s->c[i].code, "%.*s", len, e);
		rc = rc ? rc : code;
	}
	return rc;
}

/* The arch a kernel's family is declared for when it is not arch; NULL
 * when the family runs on arch. */
static const char *only_other(const struct lg_cli_kernel *k, const char *arch)
{
	const char *only = k->spec->fam->target_only;
	return only && strcmp(only, arch) != 0 ? only : NULL;
}

/* Mark the jobs whose family does not run on their arch as skipped: every
 * such job of a model kernel; those of a spec-file kernel only when some
 * other arch runs it (else its plan() refusal is the error). */
static void mark_skipped(struct lg_compile_set *s)
{
	size_t narch = (size_t)s->narch;
	for (size_t i = 0; i < s->n; i += narch) {
		const struct lg_cli_kernel *k = s->c[i].k;
		size_t runs = 0;
		for (size_t a = 0; a < narch; a++)
			runs += !only_other(k, s->archs[a]);
		if (!k->model && runs == 0)
			continue;
		for (size_t a = 0; a < narch; a++) {
			s->c[i + a].skipped = only_other(k, s->archs[a]);
			s->nskipped += s->c[i + a].skipped != NULL;
		}
	}
}

void lg_compile_print_skipped(const struct lg_compile_set *s)
{
	for (int a = 0; a < s->narch; a++) {
		for (size_t i = 0; i < s->n; i++) {
			const struct lg_compiled *c = &s->c[i];
			if (c->arch != a || !c->skipped)
				continue;
			const struct lg_family *f = c->k->spec->fam;
			bool seen = false;
			size_t count = 0;
			for (size_t j = 0; j < s->n; j++) {
				bool same = s->c[j].arch == a && s->c[j].skipped && s->c[j].k->spec->fam == f;
				seen |= same && j < i;
				count += same;
			}
			if (!seen)
				fprintf(stderr, "skipped for %s: %zu kernel%s of %s (the family runs on %s only)\n",
					s->archs[a], count, count == 1 ? "" : "s", f->op, c->skipped);
		}
	}
}

int lg_compile_all(const struct lg_cli_specs *specs, char **archs, int narch, int jobs, bool relocatable,
		   struct lg_compile_set *out)
{
	*out = (struct lg_compile_set){
		.archs = archs, .narch = narch, .n = specs->n * (size_t)narch, .relocatable = relocatable};
	if (!out->n)
		return LG_EXIT_OK;
	if (!(out->c = calloc(out->n, sizeof *out->c)))
		return lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	for (size_t i = 0; i < out->n; i++) {
		out->c[i].k = &specs->k[i / (size_t)narch];
		out->c[i].arch = (int)(i % (size_t)narch);
	}
	mark_skipped(out);
	struct run r = {.set = out};
	pthread_mutex_init(&r.mu, NULL);
	size_t todo = out->n - out->nskipped;
	int rc = todo == 0 ? LG_EXIT_OK : run_workers(&r, jobs < 1 ? 1 : jobs > (int)todo ? (int)todo : jobs);
	pthread_mutex_destroy(&r.mu);
	return rc == LG_EXIT_OK ? report_failures(out) : rc;
}

void lg_compile_set_free(struct lg_compile_set *s)
{
	for (size_t i = 0; s->c && i < s->n; i++) {
		free(s->c[i].cubin);
		free(s->c[i].error);
		lg_blob_release(&s->c[i].rdc_own);
		free(s->c[i].rdc_error);
	}
	free(s->c);
	s->c = NULL;
	s->n = s->nskipped = 0;
}

void lg_compile_nvrtc_version(char out[32])
{
	int major, minor;
	if (lg_nvrtc_version(&major, &minor) == LG_OK)
		snprintf(out, 32, "%d.%d", major, minor);
	else
		snprintf(out, 32, "unknown");
}

/* Whether the relocatable cubins are worth compiling: nvJitLink is there
 * to link them (else a line on stderr says why the bundle gets no linked
 * module). */
static bool can_link(void)
{
	if (lg_jitlink_load() == LG_OK)
		return true;
	fprintf(stderr, "lingen: no linked module (%s): each kernel of the bundle is loaded alone\n", lg_last_error());
	lg_clear_error();
	return false;
}

/* Everything after argument parsing. */
static int compile_and_write(const char *dir, char **archs, int narch, const struct lg_cli_args *a,
			     int jobs, bool relocatable, int (*write)(const char *, const struct lg_compile_set *),
			     const char *done)
{
	double t0 = lg_cli_now();
	struct lg_cli_specs specs = {0};
	struct lg_compile_set set = {0};
	int rc = lg_cli_load_specs(a->pos, a->npos, &specs);
	if (rc == LG_EXIT_OK)
		rc = lg_cli_mkdir(dir);
	if (rc == LG_EXIT_OK)
		rc = lg_compile_all(&specs, archs, narch, jobs, relocatable && can_link(), &set);
	if (rc == LG_EXIT_OK)
		rc = write(dir, &set);
	if (rc == LG_EXIT_OK) {
		fprintf(stderr, "%s %zu cubins for %d arch%s into %s in %.1f s", done, set.n - set.nskipped, narch,
			narch == 1 ? "" : "s", dir, lg_cli_now() - t0);
		if (set.nskipped)
			fprintf(stderr, "; %zu kernel x arch skipped", set.nskipped);
		fputc('\n', stderr);
		lg_compile_print_skipped(&set);
	}
	lg_compile_set_free(&set);
	lg_cli_specs_free(&specs);
	return rc;
}

int lg_compile_cmd(const struct lg_cli_cmd *cmd, const struct lg_cli_args *a, bool relocatable,
		   int (*write)(const char *dir, const struct lg_compile_set *s), const char *done)
{
	const char *dir = a->val[LG_CA_OUT];
	char **archs = NULL;
	int narch = 0;
	long long jobs = sysconf(_SC_NPROCESSORS_ONLN);
	int rc = dir ? LG_EXIT_OK : lg_cli_usage_error(cmd, "missing -o DIR");
	if (rc == LG_EXIT_OK)
		rc = lg_cli_opt_int(cmd, a, LG_CA_JOBS, 1, 1024, &jobs);
	if (rc == LG_EXIT_OK)
		rc = lg_cli_archs(cmd, a->val[LG_CA_ARCH], &archs, &narch);
	if (rc == LG_EXIT_OK)
		rc = compile_and_write(dir, archs, narch, a, jobs < 1 ? 1 : (int)jobs, relocatable, write, done);
	lg_cli_strv_free(archs, narch);
	return rc;
}
