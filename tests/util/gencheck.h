/*
 * gencheck.h - the rules every generated CUDA file keeps, checked by
 * test_golden on the golden files, every kernel of configs/kernels/ and
 * every kernel of the expanded model configs (configs/models/):
 *   - lines of at most LG_LINE_MAX columns (a tab to the next multiple of 8);
 *   - no type, function or macro defined that nothing else in the file uses;
 *   - no integer arithmetic on a literal 0 (`x + 0`, `0 * y`, `(0 + j)`);
 *   - no dead code NVRTC's front end finds: no variable declared and never
 *     read, set and never used, no parameter never referenced (an entry
 *     point leaves the convention's arguments it does not read unnamed).
 * Each check fails the cmocka test naming `what`, the line and the rule.
 */
#ifndef LG_GENCHECK_H
#define LG_GENCHECK_H

/* All the rules above on src, generated for arch ("sm_90a"). */
void lg_test_check_source(const char *what, const char *src, const char *arch);

/* The rules one at a time (the text rules need no NVRTC). */
void lg_test_check_line_width(const char *what, const char *src);
void lg_test_check_helpers_used(const char *what, const char *src);
void lg_test_check_no_zero_terms(const char *what, const char *src);
void lg_test_check_lint(const char *what, const char *src, const char *arch);
/* src compiled for arch by NVRTC with ptxas's report: no function spills
 * registers to local memory (fails with the report). */
void lg_test_check_no_spill(const char *what, const char *src, const char *arch);

#endif
