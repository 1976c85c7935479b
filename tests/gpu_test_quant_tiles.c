/*
 * gpu_test_quant_tiles.c - every tile `lingen tune` tries for the quantiser
 * engine's families and the plain norms (issue 9), on the GPU against the
 * CPU reference (label "gpu"): the candidates each family gives for the
 * context's target (the H200: sm_90a), taken from the family itself, so a
 * candidate added later is checked too. rmsnorm_quant, rmsnorm (forward,
 * backward), fp8_quant, fp8_quant_batched, fp8_quant_weight, swiglu_quant
 * and batch_swiglu_quant (forward, backward), each at its target shape and
 * an odd one. Every output passes its comparison with nothing unwritten;
 * the standalone quantisers (whose values are the bf16 input) bit for bit.
 * `lingen tune` keeps only a candidate that passes its check, so a wrong
 * candidate costs no wrong result there; this test says which one is wrong
 * before a tuning run does.
 * Exits with LG_TEST_SKIP (ctest: skipped), saying why, when there is no
 * CUDA device or driver; random inputs print their seed (LINGEN_SEED replays).
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

#include "context.h"
#include "cuda.h"
#include "family.h"
#include "harness.h"
#include "spec.h"
#include "testutil.h"

static lg_ctx *ctx;
static uint64_t seed;

/* One kernel (v: a candidate) at sizes sz: every output passes, nothing
 * unwritten, and with exact no mismatch at all. */
static void check(const struct lg_spec *v, const int64_t *sz, bool exact)
{
	struct lg_check_opts o = {.tokens = sz[0], .sizes = sz, .seed = seed + (uint64_t)sz[0] * 7919u};
	struct lg_check_result r;
	if (lg_check_kernel(ctx, v, &o, &r) != LG_OK)
		fail_msg("%s at %lld: %s", v->entry, (long long)sz[0], lg_last_error());
	bool ok = r.pass && r.nmeasures > 0;
	for (int i = 0; i < r.nmeasures; i++)
		ok = ok && r.m[i].unwritten == 0 && (!exact || r.m[i].mismatches == 0);
	printf("%s M=%lld: %s\n", v->entry, (long long)sz[0], ok ? "PASS" : "FAIL");
	if (!ok)
		for (int i = 0; i < r.nmeasures; i++)
			printf("  %-6s %-5s n=%llu max_rel=%.3g mismatches=%llu unwritten=%llu %s\n", r.m[i].name,
			       r.m[i].kind, (unsigned long long)r.m[i].count, r.m[i].max_rel,
			       (unsigned long long)r.m[i].mismatches, (unsigned long long)r.m[i].unwritten,
			       r.m[i].pass ? "ok" : "FAIL");
	assert_true(ok);
}

/* Every candidate of the base spec (op, pass, keys) at each size pair. */
static void every_candidate(const char *op, const char *pass, const char *keys, const int64_t (*sz)[2], size_t nsz)
{
	char json[512];
	snprintf(json, sizeof json, "{\"op\": \"%s\", \"pass\": \"%s\", \"dtype\": \"bf16\", %s}", op, pass, keys);
	lg_spec *s = NULL;
	if (lg_spec_parse(json, &s) != LG_OK)
		fail_msg("%s: %s", json, lg_last_error());
	const struct lg_family *f = lg_family_get(s->op);
	struct lg_tile_choice c[LG_MAX_CANDIDATES];
	int n = f->candidates ? f->candidates(s, &ctx->target, c, LG_MAX_CANDIDATES) : 0;
	printf("%s: %d candidates for %s\n", s->entry, n, ctx->target.name);
	assert_true(n > 0);
	const bool exact = !strncmp(op, "fp8_quant", 9);
	for (int i = 0; i < n; i++) {
		struct lg_spec v;
		if (lg_spec_with_tile(s, &c[i], &v) != LG_OK)
			fail_msg("%s: candidate %d: %s", s->entry, i, lg_last_error());
		for (size_t k = 0; k < nsz; k++)
			check(&v, sz[k], exact);
	}
	lg_spec_free(s);
}

#define POW2 "\"quant\": {\"round_scale\": true}"
#define EXACT "\"quant\": {\"round_scale\": false}"
#define N(a) (sizeof(a) / sizeof((a)[0]))

static void test_rmsnorm_quant(void **state)
{
	(void)state;
	static const int64_t sz[][2] = {{8192}, {333}};
	every_candidate("rmsnorm_quant", "forward", "\"hidden\": 2048, " POW2, sz, N(sz));
	every_candidate("rmsnorm_quant", "forward", "\"hidden\": 1152, " EXACT, sz + 1, 1);
}

static void test_rmsnorm(void **state)
{
	(void)state;
	static const int64_t sz[][2] = {{8192}, {333}};
	every_candidate("rmsnorm", "forward", "\"hidden\": 2048", sz, N(sz));
	every_candidate("rmsnorm", "backward", "\"hidden\": 2048", sz, N(sz));
	every_candidate("rmsnorm", "forward", "\"hidden\": 4096", sz, N(sz));
	every_candidate("rmsnorm", "backward", "\"hidden\": 1000", sz + 1, 1);
}

static void test_fp8_quant(void **state)
{
	(void)state;
	static const int64_t sz[][2] = {{8192}, {333}};
	every_candidate("fp8_quant", "forward", "\"hidden\": 2048, " POW2, sz, N(sz));
	every_candidate("fp8_quant", "forward", "\"hidden\": 384, " EXACT, sz + 1, 1);
	static const int64_t ex[][2] = {{65536, 256}, {1000, 96}};
	every_candidate("fp8_quant_batched", "forward", "\"hidden\": 1024, " POW2, ex, N(ex));
	every_candidate("fp8_quant_batched", "forward", "\"hidden\": 384, " EXACT, ex + 1, 1);
	static const int64_t rows[][2] = {{2048}, {2049}};
	every_candidate("fp8_quant_weight", "forward", "\"hidden\": 2048, " POW2, rows, N(rows));
	every_candidate("fp8_quant_weight", "forward", "\"hidden\": 384, " EXACT, rows + 1, 1);
}

static void test_swiglu_quant(void **state)
{
	(void)state;
	static const int64_t sz[][2] = {{8192}, {333}};
	every_candidate("swiglu_quant", "forward", "\"intermediate\": 512, " POW2, sz, N(sz));
	every_candidate("swiglu_quant", "backward", "\"intermediate\": 512, " POW2, sz, N(sz));
	every_candidate("swiglu_quant", "forward", "\"intermediate\": 2048, " EXACT, sz + 1, 1);
}

static void test_batch_swiglu_quant(void **state)
{
	(void)state;
	static const int64_t sz[][2] = {{65536}, {1000}};
	every_candidate("batch_swiglu_quant", "forward", "\"intermediate\": 512, \"experts\": 256, " POW2, sz, N(sz));
	every_candidate("batch_swiglu_quant", "backward", "\"intermediate\": 512, \"experts\": 256, " POW2, sz, N(sz));
	every_candidate("batch_swiglu_quant", "backward", "\"intermediate\": 384, \"experts\": 96, " EXACT, sz + 1, 1);
}

int main(void)
{
	lg_test_require_gpu("gpu_test_quant_tiles");
	seed = lg_test_seed("gpu_test_quant_tiles");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rmsnorm_quant),
		cmocka_unit_test(test_rmsnorm),
		cmocka_unit_test(test_fp8_quant),
		cmocka_unit_test(test_swiglu_quant),
		cmocka_unit_test(test_batch_swiglu_quant),
	};
	return LG_TEST_RUN_GPU(tests, &ctx);
}
