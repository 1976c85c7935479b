/*
 * zz_temp_stubs.c - TEMPORARY weak stand-ins for the check/bench harness
 * (tools/harness/, not landed yet) so the CLI links. Each fails with
 * LG_ERR_UNSUPPORTED. Delete this file when the harness lands.
 */
#include "error.h"
#include "harness/harness.h"

#define LG_WEAK __attribute__((weak))

LG_WEAK lg_status lg_check_kernel(lg_ctx *ctx, const lg_spec *s, const struct lg_check_opts *o,
				  struct lg_check_result *r)
{
	(void)ctx;
	(void)s;
	(void)o;
	(void)r;
	return lg_fail(LG_ERR_UNSUPPORTED, "the check harness is not built yet");
}

LG_WEAK lg_status lg_bench_kernel(lg_ctx *ctx, const lg_spec *s, const struct lg_bench_opts *o,
				  struct lg_bench_result *r)
{
	(void)ctx;
	(void)s;
	(void)o;
	(void)r;
	return lg_fail(LG_ERR_UNSUPPORTED, "the bench harness is not built yet");
}

LG_WEAK lg_status lg_bench_copy_ceiling(double *gbps)
{
	*gbps = 0;
	return lg_fail(LG_ERR_UNSUPPORTED, "the bench harness is not built yet");
}
