/*
 * test_sass_wgmma.c - the sm_90a GEMM path is what the hardware runs: the
 * router GEMM forward for sm_90a, compiled by NVRTC (no GPU), disassembled
 * by `cuobjdump -sass` (PATH, else /usr/local/cuda/bin), shows HGMMA (the
 * warpgroup MMA), UTMALDG (TMA loads) and no local memory (spills), at the
 * target shape (two consumer warpgroups, 128x128) and a 64x256 tile at odd
 * sizes in clusters of 2 (UTMALDG.2D.MULTICAST); the sm_80 build of the same spec has no HGMMA. Exits with 77
 * (ctest: skipped), saying why, when cuobjdump (or its nvdisasm) is missing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "generate.h"
#include "nvrtc.h"
#include "spec.h"
#include "testutil.h"

static char cuobjdump[512];

/* The cuobjdump to use, or false. */
static bool find_cuobjdump(void)
{
	const char *path = getenv("PATH");
	while (path && *path) {
		const char *end = strchr(path, ':');
		size_t n = end ? (size_t)(end - path) : strlen(path);
		snprintf(cuobjdump, sizeof cuobjdump, "%.*s/cuobjdump", (int)n, path);
		if (n && access(cuobjdump, X_OK) == 0)
			return true;
		path = end ? end + 1 : NULL;
	}
	snprintf(cuobjdump, sizeof cuobjdump, "/usr/local/cuda/bin/cuobjdump");
	return access(cuobjdump, X_OK) == 0;
}

/* The SASS of spec `json` for arch (cuobjdump's output, 2>&1); NULL when
 * cuobjdump cannot disassemble (nvdisasm missing: *skip set). */
static char *sass_of(const char *json, const char *arch, bool *skip)
{
	lg_spec *s = NULL;
	if (lg_spec_parse(json, &s) != LG_OK)
		fail_msg("%s: %s", json, lg_last_error());
	struct lg_target t;
	assert_true(lg_target_parse(arch, &t));
	struct lg_plan p;
	char *src = NULL;
	assert_int_equal(lg_generate_for(s, &t, &p, &src, NULL), LG_OK);
	void *cubin = NULL;
	char *log = NULL;
	size_t size = 0;
	if (lg_nvrtc_compile(src, lg_spec_entry(s), arch, &cubin, &size, &log) != LG_OK)
		fail_msg("compile %s for %s: %s", lg_spec_entry(s), arch, lg_last_error());
	char file[] = "/tmp/lingen-sass-XXXXXX";
	int fd = mkstemp(file);
	assert_true(fd >= 0);
	FILE *f = fdopen(fd, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(cubin, 1, size, f), size);
	fclose(f);
	char cmd[1200];
	snprintf(cmd, sizeof cmd, "'%s' -sass '%s' 2>&1", cuobjdump, file);
	FILE *pipe = popen(cmd, "r");
	assert_non_null(pipe);
	size_t cap = 1 << 20, len = 0;
	char *out = malloc(cap);
	assert_non_null(out);
	for (size_t got; (got = fread(out + len, 1, cap - 1 - len, pipe)) > 0;) {
		len += got;
		if (len + 1 == cap) {
			cap *= 2;
			out = realloc(out, cap);
			assert_non_null(out);
		}
	}
	out[len] = '\0';
	int rc = pclose(pipe);
	unlink(file);
	free(cubin);
	free(log);
	free(src);
	lg_spec_free(s);
	if (rc != 0 && strstr(out, "nvdisasm")) {
		printf("SKIP test_sass_wgmma: %s cannot disassemble: %s", cuobjdump, out);
		*skip = true;
		free(out);
		return NULL;
	}
	if (rc != 0)
		fail_msg("%s failed (%d):\n%s", cmd, rc, out);
	return out;
}

static const char *const specs[] = {
	"{\"op\": \"router_gemm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, \"experts\": 256}",
	"{\"op\": \"router_gemm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 1000, \"experts\": 97, "
	"\"tile\": {\"m\": 64, \"n\": 256, \"stages\": 4, \"cluster\": 2}}",
};
static const char *const shapes[] = {"HGMMA.64x128x16.F32.BF16", "HGMMA.64x256x16.F32.BF16"};

static void test_hgmma(void **state)
{
	bool *skip = *state;
	for (int i = 0; i < 2 && !*skip; i++) {
		char *sass = sass_of(specs[i], "sm_90a", skip);
		if (!sass)
			return;
		if (!strstr(sass, shapes[i]) || !strstr(sass, "UTMALDG") || strstr(sass, "STL") ||
		    strstr(sass, "LDL") || !strstr(sass, "UTMALDG.2D.MULTICAST") != (i == 0))
			fail_msg("spec %s for sm_90a: want %s and UTMALDG (multicast with a cluster), no STL / LDL; "
				 "the SASS:\n%.4000s", specs[i], shapes[i], sass);
		free(sass);
		if (i > 0)
			continue; /* clusters are for sm_90a */
		sass = sass_of(specs[i], "sm_80", skip);
		if (!sass)
			return;
		assert_null(strstr(sass, "HGMMA"));
		assert_non_null(strstr(sass, "HMMA"));
		free(sass);
	}
}

int main(void)
{
	if (!find_cuobjdump()) {
		printf("SKIP test_sass_wgmma: no cuobjdump on PATH or in /usr/local/cuda/bin\n");
		return LG_TEST_SKIP;
	}
	bool skip = false;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_prestate(test_hgmma, &skip),
	};
	int failed = cmocka_run_group_tests(tests, NULL, NULL);
	return failed ? failed : skip ? LG_TEST_SKIP : 0;
}
