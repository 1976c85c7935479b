/*
 * test_compile.c - every kernel of every shipped spec file generates
 * deterministic source that NVRTC compiles to a cubin for sm_90a and sm_80
 * without a warning, with no GPU. Also: entry points named in the plan exist
 * in the source, and the fp8 conversion is the hardware one on sm_90a and
 * software on sm_80.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "buf.h"
#include "generate.h"
#include "nvrtc.h"
#include "spec.h"
#include "testutil.h"

static const char *const archs[] = {"sm_90a", "sm_80"};

static void compile_one(const lg_spec *s, const char *arch)
{
	struct lg_target t;
	assert_true(lg_target_parse(arch, &t));
	struct lg_plan p, p2;
	char *src = NULL, *again = NULL;
	size_t len = 0, len2 = 0;
	lg_status st = lg_generate_for(s, &t, &p, &src, &len);
	if (st != LG_OK)
		fail_msg("generate %s for %s: %s", lg_spec_entry(s), arch, lg_last_error());
	assert_int_equal(lg_generate_for(s, &t, &p2, &again, &len2), LG_OK);
	assert_int_equal(len, len2);
	assert_memory_equal(src, again, len); /* byte-deterministic */
	assert_non_null(strstr(src, "generated, do not edit"));
	for (int e = 0; e < p.nentries; e++)
		assert_non_null(strstr(src, p.entry[e]));
	if (strstr(src, "lg_e4m3x2(")) {
		bool hw = strstr(src, "asm(\"cvt.rn.satfinite.e4m3x2.f32") != NULL;
		assert_int_equal(hw, t.sm >= 89);
	}
	void *cubin = NULL;
	char *log = NULL;
	size_t size = 0;
	st = lg_nvrtc_compile(src, lg_spec_entry(s), arch, &cubin, &size, &log);
	if (st != LG_OK)
		fail_msg("compile %s for %s: %s", lg_spec_entry(s), arch, lg_last_error());
	if (log) /* e.g. a variable or helper the kernels do not use */
		fail_msg("compile %s for %s: NVRTC warns:\n%s", lg_spec_entry(s), arch, log);
	lg_test_assert_cubin(cubin, size);
	free(cubin);
	free(src);
	free(again);
}

static void test_shipped_specs_compile(void **state)
{
	(void)state;
	size_t n = 0, kernels = 0;
	char **files = lg_test_list_dir(LG_SOURCE_DIR "/configs/kernels", ".json", &n);
	assert_non_null(files);
	assert_true(n >= 1);
	for (size_t i = 0; i < n; i++) {
		lg_spec_file *f = NULL;
		if (lg_spec_file_load(files[i], &f) != LG_OK)
			fail_msg("%s", lg_last_error());
		for (size_t k = 0; k < lg_spec_file_count(f); k++, kernels++)
			for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++)
				compile_one(lg_spec_file_get(f, k), archs[a]);
		lg_spec_file_free(f);
	}
	assert_true(kernels >= 3);
	lg_test_free_list(files);
}

/* Odd and extreme shapes of K1 that the shipped files may not hold. */
static void test_k1_shapes_compile(void **state)
{
	(void)state;
	static const char *const specs[] = {
		"{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 384, \"quant\": {\"round_scale\": false, \"output\": \"rowwise\"}}",
		"{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 1152, \"quant\": {\"output\": \"columnwise\"}}",
		"{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, \"tile\": {\"threads\": 512}, \"quant\": {}}",
		"{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 16384}",
		"{\"op\": \"rmsnorm\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"hidden\": 1152}",
		"{\"op\": \"rmsnorm\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"hidden\": 128}",
	};
	for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
		lg_spec *s = NULL;
		if (lg_spec_parse(specs[i], &s) != LG_OK)
			fail_msg("%s", lg_last_error());
		for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
			compile_one(s, archs[a]);
		}
		lg_spec_free(s);
	}
}

/* Every float constant comes from lg_float_literal: a CUDA float literal
 * (a point or an exponent, then f) that reads back as the fp32 value, for
 * whole numbers too ("2f" was emitted for mscale 2 and NVRTC refused it). */
static void test_float_literals(void **state)
{
	(void)state;
	uint64_t seed = lg_test_seed("test_compile test_float_literals"), r = seed;
	const double fixed[] = {0, -0.0, 1, 2, -3, 100, 1e30, 0x1p-126, 0.1, 1e-6, 16777216, 3.4028234663852886e38};
	for (int i = 0; i < 20000; i++) {
		double v;
		if (i < (int)(sizeof fixed / sizeof fixed[0])) {
			v = fixed[i];
		} else {
			r = r * 6364136223846793005ull + 1442695040888963407ull;
			int e = (int)(r >> 58) - 32; /* 2^-32 .. 2^31, some whole */
			v = ldexp((double)(r >> 40) / (double)(1u << 24), e);
			if (i % 3 == 0)
				v = floor(v);
		}
		char t[LG_FLOAT_LITERAL_MAX], d[LG_FLOAT_LITERAL_MAX];
		lg_float_literal(v, t);
		size_t n = strlen(t);
		if (n < 2 || t[n - 1] != 'f' || !strpbrk(t, ".e") || strtof(t, NULL) != (float)v)
			fail_msg("float %.17g: literal %s", v, t);
		lg_double_literal(v, d);
		if (!strpbrk(d, ".e") || strtod(d, NULL) != v)
			fail_msg("double %.17g: literal %s", v, d);
	}
	/* the reproducers: mscale 2 (and the other whole numbers), eps at fp32's smallest normal */
	static const char *const specs[] = {
		"{\"op\": \"qk_norm_rope\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"head_dim\": 128, \"q_heads\": 16, "
		"\"kv_heads\": 4, \"mscale\": 2}",
		"{\"op\": \"qk_norm_rope\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"head_dim\": 128, \"q_heads\": 16, "
		"\"kv_heads\": 4, \"mscale\": 1e29, \"eps\": 1.1754943508222875e-38}",
		"{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, \"eps\": 1.2e-38}",
	};
	for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
		lg_spec *s = NULL;
		if (lg_spec_parse(specs[i], &s) != LG_OK)
			fail_msg("%s", lg_last_error());
		compile_one(s, "sm_80");
		lg_spec_free(s);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shipped_specs_compile),
		cmocka_unit_test(test_k1_shapes_compile),
		cmocka_unit_test(test_float_literals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
