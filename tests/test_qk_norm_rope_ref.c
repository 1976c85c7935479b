/*
 * test_qk_norm_rope_ref.c - the qk_norm_rope reference (docs/kernels.md K2) on
 * cases checked by hand: rotation by angle 0 is the identity and by pi/2
 * swaps the halves of the rotated part with a sign; v heads are copied; the
 * backward of a normalised head along its own direction is ~0 and its weight
 * gradient is r per feature, also through a rotation (the transpose undoes
 * it); the interleaved and plain head layouts, and the [S, B] and [B, S]
 * orders, give the same outputs for the same heads; packed sequences
 * (varlen) restart their positions, context parallelism remaps them, mscale
 * scales the rotation. Also the family's spec
 * checks (H % h, head_dim, the rotary fraction), its buffers, geometry,
 * run-time size checks and tuning candidates. No GPU.
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

#include "generate.h"
#include "numeric_ref.h"
#include "ref.h"
#include "refcase.h"
#include "testutil.h"

#define BF16_ONE 0x3f80
#define BF16_MINUS_ONE 0xbf80

enum { F_QKV, F_QW, F_KW, F_FREQS, F_CU, F_Q, F_K, F_V };
enum { B_GQ, B_GK, B_GV, B_QKV, B_QW, B_KW, B_FREQS, B_CU, B_DQKV, B_DQW, B_DKW };

static lg_spec *spec(const char *json)
{
	lg_spec *s = NULL;
	if (lg_spec_parse(json, &s) != LG_OK)
		fail_msg("%s", lg_last_error());
	return s;
}

/* A case of spec s at (seq, batch): buffers as declared, zeroed. */
static struct lg_ref_case make_case(const lg_spec *s, int64_t seq, int64_t batch)
{
	struct lg_target t;
	struct lg_plan p;
	assert_true(lg_target_parse("sm_90a", &t));
	assert_int_equal(lg_plan_for(s, &t, &p), LG_OK);
	int64_t sizes[LG_MAX_SIZES] = {seq, batch};
	struct lg_ref_case c;
	assert_int_equal(lg_ref_case_init(&c, s, sizes, p.used, 0), LG_OK);
	for (int i = 0; i < c.n; i++)
		if (c.buf[i].count) {
			c.buf[i].host = calloc(c.buf[i].count, c.buf[i].elem);
			assert_non_null(c.buf[i].host);
		}
	lg_ref_family_get(s->op)->describe(s, &c);
	return c;
}

static void run(const lg_spec *s, struct lg_ref_case *c) { lg_ref_family_get(s->op)->run(s, c); }

/* The sign pattern of feature i of head j: -1 every third feature, else 1. */
static uint16_t pattern(size_t j, size_t i) { return (i + j) % 3 == 0 ? BF16_MINUS_ONE : BF16_ONE; }
static uint16_t neg(uint16_t h) { return (uint16_t)(h ^ 0x8000); }

/* One token, one group of H/h = 2 q heads, k, v, D = 64: every head vector
 * ±1 (r = 1/sqrt(1 + eps), so x r w rounds to ±1 in bf16), weights 1. */
static void fill_pattern(const lg_spec *s, struct lg_ref_case *c, float angle, int qkv, int qw, int kw,
			 int fr)
{
	size_t d = 64, heads = 4, r = (size_t)(lg_ref_num(s, "rotary_fraction") * 64);
	uint16_t *x = c->buf[qkv].host, *wq = c->buf[qw].host, *wk = c->buf[kw].host;
	for (size_t j = 0; j < heads; j++)
		for (size_t i = 0; i < d; i++)
			x[j * d + i] = pattern(j, i);
	for (size_t i = 0; i < d; i++)
		wq[i] = wk[i] = BF16_ONE;
	float *f = c->buf[fr].host;
	for (size_t i = 0; i < r; i++)
		f[i] = angle;
}

#define ONE_GROUP(pass, frac)                                                                         \
	"{\"op\": \"qk_norm_rope\", \"pass\": \"" pass "\", \"dtype\": \"bf16\", \"head_dim\": 64, "  \
	"\"q_heads\": 2, \"kv_heads\": 1, \"rotary_fraction\": " frac "}"

/* Angle 0: out = x r w = x (bf16); pi/2: out[i] = -x[i + R/2], out[i + R/2]
 * = x[i] for i < R/2, the rest as is; v copied. Interleaved slots: q0 q1 k v. */
static void check_rotation(const char *frac)
{
	char json[256];
	snprintf(json, sizeof json, ONE_GROUP("forward", "%s"), frac);
	lg_spec *s = spec(json);
	size_t r = (size_t)(lg_ref_num(s, "rotary_fraction") * 64), h = r / 2;
	struct lg_ref_case c = make_case(s, 1, 1);
	for (int a = 0; a < 2; a++) {
		fill_pattern(s, &c, a ? (float)(M_PI / 2) : 0.0f, F_QKV, F_QW, F_KW, F_FREQS);
		run(s, &c);
		const uint16_t *outs[3] = {c.buf[F_Q].host, c.buf[F_K].host, c.buf[F_V].host};
		for (size_t j = 0; j < 4; j++) {
			const uint16_t *o = j < 2 ? outs[0] + j * 64 : outs[j - 1];
			for (size_t i = 0; i < 64; i++) {
				uint16_t want = pattern(j, i);
				if (a && j < 3 && i < h)
					want = neg(pattern(j, i + h));
				else if (a && j < 3 && i < r)
					want = pattern(j, i - h);
				if (o[i] != want)
					fail_msg("fraction %s, angle %s, head %zu, feature %zu: %#x, want %#x", frac,
						 a ? "pi/2" : "0", j, i, o[i], want);
			}
		}
	}
	lg_test_case_free(&c);
	lg_spec_free(s);
}

static void test_rotation(void **state)
{
	(void)state;
	check_rotation("0.5");
	check_rotation("1");
	check_rotation("0.25");
}

/* Backward with g = the forward's output for x: the gradient of a
 * normalised vector along itself is ~0 (scale invariance), the weight
 * gradients are sum u r g = r per feature (one q head of the two gets g,
 * k gets g), also at angle pi/2 where g is x rotated and the backward
 * un-rotates it; dv = gv. */
static void test_backward_invariance(void **state)
{
	(void)state;
	lg_spec *s = spec(ONE_GROUP("backward", "0.5"));
	struct lg_ref_case c = make_case(s, 1, 1);
	const double r = 1.0 / sqrt(1.0 + 1e-6);
	for (int a = 0; a < 2; a++) {
		float angle = a ? (float)(M_PI / 2) : 0.0f;
		fill_pattern(s, &c, angle, B_QKV, B_QW, B_KW, B_FREQS);
		/* g = the forward's output for head 0 (q0) and head 2 (k), 0 for q1, v: 2 */
		uint16_t *gq = c.buf[B_GQ].host, *gk = c.buf[B_GK].host, *gv = c.buf[B_GV].host;
		for (size_t i = 0; i < 64; i++) {
			uint16_t w0 = pattern(0, i), w2 = pattern(2, i);
			if (a && i < 16)
				w0 = neg(pattern(0, i + 16)), w2 = neg(pattern(2, i + 16));
			else if (a && i < 32)
				w0 = pattern(0, i - 16), w2 = pattern(2, i - 16);
			gq[i] = w0;
			gq[64 + i] = 0;
			gk[i] = w2;
			gv[i] = lg_ref_f32_to_bf16(2.0f);
		}
		run(s, &c);
		const uint16_t *dx = c.buf[B_DQKV].host;
		const float *dqw = c.buf[B_DQW].host, *dkw = c.buf[B_DKW].host;
		for (size_t i = 0; i < 64; i++) {
			for (size_t j = 0; j < 3; j++)
				if (fabsf(lg_ref_bf16_to_f32(dx[j * 64 + i])) > 1e-5f)
					fail_msg("angle %d: dqkv head %zu feature %zu = %g, want ~0", a, j, i,
						 (double)lg_ref_bf16_to_f32(dx[j * 64 + i]));
			assert_int_equal(dx[3 * 64 + i], lg_ref_f32_to_bf16(2.0f)); /* dv = gv */
			assert_true(fabs(dqw[i] - r) < 1e-6 && fabs(dkw[i] - r) < 1e-6);
		}
	}
	lg_test_case_free(&c);
	lg_spec_free(s);
}

#define LAYOUT(pass, order, heads)                                                                     \
	"{\"op\": \"qk_norm_rope\", \"pass\": \"" pass "\", \"dtype\": \"bf16\", \"head_dim\": 64, "   \
	"\"q_heads\": 6, \"kv_heads\": 2, \"qkv_order\": \"" order "\", \"head_layout\": \"" heads "\", " \
	"\"silu\": true}"

/* Head j of the interleaved layout with H = 6, h = 2 (w = 3): q j at
 * j + 2 (j / 3), k g at 5 g + 3, v g at 5 g + 4; plain: j. */
static size_t interleaved_slot(size_t j)
{
	if (j < 6)
		return j + 2 * (j / 3);
	return j < 8 ? (j - 6) * 5 + 3 : (j - 8) * 5 + 4;
}

/* The same heads in another layout and order: the same outputs (forward)
 * and the same gradients, moved back (backward). S = 3, B = 2: 10 heads. */
static void test_layouts(void **state)
{
	(void)state;
	uint64_t seed = lg_test_seed("test_layouts");
	static const char *const fwd[4] = {LAYOUT("forward", "seq_batch", "interleaved"),
					   LAYOUT("forward", "seq_batch", "plain"),
					   LAYOUT("forward", "batch_seq", "interleaved"),
					   LAYOUT("forward", "batch_seq", "plain")};
	static const char *const bwd[4] = {LAYOUT("backward", "seq_batch", "interleaved"),
					   LAYOUT("backward", "seq_batch", "plain"),
					   LAYOUT("backward", "batch_seq", "interleaved"),
					   LAYOUT("backward", "batch_seq", "plain")};
	const size_t S = 3, B = 2, W = 10 * 64;
	for (int pass = 0; pass < 2; pass++) {
		lg_spec *s[4];
		struct lg_ref_case c[4];
		int qkv = pass ? B_QKV : F_QKV, out = pass ? B_DQKV : F_Q;
		for (int v = 0; v < 4; v++) {
			s[v] = spec(pass ? bwd[v] : fwd[v]);
			c[v] = make_case(s[v], (int64_t)S, (int64_t)B);
		}
		lg_ref_family_get(s[0]->op)->fill(s[0], &c[0], seed);
		/* the other variants: the same inputs, qkv rearranged */
		for (int v = 1; v < 4; v++) {
			for (int i = 0; i < c[0].n; i++)
				if (!c[0].buf[i].output && i != qkv && c[0].buf[i].count)
					memcpy(c[v].buf[i].host, c[0].buf[i].host, c[0].buf[i].count * c[0].buf[i].elem);
			const uint16_t *x0 = c[0].buf[qkv].host;
			uint16_t *xv = c[v].buf[qkv].host;
			for (size_t p = 0; p < S; p++)
				for (size_t b = 0; b < B; b++)
					for (size_t j = 0; j < 10; j++) {
						size_t row = v >= 2 ? b * S + p : p * B + b;
						size_t slot = v % 2 ? j : interleaved_slot(j);
						memcpy(xv + row * W + slot * 64, x0 + (p * B + b) * W + interleaved_slot(j) * 64,
						       64 * 2);
					}
		}
		for (int v = 0; v < 4; v++)
			run(s[v], &c[v]);
		for (int v = 1; v < 4; v++) {
			if (!pass) { /* q, k, v outputs equal */
				for (int i = out; i < out + 3; i++)
					assert_memory_equal(c[v].buf[i].host, c[0].buf[i].host,
							    c[0].buf[i].count * c[0].buf[i].elem);
				continue;
			}
			const uint16_t *d0 = c[0].buf[out].host, *dv = c[v].buf[out].host;
			for (size_t p = 0; p < S; p++)
				for (size_t b = 0; b < B; b++)
					for (size_t j = 0; j < 10; j++) {
						size_t row = v >= 2 ? b * S + p : p * B + b;
						size_t slot = v % 2 ? j : interleaved_slot(j);
						assert_memory_equal(dv + row * W + slot * 64,
								    d0 + (p * B + b) * W + interleaved_slot(j) * 64, 64 * 2);
					}
			assert_memory_equal(c[v].buf[B_DQW].host, c[0].buf[B_DQW].host, 64 * 4);
			assert_memory_equal(c[v].buf[B_DKW].host, c[0].buf[B_DKW].host, 64 * 4);
		}
		/* and the outputs are not trivially zero */
		const uint16_t *o = c[0].buf[out].host;
		size_t nonzero = 0;
		for (size_t i = 0; i < c[0].buf[out].count; i++)
			nonzero += (o[i] & 0x7fff) != 0;
		assert_true(nonzero > c[0].buf[out].count / 2);
		for (int v = 0; v < 4; v++) {
			lg_test_case_free(&c[v]);
			lg_spec_free(s[v]);
		}
	}
}

/* Spec checks: each a message naming the key, what was found, what is allowed. */
static void test_spec_errors(void **state)
{
	(void)state;
	static const struct {
		const char *keys, *msg[2];
	} bad[] = {
		{"\"head_dim\": 128, \"q_heads\": 16, \"kv_heads\": 3",
		 {"q_heads: found 16", "allowed: a multiple of kv_heads (3)"}},
		{"\"head_dim\": 63, \"q_heads\": 16, \"kv_heads\": 4", {"head_dim: found 63", "64, 128, 256"}},
		{"\"head_dim\": 128, \"q_heads\": 16, \"kv_heads\": 4, \"rotary_fraction\": 0.3",
		 {"rotary_fraction: found 0.3 (rotated width 38.4", "a multiple of 16"}},
		{"\"head_dim\": 64, \"q_heads\": 16, \"kv_heads\": 4, \"rotary_fraction\": 0.125",
		 {"rotary_fraction: found 0.125 (rotated width 8", "a multiple of 16"}},
		{"\"head_dim\": 128, \"q_heads\": 16, \"kv_heads\": 4, \"rotary_fraction\": 1.5",
		 {"rotary_fraction: found 1.5", "at most 1"}},
		{"\"head_dim\": 128, \"q_heads\": 16, \"kv_heads\": 4, \"head_layout\": \"grouped\"",
		 {"head_layout: found \"grouped\"", "\"interleaved\", \"plain\""}},
		{"\"head_dim\": 128, \"q_heads\": 16, \"kv_heads\": 4, \"tile\": {\"ctas\": 528}",
		 {"tile.ctas: found 528", "only in the backward"}},
		{"\"head_dim\": 128, \"q_heads\": 16, \"kv_heads\": 4, \"varlen\": true, \"qkv_order\": \"batch_seq\"",
		 {"qkv_order: found \"batch_seq\"", "\"seq_batch\" with varlen"}},
		{"\"head_dim\": 128, \"q_heads\": 16, \"kv_heads\": 4, \"cp_size\": 2, \"cp_rank\": 2",
		 {"cp_rank: found 2", "allowed: 0 to cp_size - 1 (1)"}},
		{"\"head_dim\": 128, \"q_heads\": 16, \"kv_heads\": 4, \"mscale\": 0",
		 {"mscale: found 0", "allowed"}},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char json[512];
		snprintf(json, sizeof json,
			 "{\"op\": \"qk_norm_rope\", \"pass\": \"forward\", \"dtype\": \"bf16\", %s}", bad[i].keys);
		lg_spec *s = NULL;
		assert_int_equal(lg_spec_parse(json, &s), LG_ERR_SPEC);
		for (int k = 0; k < 2; k++)
			if (!strstr(lg_last_error(), bad[i].msg[k]))
				fail_msg("%s: message \"%s\" lacks \"%s\"", bad[i].keys, lg_last_error(), bad[i].msg[k]);
	}
}

/* Random rows (varied scale), weights and cat(f, f) angles p theta^(-2i/R)
 * for positions 0 .. npos - 1, into the forward buffers of c. */
static void fill_rows(struct lg_ref_case *c, size_t rows, size_t width, size_t npos, size_t r, uint64_t seed)
{
	uint64_t st = seed; /* the weights first: the same for any number of rows */
	lg_ref_fill_bf16(c->buf[F_QW].host, 64, 1.0f, &st);
	lg_ref_fill_bf16(c->buf[F_KW].host, 64, 1.0f, &st);
	uint16_t *x = c->buf[F_QKV].host;
	for (size_t n = 0; n < rows; n++)
		lg_ref_fill_bf16(x + n * width, width, 1.0f + (float)(n % 3), &st);
	float *f = c->buf[F_FREQS].host;
	for (size_t p = 0; p < npos; p++)
		for (size_t i = 0; i < r; i++)
			f[p * r + i] = (float)((double)p * pow(10000.0, -2.0 * (double)(i % (r / 2)) / (double)r));
}

#define VARLEN(extra)                                                                                 \
	"{\"op\": \"qk_norm_rope\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"head_dim\": 64, "  \
	"\"q_heads\": 3, \"kv_heads\": 1, \"varlen\": true" extra "}"
#define FIXED                                                                                         \
	"{\"op\": \"qk_norm_rope\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"head_dim\": 64, "  \
	"\"q_heads\": 3, \"kv_heads\": 1}"

/* The outputs of varlen token n equal those of fixed token (position) pos[n]
 * when both have the same qkv row, weights and freqs: the positions restart
 * at each sequence (an empty one included) and follow the zig-zag halves of
 * context parallelism. Also the varlen buffers as declared. */
static void check_positions(const char *extra, const int32_t *cu, size_t nseq, size_t tokens, size_t cp,
			    const size_t *pos)
{
	lg_spec *v = spec(extra), *f = spec(FIXED);
	size_t width = 5 * 64, npos = tokens * cp;
	struct lg_ref_case cv = make_case(v, (int64_t)tokens, (int64_t)nseq);
	assert_int_equal(cv.buf[F_CU].count, nseq + 1);
	assert_int_equal(cv.buf[F_QKV].count, tokens * width);
	assert_int_equal(cv.buf[F_FREQS].count, npos * 32);
	assert_int_equal(cv.buf[F_Q].count, tokens * 3 * 64);
	memcpy(cv.buf[F_CU].host, cu, (nseq + 1) * sizeof *cu);
	fill_rows(&cv, tokens, width, npos, 32, 7);
	run(v, &cv);
	/* the fixed form at seq npos, batch 1, with varlen row n at row pos[n] */
	struct lg_ref_case cf = make_case(f, (int64_t)npos, 1);
	fill_rows(&cf, npos, width, npos, 32, 7);
	for (size_t n = 0; n < tokens; n++) {
		memcpy((uint16_t *)cf.buf[F_QKV].host + pos[n] * width, (uint16_t *)cv.buf[F_QKV].host + n * width,
		       width * 2);
		run(f, &cf);
		assert_memory_equal((uint16_t *)cv.buf[F_Q].host + n * 192, (uint16_t *)cf.buf[F_Q].host + pos[n] * 192,
				    192 * 2);
		assert_memory_equal((uint16_t *)cv.buf[F_K].host + n * 64, (uint16_t *)cf.buf[F_K].host + pos[n] * 64,
				    64 * 2);
	}
	lg_test_case_free(&cv);
	lg_test_case_free(&cf);
	lg_spec_free(v);
	lg_spec_free(f);
}

static void test_varlen_positions(void **state)
{
	(void)state;
	/* three sequences (5, 0, 7 tokens): positions restart at each */
	static const int32_t cu[] = {0, 5, 5, 12};
	static const size_t pos[] = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6};
	check_positions(VARLEN(""), cu, 3, 12, 1, pos);
	/* context parallel over 2 ranks: global lengths 8 and 12, local 4 and 6;
	 * rank 1 holds halves 1 and 2: positions 2 3 4 5 and 3 4 5 6 7 8 */
	static const int32_t cu2[] = {0, 8, 20};
	static const size_t pos2[] = {2, 3, 4, 5, 3, 4, 5, 6, 7, 8};
	check_positions(VARLEN(", \"cp_size\": 2, \"cp_rank\": 1"), cu2, 2, 10, 2, pos2);
	/* rank 0 of the same: halves 0 and 3 */
	static const size_t pos0[] = {0, 1, 6, 7, 0, 1, 2, 9, 10, 11};
	check_positions(VARLEN(", \"cp_size\": 2, \"cp_rank\": 0"), cu2, 2, 10, 2, pos0);
}

/* mscale multiplies cos and sin: at angle 0, the rotated part scales by it. */
static void test_mscale(void **state)
{
	(void)state;
	lg_spec *s = spec(VARLEN(", \"mscale\": 2"));
	static const int32_t cu[] = {0, 1};
	struct lg_ref_case c = make_case(s, 1, 1);
	memcpy(c.buf[F_CU].host, cu, sizeof cu);
	uint16_t *x = c.buf[F_QKV].host;
	for (size_t i = 0; i < 5 * 64; i++)
		x[i] = BF16_ONE;
	for (size_t i = 0; i < 64; i++)
		((uint16_t *)c.buf[F_QW].host)[i] = ((uint16_t *)c.buf[F_KW].host)[i] = BF16_ONE;
	run(s, &c); /* freqs all 0: cos 1, sin 0 */
	const uint16_t *q = c.buf[F_Q].host;
	for (size_t i = 0; i < 64; i++)
		assert_int_equal(q[i], i < 32 ? 0x4000 : BF16_ONE); /* 2 on the rotated half, else 1 */
	lg_test_case_free(&c);
	lg_spec_free(s);
}

/* Buffers as declared ([S, B] and [B, S] qkv, freqs [S, R]); geometry (one
 * CTA per tile.tokens tokens forward, at most tile.ctas backward, none for
 * no tokens). */
static void test_buffers_geometry(void **state)
{
	(void)state;
	lg_spec *s = spec(LAYOUT("backward", "batch_seq", "plain"));
	struct lg_ref_case c = make_case(s, 7, 3);
	assert_int_equal(c.n, 12);
	assert_int_equal(c.buf[B_CU].count, 0); /* read by the varlen form only */
	assert_int_equal(c.buf[B_QKV].count, 7 * 3 * 10 * 64);
	assert_int_equal(c.buf[B_FREQS].count, 7 * 32);
	assert_int_equal(c.buf[B_GQ].count, 3 * 7 * 6 * 64);
	assert_true(c.buf[B_DQKV].output && c.buf[B_DQW].output && !c.buf[B_QKV].output);
	lg_test_case_free(&c);
	int64_t dims[8];
	int nd;
	int64_t sz[LG_MAX_SIZES] = {7, 3};
	assert_int_equal(lg_arg_shape(s, B_QKV, sz, dims, &nd), LG_OK);
	assert_int_equal(nd, 3);
	assert_true(dims[0] == 3 && dims[1] == 7 && dims[2] == 640);
	lg_spec_free(s);
	s = spec(LAYOUT("forward", "seq_batch", "interleaved"));
	assert_int_equal(lg_arg_shape(s, F_QKV, sz, dims, &nd), LG_OK);
	assert_true(dims[0] == 7 && dims[1] == 3 && dims[2] == 640);

	const struct lg_family *f = lg_family_get(s->op);
	struct lg_target t;
	struct lg_plan p;
	struct lg_launch_dim d;
	assert_true(lg_target_parse("sm_90a", &t));
	assert_int_equal(lg_plan_for(s, &t, &p), LG_OK);
	int64_t none[2] = {0, 5}, one[2] = {1, 1}, big[2] = {4096, 2};
	f->geometry(&p, 0, none, &d);
	assert_int_equal(d.grid[0], 0);
	f->geometry(&p, 0, one, &d);
	assert_int_equal(d.grid[0], 1);
	f->geometry(&p, 0, big, &d);
	assert_int_equal(d.grid[0], 8192 / 8); /* 8 tokens a CTA: 8 lane groups for a token's 10 heads */
	lg_spec_free(s);
	s = spec(ONE_GROUP("backward", "0.5"));
	assert_int_equal(lg_plan_for(s, &t, &p), LG_OK);
	assert_int_equal(p.nentries, 2);
	f->geometry(&p, 0, big, &d);
	assert_int_equal(d.grid[0], 3 * 132); /* the default persistent grid, 3 CTAs an SM */
	f->geometry(&p, 1, none, &d);
	assert_int_equal(d.grid[0], 2 * 64 / 32); /* dq_weight, dk_weight written also for no tokens */
	assert_int_equal(d.block[0], 1024);
	assert_true(f->workspace(&p) >= 264 * 2 * 64 * 4);
	lg_spec_free(s);
	s = spec("{\"op\": \"qk_norm_rope\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"head_dim\": 64, "
		 "\"q_heads\": 2, \"kv_heads\": 1, \"tile\": {\"ctas\": 1056, \"tokens\": 4}}");
	assert_int_equal(lg_plan_for(s, &t, &p), LG_OK);
	f->geometry(&p, 0, big, &d);
	assert_int_equal(d.grid[0], 1056);
	assert_int_equal(f->workspace(&p), 1056 * 2 * 64 * 4);
	lg_spec_free(s);
}

/* The run-time sizes: each up to 2^22; the fixed form's seq x batch below
 * 2^31 (its 32-bit token indices), refused with a message naming both; the
 * varlen form's batch (sequences) bounded by its range alone. */
static void test_sizes(void **state)
{
	(void)state;
	struct lg_target t;
	struct lg_plan p;
	assert_true(lg_target_parse("sm_90a", &t));
	static const char *const specs[2] = {ONE_GROUP("forward", "0.5"), VARLEN("")};
	for (int v = 0; v < 2; v++) {
		lg_spec *s = spec(specs[v]);
		const struct lg_family *f = lg_family_get(s->op);
		assert_int_equal(f->sig[LG_PASS_FORWARD].sizes[1].max, 1 << 22);
		assert_int_equal(lg_plan_for(s, &t, &p), LG_OK);
		const int64_t ok[2] = {4096, 600}, edge[2] = {(1 << 22) - 1, 512}, big[2] = {1 << 22, 512};
		assert_int_equal(f->check_sizes(&p, ok), LG_OK);
		assert_int_equal(f->check_sizes(&p, edge), LG_OK); /* 2^31 - 512 tokens */
		assert_int_equal(f->check_sizes(&p, big), v ? LG_OK : LG_ERR_INVALID_ARG);
		if (!v) {
			assert_non_null(strstr(lg_last_error(), "seq x batch = 4194304 x 512"));
			assert_non_null(strstr(lg_last_error(), "allowed: a product below 2^31"));
		}
		lg_spec_free(s);
	}
}

/* `lingen tune`'s candidates of both passes: several, each generating for
 * sm_90a and sm_80 (the backward's dw entry too). */
static void test_candidates(void **state)
{
	(void)state;
	static const char *const archs[] = {"sm_90a", "sm_80"};
	/* forward: 4 x 2 tokens x threads, 512 threads with 4 and 8 tokens,
	 * min_ctas 1 and 3, no prefetch, batches 1 and 4; backward: 4 x 2
	 * (512 threads: forward only), 3 grids, no prefetch, batches 2 and 4 */
	static const int want[2] = {15, 14};
	for (int pass = 0; pass < 2; pass++) {
		lg_spec *s = spec(pass ? LAYOUT("backward", "seq_batch", "interleaved")
				       : LAYOUT("forward", "seq_batch", "interleaved"));
		const struct lg_family *f = lg_family_get(s->op);
		for (int a = 0; a < 2; a++) {
			struct lg_target t;
			struct lg_tile_choice cands[LG_MAX_CANDIDATES];
			assert_true(lg_target_parse(archs[a], &t));
			int n = f->candidates(s, &t, cands, LG_MAX_CANDIDATES);
			assert_int_equal(n, want[pass]);
			for (int i = 0; i < n; i++) {
				struct lg_spec v;
				struct lg_plan p;
				assert_int_equal(lg_spec_with_tile(s, &cands[i], &v), LG_OK);
				assert_int_equal(lg_spec_check(&v, ""), LG_OK);
				assert_int_equal(lg_plan_for(&v, &t, &p), LG_OK);
				char *src = NULL;
				assert_int_equal(lg_generate_for(&v, &t, &p, &src, NULL), LG_OK);
				assert_non_null(strstr(src, p.entry[p.nentries - 1]));
				free(src);
			}
		}
		lg_spec_free(s);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rotation),      cmocka_unit_test(test_backward_invariance),
		cmocka_unit_test(test_layouts),       cmocka_unit_test(test_spec_errors),
		cmocka_unit_test(test_buffers_geometry), cmocka_unit_test(test_candidates),
		cmocka_unit_test(test_varlen_positions), cmocka_unit_test(test_mscale),
		cmocka_unit_test(test_sizes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
