/*
 * bundle_pack.c - a bundle's cubin file (bundle_pack.h): laid out by
 * lingen build, mapped and bounds-checked by the loader.
 */
#include "bundle_pack.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"

#define MAGIC "LGCUBINS"

static size_t align_up(size_t n) { return (n + LG_PACK_ALIGN - 1) / LG_PACK_ALIGN * LG_PACK_ALIGN; }

/* The header: MAGIC, "\t<format>\n", zeros to LG_PACK_ALIGN bytes. */
static void header(unsigned char *out)
{
	memset(out, 0, LG_PACK_ALIGN);
	snprintf((char *)out, LG_PACK_ALIGN, "%s\t%d\n", MAGIC, LG_PACK_FORMAT);
}

unsigned char *lg_pack_build(const void *const *data, const size_t *size, size_t n, size_t *offset,
			     size_t *total)
{
	size_t end = LG_PACK_ALIGN;
	for (size_t i = 0; i < n; i++) {
		offset[i] = end;
		end = align_up(end + size[i]);
	}
	unsigned char *out = calloc(1, end);
	if (!out)
		return NULL;
	header(out);
	for (size_t i = 0; i < n; i++)
		memcpy(out + offset[i], data[i], size[i]);
	*total = end;
	return out;
}

lg_status lg_pack_map(const char *path, uint64_t bytes, struct lg_pack *out)
{
	out->base = NULL;
	out->size = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return lg_fail(LG_ERR_IO, "cannot open the bundle's cubin file %s: %s", path, strerror(errno));
	struct stat st;
	lg_status rc = LG_OK;
	if (fstat(fd, &st) != 0)
		rc = lg_fail(LG_ERR_IO, "cannot read the bundle's cubin file %s: %s", path, strerror(errno));
	else if (!S_ISREG(st.st_mode))
		rc = lg_fail(LG_ERR_IO, "the bundle's cubin file %s is not a regular file", path);
	else if ((uint64_t)st.st_size != bytes || bytes < LG_PACK_ALIGN || bytes > SIZE_MAX)
		rc = lg_fail(LG_ERR_SPEC, "the bundle's cubin file %s has %lld bytes, its index records %llu: truncated or from another build; rebuild the bundle with lingen build",
			     path, (long long)st.st_size, (unsigned long long)bytes);
	void *base = MAP_FAILED;
	/* neither MAP_POPULATE nor MADV_WILLNEED: the kernel maps 16 cached
	 * pages a read fault (fault-around), about 25 faults for the 1.6 MB of
	 * the 39-kernel step, and populating at open measured no faster in
	 * total (bench/jit-load.md) while it maps every arch's cubins */
	if (rc == LG_OK && (base = mmap(NULL, (size_t)bytes, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED)
		rc = lg_fail(LG_ERR_IO, "cannot map the bundle's cubin file %s: %s", path, strerror(errno));
	close(fd);
	if (rc != LG_OK)
		return rc;
	unsigned char want[LG_PACK_ALIGN];
	header(want);
	if (memcmp(base, want, LG_PACK_ALIGN) != 0) {
		munmap(base, (size_t)bytes);
		return lg_fail(LG_ERR_SPEC, "%s is not a lingen cubin file of format %d (its header is not \"%s\\t%d\")",
			       path, LG_PACK_FORMAT, MAGIC, LG_PACK_FORMAT);
	}
	out->base = base;
	out->size = (size_t)bytes;
	return LG_OK;
}

void lg_pack_unmap(struct lg_pack *p)
{
	if (p->base)
		munmap((void *)(uintptr_t)p->base, p->size);
	p->base = NULL;
	p->size = 0;
}

lg_status lg_pack_check(const struct lg_pack *p, uint64_t offset, uint64_t size, const char *where)
{
	if (offset < LG_PACK_ALIGN || offset % LG_PACK_ALIGN || offset > p->size || size > p->size - offset)
		return lg_fail(LG_ERR_SPEC, "%s: a cubin of %llu bytes at offset %llu is not inside %s (%zu bytes; cubins start after its %d-byte header, at multiples of %d): a corrupt index; rebuild the bundle with lingen build",
			       where, (unsigned long long)size, (unsigned long long)offset, LG_PACK_FILE, p->size,
			       LG_PACK_ALIGN, LG_PACK_ALIGN);
	return LG_OK;
}
