/*
 * gpu_test_bundle.c - a deployment bundle on the GPU (label "gpu"): build
 * a bundle for the device's arch with the CLI, make NVRTC unloadable, create
 * a context on the bundle and check every kernel of ling-mini-2.0-norms
 * against its CPU reference at 8192 and 127 tokens. A kernel the bundle
 * lacks is LG_ERR_MISSING, not a JIT compile. The kernels come from the
 * bundle's linked module (one library for all, lingen build links every
 * kernel of these); the same kernels loaded each from its own cubin (the
 * bundle's index without its linked module) pass the same check at the
 * same seed, with the same counts. The inputs' seed is printed;
 * LINGEN_SEED replays. Exits with LG_TEST_SKIP (ctest: skipped), saying
 * why, when there is no CUDA device or driver.
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

#include "context.h" /* lg_kernel.lib */
#include "cuda.h"
#include "harness.h"
#include "nvrtc.h"
#include "proc.h"
#include "testutil.h"

#define NORMS LG_SOURCE_DIR "/configs/kernels/ling-mini-2.0-norms.json"

static char *tmp, *bundle;
static lg_ctx *ctx; /* on the bundle */
static uint64_t seed;

/* Build the bundle for the device's arch (NVRTC available), then block
 * NVRTC and open a context on the bundle. */
static int setup(void **state)
{
	(void)state;
	const struct lg_cu *cu;
	char arch[16];
	if (lg_cu_get(&cu) != LG_OK || lg_cu_device_arch(arch) != LG_OK) {
		fprintf(stderr, "%s\n", lg_last_error());
		return -1;
	}
	tmp = lg_test_tmpdir("gpu-bundle");
	char *cache = lg_test_path(tmp, "cache"), *env[2] = {NULL, NULL};
	bundle = lg_test_path(tmp, "bundle");
	if (asprintf(&env[0], "LINGEN_CACHE_DIR=%s", cache) < 0)
		return -1;
	char *argv[] = {(char *)LG_CLI, (char *)"build", (char *)NORMS, (char *)"--arch", arch, (char *)"-o",
			bundle, (char *)"--link", NULL};
	struct lg_proc p = {0};
	int rc = lg_proc_run(argv, env, &p) == 0 && p.status == 0 ? 0 : -1;
	if (rc)
		fprintf(stderr, "lingen build failed:\n%s\n", p.err ? p.err : "");
	lg_proc_free(&p);
	lg_nvrtc_block_for_tests(1);
	lg_ctx_opts o = {.bundle = bundle}; /* arch: the device's */
	if (!rc && lg_ctx_create(&o, &ctx) != LG_OK) {
		fprintf(stderr, "%s\n", lg_last_error());
		rc = -1;
	}
	if (!rc)
		printf("bundle %s for %s, NVRTC blocked\n", bundle, lg_ctx_arch(ctx));
	free(env[0]);
	free(cache);
	return rc;
}

static int teardown(void **state)
{
	(void)state;
	lg_ctx_destroy(ctx);
	lg_test_rm_rf(tmp);
	free(bundle);
	free(tmp);
	return 0;
}

static struct lg_check_result check_on(lg_ctx *c, const lg_spec *s, int64_t tokens)
{
	struct lg_check_opts o = {.tokens = tokens, .seed = seed};
	struct lg_check_result r;
	if (lg_check_kernel(c, s, &o, &r) != LG_OK)
		fail_msg("%s x %lld: %s", lg_spec_entry(s), (long long)tokens, lg_last_error());
	printf("%s M=%lld (bundle%s): %s\n", lg_spec_entry(s), (long long)tokens, c == ctx ? "" : ", each alone",
	       r.pass ? "PASS" : "FAIL");
	for (int i = 0; i < r.nmeasures; i++)
		if (!r.m[i].pass)
			printf("  %s: %llu of %llu outside the bound (%llu unwritten)\n", r.m[i].name,
			       (unsigned long long)r.m[i].mismatches, (unsigned long long)r.m[i].count,
			       (unsigned long long)r.m[i].unwritten);
	assert_true(r.nmeasures > 0);
	assert_true(r.pass);
	return r;
}

static void check(const lg_spec *s, int64_t tokens) { check_on(ctx, s, tokens); }

/* The bundle without its linked module, in tmp/alone: its index with the
 * linked lines left out and every kernel marked as not in one, its cubin
 * file a link to the bundle's. */
static char *bundle_alone(void)
{
	char *alone = lg_test_path(tmp, "alone"), *ipath = lg_test_path(bundle, "index.lgb");
	char *text = lg_test_read_file(ipath, NULL), *cmd = NULL;
	assert_non_null(text);
	assert_true(asprintf(&cmd, "mkdir -p '%s' && ln -sf '%s/cubins.lgc' '%s/cubins.lgc'", alone, bundle, alone) > 0);
	assert_int_equal(system(cmd), 0);
	char *out = NULL;
	size_t len = 0;
	FILE *fp = open_memstream(&out, &len);
	assert_non_null(fp);
	for (char *line = text, *end; *line; line = end + 1) {
		end = strchr(line, '\n');
		assert_non_null(end);
		if (strncmp(line, "linked\t", 7) == 0)
			continue;
		if (strncmp(line, "kernel\t", 7) == 0 && end[-1] == '1' && end[-2] == '\t')
			end[-1] = '0';
		fwrite(line, 1, (size_t)(end + 1 - line), fp);
	}
	fclose(fp);
	char *opath = lg_test_path(alone, "index.lgb");
	lg_test_write_file(opath, out, len);
	free(opath);
	free(out);
	free(cmd);
	free(text);
	free(ipath);
	return alone;
}

/* Every kernel from the linked module (no library of its own), and the
 * same kernel loaded alone (its own library) from the bundle without one:
 * both pass at the same seed, with the same counts. */
static void test_linked_vs_alone(void **state)
{
	(void)state;
	char *alone = bundle_alone();
	lg_ctx_opts o = {.bundle = alone};
	lg_ctx *c2 = NULL;
	if (lg_ctx_create(&o, &c2) != LG_OK)
		fail_msg("%s", lg_last_error());
	lg_spec_file *f;
	assert_int_equal(lg_spec_file_load(NORMS, &f), LG_OK);
	for (size_t i = 0; i < lg_spec_file_count(f); i++) {
		const lg_spec *s = lg_spec_file_get(f, i);
		lg_kernel *linked, *own;
		assert_int_equal(lg_kernel_get(ctx, s, &linked), LG_OK);
		assert_int_equal(lg_kernel_get(c2, s, &own), LG_OK);
		assert_null(linked->lib);   /* the context's linked module */
		assert_non_null(own->lib);  /* its own cubin */
		struct lg_check_result a = check_on(ctx, s, 8192), b = check_on(c2, s, 8192);
		assert_int_equal(a.nmeasures, b.nmeasures);
		for (int m = 0; m < a.nmeasures; m++) {
			assert_int_equal(a.m[m].mismatches, b.m[m].mismatches);
			assert_int_equal(a.m[m].unwritten, b.m[m].unwritten);
		}
	}
	lg_spec_file_free(f);
	lg_ctx_destroy(c2);
	free(alone);
}

static void test_bundle_kernels(void **state)
{
	(void)state;
	lg_spec_file *f;
	assert_int_equal(lg_spec_file_load(NORMS, &f), LG_OK);
	for (size_t i = 0; i < lg_spec_file_count(f); i++) {
		check(lg_spec_file_get(f, i), 8192);
		check(lg_spec_file_get(f, i), 127);
	}
	lg_spec_file_free(f);
}

static void test_bundle_missing(void **state)
{
	(void)state;
	lg_spec *s;
	assert_int_equal(lg_spec_parse("{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 4096}", &s),
			 LG_OK);
	lg_kernel *k;
	assert_int_equal(lg_kernel_get(ctx, s, &k), LG_ERR_MISSING);
	assert_non_null(strstr(lg_last_error(), lg_spec_entry(s)));
	lg_spec_free(s);
}

int main(void)
{
	unsetenv("LINGEN_ARCH");
	lg_test_require_gpu("gpu_test_bundle");
	seed = lg_test_seed("gpu_test_bundle");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bundle_kernels),
		cmocka_unit_test(test_bundle_missing),
		cmocka_unit_test(test_linked_vs_alone),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
