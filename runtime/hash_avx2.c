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
#define LG_HASH_NAME(x) x##_avx2
#include "hash_impl.h"
#else
typedef int lg_hash_avx2_unused; /* not x86-64: nothing here (ISO C: no empty file) */
#endif
