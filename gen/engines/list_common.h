/*
 * list_common.h - what the families that reduce over a tensor list (K10
 * grad_norm, K11 count_zero) share: their keys after their own, the
 * run-time size "items", the plan, the launch geometry, the workspace and
 * the emitted kernels. A family only says what its accumulator is: the
 * device functions that fold one element into it, combine two of them and
 * write the result (struct lg_list_ops).
 *
 * Strategy (the same for both):
 *   - The table (lingen.h, runtime/list.c) cuts every tensor into items of
 *     at most 16 KiB, so work is split evenly whatever the list is: 10 000
 *     tiny tensors or a few huge ones.
 *   - Entry 0 is a fixed grid of ctas = 132 x tile.per_sm CTAs (one wave
 *     on an H200) of tile.threads threads; warp w of the grid takes items
 *     w, w + W, w + 2W, ... in whole rounds (W warps in all: neighbouring
 *     warps read neighbouring items), loading the row of its next item
 *     before the elements of this one; the R < W items of the last,
 *     partial round are cut into min(8, ceil(W / R)) parts each, taken the
 *     same way, so the tail of a big list and a small list alike keep most
 *     warps busy. A warp reads its item with 16-byte loads,
 *     tile.unroll of them a lane in flight, after a scalar head up to the
 *     first 16-byte boundary and before a scalar tail: any start address
 *     and any length. Each lane keeps its own accumulator (fp64 sums, fp32
 *     max, u64 counts); the warp's lanes are combined by a butterfly, the
 *     CTA's warps in warp order, into one workspace slot per CTA.
 *   - Entry 1, one CTA, combines the ctas slots in a fixed order and
 *     writes the 0-d result. On sm_90+ it is launched early
 *     (programmatic dependent launch) and waits for entry 0's slots.
 * The grid does not depend on the device, so the order of every addition
 * is fixed by the spec and the list: the same bits on every call, every
 * GPU. Nothing is atomic; the workspace needs no initialisation.
 */
#ifndef LG_LIST_COMMON_H
#define LG_LIST_COMMON_H

#include "family.h"

/* The keys every list family declares after its own, at indices k ..
 * k + LG_LIST_KEYS - 1: "mixed", "tile", "tile.threads", "tile.per_sm",
 * "tile.unroll". */
#define LG_LIST_KEYS 5
extern const char *const lg_list_mixed_words[2];
extern const int64_t lg_list_threads_ok[];
extern const int64_t lg_list_unroll_ok[];
#define LG_KEYS_LIST(k)                                                                            \
	[(k)] = {.path = "mixed", .type = LG_KEY_BOOL, .has_def = true, .def = 0,                    \
		 .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 30, .words = lg_list_mixed_words,         \
		 .doc = "the list may hold bf16 and fp32 tensors (false: dtype only)"},              \
	LG_KEYS_LIST_TILE((k) + 1)
/* The grid's tile keys alone (LG_LIST_TILE_KEYS of them: "tile",
 * "tile.threads", "tile.per_sm", "tile.unroll"), for a family over a list
 * that is not a reduction (adamw): lg_list_plan_grid, lg_list_validate and
 * lg_list_candidates find them by name. */
#define LG_LIST_TILE_KEYS 4
#define LG_KEYS_LIST_TILE(k)                                                                       \
	[(k)] = LG_KEY_TILE_OBJ,                                                                     \
	[(k) + 1] = LG_KEY_TILE("threads", "n", 128, 1024, lg_list_threads_ok, "threads per CTA"),  \
	[(k) + 2] = LG_KEY_TILE("per_sm", "c", 1, 8, NULL,                                           \
				"CTAs an SM: the grid is 132 x per_sm CTAs, whatever the list"),    \
	[(k) + 3] = LG_KEY_TILE("unroll", "u", 1, 8, lg_list_unroll_ok,                              \
				"16-byte loads a lane keeps in flight")

/* The one run-time size of a list pass: "items" (the table's rows). */
extern const struct lg_size lg_list_sizes[1];
/* The shape of the table argument (LG_ARG_LIST, elem U8). */
#define LG_LIST_TABLE_SHAPE "items, 16"

/* What a family's reduction is. Its emit_ops writes, for the spec and the
 * element types its kernels read (f32, bf16: the folds of those only):
 *   typedef ... lg_acc;                     the accumulator
 *   lg_acc lg_fold_f32(lg_acc a, u32 w)    a with the fp32 element w folded in
 *   lg_acc lg_fold_bf16(lg_acc a, u32 h)   a with the bf16 element h (low half) folded in
 *   lg_acc lg_combine(lg_acc a, lg_acc b)  two accumulators as one
 *   void lg_write(u64 out, lg_acc a)        the result from the final accumulator
 * (static __device__ __forceinline__), and `zero` is the accumulator of no
 * element. A fold and a combine must be what the reference's order of
 * operations allows (sums: any order, fp64; max and counts: exact). */
struct lg_list_ops {
	const char *zero;
	void (*emit_ops)(lg_buf *b, const struct lg_spec *s, bool f32, bool bf16);
	const char *what; /* what entry 0 computes, for its section line */
};

/* Plan values of a list family. */
enum { LG_LIST_P_THREADS, LG_LIST_P_PER_SM, LG_LIST_P_UNROLL, LG_LIST_P_MIXED, LG_LIST_P_CTAS, LG_LIST_VALUES };

/* validate(), plan(), geometry(), workspace() (8 bytes a CTA) and
 * candidates() of a list family (its list keys found by name). */
lg_status lg_list_validate(const struct lg_spec *s, const char *where);
lg_status lg_list_plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p);
/* The grid part of lg_list_plan: threads, per_sm, unroll, mixed (0 for a
 * family without the key) and ctas into p->v, the tile into p->tile;
 * entries are the caller's. */
void lg_list_plan_grid(const struct lg_spec *s, struct lg_plan *p);
/* The same with a family's own defaults of tile.per_sm and tile.unroll
 * (a family whose lanes hold more in registers: adamw). */
void lg_list_plan_grid_with(const struct lg_spec *s, struct lg_plan *p, int64_t per_sm, int64_t unroll);
void lg_list_geometry(const struct lg_plan *p, int e, const int64_t *sizes, struct lg_launch_dim *d);
size_t lg_list_workspace(const struct lg_plan *p);
int lg_list_candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max);

/* check_list() of a list family: the kernel reads its dtype's tensors, or
 * bf16 and fp32 with "mixed". */
lg_status lg_list_check(const struct lg_spec *s, const char *fn, const char *entry, unsigned elems);

/* The arguments of a list family's pass (list, out, workspace), its out of
 * element type `elem`, and the members of struct lg_family every list
 * family shares (given args[LG_LIST_NARGS] named `args` and its form,
 * forms[1] = LG_LIST_FORM(doc), named `forms`). */
enum { LG_LIST_A_LIST, LG_LIST_A_OUT, LG_LIST_A_WS, LG_LIST_NARGS };
#define LG_LIST_ARGS(elem, align, doc)                                                           \
	{[LG_LIST_A_LIST] = {"list", LG_ARG_LIST, LG_ELEM_U8, LG_LIST_TABLE_SHAPE, 16,           \
			     "the tensor list's table (lg_tensor_list_table)"},                    \
	 [LG_LIST_A_OUT] = {"out", LG_ARG_OUT, (elem), "1", (align), (doc)},                     \
	 [LG_LIST_A_WS] = {"workspace", LG_ARG_WORKSPACE, LG_ELEM_U8, NULL, 16, NULL}}
/* The launcher of a list family, lg_<op>(k, stream, list, out, workspace):
 * its one form, the list giving the table and its rows ("items"). */
#define LG_LIST_FORM(text) {{.name = "", .doc = (text)}}
#define LG_LIST_FAMILY                                                                           \
	.passes = 1u << LG_PASS_FORWARD, .dtypes = (1u << LG_DTYPE_BF16) | (1u << LG_DTYPE_FP32), \
	.sig = {[LG_PASS_FORWARD] = {1, lg_list_sizes, LG_LIST_NARGS, args, NULL, 1, forms}},     \
	.plan = lg_list_plan, .geometry = lg_list_geometry, .workspace = lg_list_workspace,       \
	.candidates = lg_list_candidates, .check_list = lg_list_check

/* Both entry points: the item loop and the partials (entry 0), the final
 * combine (entry 1). The pass's arguments must be list, out, workspace. */
void lg_list_emit(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p, const struct lg_list_ops *ops);

#endif
