/*
 * blob.h - the memory a cubin lives in, owned by whoever holds the blob:
 * malloc'd (compiled, or read from a bundle's own cubin file) or a
 * read-only private mapping of a whole cache entry file (cache.c: the
 * cubin starts after the entry's header). One rule for both: the holder
 * calls lg_blob_release once, which frees or unmaps as the blob says.
 * A cubin inside a bundle's mapped file or embedded table is no blob: the
 * bundle owns it (an empty blob beside it).
 */
#ifndef LG_RUNTIME_BLOB_H
#define LG_RUNTIME_BLOB_H

#include <stdbool.h>
#include <stddef.h>

struct lg_blob {
	void *base;  /* NULL: nothing owned */
	size_t len;  /* the mapping's length (mapped only) */
	bool mapped; /* munmap(base, len), not free(base) */
};

/* A malloc'd buffer as a blob (p may be NULL: an empty blob). */
struct lg_blob lg_blob_heap(void *p);
/* Free or unmap what b owns and empty it; an empty blob is left alone. */
void lg_blob_release(struct lg_blob *b);

#endif
