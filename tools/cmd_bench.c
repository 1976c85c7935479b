/*
 * cmd_bench.c - `lingen bench SPEC... [--tokens N[,N...]] [--reps R]
 * [--json]`: time each kernel by docs/performance.md's method (L2 flushed, median of
 * R repetitions, CUDA events) and relate it to the device-to-device copy
 * ceiling measured once in the same run. Prints a table, or with --json an
 * array of objects (the form committed under bench/). Needs a GPU.
 *
 * With --odd the token counts are 6001 and 8191 (or those of --tokens), each
 * followed by its aligned neighbour (the count rounded up to 128), and each
 * odd row says its time over the neighbour's (docs/performance.md: at most
 * 1.05; per-expert kernels' counts are the reference case's, random).
 *
 * `lingen bench --jit SPEC... [--tokens N] [--reps R] [--json]`: the JIT
 * itself (tools/harness/jit.c): NVRTC compile (first and warm), disk-cache
 * hit in a warm process (read, load, both), host cost of one launch versus
 * raw cuLaunchKernel. Without a GPU the compile and cache-read parts still
 * run; load and launch are skipped with a note.
 *
 * `lingen bench --load SPEC|MODEL... [--bundle DIR] [--json]`: run in a new
 * process, the time to every kernel loaded (warm disk cache, or a bundle):
 * driver, primary context, then lingen's part (tools/harness/load.c).
 */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "harness/harness.h"

enum { O_TOKENS, O_REPS, O_JSON, O_JIT, O_LOAD, O_BUNDLE, O_JOBS, O_ODD };
static const struct lg_cli_opt opts[] = {
	[O_TOKENS] = {"tokens", 't', "N[,N...]", "token counts (default 8192; --jit: one, for the launch part)"},
	[O_REPS] = {"reps", 'r', "R", "timed repetitions (default 50; --jit: fresh contexts, default 20)"},
	[O_JSON] = {"json", 0, NULL, "print JSON instead of a table"},
	[O_JIT] = {"jit", 0, NULL, "time the JIT itself: compile, cache hit, launch host cost"},
	[O_LOAD] = {"load", 0, NULL, "time this new process to every kernel loaded (warm cache or --bundle)"},
	[O_BUNDLE] = {"bundle", 'b', "DIR", "with --load: load from this deployment bundle"},
	[O_JOBS] = {"jobs", 'j', "N", "with --jit: compile threads of the whole-step part (default: CPUs)"},
	[O_ODD] = {"odd", 0, NULL, "odd token counts (default 6001, 8191), each beside its count rounded up to 128"},
	{0},
};

struct row {
	const lg_spec *spec;
	int64_t tokens;
	struct lg_bench_result r;
	double pct; /* floor time at the copy ceiling / median time, in % */
	double vs_aligned; /* --odd: median / the next row's (its aligned neighbour); 0: none */
};

/* The ceilings of this run: [0] device-to-device copy, [1] DRAM read. */
enum { COPY, READ };

static void print_table(const struct row *rows, size_t n, const double *ceil, const char *arch)
{
	printf("%-44s %8s %10s %9s %8s %10s\n", "kernel", "tokens", "median us", "GB/s", "% copy", "x aligned");
	for (size_t i = 0; i < n; i++) {
		printf("%-44s %8lld %10.2f %9.1f %7.1f%%", lg_spec_entry(rows[i].spec), (long long)rows[i].tokens,
		       rows[i].r.median_us, rows[i].r.gbps, rows[i].pct);
		if (rows[i].vs_aligned > 0)
			printf(" %10.3f\n", rows[i].vs_aligned);
		else
			printf(" %10s\n", "");
	}
	printf("copy ceiling %.0f GB/s, plain read stream %.0f GB/s on %s\n", ceil[COPY], ceil[READ], arch);
}

static int print_json(const struct row *rows, size_t n, const double *ceil, const char *arch)
{
	cJSON *a = cJSON_CreateArray();
	bool ok = a != NULL;
	for (size_t i = 0; ok && i < n; i++) {
		const struct row *w = &rows[i];
		char *canon = lg_spec_canonical(w->spec);
		cJSON *o = cJSON_CreateObject(), *spec = canon ? cJSON_Parse(canon) : NULL;
		free(canon);
		ok = o && spec && cJSON_AddItemToObject(o, "spec", spec);
		if (!ok) {
			cJSON_Delete(spec);
			cJSON_Delete(o);
			break;
		}
		cJSON_AddStringToObject(o, "kernel", lg_spec_entry(w->spec));
		cJSON_AddStringToObject(o, "arch", arch);
		cJSON_AddNumberToObject(o, "tokens", (double)w->tokens);
		cJSON_AddNumberToObject(o, "median_us", w->r.median_us);
		cJSON_AddNumberToObject(o, "min_us", w->r.min_us);
		cJSON_AddNumberToObject(o, "bytes", w->r.bytes);
		cJSON_AddNumberToObject(o, "gbps", w->r.gbps);
		cJSON_AddNumberToObject(o, "copy_gbps", ceil[COPY]);
		cJSON_AddNumberToObject(o, "read_gbps", ceil[READ]);
		cJSON_AddNumberToObject(o, "pct_copy", w->pct);
		if (w->vs_aligned > 0) {
			cJSON_AddNumberToObject(o, "aligned_tokens", (double)w[1].tokens);
			cJSON_AddNumberToObject(o, "vs_aligned", w->vs_aligned);
		}
		cJSON_AddStringToObject(o, "lingen", lg_version());
		cJSON_AddItemToArray(a, o);
	}
	char *text = ok ? cJSON_Print(a) : NULL;
	cJSON_Delete(a);
	if (!text)
		return lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	printf("%s\n", text);
	free(text);
	return LG_EXIT_OK;
}

/* Time every kernel at every token count into rows[]. */
static int bench_all(lg_ctx *ctx, const struct lg_cli_specs *s, const int64_t *tokens, int nt,
		     int reps, double copy_gbps, struct row *rows)
{
	size_t k = 0;
	for (size_t i = 0; i < s->n; i++) {
		for (int t = 0; t < nt; t++, k++) {
			struct lg_bench_opts o = {.tokens = tokens[t], .warmup = 10, .reps = reps};
			struct row *w = &rows[k];
			w->spec = s->k[i].spec;
			w->tokens = tokens[t];
			const char *entry = lg_spec_entry(w->spec);
			lg_status st = lg_bench_kernel(ctx, w->spec, &o, &w->r);
			if (st != LG_OK)
				return lg_cli_fail(LG_EXIT_FAIL, "%s tokens=%lld: %s", entry,
						   (long long)tokens[t], lg_cli_error(st));
			double floor_us = w->r.bytes / (copy_gbps * 1e3);
			w->pct = w->r.median_us > 0 ? 100.0 * floor_us / w->r.median_us : 0;
		}
	}
	/* an odd count followed by its aligned neighbour (odd_tokens) */
	for (size_t i = 0; i + 1 < k; i++) {
		struct row *w = &rows[i];
		if (w->tokens % 128 && w[1].spec == w->spec && w[1].tokens == (w->tokens + 127) / 128 * 128 &&
		    w[1].r.median_us > 0)
			w->vs_aligned = w->r.median_us / w[1].r.median_us;
	}
	return LG_EXIT_OK;
}

/* --odd: the counts (6001 and 8191 without --tokens), each not a multiple
 * of 128 followed by its count rounded up to 128. */
static int odd_tokens(const struct lg_cli_cmd *cmd, const char *text, int64_t **tokens, int *nt)
{
	int rc = lg_cli_tokens(cmd, text ? text : "6001,8191", 8192, tokens, nt);
	if (rc != LG_EXIT_OK)
		return rc;
	int64_t *t = calloc(2 * (size_t)*nt, sizeof *t);
	if (!t)
		return lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	int n = 0;
	for (int i = 0; i < *nt; i++) {
		int64_t v = (*tokens)[i];
		t[n++] = v;
		if (v % 128)
			t[n++] = (v + 127) / 128 * 128;
	}
	free(*tokens);
	*tokens = t;
	*nt = n;
	return LG_EXIT_OK;
}

static int bench(const struct lg_cli_args *a, const int64_t *tokens, int nt, int reps)
{
	struct lg_cli_specs specs = {0};
	lg_ctx *ctx = NULL;
	struct row *rows = NULL;
	double ceil[2] = {0, 0};
	int rc = lg_cli_load_specs(a->pos, a->npos, &specs);
	if (rc == LG_EXIT_OK)
		rc = lg_cli_gpu_ctx("bench", &ctx);
	if (rc == LG_EXIT_OK) {
		lg_status st = lg_bench_copy_ceiling(&ceil[COPY]);
		if (st == LG_OK && ceil[COPY] > 0)
			st = lg_bench_read_ceiling(&ceil[READ]);
		if (st != LG_OK || ceil[COPY] <= 0 || ceil[READ] <= 0)
			rc = lg_cli_fail(LG_EXIT_FAIL, "copy/read ceiling: %s",
					 st != LG_OK ? lg_cli_error(st) : "not positive");
	}
	if (rc == LG_EXIT_OK) {
		rows = calloc(specs.n * (size_t)nt, sizeof *rows);
		rc = rows ? LG_EXIT_OK : lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	}
	if (rc == LG_EXIT_OK)
		rc = bench_all(ctx, &specs, tokens, nt, reps, ceil[COPY], rows);
	if (rc == LG_EXIT_OK && a->val[O_JSON])
		rc = print_json(rows, specs.n * (size_t)nt, ceil, lg_ctx_arch(ctx));
	else if (rc == LG_EXIT_OK)
		print_table(rows, specs.n * (size_t)nt, ceil, lg_ctx_arch(ctx));
	free(rows);
	if (ctx)
		lg_ctx_destroy(ctx);
	lg_cli_specs_free(&specs);
	return rc;
}

/* ---------------------------------------------------------------- --jit */

static void print_jit_table(const struct lg_jit_result *r)
{
	printf("JIT on %s, NVRTC %d.%d, lingen %s\n\n", r->arch, r->nvrtc_major, r->nvrtc_minor,
	       lg_version());
	printf("%-44s %8s %11s %9s %9s %9s %9s\n", "kernel", "gen ms", "compile ms", "cubin B",
	       "read us", "load us", "get us");
	for (size_t i = 0; i < r->n; i++) {
		const struct lg_jit_kernel *k = &r->k[i];
		printf("%-44s %8.3f %11.2f %9zu %9.1f", lg_spec_entry(k->spec), k->gen_ms, k->compile_ms,
		       k->cubin_bytes, k->read_us);
		if (r->gpu)
			printf(" %9.1f %9.1f\n", k->load_us, k->get_us);
		else
			printf(" %9s %9s\n", "-", "-");
	}
	printf("\ncompile (NVRTC): first %.1f ms (goal <= 150, NVRTC start-up included), "
	       "after the first: median %.2f ms (goal <= 15), p90 %.2f ms\n",
	       r->first_compile_ms, r->compile_median_ms, r->compile_p90_ms);
	printf("whole step, generate + compile every kernel: serial %.1f ms, %d threads %.1f ms (goal <= 500)\n",
	       r->step_serial_ms, r->jobs, r->step_parallel_ms);
	printf("generate: median %.3f ms\n", r->gen_median_ms);
	printf("disk-cache hit, warm process (median of the per-kernel medians):\n");
	printf("  read  lg_ctx_cubin, fresh context (plan + key + read + checksum): %.1f us\n",
	       r->read_median_us);
	if (r->gpu) {
		printf("  load  lg_kernel_get, cubin in memory (cuLibraryLoadData + entries): %.1f us\n",
		       r->load_median_us);
		printf("  get   lg_kernel_get, fresh context (read + load): %.1f us (goal <= 50)\n",
		       r->get_median_us);
	}
	const struct lg_jit_launch *L = &r->launch;
	if (!L->ran) {
		printf("\nno GPU: load and launch parts skipped (%s)\n", r->no_gpu);
		return;
	}
	printf("\nhost cost of one launch: %s, tokens %lld, %d cuLaunchKernel per launch,\n"
	       "%d launches per loop, median of %d loops (us per launch):\n",
	       lg_spec_entry(L->spec), (long long)L->tokens, L->entries, L->launches, L->loops);
	printf("  batched (stream sync every %d, untimed): lingen %.2f  raw %.2f  diff %+.2f "
	       "(goal <= +0.5)\n",
	       L->batch, L->lg_us, L->raw_us, L->lg_us - L->raw_us);
	printf("  back to back (no sync):                 lingen %.2f  raw %.2f  diff %+.2f  GPU %.2f%s\n",
	       L->lg_b2b_us, L->raw_b2b_us, L->lg_b2b_us - L->raw_b2b_us, L->gpu_us,
	       L->gpu_us >= 0.9 * L->raw_b2b_us ? " (GPU-bound: launch queue full)" : "");
}

/* A number, or null when the part did not run (negative). */
static void add_num(cJSON *o, const char *name, double v)
{
	if (v >= 0)
		cJSON_AddNumberToObject(o, name, v);
	else
		cJSON_AddNullToObject(o, name);
}

static cJSON *jit_kernel_json(const struct lg_jit_kernel *k, bool first)
{
	char *canon = lg_spec_canonical(k->spec);
	cJSON *o = cJSON_CreateObject(), *spec = canon ? cJSON_Parse(canon) : NULL;
	free(canon);
	if (!o || !spec || !cJSON_AddItemToObject(o, "spec", spec)) {
		cJSON_Delete(spec);
		cJSON_Delete(o);
		return NULL;
	}
	cJSON_AddStringToObject(o, "kernel", lg_spec_entry(k->spec));
	add_num(o, "gen_ms", k->gen_ms);
	add_num(o, "compile_ms", k->compile_ms);
	cJSON_AddBoolToObject(o, "first_compile", first);
	cJSON_AddNumberToObject(o, "cubin_bytes", (double)k->cubin_bytes);
	add_num(o, "read_us", k->read_us);
	add_num(o, "load_us", k->load_us);
	add_num(o, "get_us", k->get_us);
	return o;
}

static cJSON *jit_launch_json(const struct lg_jit_launch *L)
{
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return NULL;
	cJSON_AddStringToObject(o, "kernel", lg_spec_entry(L->spec));
	cJSON_AddNumberToObject(o, "tokens", (double)L->tokens);
	cJSON_AddNumberToObject(o, "entries", L->entries);
	cJSON_AddNumberToObject(o, "launches", L->launches);
	cJSON_AddNumberToObject(o, "loops", L->loops);
	cJSON_AddNumberToObject(o, "batch", L->batch);
	cJSON_AddNumberToObject(o, "lingen_us", L->lg_us);
	cJSON_AddNumberToObject(o, "raw_us", L->raw_us);
	cJSON_AddNumberToObject(o, "diff_us", L->lg_us - L->raw_us);
	cJSON_AddNumberToObject(o, "lingen_back_to_back_us", L->lg_b2b_us);
	cJSON_AddNumberToObject(o, "raw_back_to_back_us", L->raw_b2b_us);
	cJSON_AddNumberToObject(o, "diff_back_to_back_us", L->lg_b2b_us - L->raw_b2b_us);
	cJSON_AddNumberToObject(o, "gpu_us", L->gpu_us);
	cJSON_AddNumberToObject(o, "goal_diff_us", 0.5);
	return o;
}

static int print_jit_json(const struct lg_jit_result *r, const char *command)
{
	char nvrtc[32], note[600];
	snprintf(nvrtc, sizeof nvrtc, "%d.%d", r->nvrtc_major, r->nvrtc_minor);
	snprintf(note, sizeof note, "no GPU: load and launch parts skipped (%s)", r->no_gpu);
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	cJSON_AddStringToObject(o, "bench", "jit");
	cJSON_AddStringToObject(o, "command", command);
	cJSON_AddStringToObject(o, "lingen", lg_version());
	cJSON_AddStringToObject(o, "arch", r->arch);
	cJSON_AddStringToObject(o, "nvrtc", nvrtc);
	cJSON_AddBoolToObject(o, "gpu", r->gpu);
	if (r->gpu)
		cJSON_AddNullToObject(o, "note");
	else
		cJSON_AddStringToObject(o, "note", note);
	cJSON *c = cJSON_AddObjectToObject(o, "compile");
	cJSON *h = cJSON_AddObjectToObject(o, "cache");
	cJSON *ks = cJSON_AddArrayToObject(o, "kernels");
	bool ok = c && h && ks;
	if (ok) {
		add_num(c, "first_ms", r->first_compile_ms);
		add_num(c, "median_after_first_ms", r->compile_median_ms);
		add_num(c, "p90_after_first_ms", r->compile_p90_ms);
		add_num(c, "step_serial_ms", r->step_serial_ms);
		add_num(c, "step_parallel_ms", r->step_parallel_ms);
		cJSON_AddNumberToObject(c, "jobs", r->jobs);
		cJSON_AddNumberToObject(c, "goal_step_parallel_ms", 500);
		add_num(c, "gen_median_ms", r->gen_median_ms);
		cJSON_AddNumberToObject(c, "goal_first_ms", 150);
		cJSON_AddNumberToObject(c, "goal_median_ms", 15);
		add_num(h, "read_median_us", r->read_median_us);
		add_num(h, "load_median_us", r->load_median_us);
		add_num(h, "get_median_us", r->get_median_us);
		cJSON_AddNumberToObject(h, "goal_get_us", 50);
	}
	for (size_t i = 0; ok && i < r->n; i++) {
		cJSON *k = jit_kernel_json(&r->k[i], i == 0);
		ok = k && cJSON_AddItemToArray(ks, k);
	}
	cJSON *l = ok && r->launch.ran ? jit_launch_json(&r->launch) : NULL;
	if (l)
		ok = cJSON_AddItemToObject(o, "launch", l);
	else if (ok)
		ok = cJSON_AddNullToObject(o, "launch") != NULL && !r->launch.ran;
	char *text = ok ? cJSON_Print(o) : NULL;
	cJSON_Delete(o);
	if (!text)
		return lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	printf("%s\n", text);
	free(text);
	return LG_EXIT_OK;
}

static int bench_jit(const struct lg_cli_args *a, int64_t tokens, int reps)
{
	struct lg_cli_specs specs = {0};
	struct lg_jit_result r = {0};
	const lg_spec **list = NULL;
	char *command = lg_cli_command_line(a); /* for the record under bench/ */
	int rc = command ? lg_cli_load_specs(a->pos, a->npos, &specs)
			 : lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	if (rc == LG_EXIT_OK) {
		list = calloc(specs.n, sizeof *list);
		rc = list ? LG_EXIT_OK : lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	}
	long long jobs = 0;
	if (rc == LG_EXIT_OK && a->val[O_JOBS])
		rc = lg_cli_opt_int(&lg_cmd_bench, a, O_JOBS, 1, 1024, &jobs);
	if (rc == LG_EXIT_OK) {
		for (size_t i = 0; i < specs.n; i++)
			list[i] = specs.k[i].spec;
		struct lg_jit_opts o = {.arch = lg_cli_default_arch(), .tokens = tokens, .reps = reps,
					.jobs = (int)jobs};
		lg_status st = lg_jit_bench(list, specs.n, &o, &r);
		if (st != LG_OK)
			rc = lg_cli_fail(LG_EXIT_FAIL, "bench --jit: %s", lg_cli_error(st));
	}
	if (rc == LG_EXIT_OK && !r.gpu)
		fprintf(stderr, "lingen: no GPU: load and launch parts skipped (%s)\n", r.no_gpu);
	if (rc == LG_EXIT_OK && a->val[O_JSON])
		rc = print_jit_json(&r, command);
	else if (rc == LG_EXIT_OK)
		print_jit_table(&r);
	lg_jit_result_free(&r);
	free(list);
	free(command);
	lg_cli_specs_free(&specs);
	return rc;
}

static int bench_load(const struct lg_cli_args *a)
{
	struct lg_cli_specs specs = {0};
	int rc = lg_cli_load_specs(a->pos, a->npos, &specs);
	const lg_spec **list = rc == LG_EXIT_OK ? calloc(specs.n ? specs.n : 1, sizeof *list) : NULL;
	if (rc == LG_EXIT_OK && !list)
		rc = lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	struct lg_load_result r;
	for (size_t i = 0; rc == LG_EXIT_OK && i < specs.n; i++)
		list[i] = specs.k[i].spec;
	if (rc == LG_EXIT_OK) {
		lg_status st = lg_bench_load(list, specs.n, a->val[O_BUNDLE], &r);
		if (st != LG_OK)
			rc = lg_cli_fail(lg_cli_status_exit(st), "%s", lg_cli_error(st));
	}
	const char *from = a->val[O_BUNDLE] ? a->val[O_BUNDLE] : "the disk cache";
	if (rc == LG_EXIT_OK && a->val[O_JSON])
		printf("{\"bench\": \"load\", \"gpu\": %s, \"from\": \"%s\", \"kernels\": %zu, \"driver_ms\": %.3f, "
		       "\"context_ms\": %.3f, \"lingen_ms\": %.3f, \"per_kernel_us\": %.1f, \"create_us\": %.1f, "
		       "\"kernel_median_us\": %.1f, \"kernel_p90_us\": %.1f, \"goal_lingen_ms\": 2}\n",
		       r.gpu ? "true" : "false", a->val[O_BUNDLE] ? a->val[O_BUNDLE] : "cache", r.kernels,
		       r.driver_ms, r.context_ms,
		       r.lingen_ms, r.per_kernel_us, r.create_us, r.kernel_median_us, r.kernel_p90_us);
	else if (rc == LG_EXIT_OK && !r.gpu)
		printf("%zu kernels from %s, no GPU: lingen (context + every lg_ctx_cubin: plan, key, read, "
		       "checksum; nothing loaded) %.3f ms = %.1f us a kernel (context %.1f us; a kernel: "
		       "median %.1f us, p90 %.1f us)\n",
		       r.kernels, from, r.lingen_ms, r.per_kernel_us, r.create_us, r.kernel_median_us,
		       r.kernel_p90_us);
	else if (rc == LG_EXIT_OK)
		printf("%zu kernels from %s: driver (dlopen + cuInit) %.1f ms, primary context %.1f ms, "
		       "lingen (context + every lg_kernel_get) %.3f ms = %.1f us a kernel (goal: 2 ms; "
		       "context %.1f us; a kernel: median %.1f us, p90 %.1f us)\n",
		       r.kernels, from, r.driver_ms, r.context_ms, r.lingen_ms, r.per_kernel_us, r.create_us,
		       r.kernel_median_us, r.kernel_p90_us);
	free(list);
	lg_cli_specs_free(&specs);
	return rc;
}

static int run(const struct lg_cli_cmd *cmd, const struct lg_cli_args *a)
{
	int64_t *tokens = NULL;
	int nt = 0;
	long long reps = a->val[O_JIT] ? 20 : 50;
	int rc = a->val[O_ODD] ? odd_tokens(cmd, a->val[O_TOKENS], &tokens, &nt)
				: lg_cli_tokens(cmd, a->val[O_TOKENS], 8192, &tokens, &nt);
	if (rc == LG_EXIT_OK)
		rc = lg_cli_opt_int(cmd, a, O_REPS, 1, 100000, &reps);
	if (rc == LG_EXIT_OK && a->val[O_ODD] && (a->val[O_JIT] || a->val[O_LOAD]))
		rc = lg_cli_usage_error(cmd, "--odd goes with the timing of kernels (not --jit or --load)");
	if (rc == LG_EXIT_OK && a->val[O_JIT] && nt != 1)
		rc = lg_cli_usage_error(cmd, "--jit takes one token count (for the launch part)");
	if (rc == LG_EXIT_OK && a->val[O_BUNDLE] && !a->val[O_LOAD])
		rc = lg_cli_usage_error(cmd, "--bundle goes with --load");
	if (rc == LG_EXIT_OK && a->val[O_JOBS] && !a->val[O_JIT])
		rc = lg_cli_usage_error(cmd, "--jobs goes with --jit");
	if (rc == LG_EXIT_OK && a->val[O_LOAD])
		rc = bench_load(a);
	else if (rc == LG_EXIT_OK && a->val[O_JIT])
		rc = bench_jit(a, tokens[0], (int)reps);
	else if (rc == LG_EXIT_OK)
		rc = bench(a, tokens, nt, (int)reps);
	free(tokens);
	return rc;
}

const struct lg_cli_cmd lg_cmd_bench = {
	.name = "bench",
	.synopsis = "SPEC... [--tokens N[,N...]] [--odd] [--reps R] [--json] | --jit SPEC... | --load SPEC... [--bundle DIR]",
	.summary = "time each kernel: median us, GB/s and % of the copy ceiling",
	.details = "Method (docs/performance.md): warm-up, L2 flushed before each repetition, median\n"
		   "GPU time from CUDA events. '% copy' = (min bytes / copy ceiling) / median,\n"
		   "with the device-to-device copy ceiling measured once in the same run; a\n"
		   "plain read-only stream over 1 GiB is timed and printed beside it (a guide\n"
		   "for kernels that only read; lingen's list kernels read a few % faster).\n"
		   "Needs a GPU. --odd: 6001 and 8191 tokens (or --tokens), each followed by\n"
		   "its count rounded up to 128; 'x aligned' is the odd row's time over it.\n"
		   "\n"
		   "--jit measures the JIT itself (docs/performance.md), for every kernel of the specs:\n"
		   "  compile  generation (lg_generate_for) and NVRTC compile, timed apart; the\n"
		   "           first compile of the process includes NVRTC start-up (goal\n"
		   "           <= 150 ms), the median after it is the warm cost (goal <= 15 ms);\n"
		   "  cache    a fresh cache folder is filled, then R times in new contexts:\n"
		   "           read = lg_ctx_cubin from disk (plan, key, read, checksum),\n"
		   "           load = lg_kernel_get with the cubin in memory (cuLibraryLoadData,\n"
		   "           entries), get = lg_kernel_get from disk (goal <= 50 us);\n"
		   "  launch   the first kernel at --tokens (default 8192): 20000\n"
		   "           lg_kernel_launch calls versus the same raw cuLaunchKernel calls,\n"
		   "           median of 5 loops, per launch (goal <= raw + 0.5 us); batched\n"
		   "           (stream sync every 128, untimed, so the launch queue never fills)\n"
		   "           and back to back (no sync: GPU-bound when the kernel is slower).\n"
		   "Without a GPU, compile and cache read still run (exit 0); load and launch\n"
		   "are skipped with a note. The arch is the GPU's, else $LINGEN_ARCH, else\n"
		   "sm_90a. With --json: one object with every number and the command line.\n",
	.opts = opts,
	.min_pos = 1,
	.max_pos = -1,
	.run = run,
};
