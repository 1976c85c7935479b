/*
 * cases.c - reading and expanding a family's case file (cases.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cases.h"
#include "testutil.h"

#define MAX_EACH 4 /* keys of one case's "each" */

const char *lg_cases_dir(void)
{
	return LG_SOURCE_DIR "/tests/cases";
}

/* Print "<path>: case <i>: <what>" and return -1. */
static int bad(const char *path, int i, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (i >= 0)
		fprintf(stderr, "%s: cases[%d]: ", path, i);
	else
		fprintf(stderr, "%s: ", path);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return -1;
}

/* Merge object src into dst: objects key by key, anything else replaced. */
static void merge(cJSON *dst, const cJSON *src)
{
	for (const cJSON *it = src->child; it; it = it->next) {
		cJSON *have = cJSON_GetObjectItemCaseSensitive(dst, it->string);
		if (have && cJSON_IsObject(have) && cJSON_IsObject(it)) {
			merge(have, it);
			continue;
		}
		cJSON *copy = cJSON_Duplicate(it, true);
		if (!copy)
			abort();
		if (have)
			cJSON_ReplaceItemInObjectCaseSensitive(dst, it->string, copy);
		else
			cJSON_AddItemToObject(dst, it->string, copy);
	}
}

/* Set v at the dotted path ("quant.output") of obj, making objects on the way. */
static void set_path(cJSON *obj, const char *path, const cJSON *v)
{
	char key[64];
	const char *dot = strchr(path, '.');
	size_t n = dot ? (size_t)(dot - path) : strlen(path);
	if (n >= sizeof key)
		n = sizeof key - 1;
	memcpy(key, path, n);
	key[n] = 0;
	cJSON *have = cJSON_GetObjectItemCaseSensitive(obj, key);
	if (dot) {
		if (!have || !cJSON_IsObject(have)) {
			cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
			have = cJSON_AddObjectToObject(obj, key);
		}
		set_path(have, dot + 1, v);
		return;
	}
	cJSON *copy = cJSON_Duplicate(v, true);
	if (!copy)
		abort();
	if (have)
		cJSON_ReplaceItemInObjectCaseSensitive(obj, key, copy);
	else
		cJSON_AddItemToObject(obj, key, copy);
}

/* The points of a case ("tokens" or "sizes") into c; 0 or -1. */
static int read_points(const char *path, int i, const cJSON *cs, struct lg_case *c)
{
	const cJSON *tok = cJSON_GetObjectItemCaseSensitive(cs, "tokens");
	const cJSON *sz = cJSON_GetObjectItemCaseSensitive(cs, "sizes");
	const cJSON *arr = tok ? tok : sz;
	if ((tok != NULL) == (sz != NULL) || !cJSON_IsArray(arr) || !cJSON_GetArraySize(arr))
		return bad(path, i, "expected one of \"tokens\" (token counts) or \"sizes\" (arrays of sizes), "
			   "not empty");
	c->npoints = (size_t)cJSON_GetArraySize(arr);
	c->points = calloc(c->npoints, sizeof *c->points);
	if (!c->points)
		abort();
	c->nsizes = tok ? 1 : -1;
	size_t k = 0;
	for (const cJSON *p = arr->child; p; p = p->next, k++) {
		const cJSON *one = tok ? p : p->child;
		int n = 0;
		if (sz && (!cJSON_IsArray(p) || cJSON_GetArraySize(p) < 1 || cJSON_GetArraySize(p) > LG_MAX_SIZES))
			return bad(path, i, "sizes[%zu]: expected an array of 1 to %d sizes", k, LG_MAX_SIZES);
		for (; one; one = tok ? NULL : one->next, n++) {
			if (!cJSON_IsNumber(one) || one->valuedouble < 0 || one->valuedouble != (double)(int64_t)one->valuedouble)
				return bad(path, i, "%s[%zu]: expected sizes that are integers >= 0", tok ? "tokens" : "sizes", k);
			c->points[k][n] = (int64_t)one->valuedouble;
		}
		if (c->nsizes < 0)
			c->nsizes = n;
		else if (c->nsizes != n)
			return bad(path, i, "sizes[%zu]: %d sizes, the first point has %d", k, n, c->nsizes);
	}
	return 0;
}

static bool flag(const cJSON *o, const char *key, bool dflt)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return v ? cJSON_IsTrue(v) : dflt;
}

static int copy_str(const char *path, int i, const cJSON *o, const char *key, char *out, size_t n)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	out[0] = 0;
	if (!v)
		return 0;
	if (!cJSON_IsString(v) || strlen(v->valuestring) >= n)
		return bad(path, i, "\"%s\": expected an arch name such as \"sm_90\"", key);
	strcpy(out, v->valuestring);
	return 0;
}

static const char *const case_keys[] = {"about", "spec", "variants", "each", "tokens", "sizes", "no_optional",
					"exact", "candidates", "context", "needs", "refused_ok"};

/* Append to f every spec of case cs (index i) of the file. */
static int expand(const char *path, int i, const cJSON *cs, const cJSON *base, const struct lg_case *proto,
		  struct lg_case_file *f)
{
	for (const cJSON *it = cs->child; it; it = it->next) {
		size_t k = 0;
		while (k < sizeof case_keys / sizeof *case_keys && strcmp(case_keys[k], it->string))
			k++;
		if (k == sizeof case_keys / sizeof *case_keys)
			return bad(path, i, "unknown key \"%s\"", it->string);
	}
	const cJSON *spec = cJSON_GetObjectItemCaseSensitive(cs, "spec");
	const cJSON *vars = cJSON_GetObjectItemCaseSensitive(cs, "variants");
	const cJSON *each = cJSON_GetObjectItemCaseSensitive(cs, "each");
	if (spec && !cJSON_IsObject(spec))
		return bad(path, i, "\"spec\": expected an object");
	if (vars && (!cJSON_IsArray(vars) || !cJSON_GetArraySize(vars)))
		return bad(path, i, "\"variants\": expected a non-empty array of objects");
	if (each && !cJSON_IsObject(each))
		return bad(path, i, "\"each\": expected an object of dotted keys to arrays");
	const cJSON *ek[MAX_EACH];
	int ne = 0, total = 1;
	for (const cJSON *it = each ? each->child : NULL; it; it = it->next) {
		if (ne == MAX_EACH || !cJSON_IsArray(it) || !cJSON_GetArraySize(it))
			return bad(path, i, "\"each\": at most %d keys, each to a non-empty array", MAX_EACH);
		ek[ne++] = it;
		total *= cJSON_GetArraySize(it);
	}
	int nv = vars ? cJSON_GetArraySize(vars) : 1;
	for (int v = 0; v < nv; v++)
		for (int e = 0; e < total; e++) {
			cJSON *o = cJSON_CreateObject();
			if (!o)
				abort();
			cJSON_AddStringToObject(o, "op", f->family);
			cJSON_AddStringToObject(o, "pass", "forward");
			cJSON_AddStringToObject(o, "dtype", "bf16");
			if (base)
				merge(o, base);
			if (spec)
				merge(o, spec);
			if (vars) {
				const cJSON *vo = cJSON_GetArrayItem(vars, v);
				if (!cJSON_IsObject(vo)) {
					cJSON_Delete(o);
					return bad(path, i, "variants[%d]: expected an object", v);
				}
				merge(o, vo);
			}
			for (int k = 0, rest = e; k < ne; k++) {
				int m = cJSON_GetArraySize(ek[k]);
				const cJSON *val = cJSON_GetArrayItem(ek[k], rest % m);
				if (!ek[k]->string[0] && cJSON_IsObject(val))
					merge(o, val); /* key "": objects of keys */
				else
					set_path(o, ek[k]->string, val);
				rest /= m;
			}
			struct lg_case *c = &f->c[f->n];
			*c = *proto;
			c->json = cJSON_PrintUnformatted(o);
			cJSON_Delete(o);
			c->points = malloc(proto->npoints * sizeof *c->points);
			if (!c->json || !c->points)
				abort();
			memcpy(c->points, proto->points, proto->npoints * sizeof *c->points);
			f->n++;
		}
	return 0;
}

/* How many specs case cs makes (its variants times its each values). */
static size_t count_specs(const cJSON *cs)
{
	const cJSON *vars = cJSON_GetObjectItemCaseSensitive(cs, "variants");
	const cJSON *each = cJSON_GetObjectItemCaseSensitive(cs, "each");
	size_t n = cJSON_IsArray(vars) && cJSON_GetArraySize(vars) ? (size_t)cJSON_GetArraySize(vars) : 1;
	for (const cJSON *it = cJSON_IsObject(each) ? each->child : NULL; it; it = it->next)
		n *= cJSON_IsArray(it) && cJSON_GetArraySize(it) ? (size_t)cJSON_GetArraySize(it) : 1;
	return n;
}

static int load_doc(const char *path, const cJSON *doc, const char *family, struct lg_case_file *f)
{
	const cJSON *fam = cJSON_GetObjectItemCaseSensitive(doc, "family");
	if (!cJSON_IsString(fam) || strlen(fam->valuestring) >= sizeof f->family)
		return bad(path, -1, "\"family\": expected the family's name");
	if (family && strcmp(family, fam->valuestring))
		return bad(path, -1, "\"family\": \"%s\", the file is %s's", fam->valuestring, family);
	strcpy(f->family, fam->valuestring);
	const cJSON *else_ = cJSON_GetObjectItemCaseSensitive(doc, "elsewhere");
	if (else_ && !(f->elsewhere = cJSON_IsString(else_) ? strdup(else_->valuestring) : NULL))
		return bad(path, -1, "\"elsewhere\": expected a string naming the test that checks the family");
	const cJSON *base = cJSON_GetObjectItemCaseSensitive(doc, "base");
	const cJSON *cases = cJSON_GetObjectItemCaseSensitive(doc, "cases");
	const cJSON *pat = cJSON_GetObjectItemCaseSensitive(doc, "patterns");
	if (base && !cJSON_IsObject(base))
		return bad(path, -1, "\"base\": expected an object of spec keys");
	if (!cJSON_IsArray(cases) || (!cJSON_GetArraySize(cases) && !f->elsewhere))
		return bad(path, -1, "\"cases\": expected an array of cases (empty only with \"elsewhere\")");
	if (pat && (!cJSON_IsNumber(pat) || pat->valueint < 1 || pat->valueint > 4))
		return bad(path, -1, "\"patterns\": expected 1 to 4");
	size_t total = 0;
	for (const cJSON *cs = cases->child; cs; cs = cs->next)
		total += count_specs(cs);
	f->c = calloc(total + 1, sizeof *f->c);
	if (!f->c)
		abort();
	bool exact = flag(doc, "exact", false);
	int i = 0;
	for (const cJSON *cs = cases->child; cs; cs = cs->next, i++) {
		if (!cJSON_IsObject(cs))
			return bad(path, i, "expected an object");
		struct lg_case proto = {.exact = flag(cs, "exact", exact), .no_optional = flag(cs, "no_optional", false),
					.candidates = flag(cs, "candidates", false),
					.refused_ok = flag(cs, "refused_ok", false),
					.patterns = pat ? pat->valueint : 1, .index = i};
		int rc = read_points(path, i, cs, &proto);
		if (!rc)
			rc = copy_str(path, i, cs, "context", proto.context, sizeof proto.context);
		if (!rc)
			rc = copy_str(path, i, cs, "needs", proto.needs, sizeof proto.needs);
		if (!rc && !proto.needs[0]) /* the file's, for every case that names none */
			rc = copy_str(path, i, doc, "needs", proto.needs, sizeof proto.needs);
		if (!rc)
			rc = expand(path, i, cs, base, &proto, f);
		free(proto.points);
		if (rc)
			return rc;
	}
	return 0;
}

int lg_cases_load(const char *path, const char *family, struct lg_case_file *f)
{
	memset(f, 0, sizeof *f);
	char *text = lg_test_read_file(path, NULL);
	if (!text)
		return bad(path, -1, "cannot be read");
	cJSON *doc = cJSON_Parse(text);
	free(text);
	if (!cJSON_IsObject(doc)) {
		cJSON_Delete(doc);
		return bad(path, -1, "not a JSON object (a syntax error near: %.40s)",
			   cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : "?");
	}
	int rc = load_doc(path, doc, family, f);
	cJSON_Delete(doc);
	if (rc)
		lg_cases_free(f);
	return rc;
}

void lg_cases_free(struct lg_case_file *f)
{
	for (size_t i = 0; f->c && i < f->n; i++) {
		cJSON_free(f->c[i].json);
		free(f->c[i].points);
	}
	free(f->c);
	free(f->elsewhere);
	memset(f, 0, sizeof *f);
}

const char *lg_case_point(const struct lg_case *c, size_t i, char *buf, size_t n)
{
	if (c->nsizes == 1) {
		snprintf(buf, n, "M=%lld", (long long)c->points[i][0]);
		return buf;
	}
	int at = snprintf(buf, n, "sizes=");
	for (int k = 0; k < c->nsizes && at > 0 && (size_t)at < n; k++)
		at += snprintf(buf + at, n - (size_t)at, k ? ",%lld" : "%lld", (long long)c->points[i][k]);
	return buf;
}
