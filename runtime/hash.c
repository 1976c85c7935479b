/*
 * hash.c - hash.h's XXH3-64: the baseline copy, and the choice of the AVX2
 * copy (hash_avx2.c) on a CPU that has it.
 */
#include "hash.h"

#include <stdatomic.h>

#define LG_HASH_NAME(x) x##_base
#define LG_HASH_LEAVE() ((void)0)
#include "hash_impl.h"

bool lg_hash_avx2(void)
{
#if LG_HASH_HAVE_AVX2
	static atomic_int known; /* 0: not asked yet, 1: no, 2: yes */
	int v = atomic_load_explicit(&known, memory_order_relaxed);
	if (!v) {
		__builtin_cpu_init(); /* safe before libgcc's constructor too */
		v = __builtin_cpu_supports("avx2") ? 2 : 1;
		atomic_store_explicit(&known, v, memory_order_relaxed);
	}
	return v == 2;
#else
	return false;
#endif
}

uint64_t lg_hash64_seeded(const void *p, size_t n, uint64_t seed)
{
#if LG_HASH_HAVE_AVX2
	if (lg_hash_avx2())
		return lg_hash64_seeded_avx2(p, n, seed);
#endif
	return lg_hash64_seeded_base(p, n, seed);
}

uint64_t lg_hash64_parts(const struct lg_span *parts, size_t nparts)
{
#if LG_HASH_HAVE_AVX2
	if (lg_hash_avx2())
		return lg_hash64_parts_avx2(parts, nparts);
#endif
	return lg_hash64_parts_base(parts, nparts);
}
