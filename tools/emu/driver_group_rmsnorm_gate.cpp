// driver_group_rmsnorm_gate.cpp - runs a generated group_rmsnorm_gate kernel
// (kernel.inc from cut.py) through emu.h and checks y, or dx, dgate and dw,
// against a float64 reference with the tolerances of
// gen/ref/group_rmsnorm_gate_ref.c; the -D flags come from group_rmsnorm_gate.sh.
#include <cstdio>
#include <cstdlib>
#include <random>
#include "emu.h"
// What the kept helpers and the kernel use beyond emu.h.
struct uint4 { u32 x, y, z, w; };
static inline uint4 make_uint4(u32 a, u32 b, u32 c, u32 d) { return uint4{a, b, c, d}; }
static inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
static inline double __hiloint2double(int hi, int lo) { u64 u = ((u64)(u32)hi << 32) | (u32)lo; double d; memcpy(&d, &u, 8); return d; }
#define __expf(v) expf(v)
static inline float __fdividef(float a, float b) { return a / b; }
static inline float rsqrtf(float v) { return 1.0f / sqrtf(v); }
template <class T> struct shfl_box { static T v[32][32]; };
template <class T> T shfl_box<T>::v[32][32];
template <class T> static T __shfl_xor_sync(unsigned, T v, int m) {
	int l = threadIdx.x & 31, w = threadIdx.x >> 5;
	shfl_box<T>::v[w][l] = v; warp_bar[w]->arrive_and_wait();
	T r = shfl_box<T>::v[w][l ^ m]; warp_bar[w]->arrive_and_wait();
	return r;
}
#include "kernel.inc"
static u16 tobf(float f) { return bf16_rne(f); }
static double bf(u16 h) { return lg_u2f((u32)h << 16); }
static double sig(double v) { return 1.0 / (1.0 + std::exp(-v)); }
static int bad = 0;
static void check(const char *what, i64 i, double got, double want, double rtol, double atol) {
	if (std::fabs(got - want) <= atol + rtol * std::fabs(want)) return;
	if (bad++ < 5) printf("%s MISMATCH at %lld: got %g want %g\n", what, i, got, want);
}
int main() {
	const i64 B = BB, L = LL, M = B * L, dim = DIM, d = DIM / G, wlen = SH ? d : DIM;
	std::mt19937 rng(3); std::normal_distribution<float> nd(0, 1);
	std::vector<u16> x(M * dim + 8), gate(M * dim + 8), dy(M * dim + 8), w(wlen + 8);
	for (auto &v : x) v = tobf(nd(rng));
	for (auto &v : gate) v = tobf(2 * nd(rng));
	for (auto &v : dy) v = tobf(nd(rng));
	for (auto &v : w) v = tobf(1 + 0.25f * nd(rng));
	std::vector<u16> y(M * dim + 8, 0xffff), dx(M * dim + 8, 0xffff), dg(M * dim + 8, 0xffff);
	std::vector<float> dw(wlen + 8, NAN);
	std::vector<double> dwr(wlen, 0.0);
#if !BWD
	launch({CTAS, 1, 1}, THREADS, [&] { ENTRY((u64)x.data(), (u64)gate.data(), (u64)w.data(), (u64)y.data(), B, L, 0); });
#else
	const i64 n = lg_ctas(M);
	std::vector<float> ws(n * wlen + 8, NAN);
	if (n)
		launch({(unsigned)n, 1, 1}, THREADS, [&] {
			ENTRY((u64)dy.data(), (u64)x.data(), (u64)gate.data(), (u64)w.data(), (u64)dx.data(), (u64)dg.data(),
			      (u64)dw.data(), (u64)ws.data(), B, L, 0);
		});
	launch({(unsigned)((wlen + 31) / 32), 1, 1}, 256, [&] {
		DW_ENTRY((u64)dy.data(), (u64)x.data(), (u64)gate.data(), (u64)w.data(), (u64)dx.data(), (u64)dg.data(),
			 (u64)dw.data(), (u64)ws.data(), B, L, 0);
	});
#endif
	for (i64 b = 0; b < B; b++) for (i64 l = 0; l < L; l++) for (i64 i = 0; i < G; i++) {
		const i64 ox = (b * L + l) * dim + i * d, og = (TR ? l * B + b : b * L + l) * dim + i * d, ow = SH ? 0 : i * d;
		double ss = 0, dot = 0;
		for (i64 j = 0; j < d; j++) {
			ss += bf(x[ox + j]) * bf(x[ox + j]);
			dot += bf(x[ox + j]) * bf(dy[og + j]) * bf(w[ow + j]) * sig(bf(gate[og + j]));
		}
		const double r = 1.0 / std::sqrt(ss / d + 1e-6);
		for (i64 j = 0; j < d; j++) {
			double xv = bf(x[ox + j]), wv = bf(w[ow + j]), s = sig(bf(gate[og + j])), dv = bf(dy[og + j]);
#if !BWD
			check("y", og + j, bf(y[og + j]), xv * r * wv * s, 1.6e-2, 2e-3);
#else
			check("dx", ox + j, bf(dx[ox + j]), r * dv * wv * s - r * r * r * xv * dot / d, 1.6e-2, 2e-3);
			check("dgate", og + j, bf(dg[og + j]), xv * r * wv * dv * s * (1 - s), 1.6e-2, 2e-3);
			dwr[ow + j] += xv * r * dv * s;
#endif
		}
	}
#if BWD
	for (i64 j = 0; j < wlen; j++) check("dw", j, dw[j], dwr[j], 1e-3, 1e-3);
#endif
	printf("%s B=%lld L=%lld dim=%lld G=%d transpose=%d shared=%d: %s\n", BWD ? "bwd" : "fwd", B, L, dim, G, TR, SH,
	       bad ? "FAIL" : "ok");
	return bad != 0;
}
