/*
 * list.h - the host side of a tensor list's table (list.c), for tests.
 */
#ifndef LG_RUNTIME_LIST_H
#define LG_RUNTIME_LIST_H

#include <stddef.h>
#include <stdint.h>

#include "lingen.h"

/* The rows lg_tensor_list_create uploads (lingen.h lays them out), made
 * on the host after the same checks: *items rows at *rows (NULL for
 * none). The caller frees *rows with free(). Needs no GPU. */
lg_status lg_tensor_list_rows(const lg_dptr *ptrs, const int *elems, const int64_t *counts, size_t n,
			      void **rows, int64_t *items);

#endif
