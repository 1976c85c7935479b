/*
 * cache.h - the content-addressed, fail-open disk cache of cubins.
 *
 * The rules are in the header comment of cache.c. In short: one file per
 * entry named by the hex key, holding magic, format version, key, metadata,
 * checksum and cubin; written to a temp file in the same folder, fsynced and
 * renamed; readers take no lock and map an entry (never changed in place,
 * only replaced by rename or unlinked); a corrupt, truncated or foreign entry is a
 * miss (and is replaced by the next put); an unusable folder disables the
 * cache with one warning; size bounded with least-recently-used pruning.
 */
#ifndef LG_RUNTIME_CACHE_H
#define LG_RUNTIME_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "blob.h"
#include "lingen.h"

#define LG_CACHE_FORMAT 3
#define LG_KEY_BYTES 16

typedef struct lg_cache lg_cache;

/* The key of a compile: hash of (format version, arch, source, options,
 * NVRTC version). */
void lg_cache_key(const char *arch, const char *src, size_t src_len, const char *const *opts,
		  int nopts, int nvrtc_major, int nvrtc_minor, uint8_t key[LG_KEY_BYTES]);
/* Lower-case hex of a key into out[2*LG_KEY_BYTES+1]. */
void lg_cache_key_hex(const uint8_t key[LG_KEY_BYTES], char *out);

/* Resolve the folder: dir if given, else $LINGEN_CACHE_DIR, else
 * $XDG_CACHE_HOME/lingen, else $HOME/.cache/lingen. Writes "off" when the
 * cache is disabled. The caller frees the result with free(). */
char *lg_cache_dir_resolve(const char *dir);

/* Open the cache (never fails: an unusable folder gives a disabled cache and
 * one warning on stderr). max_bytes 0 = $LINGEN_CACHE_MAX_MB or 1 GiB. The
 * caller closes it with lg_cache_close. NULL only on allocation failure. */
lg_cache *lg_cache_open(const char *dir, uint64_t max_bytes);
void lg_cache_close(lg_cache *c);
bool lg_cache_enabled(const lg_cache *c);
const char *lg_cache_path(const lg_cache *c); /* the folder, or "off" */

/* Look a key up. On a hit, *own holds the entry's file mapped read-only
 * (the caller releases it, blob.h; cache.c rule 9), *data and *size the
 * cubin inside it, checked against the header's size and checksum, and the
 * entry's access time is refreshed. Anything wrong with the entry is a
 * miss (*own empty). Thread-safe. */
bool lg_cache_get(lg_cache *c, const uint8_t key[LG_KEY_BYTES], struct lg_blob *own, const void **data,
		  size_t *size);
/* Store an entry atomically; `entry` (kernel name) and `arch` are metadata
 * for `lingen cache ls`. Failures disable the cache with one warning. Prunes
 * least-recently-used entries past the bound. Thread-safe. */
void lg_cache_put(lg_cache *c, const uint8_t key[LG_KEY_BYTES], const char *entry,
		  const char *arch, const void *data, size_t size);

/* The NVRTC version the last NVRTC-loading process recorded in the folder
 * (file nvrtc.stamp), trusted while the library file it names is unchanged
 * (size and modification time) and $LINGEN_NVRTC, if set, names it: a lookup
 * then needs no NVRTC. A stale stamp can only make a lookup use cubins the
 * recorded compiler produced, which are right for their source and arch; a
 * miss loads NVRTC and records its real version. */
bool lg_cache_nvrtc_get(lg_cache *c, int *major, int *minor);
/* Record the version of the NVRTC loaded from libpath (best effort). */
void lg_cache_nvrtc_put(lg_cache *c, int major, int minor, const char *libpath);

/* One entry as listed by lg_cache_list. */
struct lg_cache_entry {
	char file[2 * LG_KEY_BYTES + 8]; /* file name within the folder */
	char entry[160];                 /* kernel entry name ("?" if unreadable) */
	char arch[16];
	uint64_t size;                   /* file size in bytes */
	int64_t mtime;                   /* last use, seconds since the epoch */
	bool valid;                      /* header, key and checksum verified */
	char problem[96];                /* why not valid */
};
/* List (and verify) every entry, oldest first. *out is malloc'd (caller
 * frees). Returns LG_ERR_IO if the folder cannot be read. */
lg_status lg_cache_list(lg_cache *c, struct lg_cache_entry **out, size_t *n);
/* Remove every entry (and stale temp files). *removed may be NULL. */
lg_status lg_cache_clear(lg_cache *c, size_t *removed);
/* Prune least-recently-used entries until the folder holds <= max_bytes. */
lg_status lg_cache_prune(lg_cache *c, uint64_t max_bytes, size_t *removed);

/* Create a folder and its parents (mode 0755), like `mkdir -p`. 0 on
 * success (also when it exists), else -1 with errno set. */
int lg_mkdir_p(const char *path);

#endif
