/*
 * compare.h - the measures of docs/kernels.md 4 for one output buffer.
 */
#ifndef LG_HARNESS_COMPARE_H
#define LG_HARNESS_COMPARE_H

#include <stdio.h>

#include "harness.h"
#include "ref.h"

/* Compare got against the reference buffer b; fill m and print up to
 * max_report mismatches (index, got, expected) to out. */
void lg_compare(const struct lg_ref_buf *b, const void *got, int max_report, FILE *out,
		struct lg_check_measure *m);

#endif
