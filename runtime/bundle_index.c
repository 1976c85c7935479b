/*
 * bundle_index.c - a bundle's index.lgb and cubin file (bundle_impl.h):
 * what the loader reads first when a folder bundle has them.
 *
 * index.lgb (written by `lingen build` after the cubins and the cubin
 * file, before the manifest; what the loader reads when it is there, manifest.json being for
 * people and tools, and the loader's fallback for bundles without one): the
 * manifest's records as text a loader reads without a JSON parser, one line
 * each, fields separated by tabs (no field holds a tab or a newline):
 *   LGINDEX <LG_INDEX_FORMAT> <lingen version> <nvrtc version>
 *   cubins <file> <bytes>
 *   linked <arch> <offset> <size> <checksum>
 *   kernel <arch> <entry> <file> <offset> <size> <checksum> <plan digest> <given> <canonical spec> <linked>
 *   skipped <entry> <arch> <why>
 * linked (format 3, at most one an arch): the arch's linked module, the
 * relocatable cubins of its kernels linked into one by lingen build, the
 * <size> bytes at <offset> in the cubin file; checksum:
 * lg_bundle_linked_checksum. <linked> of a kernel line: 1 when the kernel
 * is in its arch's linked module (a context then takes its entry points
 * from that module, loaded once), else 0 (a kernel whose plan rewrites its
 * SASS, or no module for the arch). Format 2 has neither.
 * cubins (the second line): the bundle's cubin file (bundle_pack.h,
 * "cubins.lgc", a name inside the folder) and its size in bytes; it is
 * mapped when the bundle opens and stays mapped until lg_bundle_free, and
 * a kernel's cubin is the <size> bytes at <offset> in it (each checked to
 * lie inside it when the index is read), handed out without a copy. <file>
 * of a kernel line: its cubin as a file of its own, which lingen build
 * also writes (for the manifest and people) but the loader does not read.
 * checksum as the manifest's; plan digest: lg_plan_digest of the plan, 16
 * hex digits; given: lg_plan_given_json; the canonical spec as lg_spec_to_json
 * prints it. Format 1 (bundles built before the cubin file) has no cubins
 * line and no <offset>: each cubin is read from its own file when asked
 * for; it is still read. The records are not re-planned when the bundle is
 * opened but when a kernel is asked for (lg_bundle_get): its spec is the
 * caller's, whose canonical text must equal the record's, planned with the
 * recorded given tile, and the digest of that plan must equal the recorded
 * one; every other field is checked by use (the cubin's checksum is seeded
 * by the canonical spec, entry, arch and given tile). Another index format
 * is refused.
 */
#include "bundle_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "file.h"
#include "json.h"

/* Cut a line at its tabs into at most max fields: how many it has (max + 1:
 * more than max). */
static int split(char *line, char **field, int max)
{
	int n = 0;
	field[n++] = line;
	for (char *c = strchr(line, '\t'); c; c = strchr(c + 1, '\t')) {
		if (n == max)
			return max + 1;
		*c = '\0';
		field[n++] = c + 1;
	}
	return n;
}

static bool hex16(const char *text, uint64_t *out)
{
	for (int i = 0; i < 16; i++)
		if (!((text[i] >= '0' && text[i] <= '9') || (text[i] >= 'a' && text[i] <= 'f')))
			return false;
	if (text[16])
		return false;
	*out = strtoull(text, NULL, 16);
	return true;
}

/* A decimal number of at most `max`, digits only. */
static bool decimal(const char *text, uint64_t max, uint64_t *out)
{
	char *end = NULL;
	if (text[0] < '0' || text[0] > '9')
		return false;
	errno = 0;
	unsigned long long v = strtoull(text, &end, 10);
	*out = v;
	return !*end && errno == 0 && v <= max;
}

/* A "kernel" line: f[1..8] arch, entry, file, size, checksum, plan digest,
 * given, canonical spec (format 2's offset taken out: `offset`, NULL in
 * format 1); the item points into the index's text, and into the mapped
 * cubin file with an offset. */
static lg_status index_kernel(const lg_bundle *b, const char *dir, char **f, const char *offset, struct item *it,
			      const char *where)
{
	struct lg_target t;
	uint64_t size = 0, at = 0;
	if (!lg_target_parse(f[1], &t) || strcmp(t.name, f[1]) != 0)
		return lg_fail(LG_ERR_SPEC, "%s: arch: '%s' is not an arch (expected sm_<NN>[a])", where, f[1]);
	if (strncmp(f[2], "lg_", 3) != 0)
		return lg_fail(LG_ERR_SPEC, "%s: entry: found '%s', expected a lingen entry name", where, f[2]);
	if (!f[3][0] || strchr(f[3], '/') || f[3][0] == '.')
		return lg_fail(LG_ERR_SPEC, "%s: file: '%s' must be a file name inside the bundle", where, f[3]);
	if (!decimal(f[4], UINT64_C(1) << 32, &size) || size < 1)
		return lg_fail(LG_ERR_SPEC, "%s: size: found '%s', expected 1 to 2^32 bytes", where, f[4]);
	if (offset && !decimal(offset, UINT64_MAX, &at))
		return lg_fail(LG_ERR_SPEC, "%s: offset: found '%s', expected a byte offset in %s", where, offset,
			       LG_PACK_FILE);
	if (offset) {
		lg_status st = lg_pack_check(&b->pack, at, size, where);
		if (st != LG_OK)
			return st;
	}
	if (!hex16(f[5], &it->checksum) || !hex16(f[6], &it->digest))
		return lg_fail(LG_ERR_SPEC, "%s: checksum and plan digest: expected 16 hex digits each, found '%s' and '%s'",
			       where, f[5], f[6]);
	if (f[7][0] != '{' || f[8][0] != '{')
		return lg_fail(LG_ERR_SPEC, "%s: expected the given tile and the spec as JSON objects", where);
	it->indexed = true;
	it->arch = f[1];
	it->entry = f[2];
	it->size = (size_t)size;
	it->given = f[7];
	it->canon = f[8];
	it->data = offset ? b->pack.base + at : NULL;
	if (asprintf(&it->file, "%s/%s", dir, f[3]) < 0) {
		it->file = NULL;
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory reading %s", where);
	}
	return LG_OK;
}

/* A "skipped" line, kept as the manifest's "skipped" is. */
static lg_status index_skipped(lg_bundle *b, char **f, const char *where)
{
	if (!b->skipped && !(b->skipped = cJSON_CreateArray()))
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory reading %s", where);
	cJSON *o = cJSON_CreateObject();
	bool ok = o && cJSON_AddStringToObject(o, "entry", f[1]) && cJSON_AddStringToObject(o, "arch", f[2]) &&
		  cJSON_AddStringToObject(o, "why", f[3]);
	if (!ok || !cJSON_AddItemToArray(b->skipped, o)) {
		cJSON_Delete(o);
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory reading %s", where);
	}
	return LG_OK;
}

/* Format 2's second line, "cubins <file> <bytes>": the cubin file mapped. */
static lg_status index_pack(lg_bundle *b, const char *dir, char *line, const char *where)
{
	char *f[3];
	uint64_t bytes;
	if (split(line, f, 3) != 3 || strcmp(f[0], "cubins") != 0)
		return lg_fail(LG_ERR_SPEC, "%s: expected the cubin file's line (cubins, file, bytes) in an index of format 2 or 3",
			       where);
	if (!f[1][0] || strchr(f[1], '/') || f[1][0] == '.')
		return lg_fail(LG_ERR_SPEC, "%s: file: '%s' must be a file name inside the bundle", where, f[1]);
	if (!decimal(f[2], UINT64_MAX, &bytes))
		return lg_fail(LG_ERR_SPEC, "%s: bytes: found '%s', expected the cubin file's size", where, f[2]);
	char *path = NULL;
	if (asprintf(&path, "%s/%s", dir, f[1]) < 0)
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory reading %s", where);
	lg_status st = lg_pack_map(path, bytes, &b->pack);
	free(path);
	if (st != LG_OK)
		lg_fail_append(" (%s)", where);
	return st;
}

/* Format 3's "linked <arch> <offset> <size> <checksum>": the arch's linked
 * module, inside the mapped cubin file; one an arch. */
static lg_status index_linked(lg_bundle *b, char **f, const char *where)
{
	struct lg_target t;
	uint64_t at = 0, size = 0, sum = 0;
	if (!lg_target_parse(f[1], &t) || strcmp(t.name, f[1]) != 0)
		return lg_fail(LG_ERR_SPEC, "%s: arch: '%s' is not an arch (expected sm_<NN>[a])", where, f[1]);
	for (int i = 0; i < b->nlinked; i++)
		if (strcmp(b->linked[i].arch, f[1]) == 0)
			return lg_fail(LG_ERR_SPEC, "%s: a second linked module for %s, allowed: one an arch", where, f[1]);
	if (b->nlinked == LG_BUNDLE_MAX_ARCHS)
		return lg_fail(LG_ERR_SPEC, "%s: linked modules for more than %d archs", where, LG_BUNDLE_MAX_ARCHS);
	if (!decimal(f[2], UINT64_MAX, &at) || !decimal(f[3], UINT64_C(1) << 32, &size) || size < 1)
		return lg_fail(LG_ERR_SPEC, "%s: expected the linked module's offset in %s and its size (1 to 2^32 bytes), found '%s' and '%s'",
			       where, LG_PACK_FILE, f[2], f[3]);
	lg_status st = lg_pack_check(&b->pack, at, size, where);
	if (st != LG_OK)
		return st;
	if (!hex16(f[4], &sum))
		return lg_fail(LG_ERR_SPEC, "%s: checksum: expected 16 hex digits, found '%s'", where, f[4]);
	b->linked[b->nlinked++] = (struct linked){.arch = f[1], .data = b->pack.base + at, .size = (size_t)size,
						  .checksum = sum};
	return LG_OK;
}

/* The next line of the index (cut at its end), NULL at the end; LG_ERR_SPEC
 * when the text ends inside it. */
static lg_status next_line(char **next, char **line, const char *path, size_t at)
{
	*line = *next + 1;
	if (!**line) {
		*line = NULL;
		return LG_OK;
	}
	if (!(*next = strchr(*line, '\n')))
		return lg_fail(LG_ERR_SPEC, "%s:%zu: the last line does not end: a partial index", path, at);
	**next = '\0';
	return LG_OK;
}

/* index.lgb's text (kept by the bundle: the items point into it). */
static lg_status index_parse(lg_bundle *b, const char *dir, const char *path, char *text, size_t len)
{
	b->index = text;
	if (strlen(text) != len)
		return lg_fail(LG_ERR_SPEC, "%s: not text: not a lingen bundle index", path);
	size_t lines = 0;
	for (const char *c = strchr(text, '\n'); c; c = strchr(c + 1, '\n'))
		lines++;
	char *line = text, *next = strchr(line, '\n');
	if (!next)
		return lg_fail(LG_ERR_SPEC, "%s: no header line: not a lingen bundle index", path);
	*next = '\0';
	char *f[11];
	int n = split(line, f, 4);
	if (strcmp(f[0], "LGINDEX") != 0)
		return lg_fail(LG_ERR_SPEC, "%s: not a lingen bundle index (its first line starts with LGINDEX)", path);
	int format = n < 2 || strlen(f[1]) != 1 || f[1][0] < '1' || f[1][0] > '0' + LG_INDEX_FORMAT ? 0 : f[1][0] - '0';
	if (!format)
		return lg_fail(LG_ERR_SPEC, "%s: bundle index format %s, this lingen (%s) reads formats 1 to %d: rebuild the bundle with lingen build",
			       path, n < 2 ? "(none)" : f[1], lg_version(), LG_INDEX_FORMAT);
	lg_status st = n == 4 ? lg_bundle_check_versions(path, f[2], f[3])
			      : lg_fail(LG_ERR_SPEC, "%s: header: expected LGINDEX, format, lingen and NVRTC versions", path);
	if (st == LG_OK)
		st = lg_bundle_alloc(b, lines, path);
	size_t i = 0, at = 2;
	char where[WHERE_MAX];
	if (st == LG_OK && format >= 2 && (st = next_line(&next, &line, path, at)) == LG_OK) {
		snprintf(where, sizeof where, "%s:%zu", path, at++);
		st = line ? index_pack(b, dir, line, where)
			  : lg_fail(LG_ERR_SPEC, "%s: no cubins line: an index of format %d names its cubin file", path,
				    format);
	}
	for (; st == LG_OK && (st = next_line(&next, &line, path, at)) == LG_OK && line; at++) {
		snprintf(where, sizeof where, "%s:%zu", path, at);
		int kernel_fields = format == 3 ? 11 : format == 2 ? 10 : 9;
		n = split(line, f, kernel_fields);
		if (n == kernel_fields && strcmp(f[0], "kernel") == 0) {
			const char *offset = format >= 2 ? f[4] : NULL;
			if (offset)
				memmove(&f[4], &f[5], 5 * sizeof f[0]);
			b->n = i + 1;
			st = index_kernel(b, dir, f, offset, &b->items[i], where);
			if (st == LG_OK && format == 3 && strcmp(f[10], "0") != 0 && strcmp(f[10], "1") != 0)
				st = lg_fail(LG_ERR_SPEC, "%s: linked: found '%s', expected 1 (in the arch's linked module) or 0",
					     where, f[10]);
			b->items[i].linked = format == 3 && strcmp(f[10], "1") == 0;
			if (st == LG_OK)
				st = lg_bundle_add(b, i++, where);
		} else if (n == 5 && format == 3 && strcmp(f[0], "linked") == 0) {
			st = index_linked(b, f, where);
		} else if (n == 4 && strcmp(f[0], "skipped") == 0) {
			st = index_skipped(b, f, where);
		} else {
			st = lg_fail(LG_ERR_SPEC, "%s: expected a kernel line (%d fields)%s or a skipped line (4 fields)",
				     where, kernel_fields, format == 3 ? ", a linked line (5 fields)" : "");
		}
	}
	return st;
}

/* The bundle's index when it has one (*found false when not). */
lg_status lg_bundle_open_index(lg_bundle *b, const char *dir, bool *found)
{
	*found = false;
	char *path = NULL;
	if (asprintf(&path, "%s/index.lgb", dir) < 0)
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory opening bundle %s", dir);
	size_t len = 0;
	char *text = NULL;
	lg_status st = lg_read_file_max(path, LG_JSON_MAX, &text, &len);
	if (st != LG_OK && errno == ENOENT) {
		lg_clear_error();
		free(path);
		return LG_OK;
	}
	*found = true;
	if (st != LG_OK)
		lg_fail_prefix(st, "cannot read bundle index ");
	else
		st = index_parse(b, dir, path, text, len);
	free(path);
	return st;
}
