/*
 * cmd_build.c - `lingen build SPEC... --arch A[,B...] -o DIR [-j N]`:
 * pre-generate a deployment bundle, DIR/<entry>.<arch>.cubin for every
 * kernel x arch plus DIR/manifest.json. Needs no GPU.
 *
 * Jobs (kernel x arch) are taken from one counter by N worker threads. Each
 * worker has its own context per arch (lg_ctx_cubin goes through the memory
 * and disk caches, then NVRTC), writes its cubin atomically and reports a
 * progress line. The manifest lists, for each cubin, the canonical spec,
 * entry, arch, file, size and XXH3-64 checksum, with the lingen and NVRTC
 * versions; it is written last, so a bundle with a manifest is complete.
 */
#include <errno.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cache.h" /* lg_mkdir_p */
#include "cli.h"
#include "nvrtc.h"

/* Version of the manifest layout, for the loaders of bundles. */
#define LG_MANIFEST_FORMAT 1

enum { O_OUT, O_ARCH, O_JOBS };
static const struct lg_cli_opt opts[] = {
	[O_OUT] = {"out", 'o', "DIR", "bundle folder (created if missing)"},
	[O_ARCH] = {"arch", 'a', "ARCH[,ARCH...]", "target archs (default $LINGEN_ARCH, else sm_90a)"},
	[O_JOBS] = {"jobs", 'j', "N", "compile in N threads (default: number of CPUs)"},
	{0},
};

struct job {
	const struct lg_cli_kernel *k;
	int arch;         /* index into build.archs */
	char *file;       /* "<entry>.<arch>.cubin" */
	size_t size;
	uint64_t checksum;
	double ms;
	char *error;      /* NULL on success */
	int code;         /* exit status of a failure */
};

struct build {
	const char *dir;
	char **archs;
	int narch;
	struct job *jobs;
	size_t njobs;
	pthread_mutex_t mu; /* guards next, done, stop and stderr progress */
	size_t next, done;
	bool stop;
};

static void job_fail(struct job *j, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void job_fail(struct job *j, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	j->code = code;
	if (vasprintf(&j->error, fmt, ap) < 0)
		j->error = strdup("out of memory");
	va_end(ap);
}

/* Compile (or fetch) one cubin and write it. */
static void run_job(struct build *b, lg_ctx *ctx, struct job *j)
{
	double t0 = lg_cli_now();
	const void *cubin;
	size_t size;
	const char *entry = lg_spec_entry(j->k->spec);
	lg_status st = lg_ctx_cubin(ctx, j->k->spec, &cubin, &size);
	if (st != LG_OK) {
		job_fail(j, lg_cli_status_exit(st), "%s (%s): %s", entry, b->archs[j->arch],
			 lg_cli_error(st));
		return;
	}
	j->size = size;
	j->checksum = XXH3_64bits(cubin, size);
	char *path = lg_cli_path(b->dir, j->file);
	if (!path)
		job_fail(j, LG_EXIT_FAIL, "out of memory");
	else if (lg_cli_write_file(path, cubin, size) != 0)
		job_fail(j, LG_EXIT_FAIL, "%s: %s", path, strerror(errno));
	free(path);
	j->ms = 1e3 * (lg_cli_now() - t0);
}

struct worker {
	struct build *b;
	lg_ctx **ctx; /* one per arch, created on first use */
};

static lg_ctx *worker_ctx(struct worker *w, struct job *j)
{
	if (!w->ctx[j->arch]) {
		lg_ctx_opts o = {.arch = w->b->archs[j->arch], .cache_dir = NULL};
		lg_status st = lg_ctx_create(&o, &w->ctx[j->arch]);
		if (st != LG_OK) {
			w->ctx[j->arch] = NULL;
			job_fail(j, lg_cli_status_exit(st), "context for %s: %s", o.arch,
				 lg_cli_error(st));
		}
	}
	return w->ctx[j->arch];
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct build *b = w->b;
	for (;;) {
		pthread_mutex_lock(&b->mu);
		struct job *j = !b->stop && b->next < b->njobs ? &b->jobs[b->next++] : NULL;
		pthread_mutex_unlock(&b->mu);
		if (!j)
			break;
		lg_ctx *ctx = worker_ctx(w, j);
		if (ctx)
			run_job(b, ctx, j);
		pthread_mutex_lock(&b->mu);
		b->done++;
		if (j->error)
			b->stop = true;
		else
			fprintf(stderr, "[%zu/%zu] %s %s (%.1f ms)\n", b->done, b->njobs,
				lg_spec_entry(j->k->spec), b->archs[j->arch], j->ms);
		pthread_mutex_unlock(&b->mu);
	}
	for (int i = 0; i < b->narch; i++)
		if (w->ctx[i])
			lg_ctx_destroy(w->ctx[i]);
	return NULL;
}

/* Run the jobs in n threads (the calling thread is one of them). */
static int run_workers(struct build *b, int n)
{
	struct worker *w = calloc((size_t)n, sizeof *w);
	pthread_t *tid = calloc((size_t)n, sizeof *tid);
	int rc = w && tid ? LG_EXIT_OK : lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	int started = 0;
	for (int i = 0; rc == LG_EXIT_OK && i < n; i++) {
		w[i].b = b;
		w[i].ctx = calloc((size_t)b->narch, sizeof *w[i].ctx);
		if (!w[i].ctx)
			rc = lg_cli_fail(LG_EXIT_FAIL, "out of memory");
		else if (i > 0 && pthread_create(&tid[i], NULL, worker_main, &w[i]) != 0)
			rc = lg_cli_fail(LG_EXIT_FAIL, "cannot start a thread");
		else if (i > 0)
			started++;
	}
	if (rc != LG_EXIT_OK) {
		pthread_mutex_lock(&b->mu);
		b->stop = true;
		pthread_mutex_unlock(&b->mu);
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

/* The manifest as JSON text (malloc'd), NULL on allocation failure. */
static char *manifest(const struct build *b)
{
	cJSON *m = cJSON_CreateObject();
	cJSON_AddNumberToObject(m, "format", LG_MANIFEST_FORMAT);
	cJSON_AddStringToObject(m, "lingen", lg_version());
	int major, minor;
	char nv[32];
	snprintf(nv, sizeof nv, "unknown");
	if (lg_nvrtc_version(&major, &minor) == LG_OK)
		snprintf(nv, sizeof nv, "%d.%d", major, minor);
	cJSON_AddStringToObject(m, "nvrtc", nv);
	cJSON *archs = cJSON_AddArrayToObject(m, "archs");
	for (int i = 0; i < b->narch; i++)
		cJSON_AddItemToArray(archs, cJSON_CreateString(b->archs[i]));
	cJSON *ks = cJSON_AddArrayToObject(m, "kernels");
	bool ok = m && archs && ks;
	for (size_t i = 0; ok && i < b->njobs; i++) {
		const struct job *j = &b->jobs[i];
		char *canon = lg_spec_canonical(j->k->spec);
		cJSON *o = cJSON_CreateObject(), *spec = canon ? cJSON_Parse(canon) : NULL;
		char sum[17];
		snprintf(sum, sizeof sum, "%016llx", (unsigned long long)j->checksum);
		free(canon);
		ok = o && spec && cJSON_AddItemToObject(o, "spec", spec);
		if (!ok) {
			cJSON_Delete(spec);
			cJSON_Delete(o);
			break;
		}
		cJSON_AddStringToObject(o, "entry", lg_spec_entry(j->k->spec));
		cJSON_AddStringToObject(o, "arch", b->archs[j->arch]);
		cJSON_AddStringToObject(o, "file", j->file);
		cJSON_AddNumberToObject(o, "size", (double)j->size);
		cJSON_AddStringToObject(o, "checksum", sum);
		cJSON_AddItemToArray(ks, o);
	}
	char *text = ok ? cJSON_Print(m) : NULL;
	cJSON_Delete(m);
	return text;
}

static int write_manifest(const struct build *b)
{
	char *text = manifest(b);
	char *path = lg_cli_path(b->dir, "manifest.json");
	int rc = LG_EXIT_OK;
	if (!text || !path)
		rc = lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	else {
		size_t n = strlen(text);
		text[n] = '\n'; /* replaces the NUL: cJSON_Print ends without a newline */
		if (lg_cli_write_file(path, text, n + 1) != 0)
			rc = lg_cli_fail(LG_EXIT_FAIL, "%s: %s", path, strerror(errno));
	}
	free(text);
	free(path);
	return rc;
}

/* One job per kernel x arch, kernel-major. */
static int plan_jobs(struct build *b, const struct lg_cli_specs *s)
{
	b->njobs = s->n * (size_t)b->narch;
	b->jobs = calloc(b->njobs, sizeof *b->jobs);
	if (!b->jobs)
		return lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	for (size_t i = 0; i < b->njobs; i++) {
		struct job *j = &b->jobs[i];
		j->k = &s->k[i / (size_t)b->narch];
		j->arch = (int)(i % (size_t)b->narch);
		if (asprintf(&j->file, "%s.%s.cubin", lg_spec_entry(j->k->spec),
			     b->archs[j->arch]) < 0) {
			j->file = NULL;
			return lg_cli_fail(LG_EXIT_FAIL, "out of memory");
		}
	}
	return LG_EXIT_OK;
}

/* Print the first failure in full (an NVRTC log can be long) and the first
 * line of the others; the exit status of the first. */
static int report_failures(const struct build *b)
{
	int rc = LG_EXIT_OK;
	for (size_t i = 0; i < b->njobs; i++) {
		const char *e = b->jobs[i].error;
		if (!e)
			continue;
		int len = rc ? (int)strcspn(e, "\n") : (int)strlen(e);
		int code = lg_cli_fail(b->jobs[i].code, "%.*s", len, e);
		rc = rc ? rc : code;
	}
	return rc;
}

/* Everything after argument parsing. */
static int build(struct build *b, const struct lg_cli_args *a, int jobs)
{
	double t0 = lg_cli_now();
	struct lg_cli_specs specs = {0};
	int rc = lg_cli_load_specs(a->pos, a->npos, &specs);
	if (rc == LG_EXIT_OK && lg_mkdir_p(b->dir) != 0)
		rc = lg_cli_fail(LG_EXIT_FAIL, "%s: %s", b->dir, strerror(errno));
	if (rc == LG_EXIT_OK)
		rc = plan_jobs(b, &specs);
	if (rc == LG_EXIT_OK)
		rc = run_workers(b, jobs > (int)b->njobs ? (int)b->njobs : jobs);
	if (rc == LG_EXIT_OK)
		rc = report_failures(b);
	if (rc == LG_EXIT_OK)
		rc = write_manifest(b);
	if (rc == LG_EXIT_OK)
		fprintf(stderr, "built %zu cubins for %d arch%s into %s in %.1f s\n", b->njobs,
			b->narch, b->narch == 1 ? "" : "s", b->dir, lg_cli_now() - t0);
	for (size_t i = 0; b->jobs && i < b->njobs; i++) {
		free(b->jobs[i].file);
		free(b->jobs[i].error);
	}
	free(b->jobs);
	lg_cli_specs_free(&specs);
	return rc;
}

static int run(const struct lg_cli_cmd *cmd, int argc, char **argv)
{
	struct lg_cli_args a;
	int rc = lg_cli_parse(cmd, argc, argv, &a);
	if (rc != LG_CLI_GO)
		return rc;
	struct build b = {.dir = a.val[O_OUT]};
	long long jobs = sysconf(_SC_NPROCESSORS_ONLN);
	rc = LG_EXIT_OK;
	if (!b.dir)
		rc = lg_cli_usage_error(cmd, "missing -o DIR");
	if (rc == LG_EXIT_OK && a.val[O_JOBS])
		rc = lg_cli_int(cmd, "jobs", a.val[O_JOBS], 1, 1024, &jobs);
	if (rc == LG_EXIT_OK)
		rc = lg_cli_archs(cmd, a.val[O_ARCH], &b.archs, &b.narch);
	if (rc == LG_EXIT_OK) {
		pthread_mutex_init(&b.mu, NULL);
		rc = build(&b, &a, jobs < 1 ? 1 : (int)jobs);
		pthread_mutex_destroy(&b.mu);
	}
	lg_cli_strv_free(b.archs, b.narch);
	free(a.pos);
	return rc;
}

const struct lg_cli_cmd lg_cmd_build = {
	.name = "build",
	.synopsis = "SPEC... --arch ARCH[,ARCH...] -o DIR [-j N]",
	.summary = "pre-generate cubins into a deployment bundle (manifest + cubins)",
	.details = "Writes DIR/<entry>.<arch>.cubin for every kernel and arch, then\n"
		   "DIR/manifest.json (canonical spec, entry, arch, file, size and XXH3-64\n"
		   "checksum of each cubin; lingen and NVRTC versions). Needs NVRTC on a\n"
		   "cache miss, never a GPU. Cubins go through the disk cache.\n",
	.opts = opts,
	.min_pos = 1,
	.max_pos = -1,
	.run = run,
};
