/*
 * bundle_fixture.c - the bundle tests' shared fixture (bundle_fixture.h).
 */
#include "bundle_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"

struct lg_proc lg_test_run_cached(const char *tmp, int want, char **argv)
{
	char *cache = lg_test_path(tmp, "cache"), *env[2] = {NULL, NULL};
	assert_true(asprintf(&env[0], "LINGEN_CACHE_DIR=%s", cache) > 0);
	struct lg_proc p;
	assert_int_equal(lg_proc_run(argv, env, &p), 0);
	fprintf(stderr, "$");
	for (char **a = argv; *a; a++)
		fprintf(stderr, " %s", *a);
	fprintf(stderr, "  -> %d\n%s", p.status, p.err);
	assert_int_equal(p.status, want);
	free(env[0]);
	free(cache);
	return p;
}

char *lg_test_build_norms(const char *tmp, bool link)
{
	char *bundle = lg_test_path(tmp, "bundle");
	char *argv[] = {(char *)LG_CLI,	  (char *)"build", (char *)LG_TEST_NORMS, (char *)"--arch",
			(char *)"sm_90a,sm_80", (char *)"-o",	   bundle,		  (char *)"-j",
			(char *)"2",		  link ? (char *)"--link" : NULL, NULL};
	struct lg_proc p = lg_test_run_cached(tmp, 0, argv);
	lg_proc_free(&p);
	return bundle;
}

char *lg_test_bundle_cubin(const char *bundle, const char *entry, const char *arch, size_t *size)
{
	char *name, *path;
	assert_true(asprintf(&name, "%s.%s.cubin", entry, arch) > 0);
	path = lg_test_path(bundle, name);
	char *data = lg_test_read_file(path, size);
	assert_non_null(data);
	free(path);
	free(name);
	return data;
}

lg_ctx *lg_test_bundle_ctx(const char *bundle, const char *arch, const char *cache)
{
	lg_ctx_opts o = {.arch = arch, .cache_dir = cache, .bundle = bundle};
	lg_ctx *c = NULL;
	if (lg_ctx_create(&o, &c) != LG_OK)
		fail_msg("%s", lg_last_error());
	assert_string_equal(lg_ctx_arch(c), arch);
	return c;
}

void lg_test_expect_bad_bundle(const char *dir, lg_status st, const char *needle)
{
	lg_ctx_opts o = {.arch = "sm_90a", .bundle = dir};
	lg_ctx *c = (lg_ctx *)&o;
	assert_int_equal(lg_ctx_create(&o, &c), st);
	assert_null(c);
	fprintf(stderr, "%s\n", lg_last_error());
	assert_non_null(strstr(lg_last_error(), needle));
}
