/*
 * cmd_tune.c - `lingen tune SPEC... [-o FILE] [--tokens N] [--reps R]`:
 * sweep the tile variants of each kernel (struct lg_family.candidates) on
 * the GPU and keep the fastest correct one in a tuning file (gen/core/tuning.h).
 *
 * Per kernel, keyed by its spec without tile (a spec that gives a tile is
 * tuned from its tile-less key; specs sharing a key are tuned once): the
 * heuristic and every candidate are checked against the CPU reference
 * (tools/harness) at --tokens and at an odd token count, then timed
 * (median of R, L2 flushed). A candidate that fails is reported and
 * skipped. The fastest passing candidate becomes the entry; when the
 * heuristic is faster than every candidate the entry is dropped. Entries of
 * FILE (default configs/tuning/<arch>.json, from the repository root) with
 * other keys are kept; the file is rewritten atomically.
 *
 * The context runs with tuning off, so "heuristic" means the family's own
 * choice whatever tuning file exists. Exit 1 without a GPU, or when any
 * candidate failed its check (the file is still written).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cuda.h"
#include "generate.h"
#include "harness/harness.h"
#include "tuning.h"

enum { O_OUT, O_TOKENS, O_REPS };
static const struct lg_cli_opt opts[] = {
	[O_OUT] = {"output", 'o', "FILE", "tuning file to write or update (default configs/tuning/<arch>.json)"},
	[O_TOKENS] = {"tokens", 't', "N", "token count to time at (default 8192)"},
	[O_REPS] = {"reps", 'r', "R", "timed repetitions per candidate (default 50)"},
	{0},
};

#define ODD_TOKENS 1021 /* also checked: a count with tails everywhere */

struct tune {
	lg_ctx *ctx;
	struct lg_target target;
	int64_t tokens;
	int reps;
	struct lg_tuning *table;
	int failed_checks, no_winner;
};

/* "rows=8 threads=256" for the tile keys of f set in `set` (all of them,
 * for a plan's tile). */
static void tile_label(const struct lg_family *f, const int64_t *tile, uint64_t set, char *out, size_t size)
{
	size_t n = 0;
	out[0] = '\0';
	for (int k = 0; k < f->nkeys && n < size; k++)
		if (lg_key_is_tile(&f->keys[k]) && ((set >> k) & 1u))
			n += (size_t)snprintf(out + n, size - n, "%s%s=%lld", n ? " " : "", f->keys[k].path + 5,
					      (long long)tile[k]);
}

/* Check s at the tuning token count and at ODD_TOKENS, then time it.
 * false (with the reason printed) when a check fails or errs. */
static bool measure(struct tune *t, const struct lg_spec *s, double *us, char *why, size_t size)
{
	int64_t counts[2] = {t->tokens, ODD_TOKENS};
	for (int i = 0; i < (t->tokens == ODD_TOKENS ? 1 : 2); i++) {
		struct lg_check_opts co = {.tokens = counts[i], .seed = lg_check_fresh_seed(), .max_report = 3,
					   .out = stdout};
		struct lg_check_result r;
		memset(&r, 0, sizeof r);
		fflush(stdout);
		lg_status st = lg_check_kernel(t->ctx, s, &co, &r);
		if (st != LG_OK || !r.pass) {
			snprintf(why, size, "check at %lld tokens, seed %llu: %s", (long long)counts[i],
				 (unsigned long long)co.seed, st != LG_OK ? lg_cli_error(st) : "mismatches");
			return false;
		}
	}
	struct lg_bench_opts bo = {.tokens = t->tokens, .warmup = 10, .reps = t->reps};
	struct lg_bench_result br;
	lg_status st = lg_bench_kernel(t->ctx, s, &bo, &br);
	if (st != LG_OK) {
		snprintf(why, size, "bench: %s", lg_cli_error(st));
		return false;
	}
	*us = br.median_us;
	return true;
}

static void print_row(const char *label, bool ok, double us, const char *why)
{
	if (ok)
		printf("  %-40s %10.2f  ok\n", label, us);
	else
		printf("  %-40s %10s  FAIL (%s)\n", label, "-", why);
}

/* Sweep one kernel (base: its spec without tile) into the table. */
static int tune_one(struct tune *t, const struct lg_spec *base)
{
	const struct lg_family *f = base->fam;
	struct lg_tile_choice c[LG_MAX_CANDIDATES];
	int n = f->candidates ? f->candidates(base, &t->target, c, LG_MAX_CANDIDATES) : 0;
	printf("%s (%lld tokens, %s)\n", base->entry, (long long)t->tokens, t->target.name);
	if (n == 0) {
		printf("  nothing to tune\n\n");
		return LG_EXIT_OK;
	}
	printf("  %-40s %10s  %s\n", "candidate", "median us", "check");
	char label[128], why[512];
	struct lg_plan p;
	label[0] = '\0';
	if (lg_plan_for(base, &t->target, &p) == LG_OK)
		tile_label(f, p.tile, ~(uint64_t)0, label, sizeof label);
	char hlabel[160];
	snprintf(hlabel, sizeof hlabel, "heuristic (%s)", label);
	double def_us = 0, best_us = INFINITY;
	bool def_ok = measure(t, base, &def_us, why, sizeof why);
	print_row(hlabel, def_ok, def_us, why);
	if (!def_ok)
		t->failed_checks++;
	int best = -1;
	for (int i = 0; i < n; i++) {
		struct lg_spec v;
		double us = 0;
		tile_label(f, c[i].v, c[i].set, label, sizeof label);
		bool ok = lg_spec_with_tile(base, &c[i], &v) == LG_OK && measure(t, &v, &us, why, sizeof why);
		print_row(label, ok, us, why);
		if (!ok)
			t->failed_checks++;
		else if (us < best_us)
			best = i, best_us = us;
	}
	if (best < 0) {
		t->no_winner++;
		printf("  -> no candidate passed: entry left as it was\n\n");
		return LG_EXIT_OK;
	}
	if (def_ok && def_us < best_us) {
		lg_tuning_remove(t->table, base);
		printf("  -> the heuristic is fastest (%.2f us): no entry\n\n", def_us);
		return LG_EXIT_OK;
	}
	tile_label(f, c[best].v, c[best].set, label, sizeof label);
	if (def_ok)
		printf("  -> %s: %.2f us (heuristic %.2f us)\n\n", label, best_us, def_us);
	else
		printf("  -> %s: %.2f us (the heuristic failed its check)\n\n", label, best_us);
	lg_status st = lg_tuning_set(t->table, base, &c[best], best_us, def_ok ? def_us : -1);
	return st == LG_OK ? LG_EXIT_OK : lg_cli_fail(LG_EXIT_FAIL, "%s", lg_cli_error(st));
}

/* Every kernel of the specs, once per tile-less key. */
static int tune_all(struct tune *t, const struct lg_cli_specs *specs)
{
	struct lg_spec *done = calloc(specs->n ? specs->n : 1, sizeof *done);
	size_t ndone = 0;
	int rc = done ? LG_EXIT_OK : lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	for (size_t i = 0; rc == LG_EXIT_OK && i < specs->n; i++) {
		struct lg_spec base;
		lg_spec_with_tile(specs->k[i].spec, NULL, &base);
		bool seen = false;
		for (size_t j = 0; j < ndone && !seen; j++)
			seen = strcmp(done[j].entry, base.entry) == 0;
		if (seen)
			continue;
		done[ndone++] = base;
		rc = tune_one(t, &base);
	}
	free(done);
	return rc;
}

/* The device's name, for the file's record. */
static void device_name(char *out, int size)
{
	const struct lg_cu *cu;
	CUdevice dev;
	CUcontext cur = NULL;
	snprintf(out, (size_t)size, "unknown");
	if (lg_cu_get(&cu) != LG_OK || cu->cuCtxGetCurrent(&cur) != CUDA_SUCCESS)
		return;
	if (cur ? cu->cuCtxGetDevice(&dev) : cu->cuDeviceGet(&dev, 0))
		return;
	if (cu->cuDeviceGetName(out, size, dev) != CUDA_SUCCESS)
		snprintf(out, (size_t)size, "unknown");
}

/* The command line ("lingen tune ARGS..."), device and date, for the
 * file's record. */
static lg_status note_run(struct lg_tuning *tab, const struct lg_cli_args *a)
{
	char *cmd = lg_cli_command_line(a), dev[256], date[32];
	device_name(dev, sizeof dev);
	time_t now = time(NULL);
	struct tm tm;
	strftime(date, sizeof date, "%Y-%m-%d", gmtime_r(&now, &tm));
	lg_status st = cmd ? lg_tuning_note(&tab->made_by, cmd) : LG_ERR_NO_MEMORY;
	if (st == LG_OK)
		st = lg_tuning_note(&tab->device, dev);
	if (st == LG_OK)
		st = lg_tuning_note(&tab->date, date);
	free(cmd);
	return st;
}

static int write_table(const struct lg_tuning *tab, const char *path)
{
	char *text = lg_tuning_to_json(tab);
	if (!text)
		return lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	int rc = lg_cli_write_file(path, text, strlen(text));
	free(text);
	if (rc != 0)
		return lg_cli_fail(LG_EXIT_FAIL, "cannot write %s: %s", path, strerror(errno));
	printf("wrote %s (%zu entries)\n", path, tab->n);
	return LG_EXIT_OK;
}

/* A context for the GPU's own arch, tuning off. */
static int gpu_ctx(struct tune *t)
{
	char arch[16];
	lg_status st = lg_cu_device_arch(arch);
	if (st == LG_OK) {
		lg_ctx_opts o = {.arch = arch, .tuning = "off"};
		st = lg_ctx_create(&o, &t->ctx);
	}
	if (st != LG_OK)
		return lg_cli_fail(LG_EXIT_FAIL, "tune needs a CUDA GPU and its driver: %s (%s)",
				   lg_cli_error(st), lg_status_str(st));
	if (!lg_target_parse(lg_ctx_arch(t->ctx), &t->target))
		return lg_cli_fail(LG_EXIT_FAIL, "unknown device arch %s", lg_ctx_arch(t->ctx));
	return LG_EXIT_OK;
}

static int tune(const struct lg_cli_args *a, struct tune *t)
{
	struct lg_cli_specs specs = {0};
	char *dflt = NULL;
	int rc = lg_cli_load_specs(a->pos, a->npos, &specs);
	if (rc == LG_EXIT_OK)
		rc = gpu_ctx(t);
	const char *path = a->val[O_OUT];
	if (rc == LG_EXIT_OK && !path) {
		char name[32];
		snprintf(name, sizeof name, "%s.json", t->target.name);
		path = dflt = lg_cli_path("configs/tuning", name);
		rc = path ? LG_EXIT_OK : lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	}
	if (rc == LG_EXIT_OK) {
		lg_status st = lg_tuning_load(path, t->target.name, true, &t->table);
		if (st == LG_OK && !t->table)
			st = lg_tuning_create(t->target.name, &t->table);
		if (st != LG_OK)
			rc = lg_cli_fail(lg_cli_status_exit(st), "%s", lg_cli_error(st));
	}
	if (rc == LG_EXIT_OK)
		rc = tune_all(t, &specs);
	if (rc == LG_EXIT_OK && note_run(t->table, a) != LG_OK)
		rc = lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	if (rc == LG_EXIT_OK)
		rc = write_table(t->table, path);
	if (rc == LG_EXIT_OK && (t->failed_checks || t->no_winner))
		rc = lg_cli_fail(LG_EXIT_FAIL, "%d run(s) failed their check and were skipped; %d kernel(s) "
					       "without a passing candidate (see above)",
				 t->failed_checks, t->no_winner);
	free(dflt);
	lg_cli_specs_free(&specs);
	return rc;
}

static int run(const struct lg_cli_cmd *cmd, const struct lg_cli_args *a)
{
	long long tokens = 8192, reps = 50;
	struct tune t = {0};
	int rc = lg_cli_opt_int(cmd, a, O_TOKENS, 1, INT32_MAX, &tokens);
	if (rc == LG_EXIT_OK)
		rc = lg_cli_opt_int(cmd, a, O_REPS, 1, 100000, &reps);
	if (rc == LG_EXIT_OK) {
		t.tokens = tokens;
		t.reps = (int)reps;
		rc = tune(a, &t);
	}
	lg_tuning_free(t.table);
	if (t.ctx)
		lg_ctx_destroy(t.ctx);
	return rc;
}

const struct lg_cli_cmd lg_cmd_tune = {
	.name = "tune",
	.synopsis = "SPEC... [-o FILE] [--tokens N] [--reps R]",
	.summary = "sweep tile parameters; keep the fastest correct one in a tuning file",
	.details = "For each kernel (keyed by its spec without tile), the family heuristic and\n"
		   "every tile candidate are checked against the CPU reference (at N tokens and\n"
		   "at 1021) and timed (median of R, L2 flushed). The fastest passing candidate\n"
		   "is written to FILE (default configs/tuning/<arch>.json, relative to the\n"
		   "current folder: run from the repository root), replacing an entry with the\n"
		   "same key and keeping the others; when the heuristic is faster than every\n"
		   "candidate the entry is dropped. Contexts read the file of their arch (see\n"
		   "LINGEN_TUNING in 'lingen env'); a spec that gives a tile keeps it.\n"
		   "Needs a GPU. Exit 1 without one, or when any check failed.\n",
	.opts = opts,
	.min_pos = 1,
	.max_pos = -1,
	.run = run,
};
