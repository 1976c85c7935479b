/*
 * cuda.h - the CUDA driver API, opened at run time with dlopen.
 *
 * lingen links against no CUDA library: libcuda.so.1 is opened on first use
 * and its entry points resolved into one table, so a machine without a GPU
 * can generate and compile, and a machine with only the driver can load
 * cubins. The types come from the toolkit's <cuda.h> (headers only).
 */
#ifndef LG_RUNTIME_CUDA_H
#define LG_RUNTIME_CUDA_H

#include <cuda.h>

#include "lingen.h"

/* X(name, symbol, params): every driver function lingen uses. The table
 * member is `name`, resolved from `symbol` (the versioned export). */
#define LG_CU_FUNCS(X)                                                                   \
	X(cuInit, "cuInit", (unsigned int))                                                \
	X(cuDriverGetVersion, "cuDriverGetVersion", (int *))                               \
	X(cuGetErrorString, "cuGetErrorString", (CUresult, const char **))                 \
	X(cuGetErrorName, "cuGetErrorName", (CUresult, const char **))                     \
	X(cuDeviceGetCount, "cuDeviceGetCount", (int *))                                   \
	X(cuDeviceGet, "cuDeviceGet", (CUdevice *, int))                                   \
	X(cuDeviceGetName, "cuDeviceGetName", (char *, int, CUdevice))                     \
	X(cuDeviceGetAttribute, "cuDeviceGetAttribute", (int *, CUdevice_attribute, CUdevice)) \
	X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (CUcontext *, CUdevice))   \
	X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", (CUdevice))           \
	X(cuCtxGetCurrent, "cuCtxGetCurrent", (CUcontext *))                               \
	X(cuCtxSetCurrent, "cuCtxSetCurrent", (CUcontext))                                 \
	X(cuCtxGetDevice, "cuCtxGetDevice", (CUdevice *))                                  \
	X(cuCtxSynchronize, "cuCtxSynchronize", (void))                                    \
	X(cuLibraryLoadData, "cuLibraryLoadData",                                          \
	  (CUlibrary *, const void *, CUjit_option *, void **, unsigned int,                \
	   CUlibraryOption *, void **, unsigned int))                                       \
	X(cuLibraryUnload, "cuLibraryUnload", (CUlibrary))                                 \
	X(cuLibraryGetKernel, "cuLibraryGetKernel", (CUkernel *, CUlibrary, const char *)) \
	X(cuKernelSetAttribute, "cuKernelSetAttribute",                                    \
	  (CUfunction_attribute, int, CUkernel, CUdevice))                                  \
	X(cuKernelGetFunction, "cuKernelGetFunction", (CUfunction *, CUkernel))            \
	X(cuOccupancyMaxActiveClusters, "cuOccupancyMaxActiveClusters",                    \
	  (int *, CUfunction, const CUlaunchConfig *))                                      \
	X(cuOccupancyMaxActiveBlocksPerMultiprocessor,                                      \
	  "cuOccupancyMaxActiveBlocksPerMultiprocessor", (int *, CUfunction, int, size_t))  \
	X(cuLaunchKernelEx, "cuLaunchKernelEx",                                            \
	  (const CUlaunchConfig *, CUfunction, void **, void **))                           \
	X(cuLaunchKernel, "cuLaunchKernel",                                                \
	  (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,          \
	   unsigned, CUstream, void **, void **))                                           \
	X(cuMemAlloc, "cuMemAlloc_v2", (CUdeviceptr *, size_t))                            \
	X(cuMemFree, "cuMemFree_v2", (CUdeviceptr))                                        \
	X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", (CUdeviceptr, const void *, size_t))            \
	X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", (void *, CUdeviceptr, size_t))                  \
	X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", (CUdeviceptr, CUdeviceptr, size_t, CUstream)) \
	X(cuMemsetD8, "cuMemsetD8_v2", (CUdeviceptr, unsigned char, size_t))               \
	X(cuMemsetD8Async, "cuMemsetD8Async", (CUdeviceptr, unsigned char, size_t, CUstream)) \
	X(cuStreamCreate, "cuStreamCreate", (CUstream *, unsigned int))                    \
	X(cuStreamDestroy, "cuStreamDestroy_v2", (CUstream))                               \
	X(cuStreamSynchronize, "cuStreamSynchronize", (CUstream))                          \
	X(cuEventCreate, "cuEventCreate", (CUevent *, unsigned int))                       \
	X(cuEventDestroy, "cuEventDestroy_v2", (CUevent))                                  \
	X(cuEventRecord, "cuEventRecord", (CUevent, CUstream))                             \
	X(cuEventSynchronize, "cuEventSynchronize", (CUevent))                             \
	X(cuEventElapsedTime, "cuEventElapsedTime_v2", (float *, CUevent, CUevent))            \
	X(cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled",                                \
	  (CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,      \
	   const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave, \
	   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill))

struct lg_cu {
	void *lib;
#define LG_CU_MEMBER(name, sym, params) CUresult(*name) params;
	LG_CU_FUNCS(LG_CU_MEMBER)
#undef LG_CU_MEMBER
};

/* The driver table, opened once per process (thread-safe). Fails with
 * LG_ERR_DRIVER and a clear message when libcuda.so.1 is missing, and with
 * LG_ERR_NO_DEVICE when cuInit finds no device. */
lg_status lg_cu_get(const struct lg_cu **out);

/* Turn a failed driver call into LG_ERR_CUDA with "what: CUDA_ERROR_X (text)". */
lg_status lg_cu_fail(CUresult r, const char *what);

/* Call a driver function through the table, failing with its name. */
#define LG_CU_TRY(cu, call, args)                                                  \
	do {                                                                       \
		CUresult lg_r_ = (cu)->call args;                                  \
		if (lg_r_ != CUDA_SUCCESS)                                         \
			return lg_cu_fail(lg_r_, #call);                           \
	} while (0)

/* Make sure a CUDA context is current on this thread: the current one, else
 * the primary context of device `ordinal` (retained for the process). */
lg_status lg_cu_ensure_context(int ordinal);

/* Arch name of the device of the current context (or device 0), e.g.
 * "sm_90a" for compute capability 9.0 ("a" for 9.0 and 10.x, whose
 * arch-specific features lingen uses), written into name[16]. */
lg_status lg_cu_device_arch(char name[16]);

#endif
