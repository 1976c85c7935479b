/*
 * gputest.c - the GPU tests' shared helpers (gputest.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "gputest.h"

#define SPEC_FMT "{\"op\": \"%s\", \"pass\": \"%s\", \"dtype\": \"%s\", %s}"

lg_spec *lg_test_spec(const char *op, const char *pass, const char *dtype, const char *keys)
{
	int n = snprintf(NULL, 0, SPEC_FMT, op, pass, dtype, keys);
	char *json = malloc((size_t)n + 1);
	assert_non_null(json);
	snprintf(json, (size_t)n + 1, SPEC_FMT, op, pass, dtype, keys);
	lg_spec *s = NULL;
	if (lg_spec_parse(json, &s) != LG_OK)
		fail_msg("%s: %s", json, lg_last_error());
	free(json);
	return s;
}

bool lg_test_written(const struct lg_check_result *r, bool start)
{
	bool written = start;
	for (int i = 0; i < r->nmeasures; i++)
		written = written && r->m[i].unwritten == 0;
	return written;
}

void lg_test_print_measures(const struct lg_check_result *r, int width)
{
	for (int i = 0; i < r->nmeasures; i++)
		printf("  %-*s %-5s n=%llu max_rel=%.3g rel_l2=%.3g mismatches=%llu unwritten=%llu %s\n", width,
		       r->m[i].name, r->m[i].kind, (unsigned long long)r->m[i].count, r->m[i].max_rel, r->m[i].rel_l2,
		       (unsigned long long)r->m[i].mismatches, (unsigned long long)r->m[i].unwritten,
		       r->m[i].pass ? "ok" : "FAIL");
}
