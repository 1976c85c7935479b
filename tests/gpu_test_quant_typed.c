/*
 * gpu_test_quant_typed.c - the typed launchers of include/lingen.h of the
 * quantiser engine's families and the plain norms (issue 9) on the GPU
 * (label "gpu"): rmsnorm_quant, rmsnorm (forward, backward), fp8_quant,
 * fp8_quant_batched, fp8_quant_weight, swiglu_quant and batch_swiglu_quant
 * (forward, backward).
 * Each typed launcher, given a case's pointers in the family's declared
 * order, writes the bytes of the generic launch (lg_kernel_run, which the
 * families' own GPU tests check against the references) at odd sizes,
 * every output poisoned before each launch: this checks the launcher's
 * argument order and sizes, and that a second launch gives the same bits
 * (rmsnorm's dw, batch_swiglu_quant's dprob: deterministic). Each launcher
 * also refuses a kernel of another op or pass, naming the op it takes.
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

#include "cuda.h"
#include "gpu.h"
#include "gputest.h"
#include "harness.h"
#include "testutil.h"

static lg_ctx *ctx;
static uint64_t seed;

/* The typed launchers on a case's pointers p (the family's declared order;
 * 0 where the spec uses none) and sizes z. */
typedef lg_status (*typed_fn)(const lg_kernel *k, const int64_t *z, const lg_dptr *p);

static lg_status rmsnorm_quant(const lg_kernel *k, const int64_t *z, const lg_dptr *p)
{
	return lg_rmsnorm_quant_forward(k, NULL, z[0], p[0], p[1], p[2], p[3], p[4], p[5], p[6]);
}

static lg_status rmsnorm_fwd(const lg_kernel *k, const int64_t *z, const lg_dptr *p)
{
	return lg_rmsnorm_forward(k, NULL, z[0], p[0], p[1], p[2], p[3]);
}

static lg_status rmsnorm_bwd(const lg_kernel *k, const int64_t *z, const lg_dptr *p)
{
	return lg_rmsnorm_backward(k, NULL, z[0], p[0], p[1], p[2], p[3], p[4], p[5], p[6]);
}

static lg_status fp8_quant(const lg_kernel *k, const int64_t *z, const lg_dptr *p)
{
	return lg_fp8_quant_forward(k, NULL, z[0], p[0], p[1], p[2], p[3], p[4]);
}

static lg_status fp8_quant_batched(const lg_kernel *k, const int64_t *z, const lg_dptr *p)
{
	return lg_fp8_quant_batched_forward(k, NULL, z[0], z[1], p[0], p[1], p[2], p[3], p[4], p[5]);
}

static lg_status fp8_quant_weight(const lg_kernel *k, const int64_t *z, const lg_dptr *p)
{
	return lg_fp8_quant_weight_forward(k, NULL, z[0], p[0], p[1], p[2], p[3], p[4]);
}

static lg_status swiglu_fwd(const lg_kernel *k, const int64_t *z, const lg_dptr *p)
{
	return lg_swiglu_quant_forward(k, NULL, z[0], p[0], p[1], p[2], p[3], p[4]);
}

static lg_status swiglu_bwd(const lg_kernel *k, const int64_t *z, const lg_dptr *p)
{
	return lg_swiglu_quant_backward(k, NULL, z[0], p[0], p[1], p[2], p[3], p[4], p[5], p[6]);
}

static lg_status batch_swiglu_fwd(const lg_kernel *k, const int64_t *z, const lg_dptr *p)
{
	return lg_batch_swiglu_quant_forward(k, NULL, z[0], p[0], p[1], p[2], p[3], p[4], p[5], p[6]);
}

static lg_status batch_swiglu_bwd(const lg_kernel *k, const int64_t *z, const lg_dptr *p)
{
	return lg_batch_swiglu_quant_backward(k, NULL, z[0], p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8],
					      p[9]);
}

struct typed_case {
	const char *op, *pass, *keys;
	int64_t sizes[2]; /* the run-time sizes (tokens / rows; experts) */
	typed_fn fn;
};

#define POW2 "\"quant\": {\"round_scale\": true}"
#define EXACT "\"quant\": {\"round_scale\": false}"

static const struct typed_case cases[] = {
	{"rmsnorm_quant", "forward", "\"hidden\": 2048, " POW2, {333}, rmsnorm_quant},
	{"rmsnorm_quant", "forward", "\"hidden\": 384, \"quant\": {\"round_scale\": false, \"output\": \"rowwise\"}",
	 {129}, rmsnorm_quant},
	{"rmsnorm_quant", "forward", "\"hidden\": 2048, " POW2 ", \"tile\": {\"slab\": 256}", {333}, rmsnorm_quant},
	{"rmsnorm", "forward", "\"hidden\": 2048", {333}, rmsnorm_fwd},
	{"rmsnorm", "forward", "\"hidden\": 1000", {4099}, rmsnorm_fwd},
	{"rmsnorm", "backward", "\"hidden\": 2048", {8192}, rmsnorm_bwd},
	{"rmsnorm", "backward", "\"hidden\": 1000", {4099}, rmsnorm_bwd},
	{"fp8_quant", "forward", "\"hidden\": 2048, " POW2, {333}, fp8_quant},
	{"fp8_quant", "forward", "\"hidden\": 384, \"quant\": {\"round_scale\": false, \"output\": \"columnwise\"}",
	 {129}, fp8_quant},
	{"fp8_quant_batched", "forward", "\"hidden\": 1024, " POW2, {1000, 96}, fp8_quant_batched},
	{"fp8_quant_batched", "forward", "\"hidden\": 384, \"quant\": {\"round_scale\": false, \"output\": \"rowwise\"}",
	 {333, 5}, fp8_quant_batched},
	{"fp8_quant_weight", "forward", "\"hidden\": 2048, " POW2, {2049}, fp8_quant_weight},
	{"fp8_quant_weight", "forward", "\"hidden\": 384, " EXACT, {129}, fp8_quant_weight},
	{"swiglu_quant", "forward", "\"intermediate\": 512, " POW2, {333}, swiglu_fwd},
	{"swiglu_quant", "forward", "\"intermediate\": 384, \"quant\": {\"output\": \"columnwise\"}", {129}, swiglu_fwd},
	{"swiglu_quant", "backward", "\"intermediate\": 512, " POW2, {333}, swiglu_bwd},
	{"swiglu_quant", "backward", "\"intermediate\": 384, \"dx_bf16\": true, " EXACT, {129}, swiglu_bwd},
	{"batch_swiglu_quant", "forward", "\"intermediate\": 512, \"experts\": 96, " POW2, {1000}, batch_swiglu_fwd},
	{"batch_swiglu_quant", "forward", "\"intermediate\": 256, \"experts\": 160, " EXACT, {20000}, batch_swiglu_fwd},
	{"batch_swiglu_quant", "backward", "\"intermediate\": 512, \"experts\": 256, " POW2, {65536}, batch_swiglu_bwd},
	{"batch_swiglu_quant", "backward", "\"intermediate\": 384, \"experts\": 96, \"dx_bf16\": true, " EXACT, {1000},
	 batch_swiglu_bwd},
};
#define NCASES (sizeof cases / sizeof cases[0])

static lg_spec *parse(const struct typed_case *c)
{
	return lg_test_spec(c->op, c->pass, "bf16", c->keys);
}

/* Case c: the generic launch, then (outputs poisoned again) the typed one;
 * the same bytes in every output. */
static void same_bits(const struct typed_case *c, uint64_t sd)
{
	lg_spec *s = parse(c);
	lg_kernel *k = NULL;
	if (lg_kernel_get(ctx, s, &k) != LG_OK)
		fail_msg("%s", lg_last_error());
	struct lg_gpu_case g;
	if (lg_gpu_case_init(&g, s, 0, c->sizes, sd, k) != LG_OK)
		fail_msg("%s", lg_last_error());
	assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
	assert_int_equal(lg_gpu_case_launch(&g, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	void *first[LG_MAX_ARGS] = {0};
	assert_true(lg_test_copy_outputs(&g, first) > 0);
	assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
	if (c->fn(k, c->sizes, g.ptrs) != LG_OK)
		fail_msg("%s: %s", lg_spec_entry(s), lg_last_error());
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	for (int i = 0; i < g.ref.n; i++) {
		if (!first[i])
			continue;
		const unsigned char *a = first[i], *b = g.got[i];
		size_t bytes = g.ref.buf[i].count * g.ref.buf[i].elem, at = 0;
		while (at < bytes && a[at] == b[at])
			at++;
		if (at < bytes)
			fail_msg("%s M=%lld: output %s differs between the generic and the typed launch (first at "
				 "element %zu of %zu)",
				 lg_spec_entry(s), (long long)c->sizes[0], g.ref.buf[i].name, at / g.ref.buf[i].elem,
				 (size_t)g.ref.buf[i].count);
		free(first[i]);
	}
	printf("%s M=%lld: typed launcher, the same bytes: PASS\n", lg_spec_entry(s), (long long)c->sizes[0]);
	/* the launcher of another op or pass refuses this kernel and names its own op */
	const struct typed_case *o = c;
	for (size_t j = 1; j < NCASES && (o->fn == c->fn || (!strcmp(o->op, c->op) && !strcmp(o->pass, c->pass)));
	     j++)
		o = &cases[((size_t)(c - cases) + j) % NCASES];
	assert_int_equal(o->fn(k, c->sizes, g.ptrs), LG_ERR_INVALID_ARG);
	if (!strstr(lg_last_error(), "this launcher takes") || !strstr(lg_last_error(), o->op))
		fail_msg("%s given to the %s %s launcher: \"%s\"", lg_spec_entry(s), o->op, o->pass, lg_last_error());
	lg_gpu_case_free(&g);
	lg_spec_free(s);
}

static void test_typed_launchers(void **state)
{
	(void)state;
	for (size_t c = 0; c < NCASES; c++)
		same_bits(&cases[c], seed + c);
}

int main(void)
{
	lg_test_require_gpu("gpu_test_quant_typed");
	seed = lg_test_seed("gpu_test_quant_typed");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_typed_launchers),
	};
	return LG_TEST_RUN_GPU(tests, &ctx);
}
