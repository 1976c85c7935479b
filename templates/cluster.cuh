// cluster.cuh - thread-block clusters (sm_90+): the cluster barrier and
// distributed shared memory reads, by inline PTX.

// @helper lg_cluster_sync
// Barrier over every thread of the cluster; shared memory writes before it
// are visible to the cluster's CTAs after it.
static __device__ __forceinline__ void lg_cluster_sync()
{
	asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
		     "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// @helper lg_dsmem_ld_f64
// Read a double from the shared memory of CTA `rank` of this cluster, at the
// address that `p` has in this CTA's shared memory.
static __device__ __forceinline__ double lg_dsmem_ld_f64(const double *p, u32 rank)
{
	u32 local = (u32)__cvta_generic_to_shared(p), remote;
	double v;
	asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
	asm volatile("ld.shared::cluster.f64 %0, [%1];" : "=d"(v) : "r"(remote) : "memory");
	return v;
}
