/*
 * test_golden.c - golden tests of generated source (docs/style.md 7), no GPU.
 *
 * Every .cu file of tests/golden/ is a case: its banner (util/banner.h:
 * the family, the target and the canonical spec lg_emit_banner wrote) says
 * what it was generated from, so the test regenerates it from there with
 * lg_generate_for and compares byte for byte; a mismatch names the first
 * differing line and shows both versions of it. There is no table of cases
 * here to drift from the files. Every golden file is also compiled by NVRTC
 * for its target and must give an ELF cubin with no warning (NVRTC warns of
 * unused variables and functions).
 *
 * Since the files are the cases, a golden with no readable banner, a
 * family the registry does not know or a name that does not say its family
 * (and its target, off sm_90a: <family>_<case>_sm80.cu) fails, and so does a
 * family of the registry with no golden for a target it runs on (sm_90a,
 * sm_80): deleting a family's last golden is caught; deleting one of
 * several shows only in the count printed and in `git diff`.
 *
 * The rules every generated file keeps (util/gencheck.h: line width, no
 * unused helper, no arithmetic on a literal 0, no dead code by NVRTC's
 * front end with its unused-variable and unused-parameter diagnostics on),
 * checked on the golden files and on every kernel of the spec files in
 * configs/kernels/ and of the expanded model configs in configs/models/,
 * for sm_90a and sm_80.
 *
 * When a generator change is meant to change the output, rewrite the golden
 * files and review the diff before committing it:
 *
 *     LINGEN_UPDATE_GOLDEN=1 ./build/tests/test_golden && git diff tests/golden
 *
 * With LINGEN_UPDATE_GOLDEN=1 the test writes every file whose text differs,
 * prints which it wrote, and passes. A new golden is a spec file of one
 * kernel ({"kernels": [{"op": ...}]}) generated into its place:
 *
 *     ./build/lingen gen case.json --arch sm_80 > tests/golden/<family>_<case>_sm80.cu
 */
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "banner.h"
#include "gencheck.h"
#include "generate.h"
#include "nvrtc.h"
#include "spec.h"
#include "testutil.h"

#define GOLDEN_DIR LG_SOURCE_DIR "/tests/golden"

/* The targets the goldens of every family cover (but for a family that
 * runs on one target only) and the spec files are checked for. */
static const char *const archs[] = {"sm_90a", "sm_80"};
#define NARCHS (sizeof archs / sizeof archs[0])

/* A golden file; what it holds is read from it. */
struct golden {
	char *path;
	char *name; /* the file's name without ".cu" */
};

/* Every golden file, for the test of the registry's coverage. */
struct goldens {
	const struct golden *g;
	size_t n;
};

static bool updating(void)
{
	const char *v = getenv("LINGEN_UPDATE_GOLDEN");
	return v && strcmp(v, "1") == 0;
}

/* The text of golden g (its length in *len) and its banner in *b; fails
 * naming the file when it cannot be read or its banner not parsed. */
static char *load(const struct golden *g, struct lg_banner *b, size_t *len)
{
	char why[160];
	char *src = lg_test_read_file(g->path, len);
	if (!src)
		fail_msg("%s: cannot be read", g->path);
	if (lg_test_read_banner(src, b, why, sizeof why) != 0)
		fail_msg("%s: %s (test_golden regenerates a golden from its banner)", g->path, why);
	return src;
}

/* "_sm80" when name ends in a target's tag, else "". */
static const char *arch_tag(const char *name)
{
	const char *u = strrchr(name, '_');
	return u && !strncmp(u, "_sm", 3) && isdigit((unsigned char)u[3]) ? u : "";
}

/* A golden's name says its family and, off sm_90a, its target: a golden
 * copied to a new case and not renamed fails here. */
static void check_name(const struct golden *g, const struct lg_banner *b)
{
	size_t n = strlen(b->family);
	char want[24] = "";
	if (strncmp(g->name, b->family, n) != 0 || g->name[n] != '_')
		fail_msg("%s: a golden of family %s is named %s_<case>.cu", g->path, b->family, b->family);
	if (strcmp(b->arch, "sm_90a") != 0)
		snprintf(want, sizeof want, "_sm%s", b->arch + strlen("sm_"));
	if (strcmp(arch_tag(g->name), want) != 0)
		fail_msg("%s: the banner's target is %s: the name ends in \"%s\" (\"\" for sm_90a)",
			 g->path, b->arch, want);
}

/* The spec of g's banner, of the family the banner names. */
static lg_spec *banner_spec(const struct golden *g, const struct lg_banner *b)
{
	lg_spec *s = NULL;
	if (lg_spec_parse(b->spec, &s) != LG_OK)
		fail_msg("%s: the banner's spec: %s", g->path, lg_last_error());
	if (strcmp(s->fam->op, b->family) != 0)
		fail_msg("%s: the banner says family %s, its spec is of %s", g->path, b->family, s->fam->op);
	return s;
}

/* Every entry of plan p launches no more threads a block than the
 * __launch_bounds__ its source asks (more fail at launch): the family's
 * geometry and its emitter agree (tile.m 256's first geometry launched 640
 * threads at a kernel of 384). At one token, as tune and check start. */
static void check_launch_bounds(const char *what, const lg_spec *s, const struct lg_plan *p, const char *src)
{
	int64_t one[LG_MAX_SIZES];
	lg_sizes_at(s->fam, s->pass, 1, one);
	for (int e = 0; e < p->nentries; e++) {
		struct lg_launch_dim d;
		s->fam->geometry(p, e, one, &d);
		unsigned threads = d.block[0] * d.block[1] * d.block[2];
		size_t n = strlen(p->entry[e]);
		const char *at = src;
		long bound = -1;
		while ((at = strstr(at, "__launch_bounds__(")) != NULL) {
			at += strlen("__launch_bounds__(");
			const char *name = strchr(at, '\n');
			if (name && strncmp(name + 1, p->entry[e], n) == 0 && name[1 + n] == '(') {
				bound = strtol(at, NULL, 10);
				break;
			}
		}
		if (bound >= 0 && threads > (unsigned long)bound)
			fail_msg("%s: entry %s launches %u threads a block, its __launch_bounds__ %ld", what,
				 p->entry[e], threads, bound);
	}
}

/* The source g's banner asks for, its length in *len. */
static char *generate(const struct golden *g, const struct lg_banner *b, size_t *len)
{
	struct lg_target t;
	if (!lg_target_parse(b->arch, &t))
		fail_msg("%s: the banner's target %s is not an arch", g->path, b->arch);
	lg_spec *s = banner_spec(g, b);
	check_name(g, b); /* once the family is known to the registry */
	struct lg_plan p;
	char *src = NULL;
	if (lg_generate_for(s, &t, &p, &src, len) != LG_OK)
		fail_msg("%s: generate for %s: %s", g->path, b->arch, lg_last_error());
	check_launch_bounds(g->path, s, &p, src);
	lg_spec_free(s);
	return src;
}

/* The line of text starting at s, without its newline, for messages. */
static int line_len(const char *s)
{
	return (int)strcspn(s, "\n");
}

/* Fail naming the first line where want and got differ (they do differ). */
static void fail_at_first_diff(const char *path, const char *want, const char *got)
{
	const char *w = want, *g = got;
	int line = 1;
	for (size_t i = 0; want[i] == got[i] && want[i]; i++) {
		if (want[i] == '\n') {
			line++;
			w = want + i + 1;
			g = got + i + 1;
		}
	}
	fail_msg("%s:%d differs from the source its banner's spec generates\n  golden:    %.*s\n"
		 "  generated: %.*s\n(LINGEN_UPDATE_GOLDEN=1 rewrites the golden files)",
		 path, line, line_len(w), w, line_len(g), g);
}

static void test_matches(void **state)
{
	const struct golden *g = *state;
	struct lg_banner b;
	size_t len = 0, glen = 0;
	char *want = load(g, &b, &glen);
	char *src = generate(g, &b, &len);
	lg_test_check_source(g->name, src, b.arch);
	bool same = glen == len && memcmp(want, src, len) == 0;
	if (!same && updating()) {
		lg_test_write_file(g->path, src, len);
		print_message("wrote %s\n", g->path);
	} else if (!same) {
		fail_at_first_diff(g->path, want, src);
	}
	free(b.spec);
	free(want);
	free(src);
}

/* No golden may spill (ptxas: "0 bytes spill stores"): spills cost speed
 * (adamw's first plan spilled 464 bytes a thread and ran at a third of its
 * speed). Issue 27 made the last four spill-free, by their plans or
 * emission: router_gemm_bwd_h1000_e97_bf16x3_sm80 (228 bytes: narrow
 * cp.async loaders fully unrolled), batch_swiglu_quant_fwd_n256_e160_
 * colwise_sm80 (48: 4 token tiles at 64 registers with software e4m3),
 * group_rmsnorm_gate_bwd_d4096_g2 (12: 2 pieces a lane at 128 registers),
 * qk_norm_rope_fwd_..._varlen_cp2 (8: batch 2 beside varlen's search);
 * and, by NVRTC (nvcc showed none), qk_norm_rope_fwd_d128_hq16_hkv4 (8:
 * the minimum of 4 CTAs an SM, now left to ptxas: reg_caps below). */
/* Goldens whose kernel asks no __launch_bounds__ minimum, with the
 * registers a thread that keep their occupancy: qk_norm_rope's forward at
 * the target shape takes 64 by NVRTC 13.0 (4 CTAs of 256 an SM) and spilled
 * 8 bytes when it asked for 4 CTAs; at 65 it would hold 3 (nvcc 13.0.88's
 * own front end gives 65: a toolkit that does so here wants a new plan). */
static const struct {
	const char *name;
	long regs;
} reg_caps[] = {{"qk_norm_rope_fwd_d128_hq16_hkv4", 64}};

static void check_registers(const struct golden *g, const char *src, const char *arch)
{
	for (size_t i = 0; i < sizeof reg_caps / sizeof reg_caps[0]; i++) {
		if (strcmp(g->name, reg_caps[i].name) != 0)
			continue;
		char *log = NULL;
		if (lg_nvrtc_resources(src, g->name, arch, &log) != LG_OK)
			fail_msg("%s for %s: %s", g->path, arch, lg_last_error());
		/* ptxas: "Used N registers, ..." an entry point */
		for (const char *p = log; p && (p = strstr(p, "Used ")) != NULL; p++)
			if (atol(p + 5) > reg_caps[i].regs)
				fail_msg("%s for %s: more than %ld registers a thread (ptxas):\n%s", g->path, arch,
					 reg_caps[i].regs, log);
		free(log);
	}
}

static void test_compiles(void **state)
{
	const struct golden *g = *state;
	struct lg_banner b;
	char *src = load(g, &b, NULL);
	void *cubin = NULL;
	char *log = NULL;
	size_t size = 0;
	if (lg_nvrtc_compile(src, g->name, b.arch, &cubin, &size, &log) != LG_OK)
		fail_msg("%s for %s: %s", g->path, b.arch, lg_last_error());
	if (log)
		fail_msg("%s for %s: NVRTC warns:\n%s", g->path, b.arch, log);
	lg_test_assert_cubin(cubin, size);
	lg_test_check_no_spill(g->path, src, b.arch);
	check_registers(g, src, b.arch);
	free(b.spec);
	free(cubin);
	free(src);
}

/* Mark in seen[op][arch] the family and target of g's banner. A golden
 * whose banner or family is wrong fails its own test, not this one, so that
 * this one names every family left without a golden. */
static void mark_covered(const struct golden *g, bool seen[LG_OP_COUNT][NARCHS])
{
	struct lg_banner b;
	char why[160];
	char *src = lg_test_read_file(g->path, NULL);
	if (!src || lg_test_read_banner(src, &b, why, sizeof why) != 0) {
		free(src);
		return;
	}
	size_t op = 0, a = 0;
	while (op < LG_OP_COUNT && strcmp(lg_op_names[op], b.family) != 0)
		op++;
	while (a < NARCHS && strcmp(archs[a], b.arch) != 0)
		a++;
	if (op < LG_OP_COUNT && a < NARCHS)
		seen[op][a] = true;
	free(b.spec);
	free(src);
}

/* Every family of the registry has a golden for each target it runs on. */
static void test_registry_covered(void **state)
{
	const struct goldens *all = *state;
	bool seen[LG_OP_COUNT][NARCHS] = {{false}};
	for (size_t i = 0; i < all->n; i++)
		mark_covered(&all->g[i], seen);
	for (int op = 0; op < LG_OP_COUNT; op++) {
		const struct lg_family *f = lg_family_get((enum lg_op)op);
		for (size_t a = 0; a < NARCHS; a++)
			if (!seen[op][a] && (!f->target_only || !strcmp(f->target_only, archs[a])))
				fail_msg("family %s has no golden for %s in %s", f->op, archs[a], GOLDEN_DIR);
	}
	print_message("%zu goldens cover the %d families of the registry\n", all->n, LG_OP_COUNT);
}

static size_t check_spec_file(const char *file, lg_spec_file *f)
{
	size_t k = 0;
	for (; k < lg_spec_file_count(f); k++) {
		for (size_t a = 0; a < NARCHS; a++) {
			struct lg_target t;
			struct lg_plan p;
			char *src = NULL, what[256];
			assert_true(lg_target_parse(archs[a], &t));
			const lg_spec *s = lg_spec_file_get(f, k);
			if (s->fam->target_only && strcmp(s->fam->target_only, archs[a]) != 0)
				continue; /* refused there (test_family checks how) */
			if (lg_generate_for(s, &t, &p, &src, NULL) != LG_OK)
				fail_msg("%s: %s", file, lg_last_error());
			snprintf(what, sizeof what, "%s (%s, %s)", file, lg_spec_entry(s), archs[a]);
			lg_test_check_source(what, src, archs[a]);
			check_launch_bounds(what, s, &p, src);
			free(src);
		}
	}
	return k;
}

/* The rules for every kernel of the shipped spec files. */
static void test_shipped_specs_rules(void **state)
{
	(void)state;
	size_t n = 0, kernels = 0;
	char **files = lg_test_list_dir(LG_SOURCE_DIR "/configs/kernels", ".json", &n);
	assert_non_null(files);
	for (size_t i = 0; i < n; i++) {
		lg_spec_file *f = NULL;
		if (lg_spec_file_load(files[i], &f) != LG_OK)
			fail_msg("%s", lg_last_error());
		kernels += check_spec_file(files[i], f);
		lg_spec_file_free(f);
	}
	assert_true(kernels >= 3);
	lg_test_free_list(files);
}

/* The rules for every kernel of a training step of each shipped model. */
static void test_model_steps_rules(void **state)
{
	(void)state;
	size_t n = 0, kernels = 0;
	char **files = lg_test_list_dir(LG_SOURCE_DIR "/configs/models", ".json", &n);
	assert_non_null(files);
	for (size_t i = 0; i < n; i++) {
		char *json = NULL;
		lg_spec_file *f = NULL;
		if (lg_model_expand_file(files[i], &json) != LG_OK ||
		    lg_spec_file_parse(json, strlen(json), files[i], &f) != LG_OK)
			fail_msg("%s", lg_last_error());
		kernels += check_spec_file(files[i], f);
		lg_spec_file_free(f);
		free(json);
	}
	assert_true(kernels >= 3 * n);
	lg_test_free_list(files);
}

/* The golden files as tests: *n of them, NULL (after saying why) if none. */
static struct golden *list_goldens(size_t *n)
{
	char **files = lg_test_list_dir(GOLDEN_DIR, ".cu", n);
	if (!files || !*n) {
		fprintf(stderr, "test_golden: no golden files (*.cu) in %s\n", GOLDEN_DIR);
		lg_test_free_list(files);
		return NULL;
	}
	struct golden *g = calloc(*n, sizeof *g);
	for (size_t i = 0; g && i < *n; i++) {
		const char *base = strrchr(files[i], '/') + 1;
		g[i].name = strndup(base, strlen(base) - strlen(".cu"));
		g[i].path = files[i];
		if (!g[i].name)
			abort(); /* tests die on setup failures (testutil.h) */
	}
	if (!g)
		abort();
	free(files); /* its strings are the paths now */
	return g;
}

static struct CMUnitTest unit(const char *name, CMUnitTestFunction f, void *state)
{
	return (struct CMUnitTest){.name = name, .test_func = f, .initial_state = state};
}

/* Per golden: its text matches (or is rewritten), then NVRTC compiles it;
 * then the registry's coverage and the rules of the shipped specs. */
static int run(const struct golden *g, size_t n)
{
	struct goldens all = {g, n};
	struct CMUnitTest *tests = calloc(2 * n + 3, sizeof *tests);
	char **names = calloc(n, sizeof *names);
	if (!tests || !names)
		abort();
	for (size_t i = 0; i < n; i++) {
		if (asprintf(&names[i], "%s nvrtc", g[i].name) < 0)
			abort();
		tests[2 * i] = unit(g[i].name, test_matches, (void *)&g[i]);
		tests[2 * i + 1] = unit(names[i], test_compiles, (void *)&g[i]);
	}
	tests[2 * n] = unit("every family has goldens", test_registry_covered, &all);
	tests[2 * n + 1] = unit("shipped specs: the rules of generated code", test_shipped_specs_rules,
				NULL);
	tests[2 * n + 2] = unit("model steps: the rules of generated code", test_model_steps_rules,
				NULL);
	int failed = _cmocka_run_group_tests("test_golden", tests, 2 * n + 3, NULL, NULL);
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	free(tests);
	return failed;
}

int main(void)
{
	size_t n = 0;
	struct golden *g = list_goldens(&n);
	if (!g)
		return 1;
	printf("test_golden: %zu golden files in %s\n", n, GOLDEN_DIR);
	int failed = run(g, n);
	for (size_t i = 0; i < n; i++) {
		free(g[i].name);
		free(g[i].path);
	}
	free(g);
	return failed;
}
