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

enum { O_OUT };
static const struct lg_cli_opt opts[] = {
	[O_OUT] = {"out", 'o', "FILE", "write the spec file to FILE instead of stdout"},
	{0},
};

/* "N kernels, M skipped (not implemented yet: a, b)" on stderr; each
 * skipped family is named once. */
static void summary(const struct lg_model_step *s)
{
	fprintf(stderr, "%zu kernel%s, %zu skipped", s->nkernels, s->nkernels == 1 ? "" : "s",
		s->nskipped);
	const char *sep = " (not implemented yet: ";
	for (size_t i = 0; i < s->nskipped; i++) {
		bool seen = false;
		for (size_t j = 0; j < i; j++)
			seen = seen || strcmp(s->skipped[j].op, s->skipped[i].op) == 0;
		if (seen)
			continue;
		fprintf(stderr, "%s%s", sep, s->skipped[i].op);
		sep = ", ";
	}
	fputs(s->nskipped ? ")\n" : "\n", stderr);
}

/* Parse and expand the config at path; *json: the spec file text. */
static int expand(const char *path, struct lg_model_step *s, char **json)
{
	char *text = NULL;
	size_t len = 0;
	struct lg_model m;
	lg_status st = lg_read_file(path, &text, &len);
	if (st == LG_OK)
		st = lg_model_parse(text, len, path, &m);
	if (st == LG_OK)
		st = lg_model_expand(&m, path, s);
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
	(void)cmd;
	char *json = NULL;
	struct lg_model_step *s = malloc(sizeof *s);
	const char *out = a->val[O_OUT];
	int rc = s ? expand(a->pos[0], s, &json) : lg_cli_fail(LG_EXIT_FAIL, "out of memory");
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
	return rc;
}

const struct lg_cli_cmd lg_cmd_expand = {
	.name = "expand",
	.synopsis = "MODEL [-o FILE]",
	.summary = "model config -> spec file of one training step's kernels",
	.details = "MODEL is a model config (configs/models/<name>.json): dimensions, rms_norm_eps\n"
		   "and FP8 recipe. The spec file lists every kernel one training step needs\n"
		   "(forward and backward), each once, under \"kernels\"; kernels whose family\n"
		   "is not implemented yet are listed under \"skipped\" with the docs/kernels.md\n"
		   "section that describes them. Every command that takes a SPEC also takes a\n"
		   "model config and expands it the same way. Needs no GPU.\n",
	.opts = opts,
	.min_pos = 1,
	.max_pos = 1,
	.run = run,
};
