/*
 * cmd_check.c - `lingen check SPEC... [--tokens N[,N...]] [--seed S]`: run
 * each kernel on the GPU against its plain-C reference (tools/harness) with
 * random inputs, one line per kernel and token count. The seed is --seed,
 * else $LINGEN_SEED, else new from the clock, and is printed first so a run
 * can be replayed. Exit 1 if any check fails or there is no GPU.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "harness/harness.h"

enum { O_TOKENS, O_SEED };
static const struct lg_cli_opt opts[] = {
	[O_TOKENS] = {"tokens", 't', "N[,N...]", "token counts to check (default 8192)"},
	[O_SEED] = {"seed", 's', "S", "input seed (default: $LINGEN_SEED, else from the clock)"},
	{0},
};

/* "y bf16 exact", or "dx bf16 <=0+slack ulp (max 3; 612 with slack, 2 at bound)". */
static void print_ulp(const struct lg_check_measure *m)
{
	if (m->ulp_bound == 0 && !m->slack)
		printf("  %s %s %s", m->name, m->kind,
		       m->mismatches ? "NOT exact" : "exact");
	else
		printf("  %s %s <=%d%s ulp (max %llu; %llu with slack, %llu at bound)", m->name, m->kind,
		       m->ulp_bound, m->slack ? "+slack" : "", (unsigned long long)m->max_ulps,
		       (unsigned long long)m->slack, (unsigned long long)m->at_bound);
}

/* "q fp8 eq=0.999812  s scale bit-equal  ..." for one result. */
static void print_measures(const struct lg_check_result *r)
{
	double max_rel = 0;
	for (int i = 0; i < r->nmeasures; i++) {
		const struct lg_check_measure *m = &r->m[i];
		if (m->ulp_bound >= 0)
			print_ulp(m);
		else if (strcmp(m->kind, "fp8") == 0)
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

/* --seed, else $LINGEN_SEED, else a new one; 2 on a bad value. */
static int pick_seed(const struct lg_cli_cmd *cmd, const char *opt, long long *seed)
{
	if (opt)
		return lg_cli_int(cmd, "seed", opt, 0, INT64_MAX, seed);
	uint64_t s = 0;
	bool set = false;
	if (lg_check_env_seed(&s, &set) != LG_OK)
		return lg_cli_usage_error(cmd, "%s", lg_last_error());
	*seed = (long long)(set ? s : lg_check_fresh_seed());
	return LG_EXIT_OK;
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
		rc = pick_seed(cmd, a->val[O_SEED], &seed);
	if (rc == LG_EXIT_OK)
		rc = lg_cli_load_specs(a->pos, a->npos, &specs);
	if (rc == LG_EXIT_OK)
		rc = lg_cli_gpu_ctx("check", &ctx);
	if (rc == LG_EXIT_OK) {
		printf("seed: %lld (replay with --seed %lld or LINGEN_SEED=%lld)\n", seed, seed, seed);
		rc = check_all(ctx, &specs, tokens, nt, (uint64_t)seed);
	}
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
	.details = "Prints the seed of the random inputs, then PASS/FAIL per kernel and\n"
		   "token count with the measures of docs/kernels.md (fp8 equal fraction, scale\n"
		   "bit-equality, outputs checked exactly or within ulps, max relative error).\n"
		   "The seed is --seed, else $LINGEN_SEED, else new from the clock.\n"
		   "Exit 1 if any check fails. Needs a GPU.\n",
	.opts = opts,
	.min_pos = 1,
	.max_pos = -1,
	.run = run,
};
