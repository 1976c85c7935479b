/*
 * rmsnorm.c - family "rmsnorm" (KERNELS.md K1, plain): RMSNorm forward
 * (bf16 out + reciprocal RMS) and backward (dx bf16, dw fp32).
 * STUB: filled in by the K1 work.
 */
#include "family.h"

#include "error.h"

static const struct lg_arg fwd_args[] = {
	{"x", LG_ARG_IN, "[tokens, hidden] bf16"},
	{"w", LG_ARG_IN, "[hidden] bf16"},
	{"y", LG_ARG_OUT, "[tokens, hidden] bf16"},
	{"rms", LG_ARG_OPT_IN, "[tokens] fp32 reciprocal RMS (optional output)"},
};

static const struct lg_arg bwd_args[] = {
	{"dy", LG_ARG_IN, "[tokens, hidden] bf16"},
	{"x", LG_ARG_IN, "[tokens, hidden] bf16"},
	{"w", LG_ARG_IN, "[hidden] bf16"},
	{"rms", LG_ARG_OPT_IN, "[tokens] fp32 reciprocal RMS (optional: recomputed)"},
	{"dx", LG_ARG_OUT, "[tokens, hidden] bf16"},
	{"dw", LG_ARG_OUT, "[hidden] fp32"},
	{"workspace", LG_ARG_WORKSPACE, "lg_kernel_workspace_size() bytes"},
};

static lg_status validate(const struct lg_spec *s, const char *where)
{
	int64_t h = s->dim[LG_DIM_HIDDEN];
	if (h < 128 || h > 16384 || h % 128 != 0)
		return lg_spec_error(where, "hidden: found %lld, allowed: a multiple of 128 from 128 to 16384",
				     (long long)h);
	return LG_OK;
}

const struct lg_family lg_family_rmsnorm = {
	.op = "rmsnorm",
	.summary = "RMSNorm forward (bf16 + rms) and backward (dx bf16, dw fp32) (K1)",
	.passes = (1u << LG_PASS_FORWARD) | (1u << LG_PASS_BACKWARD),
	.dtypes = 1u << LG_DTYPE_BF16,
	.dims_required = 1u << LG_DIM_HIDDEN,
	.has_eps = true,
	.quant = 0,
	.tile_keys = (1u << LG_TILE_ROWS) | (1u << LG_TILE_THREADS),
	.validate = validate,
	.nargs = {[LG_PASS_FORWARD] = 4, [LG_PASS_BACKWARD] = 7},
	.args = {[LG_PASS_FORWARD] = fwd_args, [LG_PASS_BACKWARD] = bwd_args},
};
