/*
 * gputest.h - what the GPU tests (tests/gpu_test_*.c) share: the report
 * of a checked kernel (each measure of lg_check_kernel's result, whether
 * every output was written); with refcase.h, a spec from its op, pass,
 * dtype and keys.
 * The checks themselves stay in each test, next to what it asserts.
 */
#ifndef LG_GPUTEST_H
#define LG_GPUTEST_H

#include <stdbool.h>

#include "harness.h"
#include "refcase.h" /* lg_test_spec */

/* Whether every measure of r has no unwritten element, starting from
 * `start` (false: a result with no measures counts as not written). */
bool lg_test_written(const struct lg_check_result *r, bool start);

/* One line a measure: name (padded to width), kind, count, max_rel,
 * rel_l2, mismatches, unwritten, ok / FAIL. */
void lg_test_print_measures(const struct lg_check_result *r, int width);

#endif
