// vec.cuh - 16-byte and 8-byte global accesses, with cache hints. Data is
// written once and read by the next kernel from L2/HBM.

// @helper lg_ld16
// 16-byte load of data read once: no L1 allocation.
static __device__ __forceinline__ lg_u32x4 lg_ld16(const void *p)
{
	lg_u32x4 v;
	asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
		     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
	return v;
}

// @helper lg_ld16_keep
// 16-byte load of data that is read again (the weights): it may stay in L1.
static __device__ __forceinline__ lg_u32x4 lg_ld16_keep(const void *p)
{
	lg_u32x4 v;
	asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];"
		     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
	return v;
}

// @helper lg_prefetch_l1
// Bring the line of p into L1, holding no register: data read soon, from L1.
static __device__ __forceinline__ void lg_prefetch_l1(const void *p)
{
	asm volatile("prefetch.global.L1 [%0];" :: "l"(p));
}

// @helper lg_st16
// 16-byte store.
static __device__ __forceinline__ void lg_st16(void *p, lg_u32x4 v)
{
	asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};"
		     :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

// @helper lg_ld16_cs
// 16-byte streaming load ("evict first"), for data touched for the last time.
static __device__ __forceinline__ lg_u32x4 lg_ld16_cs(const void *p)
{
	lg_u32x4 v;
	asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];"
		     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
	return v;
}

// @helper lg_policy_evict_last
// An L2 policy that keeps lines (evict last), for lg_ld16_last.
static __device__ __forceinline__ u64 lg_policy_evict_last()
{
	u64 p;
	asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
	return p;
}

// @helper lg_ld16_last
// 16-byte load that asks L2 to keep the line (policy from
// lg_policy_evict_last) for a second kernel that re-reads it.
static __device__ __forceinline__ lg_u32x4 lg_ld16_last(const void *p, u64 policy)
{
	lg_u32x4 v;
	asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
		     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(policy));
	return v;
}

// @helper lg_st16_cs
// 16-byte streaming store ("evict first").
static __device__ __forceinline__ void lg_st16_cs(void *p, lg_u32x4 v)
{
	asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};"
		     :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

// @helper lg_st8_cs
// 8-byte streaming store ("evict first") of a (low word) and b.
static __device__ __forceinline__ void lg_st8_cs(void *p, u32 a, u32 b)
{
	asm volatile("st.global.cs.v2.u32 [%0], {%1,%2};"
		     :: "l"(p), "r"(a), "r"(b) : "memory");
}

// @helper lg_ld16_any
// n (<= 16) bytes from src at any address into a 16-byte vector (byte i of
// src as byte i), zeros after them: the aligned 4-byte words that hold one
// of the n bytes (no other: none past the data), funnel-shifted into place.
static __device__ __forceinline__ lg_u32x4 lg_ld16_any(const u8 *src, u32 n)
{
	const u32 sh = (u32)((size_t)src & 3);
	const u32 *const p = (const u32 *)(src - sh);
	const u32 nw = n ? (sh + n + 3) >> 2 : 0u;
	u32 v[5], w[4];
#pragma unroll
	for (u32 i = 0; i < 5; i++)
		v[i] = i < nw ? __ldg(p + i) : 0u;
#pragma unroll
	for (u32 j = 0; j < 4; j++) {
		const u32 x = __funnelshift_r(v[j], v[j + 1], 8 * sh);
		const u32 left = n > 4 * j ? n - 4 * j : 0u;
		w[j] = left >= 4 ? x : x & ((1u << (8 * left)) - 1u);
	}
	return lg_u32x4{w[0], w[1], w[2], w[3]};
}

// @helper lg_st16_any
// The first n (<= 16) bytes of v (byte i at dst + i) at any address: when
// all 16 are stored, whole aligned 4-byte words (funnel shifts across the
// words of v) and bytes only at the two ends; else bytes.
static __device__ __forceinline__ void lg_st16_any(u8 *dst, lg_u32x4 v, int n)
{
	const u32 u[4] = {v.x, v.y, v.z, v.w};
	const int a = (int)((size_t)dst & 3);
	if (n >= 16 && a == 0) {
		u32 *const w = (u32 *)dst;
#pragma unroll
		for (int k = 0; k < 4; k++)
			w[k] = u[k];
	} else if (n >= 16) {
		u32 *const w = (u32 *)(dst - a); // word k holds bytes 4k - a .. 4k + 3 - a
#pragma unroll
		for (int k = 1; k < 4; k++)
			w[k] = __funnelshift_r(u[k - 1], u[k], 32 - 8 * a);
		for (int j = 0; j < 4 - a; j++)
			dst[j] = (u8)(u[0] >> (8 * j));
		for (int j = 16 - a; j < 16; j++)
			dst[j] = (u8)(u[3] >> (8 * (j - 12)));
	} else {
#pragma unroll
		for (int i = 0; i < 16; i++)
			if (i < n)
				dst[i] = (u8)(u[i >> 2] >> (8 * (i & 3)));
	}
}
