/*
 * grad_norm.c - family "grad_norm" (docs/kernels.md K10): the global norm of a
 * list of tensors (bf16, fp32, or both with "mixed"), as a 0-d fp32:
 *   ord "2":   sqrt(sum x^2), or sum x^2 with "norm": false;
 *   ord "1":   sum |x|;
 *   ord "inf": max |x| (NaN when any element is NaN).
 * Squares and absolute values are exact in fp64 and every sum is fp64 (per
 * lane, then per warp, CTA and grid in a fixed order), rounded once to
 * fp32 at the end; the maximum is exact.
 *
 * Strategy: list_common.h (a table of 16 KiB items made once per list, a
 * fixed grid of warps taking items round-robin with 16-byte loads, one
 * fp64 partial a CTA in the workspace, a one-CTA final combine): one read
 * of every element, no atomics, no host work per call.
 */
#include "family.h"

#include "error.h"
#include "list_common.h"

enum { K_ORD, K_NORM, K_LIST, NKEYS = K_LIST + LG_LIST_KEYS };
enum { ORD_2, ORD_1, ORD_INF, ORD_COUNT };
static const char *const ord_values[ORD_COUNT] = {"2", "1", "inf"};
static const char *const ord_words[ORD_COUNT] = {"l2", "l1", "linf"};
static const char *const norm_words[2] = {"sumsq", "norm"};

static const struct lg_key keys[NKEYS] = {
	[K_ORD] = {.path = "ord", .type = LG_KEY_ENUM, .values = ord_values, .nvalues = ORD_COUNT,
		   .has_def = true, .def = ORD_2, .naming = LG_NAME_ALWAYS, .rank = 20, .words = ord_words,
		   .doc = "2: sqrt(sum x^2), 1: sum |x|, inf: max |x|"},
	[K_NORM] = {.path = "norm", .type = LG_KEY_BOOL, .has_def = true, .def = 1,
		    .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 21, .words = norm_words,
		    .doc = "ord 2: the square root (false: the sum of squares)"},
	LG_KEYS_LIST(K_LIST),
};

static const struct lg_arg args[LG_LIST_NARGS] = LG_LIST_ARGS(LG_ELEM_FP32, 4, "the norm (a 0-d tensor)");

static lg_status validate(const struct lg_spec *s, const char *where)
{
	if (!lg_spec_int(s, K_NORM) && lg_spec_int(s, K_ORD) != ORD_2)
		return lg_spec_error(where, "norm: found false with ord \"%s\", allowed: false only with ord \"2\"",
				     ord_values[lg_spec_int(s, K_ORD)]);
	return lg_list_validate(s, where);
}

static void emit_ops(lg_buf *b, const struct lg_spec *s, bool f32, bool bf16)
{
	const bool want[2] = {f32, bf16};
	int ord = (int)lg_spec_int(s, K_ORD);
	const char *const what[ORD_COUNT] = {"squares", "absolute values", "absolute values"};
	lg_comment(b, "The accumulator: %s of %s; every fp32 and bf16 value is exact in it.",
		   ord == ORD_INF ? "the fp32 maximum" : "an fp64 sum", what[ord]);
	lg_line(b, "typedef %s lg_acc;", ord == ORD_INF ? "float" : "double");
	lg_line(b, "%s", "");
	const char *const src[2][2] = {{"f32", "lg_u2f(w)"}, {"bf16", "lg_u2f(w << 16)"}};
	for (int i = 0; i < 2; i++) {
		if (!want[i])
			continue;
		lg_line(b, "static __device__ __forceinline__ lg_acc lg_fold_%s(lg_acc a, u32 w)", src[i][0]);
		lg_open(b, "{");
		if (ord == ORD_INF) {
			lg_line(b, "const float v = fabsf(%s);", src[i][1]);
			lg_line(b, "return v > a || v != v ? v : a; // NaN wins");
		} else {
			lg_line(b, "const double v = (double)%s;", src[i][1]);
			lg_line(b, "return a + %s;", ord == ORD_2 ? "v * v" : "fabs(v)");
		}
		lg_close(b);
		lg_line(b, "%s", "");
	}
	lg_line(b, "static __device__ __forceinline__ lg_acc lg_combine(lg_acc a, lg_acc b)");
	lg_open(b, "{");
	lg_line(b, ord == ORD_INF ? "return b > a || b != b ? b : a;" : "return a + b;");
	lg_close(b);
	lg_line(b, "%s", "");
	lg_line(b, "static __device__ __forceinline__ void lg_write(u64 out, lg_acc a)");
	lg_open(b, "{");
	bool root = ord == ORD_2 && lg_spec_int(s, K_NORM);
	lg_line(b, "*(float *)out = (float)%s;", root ? "sqrt(a)" : "a");
	lg_close(b);
}

static void emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	(void)t;
	static const char *const what[ORD_COUNT] = {"sum of squares, a CTA", "sum of |x|, a CTA", "max |x|, a CTA"};
	struct lg_list_ops ops = {lg_spec_int(s, K_ORD) == ORD_INF ? "0.0f" : "0.0", emit_ops,
				  what[lg_spec_int(s, K_ORD)]};
	lg_list_emit(b, s, p, &ops);
}

/* What a launch computes: the comment of its typed launcher (lingen_ops.h). */
static const char doc_forward[] =
	"K10: grad norm over a list (op \"grad_norm\", pass \"forward\"): out, a 0-d\n"
	"  fp32, = (sum |x|^2)^(1/2) (ord \"2\"; sum x^2 with \"norm\": false), sum |x|\n"
	"  (ord \"1\") or max |x| (ord \"inf\", NaN if any is NaN), over every element\n"
	"  of every tensor, accumulated in fp64 in a fixed order: the same list\n"
	"  gives the same bits on every call. The kernel's dtype must be the\n"
	"  list's only element type, unless its spec has \"mixed\": true.\n"
	"  workspace: lg_kernel_workspace_size(k) bytes.";
static const struct lg_form forms[1] = LG_LIST_FORM(doc_forward);

const struct lg_family lg_family_grad_norm = {
	.op = "grad_norm",
	.summary = "the L2, L1 or max norm of a list of tensors, fp64 sums, deterministic (K10)",
	.nkeys = NKEYS,
	.keys = keys,
	.validate = validate,
	.emit = emit,
	LG_LIST_FAMILY,
};
