// Asynchronous 16-byte global -> shared copies (cp.async, sm_80+): no
// registers held while in flight; `bytes` 0 fills the destination with zeros.
static __device__ __forceinline__ void lg_cp16(void *dst, const void *src, u32 bytes)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
		     :: "r"((u32)__cvta_generic_to_shared(dst)), "l"(src), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void lg_cp_commit(void)
{
	asm volatile("cp.async.commit_group;" ::: "memory");
}
// Wait until at most n committed groups are still in flight.
#define lg_cp_wait(n) asm volatile("cp.async.wait_group %0;" :: "n"(n) : "memory")
