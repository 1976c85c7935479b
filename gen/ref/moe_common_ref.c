/*
 * moe_common_ref.c - routings and the padded row map for the MoE CPU
 * references (moe_ref.h). Plain loops: a token's experts in ascending
 * order, rows assigned expert by expert, token by token; dispatch and
 * combine over the tokens in parallel (a token's rows are its own).
 */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "moe_ref.h"
#include "numeric_ref.h"
#include "ref.h"

int64_t lg_moe_ref_cap(int64_t T, int64_t E, int64_t K, int64_t M)
{
	return T * K + E * (M - 1);
}

int lg_moe_ref_pattern(uint64_t seed)
{
	return (int)((seed + 3) % 4);
}

void lg_moe_ref_routing(uint8_t *mask, int64_t T, int64_t E, int64_t K, uint64_t seed)
{
	uint64_t st = seed * 0x9e3779b97f4a7c15ull + 1;
	int pattern = lg_moe_ref_pattern(seed);
	int64_t pool = pattern == 2 ? (E < K + 2 ? E : K + 2) : E;
	memset(mask, 0, (size_t)(T * E));
	for (int64_t t = 0; t < T; t++) {
		uint8_t *row = mask + t * E;
		if (pattern == 1) {
			row[E / 2] = 1;
			continue;
		}
		int64_t want = K < pool ? K : pool, got = 0;
		while (got < want) {
			int64_t e = (int64_t)(lg_ref_rand(&st) % (uint64_t)pool);
			if (row[e])
				continue;
			row[e] = 1;
			got++;
		}
		if (pattern == 3)
			for (int64_t e = 0; e < E; e++)
				if (row[e] && lg_ref_rand(&st) % 3 == 0)
					row[e] = 0;
	}
}

void lg_moe_ref_topk(const uint8_t *mask, int64_t *idx, int64_t T, int64_t E, int64_t K, uint64_t seed)
{
	uint64_t st = seed * 0xbf58476d1ce4e5b9ull + 7;
	bool odd = lg_moe_ref_pattern(seed) == 3;
	for (int64_t t = 0; t < T; t++) {
		int64_t *slot = idx + t * K, n = 0;
		for (int64_t j = 0; j < K; j++)
			slot[j] = -1;
		for (int64_t e = 0; e < E && n < K; e++)
			if (mask[t * E + e])
				slot[n++] = e;
		for (int64_t j = n; odd && j < K; j++) /* empty slots: a repeat, or out of range */
			slot[j] = n > 0 && j % 2 ? slot[0] : E + 3;
		for (int64_t j = K - 1; j > 0; j--) { /* shuffle */
			int64_t i = (int64_t)(lg_ref_rand(&st) % (uint64_t)(j + 1)), v = slot[i];
			slot[i] = slot[j];
			slot[j] = v;
		}
	}
}

int64_t lg_moe_ref_map(const uint8_t *mask, int64_t T, int64_t E, int64_t M, int64_t cap, int32_t *map,
		       int32_t *counts, int32_t *offsets, int32_t *row_index)
{
	int64_t base = 0;
	if (row_index)
		for (int64_t r = 0; r < cap; r++)
			row_index[r] = -1;
	for (int64_t e = 0; e < E; e++) {
		int64_t n = 0;
		for (int64_t t = 0; t < T; t++) {
			bool routed = mask[t * E + e] != 0;
			if (map)
				map[t * E + e] = routed ? (int32_t)(base + n) : -1;
			if (routed && row_index && base + n < cap)
				row_index[base + n] = (int32_t)t;
			n += routed;
		}
		if (counts)
			counts[e] = (int32_t)n;
		if (offsets)
			offsets[e] = (int32_t)base;
		base += (n + M - 1) / M * M;
	}
	if (offsets)
		offsets[E] = (int32_t)base;
	return base;
}

struct lg_moe_ref_io lg_moe_ref_io_of(const struct lg_spec *s, const struct lg_ref_case *c)
{
	const struct lg_family *f = s->fam;
	struct lg_moe_ref_io io = {.T = c->sizes[0], .E = lg_ref_int(s, "experts"), .K = lg_ref_int(s, "top_k"),
				   .M = lg_ref_int(s, "multiple"), .H = lg_ref_int(s, "hidden"),
				   .es = s->dtype == LG_DTYPE_E4M3 ? 1 : 2};
	io.pow2 = lg_family_key(f, "round_scale") >= 0 && lg_ref_int(s, "round_scale") != 0;
	io.cap = lg_moe_ref_cap(io.T, io.E, io.K, io.M);
	return io;
}

void *lg_moe_ref_opt(const struct lg_ref_case *c, int i)
{
	return c->buf[i].count ? c->buf[i].host : NULL;
}

void lg_moe_ref_fill_map(int64_t T, int64_t E, int64_t K, int64_t M, uint64_t seed, int32_t *map,
			 int32_t *offsets, int32_t *counts)
{
	uint8_t *mask = malloc((size_t)(T * E) + 1);
	LG_ASSERT(mask);
	lg_moe_ref_routing(mask, T, E, K, seed);
	lg_moe_ref_map(mask, T, E, M, lg_moe_ref_cap(T, E, K, M), map, counts, offsets, NULL);
	free(mask);
}

void lg_moe_ref_fill_e4m3(uint8_t *p, size_t n, uint64_t *st)
{
	for (size_t i = 0; i < n; i++) {
		uint8_t v = (uint8_t)lg_ref_rand(st);
		p[i] = (v & 0x7f) == 0x7f ? (uint8_t)(v ^ 1) : v;
	}
}

void lg_moe_ref_fill_probs(float *p, size_t n, uint64_t *st)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (float)((double)((lg_ref_rand(st) >> 40) + 1) * 0x1p-24);
}

static const uint8_t *row_of(const void *base, int64_t r, int64_t bytes)
{
	return (const uint8_t *)base + r * bytes;
}

/* The rows of tokens [lo, hi): a token's rows are its own (the map is
 * one to one), so tokens run in parallel. */
static void dispatch_tokens(void *ctx, size_t lo, size_t hi)
{
	const struct lg_moe_ref_io *io = ctx;
	int64_t bytes = io->H * io->es, ns = io->H / 128;
	for (int64_t t = (int64_t)lo; t < (int64_t)hi; t++)
		for (int64_t e = 0; e < io->E; e++) {
			int64_t r = io->map[t * io->E + e];
			if (r < 0 || r >= io->cap)
				continue;
			uint8_t *d = (uint8_t *)io->dst + r * bytes;
			const uint8_t *sr = row_of(io->src, t, bytes);
			if (io->weights) { /* fp32 product, rounded once */
				for (int64_t h = 0; h < io->H; h++) {
					float v = io->weights[r] * lg_ref_bf16_to_f32(((const uint16_t *)sr)[h]);
					((uint16_t *)d)[h] = lg_ref_f32_to_bf16(v);
				}
			} else {
				memcpy(d, sr, (size_t)bytes);
			}
			if (io->dst_s)
				memcpy(io->dst_s + r * ns, io->src_s + t * ns, (size_t)ns * sizeof(float));
			float pin = io->pin ? io->pin[t * io->E + e] : 0.0f;
			if (io->pout)
				io->pout[r] = pin;
			if (io->dot && io->other) {
				double dot = 0.0;
				for (int64_t h = 0; h < io->H; h++)
					dot += (double)lg_ref_bf16_to_f32(((const uint16_t *)sr)[h]) *
					       lg_ref_bf16_to_f32(io->other[r * io->H + h]);
				io->dot[r] = (float)(dot + pin);
			}
		}
}

void lg_moe_ref_dispatch(const struct lg_moe_ref_io *io)
{
	int64_t bytes = io->H * io->es, ns = io->H / 128;
	memset(io->dst, 0, (size_t)(io->cap * bytes));
	for (int64_t r = 0; r < io->cap; r++) {
		if (io->dst_s)
			for (int64_t j = 0; j < ns; j++)
				io->dst_s[r * ns + j] = io->pow2 ? 0x1p-99f : 1e-30f;
		if (io->pout)
			io->pout[r] = 0.0f;
		if (io->dot)
			io->dot[r] = 0.0f;
	}
	/* a map that sends two tokens to one row (a hand-made one): serially,
	 * the later token's row stays, as before */
	uint8_t *seen = calloc((size_t)io->cap + 1, 1);
	LG_ASSERT(seen);
	bool unique = true;
	for (int64_t i = 0; i < io->T * io->E && unique; i++) {
		int64_t r = io->map[i];
		if (r >= 0 && r < io->cap)
			unique = !seen[r]++;
	}
	free(seen);
	size_t cost = (size_t)(io->E + io->K * io->H * (io->weights ? 8 : 1));
	if (unique)
		lg_ref_parallel_rows((size_t)io->T, cost, dispatch_tokens, (void *)io);
	else
		dispatch_tokens((void *)io, 0, (size_t)io->T);
}

/* Tokens [lo, hi): each writes its own output row and pout row. */
static void combine_tokens(void *ctx, size_t lo, size_t hi)
{
	const struct lg_moe_ref_io *io = ctx;
	const uint16_t *g = io->src;
	uint16_t *out = io->dst;
	double *acc = malloc((size_t)io->H * sizeof *acc + 1);
	float *acc32 = malloc((size_t)io->H * sizeof *acc32 + 1);
	LG_ASSERT(acc && acc32);
	for (int64_t t = (int64_t)lo; t < (int64_t)hi; t++) {
		for (int64_t h = 0; h < io->H; h++)
			acc[h] = 0.0, acc32[h] = 0.0f;
		for (int64_t e = 0; e < io->E; e++) {
			int64_t r = io->map[t * io->E + e];
			bool routed = r >= 0 && r < io->cap;
			if (io->pout)
				io->pout[t * io->E + e] = routed && io->pin ? io->pin[r] : 0.0f;
			if (!routed)
				continue;
			for (int64_t h = 0; h < io->H; h++) {
				float v = lg_ref_bf16_to_f32(g[r * io->H + h]);
				if (io->weights)
					acc[h] += (double)io->weights[r] * v;
				else
					acc32[h] += v; /* fp32, in expert order: the GPU's sum exactly */
			}
		}
		for (int64_t h = 0; h < io->H; h++)
			out[t * io->H + h] = lg_ref_f32_to_bf16(io->weights ? (float)acc[h] : acc32[h]);
	}
	free(acc);
	free(acc32);
}

void lg_moe_ref_combine(const struct lg_moe_ref_io *io)
{
	lg_ref_parallel_rows((size_t)io->T, (size_t)(io->E + io->K * io->H * 2), combine_tokens, (void *)io);
}
