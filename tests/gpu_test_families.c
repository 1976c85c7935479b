/*
 * gpu_test_families.c - every family of the registry (gen/core/families.h)
 * on the GPU against its CPU reference (label "gpu"), from one driver: the
 * cases of tests/cases/<family>.json (cases.h: specs, token counts or
 * run-time sizes, odd ones included, the tiles `lingen tune` tries), each
 * through lg_check_kernel, the check of `lingen check`: fresh random
 * inputs, poisoned outputs, every output within the tolerance its
 * reference declares, nothing unwritten, and for an "exact" case every
 * output bit for bit. A family whose file says "elsewhere" is checked by
 * the GPU test it names. What stays in a gpu_test_<name>.c of its own is
 * what this check cannot say: refusals, accumulate, bf16 exactness, the
 * same bits on a second launch, typed launchers, bundles, multi-step state,
 * launches on other buffers and sizes.
 *
 *   gpu_test_families [FAMILY...]         run (every family, or those named)
 *   gpu_test_families --list [FAMILY...]  no GPU: every case file read, every
 *                                         family of the registry has one, every
 *                                         spec parsed and generated (candidates
 *                                         too) for its target; ctest runs this
 *                                         as test_families_list (label "cpu")
 *   gpu_test_families --list --runs [FAMILY...]
 *                                         the same, and a line a run: the
 *                                         canonical spec, its sizes, the arch
 *                                         it compiles for, the routing patterns
 *                                         and the device arch it needs (to
 *                                         compare what two versions run)
 *
 * LINGEN_TEST_SHARD=I/N runs only the runs whose index (in the order
 * --list --runs prints) is I modulo N: N processes side by side share a
 * family's float64 references over the machine's cores. LINGEN_TEST_MATCH=TEXT
 * runs only the specs whose canonical JSON (as --list --runs prints it)
 * holds TEXT, e.g. '"epilogue": 3'; the run indices stay those of the whole
 * family, so a shard is the same run with or without it.
 *
 * Exits with LG_TEST_SKIP (ctest: skipped), saying why, when there is no
 * CUDA device or driver; random inputs print their seed (LINGEN_SEED replays,
 * and each failure prints its `lingen check` line).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cases.h"
#include "context.h"
#include "family.h"
#include "generate.h"
#include "gputest.h"
#include "harness.h"
#include "spec.h"
#include "testutil.h"

static lg_ctx *ctx;
static lg_ctx *ctx_other; /* "context" of a case: the device's arch less its "a" */
static uint64_t seed;
static bool list_only;
static bool list_runs; /* --list --runs: a line a run */
static long shard_i, shard_n = 1; /* LINGEN_TEST_SHARD=I/N */
static const char *match;          /* LINGEN_TEST_MATCH=TEXT */

/* The case file of family op, loaded into f (a cmocka failure otherwise). */
static void load(enum lg_op op, struct lg_case_file *f)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s.json", lg_cases_dir(), lg_op_names[op]);
	if (lg_cases_load(path, lg_op_names[op], f) != 0)
		fail_msg("%s: see above", path);
}

/* The specs a case runs: the spec itself, or every candidate tile of it
 * for target t. *n gets their number; refused and refused_ok: 0. */
static int specs_of(const struct lg_case *c, const struct lg_target *t, struct lg_spec *out, int max)
{
	lg_spec *s = NULL;
	if (lg_spec_parse(c->json, &s) != LG_OK) {
		if (c->refused_ok) {
			printf("%s: refused, skipped (%s)\n", c->json, lg_last_error());
			return 0;
		}
		fail_msg("case %d: %s: %s", c->index, c->json, lg_last_error());
	}
	int n = 1;
	if (!c->candidates) {
		out[0] = *s;
	} else {
		struct lg_tile_choice ch[LG_MAX_CANDIDATES];
		n = s->fam->candidates ? s->fam->candidates(s, t, ch, LG_MAX_CANDIDATES < max ? LG_MAX_CANDIDATES : max)
				       : 0;
		if (n <= 0)
			fail_msg("case %d: %s: no candidates for %s", c->index, c->json, t->name);
		for (int i = 0; i < n; i++)
			if (lg_spec_with_tile(s, &ch[i], &out[i]) != LG_OK)
				fail_msg("case %d: %s: candidate %d: %s", c->index, c->json, i, lg_last_error());
	}
	lg_spec_free(s);
	return n;
}

/* ------------------------------------------------------------ --list */

/* Every spec of family op parsed and generated for its target; the
 * points fit the pass's sizes. */
static void list_family(void **state)
{
	enum lg_op op = (enum lg_op)(intptr_t)*state;
	struct lg_case_file f;
	load(op, &f);
	size_t specs = 0, runs = 0;
	for (size_t i = 0; i < f.n; i++) {
		const struct lg_case *c = &f.c[i];
		struct lg_target t;
		/* the arch it compiles for: its context (with needs too: "needs"
		 * picks the device, "context" what runs there), else needs */
		const char *arch = c->context[0] ? c->context : c->needs[0] ? c->needs : "sm_90a";
		if (!lg_target_parse(arch, &t))
			fail_msg("case %d: \"%s\" is no arch", c->index, arch);
		struct lg_spec v[LG_MAX_CANDIDATES];
		int n = specs_of(c, &t, v, LG_MAX_CANDIDATES);
		for (int k = 0; k < n; k++) {
			if (c->nsizes > v[k].fam->sig[v[k].pass].nsizes)
				fail_msg("case %d: %s: %d sizes given, the pass has %d", c->index, v[k].entry, c->nsizes,
					 v[k].fam->sig[v[k].pass].nsizes);
			struct lg_plan p;
			char *src = NULL;
			size_t len;
			if (lg_generate_for(&v[k], &t, &p, &src, &len) != LG_OK)
				fail_msg("case %d: %s for %s: %s", c->index, v[k].entry, t.name, lg_last_error());
			free(src);
			for (size_t pt = 0; list_runs && pt < c->npoints; pt++) {
				char *canon = lg_spec_canonical(&v[k]), at[96];
				printf("run %s %s %s x%d%s%s%s\n", canon ? canon : "?", lg_case_point(c, pt, at, sizeof at),
				       t.name, c->patterns, c->no_optional ? " no optional" : "", c->needs[0] ? " needs " : "",
				       c->needs);
				free(canon);
			}
		}
		specs += (size_t)n;
		runs += (size_t)n * c->npoints * (size_t)c->patterns;
	}
	if (f.elsewhere)
		printf("%s: %zu specs, %zu runs here; on the GPU also %s\n", f.family, specs, runs, f.elsewhere);
	else
		printf("%s: %zu specs, %zu runs\n", f.family, specs, runs);
	lg_cases_free(&f);
}

/* Every file of tests/cases/ is a family's. */
static void list_files(void **state)
{
	(void)state;
	size_t n;
	char **files = lg_test_list_dir(lg_cases_dir(), ".json", &n);
	assert_non_null(files);
	for (size_t i = 0; i < n; i++) {
		const char *base = strrchr(files[i], '/') ? strrchr(files[i], '/') + 1 : files[i];
		size_t len = strlen(base) - 5;
		bool known = false;
		for (int op = 0; op < LG_OP_COUNT; op++)
			known = known || (strlen(lg_op_names[op]) == len && !strncmp(lg_op_names[op], base, len));
		if (!known)
			fail_msg("%s: no family of that name in gen/core/families.h", files[i]);
	}
	lg_test_free_list(files);
}

/* ------------------------------------------------------------- the GPU */

/* The context of case c: the device's, or (context "sm_90" on an sm_90a
 * device) one compiling for the arch without "a". */
static lg_ctx *context_of(const struct lg_case *c)
{
	const char *arch = lg_ctx_arch(ctx);
	if (!c->context[0] || !strcmp(c->context, arch) || strncmp(c->context, arch, strlen(c->context)))
		return ctx;
	if (!ctx_other) {
		lg_ctx_opts o = {.arch = c->context};
		if (lg_ctx_create(&o, &ctx_other) != LG_OK)
			fail_msg("a context for %s: %s", c->context, lg_last_error());
	}
	if (strcmp(lg_ctx_arch(ctx_other), c->context))
		fail_msg("case %d: contexts for two archs (%s, %s): one a run", c->index, lg_ctx_arch(ctx_other),
			 c->context);
	return ctx_other;
}

/* One spec at point i of case c with seed sd: true when it passes. */
static bool run_one(lg_ctx *cx, const struct lg_spec *s, const struct lg_case *c, size_t i, uint64_t sd)
{
	int64_t sizes[LG_MAX_SIZES];
	lg_sizes_at(s->fam, s->pass, c->points[i][0], sizes);
	bool zero = false;
	for (int k = 0; k < s->fam->sig[s->pass].nsizes; k++) {
		if (k < c->nsizes)
			sizes[k] = c->points[i][k];
		zero = zero || sizes[k] == 0;
	}
	struct lg_check_opts o = {.tokens = c->points[i][0], .sizes = sizes, .seed = sd, .no_optional = c->no_optional};
	struct lg_check_result r;
	char at[96];
	lg_case_point(c, i, at, sizeof at);
	if (lg_check_kernel(cx, s, &o, &r) != LG_OK) {
		printf("%s %s %s: ERROR %s\n", s->entry, lg_ctx_arch(cx), at, lg_last_error());
		return false;
	}
	bool ok = r.pass && (zero || r.nmeasures > 0);
	for (int k = 0; k < r.nmeasures; k++)
		ok = ok && r.m[k].unwritten == 0 && (!c->exact || r.m[k].mismatches == 0);
	printf("%s %s %s%s: %s\n", s->entry, lg_ctx_arch(cx), at, c->no_optional ? " no optional" : "",
	       ok ? "PASS" : "FAIL");
	if (!ok) {
		lg_test_print_measures(&r, 9);
		printf("  case %d of tests/cases/%s.json%s%s; replay: LINGEN_SEED=%llu, or lingen check '%s' "
		       "--tokens %lld --seed %llu\n", c->index, lg_op_names[s->op], c->exact ? " (exact)" : "",
		       r.nmeasures || zero ? "" : " (no output measured)", (unsigned long long)seed, c->json,
		       (long long)c->points[i][0], (unsigned long long)sd);
	}
	return ok;
}

static void run_family(void **state)
{
	enum lg_op op = (enum lg_op)(intptr_t)*state;
	struct lg_case_file f;
	load(op, &f);
	size_t runs = 0, failed = 0;
	long index = 0;
	for (size_t i = 0; i < f.n; i++) {
		const struct lg_case *c = &f.c[i];
		if (c->needs[0] && strcmp(c->needs, lg_ctx_arch(ctx))) {
			printf("case %d: needs %s, the device is %s: not run\n", c->index, c->needs, lg_ctx_arch(ctx));
			continue;
		}
		lg_ctx *cx = context_of(c);
		struct lg_spec v[LG_MAX_CANDIDATES];
		int n = specs_of(c, &cx->target, v, LG_MAX_CANDIDATES);
		for (int k = 0; k < n; k++) {
			char *canon = match ? lg_spec_canonical(&v[k]) : NULL;
			bool skip = match && (!canon || !strstr(canon, match));
			free(canon);
			for (size_t p = 0; p < c->npoints; p++)
				for (int pat = 0; pat < c->patterns; pat++, index++) {
					uint64_t sd = c->patterns > 1 ? (seed & ~3ull) | (uint64_t)pat : seed;
					if (skip || index % shard_n != shard_i)
						continue;
					runs++;
					failed += !run_one(cx, &v[k], c, p, sd);
				}
		}
	}
	printf("%s: %zu of %zu runs failed%s%s%s%s\n", f.family, failed, runs, shard_n > 1 ? " (this shard)" : "",
	       match ? " (the specs matching LINGEN_TEST_MATCH)" : "",
	       f.elsewhere ? "; also on the GPU: " : "", f.elsewhere ? f.elsewhere : "");
	lg_cases_free(&f);
	assert_int_equal(failed, 0);
}

static int teardown_other(void **state)
{
	(void)state;
	if (ctx_other)
		lg_ctx_destroy(ctx_other);
	ctx_other = NULL;
	return 0;
}

/* Whether family op is among the names (none: every family). */
static bool wanted(int argc, char **argv, int first, enum lg_op op)
{
	if (first >= argc)
		return true;
	for (int i = first; i < argc; i++)
		if (!strcmp(argv[i], lg_op_names[op]))
			return true;
	return false;
}

int main(int argc, char **argv)
{
	int first = 1;
	if (argc > 1 && !strcmp(argv[1], "--list")) {
		list_only = true;
		first = 2;
		if (argc > 2 && !strcmp(argv[2], "--runs")) {
			list_runs = true;
			first = 3;
		}
	}
	for (int i = first; i < argc; i++) {
		bool known = false;
		for (int op = 0; op < LG_OP_COUNT; op++)
			known = known || !strcmp(argv[i], lg_op_names[op]);
		if (!known) {
			fprintf(stderr, "gpu_test_families: no family \"%s\" (usage: gpu_test_families [--list [--runs]] "
				"[FAMILY...])\n", argv[i]);
			return 2;
		}
	}
	struct CMUnitTest tests[LG_OP_COUNT + 1];
	size_t n = 0;
	if (list_only)
		tests[n++] = (struct CMUnitTest){.name = "case files", .test_func = list_files};
	for (int op = 0; op < LG_OP_COUNT; op++) {
		if (!wanted(argc, argv, first, (enum lg_op)op))
			continue;
		tests[n++] = (struct CMUnitTest){.name = lg_op_names[op], .test_func = list_only ? list_family : run_family,
						 .teardown_func = list_only ? NULL : teardown_other,
						 .initial_state = (void *)(intptr_t)op};
	}
	if (list_only)
		return _cmocka_run_group_tests("gpu_test_families --list", tests, n, NULL, NULL);
	const char *sh = getenv("LINGEN_TEST_SHARD");
	if (sh && *sh) {
		char *end;
		shard_i = strtol(sh, &end, 10);
		shard_n = *end == '/' ? strtol(end + 1, &end, 10) : 0;
		if (*end || shard_n < 1 || shard_i < 0 || shard_i >= shard_n) {
			fprintf(stderr, "gpu_test_families: LINGEN_TEST_SHARD=%s: want I/N with 0 <= I < N\n", sh);
			return 2;
		}
	}
	match = getenv("LINGEN_TEST_MATCH");
	if (match && !*match)
		match = NULL;
	lg_test_require_gpu("gpu_test_families");
	seed = lg_test_seed("gpu_test_families");
	return lg_test_run_gpu("gpu_test_families", tests, n, &ctx);
}
