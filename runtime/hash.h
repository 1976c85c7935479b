/*
 * hash.h - XXH3-64 of cubin-sized buffers (the checksums of cache entries
 * and bundle cubins), with AVX2 when the CPU has it.
 *
 * xxhash.h (Debian's libxxhash-dev, inlined: XXH_INLINE_ALL) chooses its
 * vector code when it is compiled, from the compiler's target macros; the
 * build's baseline on x86-64 is SSE2, as in the shared libxxhash. So the
 * functions are compiled twice from one body (hash_impl.h): in hash.c for
 * the baseline and in hash_avx2.c with -mavx2 (CMakeLists.txt), and
 * lg_hash64_* call the AVX2 copy where __builtin_cpu_supports("avx2").
 * XXH3's value is the same on every path (test_hash.c checks it against
 * libxxhash's XXH3_64bits), so stored checksums stay valid. The header's
 * own run-time dispatch (xxh_x86dispatch.h) needs xxh_x86dispatch.c,
 * which Debian does not ship.
 */
#ifndef LG_RUNTIME_HASH_H
#define LG_RUNTIME_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A run of bytes, one part of a hashed whole. */
struct lg_span {
	const void *p;
	size_t n;
};

/* XXH3_64bits_withSeed(p, n, seed). */
uint64_t lg_hash64_seeded(const void *p, size_t n, uint64_t seed);
/* XXH3-64 (seed 0) of the parts one after another, as one buffer. */
uint64_t lg_hash64_parts(const struct lg_span *parts, size_t nparts);

/* Whether lg_hash64_* take the AVX2 copy in this process. */
bool lg_hash_avx2(void);

/* The two copies (hash_impl.h), for lg_hash64_* and the tests. The AVX2
 * one exists on x86-64 only (LG_HASH_HAVE_AVX2) and needs an AVX2 CPU. */
uint64_t lg_hash64_seeded_base(const void *p, size_t n, uint64_t seed);
uint64_t lg_hash64_parts_base(const struct lg_span *parts, size_t nparts);
#if defined(__x86_64__) && defined(__GNUC__)
#define LG_HASH_HAVE_AVX2 1
uint64_t lg_hash64_seeded_avx2(const void *p, size_t n, uint64_t seed);
uint64_t lg_hash64_parts_avx2(const struct lg_span *parts, size_t nparts);
#else
#define LG_HASH_HAVE_AVX2 0
#endif

#endif
