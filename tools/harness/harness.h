/*
 * harness.h - run generated kernels on the GPU against their plain-C
 * references (`lingen check`) and time them (`lingen bench`).
 *
 * Each family's reference (gen/<family>_ref.c) fills its inputs with fresh
 * random values, runs the CPU reference, and compares the GPU outputs with
 * the measures of KERNELS.md §4. Outputs are poisoned before each launch so
 * an unwritten element is caught.
 */
#ifndef LG_HARNESS_H
#define LG_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "lingen.h"

struct lg_check_opts {
	int64_t tokens;  /* token count (rows) */
	uint64_t seed;   /* input seed; 0 = from the clock */
	int max_report;  /* mismatches printed per output (default 5) */
	FILE *out;       /* where the report goes (NULL: stdout) */
};

/* One compared output. */
struct lg_check_measure {
	char name[16];       /* "q", "st", "dx", ... */
	char kind[16];       /* "fp8", "fp32", "bf16", "scale" */
	uint64_t count;      /* elements compared */
	uint64_t mismatches; /* outside tolerance (bit-exact kinds: not equal) */
	uint64_t unwritten;  /* still holding the poison pattern */
	double max_rel;      /* max |gpu-ref| / max(|ref|, tiny) */
	double rel_l2;       /* ||gpu-ref|| / ||ref|| */
	double equal_frac;   /* fraction bit-equal */
	bool pass;
};

struct lg_check_result {
	bool pass;
	int nmeasures;
	struct lg_check_measure m[8];
};

/* Check one kernel at one token count: needs a GPU. A failed comparison is
 * LG_OK with r->pass false; errors (no device, compile failure) are statuses. */
lg_status lg_check_kernel(lg_ctx *ctx, const lg_spec *s, const struct lg_check_opts *o,
			  struct lg_check_result *r);

struct lg_bench_opts {
	int64_t tokens;
	int warmup;  /* launches before timing (default 10) */
	int reps;    /* timed repetitions, L2 flushed before each (default 50) */
};

struct lg_bench_result {
	double median_us;  /* median GPU time of one launch */
	double min_us;
	double bytes;      /* minimum bytes moved (family->bytes) */
	double gbps;       /* bytes / median */
	double copy_gbps;  /* device-to-device copy ceiling measured in this run */
	double pct_copy;   /* (bytes / copy_gbps) / median */
};

/* Time one kernel by TARGETS.md's method (L2 flushed, median, events). */
lg_status lg_bench_kernel(lg_ctx *ctx, const lg_spec *s, const struct lg_bench_opts *o,
			  struct lg_bench_result *r);
/* Measure the device-to-device copy ceiling (bytes read + written per s). */
lg_status lg_bench_copy_ceiling(double *gbps);

#endif
