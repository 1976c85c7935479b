/*
 * sass.c - the FFMA runs' reuse and yield flags of an sm_90 cubin (sass.h).
 */
#include "sass.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "error.h"

#define INSN 16
#define FFMA_RRR 0x223u
#define RUN_MIN 8
#define STAY (UINT64_C(1) << 45) /* clear: the warp may yield after it */
#define REUSE_B (UINT64_C(1) << 59)
#define REUSE (UINT64_C(0xf) << 58)
#define SHF_EXECINSTR 0x4u

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void wr64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++, v >>= 8)
		p[i] = (uint8_t)v;
}

static uint32_t rd_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static unsigned rd_u16(const uint8_t *p) { return (unsigned)p[0] | (unsigned)p[1] << 8; }

static bool is_ffma(const uint8_t *insn) { return (rd_u32(insn) & 0xfffu) == FFMA_RRR; }

/* A run of n FFMAs at code, by the rule of mode (sass.h). */
static unsigned rewrite_run(uint8_t *code, size_t n, int mode)
{
	uint8_t seen[256 / 8] = {0};
	bool last_reused = false;
	int last_reg = -1;
	unsigned changed = 0;
	for (size_t i = 0; i < (mode == LG_SASS_FFMA_ALL ? n : n * 9 / 16); i++) {
		uint8_t *insn = code + i * INSN;
		uint64_t hi = rd64(insn + 8), to = hi;
		if (mode == LG_SASS_FFMA_DEEPGEMM) {
			int reg = (int)(rd64(insn) >> 32 & 0xff);
			bool reused = (hi & REUSE_B) != 0;
			bool first = !(seen[reg / 8] >> (reg % 8) & 1);
			if (reused && (first || (last_reused && reg == last_reg))) {
				to = hi ^ (REUSE_B | STAY);
				reused = false;
			}
			seen[reg / 8] |= (uint8_t)(1u << (reg % 8));
			last_reused = reused;
			last_reg = reg;
		} else {
			to = hi & ~(REUSE | STAY);
		}
		if (to != hi) {
			wr64(insn + 8, to);
			changed++;
		}
	}
	return changed;
}

/* Every run of RUN_MIN FFMAs or more in the code [n instructions]. */
static void rewrite_code(uint8_t *code, size_t n, int mode, struct lg_sass_stats *st)
{
	size_t start = 0;
	for (size_t i = 0; i <= n; i++) {
		if (i < n && is_ffma(code + i * INSN))
			continue;
		if (i - start >= RUN_MIN) {
			st->runs++;
			st->ffma += (unsigned)(i - start);
			st->changed += rewrite_run(code + start * INSN, i - start, mode);
		}
		start = i + 1;
	}
}

lg_status lg_sass_ffma_yield(void *cubin, size_t size, int mode, struct lg_sass_stats *stats)
{
	struct lg_sass_stats st = {0};
	uint8_t *elf = cubin;
	if (stats)
		*stats = st;
	if (mode < LG_SASS_FFMA_DEEPGEMM || mode > LG_SASS_FFMA_ALL)
		return lg_fail(LG_ERR_INVALID_ARG, "lg_sass_ffma_yield: mode %d (allowed 1-3)", mode);
	if (!elf || size < 64 || memcmp(elf, "\x7f" "ELF", 4) != 0 || elf[4] != 2 || elf[5] != 1)
		return lg_fail(LG_ERR_INVALID_ARG, "cubin (%zu bytes): not a 64-bit little-endian ELF", size);
	uint64_t shoff = rd64(elf + 0x28);
	unsigned shentsize = rd_u16(elf + 0x3a), shnum = rd_u16(elf + 0x3c), shstrndx = rd_u16(elf + 0x3e);
	if (shentsize < 64 || shoff > size || shnum > (size - shoff) / shentsize || shstrndx >= shnum)
		return lg_fail(LG_ERR_INVALID_ARG,
			       "cubin (%zu bytes): section headers (%u of %u bytes at %llu, names in %u) past its end",
			       size, shnum, shentsize, (unsigned long long)shoff, shstrndx);
	const uint8_t *names = elf + shoff + (uint64_t)shstrndx * shentsize;
	uint64_t str_off = rd64(names + 24), str_size = rd64(names + 32);
	if (str_off > size || str_size > size - str_off)
		return lg_fail(LG_ERR_INVALID_ARG, "cubin (%zu bytes): section names past its end", size);
	/* check every executable section before changing any */
	for (int pass = 0; pass < 2; pass++) {
		for (unsigned i = 0; i < shnum; i++) {
			const uint8_t *sh = elf + shoff + (uint64_t)i * shentsize;
			uint64_t flags = rd64(sh + 8), off = rd64(sh + 24), len = rd64(sh + 32);
			uint32_t name = rd_u32(sh);
			if (!(flags & SHF_EXECINSTR) || rd_u32(sh + 4) == 8 /* SHT_NOBITS */)
				continue;
			if (pass == 0) {
				if (name >= str_size || !memchr(elf + str_off + name, 0, str_size - name))
					return lg_fail(LG_ERR_INVALID_ARG, "cubin (%zu bytes): section %u's name past "
						       "the names", size, i);
				if (off > size || len > size - off || len % INSN)
					return lg_fail(LG_ERR_INVALID_ARG, "cubin (%zu bytes): code section %s (%llu "
						       "bytes at %llu) past its end or not whole instructions",
						       size, (const char *)elf + str_off + name,
						       (unsigned long long)len, (unsigned long long)off);
				continue;
			}
			st.sections++;
			rewrite_code(elf + off, len / INSN, mode, &st);
		}
	}
	if (stats)
		*stats = st;
	return LG_OK;
}
