/*
 * names.c - the names of the spec enums (spec.h) in JSON and messages.
 */
#include "spec.h"

const char *const lg_op_names[LG_OP_COUNT] = {
#define LG_OP_NAME(name, NAME) [LG_OP_##NAME] = #name,
	LG_FAMILIES(LG_OP_NAME)
#undef LG_OP_NAME
};
const char *const lg_pass_names[LG_PASS_COUNT] = {
	[LG_PASS_FORWARD] = "forward",
	[LG_PASS_BACKWARD] = "backward",
	[LG_PASS_DGRAD] = "dgrad",
	[LG_PASS_WGRAD] = "wgrad",
};
const char *const lg_pass_abbrevs[LG_PASS_COUNT] = {
	[LG_PASS_FORWARD] = "fwd",
	[LG_PASS_BACKWARD] = "bwd",
	[LG_PASS_DGRAD] = "dgrad",
	[LG_PASS_WGRAD] = "wgrad",
};
const char *const lg_dtype_names[LG_DTYPE_COUNT] = {
	[LG_DTYPE_BF16] = "bf16",
	[LG_DTYPE_FP32] = "fp32",
	[LG_DTYPE_E4M3] = "e4m3",
};
const char *const lg_quant_format_names[LG_QFMT_COUNT] = {
	[LG_QFMT_E4M3] = "e4m3",
};
const char *const lg_quant_output_names[LG_QOUT_COUNT] = {
	[LG_QOUT_ROWWISE] = "rowwise",
	[LG_QOUT_COLUMNWISE] = "columnwise",
	[LG_QOUT_BOTH] = "both",
};
_Static_assert(sizeof lg_op_names / sizeof lg_op_names[0] == LG_OP_COUNT, "one name per op");
