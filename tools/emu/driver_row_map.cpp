// driver_row_map.cpp - runs a generated moe_row_map (kernel.inc from
// row_map.sh: its PTX loads made plain) through emu.h and checks every
// output against a plain reference. The count kernel, then the map kernel
// (blocks one after another); the -D flags come from row_map.sh.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <random>
#include "emu.h"
#undef __shared__
#define __shared__ static
struct uint4 { u32 x, y, z, w; };
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
template <class T> static T __shfl_sync(unsigned, T v, int src) { return xchg(v, src); }
template <class T> static T __shfl_up_sync(unsigned, T v, int d) { int l = threadIdx.x & 31; T r = xchg(v, l - d); return l >= d ? r : v; }
static int __popc(u32 v) { return __builtin_popcount(v); }
static int __ffs(u32 v) { return __builtin_ffs((int)v); }
template <class T> static T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
template <class T> static T atomicOr(T *p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
static void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
static int lg_ld_l2(const int *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static uint4 lg_ld4_l2(const int *p) { if ((uintptr_t)p % 16) abort(); return uint4{(u32)p[0], (u32)p[1], (u32)p[2], (u32)p[3]}; }
#include "kernel.inc"
// -DE -DK -DM -DTOK -DROUTING (0 mask, 1 topk_i32, 2 topk_i64) -DSLICES -DTHREADS -DENTRY -DCOUNT
int main() {
	const i64 T = TOK, E = EE, Kk = KK, Mm = MM, cap = T * Kk + E * (Mm - 1);
	std::mt19937 rng(7);
	std::vector<u8> mask(T * E + 16, 0);
	std::vector<long long> top(T * Kk + 2);
	std::vector<int> top32(T * Kk + 2);
	for (i64 t = 0; t < T; t++) {
		for (i64 j = 0; j < Kk; j++) {
			long long e = (long long)(rng() % (E + 3)) - 1; // -1, E, E+1: no expert; repeats happen
			if (t % 5 == 0) e = 0;                          // many tokens on expert 0
			if (E > 2 && e == 2) e = 3;                     // expert 2 never: 0 tokens
			top[t * Kk + j] = e; top32[t * Kk + j] = (int)e;
			if (e >= 0 && e < E) mask[t * E + e] = (u8)(1 + rng() % 255);
		}
	}
	// reference
	std::vector<int> cnt(E, 0), off(E + 1, 0), map(T * E, -1), rix(cap, -1), pad(E);
	for (i64 t = 0; t < T; t++) for (i64 e = 0; e < E; e++) cnt[e] += mask[t * E + e] != 0;
	for (i64 e = 0; e < E; e++) { pad[e] = (int)((cnt[e] + Mm - 1) / Mm * Mm); off[e + 1] = off[e] + pad[e]; }
	std::vector<int> run(off.begin(), off.end() - 1);
	for (i64 e = 0; e < E; e++) for (i64 t = 0; t < T; t++) if (mask[t * E + e]) { int r = run[e]++; map[t * E + e] = r; if (r < cap) rix[r] = (int)t; }
	// the kernel
	std::vector<int> gmap(T * E + 4, 0x55555555), gcnt(E, 77), goff(E + 1, 77), grix(cap + 4, 77), gpad(E, 77);
	size_t wsn = (size_t)(SLICES * E + 3) / 4 * 4;
	std::vector<int> ws(wsn + 4, 0x12345678); // garbage: nothing is assumed of the workspace
	int *wsp = ws.data(); while ((uintptr_t)wsp % 16) wsp++;
	u64 a_mask = (u64)mask.data(), a_t32 = (u64)top32.data(), a_t64 = (u64)top.data();
	unsigned S = (unsigned)std::max<i64>(1, std::min<i64>(T, SLICES));
	launch({S, 1, 1}, THREADS, [&] { COUNT(a_mask, a_t32, a_t64, (u64)gmap.data(), (u64)gcnt.data(), (u64)goff.data(), (u64)grix.data(), (u64)gpad.data(), (u64)wsp, T, 0); });
	launch({S, 1, 1}, THREADS, [&] { ENTRY(a_mask, a_t32, a_t64, (u64)gmap.data(), (u64)gcnt.data(), (u64)goff.data(), (u64)grix.data(), (u64)gpad.data(), (u64)wsp, T, 0); });
	int bad = 0;
	auto cmp = [&](const char *what, const std::vector<int> &g, const std::vector<int> &r, size_t n) {
		for (size_t i = 0; i < n; i++) if (g[i] != r[i]) { if (bad++ < 10) printf("%s[%zu]: got %d want %d\n", what, i, g[i], r[i]); }
	};
	cmp("counts", gcnt, cnt, E); cmp("offsets", goff, off, E + 1); cmp("row_id_map", gmap, map, T * E);
	cmp("row_index", grix, rix, cap); cmp("padded_counts", gpad, pad, E);
	printf("E=%lld K=%lld M=%lld T=%lld routing %d slices %d: %s (P=%d)\n", E, Kk, Mm, T, ROUTING, SLICES, bad ? "FAIL" : "ok", off[E]);
	return bad != 0;
}
