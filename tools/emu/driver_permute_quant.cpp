// driver_permute_quant.cpp - runs two forms of a generated moe_permute_quant
// forward (k1.inc, k2.inc from permute_quant.sh) through emu.h on one
// routing (0-token experts, a crowded one, padding rows) and compares every
// output byte (q, s, qt, st, out_probs; all first filled with garbage, so
// what one form leaves unwritten the other must too); argv[1] is the second
// form's grid (its persistent CTAs), 0 for the full grid. The -D flags come
// from permute_quant.sh.
#include <cstdio>
#include <cstdlib>
#include <random>
#include "emu.h"
#undef __shared__
#define __shared__ static
#define __noinline__
#define __restrict__
struct uint4 { u32 x, y, z, w; };
struct uint2 { u32 x, y; };
static inline uint2 make_uint2(u32 a, u32 b) { return uint2{a, b}; }
static inline float __int_as_float(int i) { return lg_u2f((u32)i); }
static inline uint4 make_uint4(u32 a, u32 b, u32 c, u32 d) { return uint4{a, b, c, d}; }
template <class T> struct xbox { static T v[32][32]; };
template <class T> T xbox<T>::v[32][32];
template <class T> static T xchg(T v, int from) {
	int l = threadIdx.x & 31, w = threadIdx.x >> 5;
	xbox<T>::v[w][l] = v; warp_bar[w]->arrive_and_wait();
	T r = xbox<T>::v[w][from < 0 || from > 31 ? l : from]; warp_bar[w]->arrive_and_wait();
	return r;
}
static unsigned __ballot_sync(unsigned, bool p) {
	int w = threadIdx.x >> 5; static int box[32][32];
	box[w][threadIdx.x & 31] = p; warp_bar[w]->arrive_and_wait();
	unsigned m = 0; for (int i = 0; i < 32; i++) m |= (unsigned)(box[w][i] != 0) << i;
	warp_bar[w]->arrive_and_wait();
	return m;
}
template <class T> static T __shfl_sync(unsigned, T v, int src) { return xchg(v, src & 31); }
template <class T> static T __shfl_xor_sync(unsigned, T v, int m) { return xchg(v, (threadIdx.x & 31) ^ m); }
template <class T> static T __shfl_up_sync(unsigned, T v, int d) { int l = threadIdx.x & 31; T r = xchg(v, l - d); return l >= d ? r : v; }
static int __ffs(u32 v) { return __builtin_ffs((int)v); }
template <class T> static T __ldg(const T *p) { return *p; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline i64 min(i64 a, i64 b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline u32 __byte_perm(u32 x, u32 y, u32 s) {
	const u64 v = (u64)y << 32 | x; u32 r = 0;
	for (int i = 0; i < 4; i++) r |= (u32)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
	return r;
}
static inline u32 max_bf16(u32 a, u32 b) { // NaN loses to a number
	const float fa = lg_u2f(a << 16), fb = lg_u2f(b << 16);
	if (fa != fa) return b;
	if (fb != fb) return a;
	return fa >= fb ? a : b;
}
static inline u32 lg_max_bf16x2(u32 a, u32 b) { return max_bf16(a & 0xffff, b & 0xffff) | max_bf16(a >> 16, b >> 16) << 16; }
#include "k1.inc"
#include "k2.inc"
// -DHH -DEE -DKK -DMM -DTOK -DENTRY1 -DENTRY2 -DTH1 -DTH2 -DG1 (k1's groups a tile)
int main(int argc, char **argv) {
	const i64 T = TOK, E = EE, Kk = KK, Mm = MM, H = HH, cap = T * Kk + E * (Mm - 1);
	const i64 ns = H / 128, tiles = (cap + 127) / 128 + E;
	std::mt19937 rng(13);
	std::vector<int> cnt(E, 0), pad(E, 0), off(E + 1, 0);
	std::vector<std::vector<int>> toks(E);
	for (i64 t = 0; t < T; t++) { // K distinct experts: none of the multiples of 7 but 0, many on 0
		std::vector<char> used(E, 0);
		for (i64 j = 0, tries = 0; j < Kk && tries < 64 * Kk; tries++) {
			i64 e = t % 3 == 0 && j == 0 ? 0 : (i64)(rng() % E);
			if (used[e] || (e % 7 == 0 && e > 0)) continue;
			used[e] = 1, j++;
			toks[e].push_back((int)t);
		}
	}
	for (i64 e = 0; e < E; e++) {
		cnt[e] = (int)toks[e].size();
		pad[e] = (int)((cnt[e] + Mm - 1) / Mm * Mm);
		off[e + 1] = off[e] + pad[e];
	}
	std::vector<int> ri(cap + 1, -1);
	for (i64 e = 0; e < E; e++) for (size_t i = 0; i < toks[e].size(); i++) ri[off[e] + i] = toks[e][i];
	std::vector<u16> x(T * H + 8);
	for (auto &v : x) { u32 r = rng(); v = (u16)((r & 0x80ff) | ((0x70 + (r >> 8) % 24) << 8)); if (r % 97 == 0) v = 0; }
	std::vector<float> probs(T * E);
	for (auto &f : probs) f = (float)rng() / 4e9f;
	struct outs { std::vector<u8> q, qt; std::vector<float> s, st, po; };
	outs o[2];
	for (int k = 0; k < 2; k++) {
		o[k].q.assign(cap * H + 16, 0xab);
		o[k].qt.assign(cap * H + 16, 0xab);
		o[k].s.assign(cap * ns + 1, -7.0f);
		o[k].st.assign(tiles * H + 1, -7.0f);
		o[k].po.assign(cap + 1, -7.0f);
	}
	auto al = [](const void *p) { if ((uintptr_t)p % 16) abort(); return (u64)p; };
	const unsigned full = (unsigned)(tiles * G1);
	const unsigned G = argc > 1 && atoi(argv[1]) > 0 ? (unsigned)atoi(argv[1]) : full;
	launch({full, 1, 1}, TH1, [&] { ENTRY1(al(x.data()), (u64)probs.data(), (u64)ri.data(), (u64)pad.data(), al(o[0].q.data()), (u64)o[0].s.data(), al(o[0].qt.data()), (u64)o[0].st.data(), (u64)o[0].po.data(), T, 0); });
	launch({G, 1, 1}, TH2, [&] { ENTRY2(al(x.data()), (u64)probs.data(), (u64)ri.data(), (u64)pad.data(), al(o[1].q.data()), (u64)o[1].s.data(), al(o[1].qt.data()), (u64)o[1].st.data(), (u64)o[1].po.data(), T, 0); });
	int bad = 0;
	i64 nq = 0;
	for (i64 i = 0; i < cap * H; i++) {
		if (o[0].q[i] != o[1].q[i] && bad++ < 10) printf("q byte %lld: %d vs %d\n", i, o[0].q[i], o[1].q[i]);
		if (o[0].qt[i] != o[1].qt[i] && bad++ < 10) printf("qt byte %lld: %d vs %d\n", i, o[0].qt[i], o[1].qt[i]);
		nq += o[1].q[i] != 0xab || o[1].qt[i] != 0xab;
	}
	for (i64 i = 0; i < cap * ns; i++)
		if (memcmp(&o[0].s[i], &o[1].s[i], 4) && bad++ < 10) printf("s %lld: %g vs %g\n", i, o[0].s[i], o[1].s[i]);
	for (i64 i = 0; i < tiles * H; i++)
		if (memcmp(&o[0].st[i], &o[1].st[i], 4) && bad++ < 10) printf("st %lld: %g vs %g\n", i, o[0].st[i], o[1].st[i]);
	for (i64 i = 0; i < cap; i++)
		if (memcmp(&o[0].po[i], &o[1].po[i], 4) && bad++ < 10) printf("out_probs %lld: %g vs %g\n", i, o[0].po[i], o[1].po[i]);
	const bool written = nq >= (i64)off[E] * H * 3 / 4; // most of P x H (q or qt; a few are 0xab by chance)
	printf("H=%lld E=%lld K=%lld M=%lld T=%lld grid %u of %u: %s (P=%d, cap %lld)\n", H, E, Kk, Mm, T, G, full,
	       bad || !written ? "FAIL" : "ok", off[E], cap);
	return bad || !written;
}
