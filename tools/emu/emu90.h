// emu90.h - a CPU emulation of the sm_90a subset the GEMM emitters use
// (gen/engines/fp8_gemm_emit.c, gemm_emit.c's sm_90a part, wgmma_pipe.c), to
// run generated sm_90a GEMMs without a GPU (developer tool, not built by
// cmake; fp8_gemm.sh and run.sh say how). One std::thread per CUDA thread;
// a cluster's CTAs run at once, clusters one after another. What it models:
// - mbarriers (init, arrive, arrive.expect_tx, expect_tx, complete_tx,
//   try_wait.parity, remote arrive through mapa) with their phases and
//   transaction counts, blocking waits with a deadlock timeout (EMU_TIMEOUT s);
// - TMA 2-D tiled loads (multicast too), zeros outside the tensor, and
//   stores and adds, which read shared memory at the bulk wait that retires
//   them (as late as allowed); the 128/64/32-byte swizzles on the address
//   bits; tensormap.replace of a map in global memory;
// - wgmma.mma_async m64nNk32 e4m3 and m64nNk16 bf16 -> f32 from shared
//   memory descriptors (K-major, or MN-major for bf16; 128-byte swizzle),
//   executed as late as the program allows: at the wgmma.wait_group that
//   retires its group, so a stage released or an accumulator read before
//   that wait shows up; a warpgroup's threads meet at each wgmma
//   instruction (.sync.aligned), and nowhere else unless the code says so
//   (__syncwarp, bar.sync), so a lane's shared-memory read after its warp
//   last met is not ordered before lane 0's release;
// - cp.async of 4 bytes with cp.async.mbarrier.arrive.noinc, named,
//   CTA and cluster barriers, per-CTA __shared__ arrays; setmaxnreg, the
//   fences and griddepcontrol (entries run one after another) are no-ops.
// Loads happen at issue (one legal schedule). It encodes our reading of the
// PTX ISA: the GPU tests remain the judge.
#include <barrier>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
#include "emu_cuda.h"
static inline float lg_bf16_lo(u32 w) { return lg_u2f(w << 16); }
static inline float lg_bf16_hi(u32 w) { return lg_u2f(w & 0xffff0000u); }
static inline float e4m3_val(u8 b) {
	int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
	float v = e ? std::ldexp(1.0f + m / 8.0f, e - 7) : std::ldexp(m / 8.0f, -6);
	return s ? -v : v;
}

[[noreturn]] static void emu_die(const char *what) { fprintf(stderr, "emu90: %s\n", what); fflush(stderr); std::_Exit(3); }

// ------------------------------------------------------------ the CTAs
struct emu_mbar {
	std::mutex m; std::condition_variable cv;
	int count = 0, pending = 0; i64 tx = 0; u64 phase = 0; bool init = false;
	void check() { if (pending == 0 && tx == 0) { phase++; pending = count; cv.notify_all(); } }
};
enum { EMU_SMEM = 232 * 1024 };
#ifndef EMU_TIMEOUT
#define EMU_TIMEOUT 30
#endif
struct emu_named {  // bar.sync: n threads a generation, a timed wait
	std::mutex m; std::condition_variable cv; u32 n = 0, in = 0; u64 gen = 0;
};
struct emu_cta {
	alignas(1024) u8 smem[EMU_SMEM];
	std::mutex m;
	std::map<u32, std::unique_ptr<emu_mbar>> bars;         // by shared offset
	std::map<u32, std::unique_ptr<struct emu_named>> named; // bar.sync id
	std::map<int, std::unique_ptr<std::vector<u64>>> statics; // the kernel's __shared__ arrays (cut90.py)
	emu_mbar *bar(u32 off) {
		std::lock_guard<std::mutex> g(m);
		auto &p = bars[off];
		if (!p) p = std::make_unique<emu_mbar>();
		return p.get();
	}
};
// A __shared__ array of the kernel (T: its array type), one a CTA, by its key.
template <class T> static T *emu_static(struct emu_cta *c, int key);
struct emu_cluster { int size; std::vector<emu_cta *> cta; std::barrier<> *all; };
thread_local emu_cta *emu_self;
thread_local emu_cluster *emu_cl;
thread_local int emu_rank;

template <class T> static T *emu_static(struct emu_cta *c, int key) {
	std::lock_guard<std::mutex> g(c->m);
	auto &p = c->statics[key];
	if (!p) p = std::make_unique<std::vector<u64>>((sizeof(T) + 7) / 8, 0xcdcdcdcdcdcdcdcdull);
	return (T *)p->data();
}
static inline u32 __cvta_generic_to_shared(const void *p) {
	const u8 *q = (const u8 *)p;
	if (q < emu_self->smem || q >= emu_self->smem + EMU_SMEM) emu_die("a shared address outside this CTA's shared memory");
	return (u32)(q - emu_self->smem);
}
static inline u8 *emu_at(int rank, u32 off, u32 bytes) {
	if ((u64)off + bytes > EMU_SMEM) emu_die("a shared access past the shared memory");
	return emu_cl->cta[rank]->smem + off;
}

// ------------------------------------------------------------ mbarriers
static inline void emu_wait_phase(emu_mbar *b, u32 parity) {
	std::unique_lock<std::mutex> l(b->m);
	if (!b->init) emu_die("wait on an mbarrier never initialised");
	if (!b->cv.wait_for(l, std::chrono::seconds(EMU_TIMEOUT), [&] { return (b->phase & 1) != parity; })) {
		fprintf(stderr, "emu90: CTA %u thread %u waits on parity %u of an mbarrier (phase %llu, %d arrivals and %lld bytes "
			"pending of %d)\n", blockIdx.x, threadIdx.x, parity, b->phase, b->pending, b->tx, b->count);
		if (!b->cv.wait_for(l, std::chrono::seconds(5), [&] { return (b->phase & 1) != parity; }))
			emu_die("an mbarrier wait did not complete (deadlock)");
	}
}
static inline void lg_mbar_init(u64 *bar, u32 count) {
	emu_mbar *b = emu_self->bar(__cvta_generic_to_shared(bar));
	std::lock_guard<std::mutex> g(b->m);
	b->count = b->pending = (int)count; b->tx = 0; b->phase = 0; b->init = true;
}
static inline void emu_arrive(emu_mbar *b, i64 tx) {
	std::lock_guard<std::mutex> g(b->m);
	if (!b->init) emu_die("arrive on an mbarrier never initialised");
	b->tx += tx; b->pending--;
	if (b->pending < 0) emu_die("more arrivals than an mbarrier's count");
	b->check();
}
static inline void emu_complete_tx(emu_cta *c, u32 off, u32 bytes) {
	emu_mbar *b = c->bar(off);
	std::lock_guard<std::mutex> g(b->m);
	if (!b->init) emu_die("complete_tx on an mbarrier never initialised");
	b->tx -= bytes;
	b->check();
}
static inline void lg_mbar_fence_init() {}
static inline void lg_mbar_expect(u64 *bar, u32 bytes) { emu_arrive(emu_self->bar(__cvta_generic_to_shared(bar)), bytes); }
static inline void lg_mbar_expect_tx(u64 *bar, u32 bytes) { // no arrival
	emu_mbar *b = emu_self->bar(__cvta_generic_to_shared(bar));
	std::lock_guard<std::mutex> g(b->m);
	if (!b->init) emu_die("expect_tx on an mbarrier never initialised");
	b->tx += bytes;
}
static inline void lg_mbar_arrive(u64 *bar) { emu_arrive(emu_self->bar(__cvta_generic_to_shared(bar)), 0); }
static inline void lg_mbar_wait(u64 *bar, u32 parity) { emu_wait_phase(emu_self->bar(__cvta_generic_to_shared(bar)), parity); }
static inline void lg_mbar_arrive_cta(u64 *bar, u32 rank) {
	if ((int)rank >= emu_cl->size) emu_die("mapa to a rank outside the cluster");
	emu_arrive(emu_cl->cta[rank]->bar(__cvta_generic_to_shared(bar)), 0);
}
static inline void lg_cluster_sync() { emu_cl->all->arrive_and_wait(); }
static inline void lg_bar_id(u32 id, u32 n) {
	emu_named *b;
	{
		std::lock_guard<std::mutex> g(emu_self->m);
		auto &p = emu_self->named[id];
		if (!p) p = std::make_unique<emu_named>();
		b = p.get();
	}
	std::unique_lock<std::mutex> l(b->m);
	if (b->in == 0) b->n = n;
	else if (b->n != n) emu_die("bar.sync with thread counts that differ");
	const u64 gen = b->gen;
	if (++b->in == n) { b->in = 0; b->gen++; b->cv.notify_all(); return; }
	if (!b->cv.wait_for(l, std::chrono::seconds(EMU_TIMEOUT), [&] { return b->gen != gen; })) {
		fprintf(stderr, "emu90: CTA %u thread %u waits at bar.sync %u (%u of %u arrived)\n", blockIdx.x, threadIdx.x, id,
			b->in, n);
		if (!b->cv.wait_for(l, std::chrono::seconds(5), [&] { return b->gen != gen; }))
			emu_die("a bar.sync did not complete (deadlock)");
	}
}
#define lg_bar_named(id, n) lg_bar_id(id, n)
static inline void __syncthreads() { lg_bar_id(0, blockDim.x); }
static inline void __syncwarp() { lg_bar_id(200 + (threadIdx.x >> 5), 32); } // lanes run apart here

// ------------------------------------------------------------ loads
template <class T> static inline T __ldg(const T *p) { return *p; }
static inline u32 __funnelshift_r(u32 lo, u32 hi, u32 shift) {
	const u64 v = ((u64)hi << 32) | lo;
	return (u32)(v >> (shift & 31));
}

// ------------------------------------------------------------ cp.async
static inline void lg_cp4_if(float *dst, const float *src, bool ok, bool) { *dst = ok ? *src : 0.0f; }
static inline void lg_cp_arrive(u64 *bar) { lg_mbar_arrive(bar); }
static inline void lg_cp_commit() {}
#define lg_cp_wait(n) ((void)0)

// ------------------------------------------------------------ TMA
// lg_tmap as fp8_gemm.sh's driver fills it (the GPU's is the driver's opaque encoding).
struct emu_tmap { u64 base, cols, rows, pitch, box0, box1, esize, swizzle; };
static inline u32 emu_swz(u32 addr, u32 swizzle) {
	if (swizzle == 128) return addr ^ (((addr >> 7) & 7) << 4);
	if (swizzle == 64) return addr ^ (((addr >> 7) & 3) << 4);
	if (swizzle == 32) return addr ^ (((addr >> 7) & 1) << 4);
	return addr;
}
// store: 0 load, 1 store, 2 reduce-add store (fp32 or bf16 elements)
static inline void emu_tma_box(const void *tmv, u32 dst, int c0, int c1, int rank, int store) {
	emu_tmap t; memcpy(&t, tmv, sizeof t);
	if (!t.base) emu_die("TMA through a zero tensor map");
	const u32 rb = (u32)(t.box0 * t.esize);
	if (t.swizzle && rb > t.swizzle) emu_die("a box row wider than its swizzle");
	if (t.swizzle && dst % (t.swizzle * 8)) emu_die("a swizzled box not at its swizzle atom's alignment");
	for (u64 r = 0; r < t.box1; r++)
		for (u64 e = 0; e < t.box0; e++) {
			const u32 a = emu_swz(dst + (u32)(r * rb + e * t.esize), (u32)t.swizzle);
			u8 *s = emu_at(rank, a, (u32)t.esize);
			const i64 gr = (i64)c1 + (i64)r, gc = (i64)c0 + (i64)e;
			const bool in = gr >= 0 && gc >= 0 && (u64)gr < t.rows && (u64)gc < t.cols;
			u8 *g = (u8 *)(uintptr_t)t.base + (u64)gr * t.pitch + (u64)gc * t.esize;
			if (store == 2 && in) {
				if (t.esize == 4) { float x, y; memcpy(&x, g, 4); memcpy(&y, s, 4); x += y; memcpy(g, &x, 4); }
				else if (t.esize == 2) {
					u16 x, y; memcpy(&x, g, 2); memcpy(&y, s, 2);
					x = bf16_rne(lg_u2f((u32)x << 16) + lg_u2f((u32)y << 16)); memcpy(g, &x, 2);
				} else emu_die("a TMA add of elements neither fp32 nor bf16");
			}
			else if (store) { if (in) memcpy(g, s, t.esize); }
			else if (in) memcpy(s, g, t.esize);
			else memset(s, 0, t.esize);
		}
}
static inline u32 emu_box_bytes(const void *tmv) { emu_tmap t; memcpy(&t, tmv, sizeof t); return (u32)(t.box0 * t.box1 * t.esize); }
template <class M> static inline void lg_tma_load_2d(void *dst, const M *tm, u64 *bar, int c0, int c1) {
	const u32 d = __cvta_generic_to_shared(dst), b = __cvta_generic_to_shared(bar);
	emu_tma_box(tm, d, c0, c1, emu_rank, 0);
	emu_complete_tx(emu_self, b, emu_box_bytes(tm));
}
template <class M> static inline void lg_tma_load_2d_mc(void *dst, const M *tm, u64 *bar, int c0, int c1, u16 mask) {
	const u32 d = __cvta_generic_to_shared(dst), b = __cvta_generic_to_shared(bar);
	for (int r = 0; r < emu_cl->size; r++)
		if (mask >> r & 1) {
			emu_tma_box(tm, d, c0, c1, r, 0);
			emu_complete_tx(emu_cl->cta[r], b, emu_box_bytes(tm));
		}
}
// TMA stores (and adds) in this thread's bulk groups, done as late as the
// program allows: a group's copies read shared memory when a bulk wait
// retires it (or the thread ends), so a buffer rewritten before its stores
// have read it shows up.
struct emu_store { emu_tmap t; u32 src; int c0, c1, op; };
thread_local std::vector<emu_store> emu_bulk_open;
thread_local std::vector<std::vector<emu_store>> emu_bulk_groups;
template <class M> static inline void emu_store_issue(const M *tm, const void *src, int c0, int c1, int op) {
	emu_store st; memcpy(&st.t, tm, sizeof st.t);
	st.src = __cvta_generic_to_shared(src); st.c0 = c0; st.c1 = c1; st.op = op;
	emu_bulk_open.push_back(st);
}
template <class M> static inline void lg_tma_store_2d(const M *tm, const void *src, int c0, int c1) { emu_store_issue(tm, src, c0, c1, 1); }
template <class M> static inline void lg_tma_add_2d(const M *tm, const void *src, int c0, int c1) { emu_store_issue(tm, src, c0, c1, 2); }
template <class M> static inline void lg_tma_prefetch(const M *) {}
// tensormap.replace of a copy of template tm in global memory: its address,
// dims (inner 1-byte elements, rows) and row pitch (inner bytes).
template <class M> static inline void lg_tmap_patch(M *dst, const M *tm, const void *base, u32 inner, u32 rows) {
	emu_tmap t; memcpy(&t, tm, sizeof t);
	t.base = (u64)(uintptr_t)base; t.cols = inner; t.rows = rows; t.pitch = inner;
	memcpy((void *)dst, tm, sizeof *dst); memcpy((void *)dst, &t, sizeof t);
}
static inline void lg_tmap_release() {}
template <class M> static inline void lg_tmap_acquire(const M *) {}
static inline void lg_bulk_commit() { emu_bulk_groups.push_back(emu_bulk_open); emu_bulk_open.clear(); }
static inline void emu_bulk_wait(int n) {
	while ((int)emu_bulk_groups.size() > n) {
		for (const auto &st : emu_bulk_groups.front()) emu_tma_box(&st.t, st.src, st.c0, st.c1, emu_rank, st.op);
		emu_bulk_groups.erase(emu_bulk_groups.begin());
	}
}
#define lg_bulk_wait_read(n) emu_bulk_wait(n)
#define lg_bulk_wait(n) emu_bulk_wait(n)
static inline void lg_fence_proxy_async() {}
#define lg_setmaxnreg_dec(n) ((void)0)
#define lg_setmaxnreg_inc(n) ((void)0)

// ------------------------------------------------------------ wgmma
// A K-major e4m3 operand's byte (row, k) by its descriptor: 128-byte swizzle
// (layout 1), rows 128 bytes apart within a group of 8, groups SBO apart.
static inline u8 emu_desc_byte(u64 desc, int row, int k) {
	if ((desc >> 62) != 1) emu_die("a wgmma descriptor without the 128-byte swizzle");
	const u32 start = (u32)(desc & 0x3FFF) << 4, sbo = (u32)((desc >> 32) & 0x3FFF) << 4;
	const u32 a = start + (u32)(row / 8) * sbo + (u32)(row % 8) * 128 + (u32)k;
	return *emu_at(emu_rank, emu_swz(a, 128), 1);
}
struct emu_wg_op { float *acc; int n; u64 da, db; bool add; int bf16, ta, tb; };
thread_local std::vector<emu_wg_op> emu_open;                 // issued, not committed
thread_local std::vector<std::vector<emu_wg_op>> emu_groups;  // committed, not retired
static float emu_e4m3_tab[256];
static inline void emu_tables() { for (int b = 0; b < 256; b++) emu_e4m3_tab[b] = e4m3_val((u8)b); }
// bf16 element (mn, k) of an operand by its descriptor (trans: MN-major).
static inline float emu_desc_bf16(u64 desc, int mn, int k, int trans) {
	if ((desc >> 62) != 1) emu_die("a wgmma descriptor without the 128-byte swizzle");
	const u32 start = (u32)(desc & 0x3FFF) << 4, lbo = (u32)((desc >> 16) & 0x3FFF) << 4,
		  sbo = (u32)((desc >> 32) & 0x3FFF) << 4;
	const u32 a = trans ? start + (u32)(mn / 64) * lbo + (u32)(k / 8) * sbo + (u32)(k % 8) * 128 + (u32)(mn % 64) * 2
			    : start + (u32)(mn / 8) * sbo + (u32)(mn % 8) * 128 + (u32)k * 2;
	u16 h; memcpy(&h, emu_at(emu_rank, emu_swz(a, 128), 2), 2);
	return lg_u2f((u32)h << 16);
}
// This thread's share of D (64 x n): rows w*16 + l/4 (+8), columns 8j + 2(l%4) (+1).
static inline void emu_wg_run(const emu_wg_op &o) {
	const int t = threadIdx.x & 127, w = t >> 5, l = t & 31, r0 = w * 16 + l / 4, kk = o.bf16 ? 16 : 32;
	float a[2][32], b[2][32];
	for (int h = 0; h < 2; h++)
		for (int k = 0; k < kk; k++)
			a[h][k] = o.bf16 ? emu_desc_bf16(o.da, r0 + 8 * h, k, o.ta) : emu_e4m3_tab[emu_desc_byte(o.da, r0 + 8 * h, k)];
	for (int j = 0; j < o.n / 8; j++) {
		const int c0 = 8 * j + 2 * (l % 4);
		for (int h = 0; h < 2; h++)
			for (int k = 0; k < kk; k++)
				b[h][k] = o.bf16 ? emu_desc_bf16(o.db, c0 + h, k, o.tb) : emu_e4m3_tab[emu_desc_byte(o.db, c0 + h, k)];
		for (int i = 0; i < 4; i++) {
			float s = 0.0f;
			for (int k = 0; k < kk; k++) s += a[i >> 1][k] * b[i & 1][k];
			o.acc[4 * j + i] = o.add ? o.acc[4 * j + i] + s : s;
		}
	}
}
static inline void emu_wgmma_e4m3(float *acc, int n, u64 da, u64 db, int add) { emu_open.push_back({acc, n, da, db, add != 0, 0, 0, 0}); }
// bf16 (m64nNk16): A and B K-major (trans 0: row r's 16 elements 32 bytes
// along its 128-byte row) or MN-major (trans 1: 64 elements of M or N a
// 128-byte row, the reduction's rows 128 bytes apart in groups of 8 SBO
// apart, the next 64 of M or N LBO apart), 128-byte swizzle.
static inline void emu_wgmma_bf16(float *acc, int n, u64 da, u64 db, int add, int ta, int tb) {
	emu_open.push_back({acc, n, da, db, add != 0, 1, ta, tb});
}
// The wgmma instructions are .sync.aligned over the warpgroup: its 128
// threads meet at each (a named barrier the kernel does not use).
static inline void emu_wg_converge() { lg_bar_id(100 + (threadIdx.x >> 7), 128); }
static inline void lg_wg_fence() { emu_wg_converge(); }
static inline void lg_wg_commit() { emu_wg_converge(); emu_groups.push_back(emu_open); emu_open.clear(); }
static inline void emu_wg_wait(int n) {
	emu_wg_converge();
	while ((int)emu_groups.size() > n) {
		for (const auto &o : emu_groups.front()) emu_wg_run(o);
		emu_groups.erase(emu_groups.begin());
	}
	emu_wg_converge(); // every thread's share of the retired groups done before any goes on
}
#define lg_wg_wait(n) emu_wg_wait(n)

// ------------------------------------------------------------ launch
// Run kernel fn on `ctas` CTAs of `threads` threads in clusters of `csize`
// (a cluster's CTAs at once, clusters one after another).
static void emu_launch(unsigned ctas, unsigned threads, int csize, std::function<void()> fn) {
	gridDim = {ctas, 1, 1}; blockDim = {threads, 1, 1};
	emu_tables();
	if (ctas % csize) emu_die("a grid that is not whole clusters");
	for (unsigned c0 = 0; c0 < ctas; c0 += csize) {
		std::vector<std::unique_ptr<emu_cta>> cs;
		emu_cluster cl;
		cl.size = csize;
		std::barrier<> all((std::ptrdiff_t)(threads * csize));
		cl.all = &all;
		for (int r = 0; r < csize; r++) {
			cs.push_back(std::make_unique<emu_cta>());
			memset(cs.back()->smem, 0xcd, EMU_SMEM);
			cl.cta.push_back(cs.back().get());
		}
		std::vector<std::thread> ts;
		for (int r = 0; r < csize; r++)
			for (unsigned t = 0; t < threads; t++)
				ts.emplace_back([&, r, t] {
					threadIdx = {t, 0, 0}; blockIdx = {c0 + (unsigned)r, 0, 0};
					emu_self = cl.cta[r]; emu_cl = &cl; emu_rank = r;
					fn();
					if (!emu_open.empty() || !emu_groups.empty()) emu_die("wgmmas left unretired at the kernel's end");
					if (!emu_bulk_open.empty()) emu_die("TMA stores issued but never committed");
					emu_bulk_wait(0); // a CTA's smem lives until its bulk stores have read it
				});
		for (auto &t : ts) t.join();
	}
}
