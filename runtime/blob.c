/*
 * blob.c - owned cubin memory, released the one way its kind needs
 * (blob.h).
 */
#include "blob.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

struct lg_blob lg_blob_heap(void *p)
{
	return (struct lg_blob){.base = p};
}

void lg_blob_release(struct lg_blob *b)
{
	if (b->base && b->mapped)
		munmap(b->base, b->len);
	else
		free(b->base);
	*b = (struct lg_blob){0};
}
