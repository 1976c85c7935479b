// driver.cpp - runs a generated router_gemm kernel (kernel.inc, its
// helpers from templates/ cut out) through emu.h (sm_80), or with -DEMU90
// its sm_90a form through emu90.h, and checks it against a float64
// reference; the -D flags (and plan.h) come from run.sh.
#include <cstdio>
#include <cstdlib>
#include <random>
#if EMU90 /* the sm_90a kernels (wgmma, TMA) through emu90.h; plan.h (run.sh) names their tensor maps */
#include "emu90.h"
static inline float tf32_rna(float f) { return lg_u2f((lg_f2u(f) + 0x1000u) & ~0x1fffu); }
static void launch(dim3e grid, unsigned threads, std::function<void()> fn) { emu_launch(grid.x, threads, 1, fn); }
#else
#include "emu.h"
#endif
struct uint4 { u32 x, y, z, w; };
static inline uint4 make_uint4(u32 a, u32 b, u32 c, u32 d) { return uint4{a, b, c, d}; }
#include "kernel.inc"
#if EMU90
#include "plan.h" /* NTM, TM_ARG (first letters of x, w, dy), TM_BOX0/1, TM_SWZ, TMAPS */
#else
#define TMAPS
#endif
// -DHID -DEXP -DMTOK -DBM -DBN -DTHREADS -DBWD -DSPLIT -DFWD_ENTRY / DX_ENTRY DW_ENTRY SUM_ENTRY -DTERMS
// -DXBM -DXBN -DXTHREADS (the backward's dx tile; BM BN THREADS: dw's) -DTF32 (precision "tf32")
static u16 tobf(float f) { return bf16_rne(f); }
static float frombf(u16 h) { return lg_u2f((u32)h << 16); }
int main() {
	const i64 M = MTOK, K = HID, N = EXP;
	std::mt19937 rng(1); std::normal_distribution<float> nd(0, 1);
	std::vector<u16> x(M * K + 8), w(N * K + 8);
	for (auto &v : x) v = tobf(nd(rng));
	for (auto &v : w) v = tobf(nd(rng) / std::sqrt((float)N));
	double worst = 0, rms = 0;
#if EMU90
	// the tensor maps of the plan by their arguments' names: [rows, cols] of elem bytes
	lg_tmap t[3];
	const auto tmap = [&](int i, const void *p, u64 rows, u64 cols, u64 esize) {
		emu_tmap e{(u64)(uintptr_t)p, cols, rows, cols * esize, TM_BOX0[i], TM_BOX1[i], esize, TM_SWZ[i]};
		memset(&t[i], 0, sizeof t[i]); memcpy(&t[i], &e, sizeof e);
	};
#endif
#if !BWD
	std::vector<float> y(M * N + 8, NAN);
#if EMU90
	for (int i = 0; i < NTM; i++) tmap(i, TM_ARG[i] == 'x' ? (void *)x.data() : (void *)w.data(), TM_ARG[i] == 'x' ? M : N, K, 2);
#endif
	launch({(unsigned)(((M + BM - 1) / BM) * ((N + BN - 1) / BN)), 1, 1}, THREADS,
	       [&] { FWD_ENTRY((u64)x.data(), (u64)w.data(), (u64)y.data(), M, 0 TMAPS); });
	for (i64 m = 0; m < M; m++) for (i64 n = 0; n < N; n++) {
		double r = 0; for (i64 k = 0; k < K; k++) r += (double)frombf(x[m * K + k]) * frombf(w[n * K + k]);
		worst = std::max(worst, std::fabs(r - y[m * N + n]) / (1 + std::fabs(r))); rms += r * r;
		if (!(std::fabs(r - y[m * N + n]) <= 1e-4 * (1 + std::fabs(r)))) { printf("MISMATCH m=%lld n=%lld got %g want %g\n", m, n, y[m * N + n], r); return 1; }
	}
	printf("fwd M=%lld K=%lld N=%lld ok worst %.3g rms %.3g\n", M, K, N, worst, std::sqrt(rms / (M * N)));
#else
	std::vector<float> dy(M * N + 8), dw(N * K + 8, NAN), ws((size_t)SPLIT * N * K + 8, NAN);
	std::vector<u16> dx(M * K + 8, 0xffff);
	for (auto &v : dy) v = nd(rng);
#if EMU90
	for (int i = 0; i < NTM; i++)
		if (TM_ARG[i] == 'd') tmap(i, dy.data(), M, N, 4);
		else if (TM_ARG[i] == 'w') tmap(i, w.data(), N, K, 2);
		else tmap(i, x.data(), M, K, 2);
#endif
	{
		unsigned ndw = (unsigned)(((N + BM - 1) / BM) * ((K + BN - 1) / BN) * SPLIT);
		unsigned ndx = (unsigned)(((M + XBM - 1) / XBM) * ((K + XBN - 1) / XBN));
		if (ndx)
			launch({ndx, 1, 1}, XTHREADS,
			       [&] { DX_ENTRY((u64)dy.data(), (u64)x.data(), (u64)w.data(), (u64)dx.data(), (u64)dw.data(), (u64)ws.data(), M, 0 TMAPS); });
		launch({ndw, 1, 1}, THREADS,
		       [&] { DW_ENTRY((u64)dy.data(), (u64)x.data(), (u64)w.data(), (u64)dx.data(), (u64)dw.data(), (u64)ws.data(), M, 0 TMAPS); });
	}
#if SPLIT > 1
	launch({(unsigned)((N * K / 4 + 255) / 256), 1, 1}, 256,
	       [&] { SUM_ENTRY((u64)dy.data(), (u64)x.data(), (u64)w.data(), (u64)dx.data(), (u64)dw.data(), (u64)ws.data(), M, 0 TMAPS); });
#endif
#if TF32 /* dy rounded to tf32 (precision "tf32"): exact products of that */
	for (auto &v : dy) v = tf32_rna(v);
	double tol = 2e-5;
#else
	double tol = TERMS == 1 ? 1e-2 : TERMS == 2 ? 1e-4 : 2e-5;
#endif
	for (i64 m = 0; m < M; m++) for (i64 k = 0; k < K; k++) {
		double r = 0; for (i64 n = 0; n < N; n++) r += (double)dy[m * N + n] * frombf(w[n * K + k]);
		double g = frombf(dx[m * K + k]);
		if (!(std::fabs(r - g) <= tol * 1.0 + bf16_half_ulp(r))) { printf("DX MISMATCH m=%lld k=%lld got %g want %g\n", m, k, g, r); return 1; }
	}
	for (i64 n = 0; n < N; n++) for (i64 k = 0; k < K; k++) {
		double r = 0; for (i64 m = 0; m < M; m++) r += (double)dy[m * N + n] * frombf(x[m * K + k]);
		double g = dw[n * K + k]; rms += r * r;
		worst = std::max(worst, std::fabs(r - g));
		if (!(std::fabs(r - g) <= tol * (std::sqrt(M) + std::fabs(r)))) { printf("DW MISMATCH n=%lld k=%lld got %g want %g\n", n, k, g, r); return 1; }
	}
	printf("bwd M=%lld K=%lld N=%lld terms %d ok dw worst abs %.3g rms %.3g\n", M, K, N, TERMS, worst, std::sqrt(rms / (N * K)));
#endif
	return 0;
}
