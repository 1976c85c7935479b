/*
 * rmsnorm_quant.c - family "rmsnorm_quant" (KERNELS.md K1): RMSNorm fused
 * with blockwise FP8 quantisation, forward. STUB: filled in by the K1 work.
 */
#include "family.h"

#include "error.h"

static const struct lg_arg fwd_args[] = {
	{"x", LG_ARG_IN, "[tokens, hidden] bf16"},
	{"w", LG_ARG_IN, "[hidden] bf16"},
	{"q", LG_ARG_OUT, "[tokens, hidden] e4m3 (rowwise)"},
	{"s", LG_ARG_OUT, "[hidden/128, tokens] fp32 (rowwise scales)"},
	{"rms", LG_ARG_OPT_IN, "[tokens] fp32 reciprocal RMS (optional output)"},
	{"qt", LG_ARG_OUT, "[hidden, tokens] e4m3 (columnwise, transposed)"},
	{"st", LG_ARG_OUT, "[ceil(tokens/128), hidden] fp32 (columnwise scales)"},
};

static lg_status validate(const struct lg_spec *s, const char *where)
{
	int64_t h = s->dim[LG_DIM_HIDDEN];
	if (h < 128 || h > 16384 || h % 128 != 0)
		return lg_spec_error(where, "hidden: found %lld, allowed: a multiple of 128 from 128 to 16384",
				     (long long)h);
	if (s->quant.block != 128)
		return lg_spec_error(where, "quant.block: found %d, allowed: 128", s->quant.block);
	return LG_OK;
}

const struct lg_family lg_family_rmsnorm_quant = {
	.op = "rmsnorm_quant",
	.summary = "RMSNorm + 1x128 / 128x1 blockwise FP8 quantisation (K1)",
	.passes = 1u << LG_PASS_FORWARD,
	.dtypes = 1u << LG_DTYPE_BF16,
	.dims_required = 1u << LG_DIM_HIDDEN,
	.has_eps = true,
	.quant = 1,
	.tile_keys = (1u << LG_TILE_COLS) | (1u << LG_TILE_THREADS) | (1u << LG_TILE_CLUSTER),
	.validate = validate,
	.nargs = {[LG_PASS_FORWARD] = 7},
	.args = {[LG_PASS_FORWARD] = fwd_args},
};
