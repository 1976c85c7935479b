// driver_fp8_gemm.cpp - runs a generated sm_90a fp8_gemm (kernel.inc from
// cut90.py) through emu90.h and checks its output against a float64
// reference; plan.h (fp8_gemm.sh, from the kernel's plan in `lingen
// build`'s manifest) gives the launch, the tensor maps and the shapes.
// forward / dgrad: A [M, KR] e4m3 with scales [cdiv(KR, 128), M], B [NO, KR]
// with scales [cdiv(NO, 128), cdiv(KR, 128)], out [M, NO].
// wgrad (WGRAD 1): the reduction runs over the M tokens: A [ROWS, round_up(M,
// 16)] (its tail never read: poisoned) with scales [cdiv(M, 128), ROWS], B
// [NO, round_up(M, 16)] with scales [cdiv(M, 128), NO], out [ROWS, NO]
// (+= with ACCUMULATE).
#include <random>
#include "emu90.h"
#include "kernel.inc"
#include "plan.h"

static emu_tmap tmap_of(const void *p, u64 rows, u64 cols, u64 pitch, u64 esize, int i) {
	return emu_tmap{(u64)(uintptr_t)p, cols, rows, pitch * esize, TM_BOX0[i], TM_BOX1[i], esize, TM_SWZ[i]};
}

int main(int argc, char **argv) {
	const i64 M = argc > 1 ? atoll(argv[1]) : 301;
	const unsigned ctas = argc > 2 ? (unsigned)atoi(argv[2]) : 2u * CSIZE;
	const unsigned seed = argc > 3 ? (unsigned)atoi(argv[3]) : 1u;
	// the output's rows, the reduction and its row pitch in the operands
	const i64 R = WGRAD ? ROWS : M, KR = WGRAD ? M : KRED, P = WGRAD ? (M + 15) / 16 * 16 : KRED;
	const i64 KB = (KR + 127) / 128, NB = (NO + 127) / 128, OE = OUT_F32 ? 4 : 2, GUARD = 4096;
	std::mt19937 rng(seed);
	const auto e4m3 = [&](i64 i) { u8 v = (u8)rng(); if ((v & 0x7f) == 0x7f) v ^= 1; (void)i; return v; };
	std::vector<u8> a(R * P + 16), b(NO * P + 16);
	for (i64 i = 0; i < (i64)a.size(); i++) a[i] = (i % P) < KR ? e4m3(i) : 0x7f; // 0x7f: NaN, in the tail
	for (i64 i = 0; i < (i64)b.size(); i++) b[i] = (i % P) < KR ? e4m3(i) : 0x7f;
	std::vector<float> as(KB * R + 1), bs(WGRAD ? KB * NO + 1 : NB * KB + 1);
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
		else if (arg == 2) tm[i] = tmap_of(b.data(), NO, KR, P, 1, i);
		else tm[i] = tmap_of(out.data(), R, NO, NO, OE, i);
	}
	lg_tmap t[NTM];
	for (int i = 0; i < NTM; i++) { memset(&t[i], 0, sizeof t[i]); memcpy(&t[i], &tm[i], sizeof tm[i]); }
	const auto t0 = std::chrono::steady_clock::now();
	emu_launch(ctas, THREADS, CSIZE, [&] {
		CALL((u64)a.data(), (u64)as.data(), (u64)b.data(), (u64)bs.data(), (u64)out.data(), M, t);
	});
	const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
	for (i64 i = R * NO * OE; i < R * NO * OE + GUARD; i++)
		if (out[i] != 0xff) { printf("FAIL: a byte past the output written (%lld)\n", i - R * NO * OE); return 1; }
	i64 bad = 0;
	double worst = 0;
	for (i64 m = 0; m < R; m++)
		for (i64 n = 0; n < NO; n++) {
			double ref = init[m * NO + n], mag = std::fabs(ref);
			for (i64 kb = 0; kb < KB; kb++) {
				double s = 0, sm = 0;
				for (i64 k = kb * 128; k < KR && k < kb * 128 + 128; k++) {
					const double p = (double)emu_e4m3_tab[a[m * P + k]] * emu_e4m3_tab[b[n * P + k]];
					s += p; sm += std::fabs(p);
				}
				const double sc = (double)as[kb * R + m] * (WGRAD ? bs[kb * NO + n] : bs[(n / 128) * KB + kb]);
				ref += s * sc; mag += sm * sc;
			}
			double got;
			if (OUT_F32) { float f; memcpy(&f, &out[(m * NO + n) * 4], 4); got = f; }
			else { u16 h; memcpy(&h, &out[(m * NO + n) * 2], 2); got = lg_u2f((u32)h << 16); }
			const double tol = 1e-5 * mag + (OUT_F32 ? 0 : std::ldexp(std::fabs(ref), -8));
			const double e = std::fabs(got - ref);
			if (!(e <= tol)) { if (bad++ < 8) printf("MISMATCH row %lld col %lld: got %.9g want %.9g (tol %.3g)\n", m, n, got, ref, tol); }
			else worst = std::max(worst, mag > 0 ? e / mag : 0);
		}
	printf("%s M=%lld rows=%lld KR=%lld NO=%lld ctas=%u seed=%u: %s (%lld bad), worst |err|/sum|terms| %.3g, %.1f s emulated\n",
	       ENTRY_NAME, M, R, KR, (i64)NO, ctas, seed, bad ? "FAIL" : "ok", bad, worst, secs);
	return bad ? 1 : 0;
}
