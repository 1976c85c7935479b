/*
 * bundle_pack.h - a bundle's cubin file, cubins.lgc: every cubin of a
 * bundle in one file that the loader maps once (bundle.c), instead of one
 * file read per kernel. Written by `lingen build` (tools/cmd_build.c).
 *
 * Layout (LG_PACK_FORMAT 1): a header of LG_PACK_ALIGN bytes, "LGCUBINS"
 * then the format as text ("\t1\n") and zeros; then the cubins in the
 * order given, each at an offset that is a multiple of LG_PACK_ALIGN,
 * zeros between them. Nothing in the file says where a cubin is: index.lgb
 * records each cubin's offset and size, and the file's size (bundle.c).
 *
 * The file is mapped read-only and private for as long as the bundle is
 * open, and the driver is given pointers into the mapping. A file cut
 * shorter while mapped would fault on the next read of its lost pages
 * (SIGBUS), so it is never changed in place: lingen build writes it under a
 * temporary name and renames it over the old one (a reader keeps the file
 * it mapped), and the loader refuses a file whose size is not the one the
 * index records.
 */
#ifndef LG_RUNTIME_BUNDLE_PACK_H
#define LG_RUNTIME_BUNDLE_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "lingen.h"

#define LG_PACK_FILE "cubins.lgc"
#define LG_PACK_FORMAT 1
#define LG_PACK_ALIGN 64 /* bytes: the header, and every cubin's offset */

/* A mapped cubin file. */
struct lg_pack {
	const unsigned char *base; /* NULL: none mapped */
	size_t size;
};

/* The cubin file of n cubins (data[i], size[i] bytes) as one malloc'd
 * buffer of *total bytes, and each cubin's offset in it; NULL when out of
 * memory. */
unsigned char *lg_pack_build(const void *const *data, const size_t *size, size_t n, size_t *offset,
			     size_t *total);

/* Map the cubin file at path, which must be a regular file of exactly
 * `bytes` bytes (index.lgb's record of it) starting with the header.
 * LG_ERR_IO naming path when it cannot be opened or mapped, LG_ERR_SPEC
 * when its size or header is not the recorded one. Pages are mapped as
 * they are first read (by the checksum, before the driver sees them). */
lg_status lg_pack_map(const char *path, uint64_t bytes, struct lg_pack *out);
void lg_pack_unmap(struct lg_pack *p);

/* Whether a cubin of `size` bytes at `offset` is inside the mapped file,
 * after its header and aligned: LG_ERR_SPEC naming `where` when not. */
lg_status lg_pack_check(const struct lg_pack *p, uint64_t offset, uint64_t size, const char *where);

#endif
