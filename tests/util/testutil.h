/*
 * testutil.h - the helpers the cmocka tests share: temp folders, reading and
 * writing files, listing a folder, capturing stderr, counting substrings and
 * checking a cubin. Running the `lingen` program is in proc.h.
 *
 * Tests may die on error (docs/style.md 8): setup failures (no temp folder, an
 * unwritable file, out of memory) print what failed and abort. Reading a
 * file that may legitimately be missing returns NULL for the test to assert.
 */
#ifndef LG_TESTUTIL_H
#define LG_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lingen.h"

/* The exit status of a test program that cannot run here (no GPU): ctest's
 * SKIP_RETURN_CODE for the gpu tests, so they show as skipped, not passed. */
#define LG_TEST_SKIP 77

/* Unless a CUDA driver and device are present (a context can be made
 * current), print "SKIP <test>: <why>" and exit with LG_TEST_SKIP. */
void lg_test_require_gpu(const char *test);

/* For a GPU test's group setup: device 0's context current and a JIT
 * context (default options) in *ctx; 0, or -1 after printing why. */
int lg_test_gpu_ctx(lg_ctx **ctx);

struct CMUnitTest;
/* Run a GPU test's cmocka group with *ctx made by lg_test_gpu_ctx before
 * it and destroyed after it: LG_TEST_RUN_GPU(tests, &ctx) in main. */
int lg_test_run_gpu(const char *name, const struct CMUnitTest *tests, size_t n, lg_ctx **ctx);
#define LG_TEST_RUN_GPU(tests, ctx) lg_test_run_gpu(#tests, tests, sizeof(tests) / sizeof((tests)[0]), ctx)

/* The seed of a test's random inputs: $LINGEN_SEED when set, else a new one
 * from the clock. Prints "<test>: seed: N (replay with LINGEN_SEED=N)". A
 * LINGEN_SEED that is not a number aborts the test. */
uint64_t lg_test_seed(const char *test);

/* The next number of a splitmix64 sequence (state: a seed, then updated). */
uint64_t lg_test_rand(uint64_t *state);

/* Overwrite 1 to 8 random bytes of buf[0..len) with characters that matter
 * to JSON (quotes, brackets, digits, ...) or random bytes, for fuzzing. */
void lg_test_mutate(char *buf, size_t len, uint64_t *state);

/* A new empty folder $TMPDIR/lingen-<tag>-XXXXXX ($TMPDIR defaults to
 * /tmp). The caller frees the path with free() after lg_test_rm_rf(). */
char *lg_test_tmpdir(const char *tag);

/* Remove a file or folder tree, like rm -rf (folders a test made read-only
 * are made writable first); a missing path or NULL is fine. */
void lg_test_rm_rf(const char *path);

/* "<dir>/<name>". The caller frees the result with free(). */
char *lg_test_path(const char *dir, const char *name);

/* The whole file at path, NUL-terminated (*size excludes the NUL; size may
 * be NULL). NULL if it cannot be read. The caller frees the result. */
char *lg_test_read_file(const char *path, size_t *size);

/* Write size bytes to path (created or truncated). */
void lg_test_write_file(const char *path, const void *data, size_t size);

/* Sorted full paths of the regular files in dir whose names end in suffix,
 * as a NULL-terminated array; *count gets their number. NULL if dir cannot
 * be opened. The caller frees the result with lg_test_free_list(). */
char **lg_test_list_dir(const char *dir, const char *suffix, size_t *count);
void lg_test_free_list(char **list);

/* Redirect stderr to a temp file until lg_test_stderr_end, which restores
 * it and returns what was written (the caller frees it). Not nestable. */
void lg_test_stderr_begin(void);
char *lg_test_stderr_end(void);

/* Occurrences of needle in hay (not overlapping). */
int lg_test_count(const char *hay, const char *needle);

/* The cuobjdump to use (PATH, else /usr/local/cuda/bin) into path[len];
 * false when there is none. */
bool lg_test_cuobjdump(char *path, size_t len);
/* `cuobjdump -sass` of the cubin (written to a temp file), its stdout and
 * stderr as a pipe to read; lg_test_sass_close closes it, removes the file
 * and returns cuobjdump's exit status. One at a time. */
FILE *lg_test_sass_open(const char *cuobjdump, const void *cubin, size_t size);
int lg_test_sass_close(FILE *pipe);

/* cmocka assertion: cubin is an ELF image of a plausible size. */
void lg_test_assert_cubin(const void *cubin, size_t size);

#endif
