/*
 * cubin_elf.c - a cubin's symbol table read in place (cubin_elf.h): the
 * section headers, the SHT_SYMTAB section and the string table it links,
 * every offset and size checked against the cubin's size.
 */
#include "cubin_elf.h"

#include <stdint.h>
#include <string.h>

#define SHT_SYMTAB 2u
#define STT_FUNC 2u
#define SYM_SIZE 24u /* Elf64_Sym */
#define SHDR_SIZE 64u /* Elf64_Shdr */

static uint64_t rd(const uint8_t *p, int bytes)
{
	uint64_t v = 0;
	for (int i = bytes - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Is [off, off + len) inside size bytes? */
static bool inside(uint64_t off, uint64_t len, size_t size) { return off <= size && len <= size - off; }

bool lg_cubin_has_function(const void *cubin, size_t size, const char *name)
{
	const uint8_t *b = cubin;
	if (size < 64 || memcmp(b, "\x7f" "ELF", 4) != 0 || b[4] != 2 || b[5] != 1)
		return false; /* not ELF64, little-endian */
	uint64_t shoff = rd(b + 0x28, 8), shentsize = rd(b + 0x3a, 2), shnum = rd(b + 0x3c, 2);
	if (shentsize != SHDR_SIZE || !inside(shoff, shnum * SHDR_SIZE, size))
		return false;
	size_t want = strlen(name);
	for (uint64_t i = 0; i < shnum; i++) {
		const uint8_t *sh = b + shoff + i * SHDR_SIZE;
		if (rd(sh + 4, 4) != SHT_SYMTAB)
			continue;
		uint64_t off = rd(sh + 0x18, 8), len = rd(sh + 0x20, 8), link = rd(sh + 0x28, 4);
		if (!inside(off, len, size) || link >= shnum)
			return false;
		const uint8_t *strsh = b + shoff + link * SHDR_SIZE;
		uint64_t stroff = rd(strsh + 0x18, 8), strlen_ = rd(strsh + 0x20, 8);
		if (!inside(stroff, strlen_, size))
			return false;
		for (uint64_t s = 0; s + SYM_SIZE <= len; s += SYM_SIZE) {
			const uint8_t *sym = b + off + s;
			uint64_t at = rd(sym, 4), shndx = rd(sym + 6, 2);
			if ((sym[4] & 0xf) != STT_FUNC || shndx == 0 || at >= strlen_ || want >= strlen_ - at)
				continue;
			if (memcmp(b + stroff + at, name, want + 1) == 0)
				return true;
		}
	}
	return false;
}
