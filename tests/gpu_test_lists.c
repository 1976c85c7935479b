/*
 * gpu_test_lists.c - the tensor-list reductions on the GPU (label "gpu"):
 * grad_norm (docs/kernels.md K10: L2, its square, L1, max) and count_zero
 * (K11) against the plain-C references of gen/ref/list_ref.c, over lists made
 * with lg_tensor_list_create: 512 fp32 tensors of the target's sizes (the
 * L2 norm to 1e-6 relative of the float64 reference), a list of one
 * tensor of one element, 10 000 tiny tensors of odd sizes, starts that
 * are not 16-byte aligned, sizes that are no multiple of the vector
 * width, bf16 and mixed lists, empty lists and tensors of no element,
 * zeros of both signs, a NaN for the max, every tile `lingen tune` sweeps.
 * The result must be the same bits on a second launch, and a kernel of
 * another element type than the list's must be refused.
 * Exits with LG_TEST_SKIP (ctest: skipped), saying why, when there is no
 * CUDA device or driver; random inputs print their seed (LINGEN_SEED replays).
 */
#include <math.h>
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
#include "family.h"
#include "list_ref.h"
#include "numeric_ref.h"
#include "testutil.h"

static lg_ctx *ctx;
static const struct lg_cu *cu;
static uint64_t seed;

static int setup(void **state)
{
	(void)state;
	if (lg_test_gpu_ctx(&ctx) != 0)
		return -1;
	return lg_cu_get(&cu) == LG_OK ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	lg_ctx_destroy(ctx);
	return 0;
}

#define CU(call)                                                                                     \
	do {                                                                                         \
		CUresult r_ = cu->call;                                                              \
		if (r_ != CUDA_SUCCESS)                                                              \
			fail_msg("%s: CUDA error %d", #call, (int)r_);                              \
	} while (0)

/* A list of tensors in one device arena, with its host copy. */
struct hlist {
	size_t n;
	int *elems;
	int64_t *counts;
	size_t *offs;       /* byte offset of each tensor in the arena */
	unsigned char *host;
	size_t bytes;
	CUdeviceptr dev;
	lg_dptr *ptrs;
	struct lg_ref_tensor *t;
	lg_tensor_list *list;
};

static const int ebytes[2] = {[LG_LIST_BF16] = 2, [LG_LIST_FP32] = 4};

/* A random value: mostly normal of scale ~1, a fraction `zeros` of +0.0 or
 * -0.0. */
static float value(uint64_t *st, double zeros)
{
	uint64_t r = lg_test_rand(st);
	if ((double)(r >> 11) * 0x1p-53 < zeros)
		return (r & 1) ? -0.0f : 0.0f;
	/* the sum of 4 uniforms, centred: cheap and roughly normal */
	double u = 0;
	for (int i = 0; i < 4; i++)
		u += (double)(lg_test_rand(st) >> 11) * 0x1p-53;
	return (float)((u - 2.0) * 1.7);
}

/* Tensor i has counts[i] elements of elems[i], starting mis[i] elements
 * past a 16-byte boundary (mis NULL: aligned). */
static void hlist_make(struct hlist *h, size_t n, const int64_t *counts, const int *elems, const int *mis,
		       double zeros, uint64_t s)
{
	memset(h, 0, sizeof *h);
	h->n = n;
	h->elems = calloc(n + 1, sizeof *h->elems);
	h->counts = calloc(n + 1, sizeof *h->counts);
	h->offs = calloc(n + 1, sizeof *h->offs);
	h->ptrs = calloc(n + 1, sizeof *h->ptrs);
	h->t = calloc(n + 1, sizeof *h->t);
	assert_true(h->elems && h->counts && h->offs && h->ptrs && h->t);
	size_t at = 0;
	for (size_t i = 0; i < n; i++) {
		h->elems[i] = elems[i];
		h->counts[i] = counts[i];
		at = (at + 15) / 16 * 16 + (size_t)(mis ? mis[i] : 0) * (size_t)ebytes[elems[i]];
		h->offs[i] = at;
		at += (size_t)counts[i] * (size_t)ebytes[elems[i]];
	}
	h->bytes = at + 16;
	h->host = calloc(1, h->bytes);
	assert_non_null(h->host);
	uint64_t st = s;
	for (size_t i = 0; i < n; i++) {
		unsigned char *p = h->host + h->offs[i];
		for (int64_t j = 0; j < counts[i]; j++) {
			float v = value(&st, zeros);
			if (elems[i] == LG_LIST_FP32)
				memcpy(p + j * 4, &v, 4);
			else {
				uint16_t b = lg_ref_f32_to_bf16(v);
				memcpy(p + j * 2, &b, 2);
			}
		}
		h->t[i] = (struct lg_ref_tensor){p, elems[i], counts[i]};
	}
	CU(cuMemAlloc(&h->dev, h->bytes));
	CU(cuMemcpyHtoD(h->dev, h->host, h->bytes));
	for (size_t i = 0; i < n; i++)
		h->ptrs[i] = counts[i] ? h->dev + h->offs[i] : 0;
	if (lg_tensor_list_create(h->ptrs, h->elems, h->counts, n, &h->list) != LG_OK)
		fail_msg("lg_tensor_list_create: %s", lg_last_error());
}

/* The device copy after changing the host one (h->host). */
static void hlist_upload(struct hlist *h)
{
	CU(cuMemcpyHtoD(h->dev, h->host, h->bytes));
}

static void hlist_free(struct hlist *h)
{
	lg_tensor_list_destroy(h->list);
	if (h->dev)
		cu->cuMemFree(h->dev);
	free(h->elems), free(h->counts), free(h->offs), free(h->ptrs), free(h->t), free(h->host);
}

static lg_kernel *kernel(const char *json)
{
	lg_spec *s = NULL;
	lg_kernel *k = NULL;
	if (lg_spec_parse(json, &s) != LG_OK)
		fail_msg("%s: %s", json, lg_last_error());
	if (lg_kernel_get(ctx, s, &k) != LG_OK)
		fail_msg("%s: %s", json, lg_last_error());
	lg_spec_free(s);
	return k;
}

/* One launch of k over h (op grad_norm or count_zero): the 8 result bytes. */
static lg_status launch(const lg_kernel *k, bool count, const struct hlist *h, uint64_t *bits)
{
	CUdeviceptr out = 0, ws = 0;
	size_t wsb = lg_kernel_workspace_size(k);
	CU(cuMemAlloc(&out, 8));
	CU(cuMemsetD8(out, 0xff, 8)); /* poisoned */
	if (wsb) {
		CU(cuMemAlloc(&ws, wsb));
		CU(cuMemsetD8(ws, 0xff, wsb)); /* the workspace needs no initialisation */
	}
	lg_status st = count ? lg_count_zero(k, NULL, h->list, out, ws) : lg_grad_norm(k, NULL, h->list, out, ws);
	if (st == LG_OK) {
		CU(cuCtxSynchronize());
		*bits = 0;
		CU(cuMemcpyDtoH(bits, out, count ? 8 : 4));
	}
	cu->cuMemFree(out);
	if (ws)
		cu->cuMemFree(ws);
	return st;
}

static const char *const ords[] = {"2", "1", "inf"};

/* The dtype a list's kernels take: the only one, else mixed. */
static const char *dtype_keys(const struct hlist *h)
{
	unsigned e = lg_tensor_list_elems(h->list);
	if (e == (1u << LG_LIST_BF16))
		return "\"dtype\": \"bf16\"";
	if (e == (1u << LG_LIST_FP32) || e == 0)
		return "\"dtype\": \"fp32\"";
	return "\"dtype\": \"fp32\", \"mixed\": true";
}

/* Every grad norm (L2, its square, L1, max) and the zero count of h, with
 * the tile keys `tile` (e.g. ", \"tile\": {...}" or ""): each against the
 * reference, each twice (the same bits). */
static void check_all(const char *what, const struct hlist *h, const char *tile)
{
	char json[512];
	bool ok = true;
	for (int o = 0; o < 4; o++) {
		int ord = o < 3 ? o : 0;
		bool root = o != 3;
		snprintf(json, sizeof json, "{\"op\": \"grad_norm\", \"pass\": \"forward\", %s, \"ord\": \"%s\"%s%s}",
			 dtype_keys(h), ords[ord], root ? "" : ", \"norm\": false", tile);
		lg_kernel *k = kernel(json);
		uint64_t a = 0, b = 0;
		if (launch(k, false, h, &a) != LG_OK || launch(k, false, h, &b) != LG_OK)
			fail_msg("%s: %s", json, lg_last_error());
		float got;
		uint32_t g32 = (uint32_t)a;
		memcpy(&got, &g32, 4);
		double ref = lg_ref_list_norm(h->t, h->n, (enum lg_ref_ord)ord, root);
		float rf = (float)ref;
		bool same = a == b;
		bool close = (isnan(got) && isnan(rf)) || (ord == 2 ? memcmp(&got, &rf, 4) == 0
								     : fabs((double)got - ref) <= 1e-6 * fabs(ref));
		printf("%s: %s: got %.9g, expected %.9g (%.3g relative)%s%s\n", what, json, (double)got, ref,
		       ref != 0 ? fabs((double)got - ref) / fabs(ref) : fabs((double)got), close ? "" : " FAIL",
		       same ? "" : " (second launch differs)");
		ok = ok && close && same;
	}
	snprintf(json, sizeof json, "{\"op\": \"count_zero\", \"pass\": \"forward\", %s%s}", dtype_keys(h), tile);
	lg_kernel *k = kernel(json);
	uint64_t a = 0, b = 0;
	if (launch(k, true, h, &a) != LG_OK || launch(k, true, h, &b) != LG_OK)
		fail_msg("%s: %s", json, lg_last_error());
	int64_t ref = lg_ref_list_count_zero(h->t, h->n);
	printf("%s: %s: got %lld, expected %lld%s\n", what, json, (long long)a, (long long)ref,
	       (int64_t)a == ref && a == b ? "" : " FAIL");
	ok = ok && (int64_t)a == ref && a == b;
	assert_true(ok);
}

/* 512 fp32 tensors of a model's parameter sizes (2.36 GB as the target
 * when scale is 1): the norms to 1e-6 relative. */
static void target(int scale)
{
	enum { N = 512 };
	static const int64_t shapes[] = {2048 * 2048, 512 * 2048, 2048, 3 * 512 * 2048, 2048 * 256, 128, 1};
	int64_t counts[N];
	int elems[N];
	int64_t total = 0;
	for (int i = 0; i < N; i++) {
		counts[i] = shapes[i % 7] / scale + (i % 5 == 0 ? 3 : 0);
		elems[i] = LG_LIST_FP32;
		total += counts[i];
	}
	/* pad the last tensor to 2.36 GB at scale 1 */
	int64_t want = 590000000 / scale;
	if (total < want)
		counts[N - 1] += want - total;
	struct hlist h;
	hlist_make(&h, N, counts, elems, NULL, 0.01, seed);
	printf("target: %d tensors, %lld elements, %lld items\n", N, (long long)lg_tensor_list_numel(h.list),
	       (long long)lg_tensor_list_items(h.list));
	check_all("target", &h, "");
	hlist_free(&h);
}

static void test_target(void **state)
{
	(void)state;
	target(1);
}

/* One tensor of one element, of each type, aligned and not. */
static void test_one_element(void **state)
{
	(void)state;
	for (int e = 0; e < 2; e++)
		for (int m = 0; m < 2; m++) {
			int64_t c = 1;
			int mis = m ? 16 / ebytes[e] - 1 : 0;
			struct hlist h;
			hlist_make(&h, 1, &c, &e, &mis, 0.0, seed + (uint64_t)(e * 2 + m));
			check_all(e ? "one fp32" : "one bf16", &h, "");
			/* and as a zero of each sign */
			memset(h.host + h.offs[0], 0, (size_t)ebytes[e]);
			h.host[h.offs[0] + (size_t)ebytes[e] - 1] = m ? 0x80 : 0;
			hlist_upload(&h);
			check_all(m ? "one -0" : "one +0", &h, "");
			hlist_free(&h);
		}
}

/* 10 000 tensors of 1 to 37 elements, mixed types, any start. */
static void test_many_tiny(void **state)
{
	(void)state;
	enum { N = 10000 };
	static int64_t counts[N];
	static int elems[N], mis[N];
	uint64_t st = seed ^ 0x7777;
	for (int i = 0; i < N; i++) {
		uint64_t r = lg_test_rand(&st);
		counts[i] = 1 + (int64_t)(r % 37);
		elems[i] = (int)((r >> 8) & 1);
		mis[i] = (int)((r >> 16) % (uint64_t)(16 / ebytes[elems[i]]));
	}
	struct hlist h;
	hlist_make(&h, N, counts, elems, mis, 0.2, seed + 11);
	check_all("10000 tiny mixed", &h, "");
	hlist_free(&h);
	/* the same sizes, one type each */
	for (int e = 0; e < 2; e++) {
		for (int i = 0; i < N; i++)
			elems[i] = e, mis[i] = i % (16 / ebytes[e]);
		hlist_make(&h, N, counts, elems, mis, 0.2, seed + 12 + (uint64_t)e);
		check_all(e ? "10000 tiny fp32" : "10000 tiny bf16", &h, "");
		hlist_free(&h);
	}
}

/* Sizes around the vector width and the item size, starts at every
 * element offset within 16 bytes, both types and mixed. */
static void test_odd_sizes(void **state)
{
	(void)state;
	static const int64_t sizes[] = {2, 3, 5, 7, 8, 9, 15, 17, 31, 33, 127, 129, 1000, 4095, 4097, 8191, 8193,
					16383, 16385, 100003, 1234567};
	enum { NS = sizeof sizes / sizeof sizes[0] };
	for (int variant = 0; variant < 3; variant++) {
		int64_t counts[NS * 8];
		int elems[NS * 8], mis[NS * 8], n = 0;
		for (int i = 0; i < NS; i++)
			for (int m = 0; m < 8; m++, n++) {
				elems[n] = variant < 2 ? variant : (i + m) & 1;
				counts[n] = sizes[i];
				mis[n] = m % (16 / ebytes[elems[n]]);
			}
		struct hlist h;
		hlist_make(&h, (size_t)n, counts, elems, mis, 0.05, seed + 100 + (uint64_t)variant);
		static const char *const names[] = {"odd bf16", "odd fp32", "odd mixed"};
		check_all(names[variant], &h, "");
		hlist_free(&h);
	}
}

/* Empty lists, tensors of no element between others: the results of no
 * element (0, and a count of 0). */
static void test_empty(void **state)
{
	(void)state;
	struct hlist h;
	int e = LG_LIST_FP32;
	hlist_make(&h, 0, NULL, &e, NULL, 0.0, seed);
	assert_int_equal(lg_tensor_list_items(h.list), 0);
	assert_int_equal(lg_tensor_list_table(h.list), 0);
	check_all("empty list", &h, "");
	hlist_free(&h);
	int64_t counts[] = {0, 5, 0, 0, 3, 0};
	int elems[] = {1, 1, 0, 1, 1, 0};
	hlist_make(&h, 6, counts, elems, NULL, 0.0, seed + 1);
	assert_int_equal(lg_tensor_list_count(h.list), 6);
	assert_int_equal(lg_tensor_list_numel(h.list), 8);
	check_all("tensors of no element", &h, "");
	hlist_free(&h);
}

/* A NaN makes the max NaN (and the sums NaN); an inf the max inf. */
static void test_nan(void **state)
{
	(void)state;
	int64_t counts[] = {1000, 70000};
	int elems[] = {LG_LIST_FP32, LG_LIST_FP32};
	struct hlist h;
	hlist_make(&h, 2, counts, elems, NULL, 0.0, seed + 3);
	float nan = NAN;
	memcpy(h.host + h.offs[1] + 4 * 60001, &nan, 4);
	hlist_upload(&h);
	check_all("a NaN", &h, "");
	hlist_free(&h);
}

/* A kernel of one element type refuses a list of the other (or mixed). */
static void test_wrong_type(void **state)
{
	(void)state;
	int64_t counts[] = {100, 100};
	int elems[] = {LG_LIST_BF16, LG_LIST_FP32};
	struct hlist h;
	hlist_make(&h, 2, counts, elems, NULL, 0.0, seed + 4);
	lg_kernel *k = kernel("{\"op\": \"grad_norm\", \"pass\": \"forward\", \"dtype\": \"fp32\"}");
	uint64_t bits;
	assert_int_equal(launch(k, false, &h, &bits), LG_ERR_INVALID_ARG);
	printf("refused: %s\n", lg_last_error());
	assert_non_null(strstr(lg_last_error(), "mixed"));
	k = kernel("{\"op\": \"count_zero\", \"pass\": \"forward\", \"dtype\": \"bf16\"}");
	assert_int_equal(launch(k, true, &h, &bits), LG_ERR_INVALID_ARG);
	/* a launcher of the other op */
	assert_int_equal(launch(k, false, &h, &bits), LG_ERR_INVALID_ARG);
	hlist_free(&h);
}

/* The tile object of a candidate: ", \"tile\": {...}" of the keys it sets. */
static void tile_json(const struct lg_family *f, const struct lg_tile_choice *c, char *out, size_t n)
{
	int at = snprintf(out, n, ", \"tile\": {");
	const char *sep = "";
	for (int k = 0; k < f->nkeys && at > 0 && (size_t)at < n; k++)
		if (((c->set >> k) & 1) && strncmp(f->keys[k].path, "tile.", 5) == 0) {
			at += snprintf(out + at, n - (size_t)at, "%s\"%s\": %lld", sep, f->keys[k].path + 5,
				       (long long)c->v[k]);
			sep = ", ";
		}
	if (at > 0 && (size_t)at < n)
		snprintf(out + at, n - (size_t)at, "}");
}

/* Every tile `lingen tune` sweeps (the family's candidates on sm_90a; the
 * list families share them), and two extremes outside them, on a list of
 * mixed sizes. */
static void test_tiles(void **state)
{
	(void)state;
	static const int64_t sizes[] = {3, 4096 * 1024 + 5, 77, 65536, 1, 300001};
	int64_t counts[24];
	int elems[24], mis[24];
	for (int i = 0; i < 24; i++)
		counts[i] = sizes[i % 6], elems[i] = LG_LIST_FP32, mis[i] = i & 3;
	struct hlist h;
	hlist_make(&h, 24, counts, elems, mis, 0.1, seed + 5);
	lg_spec *s = NULL;
	if (lg_spec_parse("{\"op\": \"grad_norm\", \"pass\": \"forward\", \"dtype\": \"fp32\"}", &s) != LG_OK)
		fail_msg("%s", lg_last_error());
	const struct lg_family *f = lg_family_get(s->op);
	struct lg_target t;
	assert_true(lg_target_parse("sm_90a", &t));
	struct lg_tile_choice c[LG_MAX_CANDIDATES];
	int n = f->candidates(s, &t, c, LG_MAX_CANDIDATES);
	assert_true(n >= 8);
	char tile[160];
	for (int i = 0; i < n; i++) {
		tile_json(f, &c[i], tile, sizeof tile);
		check_all(tile + 2, &h, tile);
	}
	static const char *const extremes[] = {
		", \"tile\": {\"threads\": 128, \"per_sm\": 1, \"unroll\": 1}",
		", \"tile\": {\"threads\": 1024, \"per_sm\": 2, \"unroll\": 2}",
	};
	for (size_t i = 0; i < sizeof extremes / sizeof extremes[0]; i++)
		check_all(extremes[i] + 2, &h, extremes[i]);
	lg_spec_free(s);
	hlist_free(&h);
}

int main(void)
{
	lg_test_require_gpu("gpu_test_lists");
	seed = lg_test_seed("gpu_test_lists");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_element),
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_odd_sizes),
		cmocka_unit_test(test_many_tiny),
		cmocka_unit_test(test_nan),
		cmocka_unit_test(test_wrong_type),
		cmocka_unit_test(test_tiles),
		cmocka_unit_test(test_target),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
