/*
 * gpu_test_router_gemm.c - the router GEMM (family router_gemm, docs/kernels.md
 * K3) on the GPU against the CPU reference (label "gpu"): forward logits
 * and backward dx, dw at the target shape (x [8192, 2048], w [256, 2048])
 * and at sizes that are multiples of nothing (M = 1, 127, 8191; K = 7168,
 * 1000; N = 96, 160, 1), each backward precision (bf16, bf16x2, bf16x3,
 * tf32; on sm_90a on both the wgmma and the mma.sync backward),
 * the tiles `lingen tune` sweeps (on sm_90a: the wgmma forward's and
 * backward's tiles, the forward's clusters, persistent dx CTAs, and the
 * mma.sync passes through an sm_90 context), 0 tokens
 * (dw = 0), dx or dw alone (the other pointer 0), dw the same bits on a
 * second launch, and the launch's tensor maps following the pointers and
 * sizes. Fresh random
 * inputs, poisoned outputs, nothing left unwritten.
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
/* The mma.sync path on this device: ctx itself, or on sm_90a (where ctx's
 * forward is the wgmma path) a context compiling for sm_90 (no "a"). */
static lg_ctx *ctx_mma;
static uint64_t seed;

enum { B_DY, B_X, B_W, B_DX, B_DW, B_WS };

static bool wgmma(void) { return strcmp(lg_ctx_arch(ctx), "sm_90a") == 0; }

static int setup(void **state)
{
	(void)state;
	if (lg_test_gpu_ctx(&ctx) != 0)
		return -1;
	ctx_mma = ctx;
	lg_ctx_opts o = {.arch = "sm_90"};
	if (wgmma() && lg_ctx_create(&o, &ctx_mma) != LG_OK) {
		fprintf(stderr, "an sm_90 context: %s\n", lg_last_error());
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (ctx_mma != ctx)
		lg_ctx_destroy(ctx_mma);
	lg_ctx_destroy(ctx);
	return 0;
}

static lg_spec *parse(const char *pass, const char *keys)
{
	return lg_test_spec("router_gemm", pass, "bf16", keys);
}

/* One spec at M tokens on context c: every output within tolerance, nothing unwritten. */
static void check_on(lg_ctx *c, const char *pass, const char *keys, int64_t M)
{
	lg_spec *s = parse(pass, keys);
	struct lg_check_opts o = {.tokens = M, .seed = seed + (uint64_t)M * 7919};
	struct lg_check_result r;
	if (lg_check_kernel(c, s, &o, &r) != LG_OK)
		fail_msg("%s at %lld tokens: %s", lg_spec_entry(s), (long long)M, lg_last_error());
	bool written = lg_test_written(&r, M == 0 || r.nmeasures > 0); /* at 0 tokens the forward has no output */
	printf("%s %s M=%lld: %s\n", lg_spec_entry(s), lg_ctx_arch(c), (long long)M,
	       r.pass && written ? "PASS" : "FAIL");
	lg_test_print_measures(&r, 6);
	assert_true(r.pass);
	assert_true(written);
	lg_spec_free(s);
}

static void check(const char *pass, const char *keys, int64_t M) { check_on(ctx, pass, keys, M); }

/* Each tile at each shape and token count of a pass (once1: 1 token at the
 * first tile only). */
static void check_grid(const char *pass, const char *const *tiles, size_t nt, const char *const *shapes,
		       size_t ns, const int64_t *ms, size_t nm, bool once1)
{
	for (size_t t = 0; t < nt; t++)
		for (size_t h = 0; h < ns; h++) {
			char keys[256];
			snprintf(keys, sizeof keys, "%s, \"tile\": %s", shapes[h], tiles[t]);
			for (size_t i = 0; i < nm; i++)
				if (!once1 || t == 0 || ms[i] != 1)
					check(pass, keys, ms[i]);
		}
}

static void both(const char *keys, const int64_t *ms, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		check("forward", keys, ms[i]);
		check("backward", keys, ms[i]);
	}
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* The target shape, and token counts around it. */
static void test_target(void **state)
{
	(void)state;
	static const int64_t ms[] = {8192, 1, 127, 8191};
	both("\"hidden\": 2048, \"experts\": 256", ms, N_OF(ms));
}

/* K = 7168 (DeepSeek-V3's hidden), 1000 (no multiple of 16). */
static void test_hidden(void **state)
{
	(void)state;
	static const int64_t ms[] = {1, 127, 1000};
	both("\"hidden\": 7168, \"experts\": 256", ms, N_OF(ms));
	both("\"hidden\": 1000, \"experts\": 256", ms, N_OF(ms));
	both("\"hidden\": 8, \"experts\": 3", ms, N_OF(ms));
}

/* N = 96, 160 (no multiple of the tile), 1 (dy rows 4 bytes: 4-byte copies, scalar stores), 7. */
static void test_experts(void **state)
{
	(void)state;
	static const int64_t ms[] = {1, 127, 1000};
	both("\"hidden\": 2048, \"experts\": 96", ms, N_OF(ms));
	both("\"hidden\": 2048, \"experts\": 160", ms, N_OF(ms));
	both("\"hidden\": 2048, \"experts\": 1", ms, N_OF(ms));
	both("\"hidden\": 1000, \"experts\": 7", ms, N_OF(ms));
	both("\"hidden\": 7168, \"experts\": 160", ms, N_OF(ms));
}

/* dy as 2 and 3 bf16 terms, and rounded to tf32 (2 terms): the tighter
 * tolerances of the reference (tf32: its products, not fp32 dy's). On
 * sm_90a also the mma.sync backward (ctx_mma: dy's planes split by the
 * CTA's convert), which otherwise runs them only at 1 and 7 experts. */
static void test_precision(void **state)
{
	(void)state;
	static const int64_t ms[] = {1, 127, 8192};
	static const char *const keys[] = {
		"\"hidden\": 2048, \"experts\": 256, \"precision\": \"bf16x2\"",
		"\"hidden\": 2048, \"experts\": 256, \"precision\": \"bf16x3\"",
		"\"hidden\": 1000, \"experts\": 160, \"precision\": \"bf16x3\"",
		"\"hidden\": 1000, \"experts\": 1, \"precision\": \"bf16x2\"",
		"\"hidden\": 2048, \"experts\": 256, \"precision\": \"tf32\"",
		"\"hidden\": 1000, \"experts\": 7, \"precision\": \"tf32\"",
	};
	for (size_t k = 0; k < N_OF(keys); k++)
		for (size_t i = 0; i < N_OF(ms); i++) {
			bool big = k < 2 || k == 4; /* the target shape */
			if (big || ms[i] < 8192)
				check("backward", keys[k], ms[i]);
			if (ctx_mma != ctx && k != 3 && k != 5 && (ms[i] == 127 || (big && k != 0 && ms[i] == 8192)))
				check_on(ctx_mma, "backward", keys[k], ms[i]);
		}
}

/* The backward's default tiles on sm_86 / sm_89 (99 KB of shared memory:
 * dx and dw halved to fit, router_gemm.c's fit), run here on the mma.sync
 * path of this device. */
#define SM89_TILES                                                                                             \
	"{\"m\": 64, \"n\": 128, \"warps_m\": 2, \"warps_n\": 4, \"stages\": 4, \"dx_m\": 64, \"dx_n\": 256, "     \
	"\"dx_warps_m\": 2, \"dx_warps_n\": 4, \"dx_stages\": 3}"

/* The tiles of `lingen tune` of the mma.sync path (on ctx_mma: on sm_90a
 * both passes run on wgmma; in the backward dw's), dw's slices and dx's own
 * tiles (backward only). */
static void test_tiles(void **state)
{
	(void)state;
	static const char *const tiles[] = {
		"{\"m\": 128, \"n\": 128, \"warps_m\": 2, \"warps_n\": 4, \"stages\": 3}",
		"{\"m\": 128, \"n\": 64, \"warps_m\": 4, \"warps_n\": 2, \"stages\": 4}",
		"{\"m\": 64, \"n\": 128, \"warps_m\": 2, \"warps_n\": 4, \"stages\": 4}",
		"{\"m\": 128, \"n\": 256, \"warps_m\": 2, \"warps_n\": 4, \"stages\": 3}",
		"{\"m\": 256, \"n\": 128, \"warps_m\": 4, \"warps_n\": 2, \"stages\": 3}",
		"{\"m\": 64, \"n\": 64, \"warps_m\": 2, \"warps_n\": 2, \"stages\": 6}",
		"{\"m\": 128, \"n\": 128, \"warps_m\": 2, \"warps_n\": 2, \"stages\": 4}",
		"{\"k\": 64, \"stages\": 3}",
		"{\"split\": 1}",
		"{\"split\": 3}",
		"{\"split\": 8}",
		"{\"dx_m\": 64, \"dx_n\": 128, \"dx_warps_m\": 2, \"dx_warps_n\": 2}",
		"{\"dx_m\": 128, \"dx_n\": 128, \"dx_warps_m\": 2, \"dx_warps_n\": 4, \"dx_k\": 64}",
		"{\"dx_m\": 256, \"dx_n\": 64, \"dx_warps_m\": 8, \"dx_warps_n\": 1, \"dx_stages\": 3}",
		SM89_TILES,
	};
	static const int64_t ms[] = {127, 1000};
	for (size_t t = 0; t < N_OF(tiles); t++) {
		char keys[320];
		snprintf(keys, sizeof keys, "\"hidden\": 1000, \"experts\": 160, \"tile\": %s", tiles[t]);
		for (size_t i = 0; i < N_OF(ms); i++) {
			if (!strstr(tiles[t], "split") && !strstr(tiles[t], "dx_"))
				check_on(ctx_mma, "forward", keys, ms[i]);
			check_on(ctx_mma, "backward", keys, ms[i]);
		}
	}
	/* sm_89's halved tiles at three terms, the target's sizes */
	for (size_t i = 0; i < N_OF(ms); i++)
		check_on(ctx_mma, "backward",
			 "\"hidden\": 2048, \"experts\": 256, \"precision\": \"bf16x3\", \"tile\": " SM89_TILES, ms[i]);
}

/* The sm_90a forward's tiles (wgmma + TMA): one and two consumer
 * warpgroups, widths 32 to 256, clusters of 2 (w's tile multicast), at
 * sizes of no multiple; and the mma.sync forward at the target beside it. */
static void test_tiles90(void **state)
{
	(void)state;
	if (!wgmma()) {
		printf("test_tiles90: the device is %s, not sm_90a: nothing to check\n", lg_ctx_arch(ctx));
		return;
	}
	static const char *const tiles[] = {
		"{\"m\": 64, \"n\": 256, \"stages\": 4}", "{\"m\": 128, \"n\": 256, \"stages\": 4}",
		"{\"m\": 64, \"n\": 64, \"stages\": 8}",  "{\"m\": 128, \"n\": 32, \"stages\": 2}",
		"{\"cluster\": 2}",                           "{\"m\": 64, \"n\": 256, \"stages\": 4, \"cluster\": 2}",
	};
	static const char *const shapes[] = {"\"hidden\": 1000, \"experts\": 160", "\"hidden\": 2048, \"experts\": 97"};
	static const int64_t ms[] = {1, 127, 1000};
	check_grid("forward", tiles, N_OF(tiles), shapes, N_OF(shapes), ms, N_OF(ms), false);
	check_on(ctx_mma, "forward", "\"hidden\": 2048, \"experts\": 256", 8192);
}

/* The sm_90a backward's tiles (wgmma + TMA; dy split into bf16 planes by
 * the consumers, w and x MN-major): dw's and dx's widths 64 to 256, one
 * and two consumer warpgroups, few stages, dw's slices, at sizes of no
 * multiple and each precision; and the mma.sync backward at the target
 * beside it. */
static void test_tiles90_bwd(void **state)
{
	(void)state;
	if (!wgmma()) {
		printf("test_tiles90_bwd: the device is %s, not sm_90a: nothing to check\n", lg_ctx_arch(ctx));
		return;
	}
	static const char *const tiles[] = {
		"{\"m\": 64, \"n\": 64, \"stages\": 4}",
		"{\"m\": 128, \"n\": 256, \"split\": 1}",
		"{\"m\": 64, \"n\": 256, \"split\": 5}",
		"{\"dx_m\": 64, \"dx_n\": 128}",
		"{\"dx_m\": 128, \"dx_n\": 64, \"dx_stages\": 3}",
		"{\"dx_m\": 64, \"dx_n\": 256, \"dx_stages\": 3}",
	};
	static const char *const shapes[] = {
		"\"hidden\": 1000, \"experts\": 160",
		"\"hidden\": 2048, \"experts\": 96, \"precision\": \"bf16x3\"",
		"\"hidden\": 1000, \"experts\": 4, \"precision\": \"bf16x2\"",
	};
	static const int64_t ms[] = {1, 127, 1000};
	check_grid("backward", tiles, N_OF(tiles), shapes, N_OF(shapes), ms, N_OF(ms), false);
	check_on(ctx_mma, "backward", "\"hidden\": 2048, \"experts\": 256", 8192);
}

/* Persistent dx CTAs (sm_90a, tile.dx_persistent): a CTA loops over tiles
 * (about 4 each at the target, 2 at 8191 x 1000), its stage count running
 * on across them (3 stages at bf16, 2 at bf16x3: the ring wraps at other
 * tiles' reduction steps), at odd shapes and the other dx tiles. */
static void test_dx_persistent(void **state)
{
	(void)state;
	if (!wgmma()) {
		printf("test_dx_persistent: the device is %s, not sm_90a: nothing to check\n", lg_ctx_arch(ctx));
		return;
	}
	static const char *const shapes[] = {
		"\"hidden\": 2048, \"experts\": 256",
		"\"hidden\": 1000, \"experts\": 160",
		"\"hidden\": 2048, \"experts\": 96, \"precision\": \"bf16x3\"",
		"\"hidden\": 1000, \"experts\": 4, \"precision\": \"bf16x2\"",
		"\"hidden\": 7168, \"experts\": 256, \"precision\": \"bf16x2\"",
	};
	static const char *const tiles[] = {
		"{\"dx_persistent\": 1}",
		"{\"dx_persistent\": 1, \"dx_n\": 128}",
		"{\"dx_persistent\": 1, \"dx_m\": 64, \"dx_stages\": 3}",
	};
	static const int64_t ms[] = {8192, 1, 127, 8191};
	check_grid("backward", tiles, N_OF(tiles), shapes, N_OF(shapes), ms, N_OF(ms), true);
}

/* The launch's tensor maps follow the pointers and sizes (launch.c keeps
 * the last ones): the forward on buffers A, then B (same sizes), then A
 * again: A's logits the same bits twice, B's others and the same bits on
 * a rerun; then A at 1000 tokens (its first 1000 rows the same bits, the
 * rest untouched) and at 8192 again (all the same bits: a map kept from
 * the 1000-token launch would read zeros past row 1000). */
static void test_tmap_cache(void **state)
{
	(void)state;
	lg_spec *s = parse("forward", "\"hidden\": 2048, \"experts\": 256");
	lg_kernel *k;
	if (lg_kernel_get(ctx, s, &k) != LG_OK)
		fail_msg("%s", lg_last_error());
	const int64_t sizes[1] = {8192};
	struct lg_gpu_case a, b;
	if (lg_gpu_case_init(&a, s, 8192, sizes, seed, k) != LG_OK ||
	    lg_gpu_case_init(&b, s, 8192, sizes, seed + 1, k) != LG_OK)
		fail_msg("%s", lg_last_error());
	enum { F_Y = 2 };
	size_t bytes = a.ref.buf[F_Y].count * 4, row = 256 * 4;
	char *a1 = malloc(bytes), *b1 = malloc(bytes);
	assert_true(a1 && b1);
	assert_int_equal(lg_gpu_case_launch(&a, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&a), LG_OK);
	memcpy(a1, a.got[F_Y], bytes);
	assert_int_equal(lg_gpu_case_launch(&b, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&b), LG_OK);
	memcpy(b1, b.got[F_Y], bytes);
	assert_memory_not_equal(a1, b1, row);
	assert_int_equal(lg_gpu_case_poison(&a), LG_OK);
	assert_int_equal(lg_gpu_case_launch(&a, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&a), LG_OK);
	assert_memory_equal(a1, a.got[F_Y], bytes);
	assert_int_equal(lg_gpu_case_poison(&b), LG_OK);
	assert_int_equal(lg_gpu_case_launch(&b, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&b), LG_OK);
	assert_memory_equal(b1, b.got[F_Y], bytes);
	assert_int_equal(lg_gpu_case_poison(&a), LG_OK);
	assert_int_equal(lg_router_gemm_forward(k, NULL, 1000, a.ptrs[0], a.ptrs[1], a.ptrs[F_Y]), LG_OK);
	assert_int_equal(lg_gpu_case_download(&a), LG_OK);
	assert_memory_equal(a1, a.got[F_Y], 1000 * row);
	const unsigned char *rest = (const unsigned char *)a.got[F_Y] + 1000 * row;
	for (size_t i = 0; i < bytes - 1000 * row; i++)
		if (rest[i] != 0xff)
			fail_msg("byte %zu past the 1000 rows written", i);
	assert_int_equal(lg_gpu_case_launch(&a, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&a), LG_OK);
	assert_memory_equal(a1, a.got[F_Y], bytes);
	free(a1);
	free(b1);
	lg_gpu_case_free(&a);
	lg_gpu_case_free(&b);
	lg_spec_free(s);
}

/* No tokens: the forward launches nothing, the backward writes dw = 0. */
static void test_no_tokens(void **state)
{
	(void)state;
	static const int64_t ms[] = {0};
	both("\"hidden\": 2048, \"experts\": 256", ms, 1);
	check("backward", "\"hidden\": 1000, \"experts\": 7, \"tile\": {\"split\": 1}", 0);
	if (wgmma()) /* no dx CTA at all */
		check("backward", "\"hidden\": 2048, \"experts\": 256, \"tile\": {\"dx_persistent\": 1}", 0);
}

/* A backward case at the target shape: its kernel and buffers. */
static void bwd_case(const char *keys, lg_kernel **k, struct lg_gpu_case *g, lg_spec **s)
{
	*s = parse("backward", keys);
	if (lg_kernel_get(ctx, *s, k) != LG_OK)
		fail_msg("%s", lg_last_error());
	const int64_t sizes[1] = {8192};
	if (lg_gpu_case_init(g, *s, 8192, sizes, seed, *k) != LG_OK)
		fail_msg("%s", lg_last_error());
}

/* dw: the same bits on a second launch. */
static void test_dw_deterministic(void **state)
{
	(void)state;
	lg_spec *s;
	lg_kernel *k;
	struct lg_gpu_case g;
	bwd_case("\"hidden\": 2048, \"experts\": 256", &k, &g, &s);
	size_t bytes = g.ref.buf[B_DW].count * g.ref.buf[B_DW].elem;
	void *first = malloc(bytes);
	assert_non_null(first);
	assert_int_equal(lg_gpu_case_launch(&g, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	memcpy(first, g.got[B_DW], bytes);
	assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
	assert_int_equal(lg_gpu_case_launch(&g, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	assert_memory_equal(first, g.got[B_DW], bytes);
	free(first);
	lg_gpu_case_free(&g);
	lg_spec_free(s);
}

/* dx alone (dw 0) and dw alone (dx 0), through the typed launcher: the
 * output not asked for stays poisoned, the other matches the full launch. */
static void test_one_output(void **state)
{
	(void)state;
	lg_spec *s;
	lg_kernel *k;
	struct lg_gpu_case g;
	bwd_case("\"hidden\": 2048, \"experts\": 256", &k, &g, &s);
	size_t nx = g.ref.buf[B_DX].count * 2, nw = g.ref.buf[B_DW].count * 4;
	void *dx = malloc(nx), *dw = malloc(nw);
	assert_true(dx && dw);
	assert_int_equal(lg_gpu_case_launch(&g, k, NULL), LG_OK);
	assert_int_equal(lg_gpu_case_download(&g), LG_OK);
	memcpy(dx, g.got[B_DX], nx);
	memcpy(dw, g.got[B_DW], nw);
	for (int which = 0; which < 2; which++) {
		assert_int_equal(lg_gpu_case_poison(&g), LG_OK);
		lg_dptr p[6];
		memcpy(p, g.ptrs, sizeof p);
		p[which == 0 ? B_DW : B_DX] = 0;
		if (lg_router_gemm_backward(k, NULL, 8192, p[B_DY], p[B_X], p[B_W], p[B_DX], p[B_DW], p[B_WS]) !=
		    LG_OK)
			fail_msg("%s", lg_last_error());
		assert_int_equal(lg_gpu_case_download(&g), LG_OK);
		const unsigned char *skipped = g.got[which == 0 ? B_DW : B_DX];
		assert_true(skipped[0] == 0xff && skipped[(which == 0 ? nw : nx) - 1] == 0xff);
		if (which == 0)
			assert_memory_equal(dx, g.got[B_DX], nx);
		else
			assert_memory_equal(dw, g.got[B_DW], nw);
	}
	/* the typed launcher refuses a forward kernel */
	lg_spec *f = parse("forward", "\"hidden\": 2048, \"experts\": 256");
	lg_kernel *kf;
	assert_int_equal(lg_kernel_get(ctx, f, &kf), LG_OK);
	assert_int_equal(lg_router_gemm_backward(kf, NULL, 1, 0, 0, 0, 0, 0, 0), LG_ERR_INVALID_ARG);
	lg_spec_free(f);
	free(dx);
	free(dw);
	lg_gpu_case_free(&g);
	lg_spec_free(s);
}

int main(void)
{
	lg_test_require_gpu("gpu_test_router_gemm");
	seed = lg_test_seed("gpu_test_router_gemm");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_target),
		cmocka_unit_test(test_hidden),
		cmocka_unit_test(test_experts),
		cmocka_unit_test(test_precision),
		cmocka_unit_test(test_tiles),
		cmocka_unit_test(test_tiles90),
		cmocka_unit_test(test_tiles90_bwd),
		cmocka_unit_test(test_dx_persistent),
		cmocka_unit_test(test_tmap_cache),
		cmocka_unit_test(test_no_tokens),
		cmocka_unit_test(test_dw_deterministic),
		cmocka_unit_test(test_one_output),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
