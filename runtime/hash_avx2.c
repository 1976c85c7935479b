/*
 * hash_avx2.c - hash.h's functions with xxhash.h's AVX2 code: this file
 * alone is compiled with -mavx2 (CMakeLists.txt), and hash.c calls it only
 * on a CPU with AVX2.
 */
#include "hash.h"

#if LG_HASH_HAVE_AVX2
#ifndef __AVX2__
#error "hash_avx2.c must be compiled with -mavx2 (CMakeLists.txt sets it on x86-64)"
#endif
#include <immintrin.h>

#define LG_HASH_NAME(x) x##_avx2
/* GCC 12 leaves xxhash.h's seeded long-input loop (XXH3_hashLong_64b_withSeed)
 * without a vzeroupper: the upper halves of the ymm registers stay dirty
 * after it, and the SSE code compiled for the baseline then runs about 4x
 * slower on this machine (SSE2 XXH3 after an AVX2 one: 100 -> 410 us for
 * 1.7 MB). Cleared on the way out of every function here. */
#define LG_HASH_LEAVE() _mm256_zeroupper()
#include "hash_impl.h"
#else
typedef int lg_hash_avx2_unused; /* not x86-64: nothing here (ISO C: no empty file) */
#endif
