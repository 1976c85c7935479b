// driver_permute.cpp - runs the two forms of a generated moe_permute forward
// (k1.inc: tile.pipeline 1, a CTA a token; k2.inc: 2, persistent with a map
// warp, or with PIPED 0 another build's one-CTA form; from permute.sh) through emu.h on one routing and compares every
// output byte; argv[1] is the pipelined form's grid. The -D flags come from
// permute.sh.
#include <cstdio>
#include <cstdlib>
#include <random>
#include "emu.h"
#undef __shared__
#define __shared__ static
template <class T> struct xbox { static T v[32][32]; };
template <class T> T xbox<T>::v[32][32];
static unsigned __ballot_sync(unsigned, bool p) {
	int w = threadIdx.x >> 5; static int box[32][32];
	box[w][threadIdx.x & 31] = p; warp_bar[w]->arrive_and_wait();
	unsigned m = 0; for (int i = 0; i < 32; i++) m |= (unsigned)(box[w][i] != 0) << i;
	warp_bar[w]->arrive_and_wait();
	return m;
}
static int __popc(u32 v) { return __builtin_popcount(v); }
#include "k1.inc"
#include "k2.inc"
// -DHH -DEE -DKK -DMM -DTOK -DFP8 -DENTRY1 -DENTRY2 -DTH1 -DTH2 -DPIPED (0: k2 is a one-CTA form too)
int main(int argc, char **argv) {
	const i64 T = TOK, E = EE, Kk = KK, Mm = MM, H = HH, cap = T * Kk + E * (Mm - 1);
	const i64 rb = FP8 ? H : 2 * H, ns = H / 128;
	const unsigned G = !PIPED ? (unsigned)T + 256 : argc > 1 ? (unsigned)atoi(argv[1]) : 7; // one CTA a token: T + 256
	std::mt19937 rng(11);
	std::vector<int> cnt(E, 0), off(E + 1, 0), map(T * E, -1);
	std::vector<u8> routed(T * E, 0);
	for (i64 t = 0; t < T; t++)
		for (i64 j = 0; j < Kk; j++) {
			i64 e = (i64)(rng() % (E + 2)) - 1; // -1, E: no expert; repeats happen
			if (t % 5 == 0) e = 0;              // many tokens on expert 0
			if (e >= 0 && e < E) routed[t * E + e] = 1;
		}
	for (i64 t = 0; t < T; t++) for (i64 e = 0; e < E; e++) cnt[e] += routed[t * E + e];
	for (i64 e = 0; e < E; e++) off[e + 1] = off[e] + (int)((cnt[e] + Mm - 1) / Mm * Mm);
	std::vector<int> run(off.begin(), off.end() - 1);
	for (i64 e = 0; e < E; e++) for (i64 t = 0; t < T; t++) if (routed[t * E + e]) map[t * E + e] = run[e]++;
	std::vector<u8> x(T * rb + 16);
	for (auto &b : x) b = (u8)rng();
	std::vector<float> xs(T * ns + 1), probs(T * E);
	for (auto &f : xs) f = (float)rng() / 4e9f;
	for (auto &f : probs) f = (float)rng() / 4e9f;
	struct outs { std::vector<u8> y; std::vector<float> ys, po; };
	outs o[2];
	for (int k = 0; k < 2; k++) {
		o[k].y.assign(cap * rb + 16, 0xab);
		o[k].ys.assign(cap * ns + 1, -7.0f);
		o[k].po.assign(cap + 1, -7.0f);
	}
	auto al = [](void *p) { if ((uintptr_t)p % 16) abort(); return (u64)p; };
	u64 a[6] = {al(x.data()), (u64)xs.data(), (u64)probs.data(), (u64)map.data(), (u64)off.data(), (u64)cnt.data()};
	launch({(unsigned)T + 256, 1, 1}, TH1, [&] { ENTRY1(a[0], a[1], a[2], a[3], a[4], a[5], al(o[0].y.data()), (u64)o[0].ys.data(), (u64)o[0].po.data(), T, 0); });
	launch({G, 1, 1}, TH2, [&] { ENTRY2(a[0], a[1], a[2], a[3], a[4], a[5], al(o[1].y.data()), (u64)o[1].ys.data(), (u64)o[1].po.data(), T, 0); });
	int bad = 0, unwritten = 0;
	for (i64 i = 0; i < cap * rb; i++)
		if (o[0].y[i] != o[1].y[i] && bad++ < 10) printf("out byte %lld: %d vs %d\n", i, o[0].y[i], o[1].y[i]);
	for (i64 r = 0; r < cap; r++) { // a row left all garbage (never so by chance at these sizes)
		i64 j = 0;
		while (j < rb && o[1].y[r * rb + j] == 0xab) j++;
		if (j == rb && unwritten++ < 10) printf("row %lld unwritten\n", r);
	}
	for (i64 i = 0; FP8 && i < cap * ns; i++)
		if (memcmp(&o[0].ys[i], &o[1].ys[i], 4) && bad++ < 10) printf("out_scale %lld: %g vs %g\n", i, o[0].ys[i], o[1].ys[i]);
	for (i64 i = 0; i < cap; i++) {
		if (memcmp(&o[0].po[i], &o[1].po[i], 4) && bad++ < 10) printf("out_probs %lld: %g vs %g\n", i, o[0].po[i], o[1].po[i]);
		if (o[1].po[i] == -7.0f && unwritten++ < 10) printf("row %lld unwritten (tp1: %g)\n", i, o[0].po[i]);
	}
	printf("H=%lld E=%lld K=%lld M=%lld T=%lld fp8 %d grid %u: %s (P=%d, cap %lld, %d rows unwritten)\n", H, E, Kk,
	       Mm, T, FP8, G, bad || unwritten ? "FAIL" : "ok", off[E], cap, unwritten);
	return bad || unwritten;
}
