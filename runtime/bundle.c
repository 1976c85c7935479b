/*
 * bundle.c - deployment bundles (bundle.h): reading manifest.json or an
 * embedded lg_aot_table, and looking kernels up in it. No NVRTC, no cache.
 *
 * manifest.json, format 3 (written by `lingen build`, tools/cmd_build.c):
 *   { "format": 3, "lingen": "0.1.0", "nvrtc": "13.0",
 *     "archs": ["sm_90a", "sm_80"],
 *     "kernels": [ {
 *       "spec": { canonical spec object },
 *       "entry": "lg_op_fwd_bf16_h2048",            entry-point base name
 *       "arch": "sm_90a",
 *       "file": "lg_op_fwd_bf16_h2048.sm_90a.cubin",       relative to the folder
 *       "size": 12345,                               bytes
 *       "checksum": "0123456789abcdef",              lg_bundle_checksum: XXH3-64 of the file
 *                                                    seeded by spec, entry, arch and the plan's
 *                                                    given tile; 16 hex digits
 *       "plan": {                                    what the cubin was generated with
 *         "given": {"threads": 256},     the tile planned from (spec or tuning; {}: heuristic)
 *         "tile": {"rows": 8, "threads": 256},  the tile chosen, every tile key of the family
 *         "used": [1, 1, 1, 1],          which arguments the kernel uses
 *         "entries": [ { "name": "lg_op_fwd_bf16_h2048",
 *                        "block": [256, 1, 1], "smem": 0, "cluster": 0,
 *                        "persistent": false, "per_sm": 0, "early": false, "part": 0,
 *                        "grid_at_1": [1, 1, 1], "grid_at_8192": [1024, 1, 1] } ],
 *         "tmaps": [ {"arg": "x", "box": [64, 128], "swizzle": 128} ]  TMA tensor maps
 *                                        built at launch (only when the plan has some; "cols":
 *                                        "tokens" where a row is shorter than its pitch) } } ] }
 *   The grid of an entry point is the family's geometry() of the plan and the
 *   run-time sizes (persistent entries are capped at what is co-resident on
 *   the device, known only at load, counting at most per_sm CTAs an SM when
 *   it is not 0); grid_at_1 and grid_at_8192 show it at
 *   every size 1 and 8192. Formats 1 and 2 are not read.
 *   Optional "skipped": [{"entry", "arch", "why"}]: the kernel x arch pairs the
 *   build left out because the kernel's family does not run on that arch (the
 *   FP8 GEMMs on sm_80); asking for one names the reason.
 *
 * The loader never trusts a stored plan: it plans the spec again with the
 * recorded "given" tile (so a tuning file on the deployment machine cannot
 * change the launch of a pre-built cubin), every value checked as a spec's
 * would be, and the result must equal the whole record (entries, geometry,
 * tile, used): a bundle made by another lingen is turned down, not misread.
 * An embedded table holds the same fields, the spec and plan as JSON text.
 *
 * index.lgb and the cubin file it names, what the loader reads first when a
 * bundle has them: bundle_index.c.
 *
 * For the manifest and the index: "lingen" must be this lingen's version, "nvrtc" a version, "archs" the
 * archs (each once) that every record's arch is one of; a bundle holds at
 * most LG_BUNDLE_MAX_ITEMS records, each entry x arch once (an index by
 * hash: loading and lookups are linear and constant in the records).
 */
#include "bundle.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "bundle_impl.h"
#include "bundle_pack.h"
#include "error.h"
#include "file.h"
#include "generate.h"
#include "json.h"
#include "log.h"

void lg_bundle_free(lg_bundle *b)
{
	if (!b)
		return;
	for (size_t i = 0; i < b->n; i++) {
		free(b->items[i].file);
		if (b->items[i].indexed)
			continue;
		free(b->items[i].canon);
		free(b->items[i].entry);
		free(b->items[i].arch);
		free(b->items[i].given);
	}
	free(b->index);
	lg_pack_unmap(&b->pack);
	free(b->items);
	free(b->slot);
	cJSON_Delete(b->skipped);
	free(b->where);
	free(b);
}

/* ------------------------------------------------ the plan, checked */

/* Is the recorded plan o (its JSON) the plan p this lingen makes? */
static bool same_plan(const struct lg_spec *s, const struct lg_plan *p, const cJSON *o)
{
	cJSON *mine = lg_plan_to_json(s, p);
	bool same = mine && cJSON_Compare(mine, o, true);
	cJSON_Delete(mine);
	return same;
}

/* Plan spec s for target t with the recorded "given" tile (a JSON object;
 * every value checked as a spec's would be). */
static lg_status replan(const cJSON *given, const struct lg_spec *s, const struct lg_target *t,
			struct lg_plan *p, const char *where)
{
	const struct lg_family *f = s->fam;
	struct lg_spec planned = *s;
	lg_status st = LG_OK;
	if (given->child) {
		struct lg_jreader r;
		struct lg_tile_choice c;
		lg_json_init(&r, where);
		size_t mark = lg_json_push_key(&r, "given");
		st = lg_keys_parse_tile(&r, given, f, &c);
		lg_json_pop(&r, mark);
		if (st == LG_OK)
			st = lg_spec_with_tile(s, &c, &planned);
	}
	if (st == LG_OK)
		st = lg_spec_check(&planned, where);
	if (st != LG_OK)
		return st;
	if (lg_plan_for(&planned, t, p) != LG_OK) {
		char msg[LG_ERROR_MAX / 2];
		snprintf(msg, sizeof msg, "%s", lg_last_error());
		return lg_fail(LG_ERR_SPEC, "%s: the recorded plan does not plan for %s: %s", where, t->name, msg);
	}
	return LG_OK;
}

/* The plan of spec s for target t as recorded in o: re-planned here from
 * the spec and the recorded "given" tile, then compared with the whole
 * record. */
static lg_status plan_from_json(const cJSON *o, const struct lg_spec *s, const struct lg_target *t,
				struct lg_plan *p, const char *where)
{
	const cJSON *given = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, "given") : NULL;
	if (!cJSON_IsObject(given))
		return lg_fail(LG_ERR_SPEC, "%s: expected an object with \"given\", \"tile\", \"used\" and \"entries\"",
			       where);
	lg_status st = replan(given, s, t, p, where);
	if (st != LG_OK)
		return st;
	if (!same_plan(s, p, o))
		return lg_fail(LG_ERR_SPEC, "%s: the launch plan recorded differs from what lingen %s computes: rebuild the bundle with this lingen",
			       where, lg_version());
	return LG_OK;
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

/* ------------------------------------------------------------- items */

/* The spec of a record: from its JSON object (a manifest: no text printed
 * and parsed again) or its JSON text (an embedded table), read as a spec
 * file's kernel is. */
static lg_status item_spec(const cJSON *obj, const char *text, struct lg_spec *out)
{
	if (!obj) {
		lg_spec *s = NULL;
		lg_status st = lg_spec_parse(text, &s);
		if (st == LG_OK)
			*out = *s;
		lg_spec_free(s);
		return st;
	}
	struct lg_jreader r;
	lg_json_init(&r, NULL);
	return lg_spec_from_json(&r, obj, out);
}

/* Fill an item from its spec (a JSON object, or else JSON text) and plan
 * (JSON object). */
static lg_status item_init(struct item *it, const cJSON *spec_obj, const char *spec_json, const cJSON *plan,
			   const char *arch, const char *where)
{
	struct lg_spec spec, *s = &spec;
	lg_status st = item_spec(spec_obj, spec_json, &spec);
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
		st = plan_from_json(plan, s, &t, &it->plan, pwhere);
	if (st == LG_OK) {
		it->canon = lg_spec_to_json(s);
		it->entry = strdup(s->entry);
		it->arch = strdup(t.name);
		it->given = lg_plan_given_json(s, &it->plan);
		if (!it->canon || !it->entry || !it->arch || !it->given)
			st = lg_fail(LG_ERR_NO_MEMORY, "out of memory reading %s", where);
	}
	return st;
}

/* ------------------------------------------------------------- index */

/* The index of items by entry x arch: open addressing on their XXH3, so
 * loading n records and each lookup take time linear in n and constant. */
static size_t *find_slot(const lg_bundle *b, const char *entry, const char *arch)
{
	XXH3_state_t st;
	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, entry, strlen(entry) + 1);
	XXH3_64bits_update(&st, arch, strlen(arch) + 1);
	size_t mask = b->nslot - 1;
	for (size_t i = (size_t)XXH3_64bits_digest(&st) & mask;; i = (i + 1) & mask) {
		size_t *sl = &b->slot[i];
		if (!*sl)
			return sl;
		const struct item *it = &b->items[*sl - 1];
		if (strcmp(it->entry, entry) == 0 && strcmp(it->arch, arch) == 0)
			return sl;
	}
}

/* Room for n items: the items and an index at most half full. */
lg_status lg_bundle_alloc(lg_bundle *b, size_t n, const char *where)
{
	if (n > LG_BUNDLE_MAX_ITEMS)
		return lg_fail(LG_ERR_SPEC, "%s: found %zu cubins, allowed: at most %d", where, n, LG_BUNDLE_MAX_ITEMS);
	b->nslot = 16;
	while (b->nslot < 2 * n)
		b->nslot *= 2;
	b->slot = calloc(b->nslot, sizeof *b->slot);
	b->items = calloc(n ? n : 1, sizeof *b->items);
	if (!b->slot || !b->items)
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory reading %s", where);
	return LG_OK;
}

/* Index item i; a second record of the same entry and arch is refused. */
lg_status lg_bundle_add(lg_bundle *b, size_t i, const char *where)
{
	const struct item *it = &b->items[i];
	size_t *sl = find_slot(b, it->entry, it->arch);
	if (*sl)
		return lg_fail(LG_ERR_SPEC, "%s: %s for %s is recorded twice (also record %zu), allowed: once",
			       where, it->entry, it->arch, *sl - 1);
	*sl = i + 1;
	return LG_OK;
}

/* Count distinct entries and list the archs, for the missing-kernel
 * message: an entry is new at the first item of it in any listed arch. */
static lg_status summarise(lg_bundle *b)
{
	const char *arch[LG_BUNDLE_MAX_ARCHS];
	size_t narch = 0, len = 0;
	for (size_t i = 0; i < b->n; i++) {
		bool seen_entry = false, seen_arch = false;
		for (size_t a = 0; a < narch; a++) {
			const size_t *sl = find_slot(b, b->items[i].entry, arch[a]);
			seen_entry |= *sl && *sl - 1 < i;
			seen_arch |= strcmp(arch[a], b->items[i].arch) == 0;
		}
		b->nkernels += !seen_entry;
		if (seen_arch)
			continue;
		if (narch == LG_BUNDLE_MAX_ARCHS)
			return lg_fail(LG_ERR_SPEC, "%s: cubins for more than %d archs", b->where, LG_BUNDLE_MAX_ARCHS);
		arch[narch++] = b->items[i].arch;
		if (len + strlen(b->items[i].arch) + 3 < sizeof b->archs)
			len += (size_t)snprintf(b->archs + len, sizeof b->archs - len, "%s%s", len ? ", " : "",
						b->items[i].arch);
	}
	if (!len)
		snprintf(b->archs, sizeof b->archs, "none");
	return LG_OK;
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
	if (asprintf(&it->file, "%s/%s", dir, file) < 0) {
		it->file = NULL;
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory reading %s", where);
	}
	return item_init(it, spec, NULL, cJSON_GetObjectItemCaseSensitive(k, "plan"), arch, where);
}

/* The NVRTC version a bundle records: "<major>.<minor>", as built. */
static bool nvrtc_version_ok(const char *v)
{
	int major, minor, end = 0;
	return v && strlen(v) < 16 && sscanf(v, "%d.%d%n", &major, &minor, &end) == 2 && !v[end] &&
	       v[0] >= '0' && v[0] <= '9' && major >= 0 && minor >= 0;
}

/* The versions a bundle records: of this lingen, and of an NVRTC. */
lg_status lg_bundle_check_versions(const char *where, const char *lingen, const char *nvrtc)
{
	if (!lingen || strcmp(lingen, lg_version()) != 0)
		return lg_fail(LG_ERR_SPEC, "%s: made by lingen %s, this is lingen %s: rebuild the bundle with this lingen",
			       where, lingen ? lingen : "(no \"lingen\" version)", lg_version());
	if (!nvrtc_version_ok(nvrtc))
		return lg_fail(LG_ERR_SPEC, "%s: nvrtc: found %s, expected the NVRTC version the cubins were built with (\"13.0\")",
			       where, nvrtc ? lg_json_quote(nvrtc).s : "none");
	return LG_OK;
}

/* "format", "lingen", "nvrtc" and "archs" of a manifest. */
static lg_status manifest_header(const char *path, const cJSON *m, const cJSON **archs)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(m, "format");
	if (!cJSON_IsNumber(f) || f->valuedouble != LG_MANIFEST_FORMAT)
		return lg_fail(LG_ERR_SPEC, "%s: manifest format %s%s%s%s, this lingen (%s) reads format %d: rebuild the bundle with lingen build",
			       path, f ? lg_json_show(f).s : "missing", cJSON_IsNumber(f) || !f ? "" : " (",
			       cJSON_IsNumber(f) || !f ? "" : lg_json_type(f), cJSON_IsNumber(f) || !f ? "" : ")",
			       lg_version(), LG_MANIFEST_FORMAT);
	lg_status st = lg_bundle_check_versions(path, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "lingen")),
				      cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "nvrtc")));
	if (st != LG_OK)
		return st;
	*archs = cJSON_GetObjectItemCaseSensitive(m, "archs");
	int n = cJSON_IsArray(*archs) ? cJSON_GetArraySize(*archs) : 0;
	if (n < 1 || n > LG_BUNDLE_MAX_ARCHS)
		return lg_fail(LG_ERR_SPEC, "%s: archs: expected an array of 1 to %d archs (the archs of lingen build --arch)",
			       path, LG_BUNDLE_MAX_ARCHS);
	int i = 0;
	for (const cJSON *a = (*archs)->child; a; a = a->next, i++) {
		struct lg_target t;
		const char *name = cJSON_GetStringValue(a);
		if (!name || !lg_target_parse(name, &t) || strcmp(t.name, name) != 0)
			return lg_fail(LG_ERR_SPEC, "%s: archs[%d]: found %s, expected an arch (sm_<NN>[a])", path, i,
				       lg_json_show(a).s);
		for (const cJSON *b = (*archs)->child; b != a; b = b->next)
			if (strcmp(b->valuestring, name) == 0)
				return lg_fail(LG_ERR_SPEC, "%s: archs[%d]: %s listed twice, allowed: once", path, i, name);
	}
	return LG_OK;
}

static bool has_arch(const cJSON *archs, const char *arch)
{
	for (const cJSON *a = archs->child; a; a = a->next)
		if (strcmp(a->valuestring, arch) == 0)
			return true;
	return false;
}

/* The optional "skipped": the kernel x arch pairs lingen build did not
 * build (their family does not run on that arch), each {"entry", "arch",
 * "why"} strings; kept for the missing-kernel message. */
static lg_status manifest_skipped(lg_bundle *b, const char *path, cJSON *m)
{
	cJSON *sk = cJSON_GetObjectItemCaseSensitive(m, "skipped");
	if (!sk)
		return LG_OK;
	int i = 0;
	for (const cJSON *e = cJSON_IsArray(sk) ? sk->child : NULL; e; e = e->next, i++) {
		const char *keys[] = {"entry", "arch", "why"};
		for (int k = 0; k < 3; k++)
			if (!cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, keys[k])))
				return lg_fail(LG_ERR_SPEC, "%s: skipped[%d].%s: expected a string", path, i, keys[k]);
	}
	if (!cJSON_IsArray(sk))
		return lg_fail(LG_ERR_SPEC, "%s: skipped: found %s, expected an array of {\"entry\", \"arch\", "
			       "\"why\"}", path, lg_json_show(sk).s);
	b->skipped = cJSON_DetachItemViaPointer(m, sk);
	return LG_OK;
}

static lg_status manifest_parse(lg_bundle *b, const char *dir, const char *path, cJSON *m)
{
	const cJSON *archs = NULL;
	if (!cJSON_IsObject(m))
		return lg_fail(LG_ERR_SPEC, "%s: not a JSON object: not a lingen bundle manifest", path);
	lg_status st = manifest_header(path, m, &archs);
	if (st == LG_OK)
		st = manifest_skipped(b, path, m);
	if (st != LG_OK)
		return st;
	const cJSON *ks = cJSON_GetObjectItemCaseSensitive(m, "kernels");
	if (!cJSON_IsArray(ks))
		return lg_fail(LG_ERR_SPEC, "%s: expected a \"kernels\" array", path);
	size_t n = 0;
	for (const cJSON *k = ks->child; k; k = k->next)
		n++;
	if ((st = lg_bundle_alloc(b, n, path)) != LG_OK)
		return st;
	size_t i = 0;
	for (const cJSON *k = ks->child; k; k = k->next, i++) { /* the list, not GetArrayItem: linear */
		char where[WHERE_MAX];
		snprintf(where, sizeof where, "%s: kernels[%zu]", path, i);
		b->n = i + 1;
		if ((st = manifest_item(dir, k, &b->items[i], where)) != LG_OK)
			return st;
		if (!has_arch(archs, b->items[i].arch))
			return lg_fail(LG_ERR_SPEC, "%s.arch: %s is not one of the manifest's archs", where,
				       b->items[i].arch);
		if ((st = lg_bundle_add(b, i, where)) != LG_OK)
			return st;
	}
	return LG_OK;
}

lg_status lg_bundle_open(const char *dir, lg_bundle **out)
{
	*out = NULL;
	lg_bundle *b = calloc(1, sizeof *b);
	bool indexed = false;
	lg_status st = LG_OK;
	if (!b || asprintf(&b->where, "bundle %s", dir) < 0) {
		free(b);
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory opening bundle %s", dir);
	}
	st = lg_bundle_open_index(b, dir, &indexed);
	if (st == LG_OK && indexed)
		st = summarise(b);
	if (st != LG_OK || indexed) {
		if (st != LG_OK) {
			lg_bundle_free(b);
			return st;
		}
		lg_log("bundle %s: %zu cubins (%zu kernels for %s), from its index", dir, b->n, b->nkernels, b->archs);
		*out = b;
		return LG_OK;
	}
	lg_bundle_free(b);
	char *path = NULL;
	if (asprintf(&path, "%s/manifest.json", dir) < 0)
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory opening bundle %s", dir);
	size_t len = 0;
	char *text = NULL;
	st = lg_read_file_max(path, LG_JSON_MAX, &text, &len);
	if (st != LG_OK) {
		lg_fail_prefix(st, "cannot read bundle manifest ");
		lg_fail_append(" (is %s a bundle made by lingen build?)", dir);
		free(path);
		return st;
	}
	b = calloc(1, sizeof *b);
	cJSON *m = NULL;
	struct lg_jreader r;
	lg_json_init(&r, path);
	if (!b || asprintf(&b->where, "bundle %s", dir) < 0)
		st = lg_fail(LG_ERR_NO_MEMORY, "out of memory opening bundle %s", dir);
	else if ((st = lg_json_parse(&r, text, len, &m)) == LG_OK)
		st = manifest_parse(b, dir, path, m);
	cJSON_Delete(m);
	free(text);
	free(path);
	if (st == LG_OK)
		st = summarise(b);
	if (st != LG_OK) {
		lg_bundle_free(b);
		return st;
	}
	lg_log("bundle %s: %zu cubins (%zu kernels for %s)", dir, b->n, b->nkernels, b->archs);
	*out = b;
	return LG_OK;
}

/* ---------------------------------------------------- embedded tables */

lg_status lg_bundle_from_aot(const struct lg_aot_table *t, lg_bundle **out)
{
	*out = NULL;
	const char *where = "embedded bundle (lingen aot)";
	if (t->format != LG_AOT_FORMAT)
		return lg_fail(LG_ERR_SPEC, "%s: format %d, this lingen (%s) reads format %d: regenerate it with lingen aot",
			       where, t->format, lg_version(), LG_AOT_FORMAT);
	lg_status st = lg_bundle_check_versions(where, t->lingen, t->nvrtc);
	if (st != LG_OK)
		return st;
	lg_bundle *b = calloc(1, sizeof *b);
	if (!b || !(b->where = strdup("the embedded bundle (lingen aot)"))) {
		lg_bundle_free(b);
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory reading the embedded bundle");
	}
	st = lg_bundle_alloc(b, t->count, where);
	for (size_t i = 0; st == LG_OK && i < t->count; i++) {
		const struct lg_aot_entry *e = &t->entries[i];
		char at[96];
		snprintf(at, sizeof at, "embedded bundle: entries[%zu]", i);
		b->n = i + 1;
		cJSON *plan = e->plan ? cJSON_Parse(e->plan) : NULL;
		if (!e->spec || !e->arch || !e->cubin || !e->size || !plan)
			st = lg_fail(LG_ERR_SPEC, "%s: expected spec, arch, plan (JSON) and cubin", at);
		else
			st = item_init(&b->items[i], NULL, e->spec, plan, e->arch, at);
		cJSON_Delete(plan);
		b->items[i].data = e->cubin;
		b->items[i].size = e->size;
		b->items[i].checksum = e->checksum;
		if (st == LG_OK)
			st = lg_bundle_add(b, i, at);
	}
	if (st == LG_OK)
		st = summarise(b);
	if (st != LG_OK) {
		lg_bundle_free(b);
		return st;
	}
	*out = b;
	return LG_OK;
}

/* --------------------------------------------------------------- lookup */

static lg_status missing(const lg_bundle *b, const char *entry, const char *arch, const char *why)
{
	for (const cJSON *e = b->skipped ? b->skipped->child : NULL; e; e = e->next) {
		const char *en = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "entry"));
		const char *ar = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "arch"));
		if (strcmp(en, entry) == 0 && strcmp(ar, arch) == 0)
			return lg_fail(LG_ERR_MISSING, "%s for %s is not in %s: lingen build skipped it (%s)", entry,
				       arch, b->where,
				       cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "why")));
	}
	return lg_fail(LG_ERR_MISSING, "%s for %s is not in %s%s (it holds %zu kernel%s for archs %s); rebuild it with lingen build",
		       entry, arch, b->where, why, b->nkernels, b->nkernels == 1 ? "" : "s", b->archs);
}

/* The cubin bytes of an item, checked against size and checksum: in the
 * embedded table or the mapped cubin file (*owned empty), or read from its
 * file into *owned (malloc'd; the caller releases it). */
static lg_status item_cubin(const lg_bundle *b, const struct item *it, const void **cubin, size_t *size,
			    struct lg_blob *owned)
{
	const void *data = it->data;
	char *text = NULL;
	size_t n = it->size;
	if (!data) {
		lg_status st = lg_read_file_max(it->file, (size_t)256 << 20, &text, &n);
		if (st != LG_OK) {
			lg_fail_append(" (in %s)", b->where);
			return lg_fail_prefix(st, "cannot read ");
		}
		data = text;
	}
	uint64_t sum = lg_bundle_checksum(it->canon, it->entry, it->arch, it->given, data, n);
	if (n != it->size || sum != it->checksum) {
		free(text);
		char what[64];
		if (it->file && it->data) /* mapped */
			snprintf(what, sizeof what, "%s at offset %zu", LG_PACK_FILE, (size_t)(it->data - b->pack.base));
		return lg_fail(LG_ERR_IO, "%s (%s for %s) in %s is corrupt, or its record (spec, entry, arch, given tile) changed: %zu bytes with checksum %016llx, its record says %zu bytes with checksum %016llx; rebuild the bundle",
			       it->file && it->data ? what : it->file ? it->file : it->entry, it->entry, it->arch, b->where, n,
			       (unsigned long long)sum, it->size, (unsigned long long)it->checksum);
	}
	*cubin = data;
	*size = n;
	*owned = lg_blob_heap(text);
	return LG_OK;
}

/* The plan of an index's item: the spec (the caller's, whose canonical
 * text is the record's) planned for t with the recorded given tile, its
 * digest the recorded one. */
static lg_status item_plan(const lg_bundle *b, const struct item *it, const struct lg_spec *s,
			   const struct lg_target *t, struct lg_plan *p)
{
	char where[WHERE_MAX];
	snprintf(where, sizeof where, "%s: index.lgb: %s for %s", b->where, it->entry, it->arch);
	cJSON *given = cJSON_Parse(it->given);
	lg_status st = cJSON_IsObject(given) ? replan(given, s, t, p, where)
					     : lg_fail(LG_ERR_SPEC, "%s: given: expected a JSON object, found '%s'", where,
						       it->given);
	cJSON_Delete(given);
	if (st == LG_OK && lg_plan_digest(s, p) != it->digest)
		st = lg_fail(LG_ERR_SPEC, "%s: the launch plan recorded differs from what lingen %s computes: rebuild the bundle with this lingen",
			     where, lg_version());
	return st;
}

lg_status lg_bundle_get(const lg_bundle *b, const struct lg_spec *s, const char *canon, const struct lg_target *t,
			struct lg_plan *plan, const void **cubin, size_t *size, struct lg_blob *owned)
{
	*owned = (struct lg_blob){0};
	const char *entry = s->entry, *arch = t->name;
	const size_t *sl = find_slot(b, entry, arch);
	if (!*sl)
		return missing(b, entry, arch, "");
	const struct item *it = &b->items[*sl - 1];
	if (strcmp(it->canon, canon) != 0)
		return missing(b, entry, arch, " with this spec (another spec has that entry name)");
	struct lg_plan p;
	lg_status st = it->indexed ? item_plan(b, it, s, t, &p) : LG_OK;
	if (st == LG_OK)
		st = item_cubin(b, it, cubin, size, owned);
	if (st == LG_OK)
		*plan = it->indexed ? p : it->plan;
	return st;
}

/* ------------------------------------------------------ linked modules */

uint64_t lg_bundle_linked_checksum(const char *arch, const void *cubin, size_t size)
{
	return lg_bundle_checksum("linked module", "", arch, "", cubin, size);
}

bool lg_bundle_in_linked(const lg_bundle *b, const char *entry, const char *arch)
{
	const size_t *sl = find_slot(b, entry, arch);
	return *sl && b->items[*sl - 1].linked;
}

lg_status lg_bundle_linked(const lg_bundle *b, const struct lg_target *t, const void **cubin, size_t *size)
{
	for (int i = 0; i < b->nlinked; i++) {
		const struct linked *l = &b->linked[i];
		if (strcmp(l->arch, t->name) != 0)
			continue;
		uint64_t sum = lg_bundle_linked_checksum(l->arch, l->data, l->size);
		if (sum != l->checksum)
			return lg_fail(LG_ERR_IO, "the linked module for %s in %s (%s at offset %zu, %zu bytes) is corrupt: checksum %016llx, its record says %016llx; rebuild the bundle",
				       l->arch, b->where, LG_PACK_FILE, (size_t)(l->data - b->pack.base), l->size,
				       (unsigned long long)sum, (unsigned long long)l->checksum);
		*cubin = l->data;
		*size = l->size;
		return LG_OK;
	}
	return lg_fail(LG_ERR_MISSING, "%s has no linked module for %s", b->where, t->name);
}
