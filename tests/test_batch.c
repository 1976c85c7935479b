/*
 * test_batch.c - lg_ctx_cubins: the cubins of many specs made in a pool of
 * threads are the bytes a serial lg_ctx_cubin gives, later lookups are
 * memory hits with the same pointer, and a failure in a worker thread
 * comes back to the caller with its message (the first failing spec's).
 * Needs NVRTC, no GPU.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lingen.h"

static const char *const SPECS[] = {
	"{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 1024}",
	"{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048}",
	"{\"op\": \"rmsnorm\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"hidden\": 1024}",
};
#define N (sizeof SPECS / sizeof SPECS[0])

static void parse_all(lg_spec *s[N])
{
	for (size_t i = 0; i < N; i++)
		assert_int_equal(lg_spec_parse(SPECS[i], &s[i]), LG_OK);
}

static void test_pool_gives_the_serial_bytes(void **state)
{
	(void)state;
	lg_spec *s[N];
	parse_all(s);
	lg_ctx_opts o = {.arch = "sm_90a", .cache_dir = "off", .tuning = "off"};
	lg_ctx *pool, *serial;
	assert_int_equal(lg_ctx_create(&o, &pool), LG_OK);
	assert_int_equal(lg_ctx_create(&o, &serial), LG_OK);
	assert_int_equal(lg_ctx_cubins(pool, (const lg_spec *const *)s, N, 2), LG_OK);
	for (size_t i = 0; i < N; i++) {
		const void *a, *a2, *b;
		size_t na, na2, nb;
		assert_int_equal(lg_ctx_cubin(pool, s[i], &a, &na), LG_OK);
		assert_int_equal(lg_ctx_cubin(pool, s[i], &a2, &na2), LG_OK);
		assert_ptr_equal(a, a2); /* made once, then a memory hit */
		assert_int_equal(lg_ctx_cubin(serial, s[i], &b, &nb), LG_OK);
		assert_int_equal(na, nb);
		assert_memory_equal(a, b, na);
	}
	lg_ctx_destroy(pool);
	lg_ctx_destroy(serial);
	for (size_t i = 0; i < N; i++)
		lg_spec_free(s[i]);
}

static void test_worker_failure_reaches_the_caller(void **state)
{
	(void)state;
	lg_spec *s[N];
	parse_all(s);
	/* an arch lingen takes and NVRTC does not compile for: each compile fails in its worker */
	lg_ctx_opts o = {.arch = "sm_99", .cache_dir = "off", .tuning = "off"};
	lg_ctx *c;
	assert_int_equal(lg_ctx_create(&o, &c), LG_OK);
	lg_status st = lg_ctx_cubins(c, (const lg_spec *const *)s, N, 3);
	assert_int_not_equal(st, LG_OK);
	assert_non_null(strstr(lg_last_error(), "sm_99"));
	assert_non_null(strstr(lg_last_error(), lg_spec_entry(s[0]))); /* the first spec's */
	const lg_spec *with_null[2] = {s[0], NULL};
	assert_int_equal(lg_ctx_cubins(c, with_null, 2, 2), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_ctx_cubins(NULL, with_null, 1, 1), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_ctx_cubins(c, NULL, 0, 1), LG_OK); /* nothing to do */
	lg_ctx_destroy(c);
	for (size_t i = 0; i < N; i++)
		lg_spec_free(s[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pool_gives_the_serial_bytes),
		cmocka_unit_test(test_worker_failure_reaches_the_caller),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
