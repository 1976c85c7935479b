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
static __device__ __forceinline__ u64 lg_policy_evict_last(void)
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
