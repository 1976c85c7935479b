/*
 * launch.c - the hot path: launching a loaded kernel on the caller's stream.
 * No hashing, no file access, no allocation: argument checks, the launch
 * geometry from the plan (integer arithmetic), cuLaunchKernel per entry.
 */
#include <stdarg.h>

#include "context.h"
#include "error.h"

lg_status lg_kernel_launch(const lg_kernel *k, lg_stream stream, int64_t tokens, const lg_dptr *ptrs,
			   int nptrs)
{
	if (!k || (!ptrs && nptrs))
		return lg_fail(LG_ERR_INVALID_ARG, "lg_kernel_launch: kernel and pointers must not be NULL");
	const struct lg_plan *p = &k->plan;
	if (nptrs != k->nargs)
		return lg_fail(LG_ERR_INVALID_ARG, "%s: %d pointers given, the kernel takes %d", p->entry[0],
			       nptrs, k->nargs);
	if (tokens < 0 || tokens > (int64_t)65535 * 128)
		return lg_fail(LG_ERR_INVALID_ARG, "%s: tokens = %lld, allowed: 0 to %lld", p->entry[0],
			       (long long)tokens, (long long)65535 * 128);
	if (tokens == 0)
		return LG_OK;
	void *params[LG_MAX_ARGS + 2];
	int64_t part = 0;
	for (int i = 0; i < nptrs; i++) {
		if (p->used[i] && !ptrs[i])
			return lg_fail(LG_ERR_INVALID_ARG, "%s: pointer %d must not be 0", p->entry[0], i);
		if (ptrs[i] & 15)
			return lg_fail(LG_ERR_INVALID_ARG, "%s: pointer %d (0x%llx) is not 16-byte aligned",
				       p->entry[0], i, ptrs[i]);
		params[i] = (void *)&ptrs[i];
	}
	params[nptrs] = (void *)&tokens;
	params[nptrs + 1] = (void *)&part;
	for (int e = 0; e < p->nentries; e++) {
		struct lg_launch_dim d;
		k->fam->geometry(p, e, tokens, &d);
		part = p->part[e]; /* the driver copies the parameters at the call */
		CUresult r;
		if (p->early[e] && k->early) {
			CUlaunchAttribute at = {.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION};
			at.value.programmaticStreamSerializationAllowed = 1;
			CUlaunchConfig cfg = {.gridDimX = d.grid[0], .gridDimY = d.grid[1], .gridDimZ = d.grid[2],
					      .blockDimX = d.block[0], .blockDimY = d.block[1],
					      .blockDimZ = d.block[2], .sharedMemBytes = d.smem,
					      .hStream = (CUstream)stream, .attrs = &at, .numAttrs = 1};
			r = k->cu->cuLaunchKernelEx(&cfg, (CUfunction)k->fn[e], params, NULL);
		} else {
			r = k->cu->cuLaunchKernel((CUfunction)k->fn[e], d.grid[0], d.grid[1], d.grid[2],
						  d.block[0], d.block[1], d.block[2], d.smem, (CUstream)stream,
						  params, NULL);
		}
		if (r != CUDA_SUCCESS)
			return lg_cu_fail(r, p->entry[e]);
	}
	return LG_OK;
}

static lg_status launch_n(const lg_kernel *k, lg_stream stream, int64_t tokens, int n, ...)
{
	lg_dptr ptrs[LG_MAX_ARGS];
	va_list ap;
	va_start(ap, n);
	for (int i = 0; i < n; i++)
		ptrs[i] = va_arg(ap, lg_dptr);
	va_end(ap);
	return lg_kernel_launch(k, stream, tokens, ptrs, n);
}

lg_status lg_rmsnorm_quant_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr x,
				   lg_dptr w, lg_dptr q, lg_dptr s, lg_dptr rms, lg_dptr qt, lg_dptr st)
{
	return launch_n(k, stream, tokens, 7, x, w, q, s, rms, qt, st);
}

lg_status lg_rmsnorm_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr x,
			     lg_dptr w, lg_dptr y, lg_dptr rms)
{
	return launch_n(k, stream, tokens, 4, x, w, y, rms);
}

lg_status lg_rmsnorm_backward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr dy,
			      lg_dptr x, lg_dptr w, lg_dptr rms, lg_dptr dx, lg_dptr dw,
			      lg_dptr workspace)
{
	return launch_n(k, stream, tokens, 7, dy, x, w, rms, dx, dw, workspace);
}
