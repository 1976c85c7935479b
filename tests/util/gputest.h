/*
 * gputest.h - what the GPU tests (tests/gpu_test_*.c) share: the report
 * of a checked kernel (each measure of lg_check_kernel's result, whether
 * every output was written), a copy of a launch's outputs; with
 * refcase.h, a spec from its op, pass, dtype and keys.
 * The checks themselves stay in each test, next to what it asserts.
 */
#ifndef LG_GPUTEST_H
#define LG_GPUTEST_H

#include <stdbool.h>

#include "gpu.h" /* tools/harness: struct lg_gpu_case */
#include "harness.h"
#include "refcase.h" /* lg_test_spec */

/* Whether every measure of r has no unwritten element, starting from
 * `start` (false: a result with no measures counts as not written). */
bool lg_test_written(const struct lg_check_result *r, bool start);

/* One line a measure: name (padded to width), kind, count, max_rel,
 * rel_l2, mismatches, unwritten, ok / FAIL. */
void lg_test_print_measures(const struct lg_check_result *r, int width);

/* Copy each output of g the last download brought back (g->got[i], of a
 * non-zero size) into first[i] (malloc'd: the caller frees each); returns
 * how many. For the checks that a second launch writes the same bits. */
int lg_test_copy_outputs(const struct lg_gpu_case *g, void *first[LG_MAX_ARGS]);

/* Spec s (an fp32 output `out`, accumulate on) at `tokens`: from a zeroed
 * output, one launch matches the reference; a second adds exactly the
 * same bits (the output exactly doubled). */
void lg_test_accumulate(lg_ctx *ctx, const lg_spec *s, int64_t tokens, int out, uint64_t seed);

/* Specs s16 and s32, alike but for the dtype of output `out` (bf16,
 * fp32), on the same inputs: the bf16 output is bit for bit the fp32 one
 * rounded to nearest even (a kernel rounding toward zero fails), and no
 * element is left unwritten (poisoned NaN). */
void lg_test_bf16_exact(lg_ctx *ctx, const lg_spec *s16, const lg_spec *s32, int64_t tokens, int out, uint64_t seed);

#endif
