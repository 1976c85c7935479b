/*
 * spec.c - kernel spec files: the file, its kernels' headers (op, pass,
 * dtype); the family's keys are read by schema.c.
 *
 * A spec file is {"name": "...", "kernels": [ {kernel}, ... ]} (docs/architecture.md,
 * "Spec files"). A file written by `lingen expand` also carries "model" (the
 * model config's name) and "skipped" (the kernels of the training step whose
 * families do not exist yet): both are validated and otherwise ignored.
 * Each kernel is read in a fixed order: its op first (which picks the
 * family), its pass and dtype against the family's, then the keys the
 * family declares (schema.c), and last the family's own validate(). Every message names the file, the JSON path,
 * what was found and what is allowed; nothing here keeps global state.
 * The layers below: schema.c (a family's keys), names.c (the enum names).
 */
#include "spec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "error.h"
#include "family.h"
#include "file.h"
#include "json.h"

static const char *const file_keys[] = {"name", "model", "kernels", "skipped"};
static const char *const skip_keys[] = {"op", "pass", "why", "arch"};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

struct lg_spec_file {
	char *name;
	size_t count;
	struct lg_spec *specs;
};

/* ------------------------------------------------------ kernel values */

static const cJSON *member(const cJSON *obj, const char *key)
{
	return cJSON_GetObjectItemCaseSensitive(obj, key);
}

static lg_status parse_op(const struct lg_jreader *r, const cJSON *k, enum lg_op *op)
{
	const cJSON *v = member(k, "op");
	int i = 0;
	if (!v) {
		lg_status st = lg_json_fail(r, "op", "missing, allowed: ");
		lg_json_append_names(lg_op_names, LG_OP_COUNT, ~0u, true);
		return st;
	}
	lg_status st = lg_json_enum(r, "op", v, lg_op_names, LG_OP_COUNT, ~0u, "", &i);
	*op = (enum lg_op)i;
	return st;
}

/* A required string member naming one of names[] allowed by mask. */
static lg_status parse_name(const struct lg_jreader *r, const cJSON *k, const char *key,
			    const char *const *names, size_t n, uint32_t mask,
			    const struct lg_family *f, int *out)
{
	char qual[64];
	snprintf(qual, sizeof qual, " for op %s", f->op);
	const cJSON *v = member(k, key);
	if (!v) {
		lg_status st = lg_json_fail(r, key, "missing, allowed%s: ", qual);
		lg_json_append_names(names, n, mask, true);
		return st;
	}
	return lg_json_enum(r, key, v, names, n, mask, qual, out);
}

/* "<file>: <path>" as a family's validate() wants it; NULL if out of memory. */
static char *where_of(const struct lg_jreader *r)
{
	lg_buf b;
	lg_buf_init(&b);
	lg_emit(&b, "%s: %s", r->file, r->path);
	return lg_buf_finish(&b, NULL);
}

static lg_status parse_kernel(struct lg_jreader *r, const cJSON *k, struct lg_spec *s)
{
	lg_status st;
	int i = 0;
	memset(s, 0, sizeof *s);
	if (!cJSON_IsObject(k))
		return lg_json_fail(r, NULL, "found %s, allowed: an object {\"op\": ..., \"pass\": ..., ...}",
				    lg_json_show(k).s);
	if ((st = parse_op(r, k, &s->op)) != LG_OK)
		return st;
	const struct lg_family *f = s->fam = lg_family_get(s->op);
	if ((st = parse_name(r, k, "pass", lg_pass_names, LG_PASS_COUNT, f->passes, f, &i)) != LG_OK)
		return st;
	s->pass = (enum lg_pass)i;
	if ((st = parse_name(r, k, "dtype", lg_dtype_names, LG_DTYPE_COUNT, f->dtypes, f, &i)) != LG_OK)
		return st;
	s->dtype = (enum lg_dtype)i;
	if ((st = lg_keys_parse(r, k, f, s)) != LG_OK)
		return st;
	char *where = where_of(r);
	if (!where)
		return lg_fail(LG_ERR_NO_MEMORY, "%s: out of memory", r->file);
	st = f->validate ? f->validate(s, where) : LG_OK;
	free(where);
	if (st != LG_OK)
		return st;
	lg_spec_make_entry(s);
	if (!s->entry[0])
		return lg_fail(LG_ERR_NO_MEMORY, "%s: out of memory", r->file);
	return LG_OK;
}

lg_status lg_spec_from_json(struct lg_jreader *r, const cJSON *k, struct lg_spec *s)
{
	return parse_kernel(r, k, s);
}

/* ------------------------------------------------------------- files */

static lg_status parse_kernels(struct lg_jreader *r, const cJSON *arr, lg_spec_file *f)
{
	size_t mark = lg_json_push_key(r, "kernels");
	lg_status st = LG_OK;
	size_t n = 0;
	for (const cJSON *k = arr ? arr->child : NULL; k; k = k->next)
		n++;
	if (!arr)
		st = lg_json_fail(r, NULL, "missing, allowed: an array of kernel objects");
	else if (!cJSON_IsArray(arr))
		st = lg_json_fail(r, NULL, "found %s, allowed: an array of kernel objects",
				  lg_json_show(arr).s);
	else if (n == 0)
		st = lg_json_fail(r, NULL, "found an empty array, allowed: an array of at least one kernel object");
	else if (!(f->specs = calloc(n, sizeof *f->specs)))
		st = lg_fail(LG_ERR_NO_MEMORY, "%s: out of memory", r->file);
	size_t i = 0;
	for (const cJSON *k = st == LG_OK ? arr->child : NULL; st == LG_OK && k; k = k->next, i++) {
		size_t m = lg_json_push_index(r, i);
		st = parse_kernel(r, k, &f->specs[i]);
		lg_json_pop(r, m);
	}
	f->count = st == LG_OK ? n : 0;
	lg_json_pop(r, mark);
	return st;
}

/* A required string member of the current object. */
static lg_status need_string(const struct lg_jreader *r, const cJSON *obj, const char *key)
{
	const cJSON *v = member(obj, key);
	if (!v)
		return lg_json_fail(r, key, "missing, allowed: a string");
	if (!cJSON_IsString(v) || !v->valuestring[0])
		return lg_json_fail(r, key, "found %s (%s), allowed: a non-empty string",
				    lg_json_show(v).s, lg_json_type(v));
	return LG_OK;
}

/* One item of "skipped": {"op": string, "pass": "forward"|"backward", "why": string}
 * and, for a kernel left out for one arch only, "arch": string. */
static lg_status parse_skip(struct lg_jreader *r, const cJSON *item)
{
	uint32_t seen;
	int pass;
	lg_status st;
	if (!cJSON_IsObject(item))
		return lg_json_fail(r, NULL, "found %s, allowed: an object {\"op\": ..., \"pass\": ..., "
					     "\"why\": ...}", lg_json_show(item).s);
	if ((st = lg_json_check_keys(r, item, skip_keys, COUNT(skip_keys), &seen)) != LG_OK)
		return st;
	if ((st = need_string(r, item, "op")) != LG_OK)
		return st;
	const cJSON *v = member(item, "pass");
	if (!v) {
		st = lg_json_fail(r, "pass", "missing, allowed: ");
		lg_json_append_names(lg_pass_names, LG_PASS_COUNT, ~0u, true);
		return st;
	}
	if ((st = lg_json_enum(r, "pass", v, lg_pass_names, LG_PASS_COUNT, ~0u, "", &pass)) != LG_OK)
		return st;
	if (member(item, "arch") && (st = need_string(r, item, "arch")) != LG_OK)
		return st;
	return need_string(r, item, "why");
}

/* "skipped": the kernels a model expansion could not generate yet. They are
 * validated and otherwise ignored: a record for the reader of the file. */
static lg_status parse_skipped(struct lg_jreader *r, const cJSON *arr)
{
	if (!arr)
		return LG_OK;
	size_t mark = lg_json_push_key(r, "skipped");
	lg_status st = LG_OK;
	if (!cJSON_IsArray(arr))
		st = lg_json_fail(r, NULL, "found %s, allowed: an array of {\"op\", \"pass\", \"why\"} "
					   "objects", lg_json_show(arr).s);
	size_t i = 0;
	for (const cJSON *k = st == LG_OK ? arr->child : NULL; st == LG_OK && k; k = k->next, i++) {
		size_t m = lg_json_push_index(r, i);
		st = parse_skip(r, k);
		lg_json_pop(r, m);
	}
	lg_json_pop(r, mark);
	return st;
}

static lg_status parse_file(struct lg_jreader *r, const cJSON *root, lg_spec_file *f)
{
	uint32_t seen;
	lg_status st;
	if (!cJSON_IsObject(root))
		return lg_json_fail(r, NULL, "top level: found %s, allowed: an object "
					     "{\"name\": ..., \"kernels\": [...]}", lg_json_show(root).s);
	if ((st = lg_json_check_keys(r, root, file_keys, COUNT(file_keys), &seen)) != LG_OK)
		return st;
	const cJSON *name = member(root, "name");
	if (name && !cJSON_IsString(name))
		return lg_json_fail(r, "name", "found %s (%s), allowed: a string",
				    lg_json_show(name).s, lg_json_type(name));
	const cJSON *model = member(root, "model");
	if (model && !cJSON_IsString(model))
		return lg_json_fail(r, "model", "found %s (%s), allowed: a string",
				    lg_json_show(model).s, lg_json_type(model));
	if (!(f->name = strdup(name ? name->valuestring : "")))
		return lg_fail(LG_ERR_NO_MEMORY, "%s: out of memory", r->file);
	if ((st = parse_kernels(r, member(root, "kernels"), f)) != LG_OK)
		return st;
	return parse_skipped(r, member(root, "skipped"));
}

lg_status lg_spec_file_parse(const char *text, size_t len, const char *filename,
			     lg_spec_file **out)
{
	lg_clear_error();
	if (!out || (!text && len))
		return lg_fail(LG_ERR_INVALID_ARG, "lg_spec_file_parse: NULL argument");
	*out = NULL;
	struct lg_jreader r;
	lg_json_init(&r, filename);
	cJSON *root = NULL;
	lg_spec_file *f = calloc(1, sizeof *f);
	lg_status st;
	if (!f) {
		st = lg_fail(LG_ERR_NO_MEMORY, "%s: out of memory", r.file);
		goto fail;
	}
	if ((st = lg_json_parse(&r, text ? text : "", len, &root)) != LG_OK)
		goto fail;
	if ((st = parse_file(&r, root, f)) != LG_OK)
		goto fail;
	cJSON_Delete(root);
	*out = f;
	return LG_OK;
fail:
	cJSON_Delete(root);
	lg_spec_file_free(f);
	return st;
}

lg_status lg_spec_file_load(const char *path, lg_spec_file **out)
{
	lg_clear_error();
	if (!path || !out)
		return lg_fail(LG_ERR_INVALID_ARG, "lg_spec_file_load: NULL argument");
	*out = NULL;
	char *text = NULL;
	size_t len = 0;
	lg_status st = lg_read_file(path, &text, &len);
	if (st != LG_OK)
		return st;
	st = lg_spec_file_parse(text, len, path, out);
	free(text);
	return st;
}

void lg_spec_file_free(lg_spec_file *f)
{
	if (!f)
		return;
	free(f->name);
	free(f->specs);
	free(f);
}

size_t lg_spec_file_count(const lg_spec_file *f)
{
	return f ? f->count : 0;
}

const lg_spec *lg_spec_file_get(const lg_spec_file *f, size_t i)
{
	return f && i < f->count ? &f->specs[i] : NULL;
}

const char *lg_spec_file_name(const lg_spec_file *f)
{
	return f && f->name ? f->name : "";
}

lg_status lg_spec_parse(const char *json, lg_spec **out)
{
	lg_clear_error();
	if (!json || !out)
		return lg_fail(LG_ERR_INVALID_ARG, "lg_spec_parse: NULL argument");
	*out = NULL;
	struct lg_jreader r;
	lg_json_init(&r, NULL);
	cJSON *root = NULL;
	lg_spec *s = malloc(sizeof *s);
	lg_status st;
	if (!s) {
		st = lg_fail(LG_ERR_NO_MEMORY, "%s: out of memory", r.file);
		goto fail;
	}
	if ((st = lg_json_parse(&r, json, strlen(json), &root)) != LG_OK)
		goto fail;
	if ((st = parse_kernel(&r, root, s)) != LG_OK)
		goto fail;
	cJSON_Delete(root);
	*out = s;
	return LG_OK;
fail:
	cJSON_Delete(root);
	free(s);
	return st;
}

void lg_spec_free(lg_spec *s) { free(s); }

lg_status lg_spec_parse_kernel(const char *json, const char *file, struct lg_spec *out)
{
	struct lg_jreader r;
	lg_json_init(&r, file);
	cJSON *root = NULL;
	lg_status st = lg_json_parse(&r, json, strlen(json), &root);
	if (st == LG_OK)
		st = parse_kernel(&r, root, out);
	cJSON_Delete(root);
	return st;
}

char *lg_spec_canonical(const lg_spec *s)
{
	return s ? lg_spec_to_json(s) : NULL;
}

const char *lg_spec_entry(const lg_spec *s)
{
	return s ? s->entry : "";
}
