/*
 * test_ref_parallel.c - the references and the comparison on several
 * threads give the bits of one thread (gen/ref/parallel_ref.c): for specs of
 * every family whose fill, run or comparison runs in parallel, at sizes
 * where the work is split (and at a tail), fill + run on 1 thread and on
 * 3 and 5 threads (more than this machine's cores: pieces interleave)
 * must give the same bytes in every buffer and slack; lg_compare the same
 * measures and the same report of an output with errors put in. Also
 * lg_ref_parallel_rows itself: every row once, none twice, no thread for
 * small jobs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "compare.h"
#include "generate.h"
#include "lingen.h"
#include "ref.h"
#include "testutil.h"

static uint64_t seed;

static void case_init(struct lg_ref_case *c, const lg_spec *s, const int64_t *sizes)
{
	unsigned char used[LG_MAX_ARGS];
	lg_spec_uses(s, used);
	assert_int_equal(lg_ref_case_init(c, s, sizes, used, 0), LG_OK);
	lg_ref_family_get(s->op)->describe(s, c);
	for (int i = 0; i < c->n; i++) {
		c->buf[i].host = c->buf[i].count ? calloc(c->buf[i].count, c->buf[i].elem) : NULL;
		assert_true(!c->buf[i].count || c->buf[i].host);
	}
}

static void case_free(struct lg_ref_case *c)
{
	for (int i = 0; i < c->n; i++) {
		free(c->buf[i].host);
		free(c->buf[i].slack);
	}
	free(c->data);
}

/* fill + run of s at sizes on `threads` threads. */
static void compute(const lg_spec *s, const int64_t *sizes, int threads, struct lg_ref_case *c)
{
	lg_ref_threads_set(threads);
	case_init(c, s, sizes);
	lg_ref_family_get(s->op)->fill(s, c, seed);
	lg_ref_family_get(s->op)->run(s, c);
	lg_ref_threads_set(0);
}

/* The measures and report of output b with a few errors put in, on
 * `threads` threads. */
static void measure(const struct lg_ref_buf *b, int threads, struct lg_check_measure *m, char *report,
		    size_t size)
{
	size_t bytes = b->count * b->elem;
	unsigned char *got = malloc(bytes + 1);
	assert_non_null(got);
	memcpy(got, b->host, bytes);
	for (size_t k = 1; k <= 7 && bytes; k++) /* a few bytes changed, one element poisoned */
		got[(k * 7919u * 104729u) % bytes] ^= (unsigned char)(k == 7 ? 0 : 0x11);
	if (b->count > 3)
		memset(got + (b->count / 3) * b->elem, 0xff, b->elem);
	FILE *out = fmemopen(report, size, "w");
	assert_non_null(out);
	lg_ref_threads_set(threads);
	lg_compare(b, got, 5, out, m);
	lg_ref_threads_set(0);
	fclose(out);
	free(got);
}

static void same(const char *json, int64_t s0, int64_t s1)
{
	lg_spec *s = NULL;
	if (lg_spec_parse(json, &s) != LG_OK)
		fail_msg("%s: %s", json, lg_last_error());
	const int64_t sizes[LG_MAX_SIZES] = {s0, s1, 1};
	struct lg_ref_case one, many;
	compute(s, sizes, 1, &one);
	for (int threads = 3; threads <= 5; threads += 2) {
		compute(s, sizes, threads, &many);
		for (int i = 0; i < one.n; i++) {
			const struct lg_ref_buf *a = &one.buf[i], *b = &many.buf[i];
			if (a->count && memcmp(a->host, b->host, a->count * a->elem) != 0)
				fail_msg("%s at %lld: %s differs on %d threads", lg_spec_entry(s), (long long)s0, a->name,
					 threads);
			assert_true(!a->slack == !b->slack);
			if (a->slack && memcmp(a->slack, b->slack, a->count * sizeof *a->slack) != 0)
				fail_msg("%s at %lld: %s's slack differs on %d threads", lg_spec_entry(s), (long long)s0,
					 a->name, threads);
			if (!a->output || !a->count || a->cmp == LG_CMP_NONE)
				continue;
			struct lg_check_measure m1, m2;
			char r1[2048] = {0}, r2[2048] = {0};
			measure(a, 1, &m1, r1, sizeof r1);
			measure(a, threads, &m2, r2, sizeof r2);
			if (memcmp(&m1, &m2, sizeof m1) != 0 || strcmp(r1, r2) != 0)
				fail_msg("%s: the comparison of %s differs on %d threads:\n%s---\n%s", lg_spec_entry(s),
					 a->name, threads, r1, r2);
			assert_true(!m1.pass); /* the errors put in are seen */
		}
		case_free(&many);
	}
	printf("%s at %lld, %lld: the same bits on 1, 3 and 5 threads\n", lg_spec_entry(s), (long long)s0,
	       (long long)s1);
	case_free(&one);
	lg_spec_free(s);
}

#define K(op, pass, keys) "{\"op\": \"" op "\", \"pass\": \"" pass "\", \"dtype\": \"bf16\", " keys "}"

static void test_quant(void **state)
{
	(void)state;
	same(K("fp8_quant", "forward", "\"hidden\": 1024, \"quant\": {\"output\": \"both\"}"), 1999, 0);
	same(K("fp8_quant", "forward", "\"hidden\": 384, \"quant\": {\"round_scale\": false}"), 4097, 0);
	same(K("fp8_quant_batched", "forward", "\"hidden\": 512, \"quant\": {}"), 3000, 7);
	same(K("fp8_quant_weight", "forward", "\"hidden\": 1024, \"quant\": {}"), 1000, 0);
}

static void test_swiglu(void **state)
{
	(void)state;
	same(K("swiglu_quant", "forward", "\"intermediate\": 512, \"quant\": {\"round_scale\": true}"), 2001, 0);
	same(K("swiglu_quant", "backward", "\"intermediate\": 384, \"dx_bf16\": true, \"quant\": {\"round_scale\": false}"),
	     1500, 0);
	same(K("batch_swiglu_quant", "forward", "\"intermediate\": 256, \"experts\": 5, \"quant\": {\"round_scale\": true}"),
	     3000, 0);
	same(K("batch_swiglu_quant", "backward", "\"intermediate\": 256, \"experts\": 9, \"dx_bf16\": true, "
						 "\"quant\": {\"round_scale\": true}"), 2500, 0);
}

static void test_cross_entropy(void **state)
{
	(void)state;
	same(K("cross_entropy", "forward", "\"vocab\": 50257"), 40, 0);
	same(K("cross_entropy", "forward", "\"vocab\": 20011, \"fused\": true, \"label_smoothing\": 0.1"), 33, 0);
	same(K("cross_entropy", "backward", "\"vocab\": 30000"), 37, 0);
	same("{\"op\": \"cross_entropy\", \"pass\": \"backward\", \"dtype\": \"fp32\", \"vocab\": 30001}", 21, 0);
	same(K("cross_entropy", "forward", "\"vocab\": 16753, \"part\": \"shard\", \"classes\": 50257"), 50, 16753);
}

static void test_moe(void **state)
{
	(void)state;
	for (uint64_t p = 0; p < 4; p++) { /* every routing pattern: the seed's */
		seed = (seed & ~3ull) | p;
		same(K("moe_permute", "forward", "\"hidden\": 512, \"experts\": 64, \"top_k\": 6"), 500, 0);
		same(K("moe_permute", "backward", "\"hidden\": 512, \"experts\": 64, \"top_k\": 6"), 500, 0);
		same(K("moe_unpermute", "forward", "\"hidden\": 501, \"experts\": 40, \"top_k\": 4, \"weighted\": true"),
		     600, 0);
		same(K("moe_unpermute", "backward", "\"hidden\": 512, \"experts\": 40, \"top_k\": 4, \"weighted\": true"),
		     600, 0);
		same(K("moe_permute_quant", "forward", "\"hidden\": 512, \"experts\": 24, \"top_k\": 4, "
						       "\"quant\": {\"output\": \"both\"}"), 600, 0);
	}
	same("{\"op\": \"moe_permute\", \"pass\": \"forward\", \"dtype\": \"e4m3\", \"hidden\": 1024, \"experts\": 64, "
	     "\"top_k\": 6}", 700, 0);
}

static void test_router_gemm(void **state)
{
	(void)state;
	same(K("router_gemm", "forward", "\"hidden\": 1000, \"experts\": 96"), 300, 0);
	same(K("router_gemm", "backward", "\"hidden\": 1000, \"experts\": 96, \"precision\": \"bf16x2\""), 300, 0);
}

/* lg_ref_parallel_rows: each row exactly once, on any thread count. */
struct count {
	atomic_uint *hits;
	atomic_int calls;
};

static void count_rows(void *ctx, size_t lo, size_t hi)
{
	struct count *c = ctx;
	atomic_fetch_add(&c->calls, 1);
	for (size_t i = lo; i < hi; i++)
		atomic_fetch_add(&c->hits[i], 1);
}

static void test_rows(void **state)
{
	(void)state;
	static const size_t ns[] = {0, 1, 7, 100, 12345};
	for (int threads = 1; threads <= 9; threads += 4)
		for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
			size_t n = ns[k];
			struct count c = {calloc(n + 1, sizeof(atomic_uint)), 0};
			assert_non_null(c.hits);
			lg_ref_threads_set(threads);
			lg_ref_parallel_rows(n, 1u << 20, count_rows, &c);
			for (size_t i = 0; i < n; i++)
				assert_int_equal(atomic_load(&c.hits[i]), 1);
			assert_true(n ? atomic_load(&c.calls) >= 1 : atomic_load(&c.calls) == 0);
			atomic_store(&c.calls, 0);
			lg_ref_parallel_rows(n, 1, count_rows, &c); /* small: one call on this thread */
			assert_int_equal(atomic_load(&c.calls), n ? 1 : 0);
			lg_ref_threads_set(0);
			free(c.hits);
		}
	assert_true(lg_ref_threads() >= 1);
}

int main(void)
{
	seed = lg_test_seed("test_ref_parallel");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rows),
		cmocka_unit_test(test_quant),
		cmocka_unit_test(test_swiglu),
		cmocka_unit_test(test_cross_entropy),
		cmocka_unit_test(test_moe),
		cmocka_unit_test(test_router_gemm),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
