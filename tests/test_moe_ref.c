/*
 * test_moe_ref.c - the MoE families (moe_row_map, moe_permute,
 * moe_unpermute; docs/kernels.md K4, K5) without a GPU: their references on a
 * small routing worked out by hand (counts, padded offsets, row_id_map,
 * row_index; the top-k forms with dropped slots, repeats and indices out
 * of range give the same map), the permute's rows, zero padding, e4m3
 * scales and probabilities, the combine's sums (plain and weighted) and
 * restored probabilities, the weighted backward's dot products, round
 * trips; the routing patterns of the references; the declared shapes, the
 * spec checks and their messages, uses(), the launch geometry, the
 * workspace, the refusal of sizes past int32 row ids, and the tuning
 * candidates (each validates, plans and
 * generates); the pipelined combine (tile.pipeline 2): its checks, its
 * persistent geometry and what it generates; the typed launchers refuse a
 * NULL kernel.
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

#include "family.h"
#include "generate.h"
#include "lingen.h"
#include "moe_common.h"
#include "moe_ref.h"
#include "numeric_ref.h"
#include "ref.h"
#include "refcase.h"

static lg_spec *parse(const char *op, const char *pass, const char *dtype, const char *keys)
{
	return lg_test_spec(op, pass, dtype, keys);
}

/* The reference case of s at T tokens, every used buffer allocated (zeros). */
static void case_init(struct lg_ref_case *c, const lg_spec *s, int64_t T)
{
	const int64_t sizes[1] = {T};
	unsigned char used[LG_MAX_ARGS];
	lg_spec_uses(s, used);
	assert_int_equal(lg_ref_case_init(c, s, sizes, used, 64), LG_OK);
	lg_ref_family_get(s->op)->describe(s, c);
	for (int i = 0; i < c->n; i++) {
		c->buf[i].host = c->buf[i].count ? calloc(c->buf[i].count + 1, c->buf[i].elem) : NULL;
		assert_true(!c->buf[i].count || c->buf[i].host);
	}
}

/* T = 3, E = 4, multiple 2: token 0 -> experts 1 and 3, token 1 -> 1,
 * token 2 -> 0 and 1. counts 1 3 0 1, padded 2 4 0 2, offsets 0 2 6 6 8;
 * rows: e0 {t2, pad}, e1 {t0, t1, t2, pad}, e3 {t0, pad}; capacity 3 * 2 +
 * 4 * 1 = 10. */
static const uint8_t hand_mask[12] = {0, 1, 0, 1, 0, 1, 0, 0, 1, 1, 0, 0};
static const int32_t hand_map[12] = {-1, 2, -1, 6, -1, 3, -1, -1, 0, 4, -1, -1};
static const int32_t hand_counts[4] = {1, 3, 0, 1}, hand_offsets[5] = {0, 2, 6, 6, 8};
static const int32_t hand_index[10] = {2, -1, 0, 1, 2, -1, 0, -1, -1, -1};
#define HAND_KEYS "\"experts\": 4, \"top_k\": 2, \"multiple\": 2"

enum { A_MASK, A_I32, A_I64, A_MAP, A_COUNTS, A_OFFSETS, A_INDEX, A_PADDED };

static void check_hand_map(const struct lg_ref_case *c)
{
	assert_memory_equal(c->buf[A_MAP].host, hand_map, sizeof hand_map);
	assert_memory_equal(c->buf[A_COUNTS].host, hand_counts, sizeof hand_counts);
	assert_memory_equal(c->buf[A_OFFSETS].host, hand_offsets, sizeof hand_offsets);
	assert_int_equal(c->buf[A_INDEX].count, 10);
	assert_memory_equal(c->buf[A_INDEX].host, hand_index, sizeof hand_index);
	static const int32_t padded[4] = {2, 4, 0, 2};
	assert_memory_equal(c->buf[A_PADDED].host, padded, sizeof padded);
}

static void test_row_map_by_hand(void **state)
{
	(void)state;
	lg_spec *s = parse("moe_row_map", "forward", "bf16", HAND_KEYS);
	struct lg_ref_case c;
	case_init(&c, s, 3);
	for (int i = A_MAP; i <= A_PADDED; i++)
		assert_int_equal(c.buf[i].cmp, LG_CMP_EXACT);
	uint8_t *m = c.buf[A_MASK].host;
	for (int i = 0; i < 12; i++)
		m[i] = hand_mask[i] ? (uint8_t)(i % 2 ? 1 : 0xff) : 0; /* any non-zero byte is routed */
	lg_ref_family_get(s->op)->run(s, &c);
	check_hand_map(&c);
	lg_test_case_free(&c);
	lg_spec_free(s);

	/* top-k slots: a dropped slot (-1), an index out of range, a repeat */
	static const int64_t slots[6] = {3, 1, 1, -1, 1, 0};
	static const int64_t odd_slots[6] = {1, 3, 4, 1, 0, 1};
	for (int w = 0; w < 2; w++)
		for (int v = 0; v < 2; v++) {
			const int64_t *sl = v ? odd_slots : slots;
			s = parse("moe_row_map", "forward", "bf16",
				  w ? HAND_KEYS ", \"routing\": \"topk_i64\"" : HAND_KEYS ", \"routing\": \"topk_i32\"");
			case_init(&c, s, 3);
			assert_int_equal(c.buf[A_MASK].count, 0);
			for (int i = 0; i < 6; i++) {
				if (w)
					((int64_t *)c.buf[A_I64].host)[i] = sl[i];
				else
					((int32_t *)c.buf[A_I32].host)[i] = (int32_t)sl[i];
			}
			lg_ref_family_get(s->op)->run(s, &c);
			check_hand_map(&c);
			lg_test_case_free(&c);
			lg_spec_free(s);
		}
}

/* The map of every routing pattern: rows of each expert consecutive from
 * its offset, in token order, each padded to the multiple; row_index the
 * inverse; patterns as moe_ref.h says. */
static void test_row_map_patterns(void **state)
{
	(void)state;
	const int64_t T = 100, E = 12, K = 3, M = 4, cap = lg_moe_ref_cap(T, E, K, M);
	uint8_t *mask = malloc((size_t)(T * E));
	int32_t *map = malloc((size_t)(T * E) * 4), counts[12], offsets[13], *index = malloc((size_t)cap * 4);
	assert_true(mask && map && index);
	for (uint64_t sd = 40; sd < 44; sd++) {
		int p = lg_moe_ref_pattern(sd);
		lg_moe_ref_routing(mask, T, E, K, sd);
		int64_t P = lg_moe_ref_map(mask, T, E, M, cap, map, counts, offsets, index);
		int64_t fewer = 0, empty = 0;
		for (int64_t t = 0; t < T; t++) {
			int64_t n = 0;
			for (int64_t e = 0; e < E; e++)
				n += mask[t * E + e];
			assert_true(n <= K);
			fewer += n < K;
		}
		for (int64_t e = 0; e < E; e++) {
			empty += counts[e] == 0;
			assert_int_equal(offsets[e + 1] - offsets[e], (counts[e] + M - 1) / M * M);
			int64_t seen = 0, last = -1;
			for (int64_t t = 0; t < T; t++) {
				if (!mask[t * E + e]) {
					assert_int_equal(map[t * E + e], -1);
					continue;
				}
				assert_int_equal(map[t * E + e], offsets[e] + seen);
				assert_int_equal(index[map[t * E + e]], t);
				assert_true(t > last);
				last = t, seen++;
			}
			for (int64_t r = offsets[e] + counts[e]; r < offsets[e + 1]; r++)
				assert_int_equal(index[r], -1);
		}
		assert_int_equal(P, offsets[E]);
		assert_true(P <= cap);
		for (int64_t r = P; r < cap; r++)
			assert_int_equal(index[r], -1);
		if (p == 0)
			assert_int_equal(fewer, 0);
		if (p == 1) { /* every token on expert E / 2 */
			assert_int_equal(counts[E / 2], T);
			assert_int_equal(empty, E - 1);
		}
		if (p == 2)
			assert_true(empty >= E - (K + 2));
		if (p == 3)
			assert_true(fewer > 0);
	}
	free(mask);
	free(map);
	free(index);
	assert_int_equal(lg_moe_ref_pattern(12345), 0); /* the benchmark's seed: an even routing */
}

enum { F_X, F_XS, F_PROBS, F_MAP, F_OFF, F_CNT, F_OUT, F_OUTS, F_OUTP };

/* The permute of the hand routing: rows copied, padding and rows past P
 * zeros with probability 0 and (e4m3) the zero block's scale. */
static void test_permute_by_hand(void **state)
{
	(void)state;
	for (int fp8 = 0; fp8 < 2; fp8++) {
		lg_spec *s = parse("moe_permute", "forward", fp8 ? "e4m3" : "bf16",
				   fp8 ? "\"hidden\": 128, " HAND_KEYS ", \"round_scale\": false"
				       : "\"hidden\": 3, " HAND_KEYS);
		struct lg_ref_case c;
		case_init(&c, s, 3);
		int64_t H = fp8 ? 128 : 3, es = fp8 ? 1 : 2;
		assert_int_equal(c.buf[F_OUT].count, 10 * H);
		assert_int_equal(c.buf[F_XS].count, fp8 ? 3 : 0);
		memcpy(c.buf[F_MAP].host, hand_map, sizeof hand_map);
		memcpy(c.buf[F_OFF].host, hand_offsets, sizeof hand_offsets);
		memcpy(c.buf[F_CNT].host, hand_counts, sizeof hand_counts);
		uint8_t *x = c.buf[F_X].host;
		for (int64_t i = 0; i < 3 * H * es; i++)
			x[i] = (uint8_t)(i / (H * es) + 1); /* token t: bytes t + 1 */
		for (int i = 0; i < 12; i++)
			((float *)c.buf[F_PROBS].host)[i] = (float)i;
		if (fp8)
			for (int t = 0; t < 3; t++)
				((float *)c.buf[F_XS].host)[t] = (float)(t + 10);
		lg_ref_family_get(s->op)->run(s, &c);
		const uint8_t *out = c.buf[F_OUT].host;
		const float *op = c.buf[F_OUTP].host;
		for (int r = 0; r < 10; r++) {
			int t = hand_index[r];
			for (int64_t i = 0; i < H * es; i++)
				assert_int_equal(out[r * H * es + i], t < 0 ? 0 : t + 1);
			int e = -1;
			for (int k = 0; k < 12; k++)
				if (hand_map[k] == r)
					e = k;
			assert_true(op[r] == (e < 0 ? 0.0f : (float)e));
			if (fp8)
				assert_true(((float *)c.buf[F_OUTS].host)[r] == (t < 0 ? 1e-30f : (float)(t + 10)));
		}
		lg_test_case_free(&c);
		lg_spec_free(s);
	}
	/* power-of-two scales: the zero block's scale is 2^-99 */
	lg_spec *s = parse("moe_permute", "forward", "e4m3", "\"hidden\": 128, " HAND_KEYS);
	struct lg_ref_case c;
	case_init(&c, s, 3);
	memcpy(c.buf[F_MAP].host, hand_map, sizeof hand_map);
	memcpy(c.buf[F_OFF].host, hand_offsets, sizeof hand_offsets);
	memcpy(c.buf[F_CNT].host, hand_counts, sizeof hand_counts);
	lg_ref_family_get(s->op)->run(s, &c);
	assert_true(((float *)c.buf[F_OUTS].host)[1] == 0x1p-99f);
	assert_true(((float *)c.buf[F_OUTS].host)[9] == 0x1p-99f);
	lg_test_case_free(&c);
	lg_spec_free(s);
}

enum { UF_G, UF_PROBS, UF_MAP, UF_OUT, UF_RPROBS };
enum { UB_DOUT, UB_DRP, UB_MAP, UB_OFF, UB_CNT, UB_G, UB_PROBS, UB_DG, UB_DPROBS };

static float bf(const struct lg_ref_case *c, int i, int64_t at)
{
	return lg_ref_bf16_to_f32(((const uint16_t *)c->buf[i].host)[at]);
}

static void set_bf(struct lg_ref_case *c, int i, int64_t at, float v)
{
	((uint16_t *)c->buf[i].host)[at] = lg_ref_f32_to_bf16(v);
}

/* The combine of the hand routing, H = 2: row r holds (r + 1, -(r + 1));
 * padding rows hold 1000 (never read). Token 0 = rows 2 + 6, token 1 =
 * row 3, token 2 = rows 0 + 4; weighted with probs[r] = r / 4. */
static void test_unpermute_by_hand(void **state)
{
	(void)state;
	for (int w = 0; w < 2; w++) {
		lg_spec *s = parse("moe_unpermute", "forward", "bf16",
				   w ? "\"hidden\": 2, " HAND_KEYS ", \"weighted\": true" : "\"hidden\": 2, " HAND_KEYS);
		struct lg_ref_case c;
		case_init(&c, s, 3);
		assert_int_equal(c.buf[UF_OUT].cmp, w ? LG_CMP_BF16 : LG_CMP_BF16_ULP);
		memcpy(c.buf[UF_MAP].host, hand_map, sizeof hand_map);
		for (int r = 0; r < 10; r++) {
			bool pad = hand_index[r] < 0;
			set_bf(&c, UF_G, 2 * r, pad ? 1000.0f : (float)(r + 1));
			set_bf(&c, UF_G, 2 * r + 1, pad ? 1000.0f : -(float)(r + 1));
			((float *)c.buf[UF_PROBS].host)[r] = (float)r / 4;
		}
		lg_ref_family_get(s->op)->run(s, &c);
		const float want[3] = {w ? 3 * 0.5f + 7 * 1.5f : 3 + 7, w ? 4 * 0.75f : 4, w ? 1 * 0.0f + 5 * 1.0f : 1 + 5};
		for (int t = 0; t < 3; t++) {
			assert_true(bf(&c, UF_OUT, 2 * t) == want[t]);
			assert_true(bf(&c, UF_OUT, 2 * t + 1) == -want[t]);
		}
		const float *rp = c.buf[UF_RPROBS].host;
		for (int i = 0; i < 12; i++)
			assert_true(rp[i] == (hand_map[i] < 0 ? 0.0f : (float)hand_map[i] / 4));
		lg_test_case_free(&c);
		lg_spec_free(s);
	}
	/* the weighted backward: dg[r] = probs[r] dout[t], dprobs[r] = <dout[t], g[r]> + drestore[t, e] */
	lg_spec *s = parse("moe_unpermute", "backward", "bf16", "\"hidden\": 2, " HAND_KEYS ", \"weighted\": true");
	struct lg_ref_case c;
	case_init(&c, s, 3);
	memcpy(c.buf[UB_MAP].host, hand_map, sizeof hand_map);
	memcpy(c.buf[UB_OFF].host, hand_offsets, sizeof hand_offsets);
	memcpy(c.buf[UB_CNT].host, hand_counts, sizeof hand_counts);
	for (int t = 0; t < 3; t++)
		set_bf(&c, UB_DOUT, 2 * t, (float)(t + 1)), set_bf(&c, UB_DOUT, 2 * t + 1, 1.0f);
	for (int r = 0; r < 10; r++) {
		set_bf(&c, UB_G, 2 * r, 2.0f), set_bf(&c, UB_G, 2 * r + 1, (float)r);
		((float *)c.buf[UB_PROBS].host)[r] = 0.5f;
	}
	for (int i = 0; i < 12; i++)
		((float *)c.buf[UB_DRP].host)[i] = 100.0f * (float)i;
	lg_ref_family_get(s->op)->run(s, &c);
	const float *dp = c.buf[UB_DPROBS].host;
	for (int r = 0; r < 10; r++) {
		int t = hand_index[r], e = -1;
		for (int k = 0; k < 12; k++)
			if (hand_map[k] == r)
				e = k % 4;
		assert_true(bf(&c, UB_DG, 2 * r) == (t < 0 ? 0.0f : 0.5f * (float)(t + 1)));
		assert_true(dp[r] == (t < 0 ? 0.0f : 2.0f * (float)(t + 1) + (float)r + 100.0f * (float)(t * 4 + e)));
	}
	lg_test_case_free(&c);
	lg_spec_free(s);
}

enum { Q_X, Q_PROBS, Q_INDEX, Q_PADDED, Q_Q, Q_S, Q_QT, Q_ST, Q_OUTP };

/* K4b on the hand routing, hidden 128, power-of-two scales: token t is all
 * t + 1, so each real row's 1x128 block has scale 2^ceil(log2((t + 1) /
 * 448)) (2^-8 for 1, 2^-7 for 2 and 3) and payload (t + 1) / scale; padding rows are zero
 * blocks (scale 2^-99, payload 0); segments of 2, 4, 0 and 2 rows; rows
 * past P = 8 are left alone (the poison); out_probs probs[t, e]; the
 * columnwise copy per expert segment (docs/kernels.md 1.3). */
static void test_permute_quant_by_hand(void **state)
{
	(void)state;
	lg_spec *s = parse("moe_permute_quant", "forward", "bf16", "\"hidden\": 128, " HAND_KEYS ", \"quant\": {}");
	struct lg_ref_case c;
	case_init(&c, s, 3);
	assert_int_equal(c.buf[Q_Q].count, 10 * 128);
	memcpy(c.buf[Q_INDEX].host, hand_index, sizeof hand_index);
	static const int32_t padded[4] = {2, 4, 0, 2};
	memcpy(c.buf[Q_PADDED].host, padded, sizeof padded);
	for (int t = 0; t < 3; t++)
		for (int h = 0; h < 128; h++)
			set_bf(&c, Q_X, t * 128 + h, (float)(t + 1));
	for (int i = 0; i < 12; i++)
		((float *)c.buf[Q_PROBS].host)[i] = (float)i;
	lg_ref_family_get(s->op)->run(s, &c);
	const uint8_t *q = c.buf[Q_Q].host;
	const float *sc = c.buf[Q_S].host, *op = c.buf[Q_OUTP].host;
	static const int seg0[4] = {0, 2, 6, 6}, expert_of[8] = {0, 0, 1, 1, 1, 1, 3, 3};
	for (int r = 0; r < 10; r++) {
		int t = hand_index[r];
		if (r >= 8) { /* past P: not written */
			assert_int_equal(q[r * 128], 0xff);
			continue;
		}
		int e = expert_of[r];
		float want_s = t < 0 ? 0x1p-99f : lg_ref_scale((float)(t + 1), true);
		/* s: a [1, P_e] block an expert, at element seg0 */
		assert_true(sc[seg0[e] + (r - seg0[e])] == want_s);
		assert_int_equal(q[r * 128 + 5], t < 0 ? 0 : lg_ref_quant((float)(t + 1), want_s, true));
		assert_true(t < 0 || want_s == ((t + 1) == 1 ? 0x1p-8f : 0x1p-7f));
		assert_true(op[r] == (t < 0 ? 0.0f : (float)(t * 4 + e)));
	}
	/* the columnwise copy: each expert's segment a tensor of its own (its 128-row block
	 * starts at the segment, never straddles two experts; padding rows count as 0): qt a
	 * [128, P_e] block at element seg0 * 128, st one row an expert (e0, e1, e3; expert 2 has
	 * none), the scale of the segment's amax: 3 (e0, e1) or 1 (e3) */
	const uint8_t *qt = c.buf[Q_QT].host;
	const float *st = c.buf[Q_ST].host;
	static const int st_row[4] = {0, 1, -1, 2}, seg_n[4] = {2, 4, 0, 2};
	for (int e = 0; e < 4; e++) {
		if (st_row[e] < 0)
			continue;
		float want_st = lg_ref_scale(e == 3 ? 1.0f : 3.0f, true);
		for (int h = 0; h < 128; h += 37) {
			assert_true(st[st_row[e] * 128 + h] == want_st);
			for (int i = 0; i < seg_n[e]; i++) {
				int t = hand_index[seg0[e] + i];
				uint8_t want = t < 0 ? 0 : lg_ref_quant((float)(t + 1), want_st, true);
				assert_int_equal(qt[seg0[e] * 128 + h * seg_n[e] + i], want);
			}
		}
	}
	assert_true(lg_ref_scale(3.0f, true) == 0x1p-7f && lg_ref_scale(1.0f, true) == 0x1p-8f);
	lg_test_case_free(&c);
	lg_spec_free(s);
}

/* Round trip on the references: permute then the permute's backward gives
 * each token times its number of experts (small integers: exact). */
static void test_round_trip(void **state)
{
	(void)state;
	const int64_t T = 50, E = 10, K = 3, M = 8, H = 24, cap = lg_moe_ref_cap(T, E, K, M);
	for (uint64_t p = 0; p < 4; p++) {
		struct lg_moe_ref_io io = {.T = T, .E = E, .K = K, .M = M, .H = H, .cap = cap, .es = 2};
		int32_t *map = malloc((size_t)(T * E) * 4), off[11], cnt[10];
		uint16_t *x = malloc((size_t)(T * H) * 2), *rows = malloc((size_t)(cap * H) * 2),
			 *back = malloc((size_t)(T * H) * 2);
		assert_true(map && x && rows && back);
		lg_moe_ref_fill_map(T, E, K, M, 8 + p, map, off, cnt);
		for (int64_t i = 0; i < T * H; i++)
			x[i] = lg_ref_f32_to_bf16((float)(i % 17) - 8.0f);
		io.map = map, io.offsets = off, io.counts = cnt, io.src = x, io.dst = rows;
		lg_moe_ref_dispatch(&io);
		struct lg_moe_ref_io jo = io;
		jo.src = rows, jo.dst = back;
		lg_moe_ref_combine(&jo);
		for (int64_t t = 0; t < T; t++) {
			int64_t n = 0;
			for (int64_t e = 0; e < E; e++)
				n += map[t * E + e] >= 0;
			for (int64_t h = 0; h < H; h++)
				assert_true(lg_ref_bf16_to_f32(back[t * H + h]) ==
					    (float)n * lg_ref_bf16_to_f32(x[t * H + h]));
		}
		free(map);
		free(x);
		free(rows);
		free(back);
	}
}

static void test_shapes(void **state)
{
	(void)state;
	const int64_t sizes[1] = {8192};
	int64_t dims[8];
	int nd;
	lg_spec *s = parse("moe_permute", "forward", "e4m3", "\"hidden\": 2048, \"experts\": 256, \"top_k\": 8");
	assert_int_equal(lg_arg_shape(s, F_OUT, sizes, dims, &nd), LG_OK);
	assert_true(nd == 2 && dims[0] == 8192 * 8 + 256 * 15 && dims[1] == 2048);
	assert_int_equal(lg_arg_shape(s, F_OUTS, sizes, dims, &nd), LG_OK);
	assert_true(nd == 2 && dims[0] == 69376 && dims[1] == 16);
	assert_int_equal(lg_arg_elem(s, &lg_family_get(s->op)->sig[0].args[F_OUT]), LG_ELEM_E4M3);
	unsigned char used[LG_MAX_ARGS];
	lg_spec_uses(s, used);
	assert_true(used[F_XS] && used[F_OUTS]);
	lg_spec_free(s);
	s = parse("moe_permute", "forward", "bf16", "\"hidden\": 2048, \"experts\": 256, \"top_k\": 8");
	lg_spec_uses(s, used);
	assert_true(!used[F_XS] && !used[F_OUTS] && used[F_PROBS]);
	lg_spec_free(s);
	s = parse("moe_row_map", "forward", "bf16", "\"experts\": 256, \"top_k\": 8, \"routing\": \"topk_i64\"");
	lg_spec_uses(s, used);
	assert_true(!used[A_MASK] && !used[A_I32] && used[A_I64]);
	assert_int_equal(lg_arg_shape(s, A_OFFSETS, sizes, dims, &nd), LG_OK);
	assert_true(nd == 1 && dims[0] == 257);
	lg_spec_free(s);
	s = parse("moe_unpermute", "backward", "bf16", "\"hidden\": 2048, \"experts\": 256, \"top_k\": 8");
	lg_spec_uses(s, used);
	assert_true(!used[UB_G] && !used[UB_PROBS] && lg_arg_needs(used[UB_DPROBS]) == -1);
	lg_spec_free(s);
	/* weighted: probs required; dprobs (dout . g) given only with g, declared so that launches check it */
	s = parse("moe_unpermute", "backward", "bf16", "\"hidden\": 2048, \"experts\": 256, \"top_k\": 8, "
		  "\"weighted\": true");
	lg_spec_uses(s, used);
	assert_true(used[UB_G] == 1 && used[UB_PROBS] == LG_ARG_REQUIRED);
	assert_int_equal(lg_arg_needs(used[UB_DPROBS]), UB_G);
	assert_int_equal(lg_spec_arg_used(s, UB_DPROBS), 1);
	lg_spec_free(s);
}

/* A spec a family refuses, and the words its message must hold. */
static void refused(const char *op, const char *pass, const char *dtype, const char *keys, const char *want1,
		    const char *want2)
{
	char *json = lg_test_spec_json(op, pass, dtype, keys);
	lg_test_refused(json, keys, want1, want2);
	free(json);
}

static void test_spec_checks(void **state)
{
	(void)state;
	refused("moe_row_map", "forward", "bf16", "\"experts\": 4, \"top_k\": 5", "top_k: found 5", "experts = 4");
	refused("moe_row_map", "forward", "bf16", "\"experts\": 4, \"top_k\": 2, \"routing\": \"topk\"", "routing",
		"topk_i32");
	refused("moe_row_map", "forward", "bf16", "\"experts\": 2000, \"top_k\": 2", "experts", "1024");
	refused("moe_row_map", "forward", "bf16", "\"experts\": 4, \"top_k\": 2, \"multiple\": 0", "multiple", "0");
	refused("moe_row_map", "forward", "bf16", "\"experts\": 4, \"top_k\": 2, \"tile\": {\"slices\": 100}",
		"slices", "100");
	refused("moe_row_map", "backward", "bf16", "\"experts\": 4, \"top_k\": 2", "pass", "forward");
	refused("moe_permute", "forward", "e4m3", "\"hidden\": 100, \"experts\": 4, \"top_k\": 2",
		"hidden: found 100", "multiple of 128");
	refused("moe_permute", "backward", "e4m3", "\"hidden\": 128, \"experts\": 4, \"top_k\": 2", "e4m3", "bf16");
	refused("moe_permute", "forward", "bf16", "\"hidden\": 64, \"experts\": 4, \"top_k\": 2, \"tile\": "
		"{\"threads\": 64}", "tile.threads: found 64", "at most 32");
	refused("moe_unpermute", "forward", "fp32", "\"hidden\": 64, \"experts\": 4, \"top_k\": 2", "dtype", "bf16");
	refused("moe_unpermute", "forward", "bf16", "\"hidden\": 64, \"experts\": 4", "top_k", "missing");
	refused("moe_unpermute", "forward", "bf16", "\"hidden\": 64, \"experts\": 4, \"top_k\": 2, \"quant\": {}",
		"quant", "allowed");
	refused("moe_permute_quant", "forward", "bf16", "\"hidden\": 100, \"experts\": 4, \"top_k\": 2, \"quant\": {}",
		"hidden", "multiple of 128");
	refused("moe_permute_quant", "forward", "bf16", "\"hidden\": 128, \"experts\": 4, \"top_k\": 2", "quant",
		"missing");
	/* the pipelined form: the combines and the plain dispatch (moe_permute forward) only, room
	 * for the map warp, 1 or 2 */
	refused("moe_unpermute", "backward", "bf16", "\"hidden\": 2048, \"experts\": 4, \"top_k\": 2, \"tile\": "
		"{\"pipeline\": 2}", "tile.pipeline: found 2 on pass backward", "allowed: 1");
	refused("moe_permute", "forward", "bf16", "\"hidden\": 16384, \"experts\": 4, \"top_k\": 2, \"tile\": "
		"{\"pipeline\": 2, \"threads\": 1024}", "tile.threads: found 1024", "at most 992");
	refused("moe_unpermute", "forward", "bf16", "\"hidden\": 16384, \"experts\": 4, \"top_k\": 2, \"tile\": "
		"{\"pipeline\": 2, \"threads\": 1024}", "tile.threads: found 1024", "at most 992");
	refused("moe_permute", "backward", "bf16", "\"hidden\": 2048, \"experts\": 4, \"top_k\": 2, \"tile\": "
		"{\"pipeline\": 3}", "pipeline", "3");
}

/* Row map: two kernels of min(tokens, 128) CTAs (at least 1), 512 threads,
 * 128 x experts counts of workspace, PDL on sm_90 only. Permute: a CTA a
 * token (256 threads of 16 bytes at hidden 2048, 128 for e4m3) plus 256
 * for the zero rows; the backward and unpermute a CTA a token; odd hidden
 * sizes move 2-byte pieces. */
/* weighted: the optional probs becomes required (lg_spec_arg_used 2), in
 * both passes; unweighted the forward may leave it out and the backward
 * ignores it. Arguments: forward g, probs, ...; backward dout, drestore,
 * row_id_map, offsets, counts, g, probs, ... */
static void test_required_by_keys(void **state)
{
	(void)state;
	for (int w = 0; w < 2; w++) {
		const char *keys = w ? "\"hidden\": 64, \"experts\": 8, \"top_k\": 2, \"weighted\": true"
				     : "\"hidden\": 64, \"experts\": 8, \"top_k\": 2";
		lg_spec *f = parse("moe_unpermute", "forward", "bf16", keys);
		lg_spec *b = parse("moe_unpermute", "backward", "bf16", keys);
		assert_int_equal(lg_spec_arg_used(f, 1), w ? 2 : 1);
		assert_int_equal(lg_spec_arg_used(f, 0), 1);
		assert_int_equal(lg_spec_arg_used(b, 6), w ? 2 : 0);
		assert_int_equal(lg_spec_arg_used(b, 5), w ? 1 : 0);
		lg_spec_free(f);
		lg_spec_free(b);
	}
}

static void test_geometry(void **state)
{
	(void)state;
	struct lg_launch_dim d;
	struct lg_plan p;
	lg_spec *s = parse("moe_row_map", "forward", "bf16", "\"experts\": 256, \"top_k\": 8");
	const struct lg_family *f = lg_family_get(s->op);
	lg_test_plan(s, "sm_90a", &p, LG_OK);
	assert_int_equal(p.nentries, 2);
	assert_true(!p.early[0] && p.early[1]);
	/* the slices' counts [128][256] */
	assert_int_equal(f->workspace(&p), (size_t)128 * 256 * 4);
	int64_t T = 8192;
	for (int e = 0; e < 2; e++) { /* the count kernel, the map kernel: a CTA a slice */
		f->geometry(&p, e, &T, &d);
		assert_true(d.grid[0] == 128 && d.block[0] == 512);
	}
	T = 0;
	f->geometry(&p, 1, &T, &d);
	assert_int_equal(d.grid[0], 1);
	T = 5;
	f->geometry(&p, 1, &T, &d);
	assert_int_equal(d.grid[0], 5);
	lg_test_plan(s, "sm_80", &p, LG_OK);
	assert_false(p.early[1]);
	lg_spec_free(s);

	s = parse("moe_permute", "forward", "bf16", "\"hidden\": 2048, \"experts\": 256, \"top_k\": 8");
	f = lg_family_get(s->op);
	lg_test_plan(s, "sm_90a", &p, LG_OK);
	T = 8192;
	f->geometry(&p, 0, &T, &d);
	assert_true(d.grid[0] == 8192 + 256 && d.block[0] == 256);
	lg_spec_free(s);
	s = parse("moe_permute", "forward", "e4m3", "\"hidden\": 2048, \"experts\": 256, \"top_k\": 8");
	lg_test_plan(s, "sm_90a", &p, LG_OK);
	f->geometry(&p, 0, &T, &d);
	assert_true(d.grid[0] == 8192 + 256 && d.block[0] == 128);
	lg_spec_free(s);
	s = parse("moe_permute", "backward", "bf16", "\"hidden\": 1001, \"experts\": 160, \"top_k\": 6");
	lg_test_plan(s, "sm_90a", &p, LG_OK);
	f->geometry(&p, 0, &T, &d);
	/* the combine pipelined by default: the map warp beside 256 threads, persistent */
	assert_true(d.grid[0] == 8192 && d.block[0] == 288 && p.persistent[0]);
	struct lg_moe_rows r = lg_moe_rows_of(1001, 2, 0);
	assert_true(r.vb == 2 && r.pieces == 1001 && r.kp == 4);
	r = lg_moe_rows_of(7168, 2, 0);
	assert_true(r.vb == 16 && r.pieces == 896 && r.threads == 256 && r.kp == 4);
	r = lg_moe_rows_of(2050, 2, 0);
	assert_true(r.vb == 4 && r.pieces == 1025);
	r = lg_moe_rows_of(3, 1, 0);
	assert_true(r.vb == 1 && r.threads == 32 && r.kp == 1);
	lg_spec_free(s);
	s = parse("moe_unpermute", "backward", "bf16", "\"hidden\": 2048, \"experts\": 256, \"top_k\": 8, "
		  "\"tile\": {\"threads\": 128}");
	f = lg_family_get(s->op);
	lg_test_plan(s, "sm_90a", &p, LG_OK);
	T = 7;
	f->geometry(&p, 0, &T, &d);
	assert_true(d.grid[0] == 7 + 256 && d.block[0] == 128);
	assert_false(p.persistent[0]);
	lg_spec_free(s);
}

/* Row ids are int32: at a token count whose capacity rows (tokens * top_k +
 * experts * (multiple - 1)) pass 2^31 - 1, every MoE family's geometry is
 * one the runtime refuses (a grid past INT32_MAX); one token fewer than the
 * bound, the ordinary one. */
static void test_int32_rows(void **state)
{
	(void)state;
	static const char *const specs[][3] = {
		{"moe_row_map", "forward", "\"experts\": 8, \"top_k\": 8, \"multiple\": 1"},
		{"moe_permute", "forward", "\"hidden\": 1, \"experts\": 8, \"top_k\": 8, \"multiple\": 1"},
		{"moe_permute", "backward", "\"hidden\": 1, \"experts\": 8, \"top_k\": 8, \"multiple\": 1"},
		{"moe_unpermute", "forward", "\"hidden\": 1, \"experts\": 8, \"top_k\": 8, \"multiple\": 1"},
		{"moe_unpermute", "backward", "\"hidden\": 1, \"experts\": 8, \"top_k\": 8, \"multiple\": 1"},
		{"moe_permute_quant", "forward", "\"hidden\": 128, \"experts\": 512, \"top_k\": 512, "
		 "\"multiple\": 1, \"quant\": {}"},
	};
	for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
		lg_spec *s = parse(specs[i][0], specs[i][1], "bf16", specs[i][2]);
		const struct lg_family *f = lg_family_get(s->op);
		struct lg_plan p;
		lg_test_plan(s, "sm_90a", &p, LG_OK);
		const int64_t k = i == 5 ? 512 : 8, last = INT32_MAX / k; /* multiple 1: the capacity is T * k */
		for (int64_t T = last; T <= last + 1; T++) {
			struct lg_launch_dim d;
			f->geometry(&p, p.nentries - 1, &T, &d);
			if ((d.grid[0] > INT32_MAX) != (T > last))
				fail_msg("%s at %lld tokens: grid %u", lg_spec_entry(s), (long long)T, d.grid[0]);
		}
		lg_spec_free(s);
	}
}

static char *generate(const lg_spec *s, const char *arch)
{
	struct lg_target t;
	assert_true(lg_target_parse(arch, &t));
	struct lg_plan p;
	char *out[1] = {NULL}; /* (through an array: Release's gcc 12 took &src for a pointer kept) */
	if (lg_generate_for(s, &t, &p, out, NULL) != LG_OK)
		fail_msg("%s: %s", lg_spec_entry(s), lg_last_error());
	return out[0];
}

/* The pipelined combine: a persistent entry of threads + 32 (the map warp),
 * a CTA a token until the context knows what is co-resident, then at most
 * that; the default form not persistent, one CTA a token. */
static void test_pipelined_geometry(void **state)
{
	(void)state;
	static const char *const specs[][2] = {
		{"moe_unpermute", "forward"},
		{"moe_permute", "backward"},
	};
	for (int i = 0; i < 2; i++) {
		struct lg_launch_dim d;
		struct lg_plan p;
		lg_spec *s = parse(specs[i][0], specs[i][1], "bf16", "\"hidden\": 2048, \"experts\": 256, \"top_k\": 8, "
				   "\"tile\": {\"pipeline\": 2}");
		const struct lg_family *f = lg_family_get(s->op);
		assert_non_null(strstr(lg_spec_entry(s), "_tp2"));
		lg_test_plan(s, "sm_90a", &p, LG_OK);
		assert_true(p.nentries == 1 && p.persistent[0]);
		assert_int_equal(p.tile[lg_family_key(f, "tile.pipeline")], 2);
		int64_t T = 8192;
		f->geometry(&p, 0, &T, &d);
		assert_true(d.grid[0] == 8192 && d.block[0] == 288 && d.smem == 0);
		p.resident[0] = 132 * 4;
		f->geometry(&p, 0, &T, &d);
		assert_int_equal(d.grid[0], 132 * 4);
		T = 7;
		f->geometry(&p, 0, &T, &d);
		assert_int_equal(d.grid[0], 7);
		T = 0;
		f->geometry(&p, 0, &T, &d);
		assert_int_equal(d.grid[0], 0);
		lg_spec_free(s);
		s = parse(specs[i][0], specs[i][1], "bf16", "\"hidden\": 7, \"experts\": 5, \"top_k\": 2, "
			  "\"tile\": {\"pipeline\": 2}");
		lg_test_plan(s, "sm_80", &p, LG_OK);
		T = 333;
		f->geometry(&p, 0, &T, &d);
		assert_true(d.grid[0] == 333 && d.block[0] == 64);
		lg_spec_free(s);
		s = parse(specs[i][0], specs[i][1], "bf16", "\"hidden\": 2048, \"experts\": 256, \"top_k\": 8, "
			  "\"tile\": {\"pipeline\": 1}");
		lg_test_plan(s, "sm_90a", &p, LG_OK);
		assert_false(p.persistent[0]);
		p.resident[0] = 132 * 4;
		T = 8192;
		f->geometry(&p, 0, &T, &d);
		assert_true(d.grid[0] == 8192 && d.block[0] == 256);
		lg_spec_free(s);
	}
	/* the pipelined dispatch (moe_permute forward): tokens + the zero-row CTAs, at most the
	 * co-resident ones; the zero rows then spread over the grid */
	struct lg_launch_dim d;
	struct lg_plan p;
	lg_spec *s = parse("moe_permute", "forward", "e4m3", "\"hidden\": 2048, \"experts\": 256, \"top_k\": 8, "
			   "\"tile\": {\"pipeline\": 2}");
	const struct lg_family *f = lg_family_get(s->op);
	lg_test_plan(s, "sm_90a", &p, LG_OK);
	assert_true(p.nentries == 1 && p.persistent[0]);
	int64_t T = 8192;
	f->geometry(&p, 0, &T, &d);
	assert_true(d.grid[0] == 8192 + 256 && d.block[0] == 160 && d.smem == 0);
	p.resident[0] = 132 * 8;
	f->geometry(&p, 0, &T, &d);
	assert_int_equal(d.grid[0], 132 * 8);
	T = 0;
	f->geometry(&p, 0, &T, &d);
	assert_int_equal(d.grid[0], 256);
	char *src = generate(s, "sm_90a");
	assert_non_null(strstr(src, "lg_map_row(mp, tn, cap, lane, rows[o], pi, po, &nrows[o]);"));
	assert_non_null(strstr(src, "for (int e = z; e < 256; e += G) {"));
	free(src);
	lg_spec_free(s);
}


/* The token loop of a pipelined source holds one barrier. */
static void one_barrier_in_loop(const char *src)
{
	const char *loop = strstr(src, "for (int b = 0;");
	assert_non_null(loop);
	const char *sync = strstr(loop, "__syncthreads();");
	assert_non_null(sync);
	assert_null(strstr(sync + 1, "__syncthreads();"));
}

/* What the pipelined form generates: the map warp's helper, two buffers, a
 * token loop with one barrier, the weights by shuffles (weighted), the
 * registers capped at one piece a thread; the default form none of it. */
static void test_pipelined_source(void **state)
{
	(void)state;
	for (int w = 0; w < 2; w++) {
		const char *keys = w ? "\"hidden\": 2048, \"experts\": 256, \"top_k\": 8, \"weighted\": true"
				     : "\"hidden\": 2048, \"experts\": 256, \"top_k\": 8";
		char pk[256];
		snprintf(pk, sizeof pk, "%s, \"tile\": {\"pipeline\": 2}", keys);
		char p1[256];
		snprintf(p1, sizeof p1, "%s, \"tile\": {\"pipeline\": 1}", keys);
		lg_spec *s = parse("moe_unpermute", "forward", "bf16", pk), *d = parse("moe_unpermute", "forward", "bf16", p1);
		lg_spec *dflt = parse("moe_unpermute", "forward", "bf16", keys);
		for (int a = 0; a < 2; a++) {
			char *src = generate(s, a ? "sm_80" : "sm_90a"), *def = generate(d, a ? "sm_80" : "sm_90a");
			char *dsrc = generate(dflt, a ? "sm_80" : "sm_90a");
			assert_non_null(strstr(dsrc, "lg_map_row(mp, tn, cap, lane, rows[o], emap[o], &nrows[o]);"));
			free(dsrc);
			assert_non_null(strstr(src, "lg_map_row(mp, tn, cap, lane, rows[o], emap[o], &nrows[o]);"));
			assert_non_null(strstr(src, "__shared__ int rows[2][256];"));
			assert_non_null(strstr(src, "for (int b = 0; t < T; t += G, b ^= 1) {"));
			assert_non_null(strstr(src, "__launch_bounds__(288, 4)"));
			assert_non_null(strstr(src, "int v[8];"));
			one_barrier_in_loop(src);
			assert_true((strstr(src, "__shfl_sync(0xffffffffu, wl, i)") != NULL) == (w == 1));
			assert_null(strstr(def, "lg_map_row"));
			assert_null(strstr(def, "__shfl_sync"));
			assert_non_null(strstr(def, "__launch_bounds__(256)"));
			free(src);
			free(def);
		}
		lg_spec_free(s);
		lg_spec_free(d);
		lg_spec_free(dflt);
	}
	/* 1024 threads leave no room for the map warp: the one-CTA form */
	lg_spec *w = parse("moe_unpermute", "forward", "bf16", "\"hidden\": 8192, \"experts\": 256, \"top_k\": 8, "
			   "\"tile\": {\"threads\": 1024}");
	struct lg_plan pw;
	lg_test_plan(w, "sm_90a", &pw, LG_OK);
	assert_false(pw.persistent[0]);
	lg_spec_free(w);
	/* more pieces a thread: fewer rows at once, no register cap; many experts: the map row in steps of 256 */
	lg_spec *s = parse("moe_unpermute", "forward", "bf16", "\"hidden\": 7168, \"experts\": 1024, \"top_k\": 8, "
			   "\"weighted\": true, \"tile\": {\"pipeline\": 2}");
	char *src = generate(s, "sm_90a");
	assert_non_null(strstr(src, "lg_pc gr[2][4];"));
	assert_non_null(strstr(src, "__launch_bounds__(288)"));
	assert_non_null(strstr(src, "for (int c0 = 0; c0 < 1024; c0 += 256) {"));
	assert_non_null(strstr(src, "float rp[4];"));
	free(src);
	lg_spec_free(s);
}

/* Every tuning candidate validates, plans and generates. */
static void test_candidates(void **state)
{
	(void)state;
	static const char *const specs[][4] = {
		{"moe_row_map", "forward", "bf16", "\"experts\": 256, \"top_k\": 8"},
		{"moe_permute", "forward", "bf16", "\"hidden\": 2048, \"experts\": 256, \"top_k\": 8"},
		{"moe_permute", "forward", "e4m3", "\"hidden\": 2048, \"experts\": 256, \"top_k\": 8"},
		{"moe_permute", "backward", "bf16", "\"hidden\": 2048, \"experts\": 256, \"top_k\": 8"},
		{"moe_unpermute", "forward", "bf16", "\"hidden\": 2048, \"experts\": 256, \"top_k\": 8"},
		{"moe_unpermute", "backward", "bf16", "\"hidden\": 2048, \"experts\": 256, \"top_k\": 8"},
		{"moe_unpermute", "forward", "bf16", "\"hidden\": 64, \"experts\": 4, \"top_k\": 2"},
		{"moe_permute_quant", "forward", "bf16", "\"hidden\": 2048, \"experts\": 256, \"top_k\": 8, "
		 "\"quant\": {}"},
	};
	/* threads up to a row's pieces, the plain dispatch and the combines each in both
	 * forms (short rows: those alone); K4b: fblocks x threads, each with 1 and 3 CTAs
	 * an SM */
	static const int want[] = {4, 6, 4, 6, 6, 3, 2, 16};
	for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
		lg_spec *s = parse(specs[i][0], specs[i][1], specs[i][2], specs[i][3]);
		const struct lg_family *f = lg_family_get(s->op);
		struct lg_target t;
		assert_true(lg_target_parse("sm_90a", &t));
		struct lg_tile_choice c[LG_MAX_CANDIDATES];
		int n = f->candidates(s, &t, c, LG_MAX_CANDIDATES);
		if (n != want[i])
			fail_msg("%s: %d candidates, expected %d", lg_spec_entry(s), n, want[i]);
		for (int j = 0; j < n; j++) {
			struct lg_spec v;
			assert_int_equal(lg_spec_with_tile(s, &c[j], &v), LG_OK);
			char *src = NULL;
			struct lg_plan pl;
			if (lg_generate_for(&v, &t, &pl, &src, NULL) != LG_OK)
				fail_msg("%s: %s", v.entry, lg_last_error());
			assert_non_null(strstr(src, v.entry));
			free(src);
		}
		lg_spec_free(s);
	}
}

/* The typed launchers (include/lingen.h) refuse a NULL kernel before
 * touching anything (test_typed_launchers of gpu_test_moe runs them). */
static void test_typed_null(void **state)
{
	(void)state;
	const lg_dptr p = 0x100000;
	assert_int_equal(lg_moe_row_map_forward(NULL, NULL, 8, p, p, p, p, p, p, p), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_moe_permute_forward(NULL, NULL, 8, p, 0, p, p, p, p, p, 0, p), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_moe_permute_backward(NULL, NULL, 8, p, p, p, p, p), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_moe_unpermute_forward(NULL, NULL, 8, p, p, p, p, p), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_moe_unpermute_backward(NULL, NULL, 8, p, p, p, p, p, p, p, p, p), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_moe_permute_quant_forward(NULL, NULL, 8, p, p, p, p, p, p, p, p, p), LG_ERR_INVALID_ARG);
	assert_non_null(strstr(lg_last_error(), "must not be NULL"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_row_map_by_hand),
		cmocka_unit_test(test_row_map_patterns),
		cmocka_unit_test(test_permute_by_hand),
		cmocka_unit_test(test_unpermute_by_hand),
		cmocka_unit_test(test_permute_quant_by_hand),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_shapes),
		cmocka_unit_test(test_spec_checks),
		cmocka_unit_test(test_required_by_keys),
		cmocka_unit_test(test_geometry),
		cmocka_unit_test(test_int32_rows),
		cmocka_unit_test(test_candidates),
		cmocka_unit_test(test_pipelined_geometry),
		cmocka_unit_test(test_pipelined_source),
		cmocka_unit_test(test_typed_null),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
