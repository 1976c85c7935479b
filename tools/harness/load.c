/*
 * load.c - `lingen bench --load`: how long a new process takes to have every
 * kernel of a spec file (or model) loaded, from a warm disk cache or from a
 * deployment bundle. Stages: the driver (dlopen + cuInit), the primary
 * context, then lingen's part (context, and lg_kernel_get of each kernel:
 * read, checksum, cuLibraryLoadData). docs/performance.md's goal: cuInit + 5 ms.
 * Without a GPU (arch from $LINGEN_ARCH, else sm_90a) the cubins are only
 * read (lg_ctx_cubin): lingen's part up to the driver.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "env.h"
#include "error.h"
#include "harness.h"
#include "log.h"

lg_status lg_bench_load(const lg_spec *const *specs, size_t n, const char *bundle,
			struct lg_load_result *r)
{
	memset(r, 0, sizeof *r);
	double t0 = lg_now();
	const struct lg_cu *cu;
	lg_status st = lg_cu_get(&cu);
	r->gpu = st == LG_OK;
	if (st != LG_OK && st != LG_ERR_DRIVER && st != LG_ERR_NO_DEVICE)
		return st;
	double t1 = lg_now();
	st = r->gpu ? lg_cu_ensure_context(0) : LG_OK;
	if (st != LG_OK)
		return st;
	double t2 = lg_now();
	lg_ctx *ctx = NULL;
	const char *arch = r->gpu ? NULL : lg_env_get(LG_ENV_ARCH) ? lg_env_get(LG_ENV_ARCH) : "sm_90a";
	lg_ctx_opts o = {.arch = arch, .bundle = bundle};
	double *each = calloc(n ? n : 1, sizeof *each);
	st = each ? lg_ctx_create(&o, &ctx) : lg_fail(LG_ERR_NO_MEMORY, "out of memory");
	double tc = lg_now();
	for (size_t i = 0; st == LG_OK && i < n; i++) {
		lg_kernel *k;
		const void *cubin;
		size_t size;
		double ti = lg_now();
		st = r->gpu ? lg_kernel_get(ctx, specs[i], &k) : lg_ctx_cubin(ctx, specs[i], &cubin, &size);
		each[i] = (lg_now() - ti) * 1e6;
	}
	double t3 = lg_now();
	lg_ctx_destroy(ctx);
	if (st == LG_OK) {
		r->create_us = (tc - t2) * 1e6;
		r->kernel_median_us = lg_quantile(each, n, 0.5);
		r->kernel_p90_us = lg_quantile(each, n, 0.9);
	}
	free(each);
	if (st != LG_OK)
		return st;
	r->kernels = n;
	r->driver_ms = (t1 - t0) * 1e3;
	r->context_ms = (t2 - t1) * 1e3;
	r->lingen_ms = (t3 - t2) * 1e3;
	r->per_kernel_us = n ? (t3 - t2) * 1e6 / (double)n : 0;
	return LG_OK;
}
