/*
 * gputest.h - what the GPU tests (tests/gpu_test_*.c) share: a spec from
 * its op, pass, dtype and keys, and the report of a checked kernel (each
 * measure of lg_check_kernel's result, whether every output was written).
 * The checks themselves stay in each test, next to what it asserts.
 */
#ifndef LG_GPUTEST_H
#define LG_GPUTEST_H

#include <stdbool.h>

#include "harness.h"

/* The spec {"op": op, "pass": pass, "dtype": dtype, <keys>}; a parse
 * error fails the test (cmocka), naming the JSON and the library's error.
 * The caller frees it with lg_spec_free(). */
lg_spec *lg_test_spec(const char *op, const char *pass, const char *dtype, const char *keys);

/* Whether every measure of r has no unwritten element, starting from
 * `start` (false: a result with no measures counts as not written). */
bool lg_test_written(const struct lg_check_result *r, bool start);

/* One line a measure: name (padded to width), kind, count, max_rel,
 * rel_l2, mismatches, unwritten, ok / FAIL. */
void lg_test_print_measures(const struct lg_check_result *r, int width);

#endif
