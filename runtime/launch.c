/*
 * launch.c - the hot path: launching a loaded kernel on the caller's stream.
 * No hashing, no file access, no allocation: the sizes against their
 * declared ranges, the pointers against their roles and alignment, the
 * launch geometry from the plan (integer arithmetic, checked against the
 * hardware's grid limits), cuLaunchKernel per entry with a non-empty grid.
 * The typed launchers come here through lg_kernel_run_form.
 */
#include <stdint.h>
#include <string.h>

#include "context.h"
#include "error.h"
#include "form.h"

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
	uint64_t rows = 1, pitch = n ? (uint64_t)d[n - 1] : 0, cols = pitch;
	for (int j = 0; j + 1 < n; j++)
		rows *= (uint64_t)d[j];
	if (m->cols) { /* a row of `cols` elements in a pitch of the last dimension */
		int64_t c = 0;
		st = lg_shape_value(&k->spec, m->cols, sz, &c);
		if (st != LG_OK)
			return st;
		if (c < 0 || (uint64_t)c > pitch)
			return lg_fail(LG_ERR_INVALID_ARG, "%s: tensor map of %s: %lld elements a row, the pitch %llu",
				       k->plan.entry[0], k->sig->args[m->arg].name, (long long)c,
				       (unsigned long long)pitch);
		cols = (uint64_t)c;
	}
	if (!ptrs[m->arg] || !rows || !cols)
		return LG_OK;
	const struct lg_arg *a = &k->sig->args[m->arg];
	enum lg_elem el = lg_arg_elem(&k->spec, a);
	cuuint64_t dims[2] = {cols, rows}, strides[1] = {pitch * (uint64_t)lg_elem_bytes[el]};
	if (m->patched) { /* any valid map: the kernel replaces address, dims and pitch */
		dims[0] = m->box[0];
		dims[1] = m->box[1];
		strides[0] = m->box[0] * (uint64_t)lg_elem_bytes[el];
	}
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
		lg_status st = lg_size_check(p->entry[0], &g->sizes[i], sizes[i]);
		if (st != LG_OK)
			return st;
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

/* The typed launchers (lingen_ops.c, generated from the family
 * declarations) launch through their resolved form (form.h). */
lg_status lg_kernel_run_form(const lg_kernel *k, lg_stream stream, const struct lg_launcher *l,
			     const int64_t *sizes, const lg_dptr *ptrs, const lg_tensor_list *list)
{
	if (l->list >= 0 && !list)
		return lg_fail(LG_ERR_INVALID_ARG, "%s: the tensor list must not be NULL", l->name);
	if (k) {
		lg_status st = lg_form_check(l, &k->spec, k->plan.entry[0]);
		if (st == LG_OK && list && k->fam->check_list)
			st = k->fam->check_list(&k->spec, l->name, k->plan.entry[0], lg_tensor_list_elems(list));
		if (st != LG_OK)
			return st;
	}
	int64_t all_sizes[LG_MAX_SIZES];
	lg_dptr all_ptrs[LG_MAX_ARGS];
	lg_form_map(l, k ? k->plan.used : NULL, sizes, ptrs, lg_tensor_list_items(list), lg_tensor_list_table(list),
		    all_sizes, all_ptrs);
	return lg_kernel_run(k, stream, all_sizes, l->nsizes, all_ptrs, l->nargs);
}
