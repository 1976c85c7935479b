/*
 * test_warm_cache.c - a warm disk cache serves a new context without NVRTC:
 * the NVRTC version that is part of every key is recorded in the cache
 * folder (nvrtc.stamp) by the process that compiled, and trusted while the
 * library file it names is unchanged. With NVRTC made unloadable, a cached
 * kernel still comes back (same bytes); an uncached one, or any kernel once
 * the stamp no longer matches the library, needs NVRTC and fails cleanly.
 * A corrupt or foreign entry is never served: compiled again instead.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lingen.h"
#include "nvrtc.h"
#include "testutil.h"

#define SPEC_A "{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048}"
#define SPEC_B "{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 1024}"

static void test_warm_cache_needs_no_nvrtc(void **state)
{
	(void)state;
	char *dir = lg_test_tmpdir("lg-warm");
	lg_ctx_opts o = {.arch = "sm_90a", .cache_dir = dir, .tuning = "off"};
	lg_spec *a = NULL, *b = NULL;
	assert_int_equal(lg_spec_parse(SPEC_A, &a), LG_OK);
	assert_int_equal(lg_spec_parse(SPEC_B, &b), LG_OK);

	/* a first process compiles A: the cubin and the stamp are written */
	lg_ctx *c1;
	assert_int_equal(lg_ctx_create(&o, &c1), LG_OK);
	const void *cub1;
	size_t n1;
	assert_int_equal(lg_ctx_cubin(c1, a, &cub1, &n1), LG_OK);
	void *copy = malloc(n1);
	memcpy(copy, cub1, n1);
	lg_ctx_destroy(c1);
	char *stamp = lg_test_path(dir, "nvrtc.stamp");
	size_t slen = 0;
	char *text = lg_test_read_file(stamp, &slen);
	assert_non_null(text);
	assert_non_null(strstr(text, "lingen-nvrtc 1 "));

	/* a "new process" without NVRTC: A from the cache, B impossible */
	lg_nvrtc_block_for_tests(1);
	lg_ctx *c2;
	assert_int_equal(lg_ctx_create(&o, &c2), LG_OK);
	const void *cub2;
	size_t n2;
	if (lg_ctx_cubin(c2, a, &cub2, &n2) != LG_OK)
		fail_msg("warm cache without NVRTC: %s", lg_last_error());
	assert_int_equal(n2, n1);
	assert_memory_equal(cub2, copy, n1);
	assert_int_equal(lg_ctx_cubin(c2, b, &cub2, &n2), LG_ERR_NVRTC);
	lg_ctx_destroy(c2);

	/* a stamp that no longer matches its library is not trusted */
	char *bad = strdup(text);
	char *sp = strstr(bad, " ");
	sp = strstr(sp + 1, " "); /* after the format number */
	sp = strstr(sp + 1, " "); /* after major */
	sp = strstr(sp + 1, " "); /* after minor: the size field */
	sp[1] = sp[1] == '9' ? '8' : '9';
	lg_test_write_file(stamp, bad, strlen(bad));
	lg_ctx *c3;
	assert_int_equal(lg_ctx_create(&o, &c3), LG_OK);
	assert_int_equal(lg_ctx_cubin(c3, a, &cub2, &n2), LG_ERR_NVRTC);
	lg_ctx_destroy(c3);
	lg_nvrtc_block_for_tests(0);

	free(bad);
	free(text);
	free(stamp);
	free(copy);
	lg_spec_free(a);
	lg_spec_free(b);
	lg_test_rm_rf(dir);
	free(dir);
}

/* The cache's one entry file in dir ("<key>.lgc"), asserted alone. */
static char *only_entry(const char *dir)
{
	DIR *d = opendir(dir);
	assert_non_null(d);
	char *path = NULL;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		size_t n = strlen(e->d_name);
		if (n > 4 && strcmp(e->d_name + n - 4, ".lgc") == 0 && e->d_name[0] != '.') {
			assert_null(path);
			path = lg_test_path(dir, e->d_name);
		}
	}
	closedir(d);
	assert_non_null(path);
	return path;
}

/* A warm cache's entry that is corrupt, or another kernel's (a foreign
 * entry: B's file under A's name), is never served: without NVRTC the
 * kernel fails cleanly; with it, it is compiled again, the same bytes. */
static void test_bad_entry_not_served(void **state)
{
	(void)state;
	char *dir = lg_test_tmpdir("lg-warm-bad"), *bdir = lg_test_tmpdir("lg-warm-b");
	lg_ctx_opts o = {.arch = "sm_90a", .cache_dir = dir, .tuning = "off"};
	lg_ctx_opts ob = {.arch = "sm_90a", .cache_dir = bdir, .tuning = "off"};
	lg_spec *a = NULL, *b = NULL;
	assert_int_equal(lg_spec_parse(SPEC_A, &a), LG_OK);
	assert_int_equal(lg_spec_parse(SPEC_B, &b), LG_OK);
	lg_ctx *c;
	const void *cub;
	size_t n, nb;
	assert_int_equal(lg_ctx_create(&o, &c), LG_OK);
	assert_int_equal(lg_ctx_cubin(c, a, &cub, &n), LG_OK);
	void *want = malloc(n);
	memcpy(want, cub, n);
	lg_ctx_destroy(c);
	assert_int_equal(lg_ctx_create(&ob, &c), LG_OK);
	assert_int_equal(lg_ctx_cubin(c, b, &cub, &nb), LG_OK);
	lg_ctx_destroy(c);
	char *entry = only_entry(dir), *bentry = only_entry(bdir);
	size_t len = 0, blen = 0;
	char *bytes = lg_test_read_file(entry, &len), *bbytes = lg_test_read_file(bentry, &blen);

	for (int k = 0; k < 2; k++) {
		if (k == 0) { /* one payload bit */
			bytes[len - n / 2] ^= 0x04;
			lg_test_write_file(entry, bytes, len);
			bytes[len - n / 2] ^= 0x04;
		} else { /* B's intact entry under A's name */
			lg_test_write_file(entry, bbytes, blen);
		}
		lg_nvrtc_block_for_tests(1);
		assert_int_equal(lg_ctx_create(&o, &c), LG_OK);
		assert_int_equal(lg_ctx_cubin(c, a, &cub, &n), LG_ERR_NVRTC);
		lg_ctx_destroy(c);
		lg_nvrtc_block_for_tests(0);
		assert_int_equal(lg_ctx_create(&o, &c), LG_OK);
		assert_int_equal(lg_ctx_cubin(c, a, &cub, &n), LG_OK); /* compiled again */
		assert_memory_equal(cub, want, n);
		lg_ctx_destroy(c);
		lg_nvrtc_block_for_tests(1); /* and stored again: warm */
		assert_int_equal(lg_ctx_create(&o, &c), LG_OK);
		assert_int_equal(lg_ctx_cubin(c, a, &cub, &n), LG_OK);
		assert_memory_equal(cub, want, n);
		lg_ctx_destroy(c);
		lg_nvrtc_block_for_tests(0);
	}
	free(bytes);
	free(bbytes);
	free(entry);
	free(bentry);
	free(want);
	lg_spec_free(a);
	lg_spec_free(b);
	lg_test_rm_rf(dir);
	lg_test_rm_rf(bdir);
	free(dir);
	free(bdir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_warm_cache_needs_no_nvrtc),
		cmocka_unit_test(test_bad_entry_not_served),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
