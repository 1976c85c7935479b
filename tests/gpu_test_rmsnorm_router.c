/*
 * gpu_test_rmsnorm_router.c - RMSNorm + router GEMM + rowwise FP8 in one
 * pass (family rmsnorm_router, docs/kernels.md K3b) on the GPU against the CPU
 * reference (label "gpu"): y, rms, q, s (and qt, st with quant.output
 * "both") bit for bit, the logits within router_gemm's forward tolerance,
 * at the target shape (x [8192, 2048], 256 experts) and at sizes that are
 * multiples of nothing (M = 1, 127, 8191; hidden 7168, 1000 (a partial last
 * quant block), 8; experts 96, 160, 1, 300 (two column tiles)), each
 * precision, exact and power-of-two scales, the tiles `lingen tune` sweeps,
 * 0 tokens, and through the typed launcher. Fresh random inputs, poisoned
 * outputs, nothing left unwritten.
 * Exits with LG_TEST_SKIP (ctest: skipped), saying why, when there is no
 * CUDA device or driver; random inputs print their seed (LINGEN_SEED replays).
 * Since issue 37 the cases that are one lg_check_kernel each (every spec
 * and size above checked against the reference alone) are data: tests/cases/
 * rmsnorm_router.json, run by gpu_test_families; what stays here is
 * what that check cannot say.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cuda.h"
#include "gpu.h"
#include "gputest.h"
#include "harness.h"
#include "testutil.h"

static lg_ctx *ctx;
static uint64_t seed;

enum { X, W, RW, Y, RMS, LOGITS, Q, S, QT, ST };

static lg_spec *parse(const char *keys)
{
	return lg_test_spec("rmsnorm_router", "forward", "bf16", keys);
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

#define ROWWISE "\"quant\": {\"output\": \"rowwise\"}"
#define BOTH "\"quant\": {\"output\": \"both\"}"

/* The typed launcher gives what the harness's launch gave, and refuses
 * another op's kernel. */
static void test_typed_launcher(void **state)
{
	(void)state;
	lg_spec *s = parse("\"hidden\": 2048, \"experts\": 256, " BOTH);
	lg_kernel *k;
	if (lg_kernel_get(ctx, s, &k) != LG_OK)
		fail_msg("%s", lg_last_error());
	const int64_t sizes[1] = {1000};
	struct lg_gpu_case g;
	if (lg_gpu_case_init(&g, s, 1000, sizes, seed, k) != LG_OK)
		fail_msg("%s", lg_last_error());
	assert_int_equal(lg_gpu_case_launch(&g, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	void *first[10];
	size_t bytes[10];
	for (int i = Y; i <= ST; i++) {
		bytes[i] = g.ref.buf[i].count * g.ref.buf[i].elem;
		first[i] = malloc(bytes[i] + 1);
		assert_non_null(first[i]);
		memcpy(first[i], g.got[i], bytes[i]);
	}
	assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
	const lg_dptr *p = g.ptrs;
	if (lg_rmsnorm_router_forward(k, NULL, 1000, p[X], p[W], p[RW], p[Y], p[RMS], p[LOGITS], p[Q], p[S], p[QT],
				      p[ST]) != LG_OK)
		fail_msg("%s", lg_last_error());
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	for (int i = Y; i <= ST; i++) {
		if (memcmp(first[i], g.got[i], bytes[i]) != 0)
			fail_msg("%s differs between the harness's launch and the typed launcher", g.ref.buf[i].name);
		free(first[i]);
	}
	lg_spec *f = NULL;
	assert_int_equal(lg_spec_parse("{\"op\": \"router_gemm\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
				       "\"hidden\": 2048, \"experts\": 256}",
				       &f),
			 LG_OK);
	lg_kernel *kf;
	assert_int_equal(lg_kernel_get(ctx, f, &kf), LG_OK);
	assert_int_equal(lg_rmsnorm_router_forward(kf, NULL, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), LG_ERR_INVALID_ARG);
	lg_spec_free(f);
	lg_gpu_case_free(&g);
	lg_spec_free(s);
}

int main(void)
{
	lg_test_require_gpu("gpu_test_rmsnorm_router");
	seed = lg_test_seed("gpu_test_rmsnorm_router");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_typed_launcher),
	};
	return LG_TEST_RUN_GPU(tests, &ctx);
}
