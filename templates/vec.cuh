// 16-byte and 8-byte global accesses. Loads of data read once bypass L1
// allocation; stores are plain (the data is written once, read by the next
// kernel from L2/HBM).
struct __attribute__((aligned(16))) lg_u32x4 { u32 x, y, z, w; };
static __device__ __forceinline__ lg_u32x4 lg_ld16(const void *p)
{
	lg_u32x4 v;
	asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
		     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
	return v;
}
static __device__ __forceinline__ lg_u32x4 lg_ld16_keep(const void *p)
{
	lg_u32x4 v;
	asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];"
		     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
	return v;
}
static __device__ __forceinline__ void lg_st16(void *p, lg_u32x4 v)
{
	asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};"
		     :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
// Streaming ("evict first") accesses, for data touched once; and loads that
// ask L2 to keep the line (evict last) for a second kernel that re-reads it.
static __device__ __forceinline__ lg_u32x4 lg_ld16_cs(const void *p)
{
	lg_u32x4 v;
	asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];"
		     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
	return v;
}
static __device__ __forceinline__ u64 lg_policy_evict_last(void)
{
	u64 p;
	asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
	return p;
}
static __device__ __forceinline__ lg_u32x4 lg_ld16_last(const void *p, u64 policy)
{
	lg_u32x4 v;
	asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
		     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(policy));
	return v;
}
static __device__ __forceinline__ void lg_st16_cs(void *p, lg_u32x4 v)
{
	asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};"
		     :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
static __device__ __forceinline__ void lg_st8_cs(void *p, u32 a, u32 b)
{
	asm volatile("st.global.cs.v2.u32 [%0], {%1,%2};" :: "l"(p), "r"(a), "r"(b) : "memory");
}
