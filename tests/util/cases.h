/*
 * cases.h - a family's GPU test cases as data: tests/cases/<family>.json,
 * read and expanded here, run by tests/gpu_test_families.c (and, without a
 * GPU, its --list mode: every spec parsed and its source generated).
 *
 * A case file:
 *   {"family": "<op>",              the file's name without .json
 *    "about": "...",                what the cases cover (free text)
 *    "elsewhere": "...",            no generic cases: the file that checks
 *                                   the family on the GPU, and why there
 *    "base": {spec keys},           under every case's spec
 *    "exact": true,                 every output bit for bit (no mismatch at
 *                                   all, e4m3's one-step allowance included)
 *    "patterns": 4,                 each size at seeds whose low two bits are
 *                                   0..3 (the MoE references' routing patterns)
 *    "needs": "sm_90a",             every case's "needs" unless it gives one
 *    "cases": [ case, ... ]}
 * A case:
 *   {"spec": {spec keys},           op: the family; pass forward and dtype
 *                                   bf16 unless given (or in base)
 *    "variants": [{keys}, ...],     one spec each, merged over spec
 *    "each": {"a.b": [v, ...]},     one spec each value (every combination of
 *                                   the keys), set at the dotted path; the
 *                                   key "": objects merged over the spec
 *    "tokens": [N, ...]             token counts (lg_sizes_at of N), or
 *    "sizes": [[N, S1, ...], ...]   the pass's run-time sizes (the rest from
 *                                   lg_sizes_at of the first)
 *    "no_optional": true,           optional arguments passed as 0
 *    "exact": bool,                 as the file's, for this case
 *    "candidates": true,            every tile `lingen tune` tries for the
 *                                   context's target instead of the spec's
 *    "context": "sm_90",            run on a context compiling for this arch
 *                                   when the device's is that arch with "a"
 *    "needs": "sm_90a",             run only where the device is this arch
                                   (with context too: e.g. the mma.sync runs
                                   an sm_90a device adds; --list generates
                                   for the context's arch)
 *    "refused_ok": true}            a spec the parser refuses is skipped
 *                                   (e.g. a tile too large for shared memory)
 * Each spec runs at each size through lg_check_kernel (`lingen check`):
 * every output within the tolerance its reference declares (gen/ref),
 * nothing unwritten, at least one output unless a size is 0, and with
 * exact no mismatch at all.
 */
#ifndef LG_CASES_H
#define LG_CASES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "family.h"

struct lg_case {
	char *json;                       /* the spec */
	size_t npoints;                   /* sizes to run at */
	int64_t (*points)[LG_MAX_SIZES];  /* tokens (nsizes 1) or given sizes */
	int nsizes;                       /* sizes given a point */
	bool no_optional, exact, candidates, refused_ok;
	int patterns;                     /* seeds a point (1: the seed) */
	char context[16], needs[16];      /* "" when not set */
	int index;                        /* the case's index in the file */
};

struct lg_case_file {
	char family[48];
	char *elsewhere; /* NULL: generic cases */
	size_t n;
	struct lg_case *c;
};

/* The folder of the case files: LG_SOURCE_DIR/tests/cases. */
const char *lg_cases_dir(void);

/* Read and expand path into f; 0, or -1 after printing (stderr) the file,
 * the case and what is wrong. family, when not NULL, must be the file's. */
int lg_cases_load(const char *path, const char *family, struct lg_case_file *f);
void lg_cases_free(struct lg_case_file *f);

/* "M=8192" or "sizes=1000,96" for messages, into buf. */
const char *lg_case_point(const struct lg_case *c, size_t i, char *buf, size_t n);

#endif
