/*
 * nvrtc.h - NVRTC, opened lazily with dlopen on the first compile.
 *
 * Looked up as $LINGEN_NVRTC (a path), else libnvrtc.so.13, libnvrtc.so.12,
 * libnvrtc.so, then the same names under $CUDA_HOME/lib64 and
 * /usr/local/cuda/lib64. A missing NVRTC is LG_ERR_NVRTC with a message
 * naming what was tried; it only matters on a cache miss.
 */
#ifndef LG_RUNTIME_NVRTC_H
#define LG_RUNTIME_NVRTC_H

#include <stdbool.h>
#include <stddef.h>

#include "lingen.h"

/* NVRTC's version (loads NVRTC if needed). */
lg_status lg_nvrtc_version(int *major, int *minor);

/* The SM numbers this NVRTC compiles for (80, 86, 90, ...), at most max
 * into archs; *n their count. */
lg_status lg_nvrtc_archs(int *archs, int max, int *n);

/* Whether NVRTC is loaded in this process, and the file it was loaded from
 * (into path[len]; "" when not loaded or unknown). */
bool lg_nvrtc_loaded(char *path, size_t len);

/* The options lingen passes for an arch to NVRTC major.minor (some options
 * exist from a version on), then the words of LINGEN_NVRTC_OPTIONS,
 * NULL-terminated, in a static table (they are in the cache key). NULL when
 * arch is not one NVRTC takes, or (error set) when LINGEN_NVRTC_OPTIONS is
 * malformed. */
const char *const *lg_nvrtc_options(const char *arch, int major, int minor, int *count);

/* Compile `src` (named `name` in messages) to a cubin for `arch`. On success
 * *cubin is malloc'd (caller frees) and *log (may be NULL) holds warnings.
 * On failure returns LG_ERR_COMPILE with lg_last_error() holding the log,
 * the options and the numbered source. */
lg_status lg_nvrtc_compile(const char *src, const char *name, const char *arch, void **cubin,
			   size_t *size, char **log);

/* The most options lg_nvrtc_options gives (its own and the variable's). */
#define LG_NVRTC_MAX_OPTIONS 11
/* The option lg_nvrtc_compile_relocatable adds to lg_nvrtc_options'. */
#define LG_NVRTC_RDC "-rdc=true"

/* The same compile as relocatable device code (LG_NVRTC_RDC): a cubin for
 * nvJitLink to link with others (jitlink.h), not loadable alone. Errors as
 * lg_nvrtc_compile's; warnings are not returned (the normal compile of the
 * same source has them). */
lg_status lg_nvrtc_compile_relocatable(const char *src, const char *name, const char *arch, void **cubin,
				       size_t *size);

/* Run the front end alone on `src` for `arch`, with its diagnostics of dead
 * code (unused variables, variables set and never used, unused parameters)
 * raised to warnings: *log is NULL when it has none, else the warnings
 * (caller frees). A source that does not compile is LG_ERR_COMPILE as
 * above. test_golden runs it on every generated kernel. */
lg_status lg_nvrtc_lint(const char *src, const char *name, const char *arch, char **log);

/* Compile `src` for `arch` with ptxas's resource report: *log holds, per
 * function, its registers, stack frame and spill bytes as ptxas prints
 * them ("N bytes spill stores"; caller frees). Errors as above. */
lg_status lg_nvrtc_resources(const char *src, const char *name, const char *arch, char **log);

/* For tests: forget a loaded NVRTC and refuse to load one again while
 * `blocked` is set, as if it were absent. */
void lg_nvrtc_block_for_tests(int blocked);

#endif
