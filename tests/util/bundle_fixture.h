/*
 * bundle_fixture.h - what the bundle tests (test_bundle.c,
 * test_bundle_index.c) share: a bundle of the ling-mini-2.0 norms built by
 * `lingen build` for sm_90a and sm_80 into a temp folder, its cubins read
 * back, contexts on it, and the refusal of a bad bundle checked. Dies on
 * setup failures, as testutil.h's helpers do.
 */
#ifndef LG_BUNDLE_FIXTURE_H
#define LG_BUNDLE_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>

#include "lingen.h"
#include "proc.h"

#define LG_TEST_NORMS LG_SOURCE_DIR "/configs/kernels/ling-mini-2.0-norms.json"

/* Run a program (argv NULL-terminated) with LINGEN_CACHE_DIR=<tmp>/cache,
 * echo its command line and stderr, assert its exit status is want. Free
 * the result with lg_proc_free. */
struct lg_proc lg_test_run_cached(const char *tmp, int want, char **argv);

/* `lingen build <LG_TEST_NORMS> --arch sm_90a,sm_80 -o <tmp>/bundle`, with
 * --link when link: the bundle's folder (malloc'd). */
char *lg_test_build_norms(const char *tmp, bool link);

/* The bytes of the bundle's own file of the cubin of entry x arch
 * (malloc'd; asserted readable). */
char *lg_test_bundle_cubin(const char *bundle, const char *entry, const char *arch, size_t *size);

/* A context on the bundle for arch (cache: its cache folder, NULL for the
 * default), asserted made. */
lg_ctx *lg_test_bundle_ctx(const char *bundle, const char *arch, const char *cache);

/* lg_ctx_create on the bundle folder dir for sm_90a fails with st and a
 * message holding needle. */
void lg_test_expect_bad_bundle(const char *dir, lg_status st, const char *needle);

#endif
