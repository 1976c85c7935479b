/*
 * jitlink.h - nvJitLink, opened lazily with dlopen like NVRTC (nvrtc.h):
 * links the relocatable cubins of a bundle's kernels (lg_nvrtc_compile
 * with relocatable set) into one cubin per arch, what a context loads once
 * for all of them (one cuLibraryLoadData instead of one a kernel).
 *
 * Looked up as $LINGEN_NVJITLINK (a path; the only one tried when set), else
 * libnvJitLink.so.13, libnvJitLink.so.12, libnvJitLink.so by the loader's
 * search, then the same names under $CUDA_HOME/lib64 and
 * /usr/local/cuda/lib64. Used by `lingen build` only: a missing nvJitLink
 * leaves a bundle without a linked module, never fails the build.
 */
#ifndef LG_RUNTIME_JITLINK_H
#define LG_RUNTIME_JITLINK_H

#include <stddef.h>

#include "lingen.h"

/* Load nvJitLink if needed: LG_ERR_UNSUPPORTED naming what was tried when
 * it cannot be loaded. */
lg_status lg_jitlink_load(void);

/* Link n relocatable cubins (obj[i], size[i] bytes, named name[i] in
 * messages) for arch into one cubin: *cubin malloc'd (the caller frees),
 * *cubin_size its bytes. LG_ERR_COMPILE with nvJitLink's error log when the
 * link fails (a symbol defined twice, one undefined). */
lg_status lg_jitlink_link(const char *arch, const void *const *obj, const size_t *size, const char *const *name,
			  size_t n, void **cubin, size_t *cubin_size);

#endif
