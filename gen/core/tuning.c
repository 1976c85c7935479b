/*
 * tuning.c - tuning files (tuning.h): parse and validate with the
 * path-tracking JSON reader, find an entry by a spec's tile-less canonical
 * JSON, add or replace entries, write the file text, and find the file a
 * context should use.
 */
#include "tuning.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "buf.h"
#include "error.h"
#include "file.h"
#include "generate.h"
#include "json.h"

/* Folders searched when nothing names a tuning file (CMake sets them). */
#ifdef LG_TUNING_DIR
static const char *const source_dir = LG_TUNING_DIR;
#else
static const char *const source_dir = NULL;
#endif
#ifdef LG_TUNING_INSTALL_DIR
static const char *const install_dir = LG_TUNING_INSTALL_DIR;
#else
static const char *const install_dir = NULL;
#endif

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const char *const file_keys[] = {"arch", "made_by", "device", "date", "entries"};
static const char *const entry_keys[] = {"key", "tile", "us", "us_default"};
enum { F_ARCH, F_MADE_BY, F_DEVICE, F_DATE, F_ENTRIES };
enum { E_KEY, E_TILE, E_US, E_US_DEFAULT };

/* The lookup key of a spec: its canonical JSON with no tile. */
static char *key_of(const struct lg_spec *s)
{
	struct lg_spec k;
	if (lg_spec_with_tile(s, NULL, &k) != LG_OK)
		return NULL;
	return lg_spec_to_json(&k);
}

/* ---------------------------------------------------------- tables */

lg_status lg_tuning_create(const char *arch, struct lg_tuning **out)
{
	struct lg_target tg;
	*out = NULL;
	if (!arch || !lg_target_parse(arch, &tg))
		return lg_fail(LG_ERR_INVALID_ARG, "unknown arch '%s': expected sm_<NN>[a] with NN >= 80, e.g. sm_90a",
			       arch ? arch : "(null)");
	struct lg_tuning *t = calloc(1, sizeof *t);
	if (!t)
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory");
	snprintf(t->arch, sizeof t->arch, "%s", tg.name);
	*out = t;
	return LG_OK;
}

void lg_tuning_free(struct lg_tuning *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n; i++)
		free(t->e[i].key);
	free(t->e);
	free(t->made_by);
	free(t->device);
	free(t->date);
	free(t->file);
	free(t);
}

lg_status lg_tuning_note(char **field, const char *v)
{
	char *c = v ? strdup(v) : NULL;
	if (v && !c)
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory");
	free(*field);
	*field = c;
	return LG_OK;
}

static struct lg_tuning_entry *find_key(const struct lg_tuning *t, const char *key)
{
	for (size_t i = 0; t && i < t->n; i++)
		if (strcmp(t->e[i].key, key) == 0)
			return &t->e[i];
	return NULL;
}

const struct lg_tuning_entry *lg_tuning_find(const struct lg_tuning *t, const struct lg_spec *s)
{
	if (!t || !s)
		return NULL;
	char *key = key_of(s);
	const struct lg_tuning_entry *e = key ? find_key(t, key) : NULL;
	free(key);
	return e;
}

lg_status lg_tuning_apply(const struct lg_tuning *t, const struct lg_spec *s, struct lg_spec *out)
{
	int tile = lg_family_key(s->fam, "tile");
	*out = *s;
	if (!t || tile < 0 || lg_spec_has(s, tile))
		return LG_OK;
	/* most kernels have no entry: no key text for a family and pass with none */
	bool any = false;
	for (size_t i = 0; i < t->n && !any; i++)
		any = t->e[i].spec.op == s->op && t->e[i].spec.pass == s->pass;
	if (!any)
		return LG_OK;
	char *key = key_of(s);
	if (!key)
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory");
	const struct lg_tuning_entry *e = find_key(t, key);
	free(key);
	return e ? lg_spec_with_tile(s, &e->tile, out) : LG_OK;
}

lg_status lg_tuning_set(struct lg_tuning *t, const struct lg_spec *s, const struct lg_tile_choice *c,
			double us, double us_default)
{
	char *key = key_of(s);
	if (!key)
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory");
	struct lg_tuning_entry *e = find_key(t, key);
	if (e) {
		free(e->key);
	} else {
		if (t->n == t->cap) {
			size_t cap = t->cap ? 2 * t->cap : 16;
			struct lg_tuning_entry *p = realloc(t->e, cap * sizeof *p);
			if (!p) {
				free(key);
				return lg_fail(LG_ERR_NO_MEMORY, "out of memory");
			}
			t->e = p;
			t->cap = cap;
		}
		e = &t->e[t->n++];
	}
	e->key = key;
	if (lg_spec_with_tile(s, NULL, &e->spec) != LG_OK)
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory");
	e->tile = *c;
	e->us = us;
	e->us_default = us_default;
	return LG_OK;
}

bool lg_tuning_remove(struct lg_tuning *t, const struct lg_spec *s)
{
	char *key = key_of(s);
	struct lg_tuning_entry *e = key ? find_key(t, key) : NULL;
	free(key);
	if (!e)
		return false;
	free(e->key);
	size_t i = (size_t)(e - t->e);
	memmove(e, e + 1, (t->n - i - 1) * sizeof *e);
	t->n--;
	return true;
}

/* ---------------------------------------------------------- parsing */

/* An optional string member into *out (a copy). */
static lg_status parse_str(const struct lg_jreader *r, const cJSON *obj, const char *field, char **out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, field);
	if (!v)
		return LG_OK;
	if (!cJSON_IsString(v))
		return lg_json_fail(r, field, "found %s (%s), allowed: a string", lg_json_show(v).s,
				    lg_json_type(v));
	return lg_tuning_note(out, v->valuestring);
}

/* An optional time in microseconds (>= 0) into *out; absent: -1. */
static lg_status parse_us(const struct lg_jreader *r, const cJSON *obj, const char *field, double *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, field);
	*out = -1;
	if (!v)
		return LG_OK;
	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0)
		return lg_json_fail(r, field, "found %s, allowed: a time in microseconds >= 0",
				    lg_json_show(v).s);
	*out = v->valuedouble;
	return LG_OK;
}

static lg_status parse_arch(const struct lg_jreader *r, const cJSON *root, struct lg_tuning *t)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "arch");
	struct lg_target tg;
	if (!v)
		return lg_json_fail(r, "arch", "missing, allowed: an arch name such as \"sm_90a\"");
	if (!cJSON_IsString(v) || !lg_target_parse(v->valuestring, &tg))
		return lg_json_fail(r, "arch", "found %s, allowed: an arch name sm_<NN>[a] with NN >= 80, e.g. \"sm_90a\"",
				    lg_json_show(v).s);
	snprintf(t->arch, sizeof t->arch, "%s", tg.name);
	/* a file named <arch>.json is for that arch */
	const char *base = strrchr(r->file, '/');
	base = base ? base + 1 : r->file;
	size_t n = strlen(base);
	char stem[32];
	if (n > 5 && n - 5 < sizeof stem && strcmp(base + n - 5, ".json") == 0) {
		memcpy(stem, base, n - 5);
		stem[n - 5] = '\0';
		if (lg_target_parse(stem, &tg) && strcmp(stem, t->arch) != 0)
			return lg_json_fail(r, "arch", "found \"%s\", allowed: \"%s\" (the file is named %s)",
					    t->arch, stem, base);
	}
	return LG_OK;
}

/* The family accepts the entry's tile: validate(), then plan() for the
 * file's arch. r is at the entry. */
static lg_status check_tile(const struct lg_jreader *r, const struct lg_tuning_entry *e,
			    const struct lg_target *tg)
{
	struct lg_spec s;
	lg_status st = lg_spec_with_tile(&e->spec, &e->tile, &s);
	if (st != LG_OK)
		return st;
	lg_buf b;
	lg_buf_init(&b);
	lg_emit(&b, "%s: %s", r->file, r->path);
	char *where = lg_buf_finish(&b, NULL);
	if (!where)
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory");
	st = lg_spec_check(&s, where);
	free(where);
	if (st != LG_OK)
		return st;
	struct lg_plan p;
	if (lg_plan_for(&s, tg, &p) == LG_OK)
		return LG_OK;
	char why[512];
	snprintf(why, sizeof why, "%s", lg_last_error());
	return lg_json_fail(r, "tile", "found a tile that does not plan for %s (%s), allowed: a tile the "
				       "family plans for the file's arch", tg->name, why);
}

static lg_status parse_entry(struct lg_jreader *r, const cJSON *v, const struct lg_tuning *t,
			     const struct lg_target *tg, struct lg_tuning_entry *e)
{
	uint32_t seen;
	lg_status st;
	if (!cJSON_IsObject(v))
		return lg_json_fail(r, NULL, "found %s, allowed: an object {\"key\": {...}, \"tile\": {...}, "
					     "\"us\": ..., \"us_default\": ...}", lg_json_show(v).s);
	if ((st = lg_json_check_keys(r, v, entry_keys, COUNT(entry_keys), &seen)) != LG_OK)
		return st;
	if (!((seen >> E_KEY) & 1u) || !((seen >> E_TILE) & 1u))
		return lg_json_fail(r, (seen >> E_KEY) & 1u ? "tile" : "key",
				    "missing, allowed: an entry has a \"key\" (a kernel spec) and a \"tile\"");
	const cJSON *key = cJSON_GetObjectItemCaseSensitive(v, "key");
	size_t mark = lg_json_push_key(r, "key");
	if (cJSON_IsObject(key) && cJSON_GetObjectItemCaseSensitive(key, "tile"))
		st = lg_json_fail(r, "tile", "found %s, allowed: no tile in a key (the entry's \"tile\" holds "
					     "the tuned values)",
				  lg_json_show(cJSON_GetObjectItemCaseSensitive(key, "tile")).s);
	else
		st = lg_spec_from_json(r, key, &e->spec);
	if (st == LG_OK && !(e->key = key_of(&e->spec)))
		st = lg_fail(LG_ERR_NO_MEMORY, "out of memory");
	for (size_t i = 0; st == LG_OK && i < t->n; i++)
		if (strcmp(t->e[i].key, e->key) == 0)
			st = lg_json_fail(r, NULL, "found the key of entries[%zu] again, allowed: one entry per key",
					  i);
	lg_json_pop(r, mark);
	if (st != LG_OK)
		return st;
	mark = lg_json_push_key(r, "tile");
	st = lg_keys_parse_tile(r, cJSON_GetObjectItemCaseSensitive(v, "tile"), e->spec.fam,
				&e->tile);
	lg_json_pop(r, mark);
	if (st == LG_OK)
		st = check_tile(r, e, tg);
	if (st == LG_OK)
		st = parse_us(r, v, "us", &e->us);
	if (st == LG_OK)
		st = parse_us(r, v, "us_default", &e->us_default);
	return st;
}

static lg_status parse_entries(struct lg_jreader *r, const cJSON *arr, struct lg_tuning *t)
{
	struct lg_target tg;
	LG_ASSERT(lg_target_parse(t->arch, &tg));
	if (!arr)
		return lg_json_fail(r, "entries", "missing, allowed: an array of entries (may be empty)");
	if (!cJSON_IsArray(arr))
		return lg_json_fail(r, "entries", "found %s, allowed: an array of entries "
						  "{\"key\": ..., \"tile\": ...}",
				    lg_json_show(arr).s);
	size_t n = (size_t)cJSON_GetArraySize(arr);
	if (n && !(t->e = calloc(n, sizeof *t->e)))
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory");
	t->cap = n;
	size_t mark = lg_json_push_key(r, "entries");
	lg_status st = LG_OK;
	size_t i = 0;
	for (const cJSON *v = arr->child; st == LG_OK && v; v = v->next, i++) {
		size_t m = lg_json_push_index(r, i);
		st = parse_entry(r, v, t, &tg, &t->e[i]);
		if (st == LG_OK)
			t->n++;
		else
			free(t->e[i].key);
		lg_json_pop(r, m);
	}
	lg_json_pop(r, mark);
	return st;
}

lg_status lg_tuning_parse(const char *text, size_t len, const char *file, struct lg_tuning **out)
{
	struct lg_jreader r;
	cJSON *root = NULL;
	uint32_t seen;
	lg_status st;
	*out = NULL;
	lg_json_init(&r, file);
	struct lg_tuning *t = calloc(1, sizeof *t);
	if (!t)
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory");
	if ((st = lg_json_parse(&r, text, len, &root)) != LG_OK)
		goto fail;
	if (!cJSON_IsObject(root)) {
		st = lg_json_fail(&r, NULL, "top level: found %s, allowed: an object {\"arch\": ..., "
					    "\"entries\": [...]}", lg_json_show(root).s);
		goto fail;
	}
	if ((st = lg_json_check_keys(&r, root, file_keys, COUNT(file_keys), &seen)) != LG_OK)
		goto fail;
	if ((st = parse_arch(&r, root, t)) != LG_OK)
		goto fail;
	if ((st = parse_str(&r, root, "made_by", &t->made_by)) != LG_OK ||
	    (st = parse_str(&r, root, "device", &t->device)) != LG_OK ||
	    (st = parse_str(&r, root, "date", &t->date)) != LG_OK)
		goto fail;
	if ((st = parse_entries(&r, cJSON_GetObjectItemCaseSensitive(root, "entries"), t)) != LG_OK)
		goto fail;
	if (file && (st = lg_tuning_note(&t->file, file)) != LG_OK)
		goto fail;
	cJSON_Delete(root);
	*out = t;
	return LG_OK;
fail:
	cJSON_Delete(root);
	lg_tuning_free(t);
	return st;
}

lg_status lg_tuning_load(const char *path, const char *arch, bool missing_ok, struct lg_tuning **out)
{
	char *text = NULL;
	size_t len = 0;
	*out = NULL;
	lg_status st = lg_read_file(path, &text, &len);
	if (st != LG_OK) {
		if (errno == ENOENT && missing_ok) {
			lg_clear_error();
			return LG_OK;
		}
		return lg_fail_prefix(st, "tuning file ");
	}
	st = lg_tuning_parse(text, len, path, out);
	free(text);
	if (st == LG_OK && arch && strcmp((*out)->arch, arch) != 0) {
		st = lg_fail(LG_ERR_SPEC, "%s: arch: found \"%s\", allowed: \"%s\" (the arch compiled for)", path,
			     (*out)->arch, arch);
		lg_tuning_free(*out);
		*out = NULL;
	}
	return st;
}

static bool is_dir(const char *path)
{
	struct stat sb;
	return path && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* <dir>/<arch>.json, loaded when present. */
static lg_status load_from_dir(const char *dir, const char *arch, struct lg_tuning **out)
{
	lg_buf b;
	lg_buf_init(&b);
	lg_emit(&b, "%s%s%s.json", dir, dir[0] && dir[strlen(dir) - 1] == '/' ? "" : "/", arch);
	char *path = lg_buf_finish(&b, NULL);
	if (!path)
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory");
	lg_status st = lg_tuning_load(path, arch, true, out);
	free(path);
	return st;
}

lg_status lg_tuning_open(const char *setting, const char *arch, struct lg_tuning **out)
{
	lg_status st;
	*out = NULL;
	if (setting && strcmp(setting, "off") == 0)
		return LG_OK;
	if (setting)
		st = is_dir(setting) ? load_from_dir(setting, arch, out)
				     : lg_tuning_load(setting, arch, false, out);
	else if (is_dir(source_dir))
		st = load_from_dir(source_dir, arch, out);
	else if (is_dir(install_dir))
		st = load_from_dir(install_dir, arch, out);
	else
		st = LG_OK;
	if (st != LG_OK && st != LG_ERR_NO_MEMORY)
		lg_fail_append("\n(a bad tuning file stops the context: fix it, or set LINGEN_TUNING=off "
			       "to use the heuristics)");
	return st;
}

/* ---------------------------------------------------------- writing */

static void emit_str(lg_buf *b, const char *s)
{
	lg_raw(b, "\"", 1);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			lg_emit(b, "\\%c", c);
		else if (c < 0x20)
			lg_emit(b, "\\u%04x", c);
		else
			lg_raw(b, s, 1);
	}
	lg_raw(b, "\"", 1);
}

static int by_key(const void *a, const void *b)
{
	const struct lg_tuning_entry *const *x = a, *const *y = b;
	return strcmp((*x)->key, (*y)->key);
}

static void emit_entry(lg_buf *b, const struct lg_tuning_entry *e)
{
	const struct lg_family *f = e->spec.fam;
	const char *sep = "";
	lg_emit(b, "    {\"key\": %s, \"tile\": {", e->key);
	for (int k = 0; k < f->nkeys; k++) {
		if (!((e->tile.set >> k) & 1u))
			continue;
		lg_emit(b, "%s\"%s\": %lld", sep, f->keys[k].path + 5, (long long)e->tile.v[k]);
		sep = ", ";
	}
	lg_emit(b, "}");
	if (e->us >= 0)
		lg_emit(b, ", \"us\": %.2f", e->us);
	if (e->us_default >= 0)
		lg_emit(b, ", \"us_default\": %.2f", e->us_default);
	lg_emit(b, "}");
}

char *lg_tuning_to_json(const struct lg_tuning *t)
{
	const struct lg_tuning_entry **order = calloc(t->n ? t->n : 1, sizeof *order);
	if (!order)
		return NULL;
	for (size_t i = 0; i < t->n; i++)
		order[i] = &t->e[i];
	qsort(order, t->n, sizeof *order, by_key);
	lg_buf b;
	lg_buf_init(&b);
	lg_emit(&b, "{\n  \"arch\": \"%s\",\n", t->arch);
	const char *const notes[] = {"made_by", "device", "date"};
	const char *const vals[] = {t->made_by, t->device, t->date};
	for (size_t i = 0; i < COUNT(notes); i++) {
		if (!vals[i])
			continue;
		lg_emit(&b, "  \"%s\": ", notes[i]);
		emit_str(&b, vals[i]);
		lg_emit(&b, ",\n");
	}
	lg_emit(&b, "  \"entries\": [%s", t->n ? "\n" : "");
	for (size_t i = 0; i < t->n; i++) {
		emit_entry(&b, order[i]);
		lg_emit(&b, "%s\n", i + 1 < t->n ? "," : "");
	}
	lg_emit(&b, "%s]\n}\n", t->n ? "  " : "");
	free(order);
	return lg_buf_finish(&b, NULL);
}
