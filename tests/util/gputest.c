/*
 * gputest.c - the GPU tests' shared helpers (gputest.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "gputest.h"

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
