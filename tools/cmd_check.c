/*
 * cmd_check.c - `lingen check SPEC... [--tokens N[,N...]] [--seed S]`: run
 * each kernel on the GPU against its plain-C reference (tools/harness) with
 * fresh random inputs, one line per kernel and token count. Exit 1 if any
 * check fails or there is no GPU.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "harness/harness.h"

enum { O_TOKENS, O_SEED };
static const struct lg_cli_opt opts[] = {
	[O_TOKENS] = {"tokens", 't', "N[,N...]", "token counts to check (default 8192)"},
	[O_SEED] = {"seed", 's', "S", "input seed (default: from the clock)"},
	{0},
};

/* "q fp8 eq=0.999812  s scale bit-equal  ..." for one result. */
static void print_measures(const struct lg_check_result *r)
{
	double max_rel = 0;
	for (int i = 0; i < r->nmeasures; i++) {
		const struct lg_check_measure *m = &r->m[i];
		if (strcmp(m->kind, "fp8") == 0)
			printf("  %s fp8 eq=%.6f", m->name, m->equal_frac);
		else if (strcmp(m->kind, "scale") == 0)
			printf("  %s scale %s", m->name,
			       m->mismatches ? "NOT bit-equal" : "bit-equal");
		else
			printf("  %s %s rel_l2=%.2e", m->name, m->kind, m->rel_l2);
		if (m->mismatches)
			printf(" (%llu/%llu off)", (unsigned long long)m->mismatches,
			       (unsigned long long)m->count);
		if (m->unwritten)
			printf(" (%llu unwritten)", (unsigned long long)m->unwritten);
		if (m->max_rel > max_rel)
			max_rel = m->max_rel;
	}
	printf("  max_rel=%.2e\n", max_rel);
}

/* Check every kernel at every token count; 0 all pass, 1 any fails. */
static int check_all(lg_ctx *ctx, const struct lg_cli_specs *s, const int64_t *tokens, int nt,
		     uint64_t seed)
{
	int rc = LG_EXIT_OK, failed = 0, total = 0;
	for (size_t i = 0; i < s->n; i++) {
		for (int t = 0; t < nt; t++) {
			struct lg_check_opts o = {.tokens = tokens[t], .seed = seed,
						  .max_report = 5, .out = stdout};
			struct lg_check_result r;
			memset(&r, 0, sizeof r);
			const char *entry = lg_spec_entry(s->k[i].spec);
			fflush(stdout);
			lg_status st = lg_check_kernel(ctx, s->k[i].spec, &o, &r);
			total++;
			if (st != LG_OK) {
				failed++;
				rc = lg_cli_fail(LG_EXIT_FAIL, "%s tokens=%lld: %s", entry,
						 (long long)tokens[t], lg_cli_error(st));
				printf("ERROR %s tokens=%lld\n", entry, (long long)tokens[t]);
				continue;
			}
			printf("%s  %s tokens=%lld", r.pass ? "PASS" : "FAIL", entry,
			       (long long)tokens[t]);
			print_measures(&r);
			if (!r.pass) {
				failed++;
				rc = rc ? rc : LG_EXIT_FAIL;
			}
		}
	}
	printf("%d/%d passed on %s\n", total - failed, total, lg_ctx_arch(ctx));
	return rc;
}

static int run(const struct lg_cli_cmd *cmd, const struct lg_cli_args *a)
{
	int64_t *tokens = NULL;
	int nt = 0;
	long long seed = 0;
	struct lg_cli_specs specs = {0};
	lg_ctx *ctx = NULL;
	int rc = lg_cli_tokens(cmd, a->val[O_TOKENS], 8192, &tokens, &nt);
	if (rc == LG_EXIT_OK)
		rc = lg_cli_opt_int(cmd, a, O_SEED, 0, INT64_MAX, &seed);
	if (rc == LG_EXIT_OK)
		rc = lg_cli_load_specs(a->pos, a->npos, &specs);
	if (rc == LG_EXIT_OK)
		rc = lg_cli_gpu_ctx("check", &ctx);
	if (rc == LG_EXIT_OK)
		rc = check_all(ctx, &specs, tokens, nt, (uint64_t)seed);
	if (ctx)
		lg_ctx_destroy(ctx);
	lg_cli_specs_free(&specs);
	free(tokens);
	return rc;
}

const struct lg_cli_cmd lg_cmd_check = {
	.name = "check",
	.synopsis = "SPEC... [--tokens N[,N...]] [--seed S]",
	.summary = "run each kernel on the GPU against its CPU reference",
	.details = "Prints PASS/FAIL per kernel and token count with the measures of\n"
		   "KERNELS.md (fp8 equal fraction, scale bit-equality, max relative error).\n"
		   "Exit 1 if any check fails. Needs a GPU.\n",
	.opts = opts,
	.min_pos = 1,
	.max_pos = -1,
	.run = run,
};
