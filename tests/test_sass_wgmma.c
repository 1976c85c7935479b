/*
 * test_sass_wgmma.c - the sm_90a GEMM path is what the hardware runs: the
 * router GEMM (forward and backward) and the fused RMSNorm + router GEMM
 * (K3b) for sm_90a, compiled by NVRTC (no GPU), disassembled by
 * `cuobjdump -sass` (PATH, else /usr/local/cuda/bin), show HGMMA (the
 * warpgroup MMA) of each width their kernels use, UTMALDG (TMA loads) and
 * no local memory (spills): the forward at the target shape (two consumer
 * warpgroups, 128x128) and a 64x256 tile at odd sizes in clusters of 2
 * (UTMALDG.2D.MULTICAST), the backward's _dx and _dw at the target and at
 * odd sizes (bf16x3), K3b at the target and odd sizes (clusters of 2);
 * the sm_80 build of each unclustered spec has HMMA, no HGMMA. The FP8
 * GEMMs' defaults (dense forward, dgrad and wgrad, grouped forward) show
 * QGMMA (the dense wgrad's default may spill: measured faster so; its
 * 256-row tiles may not). No kernel has a generic load or store (LD.E / ST.E): every shared
 * memory access is LDS / STS, every global one LDG / STG (a pointer whose
 * space NVVM lost made the FP8 GEMMs' scale reads generic loads on the long
 * scoreboard until the eleventh session). Exits with 77
 * (ctest: skipped), saying why, when cuobjdump (or its nvdisasm) is missing.
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
#include "spec.h"
#include "testutil.h"

static char cuobjdump[512];

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
	FILE *pipe = lg_test_sass_open(cuobjdump, cubin, size);
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
	int rc = lg_test_sass_close(pipe);
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
		fail_msg("%s -sass failed (%d):\n%s", cuobjdump, rc, out);
	return out;
}

#define RG "{\"op\": \"router_gemm\", \"dtype\": \"bf16\", \"pass\": "
#define RR "{\"op\": \"rmsnorm_router\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
#define QUANT "\"quant\": {\"format\": \"e4m3\", \"block\": 128}"
#define FG "{\"op\": \"fp8_gemm\", \"pass\": "
#define QG "QGMMA.64x128x32.F32.E4M3.E4M3"

/* Each spec of the emitter's sm_90a path: the HGMMA shapes its kernels
 * must show (every wgmma width the generated source names) and whether its
 * TMA loads multicast (a cluster). */
static const struct {
	const char *json;
	const char *hgmma[2];
	bool multicast;
	bool sm90_only; /* the family runs on sm_90a alone */
	/* local memory allowed: the dense wgrad's default spills in its
	 * consumers (24 bytes at n 2048 k 2880, ptxas), the form measured faster
	 * than the spill-free one (bench/fp8-gemm.md, seventeenth session) */
	bool spills;
} specs[] = {
	/* the forward at the target: two consumer warpgroups, 128x128 */
	{RG "\"forward\", \"hidden\": 2048, \"experts\": 256}", {"HGMMA.64x128x16.F32.BF16", NULL}, false, false, false},
	/* a 64x256 tile at odd sizes in clusters of 2 */
	{RG "\"forward\", \"hidden\": 1000, \"experts\": 97, \"tile\": {\"m\": 64, \"n\": 256, \"stages\": 4, "
	    "\"cluster\": 2}}",
	 {"HGMMA.64x256x16.F32.BF16", NULL},
	 true,
	 false,
	 false},
	/* the backward: _dx 256 features wide, _dw 128 (dy's bf16 planes, MN-major w and x) */
	{RG "\"backward\", \"hidden\": 2048, \"experts\": 256}",
	 {"HGMMA.64x256x16.F32.BF16", "HGMMA.64x128x16.F32.BF16"},
	 false,
	 false,
	 false},
	{RG "\"backward\", \"hidden\": 1000, \"experts\": 160, \"precision\": \"bf16x3\"}",
	 {"HGMMA.64x256x16.F32.BF16", "HGMMA.64x128x16.F32.BF16"},
	 false,
	 false,
	 false},
	/* K3b: y made in shared memory, route_w multicast in clusters of 2 */
	{RR "\"hidden\": 2048, \"experts\": 256, " QUANT "}", {"HGMMA.64x128x16.F32.BF16", NULL}, true, false, false},
	{RR "\"hidden\": 1000, \"experts\": 97, \"precision\": \"bf16x3\", " QUANT "}",
	 {"HGMMA.64x56x16.F32.BF16", NULL},
	 true,
	 false,
	 false},
	/* the FP8 GEMMs' defaults: dense forward and dgrad in clusters of 2, the wgrad, the grouped forward */
	{FG "\"forward\", \"dtype\": \"bf16\", \"n\": 3072, \"k\": 2048}", {QG, NULL}, true, true, false},
	{FG "\"dgrad\", \"dtype\": \"bf16\", \"n\": 3072, \"k\": 2048}", {QG, NULL}, true, true, false},
	{FG "\"wgrad\", \"dtype\": \"fp32\", \"n\": 2048, \"k\": 2880}", {QG, NULL}, false, true, true},
	/* its 256-row tiles (40 / 232 registers): none */
	{FG "\"wgrad\", \"dtype\": \"fp32\", \"n\": 2048, \"k\": 2880, \"tile\": {\"m\": 256, \"epilogue\": 1}}",
	 {QG, NULL},
	 false,
	 true,
	 false},
	{"{\"op\": \"fp8_grouped_gemm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"n\": 1024, \"k\": 2048, "
	 "\"experts\": 256}",
	 {QG, NULL},
	 false,
	 true,
	 false},
};

static void test_hgmma(void **state)
{
	bool *skip = *state;
	for (size_t i = 0; i < sizeof specs / sizeof specs[0] && !*skip; i++) {
		char *sass = sass_of(specs[i].json, "sm_90a", skip);
		if (!sass)
			return;
		bool ok = strstr(sass, "UTMALDG") && (specs[i].spills || (!strstr(sass, "STL") && !strstr(sass, "LDL"))) &&
			  !strstr(sass, " LD.E") && !strstr(sass, " ST.E") &&
			  !strstr(sass, "UTMALDG.2D.MULTICAST") == !specs[i].multicast;
		for (int h = 0; h < 2; h++)
			ok = ok && (!specs[i].hgmma[h] || strstr(sass, specs[i].hgmma[h]));
		if (!ok)
			fail_msg("spec %s for sm_90a: want %s%s%s and UTMALDG (%s), no STL / LDL (unless allowed), no generic LD.E / "
				 "ST.E; the SASS:\n%.4000s",
				 specs[i].json, specs[i].hgmma[0], specs[i].hgmma[1] ? ", " : "",
				 specs[i].hgmma[1] ? specs[i].hgmma[1] : "",
				 specs[i].multicast ? "multicast: a cluster" : "not multicast", sass);
		free(sass);
		if (specs[i].multicast || specs[i].sm90_only)
			continue; /* clusters are for sm_90a */
		sass = sass_of(specs[i].json, "sm_80", skip);
		if (!sass)
			return;
		if (strstr(sass, "HGMMA") || !strstr(sass, "HMMA"))
			fail_msg("spec %s for sm_80: want HMMA (mma.sync), no HGMMA", specs[i].json);
		free(sass);
	}
}

int main(void)
{
	if (!lg_test_cuobjdump(cuobjdump, sizeof cuobjdump)) {
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
