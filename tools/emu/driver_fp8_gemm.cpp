// driver_fp8_gemm.cpp - runs a generated sm_90a fp8_gemm (kernel.inc from
// cut90.py) through emu90.h and checks its output against a float64
// reference; plan.h (fp8_gemm.sh, from the kernel's plan in `lingen
// build`'s manifest) gives the launch, the tensor maps and the shapes.
// forward / dgrad: A [M, KR] e4m3 with scales [cdiv(KR, 128), M], B [NO, KR]
// with scales [cdiv(NO, 128), cdiv(KR, 128)], out [M, NO].
// wgrad (WGRAD 1): the reduction runs over the M tokens: A [ROWS, round_up(M,
// 128)] (its tail never read: poisoned) with scales [cdiv(M, 128), ROWS], B
// [NO, round_up(M, 128)] with scales [cdiv(M, 128), NO], out [ROWS, NO]
// (+= with ACCUMULATE).
// Grouped (EXPERTS > 0: fp8_grouped_gemm's forward or dgrad): counts [E] on
// the "device" (random, one expert empty, their sum clamped by M as the kernel
// does), expert e's rows [r_e, r_e + n_e) of A and out; A's scales per expert
// a [cdiv(KR, 128), n_e] block at element r_e cdiv(KR, 128); B [E, NO, KR]
// with scales [E, cdiv(NO, 128), cdiv(KR, 128)]; rows past the experts' stay
// unwritten.
#include <random>
#include "emu90.h"
#include "kernel.inc"
#include "plan.h"
#ifndef EXPERTS
#define EXPERTS 0
#endif

// A random e4m3 byte, never NaN (S.1111.111).
static u8 rand_e4m3(std::mt19937 &rng) { u8 v = (u8)rng(); return (v & 0x7f) == 0x7f ? (u8)(v ^ 1) : v; }

static emu_tmap tmap_of(const void *p, u64 rows, u64 cols, u64 pitch, u64 esize, int i) {
	return emu_tmap{(u64)(uintptr_t)p, cols, rows, pitch * esize, TM_BOX0[i], TM_BOX1[i], esize, TM_SWZ[i]};
}

#if EXPERTS > 0 && WGRAD
// fp8_grouped_gemm's wgrad: dw[e] [ROWS, NO] = dyt_e . xt_e^T over expert e's
// tokens: counts on the "device" (random, some 0, some odd: those take the
// byte copies, the others TMA through the maps the first entry patches in
// the workspace), expert e's [ROWS, c_e] and [NO, c_e] blocks at elements
// r_e ROWS and r_e NO, its scale blocks [cdiv(c_e, 128), ROWS] / [.., NO]
// from row sum of cdiv(c_e', 128) over the experts before it.
static int grouped_wgrad(i64 M, unsigned ctas, unsigned seed) {
	const i64 E = EXPERTS, OE = OUT_F32 ? 4 : 2, GUARD = 4096;
	std::mt19937 rng(seed);
	std::vector<int> counts(E);
	std::vector<i64> r0(E + 1, 0), g0(E + 1, 0);
	for (i64 e = 0, r = 0, g = 0; e < E; e++) {
		i64 c = e == 1 ? 0 : (i64)(rng() % (2 * M / E + 2));
		if (e % 3 == 0) c = c / 16 * 16; // these through TMA, the others by byte copies when odd
		c = r + c > M ? M - r : c;
		counts[e] = (int)c; r0[e] = r; g0[e] = g; r += c; g += (c + 127) / 128;
		r0[e + 1] = r; g0[e + 1] = g;
	}
	const i64 T = r0[E], G = g0[E];
	std::vector<u8> a(ROWS * (M + 16) + 16), b(NO * (M + 16) + 16);
	for (auto &v : a) v = rand_e4m3(rng);
	for (auto &v : b) v = rand_e4m3(rng);
	std::vector<float> as((G + E) * ROWS + 1), bs((G + E) * NO + 1);
	for (auto &v : as) v = std::ldexp(1.0f + (float)(rng() % 1000) / 1000.0f, -(int)(rng() % 6) - 8);
	for (auto &v : bs) v = std::ldexp(1.0f + (float)(rng() % 1000) / 1000.0f, -(int)(rng() % 6) - 4);
	std::vector<u8> out(E * ROWS * NO * OE + GUARD, 0xff);
	std::vector<float> init(E * ROWS * NO, 0.0f);
	if (ACCUMULATE)
		for (i64 i = 0; i < E * ROWS * NO; i++) {
			init[i] = (float)(int)(rng() % 64) - 32.0f;
			if (OUT_F32) memcpy(&out[i * 4], &init[i], 4);
			else { const u16 h = (u16)(lg_f2u(init[i]) >> 16); memcpy(&out[i * 2], &h, 2); }
		}
	std::vector<u64> ws(E * 2 * 16 + 16, 0);
	emu_tmap tm[NTM];
	for (int i = 0; i < NTM; i++) {
		const int arg = TM_ARG[i];
		if (arg == 0) tm[i] = tmap_of(a.data(), TM_BOX1[i], TM_BOX0[i], TM_BOX0[i], 1, i);  // templates the maps entry patches
		else if (arg == 2) tm[i] = tmap_of(b.data(), TM_BOX1[i], TM_BOX0[i], TM_BOX0[i], 1, i);
		else tm[i] = tmap_of(out.data(), E * ROWS, NO, NO, OE, i);
	}
	lg_tmap t[NTM];
	for (int i = 0; i < NTM; i++) { memset(&t[i], 0, sizeof t[i]); memcpy(&t[i], &tm[i], sizeof tm[i]); }
	const auto t0 = std::chrono::steady_clock::now();
	const u64 A = (u64)a.data(), AS = (u64)as.data(), B = (u64)b.data(), BS = (u64)bs.data(), C = (u64)counts.data(),
		  O = (u64)out.data(), W = (u64)ws.data();
	emu_launch(1, THREADS0, CSIZE0, [&] { CALL0(A, AS, B, BS, C, O, W, M, t); });
	emu_launch(ctas, THREADS, CSIZE, [&] { CALL(A, AS, B, BS, C, O, W, M, t); });
	const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
	for (i64 i = E * ROWS * NO * OE; i < E * ROWS * NO * OE + GUARD; i++)
		if (out[i] != 0xff) { printf("FAIL: a byte past the output written\n"); return 1; }
	i64 bad = 0;
	double worst = 0;
	for (i64 e = 0; e < E; e++) {
		const i64 c = counts[e];
		const u8 *ae = a.data() + r0[e] * ROWS, *be = b.data() + r0[e] * NO;
		for (i64 m = 0; m < ROWS; m++)
			for (i64 n = 0; n < NO; n++) {
				const i64 o = (e * ROWS + m) * NO + n;
				double ref = init[o], mag = std::fabs(ref);
				for (i64 tb = 0; tb * 128 < c; tb++) {
					double s = 0, sm = 0;
					for (i64 k = tb * 128; k < c && k < tb * 128 + 128; k++) {
						const double p = (double)emu_e4m3_tab[ae[m * c + k]] * emu_e4m3_tab[be[n * c + k]];
						s += p; sm += std::fabs(p);
					}
					const double sc = (double)as[(g0[e] + tb) * ROWS + m] * bs[(g0[e] + tb) * NO + n];
					ref += s * sc; mag += sm * sc;
				}
				double got;
				if (OUT_F32) { float f; memcpy(&f, &out[o * 4], 4); got = f; }
				else { u16 h; memcpy(&h, &out[o * 2], 2); got = lg_u2f((u32)h << 16); }
				const double tol = 1e-5 * mag + (OUT_F32 ? 0 : bf16_half_ulp(ref));
				const double err = std::fabs(got - ref);
				if (!(err <= tol)) { if (bad++ < 8) printf("MISMATCH expert %lld row %lld col %lld: got %.9g want %.9g (tol %.3g)\n", e, m, n, got, ref, tol); }
				else worst = std::max(worst, mag > 0 ? err / mag : 0);
			}
	}
	printf("counts");
	for (i64 e = 0; e < E; e++) printf(" %d", counts[e]);
	printf(" (tokens of the experts %lld of %lld)\n", T, M);
	printf("%s M=%lld rows=%lld NO=%lld E=%lld ctas=%u seed=%u: %s (%lld bad), worst |err|/sum|terms| %.3g, %.1f s emulated\n",
	       ENTRY_NAME, M, (i64)ROWS, (i64)NO, E, ctas, seed, bad ? "FAIL" : "ok", bad, worst, secs);
	return bad ? 1 : 0;
}
#endif

int main(int argc, char **argv) {
	const i64 M = argc > 1 ? atoll(argv[1]) : 301;
	const unsigned ctas = argc > 2 ? (unsigned)atoi(argv[2]) : 2u * CSIZE;
	const unsigned seed = argc > 3 ? (unsigned)atoi(argv[3]) : 1u;
#if EXPERTS > 0 && WGRAD
	return grouped_wgrad(M, ctas, seed);
#else
	// the output's rows, the reduction and its row pitch in the operands
	const i64 R = WGRAD ? ROWS : M, KR = WGRAD ? M : KRED, P = WGRAD ? (M + 127) / 128 * 128 : KRED;
	const i64 KB = (KR + 127) / 128, NB = (NO + 127) / 128, OE = OUT_F32 ? 4 : 2, GUARD = 4096;
	std::mt19937 rng(seed);
	const i64 E = EXPERTS > 0 ? EXPERTS : 1;
	std::vector<int> counts(E + 1, 0);
	std::vector<i64> r0(E + 1, 0), nr(E + 1, 0); // each expert's first row and rows (clamped)
	if (EXPERTS > 0) {
		for (i64 e = 0; e < E; e++) counts[e] = e == 1 ? 0 : (int)(rng() % (2 * M / E + 2));
		for (i64 e = 0, r = 0; e < E; e++) {
			const i64 c = counts[e], n = r + c > M ? M - r : c;
			r0[e] = r; nr[e] = n; r += n;
		}
	} else nr[0] = R;
	std::vector<u8> a(R * P + 16), b(E * NO * P + 16);
	for (i64 i = 0; i < (i64)a.size(); i++) a[i] = P > 0 && (i % P) < KR ? rand_e4m3(rng) : 0x7f; // 0x7f: NaN, in the tail
	for (i64 i = 0; i < (i64)b.size(); i++) b[i] = P > 0 && (i % P) < KR ? rand_e4m3(rng) : 0x7f;
	std::vector<float> as(KB * R + 1), bs(WGRAD ? KB * NO + 1 : E * NB * KB + 1);
	for (auto &v : as) v = std::ldexp(1.0f + (float)(rng() % 1000) / 1000.0f, -(int)(rng() % 6) - 8);
	for (auto &v : bs) v = std::ldexp(1.0f + (float)(rng() % 1000) / 1000.0f, -(int)(rng() % 6) - 4);
	std::vector<u8> out(R * NO * OE + GUARD, 0xff);
	std::vector<float> init(R * NO, 0.0f);
	if (ACCUMULATE)
		for (i64 i = 0; i < R * NO; i++) {
			init[i] = (float)(int)(rng() % 64) - 32.0f;
			if (OUT_F32) memcpy(&out[i * 4], &init[i], 4);
			else { const u16 h = (u16)(lg_f2u(init[i]) >> 16); memcpy(&out[i * 2], &h, 2); }
		}
	emu_tmap tm[NTM];
	for (int i = 0; i < NTM; i++) {
		const int arg = TM_ARG[i];
		if (arg == 0) tm[i] = tmap_of(a.data(), R, KR, P, 1, i);
		else if (arg == 2) tm[i] = tmap_of(b.data(), E * NO, KR, P, 1, i);
		else tm[i] = tmap_of(out.data(), R, NO, NO, OE, i);
	}
	lg_tmap t[NTM];
	for (int i = 0; i < NTM; i++) { memset(&t[i], 0, sizeof t[i]); memcpy(&t[i], &tm[i], sizeof tm[i]); }
	const auto t0 = std::chrono::steady_clock::now();
	emu_launch(ctas, THREADS, CSIZE, [&] {
		CALL((u64)a.data(), (u64)as.data(), (u64)b.data(), (u64)bs.data(), (u64)counts.data(), (u64)out.data(), 0, M, t);
	});
	const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
	for (i64 i = R * NO * OE; i < R * NO * OE + GUARD; i++)
		if (out[i] != 0xff) { printf("FAIL: a byte past the output written (%lld)\n", i - R * NO * OE); return 1; }
	i64 bad = 0;
	double worst = 0;
	i64 ex = 0;
	for (i64 m = 0; m < R; m++)
		for (i64 n = 0; n < NO; n++) {
			while (ex + 1 < E && m >= r0[ex] + nr[ex]) ex++;
			if (m >= r0[ex] + nr[ex]) { // a row of no expert: never written
				for (i64 i = 0; i < OE; i++)
					if (out[(m * NO + n) * OE + i] != 0xff) { if (bad++ < 8) printf("WRITTEN row %lld of no expert\n", m); break; }
				continue;
			}
			double ref = init[m * NO + n], mag = std::fabs(ref);
			for (i64 kb = 0; kb < KB; kb++) {
				double s = 0, sm = 0;
				for (i64 k = kb * 128; k < KR && k < kb * 128 + 128; k++) {
					const double p = (double)emu_e4m3_tab[a[m * P + k]] * emu_e4m3_tab[b[(ex * NO + n) * P + k]];
					s += p; sm += std::fabs(p);
				}
				const double sa = EXPERTS > 0 ? as[r0[ex] * KB + kb * nr[ex] + (m - r0[ex])] : as[kb * R + m];
				const double sb = WGRAD ? bs[kb * NO + n] : bs[((ex * NB) + n / 128) * KB + kb];
				ref += s * sa * sb; mag += sm * sa * sb;
			}
			double got;
			if (OUT_F32) { float f; memcpy(&f, &out[(m * NO + n) * 4], 4); got = f; }
			else { u16 h; memcpy(&h, &out[(m * NO + n) * 2], 2); got = lg_u2f((u32)h << 16); }
			const double tol = 1e-5 * mag + (OUT_F32 ? 0 : bf16_half_ulp(ref));
			const double e = std::fabs(got - ref);
			if (!(e <= tol)) { if (bad++ < 8) printf("MISMATCH row %lld col %lld: got %.9g want %.9g (tol %.3g)\n", m, n, got, ref, tol); }
			else worst = std::max(worst, mag > 0 ? e / mag : 0);
		}
	if (EXPERTS > 0) {
		printf("counts");
		for (i64 e = 0; e < E; e++) printf(" %d", counts[e]);
		printf(" (rows of the experts %lld of %lld)\n", r0[E - 1] + nr[E - 1], M);
	}
	printf("%s M=%lld rows=%lld KR=%lld NO=%lld ctas=%u seed=%u: %s (%lld bad), worst |err|/sum|terms| %.3g, %.1f s emulated\n",
	       ENTRY_NAME, M, R, KR, (i64)NO, ctas, seed, bad ? "FAIL" : "ok", bad, worst, secs);
	return bad ? 1 : 0;
#endif
}
