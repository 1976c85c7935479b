/*
 * cmd_gen.c - `lingen gen SPEC... [-o DIR] [--arch ARCH]`: the generated
 * CUDA source of each kernel, on stdout or as DIR/<entry>.cu. Needs no GPU
 * and no NVRTC.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "family.h" /* lg_spec.fam: target_only */

enum { O_OUT, O_ARCH };
static const struct lg_cli_opt opts[] = {
	[O_OUT] = {"out", 'o', "DIR", "write DIR/<entry>.cu for each kernel instead of stdout"},
	[O_ARCH] = {"arch", 'a', "ARCH", "target arch (default $LINGEN_ARCH, else sm_90a)"},
	{0},
};

/* Write one kernel's source to stdout or DIR/<entry>.cu. */
static int emit_one(const struct lg_cli_kernel *k, const char *arch, const char *dir)
{
	char *src = NULL;
	const char *entry = lg_spec_entry(k->spec);
	lg_status st = lg_generate(k->spec, arch, &src);
	if (st != LG_OK)
		return lg_cli_fail(lg_cli_status_exit(st), "%s: kernels[%zu] (%s): %s", k->path,
				   k->index, entry, lg_cli_error(st));
	int rc = LG_EXIT_OK;
	if (!dir) {
		fputs(src, stdout);
	} else {
		char *name = NULL;
		if (asprintf(&name, "%s.cu", entry) < 0)
			name = NULL;
		char *path = lg_cli_path(dir, name);
		rc = lg_cli_save(path, src, strlen(src));
		if (rc == LG_EXIT_OK)
			fprintf(stderr, "wrote %s\n", path);
		free(name);
		free(path);
	}
	free(src);
	return rc;
}

static int run(const struct lg_cli_cmd *cmd, const struct lg_cli_args *a)
{
	char **archs = NULL;
	int narch = 0;
	struct lg_cli_specs specs = {0};
	const char *dir = a->val[O_OUT];
	int rc = lg_cli_archs(cmd, a->val[O_ARCH], &archs, &narch);
	if (rc == LG_EXIT_OK && narch != 1)
		rc = lg_cli_usage_error(cmd, "--arch: give one arch");
	if (rc == LG_EXIT_OK)
		rc = lg_cli_load_specs(a->pos, a->npos, &specs);
	if (rc == LG_EXIT_OK && dir)
		rc = lg_cli_mkdir(dir);
	size_t skipped = 0;
	for (size_t i = 0; rc == LG_EXIT_OK && i < specs.n; i++) {
		const char *only = specs.k[i].spec->fam->target_only;
		if (specs.k[i].model && only && strcmp(only, archs[0]) != 0) {
			fprintf(stderr, "skipped for %s: %s (the family %s runs on %s only)\n", archs[0],
				lg_spec_entry(specs.k[i].spec), specs.k[i].spec->fam->op, only);
			skipped++;
			continue;
		}
		rc = emit_one(&specs.k[i], archs[0], dir);
	}
	if (rc == LG_EXIT_OK && skipped)
		fprintf(stderr, "%zu kernel%s generated for %s, %zu skipped\n", specs.n - skipped,
			specs.n - skipped == 1 ? "" : "s", archs[0], skipped);
	lg_cli_specs_free(&specs);
	lg_cli_strv_free(archs, narch);
	return rc;
}

const struct lg_cli_cmd lg_cmd_gen = {
	.name = "gen",
	.synopsis = "SPEC... [-o DIR] [--arch ARCH]",
	.summary = "print (or write) the generated CUDA source of each kernel",
	.details = "Needs no GPU and no NVRTC. Output is byte-deterministic. A model config's\n"
		   "kernels whose family does not run on ARCH (the FP8 GEMMs: sm_90a only) are\n"
		   "skipped, each named on stderr with the reason.\n",
	.opts = opts,
	.min_pos = 1,
	.max_pos = -1,
	.run = run,
};
