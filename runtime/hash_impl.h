/*
 * hash_impl.h - the body of hash.h's two functions, included once for each
 * instruction set (hash.c: the baseline, hash_avx2.c: AVX2), which defines
 * LG_HASH_NAME(x) to name its copy and LG_HASH_LEAVE() to run before each
 * function returns. No include guard: one inclusion a file.
 */
#define XXH_INLINE_ALL
#include <xxhash.h>

uint64_t LG_HASH_NAME(lg_hash64_seeded)(const void *p, size_t n, uint64_t seed)
{
	uint64_t h = XXH3_64bits_withSeed(p, n, seed);
	LG_HASH_LEAVE();
	return h;
}

uint64_t LG_HASH_NAME(lg_hash64_parts)(const struct lg_span *parts, size_t nparts)
{
	XXH3_state_t st;
	XXH3_INITSTATE(&st);
	XXH3_64bits_reset(&st);
	for (size_t i = 0; i < nparts; i++)
		XXH3_64bits_update(&st, parts[i].p, parts[i].n);
	uint64_t h = XXH3_64bits_digest(&st);
	LG_HASH_LEAVE();
	return h;
}
