/*
 * gputest.c - the GPU tests' shared helpers (gputest.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gputest.h"
#include "numeric_ref.h"

bool lg_test_written(const struct lg_check_result *r, bool start)
{
	bool written = start;
	for (int i = 0; i < r->nmeasures; i++)
		written = written && r->m[i].unwritten == 0;
	return written;
}

void lg_test_print_measures(const struct lg_check_result *r, int width)
{
	for (int i = 0; i < r->nmeasures; i++)
		printf("  %-*s %-5s n=%llu max_rel=%.3g rel_l2=%.3g mismatches=%llu unwritten=%llu %s\n", width,
		       r->m[i].name, r->m[i].kind, (unsigned long long)r->m[i].count, r->m[i].max_rel, r->m[i].rel_l2,
		       (unsigned long long)r->m[i].mismatches, (unsigned long long)r->m[i].unwritten,
		       r->m[i].pass ? "ok" : "FAIL");
}

int lg_test_copy_outputs(const struct lg_gpu_case *g, void *first[LG_MAX_ARGS])
{
	int n = 0;
	for (int i = 0; i < g->ref.n; i++) {
		size_t bytes = g->ref.buf[i].count * g->ref.buf[i].elem;
		if (!g->ref.buf[i].output || !g->got[i] || !bytes)
			continue;
		first[i] = malloc(bytes);
		assert_non_null(first[i]);
		memcpy(first[i], g->got[i], bytes);
		n++;
	}
	return n;
}

void lg_test_accumulate(lg_ctx *ctx, const lg_spec *s, int64_t tokens, int out, uint64_t seed)
{
	lg_kernel *k;
	assert_int_equal(lg_kernel_get(ctx, s, &k), LG_OK);
	struct lg_gpu_case g;
	assert_int_equal(lg_gpu_case_init(&g, s, tokens, NULL, seed, k), LG_OK);
	size_t count = g.ref.buf[out].count, bytes = count * 4;
	assert_int_equal(g.cu->cuMemsetD8(g.dev[out], 0, bytes), CUDA_SUCCESS);
	assert_int_equal(lg_gpu_case_launch(&g, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	float *first = malloc(bytes + 1);
	assert_non_null(first);
	memcpy(first, g.got[out], bytes);
	struct lg_check_result r;
	lg_gpu_case_check(&g, s, NULL, 8, stdout, &r);
	assert_true(r.pass);
	assert_int_equal(lg_gpu_case_launch(&g, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	const float *second = g.got[out];
	size_t bad = 0;
	for (size_t i = 0; i < count; i++)
		bad += second[i] != 2.0f * first[i];
	printf("%s at %lld tokens: accumulate: %zu of %zu not exactly doubled\n", lg_spec_entry(s), (long long)tokens,
	       bad, count);
	assert_int_equal(bad, 0);
	free(first);
	lg_gpu_case_free(&g);
}

void lg_test_bf16_exact(lg_ctx *ctx, const lg_spec *s16, const lg_spec *s32, int64_t tokens, int out, uint64_t seed)
{
	const lg_spec *s[2] = {s16, s32};
	lg_kernel *k[2];
	struct lg_gpu_case g[2];
	for (int i = 0; i < 2; i++) {
		assert_int_equal(lg_kernel_get(ctx, s[i], &k[i]), LG_OK);
		assert_int_equal(lg_gpu_case_init(&g[i], s[i], tokens, NULL, seed, k[i]), LG_OK);
		assert_int_equal(lg_gpu_case_poison(&g[i]), LG_OK);
		assert_int_equal(lg_gpu_case_launch(&g[i], k[i], NULL), LG_OK);
		assert_int_equal(lg_gpu_case_download(&g[i]), LG_OK);
	}
	/* the same inputs: the two specs differ in the output's type alone */
	for (int a = 0; a < g[0].ref.n; a++)
		if (!g[0].ref.buf[a].output && g[0].ref.buf[a].host)
			assert_memory_equal(g[0].ref.buf[a].host, g[1].ref.buf[a].host,
					    g[0].ref.buf[a].count * g[0].ref.buf[a].elem);
	size_t count = g[0].ref.buf[out].count, bad = 0, nan = 0;
	const uint16_t *h = g[0].got[out];
	const float *f = g[1].got[out];
	for (size_t i = 0; i < count; i++) {
		bad += h[i] != lg_ref_f32_to_bf16(f[i]);
		nan += f[i] != f[i];
	}
	printf("%s at %lld tokens: bf16 output: %zu of %zu differ from the fp32 output rounded to nearest, %zu NaN\n",
	       lg_spec_entry(s16), (long long)tokens, bad, count, nan);
	assert_int_equal(bad, 0);
	assert_int_equal(nan, 0);
	for (int i = 0; i < 2; i++)
		lg_gpu_case_free(&g[i]);
}
