// async.cuh - asynchronous 16-byte global -> shared copies (cp.async, sm_80+):
// no registers held while they are in flight.

// @helper lg_cp16
// Copy 16 bytes from global src to shared dst; `bytes` 0 fills dst with zeros.
static __device__ __forceinline__ void lg_cp16(void *dst, const void *src, u32 bytes)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
		     :: "r"((u32)__cvta_generic_to_shared(dst)), "l"(src), "r"(bytes) : "memory");
}

// @helper lg_cp_commit
// Close the group of this thread's copies issued since the last commit.
static __device__ __forceinline__ void lg_cp_commit()
{
	asm volatile("cp.async.commit_group;" ::: "memory");
}

// @helper lg_cp_wait
// Wait until at most n committed groups are still in flight.
#define lg_cp_wait(n) asm volatile("cp.async.wait_group %0;" :: "n"(n) : "memory")

// @helper lg_cp4
// Copy 4 bytes from global src to shared dst; `bytes` 0 fills dst with zeros.
static __device__ __forceinline__ void lg_cp4(void *dst, const void *src, u32 bytes)
{
	asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;"
		     :: "r"((u32)__cvta_generic_to_shared(dst)), "l"(src), "r"(bytes) : "memory");
}

// @helper lg_cp4_if
// 4 bytes from global src to shared dst, zeros unless ok: by cp.async when
// async, else by a load and a shared store.
static __device__ __forceinline__ void lg_cp4_if(float *dst, const float *src, bool ok, bool async)
{
	const u32 to = (u32)__cvta_generic_to_shared(dst), n = ok ? 4u : 0u;
	if (async)
		asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;"
			     :: "r"(to), "l"(src), "r"(n) : "memory");
	else
		*dst = ok ? *src : 0.0f;
}

// @helper lg_cp_arrive
// Arrive on the mbarrier at bar (shared) once this thread's cp.async copies
// issued so far have landed: one of the barrier's `count` arrivals (.noinc).
static __device__ __forceinline__ void lg_cp_arrive(u64 *bar)
{
	asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];"
		     :: "r"((u32)__cvta_generic_to_shared(bar)) : "memory");
}
