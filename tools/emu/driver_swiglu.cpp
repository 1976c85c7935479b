// driver_swiglu.cpp - runs two generated swiglu kernels of one spec (old.inc and new.inc from
// cut.py, e.g. before and after a generator change) through emu.h on the same inputs and compares
// every output byte; the -D flags come from swiglu_diff.sh. -DKIND=0 K6 forward, 1 K6 backward,
// 2 K7 forward, 3 K7 backward. Static __shared__ arrays become function statics (one block runs
// at a time); __expf and __fdividef are the libm ones in both kernels alike.
#include <cstdio>
#include <cstdlib>
#include <random>
#include "emu.h"
#undef __shared__
#define __shared__ static
#define __noinline__
struct uint4 { u32 x, y, z, w; };
struct uint2 { u32 x, y; };
static inline uint4 make_uint4(u32 a, u32 b, u32 c, u32 d) { return uint4{a, b, c, d}; }
static inline uint2 make_uint2(u32 a, u32 b) { return uint2{a, b}; }
static inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline u32 __float_as_uint(float f) { return lg_f2u(f); }
static inline float __uint_as_float(u32 u) { return lg_u2f(u); }
static inline float lg_emu_expf(float a) { return expf(a); }
#define __expf lg_emu_expf
static inline float __fdividef(float a, float b) { return a / b; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline i64 min(i64 a, i64 b) { return a < b ? a : b; }
static inline i64 max(i64 a, i64 b) { return a > b ? a : b; }
template <class T> static T __ldg(const T *p) { return *p; }
static inline u32 __funnelshift_r(u32 lo, u32 hi, u32 s) { return (u32)((((u64)hi << 32) | lo) >> (s & 31)); }
template <class T> struct shfl_box { static T v[32][32]; };
template <class T> T shfl_box<T>::v[32][32];
template <class T> static T shfl_any(T v, int src_of_lane) {
	int l = threadIdx.x & 31, w = threadIdx.x >> 5;
	shfl_box<T>::v[w][l] = v; warp_bar[w]->arrive_and_wait();
	T r = shfl_box<T>::v[w][src_of_lane & 31]; warp_bar[w]->arrive_and_wait();
	return r;
}
template <class T> static T __shfl_xor_sync(unsigned, T v, int m) { return shfl_any(v, (threadIdx.x & 31) ^ m); }
template <class T> static T __shfl_sync(unsigned, T v, int s) { return shfl_any(v, s); }
template <class T> static T __shfl_up_sync(unsigned, T v, int d) { int l = threadIdx.x & 31; return shfl_any(v, l >= d ? l - d : l); }
static unsigned __ballot_sync(unsigned, int pred) {
	unsigned m = 0;
	for (int l = 0; l < 32; l++) m |= (unsigned)(shfl_any(pred ? 1 : 0, l) != 0) << l;
	return m;
}
static inline int __ffs(unsigned m) { return m ? __builtin_ctz(m) + 1 : 0; }
namespace oldk {
#include "old.inc"
}
namespace newk {
#include "new.inc"
}
static u16 tobf(float f) { return bf16_rne(f); }
int main() {
	const i64 M = MTOK, N = NI, E = EXPERTS;
	const bool bwd = KIND == 1 || KIND == 3, k6 = KIND <= 1;
	const i64 W = bwd ? 2 * N : N; // output features
	std::mt19937 rng(SEED); std::normal_distribution<float> nd(0, 1);
	std::vector<u16> x(M * 2 * N + 64), g(M * N + 64);
	for (i64 m = 0; m < M; m++) {
		float sc = std::ldexp(1.0f, (int)(rng() % 13) - 6);
		if (m % 23 == 5) sc = 0;
		for (i64 k = 0; k < 2 * N; k++) x[m * 2 * N + k] = tobf(sc * nd(rng) * (rng() % 50 == 0 ? 20.0f : 1.0f));
		float gs = m % 19 == 3 ? 0 : std::ldexp(1.0f, (int)(rng() % 9) - 4);
		for (i64 k = 0; k < N; k++) g[m * N + k] = tobf(gs * nd(rng));
	}
	std::vector<float> prob(M + 16);
	for (auto &p : prob) p = rng() % 30 == 0 ? 0.0f : (float)(rng() % 1000 + 1) / 1000.0f;
	std::vector<int> counts(E + 1, 0);
	{ // specials, then random, the last what is left
		static const int sp[] = {0, 1, 127, 128, 129, 0, 255, 256, 257};
		i64 left = M;
		for (i64 e = 0; e < E; e++) {
			i64 c = e < 9 ? sp[e] : (i64)(rng() % (2 * left / (E - e) + 1));
			if (e == E - 1) c = left;
			if (c > left) c = left;
			counts[e] = (int)c, left -= c;
		}
	}
	const i64 tiles = (M + 127) / 128 + (k6 ? E : 0), nb = W / 128;
	const i64 st_rows = tiles;
	const i64 qt_bytes = k6 ? M * W : W * ((M + 127) & ~127); // K7's flat qt: rows round_up(M, 128) apart
	struct outs { std::vector<u8> q, qt; std::vector<float> s, st, dp; std::vector<u16> dx; };
	auto run = [&](int which, outs &o) {
		o.q.assign(M * W + 64, 0xff); o.qt.assign(qt_bytes + 64, 0xff);
		o.s.assign(nb * M + 64, NAN); memset(o.s.data(), 0xff, o.s.size() * 4);
		o.st.assign(st_rows * W + 64, NAN); memset(o.st.data(), 0xff, o.st.size() * 4);
		o.dp.assign(M + 64, NAN); memset(o.dp.data(), 0xff, o.dp.size() * 4);
		o.dx.assign(M * W + 64, 0xffff);
		const i64 fb = which ? FB_NEW : FB_OLD, groups = (nb + fb - 1) / fb;
		const unsigned th = which ? TH_NEW : TH_OLD;
		const i64 per = which ? TILES_NEW : TILES_OLD; // K6: token tiles a CTA (lg_qe_geometry)
		launch({(unsigned)((tiles + per - 1) / per * groups), 1, 1}, th, [&] {
			u64 X = (u64)x.data(), G = (u64)g.data(), P = (u64)prob.data(), C = (u64)counts.data();
			u64 Q = (u64)o.q.data(), S = (u64)o.s.data(), QT = (u64)o.qt.data(), ST = (u64)o.st.data();
			u64 DP = (u64)o.dp.data(), DX = DXBF16 ? (u64)o.dx.data() : 0;
#if KIND == 0
			if (which) newk::ENTRY(X, P, C, Q, S, QT, ST, M, 0); else oldk::ENTRY(X, P, C, Q, S, QT, ST, M, 0);
#elif KIND == 1
			if (which) newk::ENTRY(G, X, P, C, Q, S, DP, QT, ST, DX, M, 0); else oldk::ENTRY(G, X, P, C, Q, S, DP, QT, ST, DX, M, 0);
#elif KIND == 2
			if (which) newk::ENTRY(X, Q, S, QT, ST, M, 0); else oldk::ENTRY(X, Q, S, QT, ST, M, 0);
#else
			if (which) newk::ENTRY(G, X, Q, S, QT, ST, DX, M, 0); else oldk::ENTRY(G, X, Q, S, QT, ST, DX, M, 0);
#endif
			(void)G; (void)P; (void)C; (void)DP; (void)DX;
		});
	};
	outs a, b;
	run(0, a); run(1, b);
	int bad = 0;
	auto cmp = [&](const char *name, const void *p, const void *q, size_t bytes, size_t elem) {
		const u8 *u = (const u8 *)p, *v = (const u8 *)q;
		size_t diff = 0, first = 0, poison = 0;
		for (size_t i = 0; i < bytes; i++) { if (u[i] != v[i]) { if (!diff) first = i; diff++; } if (u[i] == 0xff) poison++; }
		printf("  %-3s %zu bytes, %zu differ%s, %zu poison bytes\n", name, bytes, diff, diff ? " FAIL" : "", poison);
		if (diff) { printf("      first at element %zu\n", first / elem); bad = 1; }
	};
	printf("KIND %d M=%lld n=%lld E=%lld\n", KIND, M, N, E);
	cmp("q", a.q.data(), b.q.data(), M * W, 1);
	cmp("s", a.s.data(), b.s.data(), nb * M * 4, 4);
	cmp("qt", a.qt.data(), b.qt.data(), qt_bytes, 1);
	cmp("st", a.st.data(), b.st.data(), st_rows * W * 4, 4);
	if (KIND == 1) cmp("dp", a.dp.data(), b.dp.data(), M * 4, 4);
	if (DXBF16) cmp("dx", a.dx.data(), b.dx.data(), M * W * 2, 2);
	return bad;
}
