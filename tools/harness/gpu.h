/*
 * gpu.h - device buffers of one reference case, for check and bench:
 * allocate, upload inputs, poison outputs, download.
 */
#ifndef LG_HARNESS_GPU_H
#define LG_HARNESS_GPU_H

#include <stdbool.h>
#include <stdio.h>

#include "context.h"
#include "cuda.h"
#include "harness.h"
#include "ref.h"

struct lg_gpu_case {
	const struct lg_cu *cu;
	struct lg_ref_case ref;      /* host buffers: inputs and reference outputs */
	void *got[LG_MAX_ARGS];      /* host copies of the GPU outputs */
	CUdeviceptr dev[LG_MAX_ARGS];
	lg_dptr ptrs[LG_MAX_ARGS];   /* what the launch gets (0 for unused) */
	CUdeviceptr data;            /* a list family's tensors (ref.data) */
};

/* The buffers of kernel k (spec s) at `tokens` (every run-time size set
 * to it, clamped to its range: lg_sizes_at), as its family declares them:
 * allocate host and device buffers, fill inputs (seed), upload. Needs a
 * current CUDA context. */
lg_status lg_gpu_case_init(struct lg_gpu_case *g, const struct lg_spec *s, int64_t tokens,
			   const int64_t *sizes, uint64_t seed, const lg_kernel *k);
/* Launch k on the case's sizes and pointers. */
lg_status lg_gpu_case_launch(const struct lg_gpu_case *g, const lg_kernel *k, lg_stream stream);
/* Fill every output with 0xff bytes (NaN in every float format). */
lg_status lg_gpu_case_poison(struct lg_gpu_case *g);
/* Copy the outputs back into got[]. */
lg_status lg_gpu_case_download(struct lg_gpu_case *g);
void lg_gpu_case_free(struct lg_gpu_case *g);
/* After a launch and lg_gpu_case_download: run spec s's CPU reference on
 * the case's inputs and compare every output it writes (but those with
 * skip[i] set; skip may be NULL) with the GPU's, printing up to
 * max_report mismatches an output to out: r->pass and the first 8
 * measures (r->seed untouched). */
void lg_gpu_case_check(struct lg_gpu_case *g, const struct lg_spec *s, const bool *skip, int max_report, FILE *out,
		       struct lg_check_result *r);

#endif
