/*
 * cuda.c - the CUDA driver API opened at run time (cuda.h).
 *
 * libcuda.so.1 is dlopen'd once per process and every entry point of
 * LG_CU_FUNCS resolved by its versioned symbol name into one table. The
 * outcome, success or failure, is decided once and kept: a later call on a
 * machine without a driver costs a load of a flag and re-sets the same
 * message. Only the driver's own library is opened, never the toolkit stub.
 */
#include "cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "log.h"

#define LG_CU_MAX_DEVICES 64

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static struct lg_cu cu_table;
static lg_status cu_status;
static char cu_msg[1024];

/* Primary contexts retained by lg_cu_ensure_context, one per device. */
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext primary[LG_CU_MAX_DEVICES];

/* The driver release that introduced a symbol lingen resolves. */
static const char *symbol_needs(const char *sym)
{
	if (strcmp(sym, "cuEventElapsedTime_v2") == 0)
		return "12.8";
	return "12.0";
}

static void result_text(const struct lg_cu *cu, CUresult r, const char **name, const char **text)
{
	*name = NULL;
	*text = NULL;
	if (cu->cuGetErrorName)
		cu->cuGetErrorName(r, name);
	if (cu->cuGetErrorString)
		cu->cuGetErrorString(r, text);
	if (!*name)
		*name = "CUDA_ERROR_UNKNOWN";
	if (!*text)
		*text = "no description";
}

static lg_status cu_failed(lg_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Record the process-wide failure once; lg_cu_get replays it. */
static lg_status cu_failed(lg_status st, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cu_msg, sizeof cu_msg, fmt, ap);
	va_end(ap);
	cu_status = st;
	return st;
}

static lg_status cu_resolve(void *lib)
{
	void *p;
#define LG_CU_RESOLVE(name, sym, params)                                                        \
	p = dlsym(lib, sym);                                                                    \
	if (!p)                                                                                 \
		return cu_failed(LG_ERR_DRIVER,                                                 \
				 "the CUDA driver (libcuda.so.1) lacks %s, which lingen needs; "       \
				 "a driver for CUDA %s or newer is required",                          \
				 sym, symbol_needs(sym));                                              \
	memcpy(&cu_table.name, &p, sizeof p);
	LG_CU_FUNCS(LG_CU_RESOLVE)
#undef LG_CU_RESOLVE
	return LG_OK;
}

static void cu_open(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		const char *why = dlerror();
		cu_failed(LG_ERR_DRIVER,
			  "cannot load the CUDA driver (libcuda.so.1): %s; a GPU machine with the "
			  "NVIDIA driver is needed to load and launch kernels (generation and "
			  "compilation work without one)",
			  why ? why : "not found");
		return;
	}
	if (cu_resolve(lib) != LG_OK)
		goto fail;
	cu_table.lib = lib;

	CUresult r = cu_table.cuInit(0);
	if (r == CUDA_ERROR_NO_DEVICE) {
		cu_failed(LG_ERR_NO_DEVICE, "no CUDA device: cuInit found none (pass an arch, "
					    "e.g. --arch sm_90a, to generate and compile without one)");
		goto fail_keep;
	}
	if (r != CUDA_SUCCESS) {
		const char *name, *text;
		result_text(&cu_table, r, &name, &text);
		cu_failed(LG_ERR_DRIVER, "cannot initialise the CUDA driver: cuInit: %s (%s)", name,
			  text);
		goto fail_keep;
	}
	int n = 0;
	r = cu_table.cuDeviceGetCount(&n);
	if (r != CUDA_SUCCESS || n <= 0) {
		cu_failed(LG_ERR_NO_DEVICE, "no CUDA device: the driver reports %d devices", n);
		goto fail_keep;
	}
	int version = 0;
	cu_table.cuDriverGetVersion(&version);
	lg_log("cuda: driver %d.%d, %d device%s", version / 1000, version % 1000 / 10, n,
	       n == 1 ? "" : "s");
	cu_status = LG_OK;
	return;

fail_keep:
	/* The library resolved fine but is unusable: keep nothing around. */
	cu_table.lib = NULL;
fail:
	memset(&cu_table, 0, sizeof cu_table);
	dlclose(lib);
}

lg_status lg_cu_get(const struct lg_cu **out)
{
	pthread_once(&cu_once, cu_open);
	if (cu_status != LG_OK) {
		if (out)
			*out = NULL;
		return lg_fail(cu_status, "%s", cu_msg);
	}
	if (out)
		*out = &cu_table;
	return LG_OK;
}

lg_status lg_cu_fail(CUresult r, const char *what)
{
	const char *name, *text;
	result_text(&cu_table, r, &name, &text);
	return lg_fail(LG_ERR_CUDA, "%s: %s (%s)", what, name, text);
}

lg_status lg_cu_ensure_context(int ordinal)
{
	const struct lg_cu *cu;
	lg_status st = lg_cu_get(&cu);
	if (st != LG_OK)
		return st;
	CUcontext cur = NULL;
	LG_CU_TRY(cu, cuCtxGetCurrent, (&cur));
	if (cur)
		return LG_OK;
	if (ordinal < 0 || ordinal >= LG_CU_MAX_DEVICES)
		return lg_fail(LG_ERR_INVALID_ARG, "device ordinal %d is out of range", ordinal);

	pthread_mutex_lock(&ctx_lock);
	CUresult r = CUDA_SUCCESS;
	const char *what = "cuDeviceGet";
	if (!primary[ordinal]) {
		CUdevice dev;
		r = cu->cuDeviceGet(&dev, ordinal);
		if (r == CUDA_SUCCESS) {
			what = "cuDevicePrimaryCtxRetain";
			r = cu->cuDevicePrimaryCtxRetain(&primary[ordinal], dev);
		}
	}
	CUcontext ctx = primary[ordinal];
	pthread_mutex_unlock(&ctx_lock);
	if (r != CUDA_SUCCESS)
		return lg_cu_fail(r, what);
	LG_CU_TRY(cu, cuCtxSetCurrent, (ctx));
	return LG_OK;
}

lg_status lg_cu_device_arch(char name[16])
{
	const struct lg_cu *cu;
	lg_status st = lg_cu_get(&cu);
	if (st != LG_OK)
		return st;
	CUcontext cur = NULL;
	CUdevice dev;
	LG_CU_TRY(cu, cuCtxGetCurrent, (&cur));
	if (cur)
		LG_CU_TRY(cu, cuCtxGetDevice, (&dev));
	else
		LG_CU_TRY(cu, cuDeviceGet, (&dev, 0));
	int major = 0, minor = 0;
	LG_CU_TRY(cu, cuDeviceGetAttribute,
		  (&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
	LG_CU_TRY(cu, cuDeviceGetAttribute,
		  (&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
	snprintf(name, 16, "sm_%d%d%s", major, minor, major == 9 || major == 10 ? "a" : "");
	return LG_OK;
}
