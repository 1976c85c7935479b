// driver_rmsnorm_router.cpp - runs a generated rmsnorm_router kernel
// (kernel.inc from cut.py) through emu.h and checks y, rms, logits, q and s
// against a float64 reference; the -D flags come from rmsnorm_router.sh.
#include <cstdio>
#include <cstdlib>
#include <random>
#include "emu.h"
// What the kept helpers and the kernel use beyond emu.h.
struct uint4 { u32 x, y, z, w; };
static inline uint4 make_uint4(u32 a, u32 b, u32 c, u32 d) { return uint4{a, b, c, d}; }
static inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline double __hiloint2double(int hi, int lo) { u64 u = ((u64)(u32)hi << 32) | (u32)lo; double d; memcpy(&d, &u, 8); return d; }
static inline u32 __float_as_uint(float f) { return lg_f2u(f); }
static inline float __uint_as_float(u32 u) { return lg_u2f(u); }
template <class T> struct shfl_box { static T v[32][32]; };
template <class T> T shfl_box<T>::v[32][32];
template <class T> static T __shfl_xor_sync(unsigned, T v, int m) {
	int l = threadIdx.x & 31, w = threadIdx.x >> 5;
	shfl_box<T>::v[w][l] = v; warp_bar[w]->arrive_and_wait();
	T r = shfl_box<T>::v[w][l ^ m]; warp_bar[w]->arrive_and_wait();
	return r;
}
#include "kernel.inc"
// A 16-byte-aligned copy of the kernel's inline-PTX loads and stores.
#ifndef EXP
#error -DEXP
#endif
static u16 tobf(float f) { return bf16_rne(f); }
static float frombf(u16 h) { return lg_u2f((u32)h << 16); }
static float e4m3_val(u8 b) {
	int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
	float v = e ? std::ldexp(1.0f + m / 8.0f, e - 7) : std::ldexp(m / 8.0f, -6);
	return s ? -v : v;
}
int main() {
	const i64 M = MTOK, K = HID, N = EXP, KB = (K + 127) / 128;
	std::mt19937 rng(7); std::normal_distribution<float> nd(0, 1);
	std::vector<u16> x(M * K + 8), w(K + 8), rw(N * K + 8), y(M * K + 8, 0xffff);
	for (i64 m = 0; m < M; m++) {
		float sc = std::ldexp(1.0f, (int)(rng() % 13) - 6);
		if (m % 17 == 5) sc = 0;
		for (i64 k = 0; k < K; k++) x[m * K + k] = tobf(sc * nd(rng));
	}
	for (auto &v : w) v = tobf(1 + 0.25f * nd(rng));
	for (auto &v : rw) v = tobf(nd(rng) / std::sqrt((float)K));
	std::vector<float> rms(M + 8, NAN), lg(M * N + 8, NAN), s(KB * M + 8, NAN);
	std::vector<u8> q(M * K + 8, 0xff);
	launch({(unsigned)(((M + BM - 1) / BM) * ((N + BN - 1) / BN)), 1, 1}, THREADS, [&] {
		ENTRY((u64)x.data(), (u64)w.data(), (u64)rw.data(), (u64)y.data(), (u64)rms.data(), (u64)lg.data(),
		      (u64)q.data(), (u64)s.data(), 0, 0, M, 0);
	});
	double worst = 0;
	for (i64 m = 0; m < M; m++) {
		double ss = 0;
		for (i64 k = 0; k < K; k++) ss += (double)frombf(x[m * K + k]) * frombf(x[m * K + k]);
		float r = (float)(1.0 / std::sqrt(ss / (double)K + 1e-6));
		if (std::fabs(rms[m] - r) > 1e-6f * r) { printf("RMS MISMATCH m=%lld got %g want %g\n", m, rms[m], r); return 1; }
		std::vector<float> yf(K);
		for (i64 k = 0; k < K; k++) {
			yf[k] = (frombf(x[m * K + k]) * r) * frombf(w[k]);
			if (y[m * K + k] != tobf(yf[k])) { printf("Y MISMATCH m=%lld k=%lld got %04x want %04x\n", m, k, y[m * K + k], tobf(yf[k])); return 1; }
		}
		for (i64 b = 0; b < KB; b++) {
			float amax = 0;
			for (i64 k = b * 128; k < K && k < b * 128 + 128; k++) amax = std::max(amax, std::fabs(yf[k]));
			float sv = s[b * M + m];
			if (!(sv >= amax / 448 * 0.999f && (amax == 0 || sv <= amax / 448 * 2.001f))) { printf("S MISMATCH m=%lld b=%lld got %g amax %g\n", m, b, sv, amax); return 1; }
			for (i64 k = b * 128; k < K && k < b * 128 + 128; k++) {
				double d = (double)e4m3_val(q[m * K + k]) * sv;
				if (!(std::fabs(d - yf[k]) <= 0.0625 * std::fabs(yf[k]) + sv * std::ldexp(1.0, -9) * 1.01)) { printf("Q MISMATCH m=%lld k=%lld got %g want %g\n", m, k, d, yf[k]); return 1; }
			}
		}
		for (i64 n = 0; n < N; n++) {
			double a = 0;
			for (i64 k = 0; k < K; k++) {
				float v = yf[k], t = 0; double sum = 0;
				for (int i = 0; i < TERMS; i++) { t = frombf(tobf(v)); sum += t; v -= t; }
				a += sum * frombf(rw[n * K + k]);
			}
			double e = std::fabs(a - lg[m * N + n]);
			worst = std::max(worst, e);
			if (!(e <= 1e-4 * (1 + std::fabs(a)))) { printf("LOGIT MISMATCH m=%lld n=%lld got %g want %g\n", m, n, lg[m * N + n], a); return 1; }
		}
	}
	printf("rmsnorm_router M=%lld K=%lld N=%lld terms %d ok, logits worst abs %.3g\n", M, K, N, TERMS, worst);
	return 0;
}
