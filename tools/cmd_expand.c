/*
 * cmd_expand.c - `lingen expand MODEL [-o FILE]`: a model config
 * (configs/models/<name>.json) -> the spec file of every kernel one training
 * step of that model needs, forward and backward. The spec file goes to
 * stdout (or FILE, written atomically); stderr gets one line: how many
 * kernels, how many skipped, and which families are not implemented yet.
 * Needs no GPU and no NVRTC.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "file.h"
#include "model.h"

enum { O_OUT, O_ARCH };
static const struct lg_cli_opt opts[] = {
	[O_OUT] = {"out", 'o', "FILE", "write the spec file to FILE instead of stdout"},
	[O_ARCH] = {"arch", 'a', "ARCH[,ARCH...]", "only the kernels these archs run; the rest skipped for each"},
	{0},
};

/* Has an earlier skipped entry than i the same op and arch (NULL: none)? */
static bool seen_before(const struct lg_model_step *s, size_t i)
{
	const struct lg_model_skip *k = &s->skipped[i];
	for (size_t j = 0; j < i; j++) {
		const struct lg_model_skip *o = &s->skipped[j];
		if (strcmp(o->op, k->op) == 0 && (o->arch == k->arch || (o->arch && k->arch && strcmp(o->arch, k->arch) == 0)))
			return true;
	}
	return false;
}

/* "N kernels, M skipped (not implemented yet: a, b; for sm_80: c (sm_90a
 * only), d (sm_90a only))" on stderr; each skipped family is named once an
 * arch. */
static void summary(const struct lg_model_step *s)
{
	fprintf(stderr, "%zu kernel%s, %zu skipped", s->nkernels, s->nkernels == 1 ? "" : "s",
		s->nskipped);
	const char *sep = " (not implemented yet: ";
	for (size_t i = 0; i < s->nskipped; i++) {
		if (!s->skipped[i].arch && !seen_before(s, i)) {
			fprintf(stderr, "%s%s", sep, s->skipped[i].op);
			sep = ", ";
		}
	}
	const char *group = *sep == ',' ? "; for " : " (for ";
	for (size_t a = 0; a < s->nskipped; a++) { /* each arch, at its first entry */
		const char *arch = s->skipped[a].arch;
		bool first = arch != NULL;
		for (size_t j = 0; first && j < a; j++)
			first = !s->skipped[j].arch || strcmp(s->skipped[j].arch, arch) != 0;
		if (!first)
			continue;
		fprintf(stderr, "%s%s: ", group, arch);
		for (size_t i = a, n = 0; i < s->nskipped; i++) {
			const struct lg_model_skip *k = &s->skipped[i];
			if (k->arch && strcmp(k->arch, arch) == 0 && !seen_before(s, i))
				fprintf(stderr, "%s%s (%s only)", n++ ? ", " : "", k->op, k->only);
		}
		group = "; for ";
		sep = ", ";
	}
	fputs(*sep == ',' ? ")\n" : "\n", stderr);
}

/* Parse and expand the config at path; *json: the spec file text. */
static int expand(const char *path, char *const *archs, int narch, struct lg_model_step *s, char **json)
{
	char *text = NULL;
	size_t len = 0;
	struct lg_model m;
	lg_status st = lg_read_file(path, &text, &len);
	if (st == LG_OK)
		st = lg_model_parse(text, len, path, &m);
	if (st == LG_OK)
		st = lg_model_expand(&m, path, s);
	if (st == LG_OK && narch)
		lg_model_step_for_archs(s, archs, narch);
	free(text);
	if (st != LG_OK) /* a missing or bad config is bad input */
		return lg_cli_fail(st == LG_ERR_NO_MEMORY ? LG_EXIT_FAIL : LG_EXIT_USAGE, "%s",
				   lg_cli_error(st));
	if (!(*json = lg_model_step_json(&m, s)))
		return lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	return LG_EXIT_OK;
}

static int run(const struct lg_cli_cmd *cmd, const struct lg_cli_args *a)
{
	char *json = NULL, **archs = NULL;
	int narch = 0;
	struct lg_model_step *s = malloc(sizeof *s);
	const char *out = a->val[O_OUT];
	int rc = s ? LG_EXIT_OK : lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	if (rc == LG_EXIT_OK && a->val[O_ARCH])
		rc = lg_cli_archs(cmd, a->val[O_ARCH], &archs, &narch);
	if (rc == LG_EXIT_OK && narch > LG_MODEL_MAX_ARCHS)
		rc = lg_cli_usage_error(cmd, "--arch: found %d archs, allowed: at most %d", narch, LG_MODEL_MAX_ARCHS);
	if (rc == LG_EXIT_OK)
		rc = expand(a->pos[0], archs, narch, s, &json);
	if (rc == LG_EXIT_OK && !out)
		fputs(json, stdout);
	else if (rc == LG_EXIT_OK)
		rc = lg_cli_save(out, json, strlen(json));
	if (rc == LG_EXIT_OK) {
		if (out)
			fprintf(stderr, "wrote %s\n", out);
		summary(s);
	}
	free(json);
	free(s);
	lg_cli_strv_free(archs, narch);
	return rc;
}

const struct lg_cli_cmd lg_cmd_expand = {
	.name = "expand",
	.synopsis = "MODEL [-o FILE] [--arch ARCH[,ARCH...]]",
	.summary = "model config -> spec file of one training step's kernels",
	.details = "MODEL is a model config (configs/models/<name>.json): dimensions, rms_norm_eps\n"
		   "and FP8 recipe. The spec file lists every kernel one training step needs\n"
		   "(forward and backward), each once, under \"kernels\"; kernels whose family\n"
		   "is not implemented yet are listed under \"skipped\" with the docs/kernels.md\n"
		   "section that describes them. With --arch, a kernel whose family does not\n"
		   "run on one of the archs (the FP8 GEMMs: sm_90a only) is listed under\n"
		   "\"skipped\" with that \"arch\", and left out when no arch runs it. Every command that takes a SPEC also takes a\n"
		   "model config and expands it the same way. Needs no GPU.\n",
	.opts = opts,
	.min_pos = 1,
	.max_pos = 1,
	.run = run,
};
