/*
 * cmd_bench.c - `lingen bench SPEC... [--tokens N[,N...]] [--reps R]
 * [--json]`: time each kernel by TARGETS.md's method (L2 flushed, median of
 * R repetitions, CUDA events) and relate it to the device-to-device copy
 * ceiling measured once in the same run. Prints a table, or with --json an
 * array of objects (the form committed under bench/). Needs a GPU.
 */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "harness/harness.h"

enum { O_TOKENS, O_REPS, O_JSON };
static const struct lg_cli_opt opts[] = {
	[O_TOKENS] = {"tokens", 't', "N[,N...]", "token counts (default 8192)"},
	[O_REPS] = {"reps", 'r', "R", "timed repetitions (default 50)"},
	[O_JSON] = {"json", 0, NULL, "print a JSON array instead of a table"},
	{0},
};

struct row {
	const lg_spec *spec;
	int64_t tokens;
	struct lg_bench_result r;
	double pct; /* floor time at the copy ceiling / median time, in % */
};

static void print_table(const struct row *rows, size_t n, double copy_gbps, const char *arch)
{
	printf("%-44s %8s %10s %9s %8s\n", "kernel", "tokens", "median us", "GB/s", "% copy");
	for (size_t i = 0; i < n; i++)
		printf("%-44s %8lld %10.2f %9.1f %7.1f%%\n", lg_spec_entry(rows[i].spec),
		       (long long)rows[i].tokens, rows[i].r.median_us, rows[i].r.gbps, rows[i].pct);
	printf("copy ceiling %.0f GB/s on %s\n", copy_gbps, arch);
}

static int print_json(const struct row *rows, size_t n, double copy_gbps, const char *arch)
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
		cJSON_AddNumberToObject(o, "copy_gbps", copy_gbps);
		cJSON_AddNumberToObject(o, "pct_copy", w->pct);
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
	return LG_EXIT_OK;
}

static int bench(const struct lg_cli_args *a, const int64_t *tokens, int nt, int reps)
{
	struct lg_cli_specs specs = {0};
	lg_ctx *ctx = NULL;
	struct row *rows = NULL;
	double copy_gbps = 0;
	int rc = lg_cli_load_specs(a->pos, a->npos, &specs);
	if (rc == LG_EXIT_OK)
		rc = lg_cli_gpu_ctx("bench", &ctx);
	if (rc == LG_EXIT_OK) {
		lg_status st = lg_bench_copy_ceiling(&copy_gbps);
		if (st != LG_OK || copy_gbps <= 0)
			rc = lg_cli_fail(LG_EXIT_FAIL, "copy ceiling: %s",
					 st != LG_OK ? lg_cli_error(st) : "not positive");
	}
	if (rc == LG_EXIT_OK) {
		rows = calloc(specs.n * (size_t)nt, sizeof *rows);
		rc = rows ? LG_EXIT_OK : lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	}
	if (rc == LG_EXIT_OK)
		rc = bench_all(ctx, &specs, tokens, nt, reps, copy_gbps, rows);
	if (rc == LG_EXIT_OK && a->val[O_JSON])
		rc = print_json(rows, specs.n * (size_t)nt, copy_gbps, lg_ctx_arch(ctx));
	else if (rc == LG_EXIT_OK)
		print_table(rows, specs.n * (size_t)nt, copy_gbps, lg_ctx_arch(ctx));
	free(rows);
	if (ctx)
		lg_ctx_destroy(ctx);
	lg_cli_specs_free(&specs);
	return rc;
}

static int run(const struct lg_cli_cmd *cmd, int argc, char **argv)
{
	struct lg_cli_args a;
	int rc = lg_cli_parse(cmd, argc, argv, &a);
	if (rc != LG_CLI_GO)
		return rc;
	int64_t *tokens = NULL;
	int nt = 0;
	long long reps = 50;
	rc = lg_cli_tokens(cmd, a.val[O_TOKENS], 8192, &tokens, &nt);
	if (rc == LG_EXIT_OK && a.val[O_REPS])
		rc = lg_cli_int(cmd, "reps", a.val[O_REPS], 1, 100000, &reps);
	if (rc == LG_EXIT_OK)
		rc = bench(&a, tokens, nt, (int)reps);
	free(tokens);
	free(a.pos);
	return rc;
}

const struct lg_cli_cmd lg_cmd_bench = {
	.name = "bench",
	.synopsis = "SPEC... [--tokens N[,N...]] [--reps R] [--json]",
	.summary = "time each kernel: median us, GB/s and % of the copy ceiling",
	.details = "Method (TARGETS.md): warm-up, L2 flushed before each repetition, median\n"
		   "GPU time from CUDA events. '% copy' = (min bytes / copy ceiling) / median,\n"
		   "with the device-to-device copy ceiling measured once in the same run.\n"
		   "Needs a GPU.\n",
	.opts = opts,
	.min_pos = 1,
	.max_pos = -1,
	.run = run,
};
