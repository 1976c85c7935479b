/*
 * compile_all.h - compile every kernel of some spec files for every arch of
 * a list, in N threads with a progress line per cubin: the shared engine of
 * `lingen build` (a bundle folder) and `lingen aot` (C source to link).
 *
 * Each worker thread has its own context per arch; cubins go through the
 * memory and disk caches, then NVRTC. Needs no GPU.
 */
#ifndef LG_COMPILE_ALL_H
#define LG_COMPILE_ALL_H

#include <stddef.h>
#include <stdint.h>

#include "blob.h"
#include "cli.h"
#include "family.h"

/* One kernel x arch. */
struct lg_compiled {
	const struct lg_cli_kernel *k;
	int arch;          /* index into lg_compile_set.archs */
	void *cubin;       /* malloc'd */
	size_t size;
	uint64_t checksum; /* XXH3-64 of the cubin */
	struct lg_plan plan; /* what the cubin was generated with */
	double ms;
	char *error;       /* NULL on success */
	int code;          /* exit status of a failure */
	/* Not compiled: the arch its family is declared for (lg_family
	 * target_only) when that is not this arch; NULL: compiled. */
	const char *skipped;
	/* With lg_compile_set.relocatable: the relocatable cubin of the same
	 * source (lg_ctx_relocatable) in rdc_own, for the linked module; none
	 * (rdc NULL) when the plan rewrites SASS (plan.sass_ffma) or the
	 * compile failed (rdc_error, malloc'd: why). */
	struct lg_blob rdc_own;
	const void *rdc;
	size_t rdc_size;
	char *rdc_error;
};

/* Every kernel x arch, kernel-major: c[i] is kernel i / narch, arch
 * i % narch. */
struct lg_compile_set {
	char **archs; /* borrowed from the caller */
	int narch;
	struct lg_compiled *c;
	size_t n;
	size_t nskipped; /* of n, the jobs skipped (c[i].skipped) */
	bool relocatable; /* each job also compiles its relocatable cubin */
};

/* Compile every kernel of specs for every arch in up to `jobs` threads,
 * but a kernel x arch its family does not run on (lg_family target_only):
 * that job is skipped (c[i].skipped) when the kernel came from a model
 * config, or when another of the archs runs it; a spec-file kernel that no
 * arch runs fails as its plan() refuses it.
 * printing "[i/n] <entry> <arch> (ms)" on stderr as each finishes. Stops
 * early at the first failure; failures are printed (the first in full,
 * NVRTC log included). Returns the exit status. Free out with
 * lg_compile_set_free either way. */
int lg_compile_all(const struct lg_cli_specs *specs, char **archs, int narch, int jobs, bool relocatable,
		   struct lg_compile_set *out);
void lg_compile_set_free(struct lg_compile_set *s);

/* The run() of a compile-all command (build, aot): its options are -o DIR,
 * --arch, -j N at indexes LG_CA_OUT, LG_CA_ARCH, LG_CA_JOBS of cmd->opts.
 * Checks them, loads the specs, creates DIR, compiles every kernel for
 * every arch, calls write(dir, set), and prints "<done> N cubins for K
 * archs into DIR in T s". relocatable: the jobs also compile their
 * relocatable cubins when nvJitLink can be loaded to link them (else a line
 * on stderr says why not). Returns the exit status. */
enum { LG_CA_OUT, LG_CA_ARCH, LG_CA_JOBS };
int lg_compile_cmd(const struct lg_cli_cmd *cmd, const struct lg_cli_args *a, bool relocatable,
		   int (*write)(const char *dir, const struct lg_compile_set *s), const char *done);

/* "skipped for ARCH: N kernels of FAMILY (the family runs on T only)" on
 * stderr, one line per arch and family; nothing when none was skipped. */
void lg_compile_print_skipped(const struct lg_compile_set *s);

/* The NVRTC version as "13.0" ("unknown" without NVRTC) into out[32]. */
void lg_compile_nvrtc_version(char out[32]);

#endif
