/*
 * testutil.c - the helpers the tests share (see testutil.h).
 */
#include "testutil.h"

#include <dirent.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "cuda.h"
#include "harness.h"
#include "ref.h"

static void die(const char *what)
{
	perror(what);
	abort();
}

/* A malloc'd "$TMPDIR/lingen-<tag>-XXXXXX" template for mkdtemp/mkstemp. */
static char *tmp_template(const char *tag)
{
	const char *base = getenv("TMPDIR");
	char *p = NULL;
	if (asprintf(&p, "%s/lingen-%s-XXXXXX", base && *base ? base : "/tmp", tag) < 0)
		die("asprintf");
	return p;
}

char *lg_test_tmpdir(const char *tag)
{
	char *p = tmp_template(tag);
	if (!mkdtemp(p))
		die(p);
	return p;
}

static int open_up(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)ftw;
	if (flag == FTW_D && (sb->st_mode & 0700) != 0700)
		chmod(path, 0755);
	return 0;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

void lg_test_rm_rf(const char *path)
{
	if (!path)
		return;
	/* make folders writable first (tests chmod some to 0555) */
	nftw(path, open_up, 16, FTW_PHYS);
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

char *lg_test_path(const char *dir, const char *name)
{
	char *p = NULL;
	if (asprintf(&p, "%s/%s", dir, name) < 0)
		die("asprintf");
	return p;
}

char *lg_test_read_file(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	size_t cap = 8192, n = 0, got;
	char *b = malloc(cap + 1);
	if (!b)
		die("malloc");
	while ((got = fread(b + n, 1, cap - n, f)) > 0) {
		n += got;
		if (n == cap && !(b = realloc(b, (cap *= 2) + 1)))
			die("realloc");
	}
	int bad = ferror(f);
	fclose(f);
	if (bad) {
		free(b);
		return NULL;
	}
	b[n] = '\0';
	if (size)
		*size = n;
	return b;
}

void lg_test_write_file(const char *path, const void *data, size_t size)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		die(path);
	if (size && fwrite(data, 1, size, f) != size)
		die(path);
	if (fclose(f) != 0)
		die(path);
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int has_suffix(const char *name, const char *suffix)
{
	size_t ln = strlen(name), ls = strlen(suffix);
	return ln >= ls && strcmp(name + ln - ls, suffix) == 0;
}

char **lg_test_list_dir(const char *dir, const char *suffix, size_t *count)
{
	DIR *d = opendir(dir);
	if (!d)
		return NULL;
	char **list = calloc(1, sizeof *list);
	size_t n = 0;
	struct dirent *e;
	if (!list)
		die("calloc");
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.' || !has_suffix(e->d_name, suffix))
			continue;
		if (!(list = realloc(list, (n + 2) * sizeof *list)))
			die("realloc");
		list[n++] = lg_test_path(dir, e->d_name);
		list[n] = NULL;
	}
	closedir(d);
	qsort(list, n, sizeof *list, by_name);
	*count = n;
	return list;
}

void lg_test_free_list(char **list)
{
	if (!list)
		return;
	for (char **p = list; *p; p++)
		free(*p);
	free(list);
}

static int saved_fd = -1;
static char *capture_path;

void lg_test_stderr_begin(void)
{
	fflush(stderr);
	capture_path = tmp_template("stderr");
	int fd = mkstemp(capture_path);
	if (fd < 0)
		die(capture_path);
	saved_fd = dup(STDERR_FILENO);
	if (saved_fd < 0 || dup2(fd, STDERR_FILENO) < 0)
		die("dup2");
	close(fd);
}

char *lg_test_stderr_end(void)
{
	fflush(stderr);
	if (dup2(saved_fd, STDERR_FILENO) < 0)
		die("dup2");
	close(saved_fd);
	saved_fd = -1;
	char *text = lg_test_read_file(capture_path, NULL);
	if (!text)
		die(capture_path);
	unlink(capture_path);
	free(capture_path);
	capture_path = NULL;
	return text;
}

int lg_test_count(const char *hay, const char *needle)
{
	int n = 0;
	size_t len = strlen(needle);
	for (const char *p = hay; len && (p = strstr(p, needle)) != NULL; p += len)
		n++;
	return n;
}

void lg_test_assert_cubin(const void *cubin, size_t size)
{
	assert_non_null(cubin);
	assert_true(size > 64);
	assert_memory_equal(cubin, "\177ELF", 4);
}

void lg_test_require_gpu(const char *test)
{
	const struct lg_cu *cu;
	if (lg_cu_get(&cu) == LG_OK && lg_cu_ensure_context(0) == LG_OK) {
		/* LINGEN_TEST_FILTER: run only the cmocka tests matching this
		 * pattern (so tools/device_tests.sh can spread one long GPU test
		 * over several processes) */
		const char *filter = getenv("LINGEN_TEST_FILTER");
		if (filter && *filter)
			cmocka_set_test_filter(filter);
		return;
	}
	printf("SKIP %s: no CUDA device or driver: %s\n", test, lg_last_error());
	fflush(stdout);
	exit(LG_TEST_SKIP);
}

int lg_test_gpu_ctx(lg_ctx **ctx)
{
	if (lg_cu_ensure_context(0) != LG_OK || lg_ctx_create(NULL, ctx) != LG_OK) {
		fprintf(stderr, "a CUDA device is present but: %s\n", lg_last_error());
		return -1;
	}
	return 0;
}

static lg_ctx **group_ctx;

static int group_setup(void **state)
{
	(void)state;
	return lg_test_gpu_ctx(group_ctx);
}

static int group_teardown(void **state)
{
	(void)state;
	lg_ctx_destroy(*group_ctx);
	*group_ctx = NULL;
	return 0;
}

int lg_test_run_gpu(const char *name, const struct CMUnitTest *tests, size_t n, lg_ctx **ctx)
{
	group_ctx = ctx;
	return _cmocka_run_group_tests(name, tests, n, group_setup, group_teardown);
}

uint64_t lg_test_seed(const char *test)
{
	uint64_t seed = 0;
	bool set = false;
	if (lg_check_env_seed(&seed, &set) != LG_OK) {
		fprintf(stderr, "%s: %s\n", test, lg_last_error());
		abort();
	}
	if (!set)
		seed = lg_check_fresh_seed();
	printf("%s: seed: %llu (replay with LINGEN_SEED=%llu)\n", test, (unsigned long long)seed,
	       (unsigned long long)seed);
	fflush(stdout);
	return seed;
}

uint64_t lg_test_rand(uint64_t *state)
{
	return lg_ref_rand(state);
}

void lg_test_mutate(char *buf, size_t len, uint64_t *state)
{
	static const char json[] = "\"{}[],:0123456789-+.eE \\nutfalse";
	int n = 1 + (int)(lg_test_rand(state) % 8);
	for (int i = 0; i < n && len; i++) {
		uint64_t r = lg_test_rand(state);
		size_t at = (size_t)(r % len);
		buf[at] = (r >> 32) % 4 ? json[(r >> 40) % (sizeof json - 1)] : (char)(r >> 48);
	}
}

bool lg_test_cuobjdump(char *path, size_t len)
{
	const char *dirs = getenv("PATH");
	while (dirs && *dirs) {
		const char *end = strchr(dirs, ':');
		size_t n = end ? (size_t)(end - dirs) : strlen(dirs);
		snprintf(path, len, "%.*s/cuobjdump", (int)n, dirs);
		if (n && access(path, X_OK) == 0)
			return true;
		dirs = end ? end + 1 : NULL;
	}
	snprintf(path, len, "/usr/local/cuda/bin/cuobjdump");
	return access(path, X_OK) == 0;
}

static char sass_file[] = "/tmp/lingen-sass-XXXXXX";

FILE *lg_test_sass_open(const char *cuobjdump, const void *cubin, size_t size)
{
	strcpy(sass_file + sizeof sass_file - 7, "XXXXXX");
	int fd = mkstemp(sass_file);
	assert_true(fd >= 0);
	FILE *f = fdopen(fd, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(cubin, 1, size, f), size);
	fclose(f);
	char cmd[1200];
	snprintf(cmd, sizeof cmd, "'%s' -sass '%s' 2>&1", cuobjdump, sass_file);
	FILE *pipe = popen(cmd, "r");
	assert_non_null(pipe);
	return pipe;
}

int lg_test_sass_close(FILE *pipe)
{
	int rc = pclose(pipe);
	unlink(sass_file);
	return rc;
}
