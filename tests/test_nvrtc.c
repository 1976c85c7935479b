/*
 * test_nvrtc.c - NVRTC loading and compiling, and the driver loader on a
 * machine that may have no GPU: cubins for sm_90a and sm_80, compile errors
 * with log/options/numbered source, a missing or blocked NVRTC, dumps.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda.h"
#include "error.h"
#include "nvrtc.h"
#include "testutil.h"

static const char tiny[] = "extern \"C\" __global__ void lg_tiny(float *y, const float *x, int n)\n"
			   "{\n"
			   "\tint i = blockIdx.x * blockDim.x + threadIdx.x;\n"
			   "\tif (i < n)\n"
			   "\t\ty[i] = 2.0f * x[i];\n"
			   "}\n";

static void test_compile_archs(void **state)
{
	(void)state;
	const char *archs[] = {"sm_90a", "sm_80"};
	for (int i = 0; i < 2; i++) {
		void *cubin = NULL;
		size_t size = 0;
		char *log = NULL;
		lg_status st = lg_nvrtc_compile(tiny, "lg_tiny", archs[i], &cubin, &size, &log);
		if (st != LG_OK)
			fail_msg("%s: %s", lg_status_str(st), lg_last_error());
		lg_test_assert_cubin(cubin, size);
		free(cubin);
		free(log);
		/* log may be NULL */
		st = lg_nvrtc_compile(tiny, "lg_tiny", archs[i], &cubin, &size, NULL);
		assert_int_equal(st, LG_OK);
		lg_test_assert_cubin(cubin, size);
		free(cubin);
	}
}

/* An arch NVRTC does not know is refused before compiling, naming those it does. */
static void test_unknown_arch(void **state)
{
	(void)state;
	void *cubin = NULL;
	size_t size = 0;
	assert_int_equal(lg_nvrtc_compile(tiny, "lg_tiny", "sm_999", &cubin, &size, NULL), LG_ERR_UNSUPPORTED);
	assert_null(cubin);
	assert_non_null(strstr(lg_last_error(), "cannot compile lg_tiny for sm_999"));
	assert_non_null(strstr(lg_last_error(), "sm_90"));
}

static void test_version(void **state)
{
	(void)state;
	int major = 0, minor = -1;
	assert_int_equal(lg_nvrtc_version(&major, &minor), LG_OK);
	assert_true(major >= 12);
	assert_true(minor >= 0);
}

static void test_options(void **state)
{
	(void)state;
	int n = 0, n2 = 0;
	const char *const *o = lg_nvrtc_options("sm_90a", 13, 0, &n);
	assert_non_null(o);
	assert_true(n >= 1);
	assert_null(o[n]);
	assert_string_equal(o[0], "--gpu-architecture=sm_90a");
	assert_ptr_equal(lg_nvrtc_options("sm_90a", 13, 0, &n2), o); /* stable */
	assert_int_equal(n2, n);
	const char *const *o80 = lg_nvrtc_options("sm_80", 13, 0, &n2);
	assert_non_null(o80);
	assert_string_equal(o80[0], "--gpu-architecture=sm_80");
	assert_non_null(lg_nvrtc_options("sm_100a", 13, 0, &n2));
	/* --minimal from NVRTC 12.4 on, never before */
	assert_string_equal(o[n - 1], "--minimal");
	const char *const *o123 = lg_nvrtc_options("sm_90a", 12, 3, &n2);
	assert_non_null(o123);
	assert_int_equal(n2, n - 1);
	assert_null(o123[n2]);
	assert_true(o123 != o);
	assert_non_null(lg_nvrtc_options("sm_90a", 12, 4, &n2));
	assert_int_equal(n2, n);
	assert_null(lg_nvrtc_options("sm90", 13, 0, &n2));
	assert_int_equal(n2, 0);
	assert_null(lg_nvrtc_options("sm_90a --x", 13, 0, &n2));
	assert_null(lg_nvrtc_options(NULL, 13, 0, &n2));
	void *cubin = (void *)1;
	size_t size = 1;
	assert_int_equal(lg_nvrtc_compile(tiny, "lg_tiny", "gfx90a", &cubin, &size, NULL),
			 LG_ERR_INVALID_ARG);
	assert_null(cubin);
	assert_non_null(strstr(lg_last_error(), "gfx90a"));
}

/* LINGEN_NVRTC_OPTIONS: appended after the base options, its own interned
 * list (so its own cache key), malformed values refused with a message. */
static void test_extra_options(void **state)
{
	(void)state;
	int n = 0, n2 = 0;
	unsetenv("LINGEN_NVRTC_OPTIONS");
	const char *const *base = lg_nvrtc_options("sm_90a", 13, 0, &n);
	assert_non_null(base);
	setenv("LINGEN_NVRTC_OPTIONS", "  -lineinfo\t-Ofc=max ", 1);
	const char *const *o = lg_nvrtc_options("sm_90a", 13, 0, &n2);
	assert_non_null(o);
	assert_true(o != base);
	assert_int_equal(n2, n + 2);
	for (int i = 0; i < n; i++)
		assert_string_equal(o[i], base[i]);
	assert_string_equal(o[n], "-lineinfo");
	assert_string_equal(o[n + 1], "-Ofc=max");
	assert_null(o[n + 2]);
	assert_ptr_equal(lg_nvrtc_options("sm_90a", 13, 0, &n2), o); /* stable */
	static const char *const bad[] = {
	    "lineinfo", "-a -b -c -d -e -f -g -h -i", "-DX=\"y\"", "-I'a b'", "-x\\y",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		setenv("LINGEN_NVRTC_OPTIONS", bad[i], 1);
		assert_null(lg_nvrtc_options("sm_90a", 13, 0, &n2));
		assert_int_equal(n2, 0);
		assert_non_null(strstr(lg_last_error(), "LINGEN_NVRTC_OPTIONS"));
		void *cubin = (void *)1;
		size_t size = 1;
		assert_int_equal(lg_nvrtc_compile(tiny, "lg_tiny", "sm_90a", &cubin, &size, NULL),
				 LG_ERR_INVALID_ARG);
		assert_null(cubin);
	}
	char big[300];
	memset(big, 'x', sizeof big - 1);
	big[0] = '-';
	big[sizeof big - 1] = '\0';
	setenv("LINGEN_NVRTC_OPTIONS", big, 1);
	assert_null(lg_nvrtc_options("sm_90a", 13, 0, &n2));
	assert_non_null(strstr(lg_last_error(), "longer than"));
	unsetenv("LINGEN_NVRTC_OPTIONS");
	assert_ptr_equal(lg_nvrtc_options("sm_90a", 13, 0, &n2), base);
}

static void test_syntax_error(void **state)
{
	(void)state;
	const char *src = "extern \"C\" __global__ void lg_bad(float *y)\n"
			  "{\n"
			  "\ty[0] = 1.0f +;\n"
			  "}\n";
	void *cubin = (void *)1;
	size_t size = 1;
	lg_status st = lg_nvrtc_compile(src, "lg_bad", "sm_90a", &cubin, &size, NULL);
	assert_int_equal(st, LG_ERR_COMPILE);
	assert_null(cubin);
	assert_int_equal(size, 0);
	const char *msg = lg_last_error();
	assert_non_null(strstr(msg, "NVRTC failed to compile lg_bad for sm_90a"));
	assert_non_null(strstr(msg, "lg_bad(3): error")); /* the NVRTC log */
	assert_non_null(strstr(msg, "options: --gpu-architecture=sm_90a"));
	assert_non_null(strstr(msg, "source:\n"));
	assert_non_null(strstr(msg, "    1 | extern \"C\" __global__ void lg_bad(float *y)"));
	assert_non_null(strstr(msg, "    3>| \ty[0] = 1.0f +;")); /* the error line marked */
}

static void test_error_window(void **state)
{
	(void)state;
	/* 200 lines, the error on line 150: only lines around it are shown */
	char *src = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&src, &len);
	fprintf(f, "extern \"C\" __global__ void lg_long(float *y)\n{\n");
	for (int i = 3; i <= 200; i++)
		fprintf(f, i == 150 ? "\ty[0] = undeclared_%d;\n" : "\ty[%d] = 0.0f;\n", i);
	fprintf(f, "}\n");
	fclose(f);
	void *cubin;
	size_t size;
	assert_int_equal(lg_nvrtc_compile(src, "lg_long", "sm_80", &cubin, &size, NULL),
			 LG_ERR_COMPILE);
	const char *msg = lg_last_error();
	assert_true(strlen(msg) < LG_ERROR_MAX);
	assert_non_null(strstr(msg, "undeclared_150"));
	assert_non_null(strstr(msg, "  150>| \ty[0] = undeclared_150;"));
	assert_non_null(strstr(msg, "  140 | "));
	assert_null(strstr(msg, "   10 | "));
	assert_non_null(strstr(msg, "not shown"));
	free(src);
}

static void test_blocked(void **state)
{
	(void)state;
	int major, minor;
	assert_int_equal(lg_nvrtc_version(&major, &minor), LG_OK); /* loaded */
	lg_nvrtc_block_for_tests(1);
	void *cubin = (void *)1;
	size_t size = 1;
	assert_int_equal(lg_nvrtc_compile(tiny, "lg_tiny", "sm_90a", &cubin, &size, NULL),
			 LG_ERR_NVRTC);
	assert_null(cubin);
	assert_non_null(strstr(lg_last_error(), "NVRTC"));
	assert_int_equal(lg_nvrtc_version(&major, &minor), LG_ERR_NVRTC);
	lg_nvrtc_block_for_tests(0);
	assert_int_equal(lg_nvrtc_compile(tiny, "lg_tiny", "sm_90a", &cubin, &size, NULL), LG_OK);
	lg_test_assert_cubin(cubin, size);
	free(cubin);
}

/* LINGEN_NVRTC naming a missing file: a clean LG_ERR_NVRTC naming it. Run in
 * a child so the process-wide NVRTC state does not leak into other tests. */
static void test_missing_library(void **state)
{
	(void)state;
	const char *path = "/nonexistent/lingen/libnvrtc.so.99";
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		lg_nvrtc_block_for_tests(1); /* forget a handle loaded before the fork */
		lg_nvrtc_block_for_tests(0);
		setenv("LINGEN_NVRTC", path, 1);
		void *cubin = NULL;
		size_t size = 0;
		lg_status st = lg_nvrtc_compile(tiny, "lg_tiny", "sm_90a", &cubin, &size, NULL);
		int ok = st == LG_ERR_NVRTC && cubin == NULL && strstr(lg_last_error(), path) &&
			 strstr(lg_last_error(), "LINGEN_NVRTC");
		if (!ok)
			fprintf(stderr, "unexpected: %s: %s\n", lg_status_str(st), lg_last_error());
		int major, minor;
		ok = ok && lg_nvrtc_version(&major, &minor) == LG_ERR_NVRTC;
		_exit(ok ? 0 : 1);
	}
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_dump_dir(void **state)
{
	(void)state;
	char *dir = lg_test_tmpdir("dump");
	char *sub = lg_test_path(dir, "x/y");
	setenv("LINGEN_DUMP_DIR", sub, 1);
	void *cubin;
	size_t size;
	assert_int_equal(lg_nvrtc_compile(tiny, "lg_tiny", "sm_90a", &cubin, &size, NULL), LG_OK);
	char *cu = lg_test_path(sub, "lg_tiny.sm_90a.cu"), *bin = lg_test_path(sub, "lg_tiny.sm_90a.cubin");
	size_t n;
	char *text = lg_test_read_file(cu, &n);
	assert_non_null(text);
	assert_string_equal(text, tiny);
	free(text);
	char *bytes = lg_test_read_file(bin, &n);
	assert_non_null(bytes);
	assert_int_equal(n, size);
	assert_memory_equal(bytes, cubin, size);
	free(bytes);
	free(cubin);
	/* a failed compile leaves its source and log */
	assert_int_equal(lg_nvrtc_compile("this is not C++", "lg_broken", "sm_80", &cubin, &size,
					  NULL),
			 LG_ERR_COMPILE);
	char *lg = lg_test_path(sub, "lg_broken.sm_80.log");
	text = lg_test_read_file(lg, &n);
	assert_non_null(text);
	assert_non_null(strstr(text, "error"));
	free(text);
	/* an unusable dump folder is one warning and no error */
	char *file = lg_test_path(dir, "file");
	lg_test_write_file(file, "x", 1);
	setenv("LINGEN_DUMP_DIR", file, 1);
	lg_test_stderr_begin();
	lg_status st = lg_nvrtc_compile(tiny, "lg_tiny", "sm_80", &cubin, &size, NULL);
	char *err = lg_test_stderr_end();
	assert_int_equal(st, LG_OK);
	free(cubin);
	assert_int_equal(lg_test_count(err, "lingen: warning: "), 1);
	free(err);
	unsetenv("LINGEN_DUMP_DIR");
	free(file);
	free(lg);
	free(cu);
	free(bin);
	free(sub);
	lg_test_rm_rf(dir);
	free(dir);
}

static void test_driver_without_gpu(void **state)
{
	(void)state;
	const struct lg_cu *cu = NULL;
	lg_status st = lg_cu_get(&cu);
	if (st == LG_OK) {
		print_message("skipped: a CUDA device is present, so the GPU-less path is not exercised\n");
		assert_non_null(cu);
		char arch[16];
		assert_int_equal(lg_cu_device_arch(arch), LG_OK);
		assert_true(strncmp(arch, "sm_", 3) == 0);
		skip();
	}
	assert_true(st == LG_ERR_DRIVER || st == LG_ERR_NO_DEVICE);
	assert_null(cu);
	char *first = strdup(lg_last_error());
	assert_true(strlen(first) > 0);
	lg_clear_error();
	/* cached: the same answer and message again, without crashing */
	assert_int_equal(lg_cu_get(&cu), st);
	assert_string_equal(lg_last_error(), first);
	char arch[16];
	assert_int_equal(lg_cu_device_arch(arch), st);
	assert_int_equal(lg_cu_ensure_context(0), st);
	free(first);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_compile_archs),
		cmocka_unit_test(test_unknown_arch),
		cmocka_unit_test(test_version),
		cmocka_unit_test(test_options),
		cmocka_unit_test(test_extra_options),
		cmocka_unit_test(test_syntax_error),
		cmocka_unit_test(test_error_window),
		cmocka_unit_test(test_blocked),
		cmocka_unit_test(test_missing_library),
		cmocka_unit_test(test_dump_dir),
		cmocka_unit_test(test_driver_without_gpu),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
