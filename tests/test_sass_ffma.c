/*
 * test_sass_ffma.c - lg_sass_ffma_yield (runtime/sass.h) on the FP8 GEMMs'
 * sm_90a cubins, compiled by NVRTC (no GPU): it finds their promotion's
 * FFMA runs and rewrites some instructions in them, changing nothing but
 * operand B's reuse flag and the yield flag of FFMAs whose B reuse flag
 * was set (mode 1) or dropping every reuse flag and letting the warp
 * yield (modes 2 and 3); the context's cubin of a tile with tile.ffma 2 is
 * NVRTC's rewritten, of one with 0 or none NVRTC's; a cubin that is not an ELF, or whose sections lie past its end, is
 * refused unchanged. Where cuobjdump is found (PATH, else
 * /usr/local/cuda/bin), every rewritten instruction is one the disassembler
 * calls FFMA (without it that cross-check is said to be skipped; the rest
 * runs).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "generate.h"
#include "nvrtc.h"
#include "sass.h"
#include "spec.h"
#include "testutil.h"

#define FG "{\"op\": \"fp8_gemm\", \"pass\": "

static const char *const specs[] = {
	FG "\"forward\", \"dtype\": \"bf16\", \"n\": 3072, \"k\": 2048}",
	FG "\"forward\", \"dtype\": \"bf16\", \"n\": 7168, \"k\": 16384}",
	FG "\"wgrad\", \"dtype\": \"fp32\", \"n\": 2048, \"k\": 3072}",
	"{\"op\": \"fp8_grouped_gemm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"experts\": 256, \"n\": 1024, "
	"\"k\": 2048}",
};

static uint64_t word(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void *compile(const char *json, size_t *size)
{
	lg_spec *s = NULL;
	if (lg_spec_parse(json, &s) != LG_OK)
		fail_msg("%s: %s", json, lg_last_error());
	struct lg_target t;
	assert_true(lg_target_parse("sm_90a", &t));
	struct lg_plan p;
	char *src = NULL;
	if (lg_generate_for(s, &t, &p, &src, NULL) != LG_OK)
		fail_msg("generate %s: %s", json, lg_last_error());
	void *cubin = NULL;
	if (lg_nvrtc_compile(src, lg_spec_entry(s), "sm_90a", &cubin, size, NULL) != LG_OK)
		fail_msg("compile %s: %s", json, lg_last_error());
	free(src);
	lg_spec_free(s);
	return cubin;
}

static char cuobjdump[512];

/* The (low, high) words of every instruction cuobjdump calls FFMA in the
 * cubin, into *pairs (n of them); false when it cannot disassemble. */
static bool ffma_words(const void *cubin, size_t size, uint64_t **pairs, size_t *n)
{
	*pairs = NULL;
	*n = 0;
	if (!lg_test_cuobjdump(cuobjdump, sizeof cuobjdump))
		return false;
	FILE *pipe = lg_test_sass_open(cuobjdump, cubin, size);
	char line[1024];
	size_t cap = 0;
	bool ffma = false, any = false;
	uint64_t lo = 0;
	while (fgets(line, sizeof line, pipe)) {
		const char *hex = strstr(line, "/* 0x");
		if (!hex)
			continue;
		any = true;
		uint64_t v = strtoull(hex + 3, NULL, 16);
		if (strstr(line, ";")) { /* an instruction's first line: its low word */
			ffma = strstr(line, " FFMA ") != NULL;
			lo = v;
			continue;
		}
		if (!ffma)
			continue;
		if (*n == cap) {
			cap = cap ? 2 * cap : 1024;
			*pairs = realloc(*pairs, cap * 2 * sizeof **pairs);
			assert_non_null(*pairs);
		}
		(*pairs)[2 * *n] = lo;
		(*pairs)[2 * *n + 1] = v;
		(*n)++;
		ffma = false;
	}
	int rc = lg_test_sass_close(pipe);
	if (rc != 0 || !any) {
		printf("cuobjdump (%s) could not disassemble (exit %d)\n", cuobjdump, rc);
		free(*pairs);
		*pairs = NULL;
		return false;
	}
	return true;
}

static bool listed(const uint64_t *pairs, size_t n, uint64_t lo, uint64_t hi)
{
	for (size_t i = 0; i < n; i++)
		if (pairs[2 * i] == lo && pairs[2 * i + 1] == hi)
			return true;
	return false;
}

/* The instructions of cubin that differ from was: each an FFMA R, R, R, R
 * whose high word changed as mode says; their count. */
static unsigned check_changes(const char *json, int mode, const uint8_t *was, const uint8_t *cubin, size_t size)
{
	const uint64_t reuse_b = UINT64_C(1) << 59, stay = UINT64_C(1) << 45, reuse = UINT64_C(0xf) << 58;
	unsigned changed = 0;
	for (size_t i = 0; i < size / 16 * 16; i += 16) {
		if (!memcmp(cubin + i, was + i, 16))
			continue;
		uint64_t lo = word(was + i), hi = word(was + i + 8), to = word(cubin + i + 8);
		if (word(cubin + i) != lo || (lo & 0xfff) != 0x223)
			fail_msg("%s, mode %d: byte %zu (0x%016llx) changed, not an FFMA's flags", json, mode, i,
				 (unsigned long long)lo);
		if (mode == LG_SASS_FFMA_DEEPGEMM ? !(hi & reuse_b) || (hi ^ to) != (reuse_b | stay)
						  : to != (hi & ~(reuse | stay)))
			fail_msg("%s, mode %d: byte %zu: 0x%016llx -> 0x%016llx", json, mode, i, (unsigned long long)hi,
				 (unsigned long long)to);
		changed++;
	}
	assert_memory_equal(cubin + size / 16 * 16, was + size / 16 * 16, size % 16);
	return changed;
}

static void test_rewrites_only_ffma_flags(void **state)
{
	(void)state;
	bool cross_checked = false;
	for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
		size_t size = 0;
		uint8_t *was = compile(specs[k], &size), *cubin = malloc(size);
		assert_non_null(cubin);
		uint64_t *pairs = NULL;
		size_t n = 0;
		bool listing = ffma_words(was, size, &pairs, &n);
		for (int mode = LG_SASS_FFMA_DEEPGEMM; mode <= LG_SASS_FFMA_ALL; mode++) {
			memcpy(cubin, was, size);
			struct lg_sass_stats st;
			if (lg_sass_ffma_yield(cubin, size, mode, &st) != LG_OK)
				fail_msg("%s: %s", specs[k], lg_last_error());
			printf("%s, mode %d: %u code sections, %u FFMA runs of %u FFMAs, %u rewritten\n", specs[k], mode,
			       st.sections, st.runs, st.ffma, st.changed);
			assert_true(st.sections >= 1);
			assert_true(st.runs >= 1); /* the promotion */
			assert_true(st.changed <= st.ffma);
			if (mode > LG_SASS_FFMA_DEEPGEMM) /* NVRTC lets some of the promotion keep the slot */
				assert_true(st.changed >= 1);
			assert_int_equal(check_changes(specs[k], mode, was, cubin, size), st.changed);
			if (listing) {
				cross_checked = true;
				assert_true(n >= st.ffma);
				for (size_t i = 0; i < size / 16 * 16; i += 16)
					if (memcmp(cubin + i, was + i, 16) &&
					    !listed(pairs, n, word(was + i), word(was + i + 8)))
						fail_msg("%s: the instruction at byte %zu (0x%016llx 0x%016llx) is not "
							 "an FFMA to cuobjdump", specs[k], i, (unsigned long long)word(was + i),
							 (unsigned long long)word(was + i + 8));
			}
		}
		free(pairs);
		free(was);
		free(cubin);
	}
	if (!cross_checked)
		printf("SKIPPED the disassembler's cross-check: no cuobjdump that disassembles sm_90a\n");
}

static void test_refuses_broken_cubins(void **state)
{
	(void)state;
	size_t size = 0;
	uint8_t *cubin = compile(specs[0], &size);
	uint8_t *was = malloc(size);
	assert_non_null(was);
	memcpy(was, cubin, size);
	struct lg_sass_stats st;
	assert_int_equal(lg_sass_ffma_yield(NULL, 0, 1, &st), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_sass_ffma_yield(cubin, 63, 1, &st), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_sass_ffma_yield(cubin, size, 0, &st), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_sass_ffma_yield(cubin, size, 4, &st), LG_ERR_INVALID_ARG);
	assert_memory_equal(cubin, was, size);
	/* cut before the section headers */
	uint64_t shoff = word(cubin + 0x28);
	assert_int_equal(lg_sass_ffma_yield(cubin, (size_t)shoff + 10, 1, &st), LG_ERR_INVALID_ARG);
	assert_non_null(strstr(lg_last_error(), "past its end"));
	/* not an ELF */
	cubin[1] = 'X';
	assert_int_equal(lg_sass_ffma_yield(cubin, size, 3, &st), LG_ERR_INVALID_ARG);
	assert_non_null(strstr(lg_last_error(), "ELF"));
	cubin[1] = was[1];
	/* a code section past the end: its size made huge */
	unsigned shentsize = cubin[0x3a] | cubin[0x3b] << 8, shnum = cubin[0x3c] | cubin[0x3d] << 8;
	bool planted = false;
	for (unsigned i = 0; i < shnum && !planted; i++) {
		uint8_t *sh = cubin + shoff + (uint64_t)i * shentsize;
		if (word(sh + 8) & 4) { /* SHF_EXECINSTR */
			sh[38] = 0x7f;  /* byte 6 of sh_size */
			planted = true;
		}
	}
	assert_true(planted);
	uint8_t *planted_copy = malloc(size);
	assert_non_null(planted_copy);
	memcpy(planted_copy, cubin, size);
	assert_int_equal(lg_sass_ffma_yield(cubin, size, 3, &st), LG_ERR_INVALID_ARG);
	assert_non_null(strstr(lg_last_error(), "code section"));
	assert_memory_equal(cubin, planted_copy, size); /* nothing changed */
	assert_int_equal(st.changed, 0);
	free(planted_copy);
	free(was);
	free(cubin);
}

/* The plan carries tile.ffma (0 without it), and the context's cubin of a
 * tile with tile.ffma 2 is that of tile.ffma 0 rewritten by mode 2 (their
 * names, ..._tf0 and ..._tf2, aside): the disk cache off, sm_90a, no GPU. */
static void test_context_applies_the_tile(void **state)
{
	(void)state;
	lg_ctx_opts o = {.arch = "sm_90a", .cache_dir = "off", .tuning = "off"};
	lg_ctx *c = NULL;
	if (lg_ctx_create(&o, &c) != LG_OK)
		fail_msg("%s", lg_last_error());
	struct lg_target t;
	assert_true(lg_target_parse("sm_90a", &t));
	static const char *const tiles[3] = {"", ", \"tile\": {\"ffma\": 0}", ", \"tile\": {\"ffma\": 2}"};
	static const int mode[3] = {0, 0, 2};
	const void *bin[3];
	size_t size[3];
	for (int i = 0; i < 3; i++) {
		char json[256];
		snprintf(json, sizeof json, FG "\"forward\", \"dtype\": \"bf16\", \"n\": 3072, \"k\": 2048%s}", tiles[i]);
		lg_spec *s = NULL;
		struct lg_plan p;
		if (lg_spec_parse(json, &s) != LG_OK || lg_plan_for(s, &t, &p) != LG_OK ||
		    lg_ctx_cubin(c, s, &bin[i], &size[i]) != LG_OK)
			fail_msg("%s: %s", json, lg_last_error());
		assert_int_equal(p.sass_ffma, mode[i]);
		lg_spec_free(s);
	}
	assert_int_equal(size[1], size[2]);
	uint8_t *mine = malloc(size[1]);
	assert_non_null(mine);
	memcpy(mine, bin[1], size[1]);
	struct lg_sass_stats st;
	assert_int_equal(lg_sass_ffma_yield(mine, size[1], LG_SASS_FFMA_HALF, &st), LG_OK);
	assert_true(st.changed >= 1);
	const uint8_t *theirs = bin[2];
	unsigned names = 0;
	for (size_t i = 0; i < size[1]; i++)
		if (mine[i] != theirs[i]) {
			if (mine[i] != '0' || theirs[i] != '2' || i < 4 || memcmp(theirs + i - 3, "_tf", 3))
				fail_msg("byte %zu: 0x%02x in tile.ffma 0's cubin rewritten, 0x%02x in tile.ffma 2's", i,
					 mine[i], theirs[i]);
			names++;
		}
	assert_true(names >= 1);
	free(mine);
	lg_ctx_destroy(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rewrites_only_ffma_flags),
		cmocka_unit_test(test_refuses_broken_cubins),
		cmocka_unit_test(test_context_applies_the_tile),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
