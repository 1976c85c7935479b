/*
 * count_zero.c - family "count_zero" (docs/kernels.md K11): the number of
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

static const struct lg_arg args[LG_LIST_NARGS] = LG_LIST_ARGS(LG_ELEM_I64, 8, "the count (a 0-d tensor)");

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

/* What a launch computes: the comment of its typed launcher (lingen_ops.h). */
static const char doc_forward[] =
	"K11: count-zero over a list (op \"count_zero\", pass \"forward\"): out, a\n"
	"  0-d int64, = the number of elements equal to 0 (+0.0 and -0.0).\n"
	"  Element types and workspace as lg_grad_norm.";
static const struct lg_form forms[1] = LG_LIST_FORM(doc_forward);

const struct lg_family lg_family_count_zero = {
	.op = "count_zero",
	.summary = "the number of zeros (+0 and -0) in a list of tensors, int64 (K11)",
	.nkeys = NKEYS,
	.keys = keys,
	.validate = lg_list_validate,
	.emit = emit,
	LG_LIST_FAMILY,
};
