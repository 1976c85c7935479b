/*
 * cache.c - the content-addressed, fail-open disk cache of cubins.
 *
 * Rules:
 *  1. Key. XXH3-128 over a canonical serialisation of everything that shapes
 *     a cubin: the cache format, the arch, every NVRTC option, the NVRTC
 *     version (major, minor) and the source. The runtime passes, for the
 *     source, its identity: the generator's build-time hash (cmake/genid.cmake,
 *     over gen/ and templates/) and the resolved canonical spec, which give
 *     the source deterministically, so a hit needs no generation. Each field
 *     is preceded by its length (u64, little-endian), so no two field lists
 *     hash the same bytes. The key is stored and printed in XXH128's
 *     canonical byte order.
 *  2. One file per entry, named <32 lower-case hex digits of the key>.lgc,
 *     little-endian, written byte by byte (no struct dumps):
 *       0  magic "LGCUBIN\0"          8 bytes
 *       8  format version             u32 (LG_CACHE_FORMAT)
 *      12  header length              u32 (offset of the payload)
 *      16  key                        16 bytes
 *      32  payload size               u64
 *      40  checksum                   u64: XXH3-64 of every other byte of
 *                                         the file (header and payload)
 *      48  entry name                 u8 length (<= 159) + bytes
 *       .  arch                       u8 length (<= 15) + bytes
 *       .  zero bytes up to a multiple of 16 (the header length)
 *       .  payload (the cubin), 16-byte aligned in the file
 *  3. Writes go to "<dir>/.tmp-<pid>-<n>-<random>.lgc" (O_EXCL), are
 *     fsynced, then renamed over the final name, and the folder is fsynced
 *     (best effort). Two writers of one key both succeed, the last rename
 *     wins, and a reader always sees one whole file. Readers take no lock.
 *  4. A read checks the magic, the version, that the key inside is the key
 *     asked for (a "foreign" file sits under another key's name), that the
 *     sizes agree with the file size (a truncated file) and the checksum,
 *     which covers every header field (a changed name or arch fails it).
 *     Any problem is a miss, logged under LINGEN_LOG, and the bad file is
 *     unlinked (best effort, only if it is still the file that was read);
 *     the next put writes a good one. Files over 256 MiB are not read.
 *  5. A hit refreshes the file's mtime; mtime is the "last use" of an entry.
 *     After a put (a compile just happened, so a folder scan is cheap by
 *     comparison), if the *.lgc files of the folder exceed the bound
 *     (LINGEN_CACHE_MAX_MB, default 1 GiB), the least recently used are
 *     removed until they fit in 90% of it.
 *  6. The cache never fails a compile. A folder that cannot be created or
 *     written gives one warning per cache object and disables further writes;
 *     reads continue while the folder is readable. "off" disables it all.
 *  7. Only names of the cache's own forms are touched: "<key hex>.lgc"
 *     entries, ".tmp-<pid>-<n>-<hex>.lgc" temp files and nvrtc.stamp; other
 *     files in a shared folder are never listed, pruned or removed. Temp
 *     files are skipped by listings and pruning; lg_cache_clear removes
 *     entries and temp files older than a minute (left by a crashed writer).
 *  8. Anything but a regular file at an entry's name (a folder, a FIFO) is
 *     a miss that is never opened for reading in a blocking way; a put
 *     replaces an empty folder there, else skips that one entry (the cache
 *     stays on); verify reports it; clear removes it when it is empty.
 *  9. A read maps the entry's file whole (read-only, private) and checks it
 *     in place (rule 4: the header, the header's sizes against the file's
 *     size, then the checksum); a hit hands the cubin over inside the
 *     mapping (lg_cache_get's blob, unmapped by its holder when the kernel
 *     goes). That is safe because an entry file is never changed in place:
 *     puts write a temp file and rename it over the name (rule 3), pruning,
 *     clear and bad entries unlink it (rule 4, 5), and a mapping keeps the
 *     file it mapped after a rename over it or an unlink. A file cut
 *     shorter in place while mapped would fault (SIGBUS) on its lost pages:
 *     nothing in lingen does that, and entries must not be edited in place
 *     by hand (remove them: `lingen cache clear`, or rm). The cubin starts
 *     16-byte aligned in the file (format 3; the header padded), so the
 *     driver gets the alignment a malloc'd buffer had: it documents none
 *     for an image (cuLibraryLoadData), none is relied on untested.
 */
#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <pwd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "env.h"
#include "error.h"
#include "file.h"
#include "hash.h"
#include "log.h"

#define CACHE_MAGIC "LGCUBIN"          /* 7 characters + the NUL: 8 bytes */
#define CACHE_FIXED 48                 /* header bytes before the name */
#define CACHE_MAX_FILE (256u << 20)    /* larger files are not read */
#define CACHE_MAX_NAME 159
#define CACHE_MAX_ARCH 15
#define CACHE_ALIGN 16 /* the payload's offset: a multiple of it (rule 2) */
#define CACHE_MAX_HEADER ((CACHE_FIXED + 2 + CACHE_MAX_NAME + CACHE_MAX_ARCH + CACHE_ALIGN - 1) / CACHE_ALIGN * CACHE_ALIGN)

/* The header's length for a name and an arch of these lengths: zero bytes
 * after them up to a multiple of CACHE_ALIGN, so that a mapped entry's
 * cubin starts as aligned as a malloc'd one (the driver gets a pointer
 * into the mapping). */
static size_t header_len(size_t nlen, size_t alen)
{
	size_t n = CACHE_FIXED + 2 + nlen + alen;
	return (n + CACHE_ALIGN - 1) / CACHE_ALIGN * CACHE_ALIGN;
}
#define CACHE_TMP_PREFIX ".tmp-"
#define CACHE_TMP_STALE_S 60

struct lg_cache {
	char *dir;            /* the folder, or "off" */
	bool off;             /* disabled by configuration */
	uint64_t max_bytes;   /* LRU bound */
	pthread_mutex_t lock; /* guards the fields below */
	bool write_failed;    /* warned once; no more writes */
};

static atomic_uint tmp_counter;

#define TOUCH_SECONDS 3600 /* a hit refreshes an mtime older than this */

/* ------------------------------------------------------------ encoding */

static void put_u32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t get_u64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* ----------------------------------------------------------------- keys */

static void hash_field(XXH3_state_t *st, const void *data, size_t len)
{
	uint8_t n[8];
	put_u64(n, (uint64_t)len);
	XXH3_128bits_update(st, n, sizeof n);
	if (len)
		XXH3_128bits_update(st, data, len);
}

static void hash_u32(XXH3_state_t *st, uint32_t v)
{
	uint8_t b[4];
	put_u32(b, v);
	hash_field(st, b, sizeof b);
}

void lg_cache_key(const char *arch, const char *src, size_t src_len, const char *const *opts,
		  int nopts, int nvrtc_major, int nvrtc_minor, uint8_t key[LG_KEY_BYTES])
{
	XXH3_state_t st;
	XXH3_INITSTATE(&st);
	XXH3_128bits_reset(&st);
	hash_field(&st, "lingen-cubin", 12);
	hash_u32(&st, LG_CACHE_FORMAT);
	hash_field(&st, arch ? arch : "", arch ? strlen(arch) : 0);
	hash_u32(&st, (uint32_t)(nopts > 0 ? nopts : 0));
	for (int i = 0; i < nopts; i++)
		hash_field(&st, opts[i] ? opts[i] : "", opts[i] ? strlen(opts[i]) : 0);
	hash_u32(&st, (uint32_t)nvrtc_major);
	hash_u32(&st, (uint32_t)nvrtc_minor);
	hash_field(&st, src ? src : "", src ? src_len : 0);
	XXH128_canonical_t c;
	XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&st));
	memcpy(key, c.digest, LG_KEY_BYTES);
}

void lg_cache_key_hex(const uint8_t key[LG_KEY_BYTES], char *out)
{
	static const char hex[] = "0123456789abcdef";
	for (int i = 0; i < LG_KEY_BYTES; i++) {
		out[2 * i] = hex[key[i] >> 4];
		out[2 * i + 1] = hex[key[i] & 15];
	}
	out[2 * LG_KEY_BYTES] = '\0';
}

/* The key of an entry file name "<hex>.lgc"; false if it is not one. */
static bool key_from_name(const char *name, uint8_t key[LG_KEY_BYTES])
{
	if (strlen(name) != 2 * LG_KEY_BYTES + 4 || strcmp(name + 2 * LG_KEY_BYTES, ".lgc") != 0)
		return false;
	for (int i = 0; i < 2 * LG_KEY_BYTES; i++) {
		char ch = name[i];
		int v = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
		if (v < 0)
			return false;
		if (i % 2 == 0)
			key[i / 2] = (uint8_t)(v << 4);
		else
			key[i / 2] |= (uint8_t)v;
	}
	return true;
}

/* Only names of the cache's own forms are ever listed, pruned or removed:
 * "<32 hex digits>.lgc" entries and ".tmp-<pid>-<n>-<8 hex>.lgc" temp
 * files (open_tmp), so other files in a shared folder are never touched. */
static bool is_entry_name(const char *name)
{
	uint8_t key[LG_KEY_BYTES];
	return key_from_name(name, key);
}

static bool is_tmp_name(const char *name)
{
	size_t p = strlen(CACHE_TMP_PREFIX), n = strlen(name);
	if (strncmp(name, CACHE_TMP_PREFIX, p) != 0 || n < p + 4 || strcmp(name + n - 4, ".lgc") != 0)
		return false;
	int dashes = 0;
	for (size_t i = p; i < n - 4; i++) {
		char ch = name[i];
		if (ch == '-')
			dashes++;
		else if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f')))
			return false;
	}
	return dashes == 2;
}

/* ------------------------------------------------------------ folders */

char *lg_cache_dir_resolve(const char *dir)
{
	if (dir && *dir)
		return strdup(dir);
	const char *env = lg_env_get(LG_ENV_CACHE_DIR);
	if (env)
		return strdup(env);
	char *out = NULL;
	const char *xdg = getenv("XDG_CACHE_HOME");
	if (xdg && xdg[0] == '/') {
		if (asprintf(&out, "%s/lingen", xdg) < 0)
			return NULL;
		return out;
	}
	const char *home = getenv("HOME");
	if (!home || !*home) {
		struct passwd *pw = getpwuid(getuid());
		home = pw ? pw->pw_dir : NULL;
	}
	if (!home || !*home)
		return strdup("off");
	if (asprintf(&out, "%s/.cache/lingen", home) < 0)
		return NULL;
	return out;
}

int lg_mkdir_p(const char *path)
{
	if (!path || !*path) {
		errno = ENOENT;
		return -1;
	}
	char *p = strdup(path);
	if (!p)
		return -1;
	int rc = 0;
	for (char *s = p + 1;; s++) {
		if (*s != '/' && *s != '\0')
			continue;
		char c = *s;
		*s = '\0';
		if (mkdir(p, 0755) != 0 && errno != EEXIST) {
			rc = -1;
			break;
		}
		*s = c;
		if (c == '\0')
			break;
	}
	int e = errno;
	struct stat st;
	if (rc == 0 && (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))) {
		e = rc == 0 && errno != ENOENT ? ENOTDIR : errno;
		rc = -1;
	}
	free(p);
	errno = e;
	return rc;
}

/* ---------------------------------------------------------- open/close */

static uint64_t default_max_bytes(void)
{
	const char *v = lg_env_get(LG_ENV_CACHE_MAX_MB);
	if (v) {
		char *end;
		unsigned long long mb = strtoull(v, &end, 10);
		if (*end == '\0' && mb > 0 && mb < (1ull << 40))
			return (uint64_t)mb << 20;
		lg_warn("LINGEN_CACHE_MAX_MB=%s is not a positive number of MiB; using 1024", v);
	}
	return 1024ull << 20;
}

lg_cache *lg_cache_open(const char *dir, uint64_t max_bytes)
{
	lg_cache *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->dir = lg_cache_dir_resolve(dir);
	if (!c->dir) {
		free(c);
		return NULL;
	}
	c->off = strcmp(c->dir, "off") == 0;
	c->max_bytes = max_bytes ? max_bytes : default_max_bytes();
	pthread_mutex_init(&c->lock, NULL);
	return c;
}

void lg_cache_close(lg_cache *c)
{
	if (!c)
		return;
	pthread_mutex_destroy(&c->lock);
	free(c->dir);
	free(c);
}

bool lg_cache_enabled(const lg_cache *c)
{
	if (!c || c->off)
		return false;
	pthread_mutex_lock((pthread_mutex_t *)&c->lock);
	bool ok = !c->write_failed;
	pthread_mutex_unlock((pthread_mutex_t *)&c->lock);
	return ok;
}

const char *lg_cache_path(const lg_cache *c) { return c ? c->dir : "off"; }

static char *entry_path(const lg_cache *c, const uint8_t key[LG_KEY_BYTES])
{
	char hex[2 * LG_KEY_BYTES + 1];
	lg_cache_key_hex(key, hex);
	char *p = NULL;
	if (asprintf(&p, "%s/%s.lgc", c->dir, hex) < 0)
		return NULL;
	return p;
}

/* ------------------------------------------------------------- reading */

struct parsed {
	const uint8_t *payload;
	uint64_t size;
	char entry[CACHE_MAX_NAME + 1];
	char arch[CACHE_MAX_ARCH + 1];
};

/* The checksum of an entry: XXH3-64 of its bytes but the checksum's own
 * (header before it, header after it, payload). */
static uint64_t entry_sum(const uint8_t *hdr, size_t hlen, const void *payload, size_t size)
{
	const struct lg_span parts[] = {{hdr, 40}, {hdr + CACHE_FIXED, hlen - CACHE_FIXED}, {payload, size}};
	return lg_hash64_parts(parts, sizeof parts / sizeof parts[0]); /* hash.h: AVX2 where there is */
}

/* Check an entry file of n bytes against rule 4: b holds its first
 * min(n, CACHE_MAX_HEADER) bytes at least, payload (NULL: b + the header
 * length) the bytes after its header. NULL if sound, else why not. */
static const char *parse(const uint8_t *b, size_t n, const uint8_t *payload, const uint8_t key[LG_KEY_BYTES],
			 struct parsed *out)
{
	snprintf(out->entry, sizeof out->entry, "?");
	snprintf(out->arch, sizeof out->arch, "?");
	if (n < CACHE_FIXED + 2)
		return n >= 8 && memcmp(b, CACHE_MAGIC, 8) != 0 ? "bad magic" : "truncated header";
	if (memcmp(b, CACHE_MAGIC, 8) != 0)
		return "bad magic";
	if (get_u32(b + 8) != LG_CACHE_FORMAT)
		return "other format version";
	uint32_t hdr = get_u32(b + 12);
	if (hdr < CACHE_FIXED + 2 || hdr > n)
		return "truncated header";
	size_t nlen = b[CACHE_FIXED];
	if (nlen > CACHE_MAX_NAME || CACHE_FIXED + 1 + nlen + 1 > hdr)
		return "bad header";
	size_t alen = b[CACHE_FIXED + 1 + nlen];
	if (alen > CACHE_MAX_ARCH || header_len(nlen, alen) != hdr)
		return "bad header";
	for (size_t i = CACHE_FIXED + 2 + nlen + alen; i < hdr; i++)
		if (b[i])
			return "bad header";
	memcpy(out->entry, b + CACHE_FIXED + 1, nlen);
	out->entry[nlen] = '\0';
	memcpy(out->arch, b + CACHE_FIXED + 2 + nlen, alen);
	out->arch[alen] = '\0';
	if (memcmp(b + 16, key, LG_KEY_BYTES) != 0)
		return "foreign entry (key differs from its name)";
	uint64_t size = get_u64(b + 32);
	if (size > n - hdr)
		return "truncated payload";
	if (size < n - hdr)
		return "trailing bytes";
	if (!payload)
		payload = b + hdr;
	if (entry_sum(b, hdr, payload, (size_t)size) != get_u64(b + 40))
		return "checksum mismatch";
	out->payload = payload;
	out->size = size;
	return NULL;
}

/* The entry file open on fd mapped whole, read-only and private (rule 9),
 * into *map (empty for an empty file); *st its stat. NULL, or why it
 * cannot be mapped (then the entry is left alone). */
static const char *map_entry(int fd, struct stat *st, struct lg_blob *map)
{
	*map = (struct lg_blob){0};
	if (fstat(fd, st) != 0)
		return strerror(errno);
	if (!S_ISREG(st->st_mode))
		return "not a regular file";
	if ((uintmax_t)st->st_size > CACHE_MAX_FILE)
		return "larger than 256 MiB";
	if (st->st_size == 0)
		return NULL; /* parse: a truncated header */
	void *p = mmap(NULL, (size_t)st->st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED)
		return strerror(errno);
	*map = (struct lg_blob){.base = p, .len = (size_t)st->st_size, .mapped = true};
	return NULL;
}

/* Check a mapped entry (map_entry) against rule 4. */
static const char *parse_mapped(const struct lg_blob *map, const uint8_t key[LG_KEY_BYTES], struct parsed *out)
{
	static const uint8_t none[1];
	return parse(map->base ? map->base : none, map->len, NULL, key, out);
}

/* Unlink a bad entry if the name still points at the file that was read. */
static void unlink_if_same(const char *path, const struct stat *was)
{
	struct stat now;
	if (stat(path, &now) == 0 && now.st_ino == was->st_ino && now.st_dev == was->st_dev)
		unlink(path);
}

bool lg_cache_get(lg_cache *c, const uint8_t key[LG_KEY_BYTES], struct lg_blob *own, const void **data,
		  size_t *size)
{
	*own = (struct lg_blob){0};
	*data = NULL;
	*size = 0;
	if (!c || c->off)
		return false;
	char *path = entry_path(c, key);
	if (!path)
		return false;
	bool hit = false;
	struct lg_blob map = {0};
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		if (errno != ENOENT)
			lg_log("cache: %s: %s (a miss)", path, strerror(errno));
		goto done;
	}
	struct stat st;
	/* the file mapped, not read: the cubin is handed over inside it, no
	 * copy and no fresh buffer to fault in (rule 9) */
	const char *why = map_entry(fd, &st, &map);
	struct parsed p;
	if (why) { /* not mapped: left alone */
		lg_log("cache: %s: %s (a miss)", path, why);
		goto done;
	}
	if ((why = parse_mapped(&map, key, &p))) {
		lg_log("cache: %s: %s (a miss; removed)", path, why);
		unlink_if_same(path, &st);
		goto done;
	}
	/* last use, for LRU pruning, to the hour: no write for an entry used
	 * within the last hour (one system call less a hit); best effort */
	if (time(NULL) - st.st_mtime > TOUCH_SECONDS)
		futimens(fd, NULL);
	*own = map;
	map = (struct lg_blob){0};
	*data = p.payload;
	*size = (size_t)p.size;
	hit = true;
done:
	if (fd >= 0)
		close(fd);
	lg_blob_release(&map);
	free(path);
	return hit;
}

/* ------------------------------------------------------------- writing */

static void fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
}

/* Warn once and stop writing (rule 6). */
static void write_failed(lg_cache *c, int err)
{
	pthread_mutex_lock(&c->lock);
	bool first = !c->write_failed;
	c->write_failed = true;
	pthread_mutex_unlock(&c->lock);
	if (first)
		lg_warn("disk cache %s is not writable (%s); continuing without it", c->dir,
			strerror(err));
}

/* Create a uniquely named temp file in the folder. */
static int open_tmp(const lg_cache *c, char **tmp)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ (uint64_t)(uintptr_t)tmp;
	for (int attempt = 0; attempt < 16; attempt++) {
		unsigned n = atomic_fetch_add(&tmp_counter, 1u);
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		if (asprintf(tmp, "%s/" CACHE_TMP_PREFIX "%ld-%u-%08x.lgc", c->dir, (long)getpid(),
			     n, (unsigned)(seed >> 32)) < 0) {
			*tmp = NULL;
			errno = ENOMEM;
			return -1;
		}
		int fd = open(*tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd >= 0 || errno != EEXIST)
			return fd;
		free(*tmp);
		*tmp = NULL;
	}
	errno = EEXIST;
	return -1;
}

static size_t bounded_len(const char *s, size_t max)
{
	size_t n = s ? strlen(s) : 0;
	return n > max ? max : n;
}

static lg_status prune_to(lg_cache *c, uint64_t trigger, uint64_t target, size_t *removed);

void lg_cache_put(lg_cache *c, const uint8_t key[LG_KEY_BYTES], const char *entry,
		  const char *arch, const void *data, size_t size)
{
	if (!c || c->off || !data)
		return;
	pthread_mutex_lock(&c->lock);
	bool failed = c->write_failed;
	pthread_mutex_unlock(&c->lock);
	if (failed)
		return;

	char *tmp = NULL, *path = NULL;
	int fd = -1, err;
	size_t nlen = bounded_len(entry, CACHE_MAX_NAME), alen = bounded_len(arch, CACHE_MAX_ARCH);
	uint8_t hdr[CACHE_MAX_HEADER] = {0};
	size_t hlen = header_len(nlen, alen);
	memcpy(hdr, CACHE_MAGIC, 8);
	put_u32(hdr + 8, LG_CACHE_FORMAT);
	put_u32(hdr + 12, (uint32_t)hlen);
	memcpy(hdr + 16, key, LG_KEY_BYTES);
	put_u64(hdr + 32, (uint64_t)size);
	hdr[CACHE_FIXED] = (uint8_t)nlen;
	if (nlen)
		memcpy(hdr + CACHE_FIXED + 1, entry, nlen);
	hdr[CACHE_FIXED + 1 + nlen] = (uint8_t)alen;
	if (alen)
		memcpy(hdr + CACHE_FIXED + 2 + nlen, arch, alen);
	put_u64(hdr + 40, entry_sum(hdr, hlen, data, size));

	if (lg_mkdir_p(c->dir) != 0)
		goto fail;
	path = entry_path(c, key);
	if (!path) {
		errno = ENOMEM;
		goto fail;
	}
	fd = open_tmp(c, &tmp);
	if (fd < 0)
		goto fail;
	if (lg_write_all(fd, hdr, hlen) != 0 || lg_write_all(fd, data, size) != 0 || fsync(fd) != 0)
		goto fail;
	if (close(fd) != 0) {
		fd = -1;
		goto fail;
	}
	fd = -1;
	if (rename(tmp, path) != 0) {
		int e = errno;
		struct stat sb;
		if (lstat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
			errno = e;
			goto fail;
		}
		/* a folder where the entry goes: an empty one is removed; else
		 * this entry is not cached (the cache stays on for the others) */
		if (rmdir(path) != 0 || rename(tmp, path) != 0) {
			lg_log("cache: %s is a folder, not an entry: %s not cached", path, entry ? entry : "");
			unlink(tmp);
			free(tmp);
			free(path);
			return;
		}
	}
	fsync_dir(c->dir);
	lg_log("cache: stored %s (%s %s, %zu bytes)", path, entry ? entry : "", arch ? arch : "",
	       size);
	free(tmp);
	free(path);
	prune_to(c, c->max_bytes, c->max_bytes / 10 * 9, NULL);
	return;
fail:
	err = errno;
	if (fd >= 0)
		close(fd);
	if (tmp)
		unlink(tmp);
	free(tmp);
	free(path);
	write_failed(c, err);
}

/* ------------------------------------------------------ NVRTC stamp */

#define STAMP_NAME "nvrtc.stamp"

static char *stamp_path(const lg_cache *c)
{
	char *p = NULL;
	return asprintf(&p, "%s/%s", c->dir, STAMP_NAME) < 0 ? NULL : p;
}

bool lg_cache_nvrtc_get(lg_cache *c, int *major, int *minor)
{
	if (!c || c->off)
		return false;
	char *path = stamp_path(c), *text = NULL;
	size_t len = 0;
	/* the shared reader: a FIFO or a device at the stamp's name is turned down, not waited on */
	bool read = path && lg_read_file_max(path, 4096, &text, &len) == LG_OK;
	free(path);
	lg_clear_error();
	if (!read)
		return false;
	char lib[1024];
	long long size = -1, sec = -1, nsec = -1;
	int ok = sscanf(text, "lingen-nvrtc 1 %d %d %lld %lld %lld %1023[^\n]", major, minor, &size, &sec,
			&nsec, lib);
	free(text);
	struct stat sb;
	if (ok != 6 || stat(lib, &sb) != 0 || sb.st_size != size || sb.st_mtim.tv_sec != sec ||
	    sb.st_mtim.tv_nsec != nsec)
		return false;
	const char *want = lg_env_get(LG_ENV_NVRTC);
	if (want) {
		char *a = realpath(want, NULL), *b = realpath(lib, NULL);
		bool same = a && b && strcmp(a, b) == 0;
		free(a);
		free(b);
		if (!same)
			return false;
	}
	return true;
}

void lg_cache_nvrtc_put(lg_cache *c, int major, int minor, const char *libpath)
{
	struct stat sb;
	if (!c || c->off || !libpath || !libpath[0] || stat(libpath, &sb) != 0)
		return;
	int m0, m1;
	if (lg_cache_nvrtc_get(c, &m0, &m1) && m0 == major && m1 == minor)
		return;
	char *tmp = NULL, *path = stamp_path(c), *text = NULL;
	int fd = -1;
	if (path && lg_mkdir_p(c->dir) == 0 &&
	    asprintf(&text, "lingen-nvrtc 1 %d %d %lld %lld %lld %s\n", major, minor,
		     (long long)sb.st_size, (long long)sb.st_mtim.tv_sec, (long long)sb.st_mtim.tv_nsec,
		     libpath) > 0 &&
	    (fd = open_tmp(c, &tmp)) >= 0 && lg_write_all(fd, text, strlen(text)) == 0 && close(fd) == 0) {
		fd = -1;
		if (rename(tmp, path) != 0)
			unlink(tmp);
	} else if (tmp) {
		unlink(tmp);
	}
	if (fd >= 0)
		close(fd);
	free(text);
	free(tmp);
	free(path);
}

/* ------------------------------------------------- listing and pruning */

struct scanned {
	char name[2 * LG_KEY_BYTES + 8];
	uint64_t size;
	struct timespec mtime;
	bool regular; /* a regular file (else: a folder or device at an entry name) */
};

static int by_mtime(const void *a, const void *b)
{
	const struct scanned *x = a, *y = b;
	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* The cache folder opened for listing; *d NULL (and LG_OK) when it does not
 * exist yet. */
static lg_status open_folder(const lg_cache *c, DIR **d)
{
	if ((*d = opendir(c->dir)) || errno == ENOENT)
		return LG_OK;
	return lg_fail(LG_ERR_IO, "cannot read the cache folder %s: %s", c->dir, strerror(errno));
}

/* Every entry file of the folder, oldest first. A missing folder is empty. */
static lg_status scan(const lg_cache *c, struct scanned **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	DIR *d;
	lg_status ost = open_folder(c, &d);
	if (ost != LG_OK || !d)
		return ost;
	int dfd = dirfd(d);
	struct scanned *v = NULL;
	size_t cnt = 0, cap = 0;
	lg_status st = LG_OK;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		struct stat sb;
		if (!is_entry_name(e->d_name) || strlen(e->d_name) >= sizeof v->name)
			continue;
		if (fstatat(dfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
			continue;
		if (cnt == cap) {
			size_t ncap = cap ? 2 * cap : 64;
			struct scanned *nv = realloc(v, ncap * sizeof *nv);
			if (!nv) {
				st = lg_fail(LG_ERR_NO_MEMORY, "out of memory listing %s", c->dir);
				break;
			}
			v = nv;
			cap = ncap;
		}
		memcpy(v[cnt].name, e->d_name, strlen(e->d_name) + 1); /* length checked above */
		v[cnt].size = S_ISREG(sb.st_mode) ? (uint64_t)sb.st_size : 0;
		v[cnt].mtime = sb.st_mtim;
		v[cnt].regular = S_ISREG(sb.st_mode);
		cnt++;
	}
	closedir(d);
	if (st != LG_OK) {
		free(v);
		return st;
	}
	if (cnt)
		qsort(v, cnt, sizeof *v, by_mtime);
	*out = v;
	*n = cnt;
	return LG_OK;
}

/* If the entries exceed `trigger` bytes, remove the oldest until <= target. */
static lg_status prune_to(lg_cache *c, uint64_t trigger, uint64_t target, size_t *removed)
{
	if (removed)
		*removed = 0;
	if (!c || c->off)
		return LG_OK;
	struct scanned *v;
	size_t n;
	lg_status st = scan(c, &v, &n);
	if (st != LG_OK)
		return st;
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += v[i].size;
	size_t gone = 0;
	if (total > trigger) {
		for (size_t i = 0; i < n && total > target; i++) {
			char *p = NULL;
			if (!v[i].regular)
				continue; /* verify reports it, clear removes it */
			if (asprintf(&p, "%s/%s", c->dir, v[i].name) < 0)
				break;
			if (unlink(p) == 0 || errno == ENOENT) {
				total -= v[i].size;
				gone++;
			}
			free(p);
		}
		lg_log("cache: pruned %zu entries from %s (%llu bytes left)", gone, c->dir,
		       (unsigned long long)total);
	}
	free(v);
	if (removed)
		*removed = gone;
	return LG_OK;
}

lg_status lg_cache_prune(lg_cache *c, uint64_t max_bytes, size_t *removed)
{
	return prune_to(c, max_bytes, max_bytes, removed);
}

static void verify(const lg_cache *c, const struct scanned *s, struct lg_cache_entry *e)
{
	memset(e, 0, sizeof *e);
	snprintf(e->file, sizeof e->file, "%s", s->name);
	snprintf(e->entry, sizeof e->entry, "?");
	snprintf(e->arch, sizeof e->arch, "?");
	e->size = s->size;
	e->mtime = (int64_t)s->mtime.tv_sec;
	uint8_t key[LG_KEY_BYTES];
	if (!key_from_name(s->name, key)) {
		snprintf(e->problem, sizeof e->problem, "not named by a key");
		return;
	}
	if (!s->regular) {
		snprintf(e->problem, sizeof e->problem, "not a regular file (a folder or a device at an entry's name)");
		return;
	}
	char *path = NULL;
	if (asprintf(&path, "%s/%s", c->dir, s->name) < 0) {
		snprintf(e->problem, sizeof e->problem, "out of memory");
		return;
	}
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	free(path);
	if (fd < 0) {
		snprintf(e->problem, sizeof e->problem, "cannot open: %s", strerror(errno));
		return;
	}
	struct stat st;
	struct lg_blob map;
	const char *why = map_entry(fd, &st, &map);
	close(fd);
	struct parsed p;
	if (!why) {
		why = parse_mapped(&map, key, &p);
		snprintf(e->entry, sizeof e->entry, "%s", p.entry);
		snprintf(e->arch, sizeof e->arch, "%s", p.arch);
	}
	lg_blob_release(&map);
	e->valid = why == NULL;
	if (why)
		snprintf(e->problem, sizeof e->problem, "%s", why);
}

lg_status lg_cache_list(lg_cache *c, struct lg_cache_entry **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	if (!c || c->off)
		return LG_OK;
	struct scanned *v;
	size_t cnt;
	lg_status st = scan(c, &v, &cnt);
	if (st != LG_OK || cnt == 0)
		return st;
	struct lg_cache_entry *e = calloc(cnt, sizeof *e);
	if (!e) {
		free(v);
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory listing %s", c->dir);
	}
	for (size_t i = 0; i < cnt; i++)
		verify(c, &v[i], &e[i]);
	free(v);
	*out = e;
	*n = cnt;
	return LG_OK;
}

lg_status lg_cache_clear(lg_cache *c, size_t *removed)
{
	if (removed)
		*removed = 0;
	if (!c || c->off)
		return LG_OK;
	DIR *d;
	lg_status ost = open_folder(c, &d);
	if (ost != LG_OK || !d)
		return ost;
	int dfd = dirfd(d);
	time_t now = time(NULL);
	size_t gone = 0;
	lg_status st = LG_OK;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		struct stat sb;
		bool tmp = is_tmp_name(e->d_name);
		if (!tmp && !is_entry_name(e->d_name))
			continue;
		if (fstatat(dfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
			continue;
		if (tmp && now - sb.st_mtim.tv_sec < CACHE_TMP_STALE_S)
			continue; /* a writer may still be at work */
		if (unlinkat(dfd, e->d_name, S_ISDIR(sb.st_mode) ? AT_REMOVEDIR : 0) == 0) {
			if (!tmp)
				gone++;
		} else if (errno != ENOENT) {
			st = lg_fail(LG_ERR_IO, "cannot remove %s/%s: %s", c->dir, e->d_name,
				     strerror(errno));
		}
	}
	closedir(d);
	if (removed)
		*removed = gone;
	return st;
}
