/*
 * list_common.c - the plan, geometry and kernels shared by the families
 * that reduce over a tensor list (list_common.h says the strategy).
 */
#include "list_common.h"

#include <stdio.h>

#include "error.h"

/* SMs of an H200: the grid is one wave of per_sm CTAs each there. A static
 * count, not the device's: the partition of the items over the CTAs, the
 * workspace (a partial a CTA) and the final kernel's fixed-order sum are
 * fixed by the plan, so a norm is the same bits on every device (on
 * another device only the wave's fit changes, not the result). */
#define SMS 132
#define THREADS_DEFAULT 256
#define PER_SM_DEFAULT 4
#define UNROLL_DEFAULT 4
#define FINAL_THREADS 256
#define SPLIT_MAX 8 /* parts an item of the last round is cut into at most */

/* Offsets of the list's tile keys from "tile.threads". */
enum { L_THREADS, L_PER_SM, L_UNROLL };

const char *const lg_list_mixed_words[2] = {"", "mixed"};
const int64_t lg_list_threads_ok[] = {128, 256, 512, 1024, 0};
const int64_t lg_list_unroll_ok[] = {1, 2, 4, 8, 0};

const struct lg_size lg_list_sizes[1] = {
	{"items", "I", 0, INT32_MAX, "rows of the tensor list's table (lg_tensor_list_items)", 0, 0},
};

static int64_t tile_or(const struct lg_spec *s, int key, int64_t def)
{
	return lg_spec_has(s, key) ? lg_spec_int(s, key) : def;
}

/* The index of a list family's first tile key ("tile.threads"). */
static int first_key(const struct lg_spec *s)
{
	int k = lg_family_key(s->fam, "tile.threads");
	LG_ASSERT(k >= 0);
	return k;
}

static bool is_mixed(const struct lg_spec *s)
{
	int k = lg_family_key(s->fam, "mixed");
	return k >= 0 && lg_spec_int(s, k) != 0;
}

lg_status lg_list_check(const struct lg_spec *s, const char *fn, const char *entry, unsigned elems)
{
	bool mixed = is_mixed(s);
	const unsigned bf16 = 1u << LG_LIST_BF16, fp32 = 1u << LG_LIST_FP32;
	unsigned can = mixed ? bf16 | fp32 : s->dtype == LG_DTYPE_FP32 ? fp32 : bf16;
	if (!(elems & ~can))
		return LG_OK;
	return lg_fail(LG_ERR_INVALID_ARG, "%s: kernel %s reads %s tensors only, the list holds %s%s%s; use a spec "
		       "with dtype of the list or \"mixed\": true", fn, entry,
		       mixed ? "bf16 and fp32" : lg_dtype_names[s->dtype], elems & bf16 ? "bf16" : "",
		       elems == (bf16 | fp32) ? " and " : "", elems & fp32 ? "fp32" : "");
}

lg_status lg_list_validate(const struct lg_spec *s, const char *where)
{
	int k = first_key(s);
	int64_t threads = tile_or(s, k + L_THREADS, THREADS_DEFAULT), per_sm = tile_or(s, k + L_PER_SM, PER_SM_DEFAULT);
	if (threads * per_sm > 2048)
		return lg_spec_error(where,
				     "tile.per_sm: found %lld with %lld threads a CTA, allowed: at most %lld (2048 "
				     "threads an SM)",
				     (long long)per_sm, (long long)threads, (long long)(2048 / threads));
	return LG_OK;
}

void lg_list_plan_grid(const struct lg_spec *s, struct lg_plan *p)
{
	lg_list_plan_grid_with(s, p, PER_SM_DEFAULT, UNROLL_DEFAULT);
}

void lg_list_plan_grid_with(const struct lg_spec *s, struct lg_plan *p, int64_t per_sm, int64_t unroll)
{
	int k = first_key(s);
	p->v[LG_LIST_P_THREADS] = p->tile[k + L_THREADS] = tile_or(s, k + L_THREADS, THREADS_DEFAULT);
	p->v[LG_LIST_P_PER_SM] = p->tile[k + L_PER_SM] = tile_or(s, k + L_PER_SM, per_sm);
	p->v[LG_LIST_P_UNROLL] = p->tile[k + L_UNROLL] = tile_or(s, k + L_UNROLL, unroll);
	p->v[LG_LIST_P_MIXED] = is_mixed(s);
	p->v[LG_LIST_P_CTAS] = SMS * p->v[LG_LIST_P_PER_SM];
}

lg_status lg_list_plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	lg_list_plan_grid(s, p);
	p->nentries = 2;
	snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
	snprintf(p->entry[1], sizeof p->entry[1], "%s_final", s->entry);
	p->early[1] = t->sm >= 90; /* the final combine waits for the partials on the device */
	return LG_OK;
}

void lg_list_geometry(const struct lg_plan *p, int e, const int64_t *sizes, struct lg_launch_dim *d)
{
	(void)sizes; /* the grid is fixed: also at 0 items (the result is then written as zero) */
	d->grid[1] = d->grid[2] = d->block[1] = d->block[2] = 1;
	d->smem = 0;
	d->grid[0] = e == 0 ? (unsigned)p->v[LG_LIST_P_CTAS] : 1;
	d->block[0] = e == 0 ? (unsigned)p->v[LG_LIST_P_THREADS] : FINAL_THREADS;
}

size_t lg_list_workspace(const struct lg_plan *p)
{
	return (size_t)p->v[LG_LIST_P_CTAS] * 8; /* an fp64 sum, an fp32 max or a u64 count a CTA */
}

/* Tile variants: 256 and 512 threads, 2 to 8 CTAs an SM (whole SMs of
 * threads up to 2048), 4 and 8 loads in flight. */
int lg_list_candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max)
{
	int k = first_key(s);
	static const int64_t threads[] = {256, 512}, per_sm[] = {2, 4, 8}, unroll[] = {4, 8};
	int n = 0;
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 3; j++)
			for (int u = 0; u < 2; u++) {
				struct lg_tile_choice c = lg_tile1(k + L_THREADS, threads[i]);
				c.v[k + L_PER_SM] = per_sm[j];
				c.v[k + L_UNROLL] = unroll[u];
				c.set |= (1ull << (k + L_PER_SM)) | (1ull << (k + L_UNROLL));
				n = lg_candidate_add(s, t, out, n, max, c);
			}
	return n;
}

/* ------------------------------------------------------------ emission */

/* lg_item_<name>(acc, p, n, lane): one warp folds the n elements at p
 * (elements of `bytes` bytes) into its lanes' accumulators. */
static void emit_item(lg_buf *b, const char *name, int bytes, int unroll)
{
	int per = 16 / bytes; /* elements a 16-byte vector */
	bool bf16 = bytes == 2;
	const char *scalar = bf16 ? "u16" : "u32";
	lg_comment(b, "One item of %s: a scalar head up to the first 16-byte boundary, 16-byte vectors", name);
	lg_comment(b, "(%d loads a lane in flight), a scalar tail. Each lane folds in a fixed order.", unroll);
	lg_line(b, "static __device__ __forceinline__ lg_acc lg_item_%s(lg_acc acc, u64 p, u32 n, u32 lane)", name);
	lg_open(b, "{");
	lg_line(b, "const u32 lead = (u32)((16u - (u32)(p & 15u)) & 15u) / %du;", bytes);
	lg_line(b, "const u32 head = lead < n ? lead : n;");
	lg_line(b, "if (lane < head)");
	lg_line(b, "\tacc = lg_fold_%s(acc, (u32)((const %s *)p)[lane]);", name, scalar);
	lg_line(b, "const char *q = (const char *)(p + (u64)head * %du);", bytes);
	lg_line(b, "const u32 nv = (n - head) / %du;", per);
	lg_line(b, "u32 v = lane;");
	lg_open(b, "for (; v + %du < nv; v += %du) {", 32u * (unsigned)(unroll - 1), 32u * (unsigned)unroll);
	lg_line(b, "lg_u32x4 x[%d];", unroll);
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int u = 0; u < %d; u++) x[u] = lg_ld16(q + (u64)(v + 32u * u) * 16u);", unroll);
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int u = 0; u < %d; u++) acc = lg_fold16_%s(acc, x[u]);", unroll, name);
	lg_close(b);
	lg_line(b, "for (; v < nv; v += 32u) acc = lg_fold16_%s(acc, lg_ld16(q + (u64)v * 16u));", name);
	lg_line(b, "const u32 done = head + nv * %du;", per);
	lg_line(b, "if (lane < n - done)");
	lg_line(b, "\tacc = lg_fold_%s(acc, (u32)((const %s *)p)[done + lane]);", name, scalar);
	lg_line(b, "return acc;");
	lg_close(b);
}

/* lg_fold16_<name>: the elements of one 16-byte vector, in address order. */
static void emit_fold16(lg_buf *b, const char *name, bool bf16)
{
	lg_line(b, "static __device__ __forceinline__ lg_acc lg_fold16_%s(lg_acc a, lg_u32x4 x)", name);
	lg_open(b, "{");
	if (bf16) {
		lg_line(b, "const u32 w[4] = {x.x, x.y, x.z, x.w};");
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int i = 0; i < 4; i++) a = lg_fold_bf16(lg_fold_bf16(a, w[i] & 0xffffu), w[i] >> 16);");
	} else {
		lg_line(b, "a = lg_fold_f32(a, x.x);");
		lg_line(b, "a = lg_fold_f32(a, x.y);");
		lg_line(b, "a = lg_fold_f32(a, x.z);");
		lg_line(b, "a = lg_fold_f32(a, x.w);");
	}
	lg_line(b, "return a;");
	lg_close(b);
}

/* The butterfly over a warp's lanes (a fixed order: deterministic). */
static void emit_warp_combine(lg_buf *b)
{
	lg_line(b, "static __device__ __forceinline__ lg_acc lg_warp_combine(lg_acc a)");
	lg_open(b, "{");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int m = 16; m >= 1; m >>= 1) a = lg_combine(a, __shfl_xor_sync(0xffffffffu, a, m));");
	lg_line(b, "return a;");
	lg_close(b);
}

/* The CTA's warps combined in warp order: thread 0 ends with the total. */
static void emit_cta_combine(lg_buf *b, int warps)
{
	lg_line(b, "acc = lg_warp_combine(acc);");
	lg_line(b, "__shared__ lg_acc part_of[%d];", warps);
	lg_line(b, "if ((threadIdx.x & 31u) == 0) part_of[threadIdx.x >> 5] = acc;");
	lg_line(b, "__syncthreads();");
	lg_line(b, "if (threadIdx.x != 0) return;");
	lg_line(b, "acc = part_of[0];");
	lg_line(b, "for (int w = 1; w < %d; w++) acc = lg_combine(acc, part_of[w]);", warps);
}

/* lg_item_row(acc, row, start, n, lane): elements start .. start + n of
 * the item of a table row, by its element type. */
static void emit_item_row(lg_buf *b, const struct lg_spec *s, bool mixed)
{
	lg_line(b, "static __device__ __forceinline__ lg_acc lg_item_row(lg_acc acc, lg_u32x4 row, u32 start, u32 n,");
	lg_line(b, "\t\t\t\t\t\t\t    u32 lane)");
	lg_open(b, "{");
	lg_line(b, "const u64 p = (u64)row.x | ((u64)row.y << 32);");
	if (mixed) {
		lg_line(b, "return row.w == %du ? lg_item_f32(acc, p + (u64)start * 4u, n, lane)", LG_LIST_FP32);
		lg_line(b, "\t\t\t : lg_item_bf16(acc, p + (u64)start * 2u, n, lane);");
	} else {
		bool f32 = s->dtype == LG_DTYPE_FP32;
		lg_line(b, "return lg_item_%s(acc, p + (u64)start * %du, n, lane);", f32 ? "f32" : "bf16", f32 ? 4 : 2);
	}
	lg_close(b);
}

static void emit_partials(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p,
			  const struct lg_list_ops *ops)
{
	int threads = (int)p->v[LG_LIST_P_THREADS], warps = threads / 32, per_sm = (int)p->v[LG_LIST_P_PER_SM];
	long long ctas = (long long)p->v[LG_LIST_P_CTAS], w = ctas * warps;
	lg_section(b, p->entry[0], ops->what);
	lg_comment(b, "%lld CTAs of %d warps, W = %lld warps. Whole rounds: warp w takes items w, w + W, ...;", ctas,
		   warps, w);
	lg_comment(b, "then the R < W items left are cut into S = min(%d, ceil(W / R)) parts each, taken", SPLIT_MAX);
	lg_comment(b, "the same way, so that the last round keeps most warps busy. A fixed order for a");
	lg_comment(b, "given list; CTA c leaves its total in workspace slot c.");
	lg_emit_signature(b, s, p->entry[0], "__launch_bounds__(%d, %d)", threads, per_sm);
	lg_open(b, "{");
	if (p->early[1]) {
		lg_comment(b, "The final combine may be scheduled; it waits for this grid to finish.");
		lg_line(b, "asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");");
	}
	lg_line(b, "const u32 lane = threadIdx.x & 31u;");
	lg_line(b, "const i64 gw = (i64)blockIdx.x * %d + (threadIdx.x >> 5);", warps);
	lg_line(b, "const i64 full = I / %lld * %lld;", w, w);
	lg_line(b, "lg_acc acc = %s;", ops->zero);
	lg_comment(b, "row: an item's address, element count and type (lingen.h); the next one is");
	lg_comment(b, "loaded before this one's elements, so no item waits for its row.");
	lg_line(b, "lg_u32x4 row = {0u, 0u, 0u, 0u};");
	lg_line(b, "if (gw < full) row = lg_ld16((const char *)list + gw * 16);");
	lg_open(b, "for (i64 it = gw; it < full; it += %lld) {", w);
	lg_line(b, "const lg_u32x4 cur = row;");
	lg_line(b, "if (it + %lld < full) row = lg_ld16((const char *)list + (it + %lld) * 16);", w, w);
	lg_line(b, "acc = lg_item_row(acc, cur, 0u, cur.z, lane);");
	lg_close(b);
	lg_comment(b, "The last round: part k of S of item full + j / S is elements [k c, k c + c) of it,");
	lg_comment(b, "c = its count / S rounded up to 8 elements.");
	lg_line(b, "const i64 left = I - full;");
	lg_line(b, "const i64 want = left ? (%lld + left - 1) / left : 1;", w);
	lg_line(b, "const i64 S = want < %d ? want : %d;", SPLIT_MAX, SPLIT_MAX);
	lg_open(b, "for (i64 j = gw; j < left * S; j += %lld) {", w);
	lg_line(b, "const lg_u32x4 cur = lg_ld16((const char *)list + (full + j / S) * 16);");
	lg_line(b, "const u32 c = ((cur.z + (u32)S - 1u) / (u32)S + 7u) & ~7u;");
	lg_line(b, "const u32 k0 = (u32)(j %% S) * c, start = k0 < cur.z ? k0 : cur.z;");
	lg_line(b, "acc = lg_item_row(acc, cur, start, cur.z - start < c ? cur.z - start : c, lane);");
	lg_close(b);
	emit_cta_combine(b, warps);
	lg_line(b, "((lg_acc *)ws)[blockIdx.x] = acc;");
	lg_close(b);
}

static void emit_final(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p, const struct lg_list_ops *ops)
{
	int64_t ctas = p->v[LG_LIST_P_CTAS];
	lg_section(b, p->entry[1], "the result from the CTAs' totals");
	lg_comment(b, "Thread t combines slots t, t + %d, ... in order, then the warps and the CTA in order.",
		   FINAL_THREADS);
	lg_emit_signature(b, s, p->entry[1], "__launch_bounds__(%d)", FINAL_THREADS);
	lg_open(b, "{");
	if (p->early[1]) {
		lg_comment(b, "Wait until every CTA of the partials kernel has written its slot.");
		lg_line(b, "asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");");
	}
	lg_line(b, "lg_acc acc = %s;", ops->zero);
	lg_line(b, "for (int i = threadIdx.x; i < %lld; i += %d) acc = lg_combine(acc, ((const lg_acc *)ws)[i]);",
		(long long)ctas, FINAL_THREADS);
	emit_cta_combine(b, FINAL_THREADS / 32);
	lg_line(b, "lg_write(out, acc);");
	lg_close(b);
}

void lg_list_emit(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p, const struct lg_list_ops *ops)
{
	bool mixed = p->v[LG_LIST_P_MIXED] != 0;
	int unroll = (int)p->v[LG_LIST_P_UNROLL];
	bool f32 = mixed || s->dtype == LG_DTYPE_FP32, bf16 = mixed || s->dtype == LG_DTYPE_BF16;
	lg_section(b, "the reduction of this spec", NULL);
	ops->emit_ops(b, s, f32, bf16);
	lg_line(b, "%s", "");
	emit_warp_combine(b);
	if (f32) {
		lg_line(b, "%s", "");
		emit_fold16(b, "f32", false);
		lg_line(b, "%s", "");
		emit_item(b, "f32", 4, unroll);
	}
	if (bf16) {
		lg_line(b, "%s", "");
		emit_fold16(b, "bf16", true);
		lg_line(b, "%s", "");
		emit_item(b, "bf16", 2, unroll);
	}
	lg_line(b, "%s", "");
	emit_item_row(b, s, mixed);
	emit_partials(b, s, p, ops);
	emit_final(b, s, p, ops);
}
