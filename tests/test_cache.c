/*
 * test_cache.c - the disk cache rules of runtime/cache.c: hits and misses,
 * keys, corrupt/truncated/foreign entries (and a FIFO in an entry's place),
 * payloads of sizes around the header's read, unwritable folders, concurrent
 * writers in several processes, LRU pruning, listing and clearing, a hit
 * (a mapped entry) held while its entry is replaced, pruned or cleared.
 * Each test works in its own folder under /tmp and removes it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "testutil.h"

static const char *const opts_a[] = {"--gpu-architecture=sm_90a", "--std=c++17", NULL};

static void key_of(const char *src, uint8_t key[LG_KEY_BYTES])
{
	lg_cache_key("sm_90a", src, strlen(src), opts_a, 2, 13, 0, key);
}

static uint8_t *payload(size_t n, unsigned seed)
{
	uint8_t *p = malloc(n);
	assert_non_null(p);
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 131u + seed * 7u + (i >> 8));
	return p;
}

static char *entry_file(lg_cache *c, const uint8_t key[LG_KEY_BYTES])
{
	char hex[2 * LG_KEY_BYTES + 1], name[2 * LG_KEY_BYTES + 8];
	lg_cache_key_hex(key, hex);
	snprintf(name, sizeof name, "%s.lgc", hex);
	return lg_test_path(lg_cache_path(c), name);
}

/* A hit: the cubin inside the entry's mapped file, the blob releasing it. */
static void get_hit(lg_cache *c, const uint8_t key[LG_KEY_BYTES], struct lg_blob *own, const void **data,
		    size_t *size)
{
	assert_true(lg_cache_get(c, key, own, data, size));
	assert_true(own->mapped);
	const uint8_t *base = own->base, *d = *data;
	assert_true(d > base && d + *size == base + own->len); /* the cubin ends the file */
}

static void assert_hit(lg_cache *c, const uint8_t key[LG_KEY_BYTES], const void *want, size_t n)
{
	struct lg_blob own;
	const void *data = NULL;
	size_t size = 0;
	get_hit(c, key, &own, &data, &size);
	assert_int_equal(size, n);
	assert_memory_equal(data, want, n);
	lg_blob_release(&own);
	assert_null(own.base);
}

static void assert_miss(lg_cache *c, const uint8_t key[LG_KEY_BYTES])
{
	struct lg_blob own = {(void *)1, 1, true};
	const void *data = (void *)1;
	size_t size = 1;
	assert_false(lg_cache_get(c, key, &own, &data, &size));
	assert_null(own.base);
	assert_null(data);
	assert_int_equal(size, 0);
}

static int count_tmp(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	if (!d)
		return 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		n += strncmp(e->d_name, ".tmp-", 5) == 0;
	closedir(d);
	return n;
}

static void set_mtime(const char *path, time_t t)
{
	struct timespec ts[2] = {{t, 0}, {t, 0}};
	assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
}

/* ------------------------------------------------------------------ tests */

static void test_miss_put_hit(void **state)
{
	(void)state;
	char *dir = lg_test_tmpdir("cache");
	char *sub = lg_test_path(dir, "a/b/c"); /* created on the first put */
	lg_cache *c = lg_cache_open(sub, 0);
	assert_non_null(c);
	assert_true(lg_cache_enabled(c));
	assert_string_equal(lg_cache_path(c), sub);
	uint8_t key[LG_KEY_BYTES];
	key_of("kernel one", key);
	assert_miss(c, key);
	uint8_t *p = payload(10000, 1);
	lg_cache_put(c, key, "lg_k1", "sm_90a", p, 10000);
	assert_hit(c, key, p, 10000);
	assert_hit(c, key, p, 10000);
	/* a second cache object on the same folder sees it */
	lg_cache *c2 = lg_cache_open(sub, 0);
	assert_hit(c2, key, p, 10000);
	/* empty payloads are entries too */
	uint8_t k2[LG_KEY_BYTES];
	key_of("empty", k2);
	lg_cache_put(c2, k2, "lg_empty", "sm_80", p, 0);
	struct lg_blob own;
	const void *d = NULL;
	size_t n = 1;
	get_hit(c2, k2, &own, &d, &n);
	assert_int_equal(n, 0);
	lg_blob_release(&own);
	assert_int_equal(count_tmp(sub), 0);
	lg_cache_close(c2);
	lg_cache_close(c);
	free(p);
	free(sub);
	lg_test_rm_rf(dir);
	free(dir);
}

/* A hit's cubin stays whole while it is held (rule 9): the entry replaced
 * by another put (a rename over it), pruned, cleared; the next get sees
 * the new entry. */
static void test_mapped_hit_outlives_entry(void **state)
{
	(void)state;
	char *dir = lg_test_tmpdir("cache");
	lg_cache *c = lg_cache_open(dir, 0);
	uint8_t key[LG_KEY_BYTES];
	key_of("held while replaced", key);
	uint8_t *p1 = payload(70000, 1), *p2 = payload(50000, 2);
	lg_cache_put(c, key, "lg_held", "sm_90a", p1, 70000);
	struct lg_blob own[3];
	const void *d[3];
	size_t n[3];
	get_hit(c, key, &own[0], &d[0], &n[0]);
	lg_cache_put(c, key, "lg_held", "sm_90a", p2, 50000); /* renamed over the held file */
	get_hit(c, key, &own[1], &d[1], &n[1]);
	assert_int_equal(n[1], 50000);
	assert_memory_equal(d[1], p2, 50000);
	assert_int_equal(lg_cache_prune(c, 1, NULL), LG_OK); /* everything unlinked */
	assert_miss(c, key);
	lg_cache_put(c, key, "lg_held", "sm_90a", p1, 70000);
	get_hit(c, key, &own[2], &d[2], &n[2]);
	size_t removed = 0;
	assert_int_equal(lg_cache_clear(c, &removed), LG_OK);
	assert_int_equal(removed, 1);
	assert_int_equal(n[0], 70000); /* each held cubin as it was got */
	assert_memory_equal(d[0], p1, 70000);
	assert_memory_equal(d[1], p2, 50000);
	assert_memory_equal(d[2], p1, 70000);
	for (int i = 0; i < 3; i++)
		lg_blob_release(&own[i]);
	lg_cache_close(c);
	free(p1);
	free(p2);
	lg_test_rm_rf(dir);
	free(dir);
}

static void test_key_changes(void **state)
{
	(void)state;
	const char *src = "extern \"C\" __global__ void k() {}";
	size_t len = strlen(src);
	uint8_t base[LG_KEY_BYTES], k[LG_KEY_BYTES];
	lg_cache_key("sm_90a", src, len, opts_a, 2, 13, 0, base);
	lg_cache_key("sm_90a", src, len, opts_a, 2, 13, 0, k);
	assert_memory_equal(base, k, LG_KEY_BYTES); /* deterministic */
	lg_cache_key("sm_80", src, len, opts_a, 2, 13, 0, k);
	assert_memory_not_equal(base, k, LG_KEY_BYTES);
	const char *const opts_b[] = {"--gpu-architecture=sm_90a", "--std=c++14", NULL};
	lg_cache_key("sm_90a", src, len, opts_b, 2, 13, 0, k);
	assert_memory_not_equal(base, k, LG_KEY_BYTES);
	lg_cache_key("sm_90a", src, len, opts_a, 1, 13, 0, k);
	assert_memory_not_equal(base, k, LG_KEY_BYTES);
	lg_cache_key("sm_90a", src, len, opts_a, 2, 12, 0, k);
	assert_memory_not_equal(base, k, LG_KEY_BYTES);
	lg_cache_key("sm_90a", src, len, opts_a, 2, 13, 1, k);
	assert_memory_not_equal(base, k, LG_KEY_BYTES);
	char *src2 = strdup(src);
	src2[len - 2] = ' ';
	lg_cache_key("sm_90a", src2, len, opts_a, 2, 13, 0, k);
	assert_memory_not_equal(base, k, LG_KEY_BYTES);
	lg_cache_key("sm_90a", src, len - 1, opts_a, 2, 13, 0, k);
	assert_memory_not_equal(base, k, LG_KEY_BYTES);
	free(src2);
	/* fields cannot alias: ("ab","c") differs from ("a","bc") */
	const char *const o1[] = {"ab", "c"}, *const o2[] = {"a", "bc"};
	uint8_t k1[LG_KEY_BYTES], k2[LG_KEY_BYTES];
	lg_cache_key("sm_90a", "x", 1, o1, 2, 13, 0, k1);
	lg_cache_key("sm_90a", "x", 1, o2, 2, 13, 0, k2);
	assert_memory_not_equal(k1, k2, LG_KEY_BYTES);
	lg_cache_key("sm_9", "0ax", 3, NULL, 0, 13, 0, k1);
	lg_cache_key("sm_90a", "x", 1, NULL, 0, 13, 0, k2);
	assert_memory_not_equal(k1, k2, LG_KEY_BYTES);
}

static void test_key_hex(void **state)
{
	(void)state;
	uint8_t key[LG_KEY_BYTES];
	for (int i = 0; i < LG_KEY_BYTES; i++)
		key[i] = (uint8_t)(i * 17);
	char hex[2 * LG_KEY_BYTES + 1];
	memset(hex, 'X', sizeof hex);
	lg_cache_key_hex(key, hex);
	assert_string_equal(hex, "00112233445566778899aabbccddeeff");
	key[0] = 0xA5;
	key[15] = 0x0c;
	lg_cache_key_hex(key, hex);
	assert_string_equal(hex, "a5112233445566778899aabbccddee0c");
}

/* One entry put in a fresh cache folder, and the bytes of its file: the
 * start of the tests that damage an entry. */
struct entry_fixture {
	char *dir;
	lg_cache *c;
	uint8_t key[LG_KEY_BYTES];
	uint8_t *payload;
	size_t size;  /* payload bytes */
	char *file;   /* the entry's file */
	char *bytes;  /* its contents, n bytes */
	size_t n;
};

static void entry_setup(struct entry_fixture *e, const char *entry, size_t size, unsigned seed)
{
	e->dir = lg_test_tmpdir("cache");
	e->c = lg_cache_open(e->dir, 0);
	assert_non_null(e->c);
	key_of(entry, e->key);
	e->payload = payload(size, seed);
	e->size = size;
	lg_cache_put(e->c, e->key, entry, "sm_90a", e->payload, size);
	e->file = entry_file(e->c, e->key);
	e->bytes = lg_test_read_file(e->file, &e->n);
	assert_non_null(e->bytes);
}

static void entry_teardown(struct entry_fixture *e)
{
	lg_cache_close(e->c);
	lg_test_rm_rf(e->dir);
	free(e->bytes);
	free(e->file);
	free(e->payload);
	free(e->dir);
}

static void test_corrupt(void **state)
{
	(void)state;
	struct entry_fixture e;
	entry_setup(&e, "lg_corrupt", 4096, 2);
	e.bytes[e.n - 100] ^= 0x10; /* one payload bit */
	lg_test_write_file(e.file, e.bytes, e.n);
	assert_miss(e.c, e.key);
	assert_int_equal(access(e.file, F_OK), -1); /* the bad file is gone */
	lg_cache_put(e.c, e.key, "lg_corrupt", "sm_90a", e.payload, e.size);
	assert_hit(e.c, e.key, e.payload, e.size);
	entry_teardown(&e);
}

/* Every header byte is covered: one changed anywhere (magic, version,
 * lengths, key, size, checksum, name, arch) makes the entry a miss, and a
 * listing calls it invalid (a changed name byte was a hit and "valid"). */
static void test_header_covered(void **state)
{
	(void)state;
	struct entry_fixture e;
	entry_setup(&e, "lg_header_covered_entry", 512, 7);
	const size_t hdr = e.n - e.size;
	assert_true(hdr > 52);
	assert_int_equal(hdr % 16, 0); /* the cubin 16-byte aligned in the file (format 3) */
	for (size_t i = 0; i < hdr; i++) {
		char *b = malloc(e.n);
		assert_non_null(b);
		memcpy(b, e.bytes, e.n);
		b[i] = b[i] == 'X' ? 'Y' : 'X';
		lg_test_write_file(e.file, b, e.n);
		struct lg_cache_entry *l = NULL;
		size_t n = 0;
		assert_int_equal(lg_cache_list(e.c, &l, &n), LG_OK);
		assert_int_equal(n, 1);
		if (l[0].valid)
			fail_msg("header byte %zu changed, the entry still lists valid", i);
		free(l);
		assert_miss(e.c, e.key);
		free(b);
	}
	lg_test_write_file(e.file, e.bytes, e.n);
	assert_hit(e.c, e.key, e.payload, e.size);
	entry_teardown(&e);
}

static void test_truncated(void **state)
{
	(void)state;
	struct entry_fixture e;
	entry_setup(&e, "lg_truncated", 3000, 3);
	const size_t n = e.n;
	const size_t cuts[] = {0, 1, 7, 8, 11, 12, 16, 31, 40, 47, 48, 49, 55, n - 3000 - 1,
			       n - 3000, n - 3000 + 1, n - 1};
	for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
		lg_test_write_file(e.file, e.bytes, cuts[i]);
		assert_miss(e.c, e.key);
	}
	/* trailing garbage is not an entry either */
	char *longer = calloc(1, n + 5);
	assert_non_null(longer);
	memcpy(longer, e.bytes, n);
	lg_test_write_file(e.file, longer, n + 5);
	assert_miss(e.c, e.key);
	/* the intact file still reads */
	lg_test_write_file(e.file, e.bytes, n);
	assert_hit(e.c, e.key, e.payload, e.size);
	free(longer);
	entry_teardown(&e);
}

/* A hit reads the header apart and the cubin into a buffer of its own:
 * payloads that end inside the first read (the longest header's bytes),
 * at its end and past it, each read whole and each a miss when cut by a
 * byte; a long entry name (the longest header) likewise. */
static void test_payload_sizes(void **state)
{
	(void)state;
	const size_t sizes[] = {1, 2, 100, 160, 161, 162, 200, 4096};
	const char *names[] = {"lg_s", "lg_a_rather_long_entry_name_that_makes_a_long_header_"
				       "and_leaves_little_of_the_first_read_for_the_cubin_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"};
	for (int k = 0; k < 2; k++) {
		for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
			struct entry_fixture e;
			entry_setup(&e, names[k], sizes[i], (unsigned)i);
			assert_hit(e.c, e.key, e.payload, e.size);
			lg_test_write_file(e.file, e.bytes, e.n - 1);
			assert_miss(e.c, e.key);
			assert_int_equal(access(e.file, F_OK), -1); /* the bad file is gone */
			entry_teardown(&e);
		}
	}
}

/* Another key's intact entry under this key's name is a miss. */
static void test_foreign(void **state)
{
	(void)state;
	struct entry_fixture e;
	entry_setup(&e, "lg_a", 2000, 4);
	uint8_t kb[LG_KEY_BYTES];
	key_of("lg_b", kb);
	uint8_t *pb = payload(2000, 5);
	lg_cache_put(e.c, kb, "lg_b", "sm_90a", pb, 2000);
	char *fb = entry_file(e.c, kb);
	lg_test_write_file(fb, e.bytes, e.n);
	assert_miss(e.c, kb);
	assert_hit(e.c, e.key, e.payload, e.size);
	lg_cache_put(e.c, kb, "lg_b", "sm_90a", pb, 2000);
	assert_hit(e.c, kb, pb, 2000);
	free(fb);
	free(pb);
	entry_teardown(&e);
}

/* A FIFO under an entry's name is a miss at once (no writer needed, none
 * waited for), left in place; a put replaces it. */
static void test_fifo_entry(void **state)
{
	(void)state;
	struct entry_fixture e;
	entry_setup(&e, "lg_fifo", 300, 8);
	assert_int_equal(unlink(e.file), 0);
	assert_int_equal(mkfifo(e.file, 0600), 0);
	assert_miss(e.c, e.key);
	struct stat sb;
	assert_int_equal(stat(e.file, &sb), 0);
	assert_true(S_ISFIFO(sb.st_mode));
	lg_cache_put(e.c, e.key, "lg_fifo", "sm_90a", e.payload, e.size);
	assert_hit(e.c, e.key, e.payload, e.size);
	entry_teardown(&e);
}

/* A folder at an entry's name: a miss; a put replaces an empty one, skips a
 * full one without turning the cache off; verify reports it; clear
 * removes it once empty. A FIFO at nvrtc.stamp is refused, not waited on. */
static void test_folder_at_entry(void **state)
{
	(void)state;
	struct entry_fixture e;
	entry_setup(&e, "lg_folder", 300, 9);
	assert_int_equal(unlink(e.file), 0);
	assert_int_equal(mkdir(e.file, 0755), 0);
	assert_miss(e.c, e.key);
	lg_cache_put(e.c, e.key, "lg_folder", "sm_90a", e.payload, e.size); /* empty: replaced */
	assert_hit(e.c, e.key, e.payload, e.size);
	assert_int_equal(unlink(e.file), 0);
	assert_int_equal(mkdir(e.file, 0755), 0);
	char *inner = lg_test_path(e.file, "x");
	lg_test_write_file(inner, "x", 1);
	lg_cache_put(e.c, e.key, "lg_folder", "sm_90a", e.payload, e.size); /* full: skipped */
	assert_miss(e.c, e.key);
	assert_true(lg_cache_enabled(e.c));
	uint8_t other[LG_KEY_BYTES];
	key_of("lg_other", other);
	lg_cache_put(e.c, other, "lg_other", "sm_90a", e.payload, e.size);
	assert_hit(e.c, other, e.payload, e.size); /* the cache still writes */
	struct lg_cache_entry *le;
	size_t cnt = 0;
	assert_int_equal(lg_cache_list(e.c, &le, &cnt), LG_OK);
	int problems = 0;
	for (size_t i = 0; i < cnt; i++)
		problems += !le[i].valid && strstr(le[i].problem, "not a regular file") != NULL;
	assert_int_equal(problems, 1);
	free(le);
	assert_int_equal(unlink(inner), 0);
	size_t removed = 0;
	assert_int_equal(lg_cache_clear(e.c, &removed), LG_OK);
	assert_int_equal(access(e.file, F_OK), -1);
	free(inner);
	char *stamp = lg_test_path(e.dir, "nvrtc.stamp");
	assert_int_equal(mkfifo(stamp, 0600), 0);
	int major = 0, minor = 0;
	assert_false(lg_cache_nvrtc_get(e.c, &major, &minor));
	free(stamp);
	entry_teardown(&e);
}

static void test_bad_magic_version(void **state)
{
	(void)state;
	struct entry_fixture e;
	entry_setup(&e, "lg_magic", 500, 6);
	const size_t at[] = {0, 6, 7 /* the NUL */, 8 /* version */, 11};
	for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
		e.bytes[at[i]] ^= 0x01;
		lg_test_write_file(e.file, e.bytes, e.n);
		assert_miss(e.c, e.key);
		e.bytes[at[i]] ^= 0x01;
	}
	lg_test_write_file(e.file, e.bytes, e.n);
	assert_hit(e.c, e.key, e.payload, e.size);
	entry_teardown(&e);
}

static void unwritable_case(const char *cache_dir, const char *readable_dir)
{
	lg_cache *c = lg_cache_open(cache_dir, 0);
	assert_non_null(c);
	uint8_t key[LG_KEY_BYTES];
	key_of("unwritable", key);
	uint8_t *p = payload(100, 7);
	lg_test_stderr_begin();
	assert_miss(c, key);
	lg_cache_put(c, key, "lg_u", "sm_90a", p, 100);
	lg_cache_put(c, key, "lg_u", "sm_90a", p, 100);
	uint8_t k2[LG_KEY_BYTES];
	key_of("unwritable 2", k2);
	lg_cache_put(c, k2, "lg_u2", "sm_90a", p, 100);
	assert_miss(c, key);
	char *err = lg_test_stderr_end();
	assert_int_equal(lg_test_count(err, "lingen: warning: "), 1);
	assert_int_equal(lg_test_count(err, "is not writable"), 1);
	assert_non_null(strstr(err, cache_dir));
	assert_non_null(strstr(err, "continuing without it"));
	free(err);
	assert_false(lg_cache_enabled(c));
	if (readable_dir)
		assert_int_equal(count_tmp(readable_dir), 0);
	/* a second cache object warns again, once */
	lg_cache *c2 = lg_cache_open(cache_dir, 0);
	lg_test_stderr_begin();
	lg_cache_put(c2, key, "lg_u", "sm_90a", p, 100);
	lg_cache_put(c2, key, "lg_u", "sm_90a", p, 100);
	err = lg_test_stderr_end();
	assert_int_equal(lg_test_count(err, "warning"), 1);
	free(err);
	lg_cache_close(c2);
	lg_cache_close(c);
	free(p);
}

static void test_unwritable_under_file(void **state)
{
	(void)state;
	char *dir = lg_test_tmpdir("cache");
	char *file = lg_test_path(dir, "file");
	lg_test_write_file(file, "x", 1);
	char *sub = lg_test_path(file, "sub");
	unwritable_case(sub, NULL);
	unwritable_case(file, NULL); /* a regular file where the folder should be */
	free(sub);
	free(file);
	lg_test_rm_rf(dir);
	free(dir);
}

static void test_unwritable_readonly_folder(void **state)
{
	(void)state;
	if (geteuid() == 0) {
		print_message("skipped: running as root, where chmod 0555 does not stop writes "
			      "(the unwritable case is covered by a path under a file)\n");
		skip();
	}
	char *dir = lg_test_tmpdir("cache");
	/* an entry written before the folder became read-only still reads */
	lg_cache *c = lg_cache_open(dir, 0);
	uint8_t key[LG_KEY_BYTES];
	key_of("before", key);
	uint8_t *p = payload(300, 8);
	lg_cache_put(c, key, "lg_before", "sm_90a", p, 300);
	lg_cache_close(c);
	assert_int_equal(chmod(dir, 0555), 0);
	unwritable_case(dir, dir);
	c = lg_cache_open(dir, 0);
	lg_test_stderr_begin();
	lg_cache_put(c, key, "lg_before", "sm_90a", p, 300);
	free(lg_test_stderr_end());
	assert_hit(c, key, p, 300);
	lg_cache_close(c);
	free(p);
	lg_test_rm_rf(dir);
	free(dir);
}

/* N processes put one key while reading it: every read is a miss or the
 * whole right payload, never a torn file. */
static void test_concurrent_processes(void **state)
{
	(void)state;
	enum { NPROC = 4, ROUNDS = 50, SIZE = 200000 };
	char *dir = lg_test_tmpdir("cache");
	uint8_t key[LG_KEY_BYTES];
	key_of("shared by everyone", key);
	uint8_t *p = payload(SIZE, 9);
	pid_t pids[NPROC];
	for (int i = 0; i < NPROC; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0) {
			lg_cache *c = lg_cache_open(dir, 0);
			int bad = !c;
			for (int r = 0; r < ROUNDS && !bad; r++) {
				struct lg_blob own;
				const void *d;
				size_t n;
				if (lg_cache_get(c, key, &own, &d, &n)) {
					bad |= n != SIZE || memcmp(d, p, SIZE) != 0;
					lg_blob_release(&own);
				}
				if ((r + i) % 2 == 0)
					lg_cache_put(c, key, "lg_shared", "sm_90a", p, SIZE);
				bad |= !lg_cache_enabled(c);
			}
			lg_cache_close(c);
			_exit(bad ? 1 : 0);
		}
	}
	for (int i = 0; i < NPROC; i++) {
		int status = 0;
		assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
	lg_cache *c = lg_cache_open(dir, 0);
	assert_hit(c, key, p, SIZE);
	assert_int_equal(count_tmp(dir), 0);
	struct lg_cache_entry *e;
	size_t n;
	assert_int_equal(lg_cache_list(c, &e, &n), LG_OK);
	assert_int_equal(n, 1);
	assert_true(e[0].valid);
	free(e);
	lg_cache_close(c);
	free(p);
	lg_test_rm_rf(dir);
	free(dir);
}

static void test_lru(void **state)
{
	(void)state;
	enum { N = 5, SIZE = 1000 };
	char *dir = lg_test_tmpdir("cache");
	lg_cache *c = lg_cache_open(dir, 1u << 20);
	uint8_t keys[N][LG_KEY_BYTES];
	uint8_t *p = payload(SIZE, 10);
	char src[32];
	for (int i = 0; i < N; i++) {
		snprintf(src, sizeof src, "lru %d", i);
		key_of(src, keys[i]);
		lg_cache_put(c, keys[i], src, "sm_90a", p, SIZE);
		char *f = entry_file(c, keys[i]);
		set_mtime(f, 1000000 + 1000 * (N - i)); /* entry N-1 oldest, 0 newest */
		free(f);
	}
	struct lg_cache_entry *e;
	size_t n;
	assert_int_equal(lg_cache_list(c, &e, &n), LG_OK);
	assert_int_equal(n, N);
	uint64_t one = e[0].size;
	for (size_t i = 0; i < n; i++) {
		char want[32];
		snprintf(want, sizeof want, "lru %d", (int)(N - 1 - i));
		assert_string_equal(e[i].entry, want); /* oldest first */
	}
	free(e);
	/* explicit prune to three entries removes the two oldest */
	size_t removed = 99;
	assert_int_equal(lg_cache_prune(c, 3 * one, &removed), LG_OK);
	assert_int_equal(removed, 2);
	assert_miss(c, keys[4]);
	assert_miss(c, keys[3]);
	for (int i = 0; i < 3; i++)
		assert_hit(c, keys[i], p, SIZE);
	lg_cache_close(c);

	/* a put past the bound prunes the least recently used; a hit counts as use */
	c = lg_cache_open(dir, 3 * one + one / 2);
	for (int i = 0; i < 3; i++) {
		char *f = entry_file(c, keys[i]);
		set_mtime(f, 1000000 + 1000 * (3 - i)); /* 2 oldest, then 1, then 0 */
		free(f);
	}
	assert_hit(c, keys[2], p, SIZE); /* 2 becomes the most recent */
	lg_cache_put(c, keys[3], "lru 3", "sm_90a", p, SIZE);
	assert_miss(c, keys[1]); /* the least recently used went */
	assert_hit(c, keys[0], p, SIZE);
	assert_hit(c, keys[2], p, SIZE);
	assert_hit(c, keys[3], p, SIZE);
	/* a hit writes the time of use only when it is over an hour old: one
	 * write an hour, not one a hit */
	char *f = entry_file(c, keys[3]);
	time_t now = time(NULL);
	struct stat sb;
	set_mtime(f, now - 60);
	assert_hit(c, keys[3], p, SIZE);
	assert_int_equal(stat(f, &sb), 0);
	assert_int_equal(sb.st_mtime, now - 60);
	set_mtime(f, now - 2 * 3600);
	assert_hit(c, keys[3], p, SIZE);
	assert_int_equal(stat(f, &sb), 0);
	assert_true(sb.st_mtime >= now);
	free(f);
	lg_cache_close(c);
	free(p);
	lg_test_rm_rf(dir);
	free(dir);
}

static void test_off(void **state)
{
	(void)state;
	lg_cache *c = lg_cache_open("off", 0);
	assert_non_null(c);
	assert_false(lg_cache_enabled(c));
	assert_string_equal(lg_cache_path(c), "off");
	uint8_t key[LG_KEY_BYTES];
	key_of("off", key);
	lg_cache_put(c, key, "lg_off", "sm_90a", "abc", 3);
	assert_miss(c, key);
	struct lg_cache_entry *e = (void *)1;
	size_t n = 9;
	assert_int_equal(lg_cache_list(c, &e, &n), LG_OK);
	assert_int_equal(n, 0);
	assert_int_equal(lg_cache_clear(c, NULL), LG_OK);
	lg_cache_close(c);
	assert_int_equal(access("off", F_OK), -1); /* no folder named "off" appeared */
}

static void test_list_and_clear(void **state)
{
	(void)state;
	char *dir = lg_test_tmpdir("cache");
	lg_cache *c = lg_cache_open(dir, 0);
	uint8_t k[3][LG_KEY_BYTES];
	uint8_t *p = payload(702, 11); /* entries of 700, 701, 702 bytes */
	const char *names[3] = {"lg_zero", "lg_one", "lg_two"};
	for (int i = 0; i < 3; i++) {
		key_of(names[i], k[i]);
		lg_cache_put(c, k[i], names[i], i == 1 ? "sm_80" : "sm_90a", p, 700 + (size_t)i);
		char *f = entry_file(c, k[i]);
		set_mtime(f, 2000000 + i);
		free(f);
	}
	/* corrupt entry 1's checksum field */
	char *f1 = entry_file(c, k[1]);
	size_t n;
	char *b = lg_test_read_file(f1, &n);
	b[40] ^= 1;
	lg_test_write_file(f1, b, n);
	set_mtime(f1, 2000001);
	free(b);
	/* a stray file that is not an entry, and a fresh and a stale temp file */
	char *junk = lg_test_path(dir, "README"), *tmp_new = lg_test_path(dir, ".tmp-1-2-3.lgc");
	char *tmp_old = lg_test_path(dir, ".tmp-4-5-6.lgc");
	lg_test_write_file(junk, "hi", 2);
	lg_test_write_file(tmp_new, "x", 1);
	lg_test_write_file(tmp_old, "x", 1);
	set_mtime(tmp_old, 1000);
	/* a user's files that look a little like the cache's: never touched */
	char *notes = lg_test_path(dir, "my-notes.lgc"), *utmp = lg_test_path(dir, ".tmp-user-file");
	lg_test_write_file(notes, "mine", 4);
	lg_test_write_file(utmp, "mine", 4);
	set_mtime(notes, 1000);
	set_mtime(utmp, 1000);

	struct lg_cache_entry *e;
	size_t cnt;
	assert_int_equal(lg_cache_list(c, &e, &cnt), LG_OK);
	assert_int_equal(cnt, 3);
	assert_string_equal(e[0].entry, "lg_zero");
	assert_true(e[0].valid);
	assert_string_equal(e[0].arch, "sm_90a");
	assert_int_equal(e[0].mtime, 2000000);
	assert_string_equal(e[1].entry, "lg_one");
	assert_string_equal(e[1].arch, "sm_80");
	assert_false(e[1].valid);
	assert_non_null(strstr(e[1].problem, "checksum"));
	assert_true(e[2].valid);
	assert_string_equal(e[2].entry, "lg_two");
	char hex[2 * LG_KEY_BYTES + 1], want[40];
	lg_cache_key_hex(k[2], hex);
	snprintf(want, sizeof want, "%s.lgc", hex);
	assert_string_equal(e[2].file, want);
	assert_true(e[2].size > 702);
	free(e);
	/* listing does not repair or remove anything */
	assert_int_equal(access(f1, F_OK), 0);

	size_t removed = 0;
	assert_int_equal(lg_cache_prune(c, 0, &removed), LG_OK); /* prune everything it owns */
	assert_int_equal(removed, 3);
	assert_int_equal(access(notes, F_OK), 0);
	for (int i = 0; i < 3; i++) { /* again, for clear */
		lg_cache_put(c, k[i], names[i], "sm_90a", p, 700);
	}
	assert_int_equal(lg_cache_clear(c, &removed), LG_OK);
	assert_int_equal(removed, 3);
	assert_int_equal(access(notes, F_OK), 0); /* not ours: kept */
	assert_int_equal(access(utmp, F_OK), 0);
	free(notes);
	free(utmp);
	assert_int_equal(lg_cache_list(c, &e, &cnt), LG_OK);
	assert_int_equal(cnt, 0);
	free(e);
	assert_int_equal(access(junk, F_OK), 0);    /* not ours: kept */
	assert_int_equal(access(tmp_new, F_OK), 0); /* a writer may be at work */
	assert_int_equal(access(tmp_old, F_OK), -1);
	for (int i = 0; i < 3; i++)
		assert_miss(c, k[i]);
	lg_cache_close(c);
	/* a missing folder lists as empty */
	char *none = lg_test_path(dir, "nonexistent");
	c = lg_cache_open(none, 0);
	assert_int_equal(lg_cache_list(c, &e, &cnt), LG_OK);
	assert_int_equal(cnt, 0);
	assert_int_equal(access(none, F_OK), -1);
	lg_cache_close(c);
	free(none);
	free(junk);
	free(tmp_new);
	free(tmp_old);
	free(f1);
	free(p);
	lg_test_rm_rf(dir);
	free(dir);
}

static void restore_env(const char *name, char *saved)
{
	if (saved) {
		setenv(name, saved, 1);
		free(saved);
	} else {
		unsetenv(name);
	}
}

static char *save_env(const char *name)
{
	const char *v = getenv(name);
	return v ? strdup(v) : NULL;
}

static void test_dir_resolve(void **state)
{
	(void)state;
	char *s_dir = save_env("LINGEN_CACHE_DIR"), *s_xdg = save_env("XDG_CACHE_HOME");
	char *s_home = save_env("HOME");
	char *r;

	setenv("LINGEN_CACHE_DIR", "/x/env", 1);
	setenv("XDG_CACHE_HOME", "/x/xdg", 1);
	setenv("HOME", "/x/home", 1);
	r = lg_cache_dir_resolve("/x/given");
	assert_string_equal(r, "/x/given");
	free(r);
	r = lg_cache_dir_resolve(NULL);
	assert_string_equal(r, "/x/env");
	free(r);
	setenv("LINGEN_CACHE_DIR", "off", 1);
	r = lg_cache_dir_resolve(NULL);
	assert_string_equal(r, "off");
	free(r);
	setenv("LINGEN_CACHE_DIR", "", 1); /* empty is unset */
	r = lg_cache_dir_resolve(NULL);
	assert_string_equal(r, "/x/xdg/lingen");
	free(r);
	unsetenv("LINGEN_CACHE_DIR");
	unsetenv("XDG_CACHE_HOME");
	r = lg_cache_dir_resolve(NULL);
	assert_string_equal(r, "/x/home/.cache/lingen");
	free(r);
	r = lg_cache_dir_resolve("off");
	assert_string_equal(r, "off");
	free(r);
	assert_int_equal(access("/x", F_OK), -1); /* resolving creates nothing */

	restore_env("LINGEN_CACHE_DIR", s_dir);
	restore_env("XDG_CACHE_HOME", s_xdg);
	restore_env("HOME", s_home);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_miss_put_hit),
		cmocka_unit_test(test_mapped_hit_outlives_entry),
		cmocka_unit_test(test_key_changes),
		cmocka_unit_test(test_key_hex),
		cmocka_unit_test(test_corrupt),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_payload_sizes),
		cmocka_unit_test(test_header_covered),
		cmocka_unit_test(test_foreign),
		cmocka_unit_test(test_fifo_entry),
		cmocka_unit_test(test_folder_at_entry),
		cmocka_unit_test(test_bad_magic_version),
		cmocka_unit_test(test_unwritable_under_file),
		cmocka_unit_test(test_unwritable_readonly_folder),
		cmocka_unit_test(test_concurrent_processes),
		cmocka_unit_test(test_lru),
		cmocka_unit_test(test_off),
		cmocka_unit_test(test_list_and_clear),
		cmocka_unit_test(test_dir_resolve),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
