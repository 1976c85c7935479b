/*
 * test_bundle.c - deployment bundles without a GPU: `lingen build` writes a
 * manifest (format 3) naming every kernel x arch with its spec, entry, plan
 * (launch geometry), checksum and the lingen and NVRTC versions; a context
 * on the bundle serves cubins with NVRTC made unloadable, gets as far as
 * the driver in lg_kernel_get, names kernel, arch and bundle for a kernel
 * the bundle lacks, and refuses a corrupt cubin or manifest (the index.lgb
 * and cubins.lgc of the bundle: test_bundle_index.c). `lingen aot`:
 * the generated C compiles, links into a program and dispatches by arch;
 * a context over a hand-made lg_aot_table looks kernels up the same way.
 *
 * Needs NVRTC (for the build) but no GPU. Runs the CLI (LG_CLI) and the
 * system C compiler (cc).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <cjson/cJSON.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "bundle.h"
#include "bundle_fixture.h"
#include "generate.h"
#include "lingen.h"
#include "nvrtc.h"
#include "proc.h"
#include "testutil.h"

#define NORMS LG_TEST_NORMS
#define OTHER_SPEC "{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 4096}"

static const char *const archs[] = {"sm_90a", "sm_80"};
#define NARCH 2

static char *tmp;    /* the test's temp folder */
static char *bundle; /* tmp/bundle: built once by setup */
static lg_spec_file *norms;

static struct lg_proc run_prog(int want, char **argv) { return lg_test_run_cached(tmp, want, argv); }

static int setup(void **state)
{
	(void)state;
	tmp = lg_test_tmpdir("bundle");
	if (lg_spec_file_load(NORMS, &norms) != LG_OK)
		return -1;
	bundle = lg_test_build_norms(tmp, false); /* no linked module: the default */
	/* these tests read the manifest, as a loader does for a bundle without
	 * an index (built before there was one); test_bundle_index.c reads the
	 * index */
	char *path = lg_test_path(bundle, "index.lgb");
	int rc = unlink(path);
	free(path);
	return rc;
}

static int teardown(void **state)
{
	(void)state;
	lg_spec_file_free(norms);
	lg_test_rm_rf(tmp);
	free(bundle);
	free(tmp);
	return 0;
}

static cJSON *load_manifest(void)
{
	char *path = lg_test_path(bundle, "manifest.json");
	char *text = lg_test_read_file(path, NULL);
	assert_non_null(text);
	cJSON *m = cJSON_Parse(text);
	assert_non_null(m);
	free(text);
	free(path);
	return m;
}

/* The manifest's kernel for entry x arch (asserted present). */
static cJSON *manifest_kernel(cJSON *m, const char *entry, const char *arch)
{
	cJSON *k;
	cJSON_ArrayForEach(k, cJSON_GetObjectItem(m, "kernels"))
	{
		const char *e = cJSON_GetStringValue(cJSON_GetObjectItem(k, "entry"));
		const char *a = cJSON_GetStringValue(cJSON_GetObjectItem(k, "arch"));
		if (e && a && strcmp(e, entry) == 0 && strcmp(a, arch) == 0)
			return k;
	}
	fail_msg("%s for %s is not in the manifest", entry, arch);
	return NULL;
}

static char *bundle_cubin(const char *entry, const char *arch, size_t *size)
{
	return lg_test_bundle_cubin(bundle, entry, arch, size);
}

static void check_plan(const cJSON *plan)
{
	assert_true(cJSON_IsObject(cJSON_GetObjectItem(plan, "tile")));
	assert_true(cJSON_IsObject(cJSON_GetObjectItem(plan, "given")));
	assert_null(cJSON_GetObjectItem(plan, "hidden")); /* nothing family-private */
	assert_null(cJSON_GetObjectItem(plan, "aux"));
	assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(plan, "tile"), "threads")) > 0);
	assert_true(cJSON_IsArray(cJSON_GetObjectItem(plan, "used")));
	cJSON *es = cJSON_GetObjectItem(plan, "entries"), *e;
	assert_true(cJSON_GetArraySize(es) >= 1);
	cJSON_ArrayForEach(e, es)
	{
		assert_non_null(cJSON_GetStringValue(cJSON_GetObjectItem(e, "name")));
		assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(e, "block")), 3);
		assert_true(cJSON_GetNumberValue(cJSON_GetArrayItem(cJSON_GetObjectItem(e, "block"), 0)) >= 32);
		assert_true(cJSON_IsNumber(cJSON_GetObjectItem(e, "smem")));
		assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(e, "grid_at_1")), 3);
		assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(e, "grid_at_8192")), 3);
		assert_true(cJSON_IsBool(cJSON_GetObjectItem(e, "persistent")));
	}
}

/* Every kernel x arch with its spec, entry, plan, checksum; the versions. */
static void test_manifest(void **state)
{
	(void)state;
	cJSON *m = load_manifest();
	assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(m, "format")), 3);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(m, "lingen")), lg_version());
	int major, minor;
	char nv[32];
	assert_int_equal(lg_nvrtc_version(&major, &minor), LG_OK);
	snprintf(nv, sizeof nv, "%d.%d", major, minor);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(m, "nvrtc")), nv);
	size_t nk = lg_spec_file_count(norms);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(m, "kernels")), (int)(nk * NARCH));
	for (size_t i = 0; i < nk; i++) {
		const lg_spec *s = lg_spec_file_get(norms, i);
		char *canon = lg_spec_canonical(s);
		cJSON *want = cJSON_Parse(canon);
		for (int a = 0; a < NARCH; a++) {
			cJSON *k = manifest_kernel(m, lg_spec_entry(s), archs[a]);
			assert_true(cJSON_Compare(cJSON_GetObjectItem(k, "spec"), want, true));
			check_plan(cJSON_GetObjectItem(k, "plan"));
			const char *first = cJSON_GetStringValue(
				cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(k, "plan"), "entries"), 0), "name"));
			assert_non_null(strstr(first, lg_spec_entry(s)));
			size_t n;
			char *data = bundle_cubin(lg_spec_entry(s), archs[a], &n);
			lg_test_assert_cubin(data, n);
			char sum[17];
			char *given = cJSON_PrintUnformatted(cJSON_GetObjectItem(cJSON_GetObjectItem(k, "plan"), "given"));
			snprintf(sum, sizeof sum, "%016llx",
				 (unsigned long long)lg_bundle_checksum(canon, lg_spec_entry(s), archs[a], given, data, n));
			free(given);
			assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(k, "checksum")), sum);
			assert_int_equal((size_t)cJSON_GetNumberValue(cJSON_GetObjectItem(k, "size")), n);
			free(data);
		}
		cJSON_Delete(want);
		free(canon);
	}
	cJSON_Delete(m);
}

/* Without --link, no linked module: its index (a bundle of its own: the
 * setup's has none) has no `linked` line and every kernel's flag is 0. */
static void test_no_link_by_default(void **state)
{
	(void)state;
	char *own = lg_test_tmpdir("bundle-nolink"), *built = lg_test_build_norms(own, false);
	char *path = lg_test_path(built, "index.lgb"), *text = lg_test_read_file(path, NULL);
	assert_non_null(text);
	assert_null(strstr(text, "\nlinked\t"));
	assert_null(strstr(text, "\t1\n"));
	free(text);
	free(path);
	free(built);
	lg_test_rm_rf(own);
	free(own);
}

/* A plan's tensor maps are recorded (argument by name, box, swizzle): the
 * router GEMM forward's on sm_90a; none on sm_80. */
static void test_plan_tmaps(void **state)
{
	(void)state;
	lg_spec *s = NULL;
	assert_int_equal(lg_spec_parse("{\"op\": \"router_gemm\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
				       "\"hidden\": 2048, \"experts\": 256, \"tile\": {\"cluster\": 2}}", &s),
			 LG_OK);
	struct lg_target t;
	struct lg_plan p;
	assert_true(lg_target_parse("sm_90a", &t));
	assert_int_equal(lg_plan_for(s, &t, &p), LG_OK);
	cJSON *o = lg_plan_to_json(s, &p);
	assert_non_null(o);
	cJSON *want = cJSON_Parse("[{\"arg\": \"x\", \"box\": [64, 128], \"swizzle\": 128}, "
				  "{\"arg\": \"w\", \"box\": [64, 64], \"swizzle\": 128}]");
	assert_true(cJSON_Compare(cJSON_GetObjectItem(o, "tmaps"), want, true));
	cJSON *e = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "entries"), 0);
	assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(e, "cluster")), 2);
	cJSON_Delete(want);
	cJSON_Delete(o);
	lg_spec_free(s);
	assert_int_equal(lg_spec_parse("{\"op\": \"router_gemm\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
				       "\"hidden\": 2048, \"experts\": 256}", &s),
			 LG_OK);
	assert_false(lg_target_parse("sm_80a", &t)); /* "a" targets begin with sm_90a */
	assert_false(lg_target_parse("sm_89a", &t));
	assert_true(lg_target_parse("sm_80", &t));
	assert_int_equal(lg_plan_for(s, &t, &p), LG_OK);
	o = lg_plan_to_json(s, &p);
	assert_null(cJSON_GetObjectItem(o, "tmaps"));
	cJSON_Delete(o);
	lg_spec_free(s);
}

static lg_ctx *bundle_ctx(const char *arch, const char *cache) { return lg_test_bundle_ctx(bundle, arch, cache); }

/* With NVRTC unloadable: the bundle's bytes, the driver reached, the
 * missing-kernel error; the cache folder is never touched. */
static void test_load_without_nvrtc(void **state)
{
	(void)state;
	lg_nvrtc_block_for_tests(1);
	int major, minor;
	assert_int_equal(lg_nvrtc_version(&major, &minor), LG_ERR_NVRTC);

	char *cache = lg_test_path(tmp, "untouched-cache");
	lg_ctx *c = bundle_ctx("sm_90a", cache);
	for (size_t i = 0; i < lg_spec_file_count(norms); i++) {
		const lg_spec *s = lg_spec_file_get(norms, i);
		const void *cubin;
		size_t size, n;
		if (lg_ctx_cubin(c, s, &cubin, &size) != LG_OK)
			fail_msg("%s", lg_last_error());
		char *want = bundle_cubin(lg_spec_entry(s), "sm_90a", &n);
		assert_int_equal(size, n);
		assert_memory_equal(cubin, want, n);
		free(want);

		lg_kernel *k = NULL;
		lg_status st = lg_kernel_get(c, s, &k);
		fprintf(stderr, "lg_kernel_get %s: %s %s\n", lg_spec_entry(s), lg_status_str(st), lg_last_error());
		if (access("/dev/nvidiactl", F_OK) != 0)
			assert_true(st == LG_ERR_DRIVER || st == LG_ERR_NO_DEVICE);
		else
			assert_true(st == LG_OK || st == LG_ERR_DRIVER || st == LG_ERR_NO_DEVICE);
	}

	/* a kernel the bundle lacks: named with arch and bundle, never JIT'd */
	lg_spec *other;
	assert_int_equal(lg_spec_parse(OTHER_SPEC, &other), LG_OK);
	const void *cubin;
	size_t size;
	lg_kernel *k;
	assert_int_equal(lg_ctx_cubin(c, other, &cubin, &size), LG_ERR_MISSING);
	const char *msg = lg_last_error();
	fprintf(stderr, "%s\n", msg);
	assert_non_null(strstr(msg, lg_spec_entry(other)));
	assert_non_null(strstr(msg, "sm_90a"));
	assert_non_null(strstr(msg, bundle));
	assert_non_null(strstr(msg, "lingen build"));
	assert_int_equal(lg_kernel_get(c, other, &k), LG_ERR_MISSING);
	assert_string_equal(lg_status_str(LG_ERR_MISSING), "LG_ERR_MISSING");
	lg_ctx_destroy(c);

	/* an arch the bundle was not built for */
	c = bundle_ctx("sm_100a", cache);
	assert_int_equal(lg_ctx_cubin(c, lg_spec_file_get(norms, 0), &cubin, &size), LG_ERR_MISSING);
	assert_non_null(strstr(lg_last_error(), "sm_100a"));
	assert_non_null(strstr(lg_last_error(), "sm_90a, sm_80"));
	lg_ctx_destroy(c);

	assert_int_equal(access(cache, F_OK), -1); /* no cache folder made */
	lg_spec_free(other);
	free(cache);
	lg_nvrtc_block_for_tests(0);
}

/* A flipped byte in a cubin is a checksum error (restored afterwards). */
static void test_corrupt_cubin(void **state)
{
	(void)state;
	lg_nvrtc_block_for_tests(1);
	const lg_spec *s = lg_spec_file_get(norms, 1);
	char *name, *path;
	assert_true(asprintf(&name, "%s.sm_80.cubin", lg_spec_entry(s)) > 0);
	path = lg_test_path(bundle, name);
	size_t n;
	char *data = lg_test_read_file(path, &n);
	assert_non_null(data);
	data[n / 2] = (char)~data[n / 2];
	lg_test_write_file(path, data, n);

	lg_ctx *c = bundle_ctx("sm_80", NULL);
	const void *cubin;
	size_t size;
	assert_int_equal(lg_ctx_cubin(c, s, &cubin, &size), LG_ERR_IO);
	fprintf(stderr, "%s\n", lg_last_error());
	assert_non_null(strstr(lg_last_error(), "checksum"));
	assert_non_null(strstr(lg_last_error(), name));
	lg_ctx_destroy(c);

	data[n / 2] = (char)~data[n / 2];
	lg_test_write_file(path, data, n);
	c = bundle_ctx("sm_80", NULL);
	assert_int_equal(lg_ctx_cubin(c, s, &cubin, &size), LG_OK);
	lg_ctx_destroy(c);

	/* a missing cubin file */
	char *moved = lg_test_path(tmp, "moved.cubin");
	assert_int_equal(rename(path, moved), 0);
	c = bundle_ctx("sm_80", NULL);
	assert_int_equal(lg_ctx_cubin(c, s, &cubin, &size), LG_ERR_IO);
	assert_non_null(strstr(lg_last_error(), name));
	assert_non_null(strstr(lg_last_error(), "cannot read "));
	assert_non_null(strstr(lg_last_error(), "(in bundle "));
	lg_ctx_destroy(c);
	assert_int_equal(rename(moved, path), 0);

	free(moved);
	free(data);
	free(path);
	free(name);
	lg_nvrtc_block_for_tests(0);
}

/* Rewrite the bundle's manifest into dir with one change made by edit. */
static void write_edited(const char *dir, void (*edit)(cJSON *m))
{
	cJSON *m = load_manifest();
	edit(m);
	char *text = cJSON_Print(m), *path = lg_test_path(dir, "manifest.json");
	lg_test_write_file(path, text, strlen(text));
	free(path);
	free(text);
	cJSON_Delete(m);
}

static void set_format_1(cJSON *m) { cJSON_SetNumberValue(cJSON_GetObjectItem(m, "format"), 1); }

static void bad_geometry(cJSON *m)
{
	cJSON *k = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "kernels"), 0);
	cJSON *e = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(k, "plan"), "entries"), 0);
	cJSON_SetNumberValue(cJSON_GetArrayItem(cJSON_GetObjectItem(e, "block"), 0), 999);
}

/* A hostile tile in the recorded plan: a zero, then a key of no family. */
static void set_given(cJSON *m, const char *key, double v)
{
	cJSON *k = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "kernels"), 0);
	cJSON *g = cJSON_GetObjectItem(cJSON_GetObjectItem(k, "plan"), "given");
	cJSON_DeleteItemFromObject(g, key);
	cJSON_AddNumberToObject(g, key, v);
}
static void zero_rows(cJSON *m) { set_given(m, "rows", 0); }
static void huge_threads(cJSON *m) { set_given(m, "threads", 1e300); }
static void unknown_tile(cJSON *m) { set_given(m, "warps", 4); }
/* The recorded tile of kernel 0 changed: the plan no longer matches. */
static void other_tile(cJSON *m)
{
	cJSON *k = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "kernels"), 0);
	cJSON *t = cJSON_GetObjectItem(cJSON_GetObjectItem(k, "plan"), "tile");
	cJSON_ReplaceItemInObject(t, "threads", cJSON_CreateNumber(512));
}

/* file, size and checksum of kernels 0 and 1 swapped: each record names
 * the other kernel's cubin, with its true checksum. */
static void swap_cubins(cJSON *m)
{
	cJSON *a = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "kernels"), 0);
	cJSON *b = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "kernels"), 1);
	static const char *const keys[] = {"file", "size", "checksum"};
	for (int i = 0; i < 3; i++) {
		cJSON *x = cJSON_DetachItemFromObject(a, keys[i]), *y = cJSON_DetachItemFromObject(b, keys[i]);
		cJSON_AddItemToObject(a, keys[i], y);
		cJSON_AddItemToObject(b, keys[i], x);
	}
}

static void bad_spec(cJSON *m)
{
	cJSON *k = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "kernels"), 2);
	cJSON_ReplaceItemInObject(cJSON_GetObjectItem(k, "spec"), "hidden", cJSON_CreateNumber(100));
}

static void test_bad_manifest(void **state)
{
	(void)state;
	char *dir = lg_test_path(tmp, "bad");
	assert_int_equal(mkdir(dir, 0755), 0);
	lg_test_expect_bad_bundle(dir, LG_ERR_IO, "manifest.json: No such file or directory");
	assert_non_null(strstr(lg_last_error(), "cannot read bundle manifest "));
	assert_non_null(strstr(lg_last_error(), "a bundle made by lingen build?"));

	char *path = lg_test_path(dir, "manifest.json");
	lg_test_write_file(path, "{ \"format\": 3, ", 15);
	lg_test_expect_bad_bundle(dir, LG_ERR_SPEC, "malformed JSON");

	write_edited(dir, set_format_1);
	lg_test_expect_bad_bundle(dir, LG_ERR_SPEC, "format 1");
	write_edited(dir, bad_geometry);
	lg_test_expect_bad_bundle(dir, LG_ERR_SPEC, "kernels[0].plan: the launch plan recorded differs");
	write_edited(dir, other_tile);
	lg_test_expect_bad_bundle(dir, LG_ERR_SPEC, "kernels[0].plan: the launch plan recorded differs");
	write_edited(dir, zero_rows); /* was a division by zero in the geometry */
	lg_test_expect_bad_bundle(dir, LG_ERR_SPEC, "given.rows: found 0");
	write_edited(dir, huge_threads);
	lg_test_expect_bad_bundle(dir, LG_ERR_SPEC, "given.threads: found 1e+300");
	write_edited(dir, unknown_tile);
	lg_test_expect_bad_bundle(dir, LG_ERR_SPEC, "given: unknown key \"warps\"");
	write_edited(dir, bad_spec);
	lg_test_expect_bad_bundle(dir, LG_ERR_SPEC, "kernels[2].spec");

	lg_ctx_opts both = {.arch = "sm_90a", .bundle = bundle, .aot = (const struct lg_aot_table *)&both};
	lg_ctx *c;
	assert_int_equal(lg_ctx_create(&both, &c), LG_ERR_INVALID_ARG);
	free(path);
	free(dir);
}

static void other_lingen(cJSON *m) { cJSON_ReplaceItemInObject(m, "lingen", cJSON_CreateString("9.9.9")); }
static void old_arch(cJSON *m)
{
	cJSON *a = cJSON_CreateArray();
	cJSON_AddItemToArray(a, cJSON_CreateString("sm_70"));
	cJSON_ReplaceItemInObject(m, "archs", a);
}
static void no_archs(cJSON *m) { cJSON_DeleteItemFromObject(m, "archs"); }
static void fewer_archs(cJSON *m) { cJSON_DeleteItemFromArray(cJSON_GetObjectItem(m, "archs"), 1); }
static void twice_arch(cJSON *m)
{
	cJSON_AddItemToArray(cJSON_GetObjectItem(m, "archs"), cJSON_CreateString("sm_90a"));
}
static void no_nvrtc(cJSON *m) { cJSON_DeleteItemFromObject(m, "nvrtc"); }
static void bad_nvrtc(cJSON *m) { cJSON_ReplaceItemInObject(m, "nvrtc", cJSON_CreateString("13.0 beta")); }
static void format_string(cJSON *m) { cJSON_ReplaceItemInObject(m, "format", cJSON_CreateString("3")); }

/* The versions and archs a manifest records are checked (README: another
 * lingen's manifest is refused), and "format" is shown as found. */
static void test_manifest_versions(void **state)
{
	(void)state;
	char *dir = lg_test_path(tmp, "versions");
	assert_int_equal(mkdir(dir, 0755), 0);
	write_edited(dir, other_lingen);
	lg_test_expect_bad_bundle(dir, LG_ERR_SPEC, "made by lingen 9.9.9, this is lingen " LINGEN_VERSION);
	write_edited(dir, old_arch);
	lg_test_expect_bad_bundle(dir, LG_ERR_SPEC, "archs[0]: found \"sm_70\", expected an arch");
	write_edited(dir, no_archs);
	lg_test_expect_bad_bundle(dir, LG_ERR_SPEC, "archs: expected an array of 1 to");
	write_edited(dir, fewer_archs);
	lg_test_expect_bad_bundle(dir, LG_ERR_SPEC, ".arch: sm_80 is not one of the manifest's archs");
	write_edited(dir, twice_arch);
	lg_test_expect_bad_bundle(dir, LG_ERR_SPEC, "archs[2]: sm_90a listed twice");
	write_edited(dir, no_nvrtc);
	lg_test_expect_bad_bundle(dir, LG_ERR_SPEC, "nvrtc: found none");
	write_edited(dir, bad_nvrtc);
	lg_test_expect_bad_bundle(dir, LG_ERR_SPEC, "nvrtc: found \"13.0 beta\"");
	write_edited(dir, format_string);
	lg_test_expect_bad_bundle(dir, LG_ERR_SPEC, "manifest format \"3\" (a string), this lingen");
	lg_test_rm_rf(dir);
	free(dir);
}

/* A manifest of n records, each a copy of kernel 0, written into dir. */
static void write_copies(const char *dir, int n)
{
	cJSON *m = load_manifest(), *ks = cJSON_GetObjectItem(m, "kernels");
	cJSON *k0 = cJSON_DetachItemFromArray(ks, 0);
	while (cJSON_GetArraySize(ks) > 0)
		cJSON_DeleteItemFromArray(ks, 0);
	cJSON *last = NULL;
	for (int i = 0; i < n; i++) { /* appended after the last: linear */
		cJSON *c = cJSON_Duplicate(k0, true);
		if (!last)
			cJSON_AddItemToArray(ks, c);
		else
			last->next = c, c->prev = last, ks->child->prev = c;
		last = c;
	}
	cJSON_Delete(k0);
	char *text = cJSON_PrintUnformatted(m), *path = lg_test_path(dir, "manifest.json");
	fprintf(stderr, "manifest of %d copies: %zu bytes\n", n, strlen(text));
	lg_test_write_file(path, text, strlen(text));
	free(path);
	free(text);
	cJSON_Delete(m);
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One record repeated: refused at its second copy (loading was quadratic:
 * 70,000 copies, 59 MB, ran for minutes); more records than a bundle may
 * hold: refused by their count. */
static void test_duplicate_records(void **state)
{
	(void)state;
	lg_nvrtc_block_for_tests(1);
	char *dir = lg_test_path(tmp, "copies");
	assert_int_equal(mkdir(dir, 0755), 0);
	write_copies(dir, 2);
	lg_test_expect_bad_bundle(dir, LG_ERR_SPEC, "kernels[1]: lg_rmsnorm_quant_fwd_bf16_h2048_both_pow2 for sm_90a is recorded twice (also record 0)");
	write_copies(dir, LG_BUNDLE_MAX_ITEMS);
	double t = now_s();
	lg_test_expect_bad_bundle(dir, LG_ERR_SPEC, "kernels[1]: lg_rmsnorm_quant_fwd_bf16_h2048_both_pow2 for sm_90a is recorded twice");
	fprintf(stderr, "refused in %.3f s\n", now_s() - t);
	write_copies(dir, 70000); /* 60 MB */
	t = now_s();
	lg_test_expect_bad_bundle(dir, LG_ERR_SPEC, "found 70000 cubins, allowed: at most");
	fprintf(stderr, "refused in %.3f s\n", now_s() - t);
	lg_test_rm_rf(dir);
	free(dir);
	lg_nvrtc_block_for_tests(0);
}

/* The plan of a build given tile {threads: 256} put on the heuristic
 * record of the same spec: a consistent plan (it re-plans the same), but
 * not the one the cubin was built with. The checksum binds the given tile
 * to the cubin: the lookup fails (it returned the heuristic cubin). */
static void test_other_given_tile(void **state)
{
	(void)state;
	char *spec = lg_test_path(tmp, "tiled.json"), *tiled = lg_test_path(tmp, "tiled");
	const char *text = "{\"kernels\": [{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
			   "\"hidden\": 2048, \"eps\": 1e-6, \"tile\": {\"threads\": 256}}]}";
	lg_test_write_file(spec, text, strlen(text));
	char *argv[] = {(char *)LG_CLI, (char *)"build", spec, (char *)"--arch", (char *)"sm_80", (char *)"-o", tiled,
			NULL};
	struct lg_proc p = run_prog(0, argv);
	lg_proc_free(&p);
	char *tpath = lg_test_path(tiled, "manifest.json"), *ttext = lg_test_read_file(tpath, NULL);
	cJSON *tm = cJSON_Parse(ttext);
	assert_non_null(tm);
	cJSON *tplan = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(tm, "kernels"), 0), "plan");
	assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(tplan, "given"), "threads")),
			 256);

	char *path = lg_test_path(bundle, "manifest.json"), *orig = lg_test_read_file(path, NULL);
	cJSON *m = cJSON_Parse(orig);
	const lg_spec *s = lg_spec_file_get(norms, 1);
	cJSON *k = manifest_kernel(m, lg_spec_entry(s), "sm_80");
	cJSON_ReplaceItemInObject(k, "plan", cJSON_Duplicate(tplan, true));
	char *edited = cJSON_Print(m);
	lg_test_write_file(path, edited, strlen(edited));

	lg_nvrtc_block_for_tests(1);
	lg_ctx *c = bundle_ctx("sm_80", NULL);
	const void *cubin;
	size_t size;
	assert_int_equal(lg_ctx_cubin(c, s, &cubin, &size), LG_ERR_IO);
	fprintf(stderr, "%s\n", lg_last_error());
	assert_non_null(strstr(lg_last_error(), "given tile"));
	lg_ctx_destroy(c);
	lg_nvrtc_block_for_tests(0);

	lg_test_write_file(path, orig, strlen(orig)); /* restored: the record is served again */
	c = bundle_ctx("sm_80", NULL);
	assert_int_equal(lg_ctx_cubin(c, s, &cubin, &size), LG_OK);
	lg_ctx_destroy(c);
	free(edited);
	cJSON_Delete(m);
	cJSON_Delete(tm);
	free(orig);
	free(path);
	free(ttext);
	free(tpath);
	free(tiled);
	free(spec);
}

/* Records whose cubins were swapped (file, size, checksum moved together)
 * are refused: the checksum binds each cubin to its spec, entry and arch. */
static void test_swapped_cubins(void **state)
{
	(void)state;
	lg_nvrtc_block_for_tests(1);
	char *path = lg_test_path(bundle, "manifest.json");
	char *orig = lg_test_read_file(path, NULL);
	assert_non_null(orig);
	cJSON *m = cJSON_Parse(orig);
	assert_non_null(m);
	swap_cubins(m);
	char *spec_text = cJSON_PrintUnformatted(
		cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(m, "kernels"), 0), "spec"));
	const char *arch = cJSON_GetStringValue(
		cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(m, "kernels"), 0), "arch"));
	char *text = cJSON_Print(m);
	lg_test_write_file(path, text, strlen(text));
	lg_spec *s = NULL;
	assert_int_equal(lg_spec_parse(spec_text, &s), LG_OK);
	lg_ctx *c = bundle_ctx(arch, NULL);
	const void *cubin;
	size_t size;
	assert_int_equal(lg_ctx_cubin(c, s, &cubin, &size), LG_ERR_IO);
	assert_non_null(strstr(lg_last_error(), "checksum"));
	lg_ctx_destroy(c);
	lg_test_write_file(path, orig, strlen(orig)); /* the bundle as it was */
	c = bundle_ctx(arch, NULL);
	assert_int_equal(lg_ctx_cubin(c, s, &cubin, &size), LG_OK);
	lg_ctx_destroy(c);
	lg_spec_free(s);
	cJSON_Delete(m);
	free(text);
	free(spec_text);
	free(orig);
	free(path);
	lg_nvrtc_block_for_tests(0);
}

/* A context over a hand-made embedded table: the same lookups. */
static void test_aot_table(void **state)
{
	(void)state;
	lg_nvrtc_block_for_tests(1);
	cJSON *m = load_manifest();
	size_t nk = lg_spec_file_count(norms);
	struct lg_aot_entry *es = calloc(nk, sizeof *es);
	char **keep = calloc(3 * nk, sizeof *keep);
	assert_non_null(es);
	assert_non_null(keep);
	for (size_t i = 0; i < nk; i++) {
		const lg_spec *s = lg_spec_file_get(norms, i);
		cJSON *k = manifest_kernel(m, lg_spec_entry(s), "sm_80");
		size_t n;
		keep[3 * i] = lg_spec_canonical(s);
		keep[3 * i + 1] = cJSON_PrintUnformatted(cJSON_GetObjectItem(k, "plan"));
		keep[3 * i + 2] = bundle_cubin(lg_spec_entry(s), "sm_80", &n);
		char *given = cJSON_PrintUnformatted(cJSON_GetObjectItem(cJSON_GetObjectItem(k, "plan"), "given"));
		es[i] = (struct lg_aot_entry){.spec = keep[3 * i], .entry = lg_spec_entry(s), .arch = "sm_80",
					      .plan = keep[3 * i + 1],
					      .cubin = (const unsigned char *)keep[3 * i + 2], .size = n,
					      .checksum = lg_bundle_checksum(keep[3 * i], lg_spec_entry(s), "sm_80", given,
									     keep[3 * i + 2], n)};
		free(given);
	}
	struct lg_aot_table t = {.format = LG_AOT_FORMAT, .lingen = LINGEN_VERSION, .nvrtc = "13.0",
				 .count = nk, .entries = es};
	lg_ctx_opts o = {.arch = "sm_80", .aot = &t};
	lg_ctx *c;
	if (lg_ctx_create(&o, &c) != LG_OK)
		fail_msg("%s", lg_last_error());
	for (size_t i = 0; i < nk; i++) {
		const void *cubin;
		size_t size;
		assert_int_equal(lg_ctx_cubin(c, lg_spec_file_get(norms, i), &cubin, &size), LG_OK);
		assert_int_equal(size, es[i].size);
		assert_memory_equal(cubin, es[i].cubin, size);
	}
	lg_spec *other;
	assert_int_equal(lg_spec_parse(OTHER_SPEC, &other), LG_OK);
	const void *cubin;
	size_t size;
	assert_int_equal(lg_ctx_cubin(c, other, &cubin, &size), LG_ERR_MISSING);
	assert_non_null(strstr(lg_last_error(), "embedded"));
	assert_non_null(strstr(lg_last_error(), lg_spec_entry(other)));
	lg_ctx_destroy(c);

	/* a wrong checksum, then a table of another format */
	es[0].checksum ^= 1;
	assert_int_equal(lg_ctx_create(&o, &c), LG_OK);
	assert_int_equal(lg_ctx_cubin(c, lg_spec_file_get(norms, 0), &cubin, &size), LG_ERR_IO);
	assert_non_null(strstr(lg_last_error(), "checksum"));
	lg_ctx_destroy(c);
	t.format = 1;
	assert_int_equal(lg_ctx_create(&o, &c), LG_ERR_SPEC);

	lg_spec_free(other);
	for (size_t i = 0; i < 3 * nk; i++)
		free(keep[i]);
	free(keep);
	free(es);
	cJSON_Delete(m);
	lg_nvrtc_block_for_tests(0);
}

/* A program that links only lingen_aot.c and asks its dispatcher. */
static const char aot_main[] =
	"#include <stdio.h>\n"
	"#include \"lingen_aot.h\"\n"
	"int main(int argc, char **argv)\n"
	"{\n"
	"\tsize_t n = 0;\n"
	"\tconst unsigned char *c = lingen_aot_cubin(argv[1], argv[2], &n);\n"
	"\tprintf(\"count=%zu format=%d\\n\", lingen_aot()->count, lingen_aot()->format);\n"
	"\tif (!c || n < 4 || c[1] != 'E' || c[2] != 'L' || c[3] != 'F')\n"
	"\t\treturn 3;\n"
	"\tprintf(\"size=%zu\\n\", n);\n"
	"\treturn lingen_aot_cubin(argv[1], \"sm_75\", &n) == NULL && argc == 3 ? 0 : 4;\n"
	"}\n";

static void test_aot_cli(void **state)
{
	(void)state;
	if (access("/usr/bin/cc", X_OK) != 0)
		skip();
	char *dir = lg_test_path(tmp, "aot");
	char *argv[] = {(char *)LG_CLI, (char *)"aot", (char *)NORMS, (char *)"--arch",
			(char *)"sm_90a,sm_80", (char *)"-o", dir, NULL};
	struct lg_proc p = run_prog(0, argv);
	lg_proc_free(&p);

	char *src = lg_test_path(dir, "lingen_aot.c"), *hdr = lg_test_path(dir, "lingen_aot.h");
	char *text = lg_test_read_file(src, NULL), *htext = lg_test_read_file(hdr, NULL);
	assert_non_null(text);
	assert_non_null(htext);
	assert_non_null(strstr(htext, "const struct lg_aot_table *lingen_aot(void);"));
	assert_non_null(strstr(htext, "lingen_aot_cubin("));
	for (size_t i = 0; i < lg_spec_file_count(norms); i++) {
		char *want;
		assert_true(asprintf(&want, "/* .entry */ \"%s\",", lg_spec_entry(lg_spec_file_get(norms, i))) > 0);
		assert_int_equal(lg_test_count(text, want), NARCH);
		free(want);
	}
	for (int a = 0; a < NARCH; a++) {
		char *want;
		assert_true(asprintf(&want, "/* .arch */ \"%s\",", archs[a]) > 0);
		assert_int_equal(lg_test_count(text, want), (int)lg_spec_file_count(norms));
		free(want);
	}

	/* compile with the strict flags, link into a program, run it */
	char *main_c = lg_test_path(dir, "main.c"), *exe = lg_test_path(dir, "aot-main");
	lg_test_write_file(main_c, aot_main, sizeof aot_main - 1);
	/* main.c includes lingen.h and so the lingen_ops.h the build wrote (an
	 * install puts it beside lingen.h); lingen_aot.c alone needs neither
	 * (the C++ compile below) */
	char *cc[] = {(char *)"/usr/bin/cc", (char *)"-std=c11", (char *)"-Wall", (char *)"-Wextra",
		      (char *)"-Wpedantic", (char *)"-Werror", (char *)"-I" LG_SOURCE_DIR "/include",
		      (char *)"-I" LG_BUILD_DIR "/include", (char *)"-I", dir, (char *)"-o", exe, src, main_c, NULL};
	p = run_prog(0, cc);
	lg_proc_free(&p);
	/* the same file compiles as C++ (a C++ program links the table) */
	if (access("/usr/bin/c++", X_OK) == 0) {
		char *obj = lg_test_path(dir, "aot-cxx.o");
		char *cxx[] = {(char *)"/usr/bin/c++", (char *)"-std=c++11", (char *)"-x", (char *)"c++",
			       (char *)"-Wall", (char *)"-Wextra", (char *)"-Wpedantic", (char *)"-Werror",
			       (char *)"-I" LG_SOURCE_DIR "/include", (char *)"-I", dir, (char *)"-c",
			       (char *)"-o", obj, src, NULL};
		p = run_prog(0, cxx);
		lg_proc_free(&p);
		free(obj);
	} else {
		fprintf(stderr, "no /usr/bin/c++: the C++ compile of lingen_aot.c is not checked\n");
	}
	char *entry = (char *)lg_spec_entry(lg_spec_file_get(norms, 2));
	char *prog[] = {exe, entry, (char *)"sm_80", NULL};
	p = run_prog(0, prog);
	char want[64];
	snprintf(want, sizeof want, "count=%d format=%d", (int)lg_spec_file_count(norms) * NARCH, LG_AOT_FORMAT);
	assert_non_null(strstr(p.out, want));
	lg_proc_free(&p);

	free(exe);
	free(main_c);
	free(text);
	free(htext);
	free(src);
	free(hdr);
	free(dir);
}

int main(void)
{
	unsetenv("LINGEN_ARCH");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_link_by_default), cmocka_unit_test(test_manifest),
		cmocka_unit_test(test_load_without_nvrtc),
		cmocka_unit_test(test_plan_tmaps),
		cmocka_unit_test(test_corrupt_cubin), cmocka_unit_test(test_bad_manifest),
		cmocka_unit_test(test_swapped_cubins),
		cmocka_unit_test(test_manifest_versions), cmocka_unit_test(test_duplicate_records),
		cmocka_unit_test(test_other_given_tile),
		cmocka_unit_test(test_aot_table),    cmocka_unit_test(test_aot_cli),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
