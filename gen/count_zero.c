/*
 * count_zero.c - family "count_zero" (KERNELS.md K11): the number of
 * elements equal to zero (+0.0 and -0.0: the bits but the sign are 0) in a
 * list of tensors (bf16, fp32, or both with "mixed"), as a 0-d int64.
 * Counted on the bits: exact, and bf16 is read as bf16 (linghe reads every
 * tensor as fp32).
 *
 * Strategy: list_common.h (a table of 16 KiB items made once per list, a
 * fixed grid of warps taking items round-robin with 16-byte loads, one u64
 * count a CTA in the workspace, a one-CTA final sum): one read of every
 * element, no atomics, no host work per call.
 */
#include "family.h"

#include "list_common.h"

enum { K_LIST, NKEYS = K_LIST + LG_LIST_KEYS };

static const struct lg_key keys[NKEYS] = {
	LG_KEYS_LIST(K_LIST),
};

enum { A_LIST, A_OUT, A_WS, NARGS };
static const struct lg_arg args[NARGS] = {
	[A_LIST] = {"list", LG_ARG_LIST, LG_ELEM_U8, LG_LIST_TABLE_SHAPE, 16,
		    "the tensor list's table (lg_tensor_list_table)"},
	[A_OUT] = {"out", LG_ARG_OUT, LG_ELEM_I64, "1", 8, "the count (a 0-d tensor)"},
	[A_WS] = {"workspace", LG_ARG_WORKSPACE, LG_ELEM_U8, NULL, 16, NULL},
};

static lg_status validate(const struct lg_spec *s, const char *where)
{
	return lg_list_validate(s, where, K_LIST);
}

static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	return lg_list_plan(s, t, p, K_LIST);
}

static void emit_ops(lg_buf *b, const struct lg_spec *s, bool f32, bool bf16)
{
	(void)s;
	lg_comment(b, "The accumulator: a count. A zero has every bit but the sign clear.");
	lg_line(b, "typedef u64 lg_acc;");
	lg_line(b, "%s", "");
	if (f32) {
		lg_line(b, "static __device__ __forceinline__ lg_acc lg_fold_f32(lg_acc a, u32 w)");
		lg_line(b, "{ return a + ((w & 0x7fffffffu) == 0u); }");
	}
	if (bf16) {
		lg_line(b, "static __device__ __forceinline__ lg_acc lg_fold_bf16(lg_acc a, u32 h)");
		lg_line(b, "{ return a + ((h & 0x7fffu) == 0u); }");
	}
	lg_line(b, "static __device__ __forceinline__ lg_acc lg_combine(lg_acc a, lg_acc b) { return a + b; }");
	lg_line(b, "static __device__ __forceinline__ void lg_write(u64 out, lg_acc a) { *(i64 *)out = (i64)a; }");
}

static void emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	(void)t;
	struct lg_list_ops ops = {"0ull", emit_ops, "zeros, a CTA"};
	lg_list_emit(b, s, p, &ops);
}

static size_t workspace(const struct lg_plan *p)
{
	return lg_list_workspace(p, 8);
}

static int candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max)
{
	return lg_list_candidates(s, t, out, max, K_LIST);
}

const struct lg_family lg_family_count_zero = {
	.op = "count_zero",
	.summary = "the number of zeros (+0 and -0) in a list of tensors, int64 (K11)",
	.passes = 1u << LG_PASS_FORWARD,
	.dtypes = (1u << LG_DTYPE_BF16) | (1u << LG_DTYPE_FP32),
	.nkeys = NKEYS,
	.keys = keys,
	.sig = {[LG_PASS_FORWARD] = {1, lg_list_sizes, NARGS, args}},
	.validate = validate,
	.plan = plan,
	.emit = emit,
	.geometry = lg_list_geometry,
	.workspace = workspace,
	.candidates = candidates,
};
