/*
 * test_hash.c - runtime/hash.c's XXH3-64 (the checksums of cache entries
 * and bundle cubins) equals libxxhash's XXH3_64bits on every path: the
 * baseline copy, the AVX2 copy (on an AVX2 CPU) and the dispatching
 * functions, for lengths around XXH3's size classes and stripes, unaligned
 * starts, seeds, and a buffer hashed in parts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h> /* not inlined: the shared libxxhash, the reference */

#include "hash.h"

#define BUF (200 * 1024 + 64)

static uint8_t *make_buffer(void)
{
	uint8_t *b = malloc(BUF);
	assert_non_null(b);
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (size_t i = 0; i < BUF; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		b[i] = (uint8_t)x;
	}
	return b;
}

/* Lengths around XXH3's classes (0-16, 17-128, 129-240, long), its 64-byte
 * stripes and 1024-byte blocks, and cubin sizes. */
static const size_t lens[] = {0, 1, 3, 4, 8, 9, 16, 17, 64, 128, 129, 240, 241, 255, 256, 1023, 1024,
			      1025, 4096, 20000, 65537, 100003, 200 * 1024};

/* Every path of a seeded hash of p[0, n) against libxxhash. */
static void check_seeded(const uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t want = XXH3_64bits_withSeed(p, n, seed);
	assert_true(lg_hash64_seeded(p, n, seed) == want);
	assert_true(lg_hash64_seeded_base(p, n, seed) == want);
#if LG_HASH_HAVE_AVX2
	if (lg_hash_avx2())
		assert_true(lg_hash64_seeded_avx2(p, n, seed) == want);
#endif
}

static void test_seeded_equals_libxxhash(void **state)
{
	(void)state;
	uint8_t *b = make_buffer();
	for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
		for (size_t off = 0; off < 3; off++) /* unaligned starts: a cache entry's cubin is at any offset */
			for (int s = 0; s < 2; s++)
				check_seeded(b + off, lens[i], s ? 0x0123456789abcdefull : 0);
	free(b);
}

/* A known value, independent of any library: XXH3-64 of no bytes. */
static void test_known_value(void **state)
{
	(void)state;
	assert_true(lg_hash64_seeded("", 0, 0) == 0x2D06800538D394C2ull);
	assert_true(lg_hash64_parts(NULL, 0) == 0x2D06800538D394C2ull);
	printf("hash: AVX2 copy %s\n", lg_hash_avx2() ? "in use" : "not in use (no AVX2 here)");
}

/* A buffer hashed in three parts, cut anywhere, is the hash of the whole. */
static void check_parts(const uint8_t *p, size_t n, size_t a, size_t b)
{
	const struct lg_span parts[] = {{p, a}, {p + a, b - a}, {p + b, n - b}};
	uint64_t want = XXH3_64bits(p, n);
	assert_true(lg_hash64_parts(parts, 3) == want);
	assert_true(lg_hash64_parts_base(parts, 3) == want);
#if LG_HASH_HAVE_AVX2
	if (lg_hash_avx2())
		assert_true(lg_hash64_parts_avx2(parts, 3) == want);
#endif
}

static void test_parts_equal_whole(void **state)
{
	(void)state;
	uint8_t *b = make_buffer();
	for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
		size_t n = lens[i];
		check_parts(b + 1, n, 0, 0);
		check_parts(b + 1, n, n / 3, n / 2);
		check_parts(b + 1, n, n < 40 ? n : 40, n < 90 ? n : 90); /* a cache entry: 40 + name + cubin */
		check_parts(b, n, n, n);
	}
	free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_known_value),
		cmocka_unit_test(test_seeded_equals_libxxhash),
		cmocka_unit_test(test_parts_equal_whole),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
