/*
 * list.c - tensor lists (lingen.h): the device table of items that the
 * list-reducing families read (gen/engines/list_common.h).
 *
 * The table is made once, when the list is created: every tensor cut into
 * items of at most LG_LIST_ITEM_BYTES, one 16-byte row each (pointer,
 * element count, element type), copied to device memory the list owns.
 * A launch then passes the table's address and row count as plain
 * arguments: no host-to-device copy and no synchronisation per call, so
 * the launch can be captured in a CUDA graph. Cutting at multiples of the
 * item size from each tensor's 16-byte-aligned base makes every item but
 * a tensor's first start 16-byte aligned, and gives every item (so every
 * warp of the kernels, which take items round-robin) the same work but
 * for the tensors' ends: lists of 10 000 tiny tensors and of a few huge
 * ones alike are spread evenly over the grid.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "error.h"
#include "list.h"

struct lg_tensor_list {
	const struct lg_cu *cu;
	CUdeviceptr table; /* items rows of LG_LIST_ROW_BYTES; 0 when items == 0 */
	int64_t items, numel;
	size_t count;
	unsigned elems;
};

/* One row of the table, as the kernels read it (lingen.h). */
struct row {
	uint64_t ptr;
	uint32_t count, elem;
};
_Static_assert(sizeof(struct row) == LG_LIST_ROW_BYTES, "a table row is 16 bytes");

static const int64_t elem_bytes[LG_LIST_ELEM_COUNT] = {[LG_LIST_BF16] = 2, [LG_LIST_FP32] = 4};

/* Rows of tensor (p, n elements of b bytes): cuts at multiples of the item
 * size from p's 16-byte-aligned base. */
static int64_t rows_of(uint64_t p, int64_t n, int64_t b)
{
	if (n == 0)
		return 0;
	uint64_t base = p & ~(uint64_t)15, end = p + (uint64_t)n * (uint64_t)b;
	return (int64_t)((end - base + LG_LIST_ITEM_BYTES - 1) / LG_LIST_ITEM_BYTES);
}

static void fill_rows(struct row *r, uint64_t p, int64_t n, int64_t b, int elem)
{
	uint64_t base = p & ~(uint64_t)15, end = p + (uint64_t)n * (uint64_t)b;
	for (uint64_t at = p; at < end;) {
		uint64_t cut = base + ((at - base) / LG_LIST_ITEM_BYTES + 1) * LG_LIST_ITEM_BYTES;
		uint64_t stop = cut < end ? cut : end;
		*r++ = (struct row){at, (uint32_t)((stop - at) / (uint64_t)b), (uint32_t)elem};
		at = stop;
	}
}

static lg_status check_args(const lg_dptr *ptrs, const int *elems, const int64_t *counts, size_t n,
			    int64_t *items)
{
	*items = 0;
	for (size_t i = 0; i < n; i++) {
		if (elems[i] < 0 || elems[i] >= LG_LIST_ELEM_COUNT)
			return lg_fail(LG_ERR_INVALID_ARG, "lg_tensor_list_create: tensor %zu: element type %d, "
				       "allowed: LG_LIST_BF16 (0) or LG_LIST_FP32 (1)", i, elems[i]);
		int64_t b = elem_bytes[elems[i]];
		if (counts[i] < 0 || counts[i] > (INT64_MAX >> 4) / b)
			return lg_fail(LG_ERR_INVALID_ARG, "lg_tensor_list_create: tensor %zu: %lld elements, "
				       "allowed: 0 to %lld", i, (long long)counts[i], (long long)((INT64_MAX >> 4) / b));
		if (counts[i] && (!ptrs[i] || ptrs[i] % (uint64_t)b))
			return lg_fail(LG_ERR_INVALID_ARG, "lg_tensor_list_create: tensor %zu: address 0x%llx, "
				       "expected a device pointer aligned to its %lld-byte elements", i, ptrs[i],
				       (long long)b);
		*items += rows_of(ptrs[i], counts[i], b);
		if (*items > INT32_MAX)
			return lg_fail(LG_ERR_INVALID_ARG, "lg_tensor_list_create: more than %d items of %d bytes "
				       "(at tensor %zu)", INT32_MAX, LG_LIST_ITEM_BYTES, i);
	}
	return LG_OK;
}

lg_status lg_tensor_list_rows(const lg_dptr *ptrs, const int *elems, const int64_t *counts, size_t n,
			     void **rows, int64_t *items)
{
	*rows = NULL;
	lg_status st = check_args(ptrs, elems, counts, n, items);
	if (st != LG_OK)
		return st;
	struct row *r = *items ? malloc((size_t)*items * sizeof *r) : NULL;
	if (*items && !r)
		return lg_fail(LG_ERR_NO_MEMORY, "lg_tensor_list_create: out of host memory (%lld items)",
			       (long long)*items);
	*rows = r;
	for (size_t i = 0; i < n; i++) {
		int64_t b = elem_bytes[elems[i]];
		fill_rows(r, ptrs[i], counts[i], b, elems[i]);
		r += rows_of(ptrs[i], counts[i], b);
	}
	return LG_OK;
}

lg_status lg_tensor_list_create(const lg_dptr *ptrs, const int *elems, const int64_t *counts, size_t n,
				lg_tensor_list **out)
{
	lg_clear_error();
	if (!out || (n && (!ptrs || !elems || !counts)))
		return lg_fail(LG_ERR_INVALID_ARG, "lg_tensor_list_create: out, and the arrays when n > 0, "
			       "must not be NULL");
	*out = NULL;
	int64_t items;
	void *rows;
	lg_status st = lg_tensor_list_rows(ptrs, elems, counts, n, &rows, &items);
	if (st != LG_OK)
		return st;
	const struct lg_cu *cu;
	lg_tensor_list *l = NULL;
	if ((st = lg_cu_get(&cu)) != LG_OK || !(l = calloc(1, sizeof *l))) {
		free(rows);
		return st != LG_OK ? st : lg_fail(LG_ERR_NO_MEMORY, "lg_tensor_list_create: out of host memory");
	}
	l->cu = cu;
	l->items = items;
	l->count = n;
	for (size_t i = 0; i < n; i++) {
		l->numel += counts[i];
		if (counts[i])
			l->elems |= 1u << elems[i];
	}
	CUresult e = CUDA_SUCCESS;
	if (items) {
		size_t bytes = (size_t)items * sizeof(struct row);
		e = cu->cuMemAlloc(&l->table, bytes);
		if (e == CUDA_SUCCESS)
			e = cu->cuMemcpyHtoD(l->table, rows, bytes);
	}
	free(rows);
	if (e != CUDA_SUCCESS) {
		st = lg_cu_fail(e, "lg_tensor_list_create (the table on the device)");
		lg_tensor_list_destroy(l);
		return st;
	}
	*out = l;
	return LG_OK;
}

void lg_tensor_list_destroy(lg_tensor_list *l)
{
	if (!l)
		return;
	if (l->table)
		l->cu->cuMemFree(l->table);
	free(l);
}

lg_dptr lg_tensor_list_table(const lg_tensor_list *l) { return l ? l->table : 0; }
int64_t lg_tensor_list_items(const lg_tensor_list *l) { return l ? l->items : 0; }
size_t lg_tensor_list_count(const lg_tensor_list *l) { return l ? l->count : 0; }
int64_t lg_tensor_list_numel(const lg_tensor_list *l) { return l ? l->numel : 0; }
unsigned lg_tensor_list_elems(const lg_tensor_list *l) { return l ? l->elems : 0; }
