/*
 * launch.c - the hot path: launching a loaded kernel on the caller's stream.
 * No hashing, no file access, no allocation: the sizes against their
 * declared ranges, the pointers against their roles and alignment, the
 * launch geometry from the plan (integer arithmetic, checked against the
 * hardware's grid limits), cuLaunchKernel per entry with a non-empty grid.
 */
#include <stdint.h>
#include <string.h>

#include "context.h"
#include "error.h"

/* Argument i holds no element at these sizes (an empty tensor's pointer
 * may be 0). Only asked when the pointer is 0: never on the hot path. */
static bool empty_arg(const lg_kernel *k, int i, const int64_t *sizes)
{
	int64_t sz[LG_MAX_SIZES] = {0}, d[8];
	int n = 0;
	for (int j = 0; j < k->nsizes; j++)
		sz[j] = sizes[j];
	if (lg_arg_shape(&k->spec, i, sz, d, &n) != LG_OK)
		return false;
	for (int j = 0; j < n; j++)
		if (d[j] == 0)
			return true;
	return false;
}

/* Tensor map m of a launch (family.h, struct lg_tmap_decl): the argument's
 * pointer and shape at these sizes, rows folded. A null pointer or an
 * empty tensor leaves a zero map, never read. Encoding is host work only
 * (no driver round trip); lg_kernel_run keeps the last maps of each thread. */
lg_status lg_kernel_tmap(const lg_kernel *k, const struct lg_tmap_decl *m, const int64_t *sizes,
			    const lg_dptr *ptrs, CUtensorMap *out)
{
	static const CUtensorMapDataType types[LG_ELEM_COUNT] = {
		[LG_ELEM_BF16] = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, [LG_ELEM_FP32] = CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
		[LG_ELEM_E4M3] = CU_TENSOR_MAP_DATA_TYPE_UINT8,    [LG_ELEM_U8] = CU_TENSOR_MAP_DATA_TYPE_UINT8,
		[LG_ELEM_I32] = CU_TENSOR_MAP_DATA_TYPE_INT32,     [LG_ELEM_I64] = CU_TENSOR_MAP_DATA_TYPE_INT64,
	};
	static const CUtensorMapSwizzle swz[] = {CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_SWIZZLE_32B,
						 CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_SWIZZLE_128B};
	memset(out, 0, sizeof *out);
	int64_t sz[LG_MAX_SIZES] = {0}, d[8];
	int n = 0;
	for (int j = 0; j < k->nsizes; j++)
		sz[j] = sizes[j];
	lg_status st = lg_arg_shape(&k->spec, m->arg, sz, d, &n);
	if (st != LG_OK)
		return st;
	uint64_t rows = 1, cols = n ? (uint64_t)d[n - 1] : 0;
	for (int j = 0; j + 1 < n; j++)
		rows *= (uint64_t)d[j];
	if (!ptrs[m->arg] || !rows || !cols)
		return LG_OK;
	const struct lg_arg *a = &k->sig->args[m->arg];
	enum lg_elem el = lg_arg_elem(&k->spec, a);
	const cuuint64_t dims[2] = {cols, rows}, strides[1] = {cols * (uint64_t)lg_elem_bytes[el]};
	const cuuint32_t box[2] = {m->box[0], m->box[1]}, estr[2] = {1, 1};
	int si = m->swizzle == 128 ? 3 : m->swizzle == 64 ? 2 : m->swizzle == 32 ? 1 : 0;
	CUresult r = k->cu->cuTensorMapEncodeTiled(out, types[el], 2, (void *)(uintptr_t)ptrs[m->arg], dims, strides,
						   box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, swz[si],
						   CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
						   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
	if (r != CUDA_SUCCESS)
		return lg_cu_fail(r, "cuTensorMapEncodeTiled");
	return LG_OK;
}

/* The tensor maps of a thread's last launch, one a slot of the plan's
 * maps: a launch with the same kernel (its id), pointer and sizes reuses
 * the map (the driver copies it at the call) instead of encoding it again.
 * Thread-local: no lock on the hot path. */
struct tmap_slot {
	uint64_t id; /* 0: empty */
	lg_dptr ptr;
	int64_t sizes[LG_MAX_SIZES];
	CUtensorMap map;
};
static _Thread_local struct tmap_slot tmap_cache[LG_MAX_TMAPS];

/* The largest grid the hardware launches. */
static bool grid_ok(const struct lg_launch_dim *d)
{
	return d->grid[0] <= INT32_MAX && d->grid[1] <= 65535 && d->grid[2] <= 65535;
}

lg_status lg_kernel_run(const lg_kernel *k, lg_stream stream, const int64_t *sizes, int nsizes,
			const lg_dptr *ptrs, int nptrs)
{
	if (!k || (!ptrs && nptrs) || (!sizes && nsizes))
		return lg_fail(LG_ERR_INVALID_ARG, "lg_kernel_run: kernel, sizes and pointers must not be NULL");
	const struct lg_plan *p = &k->plan;
	const struct lg_sig *g = k->sig;
	if (nptrs != k->nargs || nsizes != k->nsizes)
		return lg_fail(LG_ERR_INVALID_ARG, "%s: %d pointers and %d sizes given, the kernel takes %d and %d",
			       p->entry[0], nptrs, nsizes, k->nargs, k->nsizes);
	void *params[LG_MAX_ARGS + LG_MAX_SIZES + 1 + LG_MAX_TMAPS];
	int64_t part = 0;
	for (int i = 0; i < nsizes; i++) {
		if (sizes[i] < g->sizes[i].min || sizes[i] > g->sizes[i].max)
			return lg_fail(LG_ERR_INVALID_ARG, "%s: %s = %lld, allowed: %lld to %lld", p->entry[0],
				       g->sizes[i].name, (long long)sizes[i], (long long)g->sizes[i].min,
				       (long long)g->sizes[i].max);
		params[nptrs + i] = (void *)&sizes[i];
	}
	if (k->fam->check_sizes) {
		lg_status st = k->fam->check_sizes(p, sizes);
		if (st != LG_OK)
			return st;
	}
	for (int i = 0; i < nptrs; i++) {
		if (k->need[i] && !ptrs[i] && !empty_arg(k, i, sizes))
			return lg_fail(LG_ERR_INVALID_ARG, "%s: %s (argument %d) must not be 0", p->entry[0],
				       g->args[i].name, i);
		if (ptrs[i] && k->with[i] >= 0 && !ptrs[k->with[i]] && !empty_arg(k, k->with[i], sizes))
			return lg_fail(LG_ERR_INVALID_ARG, "%s: %s (argument %d) needs %s (argument %d), which is 0",
				       p->entry[0], g->args[i].name, i, g->args[k->with[i]].name, k->with[i]);
		if (ptrs[i] % k->align[i])
			return lg_fail(LG_ERR_INVALID_ARG, "%s: %s (argument %d, 0x%llx) is not %u-byte aligned",
				       p->entry[0], g->args[i].name, i, ptrs[i], k->align[i]);
		params[i] = (void *)&ptrs[i];
	}
	params[nptrs + nsizes] = (void *)&part;
	for (int i = 0; i < p->ntmaps; i++) {
		/* this thread's last map of slot i, when it is of the same kernel, pointer and sizes */
		struct tmap_slot *c = &tmap_cache[i];
		lg_dptr ptr = ptrs[p->tmap[i].arg];
		if (c->id != k->id || c->ptr != ptr || memcmp(c->sizes, sizes, (size_t)nsizes * sizeof *sizes) != 0) {
			c->id = 0;
			lg_status st = lg_kernel_tmap(k, &p->tmap[i], sizes, ptrs, &c->map);
			if (st != LG_OK)
				return st;
			c->id = k->id;
			c->ptr = ptr;
			memcpy(c->sizes, sizes, (size_t)nsizes * sizeof *sizes);
		}
		params[nptrs + nsizes + 1 + i] = (void *)&c->map;
	}
	struct lg_launch_dim d[LG_MAX_ENTRIES];
	for (int e = 0; e < p->nentries; e++) {
		k->fam->geometry(p, e, sizes, &d[e]);
		if (!grid_ok(&d[e]))
			return lg_fail(LG_ERR_INVALID_ARG, "%s: sizes beyond this kernel's launch geometry (grid %u x %u x %u)",
				       p->entry[e], d[e].grid[0], d[e].grid[1], d[e].grid[2]);
	}
	for (int e = 0; e < p->nentries; e++) {
		if (!d[e].grid[0] || !d[e].grid[1] || !d[e].grid[2])
			continue; /* nothing to do at these sizes */
		part = p->part[e]; /* the driver copies the parameters at the call */
		CUresult r;
		if (p->early[e] && k->early) {
			CUlaunchAttribute at = {.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION};
			at.value.programmaticStreamSerializationAllowed = 1;
			CUlaunchConfig cfg = {.gridDimX = d[e].grid[0], .gridDimY = d[e].grid[1],
					      .gridDimZ = d[e].grid[2], .blockDimX = d[e].block[0],
					      .blockDimY = d[e].block[1], .blockDimZ = d[e].block[2],
					      .sharedMemBytes = d[e].smem, .hStream = (CUstream)stream,
					      .attrs = &at, .numAttrs = 1};
			r = k->cu->cuLaunchKernelEx(&cfg, (CUfunction)k->fn[e], params, NULL);
		} else {
			r = k->cu->cuLaunchKernel((CUfunction)k->fn[e], d[e].grid[0], d[e].grid[1], d[e].grid[2],
						  d[e].block[0], d[e].block[1], d[e].block[2], d[e].smem,
						  (CUstream)stream, params, NULL);
		}
		if (r != CUDA_SUCCESS)
			return lg_cu_fail(r, p->entry[e]);
	}
	return LG_OK;
}

lg_status lg_kernel_launch(const lg_kernel *k, lg_stream stream, int64_t tokens, const lg_dptr *ptrs,
			   int nptrs)
{
	if (k && k->nsizes != 1)
		return lg_fail(LG_ERR_INVALID_ARG, "%s: the kernel takes %d run-time sizes: use lg_kernel_run",
			       k->plan.entry[0], k->nsizes);
	return lg_kernel_run(k, stream, &tokens, 1, ptrs, nptrs);
}

/* The typed launchers: the kernel must be of their op and pass. */
static lg_status run_typed(const lg_kernel *k, lg_stream stream, enum lg_op op, enum lg_pass pass,
			   const char *fn, const int64_t *sizes, int nsizes, const lg_dptr *ptrs, int n)
{
	if (k && (k->spec.op != op || k->spec.pass != pass))
		return lg_fail(LG_ERR_INVALID_ARG, "%s: kernel %s is op \"%s\", pass \"%s\"; this launcher takes "
			       "op \"%s\", pass \"%s\"", fn, k->plan.entry[0], lg_op_names[k->spec.op],
			       lg_pass_names[k->spec.pass], lg_op_names[op], lg_pass_names[pass]);
	return lg_kernel_run(k, stream, sizes, nsizes, ptrs, n);
}

#define LG_TYPED(op, pass, sizes, ...)                                                              \
	do {                                                                                        \
		const int64_t sz_[] = sizes;                                                        \
		const lg_dptr p_[] = {__VA_ARGS__};                                                 \
		return run_typed(k, stream, op, pass, __func__, sz_, (int)(sizeof sz_ / sizeof *sz_), p_, \
				 (int)(sizeof p_ / sizeof *p_));                                    \
	} while (0)
#define LG_SIZES(...) {__VA_ARGS__}

lg_status lg_rmsnorm_quant_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr x,
				   lg_dptr w, lg_dptr q, lg_dptr s, lg_dptr rms, lg_dptr qt, lg_dptr st)
{
	LG_TYPED(LG_OP_RMSNORM_QUANT, LG_PASS_FORWARD, LG_SIZES(tokens), x, w, q, s, rms, qt, st);
}

lg_status lg_fp8_quant_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr x, lg_dptr q,
			       lg_dptr s, lg_dptr qt, lg_dptr st)
{
	LG_TYPED(LG_OP_FP8_QUANT, LG_PASS_FORWARD, LG_SIZES(tokens), x, q, s, qt, st);
}

lg_status lg_fp8_quant_batched_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, int64_t experts,
				       lg_dptr x, lg_dptr counts, lg_dptr q, lg_dptr s, lg_dptr qt, lg_dptr st)
{
	LG_TYPED(LG_OP_FP8_QUANT_BATCHED, LG_PASS_FORWARD, LG_SIZES(tokens, experts), x, counts, q, s, qt, st);
}

lg_status lg_fp8_quant_weight_forward(const lg_kernel *k, lg_stream stream, int64_t rows, lg_dptr w, lg_dptr q,
				      lg_dptr s)
{
	LG_TYPED(LG_OP_FP8_QUANT_WEIGHT, LG_PASS_FORWARD, LG_SIZES(rows), w, q, s);
}

lg_status lg_rmsnorm_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr x,
			     lg_dptr w, lg_dptr y, lg_dptr rms)
{
	LG_TYPED(LG_OP_RMSNORM, LG_PASS_FORWARD, LG_SIZES(tokens), x, w, y, rms);
}

lg_status lg_rmsnorm_backward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr dy,
			      lg_dptr x, lg_dptr w, lg_dptr rms, lg_dptr dx, lg_dptr dw,
			      lg_dptr workspace)
{
	LG_TYPED(LG_OP_RMSNORM, LG_PASS_BACKWARD, LG_SIZES(tokens), dy, x, w, rms, dx, dw, workspace);
}

lg_status lg_group_rmsnorm_gate_forward(const lg_kernel *k, lg_stream stream, int64_t batch, int64_t seq,
					lg_dptr x, lg_dptr gate, lg_dptr w, lg_dptr y)
{
	LG_TYPED(LG_OP_GROUP_RMSNORM_GATE, LG_PASS_FORWARD, LG_SIZES(batch, seq), x, gate, w, y);
}

lg_status lg_group_rmsnorm_gate_backward(const lg_kernel *k, lg_stream stream, int64_t batch, int64_t seq,
					 lg_dptr dy, lg_dptr x, lg_dptr gate, lg_dptr w, lg_dptr dx,
					 lg_dptr dgate, lg_dptr dw, lg_dptr workspace)
{
	LG_TYPED(LG_OP_GROUP_RMSNORM_GATE, LG_PASS_BACKWARD, LG_SIZES(batch, seq), dy, x, gate, w, dx, dgate,
		 dw, workspace);
}

lg_status lg_swiglu_quant_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr x, lg_dptr q,
				  lg_dptr s, lg_dptr qt, lg_dptr st)
{
	LG_TYPED(LG_OP_SWIGLU_QUANT, LG_PASS_FORWARD, LG_SIZES(tokens), x, q, s, qt, st);
}

lg_status lg_swiglu_quant_backward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr g, lg_dptr x,
				   lg_dptr dxq, lg_dptr dxs, lg_dptr dxqt, lg_dptr dxst, lg_dptr dx)
{
	LG_TYPED(LG_OP_SWIGLU_QUANT, LG_PASS_BACKWARD, LG_SIZES(tokens), g, x, dxq, dxs, dxqt, dxst, dx);
}

lg_status lg_batch_swiglu_quant_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr x,
					lg_dptr prob, lg_dptr counts, lg_dptr q, lg_dptr s, lg_dptr qt, lg_dptr st)
{
	LG_TYPED(LG_OP_BATCH_SWIGLU_QUANT, LG_PASS_FORWARD, LG_SIZES(tokens), x, prob, counts, q, s, qt, st);
}

lg_status lg_batch_swiglu_quant_backward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr g,
					 lg_dptr x, lg_dptr prob, lg_dptr counts, lg_dptr dxq, lg_dptr dxs,
					 lg_dptr dprob, lg_dptr dxqt, lg_dptr dxst, lg_dptr dx)
{
	LG_TYPED(LG_OP_BATCH_SWIGLU_QUANT, LG_PASS_BACKWARD, LG_SIZES(tokens), g, x, prob, counts, dxq, dxs, dprob,
		 dxqt, dxst, dx);
}

lg_status lg_qk_norm_rope_forward(const lg_kernel *k, lg_stream stream, int64_t seq, int64_t batch,
				  lg_dptr qkv, lg_dptr q_weight, lg_dptr k_weight, lg_dptr freqs,
				  lg_dptr cu_seqlens, lg_dptr q, lg_dptr k_out, lg_dptr v)
{
	LG_TYPED(LG_OP_QK_NORM_ROPE, LG_PASS_FORWARD, LG_SIZES(seq, batch), qkv, q_weight, k_weight, freqs,
		 cu_seqlens, q, k_out, v);
}

lg_status lg_qk_norm_rope_backward(const lg_kernel *k, lg_stream stream, int64_t seq, int64_t batch,
				   lg_dptr gq, lg_dptr gk, lg_dptr gv, lg_dptr qkv, lg_dptr q_weight,
				   lg_dptr k_weight, lg_dptr freqs, lg_dptr cu_seqlens, lg_dptr dqkv,
				   lg_dptr dq_weight, lg_dptr dk_weight, lg_dptr workspace)
{
	LG_TYPED(LG_OP_QK_NORM_ROPE, LG_PASS_BACKWARD, LG_SIZES(seq, batch), gq, gk, gv, qkv, q_weight,
		 k_weight, freqs, cu_seqlens, dqkv, dq_weight, dk_weight, workspace);
}

lg_status lg_router_gemm_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr x,
				 lg_dptr w, lg_dptr logits)
{
	LG_TYPED(LG_OP_ROUTER_GEMM, LG_PASS_FORWARD, LG_SIZES(tokens), x, w, logits);
}

lg_status lg_router_gemm_backward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr dy,
				  lg_dptr x, lg_dptr w, lg_dptr dx, lg_dptr dw, lg_dptr workspace)
{
	LG_TYPED(LG_OP_ROUTER_GEMM, LG_PASS_BACKWARD, LG_SIZES(tokens), dy, x, w, dx, dw, workspace);
}

lg_status lg_rmsnorm_router_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr x,
				    lg_dptr w, lg_dptr route_w, lg_dptr y, lg_dptr rms, lg_dptr logits,
				    lg_dptr q, lg_dptr s, lg_dptr qt, lg_dptr st)
{
	LG_TYPED(LG_OP_RMSNORM_ROUTER, LG_PASS_FORWARD, LG_SIZES(tokens), x, w, route_w, y, rms, logits, q, s,
		 qt, st);
}

/* The integer value of spec key `path` of k's family (0 when absent). */
static int64_t key_of(const lg_kernel *k, const char *path)
{
	int i = k ? lg_family_key(k->fam, path) : -1;
	return i >= 0 ? lg_spec_int(&k->spec, i) : 0;
}

/* A launch over a tensor list: the kernel's element types must cover the
 * list's (its dtype, or both with "mixed"); the table and its row count
 * are the launch's list argument and its run-time size "items". */
static lg_status run_list(const lg_kernel *k, lg_stream stream, enum lg_op op, const char *fn,
			  const lg_tensor_list *list, lg_dptr out, lg_dptr workspace)
{
	if (!list)
		return lg_fail(LG_ERR_INVALID_ARG, "%s: list must not be NULL", fn);
	if (k && k->spec.op == op) {
		bool mixed = key_of(k, "mixed") != 0;
		unsigned has = lg_tensor_list_elems(list);
		unsigned can = mixed ? (1u << LG_LIST_BF16) | (1u << LG_LIST_FP32)
				     : 1u << (k->spec.dtype == LG_DTYPE_FP32 ? LG_LIST_FP32 : LG_LIST_BF16);
		if (has & ~can)
			return lg_fail(LG_ERR_INVALID_ARG, "%s: kernel %s reads %s tensors only, the list holds %s%s%s; "
				       "use a spec with dtype of the list or \"mixed\": true", fn, k->plan.entry[0],
				       mixed ? "bf16 and fp32" : lg_dtype_names[k->spec.dtype],
				       has & (1u << LG_LIST_BF16) ? "bf16" : "",
				       has == ((1u << LG_LIST_BF16) | (1u << LG_LIST_FP32)) ? " and " : "",
				       has & (1u << LG_LIST_FP32) ? "fp32" : "");
	}
	const int64_t items = lg_tensor_list_items(list);
	const lg_dptr p[] = {lg_tensor_list_table(list), out, workspace};
	return run_typed(k, stream, op, LG_PASS_FORWARD, fn, &items, 1, p, 3);
}

lg_status lg_grad_norm(const lg_kernel *k, lg_stream stream, const lg_tensor_list *list, lg_dptr out,
		       lg_dptr workspace)
{
	return run_list(k, stream, LG_OP_GRAD_NORM, __func__, list, out, workspace);
}

lg_status lg_count_zero(const lg_kernel *k, lg_stream stream, const lg_tensor_list *list, lg_dptr out,
			lg_dptr workspace)
{
	return run_list(k, stream, LG_OP_COUNT_ZERO, __func__, list, out, workspace);
}

/* The cross-entropy launchers: the kernel's part (and fused) must match. */
static lg_status ce_part(const lg_kernel *k, const char *fn, int part, int fused)
{
	if (!k || k->spec.op != LG_OP_CROSS_ENTROPY)
		return LG_OK; /* run_typed says what is wrong */
	/* the part names as the family declares them */
	const char *const *parts = k->fam->keys[lg_family_key(k->fam, "part")].values;
	int got = (int)key_of(k, "part"), gotf = (int)key_of(k, "fused");
	if (got != part || (fused >= 0 && gotf != fused))
		return lg_fail(LG_ERR_INVALID_ARG, "%s: kernel %s is part \"%s\"%s; this launcher takes part "
			       "\"%s\"%s", fn, k->plan.entry[0], parts[got], gotf ? ", fused" : "", parts[part],
			       fused == 1 ? ", fused" : fused == 0 ? ", not fused" : "");
	return LG_OK;
}

lg_status lg_cross_entropy_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr logits,
				   lg_dptr labels, lg_dptr loss, lg_dptr sum_exp, lg_dptr max_logit)
{
	lg_status st = ce_part(k, __func__, 0, 0);
	if (st != LG_OK)
		return st;
	LG_TYPED(LG_OP_CROSS_ENTROPY, LG_PASS_FORWARD, LG_SIZES(tokens, 0, 1), logits, labels, 0, 0, loss,
		 sum_exp, max_logit, 0, 0);
}

lg_status lg_cross_entropy_fused(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr logits,
				 lg_dptr labels, lg_dptr g, lg_dptr loss, lg_dptr sum_exp, lg_dptr max_logit,
				 lg_dptr grad)
{
	lg_status st = ce_part(k, __func__, 0, 1);
	if (st != LG_OK)
		return st;
	LG_TYPED(LG_OP_CROSS_ENTROPY, LG_PASS_FORWARD, LG_SIZES(tokens, 0, 1), logits, labels, 0, g, loss,
		 sum_exp, max_logit, 0, grad);
}

lg_status lg_cross_entropy_backward(const lg_kernel *k, lg_stream stream, int64_t tokens, int64_t vocab_start,
				    lg_dptr logits, lg_dptr labels, lg_dptr sum_exp, lg_dptr max_logit,
				    lg_dptr dloss, lg_dptr grad)
{
	LG_TYPED(LG_OP_CROSS_ENTROPY, LG_PASS_BACKWARD, LG_SIZES(tokens, vocab_start), logits, labels, sum_exp,
		 max_logit, dloss, grad);
}

lg_status lg_cross_entropy_shard_stats(const lg_kernel *k, lg_stream stream, int64_t tokens,
				       int64_t vocab_start, lg_dptr logits, lg_dptr labels, lg_dptr stats)
{
	lg_status st = ce_part(k, __func__, 1, -1);
	if (st != LG_OK)
		return st;
	LG_TYPED(LG_OP_CROSS_ENTROPY, LG_PASS_FORWARD, LG_SIZES(tokens, vocab_start, 1), logits, labels, 0, 0, 0,
		 0, 0, stats, 0);
}

lg_status lg_cross_entropy_merge(const lg_kernel *k, lg_stream stream, int64_t tokens, int64_t shards,
				 lg_dptr labels, lg_dptr stats_in, lg_dptr loss, lg_dptr sum_exp,
				 lg_dptr max_logit)
{
	lg_status st = ce_part(k, __func__, 2, -1);
	if (st != LG_OK)
		return st;
	LG_TYPED(LG_OP_CROSS_ENTROPY, LG_PASS_FORWARD, LG_SIZES(tokens, 0, shards), 0, labels, stats_in, 0, loss,
		 sum_exp, max_logit, 0, 0);
}

lg_status lg_moe_row_map_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr routing,
				 lg_dptr row_id_map, lg_dptr counts, lg_dptr offsets, lg_dptr row_index,
				 lg_dptr padded_counts, lg_dptr workspace)
{
	/* routing goes to the one input slot the spec uses (its uses(): by the routing key) */
	bool ok = k && k->spec.op == LG_OP_MOE_ROW_MAP;
	lg_dptr mask = ok && k->plan.used[0] ? routing : 0, topk = ok && k->plan.used[1] ? routing : 0,
		topk64 = ok && k->plan.used[2] ? routing : 0;
	LG_TYPED(LG_OP_MOE_ROW_MAP, LG_PASS_FORWARD, LG_SIZES(tokens), mask, topk, topk64, row_id_map, counts,
		 offsets, row_index, padded_counts, workspace);
}

lg_status lg_moe_permute_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr x,
				 lg_dptr x_scale, lg_dptr probs, lg_dptr row_id_map, lg_dptr offsets,
				 lg_dptr counts, lg_dptr out, lg_dptr out_scale, lg_dptr out_probs)
{
	LG_TYPED(LG_OP_MOE_PERMUTE, LG_PASS_FORWARD, LG_SIZES(tokens), x, x_scale, probs, row_id_map, offsets,
		 counts, out, out_scale, out_probs);
}

lg_status lg_moe_permute_backward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr dout,
				  lg_dptr dout_probs, lg_dptr row_id_map, lg_dptr dx, lg_dptr dprobs)
{
	LG_TYPED(LG_OP_MOE_PERMUTE, LG_PASS_BACKWARD, LG_SIZES(tokens), dout, dout_probs, row_id_map, dx, dprobs);
}

lg_status lg_moe_unpermute_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr g,
				   lg_dptr probs, lg_dptr row_id_map, lg_dptr out, lg_dptr restore_probs)
{
	LG_TYPED(LG_OP_MOE_UNPERMUTE, LG_PASS_FORWARD, LG_SIZES(tokens), g, probs, row_id_map, out, restore_probs);
}

lg_status lg_moe_unpermute_backward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr dout,
				    lg_dptr drestore, lg_dptr row_id_map, lg_dptr offsets, lg_dptr counts,
				    lg_dptr g, lg_dptr probs, lg_dptr dg, lg_dptr dprobs)
{
	LG_TYPED(LG_OP_MOE_UNPERMUTE, LG_PASS_BACKWARD, LG_SIZES(tokens), dout, drestore, row_id_map, offsets,
		 counts, g, probs, dg, dprobs);
}

lg_status lg_moe_permute_quant_forward(const lg_kernel *k, lg_stream stream, int64_t tokens, lg_dptr x,
				       lg_dptr probs, lg_dptr row_index, lg_dptr padded_counts, lg_dptr q,
				       lg_dptr s, lg_dptr qt, lg_dptr st, lg_dptr out_probs)
{
	LG_TYPED(LG_OP_MOE_PERMUTE_QUANT, LG_PASS_FORWARD, LG_SIZES(tokens), x, probs, row_index, padded_counts, q,
		 s, qt, st, out_probs);
}
