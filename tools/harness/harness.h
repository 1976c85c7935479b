/*
 * harness.h - run generated kernels on the GPU against their plain-C
 * references (`lingen check`) and time them (`lingen bench`).
 *
 * Each family's reference (gen/ref/<family>_ref.c) fills its inputs with fresh
 * random values, runs the CPU reference, and compares the GPU outputs with
 * the measures of docs/kernels.md §4. Outputs are poisoned before each launch so
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
	const int64_t *sizes; /* every run-time size of the pass (NULL: lg_sizes_at of tokens) */
	uint64_t seed;   /* input seed (lg_check_fresh_seed for a new one); printed by the caller */
	int max_report;  /* mismatches printed per output (default 5) */
	bool no_optional; /* pass 0 for optional arguments (e.g. rms: recomputed / not written) */
	FILE *out;       /* where the report goes (NULL: stdout) */
};

/* A fresh seed for random inputs, from the clock (below 2^63, so --seed and
 * LINGEN_SEED take it back). */
uint64_t lg_check_fresh_seed(void);
/* $LINGEN_SEED: *set false when unset; LG_ERR_INVALID_ARG, with a message,
 * when it is not an integer from 0 to 2^63 - 1. */
lg_status lg_check_env_seed(uint64_t *seed, bool *set);

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
	/* the _ULP kinds (ulp_bound >= 0; -1 for the others) */
	int ulp_bound;       /* every element's bound (0: bit-equal) */
	uint64_t slack;      /* elements the reference allows more than ulp_bound (its slack) */
	uint64_t at_bound;   /* elements exactly at their (non-zero) bound */
	uint64_t max_ulps;   /* largest distance in ulps of a written element (capped at 2^32) */
};

struct lg_check_result {
	bool pass;
	uint64_t seed; /* the inputs' seed */
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

/* Time one kernel by docs/performance.md's method (L2 flushed, median, events). */
lg_status lg_bench_kernel(lg_ctx *ctx, const lg_spec *s, const struct lg_bench_opts *o,
			  struct lg_bench_result *r);
/* Measure the device-to-device copy ceiling (bytes read + written per s). */
lg_status lg_bench_copy_ceiling(double *gbps);
/* Measure the DRAM read ceiling (a read-only stream over 1 GiB, bytes read per s). */
lg_status lg_bench_read_ceiling(double *gbps);
/* Median (and min, when not NULL) of reps timings of fn(arg), the L2
 * flushed before each, CUDA events around it. */
lg_status lg_bench_time_median(int reps, lg_status (*fn)(void *), void *arg, double *median_us,
				double *min_us);

/* ----------------------------------------------------- the JIT itself */

/* `lingen bench --jit`: docs/performance.md's "The JIT itself", measured in this
 * process. Compile and cache-read parts need NVRTC but no GPU; the load and
 * launch parts run only when a CUDA device is present. */
struct lg_jit_opts {
	const char *arch;  /* arch when there is no GPU (with one: the device's) */
	int64_t tokens;    /* launch part: token count (default 8192) */
	int launches;      /* launch part: launches per timed loop (default: 0.2 s of GPU time, 256-20000) */
	int loops;         /* launch part: timed loops, median taken (default 5) */
	int reps;          /* cache part: fresh contexts, median taken (default 20) */
	int jobs;          /* whole-step part: compile threads (default: online CPUs) */
};

/* One kernel's numbers; times of a part that did not run are negative. */
struct lg_jit_kernel {
	const lg_spec *spec;
	double gen_ms;      /* lg_generate_for */
	double compile_ms;  /* lg_nvrtc_compile (kernel 0: includes NVRTC start-up) */
	size_t cubin_bytes;
	double read_us;     /* lg_ctx_cubin, fresh context, disk hit: read + checksum */
	double load_us;     /* lg_kernel_get with the cubin in memory: load + entries */
	double get_us;      /* lg_kernel_get, fresh context, disk hit: all of it */
};

/* Host cost of one launch of the first kernel, per launch (median of loops). */
struct lg_jit_launch {
	bool ran;
	const lg_spec *spec;
	int64_t tokens;
	int entries;        /* cuLaunchKernel calls per launch */
	int launches, loops, batch;
	double lg_us;       /* lg_kernel_launch, batched (queue never full) */
	double raw_us;      /* the same cuLaunchKernel calls, batched */
	double lg_b2b_us;   /* lg_kernel_launch, all launches back to back */
	double raw_b2b_us;  /* raw, all back to back */
	double gpu_us;      /* GPU time per launch (events over a loop) */
};

struct lg_jit_result {
	char arch[16];
	int nvrtc_major, nvrtc_minor;
	bool gpu;               /* load and launch parts ran */
	char no_gpu[512];       /* why not, when !gpu */
	double first_compile_ms;  /* kernel 0, the first compile of the process */
	double compile_median_ms; /* median over kernels 1..n-1 (n = 1: a recompile) */
	double compile_p90_ms;    /* 90th percentile over the same */
	double step_serial_ms;    /* every kernel generated and compiled, one after another
				   * (the first compile: NVRTC start-up included) */
	double step_parallel_ms;  /* the same again in `jobs` threads, wall time (NVRTC loaded) */
	int jobs;
	double gen_median_ms;
	double read_median_us, load_median_us, get_median_us; /* medians over kernels */
	size_t n;
	struct lg_jit_kernel *k; /* n entries; free with lg_jit_result_free */
	struct lg_jit_launch launch;
};

/* Measure the JIT on specs[0..n-1]. Must run before anything else in the
 * process loads NVRTC, or the first compile misses NVRTC's start-up. */
lg_status lg_jit_bench(const lg_spec *const *specs, size_t n, const struct lg_jit_opts *o,
		       struct lg_jit_result *r);
void lg_jit_result_free(struct lg_jit_result *r);

/* `lingen bench --load`: from a fresh process, the time to the driver
 * (dlopen + cuInit), to a current primary context, and then lingen's part:
 * a context (on `bundle` when not NULL, else the JIT with its disk cache)
 * and lg_kernel_get of every spec. */
struct lg_load_result {
	bool gpu; /* false: no driver or device, cubins read but not loaded */
	size_t kernels;
	double driver_ms, context_ms, lingen_ms, per_kernel_us;
	double create_us;             /* lg_ctx_create (a bundle: its manifest read) */
	double kernel_median_us, kernel_p90_us; /* one kernel's lg_kernel_get (or lg_ctx_cubin) */
};
/* The q-quantile (0..1, nearest rank) of v[0..n-1], which it sorts; -1 when n is 0. */
double lg_quantile(double *v, size_t n, double q);

lg_status lg_bench_load(const lg_spec *const *specs, size_t n, const char *bundle,
			struct lg_load_result *r);

#endif
