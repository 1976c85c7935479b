/*
 * gpu.c - device buffers of a reference case (gpu.h).
 */
#include "gpu.h"

#include <stdlib.h>
#include <string.h>

#include "compare.h"
#include "error.h"

/* A list family's case: its tensors (ref.data) on the device, and the
 * table of its list argument pointing there instead of at the host. */
static lg_status upload_list(struct lg_gpu_case *g, const struct lg_spec *s)
{
	const struct lg_sig *sig = &s->fam->sig[s->pass];
	int li = 0;
	while (li < sig->nargs && sig->args[li].role != LG_ARG_LIST)
		li++;
	LG_ASSERT(li < sig->nargs);
	struct lg_ref_buf *t = &g->ref.buf[li];
	LG_CU_TRY(g->cu, cuMemAlloc, (&g->data, g->ref.data_bytes));
	LG_CU_TRY(g->cu, cuMemcpyHtoD, (g->data, g->ref.data, g->ref.data_bytes));
	size_t rows = t->count * t->elem / LG_LIST_ROW_BYTES;
	unsigned char *dt = malloc(t->count * t->elem);
	if (!dt)
		return lg_fail(LG_ERR_NO_MEMORY, "out of host memory for the list's table");
	memcpy(dt, t->host, t->count * t->elem);
	for (size_t r = 0; r < rows; r++) {
		uint64_t p;
		memcpy(&p, dt + r * LG_LIST_ROW_BYTES, 8);
		p = g->data + (p - (uint64_t)(uintptr_t)g->ref.data);
		memcpy(dt + r * LG_LIST_ROW_BYTES, &p, 8);
	}
	CUresult e = g->cu->cuMemcpyHtoD(g->dev[li], dt, t->count * t->elem);
	free(dt);
	return e == CUDA_SUCCESS ? LG_OK : lg_cu_fail(e, "cuMemcpyHtoD (the list's table)");
}

lg_status lg_gpu_case_init(struct lg_gpu_case *g, const struct lg_spec *s, int64_t tokens,
			   const int64_t *sizes_given, uint64_t seed, const lg_kernel *k)
{
	memset(g, 0, sizeof *g);
	lg_status st = lg_cu_get(&g->cu);
	if (st != LG_OK)
		return st;
	st = lg_cu_ensure_context(0);
	if (st != LG_OK)
		return st;
	const struct lg_ref_family *rf = lg_ref_family_get(s->op);
	int64_t sizes[LG_MAX_SIZES];
	lg_sizes_at(s->fam, s->pass, tokens, sizes);
	for (int i = 0; sizes_given && i < s->fam->sig[s->pass].nsizes; i++)
		sizes[i] = sizes_given[i];
	st = lg_ref_case_init(&g->ref, s, sizes, k->plan.used, lg_kernel_workspace_size(k));
	if (st != LG_OK)
		return st;
	rf->describe(s, &g->ref);
	for (int i = 0; i < g->ref.n; i++) {
		struct lg_ref_buf *b = &g->ref.buf[i];
		if (!b->count)
			continue;
		size_t bytes = b->count * b->elem;
		b->host = calloc(1, bytes);
		if (b->output)
			g->got[i] = calloc(1, bytes);
		if (!b->host || (b->output && !g->got[i]))
			return lg_fail(LG_ERR_NO_MEMORY, "out of host memory for %s (%zu bytes)", b->name, bytes);
		LG_CU_TRY(g->cu, cuMemAlloc, (&g->dev[i], bytes));
		g->ptrs[i] = g->dev[i];
	}
	rf->fill(s, &g->ref, seed);
	for (int i = 0; i < g->ref.n; i++) {
		struct lg_ref_buf *b = &g->ref.buf[i];
		if (b->count && !b->output && b->cmp == LG_CMP_NONE && g->dev[i])
			LG_CU_TRY(g->cu, cuMemcpyHtoD, (g->dev[i], b->host, b->count * b->elem));
	}
	return g->ref.data ? upload_list(g, s) : LG_OK;
}

lg_status lg_gpu_case_launch(const struct lg_gpu_case *g, const lg_kernel *k, lg_stream stream)
{
	return lg_kernel_run(k, stream, g->ref.sizes, k->nsizes, g->ptrs, g->ref.n);
}

lg_status lg_gpu_case_poison(struct lg_gpu_case *g)
{
	for (int i = 0; i < g->ref.n; i++)
		if (g->ref.buf[i].output && g->dev[i])
			LG_CU_TRY(g->cu, cuMemsetD8,
				  (g->dev[i], g->ref.buf[i].zeroed ? 0 : 0xff, g->ref.buf[i].count * g->ref.buf[i].elem));
	return LG_OK;
}

lg_status lg_gpu_case_download(struct lg_gpu_case *g)
{
	LG_CU_TRY(g->cu, cuCtxSynchronize, ());
	for (int i = 0; i < g->ref.n; i++)
		if (g->ref.buf[i].output && g->dev[i])
			LG_CU_TRY(g->cu, cuMemcpyDtoH, (g->got[i], g->dev[i], g->ref.buf[i].count * g->ref.buf[i].elem));
	return LG_OK;
}

void lg_gpu_case_free(struct lg_gpu_case *g)
{
	for (int i = 0; i < LG_MAX_ARGS; i++) {
		if (g->dev[i])
			g->cu->cuMemFree(g->dev[i]);
		free(g->ref.buf[i].host);
		free(g->ref.buf[i].slack);
		free(g->got[i]);
	}
	if (g->data)
		g->cu->cuMemFree(g->data);
	free(g->ref.data);
	memset(g, 0, sizeof *g);
}

void lg_gpu_case_check(struct lg_gpu_case *g, const struct lg_spec *s, const bool *skip, int max_report, FILE *out,
		       struct lg_check_result *r)
{
	lg_ref_family_get(s->op)->run(s, &g->ref);
	r->pass = true;
	r->nmeasures = 0;
	for (int i = 0; i < g->ref.n && r->nmeasures < 8; i++) {
		const struct lg_ref_buf *b = &g->ref.buf[i];
		if (!b->output || !b->count || (skip && skip[i]))
			continue;
		struct lg_check_measure *m = &r->m[r->nmeasures++];
		lg_compare(b, g->got[i], max_report, out, m);
		r->pass = r->pass && m->pass;
	}
}
