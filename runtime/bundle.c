/*
 * bundle.c - deployment bundles (bundle.h): reading manifest.json or an
 * embedded lg_aot_table, and looking kernels up in it. No NVRTC, no cache.
 *
 * manifest.json, format 2 (written by `lingen build`, tools/cmd_build.c):
 *   { "format": 2, "lingen": "0.1.0", "nvrtc": "13.0",
 *     "archs": ["sm_90a", "sm_80"],
 *     "kernels": [ {
 *       "spec": { canonical spec object },
 *       "entry": "lg_rmsnorm_fwd_bf16_h2048",       entry-point base name
 *       "arch": "sm_90a",
 *       "file": "lg_rmsnorm_fwd_bf16_h2048.sm_90a.cubin",  relative to the folder
 *       "size": 12345,                               bytes
 *       "checksum": "0123456789abcdef",              XXH3-64 of the file, 16 hex digits
 *       "plan": {                                    what the cubin was generated with
 *         "tile": {"rows": 8, "cols": 0, "threads": 256, "cluster": 0, "stages": 0},
 *         "nargs": 4, "used": [1, 1, 1, 0], "hidden": 2048, "aux": [a, b, c, d],
 *         "entries": [ { "name": "lg_rmsnorm_fwd_bf16_h2048",
 *                        "block": [256, 1, 1], "smem": 0, "cluster": 0,
 *                        "persistent": false, "early": false, "part": 0,
 *                        "grid_at_1": [1, 1, 1], "grid_at_8192": [1024, 1, 1] } ] } } ] }
 *   The grid of an entry point is the family's geometry() of the plan and the
 *   token count (persistent entries are capped at what is co-resident on the
 *   device, known only at load); grid_at_1 and grid_at_8192 show it for a
 *   reader and let the loader check that this lingen computes the geometry
 *   the bundle was built with. Format 1 (no plan) is refused.
 *
 * The loader uses the stored plan, not a fresh one (a tuning file on the
 * deployment machine must not change the launch of a pre-built cubin), after
 * checking it: entry names, argument count, and the geometry cross-check.
 * An embedded table holds the same fields, the spec and plan as JSON text.
 */
#include "bundle.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "error.h"
#include "file.h"
#include "log.h"

#define WHERE_MAX 4352 /* "<path>: kernels[i]" in messages */

struct item {
	char *canon;                /* canonical spec JSON */
	char *entry, *arch;
	char *file;                 /* folder bundles: path of the cubin */
	const unsigned char *data;  /* embedded tables: the cubin */
	size_t size;
	uint64_t checksum;
	struct lg_plan plan;
};

struct lg_bundle {
	char *where;   /* "bundle /path" or "the embedded bundle (lingen aot)" */
	struct item *items;
	size_t n;
	size_t nkernels; /* distinct entries */
	char archs[160]; /* "sm_90a, sm_80" */
};

void lg_bundle_free(lg_bundle *b)
{
	if (!b)
		return;
	for (size_t i = 0; i < b->n; i++) {
		free(b->items[i].canon);
		free(b->items[i].entry);
		free(b->items[i].arch);
		free(b->items[i].file);
	}
	free(b->items);
	free(b->where);
	free(b);
}

/* ------------------------------------------------------------ plan <-> JSON */

static cJSON *int_array(const int64_t *v, int n)
{
	cJSON *a = cJSON_CreateArray();
	for (int i = 0; a && i < n; i++)
		cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
	return a;
}

static cJSON *dim3(const unsigned v[3])
{
	int64_t w[3] = {v[0], v[1], v[2]};
	return int_array(w, 3);
}

static void add_entry(cJSON *entries, const struct lg_family *f, const struct lg_plan *p, int e)
{
	struct lg_launch_dim d1, d8k;
	f->geometry(p, e, 1, &d1);
	f->geometry(p, e, 8192, &d8k);
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "name", p->entry[e]);
	cJSON_AddItemToObject(o, "block", dim3(d1.block));
	cJSON_AddNumberToObject(o, "smem", d1.smem);
	cJSON_AddNumberToObject(o, "cluster", p->cluster[e]);
	cJSON_AddBoolToObject(o, "persistent", p->persistent[e]);
	cJSON_AddBoolToObject(o, "early", p->early[e]);
	cJSON_AddNumberToObject(o, "part", (double)p->part[e]);
	cJSON_AddItemToObject(o, "grid_at_1", dim3(d1.grid));
	cJSON_AddItemToObject(o, "grid_at_8192", dim3(d8k.grid));
	cJSON_AddItemToArray(entries, o);
}

cJSON *lg_plan_to_json(const struct lg_family *f, const struct lg_plan *p)
{
	cJSON *o = cJSON_CreateObject();
	cJSON *tile = cJSON_AddObjectToObject(o, "tile");
	for (int i = 0; tile && i < LG_TILE_COUNT; i++)
		cJSON_AddNumberToObject(tile, lg_tile_names[i], p->tile[i]);
	cJSON_AddNumberToObject(o, "nargs", p->nargs);
	int64_t used[LG_MAX_ARGS];
	for (int i = 0; i < p->nargs; i++)
		used[i] = p->used[i];
	cJSON_AddItemToObject(o, "used", int_array(used, p->nargs));
	cJSON_AddNumberToObject(o, "hidden", (double)p->hidden);
	cJSON_AddItemToObject(o, "aux", int_array(p->aux, 4));
	cJSON *entries = cJSON_AddArrayToObject(o, "entries");
	for (int e = 0; entries && e < p->nentries; e++)
		add_entry(entries, f, p, e);
	/* cJSON's adders fail quietly: check the whole tree once */
	char *text = o && tile && entries ? cJSON_PrintUnformatted(o) : NULL;
	if (!text) {
		cJSON_Delete(o);
		return NULL;
	}
	free(text);
	return o;
}

/* An integer member in [lo, hi]. */
static bool get_int(const cJSON *o, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!cJSON_IsNumber(v))
		return false;
	double d = v->valuedouble;
	if (d < (double)lo || d > (double)hi || d != (double)(int64_t)d)
		return false;
	*out = (int64_t)d;
	return true;
}

/* An array of exactly n integers in [lo, hi]. */
static bool get_ints(const cJSON *o, const char *key, int n, int64_t lo, int64_t hi, int64_t *out)
{
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
		return false;
	for (int i = 0; i < n; i++) {
		const cJSON *v = cJSON_GetArrayItem(a, i);
		if (!cJSON_IsNumber(v) || v->valuedouble < (double)lo || v->valuedouble > (double)hi ||
		    v->valuedouble != (double)(int64_t)v->valuedouble)
			return false;
		out[i] = (int64_t)v->valuedouble;
	}
	return true;
}

/* Does this lingen compute the launch geometry the bundle recorded? */
static bool same_geometry(const struct lg_family *f, const struct lg_plan *p, int e, const cJSON *o)
{
	struct lg_launch_dim d1, d8k;
	f->geometry(p, e, 1, &d1);
	f->geometry(p, e, 8192, &d8k);
	int64_t block[3], g1[3], g8k[3], smem;
	if (!get_ints(o, "block", 3, 0, UINT32_MAX, block) || !get_ints(o, "grid_at_1", 3, 0, UINT32_MAX, g1) ||
	    !get_ints(o, "grid_at_8192", 3, 0, UINT32_MAX, g8k) || !get_int(o, "smem", 0, UINT32_MAX, &smem))
		return false;
	for (int i = 0; i < 3; i++)
		if (block[i] != d1.block[i] || g1[i] != d1.grid[i] || g8k[i] != d8k.grid[i])
			return false;
	return smem == d1.smem;
}

/* One entry point of a stored plan. */
static lg_status entry_from_json(const cJSON *o, const struct lg_spec *s, struct lg_plan *p, int e,
				 const char *where)
{
	const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "name"));
	const cJSON *pers = cJSON_GetObjectItemCaseSensitive(o, "persistent");
	const cJSON *early = cJSON_GetObjectItemCaseSensitive(o, "early");
	int64_t cluster, part;
	if (!name || strncmp(name, s->entry, strlen(s->entry)) != 0 || strlen(name) >= sizeof p->entry[e])
		return lg_fail(LG_ERR_SPEC, "%s.entries[%d].name: expected an entry point of %s", where, e,
			       s->entry);
	if (!cJSON_IsBool(pers) || !get_int(o, "cluster", 0, 64, &cluster))
		return lg_fail(LG_ERR_SPEC, "%s.entries[%d]: expected \"persistent\" (bool) and \"cluster\" (0 to 64)",
			       where, e);
	if (!cJSON_IsBool(early) || !get_int(o, "part", 0, LG_MAX_ENTRIES, &part))
		return lg_fail(LG_ERR_SPEC, "%s.entries[%d]: expected \"early\" (bool) and \"part\" (0 to %d)",
			       where, e, LG_MAX_ENTRIES);
	snprintf(p->entry[e], sizeof p->entry[e], "%s", name);
	p->persistent[e] = cJSON_IsTrue(pers);
	p->early[e] = cJSON_IsTrue(early);
	p->part[e] = part;
	p->cluster[e] = (unsigned)cluster;
	return LG_OK;
}

/* The stored plan of spec s, checked against what this lingen knows of the
 * family. `where` names the plan object in messages. */
static lg_status plan_from_json(const cJSON *o, const struct lg_spec *s, struct lg_plan *p,
				const char *where)
{
	const struct lg_family *f = lg_family_get(s->op);
	memset(p, 0, sizeof *p);
	const cJSON *tile = cJSON_GetObjectItemCaseSensitive(o, "tile");
	const cJSON *entries = cJSON_GetObjectItemCaseSensitive(o, "entries");
	int64_t v, used[LG_MAX_ARGS];
	if (!cJSON_IsObject(tile) || !cJSON_IsArray(entries))
		return lg_fail(LG_ERR_SPEC, "%s: expected an object with \"tile\" and \"entries\"", where);
	for (int i = 0; i < LG_TILE_COUNT; i++) {
		if (!get_int(tile, lg_tile_names[i], 0, 1 << 20, &v))
			return lg_fail(LG_ERR_SPEC, "%s.tile.%s: expected an integer", where, lg_tile_names[i]);
		p->tile[i] = (int)v;
	}
	if (!get_int(o, "nargs", 0, LG_MAX_ARGS, &v) || v != f->nargs[s->pass])
		return lg_fail(LG_ERR_SPEC, "%s.nargs: expected %d (the arguments of %s)", where,
			       f->nargs[s->pass], s->entry);
	p->nargs = (int)v;
	if (!get_ints(o, "used", p->nargs, 0, 1, used))
		return lg_fail(LG_ERR_SPEC, "%s.used: expected %d values 0 or 1", where, p->nargs);
	for (int i = 0; i < p->nargs; i++)
		p->used[i] = (unsigned char)used[i];
	if (!get_int(o, "hidden", 0, INT64_C(1) << 40, &p->hidden) ||
	    !get_ints(o, "aux", 4, -(INT64_C(1) << 40), INT64_C(1) << 40, p->aux))
		return lg_fail(LG_ERR_SPEC, "%s: expected integers \"hidden\" and \"aux\" (4)", where);
	int n = cJSON_GetArraySize(entries);
	if (n < 1 || n > LG_MAX_ENTRIES)
		return lg_fail(LG_ERR_SPEC, "%s.entries: expected 1 to %d entry points", where, LG_MAX_ENTRIES);
	p->nentries = n;
	for (int e = 0; e < n; e++) {
		lg_status st = entry_from_json(cJSON_GetArrayItem(entries, e), s, p, e, where);
		if (st != LG_OK)
			return st;
	}
	for (int e = 0; e < n; e++)
		if (!same_geometry(f, p, e, cJSON_GetArrayItem(entries, e)))
			return lg_fail(LG_ERR_SPEC, "%s.entries[%d]: the launch geometry recorded differs from what lingen %s computes: rebuild the bundle with this lingen",
				       where, e, lg_version());
	return LG_OK;
}

/* ------------------------------------------------------------- items */

/* Fill an item from its spec (JSON text) and plan (JSON object). */
static lg_status item_init(struct item *it, const char *spec_json, const cJSON *plan, const char *arch,
			   const char *where)
{
	lg_spec *s = NULL;
	lg_status st = lg_spec_parse(spec_json, &s);
	if (st != LG_OK) {
		char msg[LG_ERROR_MAX / 2];
		snprintf(msg, sizeof msg, "%s", lg_last_error());
		return lg_fail(LG_ERR_SPEC, "%s.spec: %s", where, msg);
	}
	struct lg_target t;
	char pwhere[256];
	snprintf(pwhere, sizeof pwhere, "%s.plan", where);
	if (!lg_target_parse(arch, &t))
		st = lg_fail(LG_ERR_SPEC, "%s.arch: '%s' is not an arch (expected sm_<NN>[a])", where, arch);
	else
		st = plan_from_json(plan, s, &it->plan, pwhere);
	if (st == LG_OK) {
		it->canon = lg_spec_to_json(s);
		it->entry = strdup(s->entry);
		it->arch = strdup(t.name);
		if (!it->canon || !it->entry || !it->arch)
			st = lg_fail(LG_ERR_NO_MEMORY, "out of memory reading %s", where);
	}
	lg_spec_free(s);
	return st;
}

/* Count distinct entries and list the archs, for the missing-kernel message. */
static void summarise(lg_bundle *b)
{
	size_t len = 0;
	for (size_t i = 0; i < b->n; i++) {
		bool seen_entry = false, seen_arch = false;
		for (size_t j = 0; j < i; j++) {
			seen_entry |= strcmp(b->items[j].entry, b->items[i].entry) == 0;
			seen_arch |= strcmp(b->items[j].arch, b->items[i].arch) == 0;
		}
		b->nkernels += !seen_entry;
		if (!seen_arch && len + strlen(b->items[i].arch) + 3 < sizeof b->archs)
			len += (size_t)snprintf(b->archs + len, sizeof b->archs - len, "%s%s", len ? ", " : "",
						b->items[i].arch);
	}
	if (!len)
		snprintf(b->archs, sizeof b->archs, "none");
}

static lg_bundle *bundle_new(size_t n)
{
	lg_bundle *b = calloc(1, sizeof *b);
	if (b && n && !(b->items = calloc(n, sizeof *b->items))) {
		free(b);
		return NULL;
	}
	return b;
}

/* ------------------------------------------------------- folder bundles */

/* One element of "kernels". */
static lg_status manifest_item(const char *dir, const cJSON *k, struct item *it, const char *where)
{
	const cJSON *spec = cJSON_GetObjectItemCaseSensitive(k, "spec");
	const char *arch = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(k, "arch"));
	const char *file = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(k, "file"));
	const char *sum = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(k, "checksum"));
	int64_t size;
	char *end = NULL;
	if (!cJSON_IsObject(spec) || !arch || !file || !sum || !get_int(k, "size", 1, INT64_C(1) << 32, &size))
		return lg_fail(LG_ERR_SPEC, "%s: expected \"spec\", \"arch\", \"file\", \"size\" and \"checksum\"",
			       where);
	if (strchr(file, '/') || file[0] == '.')
		return lg_fail(LG_ERR_SPEC, "%s.file: '%s' must be a file name inside the bundle", where, file);
	it->checksum = strtoull(sum, &end, 16);
	if (strlen(sum) != 16 || *end)
		return lg_fail(LG_ERR_SPEC, "%s.checksum: expected 16 hex digits, found '%s'", where, sum);
	it->size = (size_t)size;
	char *spec_json = cJSON_PrintUnformatted(spec);
	if (!spec_json || asprintf(&it->file, "%s/%s", dir, file) < 0) {
		it->file = NULL;
		free(spec_json);
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory reading %s", where);
	}
	lg_status st = item_init(it, spec_json, cJSON_GetObjectItemCaseSensitive(k, "plan"), arch, where);
	free(spec_json);
	return st;
}

static lg_status manifest_parse(lg_bundle *b, const char *dir, const char *path, const cJSON *m)
{
	int64_t format = 0;
	const cJSON *ks = cJSON_GetObjectItemCaseSensitive(m, "kernels");
	if (!cJSON_IsObject(m))
		return lg_fail(LG_ERR_SPEC, "%s: not a JSON object: not a lingen bundle manifest", path);
	if (!get_int(m, "format", 0, 1000, &format) || format != LG_MANIFEST_FORMAT)
		return lg_fail(LG_ERR_SPEC, "%s: manifest format %lld, this lingen (%s) reads format %d: rebuild the bundle with lingen build",
			       path, (long long)format, lg_version(), LG_MANIFEST_FORMAT);
	if (!cJSON_IsArray(ks))
		return lg_fail(LG_ERR_SPEC, "%s: expected a \"kernels\" array", path);
	size_t n = (size_t)cJSON_GetArraySize(ks);
	if (n && !(b->items = calloc(n, sizeof *b->items)))
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory reading %s", path);
	for (size_t i = 0; i < n; i++) {
		char where[WHERE_MAX];
		snprintf(where, sizeof where, "%s: kernels[%zu]", path, i);
		b->n = i + 1;
		lg_status st = manifest_item(dir, cJSON_GetArrayItem(ks, (int)i), &b->items[i], where);
		if (st != LG_OK)
			return st;
	}
	return LG_OK;
}

lg_status lg_bundle_open(const char *dir, lg_bundle **out)
{
	*out = NULL;
	char *path = NULL;
	if (asprintf(&path, "%s/manifest.json", dir) < 0)
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory opening bundle %s", dir);
	size_t len = 0;
	char *text = NULL;
	lg_status st = lg_read_file_max(path, (size_t)64 << 20, &text, &len);
	if (st != LG_OK) {
		lg_fail_prefix(st, "cannot read bundle manifest ");
		lg_fail_append(" (is %s a bundle made by lingen build?)", dir);
		free(path);
		return st;
	}
	lg_bundle *b = bundle_new(0);
	cJSON *m = NULL;
	if (!b || asprintf(&b->where, "bundle %s", dir) < 0)
		st = lg_fail(LG_ERR_NO_MEMORY, "out of memory opening bundle %s", dir);
	else if (!(m = cJSON_ParseWithLength(text, len)))
		st = lg_fail(LG_ERR_SPEC, "%s: not valid JSON (near byte %lld)", path,
			     (long long)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - text : 0));
	else
		st = manifest_parse(b, dir, path, m);
	cJSON_Delete(m);
	free(text);
	free(path);
	if (st != LG_OK) {
		lg_bundle_free(b);
		return st;
	}
	summarise(b);
	lg_log("bundle %s: %zu cubins (%zu kernels for %s)", dir, b->n, b->nkernels, b->archs);
	*out = b;
	return LG_OK;
}

/* ---------------------------------------------------- embedded tables */

lg_status lg_bundle_from_aot(const struct lg_aot_table *t, lg_bundle **out)
{
	*out = NULL;
	if (t->format != LG_AOT_FORMAT)
		return lg_fail(LG_ERR_SPEC, "embedded bundle (lingen aot): format %d, this lingen (%s) reads format %d: regenerate it with lingen aot",
			       t->format, lg_version(), LG_AOT_FORMAT);
	lg_bundle *b = bundle_new(t->count);
	if (!b || !(b->where = strdup("the embedded bundle (lingen aot)"))) {
		lg_bundle_free(b);
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory reading the embedded bundle");
	}
	lg_status st = LG_OK;
	for (size_t i = 0; st == LG_OK && i < t->count; i++) {
		const struct lg_aot_entry *e = &t->entries[i];
		char where[96];
		snprintf(where, sizeof where, "embedded bundle: entries[%zu]", i);
		b->n = i + 1;
		cJSON *plan = e->plan ? cJSON_Parse(e->plan) : NULL;
		if (!e->spec || !e->arch || !e->cubin || !e->size || !plan)
			st = lg_fail(LG_ERR_SPEC, "%s: expected spec, arch, plan (JSON) and cubin", where);
		else
			st = item_init(&b->items[i], e->spec, plan, e->arch, where);
		cJSON_Delete(plan);
		b->items[i].data = e->cubin;
		b->items[i].size = e->size;
		b->items[i].checksum = e->checksum;
	}
	if (st != LG_OK) {
		lg_bundle_free(b);
		return st;
	}
	summarise(b);
	*out = b;
	return LG_OK;
}

/* --------------------------------------------------------------- lookup */

static lg_status missing(const lg_bundle *b, const char *entry, const char *arch, const char *why)
{
	return lg_fail(LG_ERR_MISSING, "%s for %s is not in %s%s (it holds %zu kernel%s for archs %s); rebuild it with lingen build",
		       entry, arch, b->where, why, b->nkernels, b->nkernels == 1 ? "" : "s", b->archs);
}

/* The cubin bytes of an item, checked against size and checksum. */
static lg_status item_cubin(const lg_bundle *b, const struct item *it, void **cubin, size_t *size)
{
	void *data = NULL;
	size_t n = it->size;
	if (it->data) {
		if (!(data = malloc(n)))
			return lg_fail(LG_ERR_NO_MEMORY, "out of memory");
		memcpy(data, it->data, n);
	} else {
		char *text;
		lg_status st = lg_read_file_max(it->file, (size_t)256 << 20, &text, &n);
		if (st != LG_OK) {
			lg_fail_append(" (in %s)", b->where);
			return lg_fail_prefix(st, "cannot read ");
		}
		data = text;
	}
	uint64_t sum = XXH3_64bits(data, n);
	if (n != it->size || sum != it->checksum) {
		free(data);
		return lg_fail(LG_ERR_IO, "%s (%s for %s) in %s is corrupt: %zu bytes with checksum %016llx, the manifest says %zu bytes with checksum %016llx; rebuild the bundle",
			       it->file ? it->file : it->entry, it->entry, it->arch, b->where, n,
			       (unsigned long long)sum, it->size, (unsigned long long)it->checksum);
	}
	*cubin = data;
	*size = n;
	return LG_OK;
}

lg_status lg_bundle_get(const lg_bundle *b, const char *canon, const char *entry, const char *arch,
			struct lg_plan *plan, void **cubin, size_t *size)
{
	for (size_t i = 0; i < b->n; i++) {
		const struct item *it = &b->items[i];
		if (strcmp(it->entry, entry) != 0 || strcmp(it->arch, arch) != 0)
			continue;
		if (strcmp(it->canon, canon) != 0)
			return missing(b, entry, arch, " with this spec (another spec has that entry name)");
		lg_status st = item_cubin(b, it, cubin, size);
		if (st == LG_OK)
			*plan = it->plan;
		return st;
	}
	return missing(b, entry, arch, "");
}
