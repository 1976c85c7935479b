/*
 * gputest.c - the GPU tests' shared helpers (gputest.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int lg_test_copy_outputs(const struct lg_gpu_case *g, void *first[LG_MAX_ARGS])
{
	int n = 0;
	for (int i = 0; i < g->ref.n; i++) {
		size_t bytes = g->ref.buf[i].count * g->ref.buf[i].elem;
		if (!g->ref.buf[i].output || !g->got[i] || !bytes)
			continue;
		first[i] = malloc(bytes);
		assert_non_null(first[i]);
		memcpy(first[i], g->got[i], bytes);
		n++;
	}
	return n;
}
