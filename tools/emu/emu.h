// emu.h - a CPU emulation of the CUDA subset gen/engines/gemm_emit.c emits, to run
// generated GEMM kernels without a GPU (developer tool, not built by cmake;
// tools/emu/run.sh says how). One std::thread per CUDA thread, blocks one
// after another; __syncthreads is a barrier; ldmatrix (.x4, .trans) and
// mma.sync m16n8k16 bf16 are warp-collective exchanges that follow the PTX
// ISA's fragment layouts; cp.async copies at once (so it checks index
// math, swizzles, predication and fragment layouts, not pipeline timing).
// It encodes our reading of the ISA: the GPU tests remain the judge.
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>
#include <functional>
#include "emu_cuda.h"
alignas(128) u8 smem[256 * 1024];
static std::barrier<> *block_bar;
static std::barrier<> *warp_bar[32];
static inline void __syncthreads() { block_bar->arrive_and_wait(); }
static inline u32 lg_and_or(u32 a, u32 m, u32 c) { return (a & m) | c; }
static inline float lg_bf16_lo(u32 w) { return lg_u2f(w << 16); }
static inline float lg_bf16_hi(u32 w) { return lg_u2f(w & 0xffff0000u); }
static inline u32 lg_swz(u32 row, u32 byte, u32 rb) { const u32 o = row * rb + byte; const u32 line = rb >= 128u ? row : o >> 7; return o ^ ((line & 7u) << 4); }
static inline void lg_cp16(void *dst, const void *src, u32 bytes) { if (bytes) memcpy(dst, src, 16); else memset(dst, 0, 16); if ((uintptr_t)dst % 16) abort(); }
static inline void lg_cp4(void *dst, const void *src, u32 bytes) { if (bytes) memcpy(dst, src, 4); else memset(dst, 0, 4); }
static inline void lg_cp_commit(void) {}
#define lg_cp_wait(n) ((void)0)
struct warp_state { const u8 *addr[32]; u32 a[32][4]; u32 b[32][2]; };
static warp_state wst[32];
static inline int lane_id() { return threadIdx.x & 31; }
static inline void ldsm(u32 r[4], const void *p, bool trans) {
	int l = lane_id(), w = threadIdx.x >> 5;
	if ((uintptr_t)p % 16) abort();
	if ((const u8 *)p < smem || (const u8 *)p + 16 > smem + sizeof smem) abort();
	wst[w].addr[l] = (const u8 *)p; warp_bar[w]->arrive_and_wait();
	int g = l / 4, q = l % 4;
	for (int j = 0; j < 4; j++) {
		u16 lo, hi;
		if (!trans) { memcpy(&lo, wst[w].addr[8 * j + g] + 4 * q, 2); memcpy(&hi, wst[w].addr[8 * j + g] + 4 * q + 2, 2); }
		else { memcpy(&lo, wst[w].addr[8 * j + 2 * q] + 2 * g, 2); memcpy(&hi, wst[w].addr[8 * j + 2 * q + 1] + 2 * g, 2); }
		r[j] = lo | ((u32)hi << 16);
	}
	warp_bar[w]->arrive_and_wait();
}
static inline void lg_ldsm4(u32 r[4], const void *p) { ldsm(r, p, false); }
static inline void lg_ldsm4t(u32 r[4], const void *p) { ldsm(r, p, true); }
static inline float bfv(u32 w, int hi) { return hi ? lg_bf16_hi(w) : lg_bf16_lo(w); }
static inline void lg_mma_bf16(float d[4], const u32 a[4], const u32 b[2]) {
	int l = lane_id(), w = threadIdx.x >> 5;
	memcpy(wst[w].a[l], a, 16); memcpy(wst[w].b[l], b, 8); warp_bar[w]->arrive_and_wait();
	float A[16][16], B[16][8];
	for (int t = 0; t < 32; t++) {
		int g = t / 4, q = t % 4;
		for (int e = 0; e < 2; e++) {
			A[g][2 * q + e] = bfv(wst[w].a[t][0], e); A[g + 8][2 * q + e] = bfv(wst[w].a[t][1], e);
			A[g][2 * q + 8 + e] = bfv(wst[w].a[t][2], e); A[g + 8][2 * q + 8 + e] = bfv(wst[w].a[t][3], e);
			B[2 * q + e][g] = bfv(wst[w].b[t][0], e); B[2 * q + 8 + e][g] = bfv(wst[w].b[t][1], e);
		}
	}
	int g = l / 4, q = l % 4;
	int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * q, 2 * q + 1, 2 * q, 2 * q + 1};
	for (int i = 0; i < 4; i++) { float s = d[i]; for (int k = 0; k < 16; k++) s += A[rows[i]][k] * B[k][cols[i]]; d[i] = s; }
	warp_bar[w]->arrive_and_wait();
}
static inline void lg_split_bf16x2(u32 *t, int n, float lo, float hi) {
	for (int i = 0; i < n; i++) { t[i] = lg_pack_bf16x2(lo, hi); lo -= lg_bf16_lo(t[i]); hi -= lg_bf16_hi(t[i]); }
}
static inline float tf32_rna(float f) { return lg_u2f((lg_f2u(f) + 0x1000u) & ~0x1fffu); }
static inline void lg_split_tf32(u32 *t, int n, float lo, float hi) { lg_split_bf16x2(t, n, tf32_rna(lo), tf32_rna(hi)); }
// Run kernel fn over a grid, blocks one after another.
static void launch(dim3e grid, unsigned threads, std::function<void()> fn) {
	gridDim = grid; blockDim = {threads, 1, 1};
	for (unsigned z = 0; z < grid.z; z++) for (unsigned y = 0; y < grid.y; y++) for (unsigned x = 0; x < grid.x; x++) {
		std::barrier<> bb((std::ptrdiff_t)threads); block_bar = &bb;
		std::vector<std::barrier<> *> wb; for (unsigned w = 0; w < threads / 32; w++) { warp_bar[w] = new std::barrier<>(32); }
		memset(smem, 0xcd, sizeof smem);
		std::vector<std::thread> ts;
		for (unsigned t = 0; t < threads; t++) ts.emplace_back([=] { threadIdx = {t, 0, 0}; blockIdx = {x, y, z}; fn(); });
		for (auto &t : ts) t.join();
		for (unsigned w = 0; w < threads / 32; w++) delete warp_bar[w];
	}
}
