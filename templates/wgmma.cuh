// wgmma.cuh - the sm_90a pieces of the GEMM emitter (gen/engines/gemm_emit.c):
// tensor maps passed as kernel parameters, TMA tile loads completing on
// mbarriers, and the warpgroup MMA's fences and shared memory descriptors.
// The wgmma.mma_async instruction itself is emitted per tile by the
// generator (its accumulator list depends on the tile's width).

// @type lg_tmap
// A CUtensorMap as the driver encodes it (cuTensorMapEncodeTiled, at
// launch): 128 opaque bytes, 64-byte aligned, passed by value as a
// `const __grid_constant__` parameter so TMA reads it from parameter space.
struct __align__(64) lg_tmap {
	u64 v[16];
};

// @helper lg_smem_addr
// The shared-window address of a generic pointer to shared memory.
static __device__ __forceinline__ u32 lg_smem_addr(const void *p)
{
	return (u32)__cvta_generic_to_shared(p);
}

// @helper lg_mbar_init
// Initialise the mbarrier at bar (shared) for `count` arrivals a phase.
static __device__ __forceinline__ void lg_mbar_init(u64 *bar, u32 count)
{
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;"
		     :: "r"(lg_smem_addr(bar)), "r"(count) : "memory");
}

// @helper lg_mbar_fence_init
// Make mbarrier initialisations visible to the async proxy (TMA) and to
// the other threads (a __syncthreads follows).
static __device__ __forceinline__ void lg_mbar_fence_init()
{
	asm volatile("fence.mbarrier_init.release.cluster;\n\t"
		     "fence.proxy.async.shared::cta;" ::: "memory");
}

// @helper lg_mbar_expect
// Arrive on bar and announce `bytes` of TMA transactions for this phase.
static __device__ __forceinline__ void lg_mbar_expect(u64 *bar, u32 bytes)
{
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
		     :: "r"(lg_smem_addr(bar)), "r"(bytes) : "memory");
}

// @helper lg_mbar_expect_tx
// Announce `bytes` of TMA transactions on bar for this phase, no arrival.
static __device__ __forceinline__ void lg_mbar_expect_tx(u64 *bar, u32 bytes)
{
	asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;"
		     :: "r"(lg_smem_addr(bar)), "r"(bytes) : "memory");
}

// @helper lg_mbar_arrive
// Arrive on bar (one of its `count` arrivals).
static __device__ __forceinline__ void lg_mbar_arrive(u64 *bar)
{
	asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];"
		     :: "r"(lg_smem_addr(bar)) : "memory");
}

// @helper lg_mbar_wait
// Wait until the phase of bar with parity `parity` has completed.
static __device__ __forceinline__ void lg_mbar_wait(u64 *bar, u32 parity)
{
	asm volatile("{\n\t.reg .pred p;\n"
		     "LG_WAIT_%=:\n\t"
		     "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
		     "@!p bra LG_WAIT_%=;\n}"
		     :: "r"(lg_smem_addr(bar)), "r"(parity) : "memory");
}

// @helper lg_tma_load_2d
// TMA: the box of tensor map tm at element coordinates (c0 inner, c1 outer)
// into shared dst (1024-byte aligned for the 128-byte swizzle), completing
// its bytes on bar. Elements outside the tensor arrive as zeros.
static __device__ __forceinline__ void
lg_tma_load_2d(void *dst, const lg_tmap *tm, u64 *bar, int c0, int c1)
{
	asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
		     " [%0], [%1, {%3, %4}], [%2];"
		     :: "r"(lg_smem_addr(dst)), "l"((u64)tm), "r"(lg_smem_addr(bar)),
		     "r"(c0), "r"(c1) : "memory");
}

// @helper lg_tmap_patch
// dst (global memory): template tm with its address, its dims (inner
// elements, rows) and its row pitch (`inner` bytes: 1-byte elements)
// replaced, for TMA in a later launch (lg_tmap_release, lg_tmap_acquire).
static __device__ __forceinline__ void
lg_tmap_patch(lg_tmap *dst, const lg_tmap *tm, const void *base, u32 inner, u32 rows)
{
	#pragma unroll
	for (int i = 0; i < 16; i += 2)
		*(ulonglong2 *)&dst->v[i] = make_ulonglong2(tm->v[i], tm->v[i + 1]);
	const u64 a = (u64)dst;
	asm volatile("tensormap.replace.tile.global_address.global.b1024.b64 [%0], %1;"
		     :: "l"(a), "l"((u64)base) : "memory");
	asm volatile("tensormap.replace.tile.global_dim.global.b1024.b32 [%0], 0, %1;"
		     :: "l"(a), "r"(inner) : "memory");
	asm volatile("tensormap.replace.tile.global_dim.global.b1024.b32 [%0], 1, %1;"
		     :: "l"(a), "r"(rows) : "memory");
	asm volatile("tensormap.replace.tile.global_stride.global.b1024.b64 [%0], 0, %1;"
		     :: "l"(a), "l"((u64)inner) : "memory");
}

// @helper lg_tmap_release
// This thread's patched maps (lg_tmap_patch) visible to TMA.
static __device__ __forceinline__ void lg_tmap_release()
{
	asm volatile("fence.proxy.tensormap::generic.release.gpu;" ::: "memory");
}

// @helper lg_tmap_acquire
// Before TMA through map tm (global) patched by another thread or launch.
static __device__ __forceinline__ void lg_tmap_acquire(const lg_tmap *tm)
{
	asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;"
		     :: "l"((u64)tm) : "memory");
}

// @helper lg_tma_prefetch
// Fetch tensor map tm's descriptor into the TMA unit's cache.
static __device__ __forceinline__ void lg_tma_prefetch(const lg_tmap *tm)
{
	asm volatile("prefetch.tensormap [%0];" :: "l"((u64)tm) : "memory");
}

// @helper lg_wg_desc
// The wgmma shared memory descriptor of a K-major tile of 128-byte rows
// with the 128-byte swizzle (as TMA writes it): start address >> 4 (bits
// 0-13), leading byte offset unused (1), stride byte offset 1024 >> 4 (the
// next 8-row group, bits 32-45), layout 1 = 128-byte swizzle (bits 62-63).
// Stepping 16 elements of K inside the row adds 32 bytes (2) to it.
static __device__ __forceinline__ u64 lg_wg_desc(const void *p)
{
	const u64 a = (u64)((lg_smem_addr(p) & 0x3FFFFu) >> 4);
	return a | (1ull << 16) | (64ull << 32) | (1ull << 62);
}

// @helper lg_wg_desc_mn
// The descriptor of an MN-major tile (wgmma's imm-trans 1) as TMA writes
// boxes of 64 elements (128 bytes, contiguous along M or N) x 64 rows of
// the reduction with the 128-byte swizzle, the boxes 8192 bytes apart:
// leading byte offset 8192 >> 4 (the next 64 elements of M or N, bits
// 16-29), stride byte offset 1024 >> 4 (the next 8 reduction rows),
// layout 1 = 128-byte swizzle. Stepping 16 of the reduction adds 16 rows,
// 2048 bytes (128).
static __device__ __forceinline__ u64 lg_wg_desc_mn(const void *p)
{
	const u64 a = (u64)((lg_smem_addr(p) & 0x3FFFFu) >> 4);
	return a | (512ull << 16) | (64ull << 32) | (1ull << 62);
}

// @helper lg_wg_fence
// Order register and shared memory accesses before the wgmma that follows.
static __device__ __forceinline__ void lg_wg_fence()
{
	asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

// @helper lg_wg_commit
// Close the group of wgmma operations issued since the last commit.
static __device__ __forceinline__ void lg_wg_commit()
{
	asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

// @helper lg_wg_wait
// Wait until at most n committed wgmma groups are pending.
#define lg_wg_wait(n) asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(n) : "memory")

// @helper lg_setmaxnreg_dec
// Lower this warpgroup's registers a thread to n (the producer's few).
#define lg_setmaxnreg_dec(n) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(n))

// @helper lg_setmaxnreg_inc
// Raise this warpgroup's registers a thread to n (the consumers' accumulators).
#define lg_setmaxnreg_inc(n) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(n))

// @helper lg_tma_load_2d_mc
// lg_tma_load_2d multicast: the box lands at dst's offset in the shared
// memory of every CTA of the cluster in `mask` (bit r: rank r), completing
// its bytes on the mbarrier at bar's offset in each of them.
static __device__ __forceinline__ void
lg_tma_load_2d_mc(void *dst, const lg_tmap *tm, u64 *bar, int c0, int c1, u16 mask)
{
	asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
		     ".multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;"
		     :: "r"(lg_smem_addr(dst)), "l"((u64)tm), "r"(lg_smem_addr(bar)),
		     "r"(c0), "r"(c1), "h"(mask) : "memory");
}

// @helper lg_mbar_arrive_cta
// Arrive on the mbarrier at bar's offset in CTA `rank` of the cluster: a
// consumer releasing a stage that a TMA multicast refills. CTA-scope release
// (the default, as CUTLASS's ClusterBarrier::arrive): what it orders is this
// CTA's finished reads of its own shared memory; a cluster-scope release
// waits for the thread's outstanding global loads too (prefetched scales),
// which made the FP8 GEMM 3x slower (H100, bench/fp8-gemm.md).
static __device__ __forceinline__ void lg_mbar_arrive_cta(u64 *bar, u32 rank)
{
	asm volatile("{\n\t.reg .b32 ra;\n\t"
		     "mapa.shared::cluster.u32 ra, %0, %1;\n\t"
		     "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}"
		     :: "r"(lg_smem_addr(bar)), "r"(rank) : "memory");
}

// @helper lg_fence_proxy_async
// Order this thread's generic-proxy writes to shared memory (st.shared)
// before later async-proxy reads of them (wgmma operands, TMA stores); a
// barrier then hands them to the threads that issue those.
static __device__ __forceinline__ void lg_fence_proxy_async()
{
	asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// @helper lg_bar_named
// Named barrier `id` (1..15; 0 is __syncthreads') over n threads (whole
// warps): a subset of the CTA meets without the others.
#define lg_bar_named(id, n) asm volatile("bar.sync %0, %1;" :: "n"(id), "n"(n) : "memory")

// @helper lg_tma_store_2d
// TMA store: shared src (the box of tensor map tm, in its swizzle) to the
// tensor at element coordinates (c0 inner, c1 outer), in this thread's
// bulk group; elements outside the tensor are not written.
static __device__ __forceinline__ void
lg_tma_store_2d(const lg_tmap *tm, const void *src, int c0, int c1)
{
	asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
		     :: "l"((u64)tm), "r"(lg_smem_addr(src)), "r"(c0), "r"(c1) : "memory");
}

// @helper lg_tma_add_2d
// lg_tma_store_2d adding instead: tensor += box, element by element (fp32:
// one rounding, as a load, an add and a store).
static __device__ __forceinline__ void
lg_tma_add_2d(const lg_tmap *tm, const void *src, int c0, int c1)
{
	asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group"
		     " [%0, {%2, %3}], [%1];"
		     :: "l"((u64)tm), "r"(lg_smem_addr(src)), "r"(c0), "r"(c1) : "memory");
}

// @helper lg_bulk_commit
// Close this thread's bulk group of TMA stores issued since the last commit.
static __device__ __forceinline__ void lg_bulk_commit()
{
	asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// @helper lg_bulk_wait_read
// Wait until at most n of this thread's bulk groups still read shared
// memory (their sources may be overwritten then).
#define lg_bulk_wait_read(n) asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(n) : "memory")

// @helper lg_bulk_wait
// Wait until at most n of this thread's bulk groups are pending (their
// writes done).
#define lg_bulk_wait(n) asm volatile("cp.async.bulk.wait_group %0;" :: "n"(n) : "memory")

// @helper lg_bar_id
// lg_bar_named with a run-time id (the same in every thread that meets).
static __device__ __forceinline__ void lg_bar_id(u32 id, u32 n)
{
	asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(n) : "memory");
}
