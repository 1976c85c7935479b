/*
 * test_golden.c - golden tests of generated source (STYLE.md 7), no GPU.
 *
 * Each case of the table below is generated with lg_generate_for and
 * compared byte for byte with tests/golden/<family>_<case>.cu; a mismatch
 * names the first differing line and shows both versions of it. Every golden
 * file is also compiled by NVRTC for its arch and must give an ELF cubin.
 *
 * When a generator change is meant to change the output, rewrite the golden
 * files and review the diff before committing it:
 *
 *     LINGEN_UPDATE_GOLDEN=1 ./build/tests/test_golden && git diff tests/golden
 *
 * With LINGEN_UPDATE_GOLDEN=1 the test writes every file whose text differs
 * (or is missing), prints which it wrote, and passes.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "generate.h"
#include "nvrtc.h"
#include "spec.h"
#include "testutil.h"

#define GOLDEN_DIR LG_SOURCE_DIR "/tests/golden"

struct golden {
	const char *name; /* tests/golden/<name>.cu */
	const char *arch;
	const char *spec;
};

static const struct golden cases[] = {
	{"rmsnorm_quant_h2048_both_pow2", "sm_90a",
	 "{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"eps\": 1e-6, \"quant\": {\"format\": \"e4m3\", \"block\": 128, \"round_scale\": true, "
	 "\"output\": \"both\"}}"},
	{"rmsnorm_quant_h384_rowwise_exact", "sm_90a",
	 "{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 384, "
	 "\"eps\": 1e-6, \"quant\": {\"format\": \"e4m3\", \"block\": 128, \"round_scale\": false, "
	 "\"output\": \"rowwise\"}}"},
	/* sm_80 has no fp8 conversion instructions: the software path */
	{"rmsnorm_quant_h1152_colwise_sm80", "sm_80",
	 "{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 1152, "
	 "\"eps\": 1e-6, \"quant\": {\"format\": \"e4m3\", \"block\": 128, \"round_scale\": true, "
	 "\"output\": \"columnwise\"}}"},
	{"fp8_quant_h2048_both_pow2", "sm_90a",
	 "{\"op\": \"fp8_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"quant\": {\"format\": \"e4m3\", \"block\": 128, \"round_scale\": true, \"output\": \"both\"}}"},
	{"fp8_quant_h384_rowwise_exact", "sm_90a",
	 "{\"op\": \"fp8_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 384, "
	 "\"quant\": {\"format\": \"e4m3\", \"block\": 128, \"round_scale\": false, \"output\": \"rowwise\"}}"},
	/* sm_80: the software e4m3 conversion */
	{"fp8_quant_h1152_colwise_sm80", "sm_80",
	 "{\"op\": \"fp8_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 1152, "
	 "\"quant\": {\"format\": \"e4m3\", \"block\": 128, \"round_scale\": true, \"output\": \"columnwise\"}}"},
	{"rmsnorm_fwd_h2048", "sm_90a",
	 "{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"eps\": 1e-6}"},
	{"rmsnorm_bwd_h5120", "sm_90a",
	 "{\"op\": \"rmsnorm\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"hidden\": 5120, "
	 "\"eps\": 1e-6}"},
};

#define NCASES (sizeof cases / sizeof cases[0])

static bool updating(void)
{
	const char *v = getenv("LINGEN_UPDATE_GOLDEN");
	return v && strcmp(v, "1") == 0;
}

static char *golden_path(const struct golden *g)
{
	char *name = NULL;
	assert_true(asprintf(&name, "%s.cu", g->name) > 0);
	char *path = lg_test_path(GOLDEN_DIR, name);
	free(name);
	return path;
}

static char *generate(const struct golden *g, size_t *len)
{
	struct lg_target t;
	assert_true(lg_target_parse(g->arch, &t));
	lg_spec *s = NULL;
	if (lg_spec_parse(g->spec, &s) != LG_OK)
		fail_msg("%s: %s", g->name, lg_last_error());
	struct lg_plan p;
	char *src = NULL;
	if (lg_generate_for(s, &t, &p, &src, len) != LG_OK)
		fail_msg("%s: generate for %s: %s", g->name, g->arch, lg_last_error());
	lg_spec_free(s);
	return src;
}

/* The line of text starting at s, without its newline, for messages. */
static int line_len(const char *s)
{
	return (int)strcspn(s, "\n");
}

/* Fail naming the first line where want and got differ (they do differ). */
static void fail_at_first_diff(const char *path, const char *want, const char *got)
{
	const char *w = want, *g = got;
	int line = 1;
	for (size_t i = 0; want[i] == got[i] && want[i]; i++) {
		if (want[i] == '\n') {
			line++;
			w = want + i + 1;
			g = got + i + 1;
		}
	}
	fail_msg("%s:%d differs from the generated source\n  golden:    %.*s\n"
		 "  generated: %.*s\n(LINGEN_UPDATE_GOLDEN=1 rewrites the golden files)",
		 path, line, line_len(w), w, line_len(g), g);
}

static void test_matches(void **state)
{
	const struct golden *g = *state;
	size_t len = 0, glen = 0;
	char *src = generate(g, &len);
	char *path = golden_path(g);
	char *want = lg_test_read_file(path, &glen);
	bool same = want && glen == len && memcmp(want, src, len) == 0;
	if (!same && updating()) {
		if (mkdir(GOLDEN_DIR, 0755) != 0 && errno != EEXIST)
			fail_msg("mkdir %s: %s", GOLDEN_DIR, strerror(errno));
		lg_test_write_file(path, src, len);
		print_message("wrote %s\n", path);
	} else if (!want) {
		fail_msg("%s: missing (LINGEN_UPDATE_GOLDEN=1 writes it)", path);
	} else if (!same) {
		fail_at_first_diff(path, want, src);
	}
	free(want);
	free(path);
	free(src);
}

static void test_compiles(void **state)
{
	const struct golden *g = *state;
	char *path = golden_path(g);
	char *src = lg_test_read_file(path, NULL);
	if (!src)
		fail_msg("%s: missing (LINGEN_UPDATE_GOLDEN=1 writes it)", path);
	void *cubin = NULL;
	size_t size = 0;
	if (lg_nvrtc_compile(src, g->name, g->arch, &cubin, &size, NULL) != LG_OK)
		fail_msg("%s for %s: %s", path, g->arch, lg_last_error());
	lg_test_assert_cubin(cubin, size);
	free(cubin);
	free(src);
	free(path);
}

int main(void)
{
	/* per case: the text matches (or is rewritten), then NVRTC compiles it */
	struct CMUnitTest tests[2 * NCASES];
	char names[2 * NCASES][96];
	for (size_t i = 0; i < NCASES; i++) {
		snprintf(names[2 * i], sizeof names[0], "%s", cases[i].name);
		snprintf(names[2 * i + 1], sizeof names[0], "%s nvrtc %s", cases[i].name,
			 cases[i].arch);
		tests[2 * i] = (struct CMUnitTest){.name = names[2 * i],
						   .test_func = test_matches,
						   .initial_state = (void *)&cases[i]};
		tests[2 * i + 1] = (struct CMUnitTest){.name = names[2 * i + 1],
						       .test_func = test_compiles,
						       .initial_state = (void *)&cases[i]};
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
