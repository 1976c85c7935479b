/*
 * schema.c - a family's spec keys as data (family.h, struct lg_key): the
 * parser of a kernel object's keys, the checks of single values, defaults,
 * canonical JSON and entry-point names, for any family.
 *
 * A key's path names its place: "hidden" is a member of the kernel object,
 * "quant.block" a member of the object "quant", declared before it. Every
 * message names the file, the JSON path, the value found and what is
 * allowed; a key another family takes is "not used by op X", any other
 * unknown key gets a "did you mean" when an allowed key is close to it.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "family.h"
#include "form.h"
#include "json.h"

#define ENTRY_MAX 120
#define INT_LIMIT ((int64_t)1 << 53) /* every integer is exact in a double */

const char *const lg_quant_output_words[LG_QOUT_COUNT] = {
	[LG_QOUT_ROWWISE] = "rowwise", [LG_QOUT_COLUMNWISE] = "colwise", [LG_QOUT_BOTH] = "both"};
const char *const lg_round_scale_words[2] = {"exact", "pow2"};

/* ------------------------------------------------------------- lookups */

int lg_family_key(const struct lg_family *f, const char *path)
{
	for (int i = 0; i < f->nkeys; i++)
		if (strcmp(f->keys[i].path, path) == 0)
			return i;
	return -1;
}

bool lg_key_is_tile(const struct lg_key *k)
{
	return strncmp(k->path, "tile.", 5) == 0;
}

/* The last component of a path: "block" of "quant.block". */
static const char *leaf(const char *path)
{
	const char *d = strrchr(path, '.');
	return d ? d + 1 : path;
}

/* Is key k a direct member of the object at key index `parent` (-1: the
 * kernel object)? */
static bool member_of(const struct lg_family *f, int k, int parent)
{
	const char *p = f->keys[k].path, *d = strrchr(p, '.');
	if (parent < 0)
		return !d;
	size_t n = strlen(f->keys[parent].path);
	return d && (size_t)(d - p) == n && strncmp(p, f->keys[parent].path, n) == 0;
}

static const cJSON *member(const cJSON *obj, const char *key)
{
	return cJSON_GetObjectItemCaseSensitive(obj, key);
}

struct lg_quant lg_spec_quant(const struct lg_spec *s)
{
	int k = lg_family_key(s->fam, "quant");
	if (k < 0 || !lg_spec_has(s, k))
		return (struct lg_quant){.present = false};
	return (struct lg_quant){.present = true,
				 .format = (enum lg_quant_format)s->v[k + 1],
				 .block = (int)s->v[k + 2],
				 .round_scale = s->v[k + 3] != 0,
				 .output = (enum lg_quant_output)s->v[k + 4]};
}

/* --------------------------------------------------------- descriptions */

/* What a key allows, for messages and `lingen help`: "a multiple of 128
 * from 128 to 16384", "128, 256, 512". */
static void describe(lg_buf *b, const struct lg_key *k)
{
	switch (k->type) {
	case LG_KEY_INT:
		if (k->only) {
			for (int i = 0; k->only[i]; i++)
				lg_emit(b, "%s%lld", i ? ", " : "", (long long)k->only[i]);
		} else if (k->min == k->max) {
			lg_emit(b, "%lld", (long long)k->min);
		} else if (k->multiple > 1) {
			lg_emit(b, "a multiple of %lld from %lld to %lld", (long long)k->multiple,
				(long long)k->min, (long long)k->max);
		} else {
			lg_emit(b, "an integer from %lld to %lld", (long long)k->min, (long long)k->max);
		}
		break;
	case LG_KEY_NUMBER: {
		char lo[32], hi[32];
		lg_json_number_text(k->lo, lo);
		lg_json_number_text(k->hi, hi);
		lg_emit(b, "a number strictly between %s and %s, " LG_JSON_FP32_RULE, lo, hi);
		break;
	}
	case LG_KEY_BOOL:
		lg_emit(b, "true, false");
		break;
	case LG_KEY_ENUM:
		for (int i = 0; i < k->nvalues; i++)
			lg_emit(b, "%s\"%s\"", i ? ", " : "", k->values[i]);
		break;
	case LG_KEY_OBJECT:
		lg_emit(b, "an object");
		break;
	}
}

static void describe_members(lg_buf *b, const struct lg_family *f, int obj)
{
	const char *sep = "";
	for (int i = 0; i < f->nkeys; i++) {
		if (!member_of(f, i, obj))
			continue;
		lg_emit(b, "%s%s", sep, leaf(f->keys[i].path));
		sep = ", ";
	}
}

static void describe_object(lg_buf *b, const struct lg_family *f, int obj)
{
	lg_emit(b, "an object with keys ");
	describe_members(b, f, obj);
}

/* Record "<where>: <path>: found <v>, allowed: <what k allows>". */
static lg_status fail_value(const struct lg_jreader *r, const struct lg_family *f, int k,
			    const char *found)
{
	lg_buf b;
	lg_buf_init(&b);
	if (f->keys[k].type == LG_KEY_OBJECT)
		describe_object(&b, f, k);
	else
		describe(&b, &f->keys[k]);
	char *allowed = lg_buf_finish(&b, NULL);
	lg_status st = lg_json_fail(r, leaf(f->keys[k].path), "found %s, allowed: %s", found,
				    allowed ? allowed : "(out of memory)");
	free(allowed);
	return st;
}

/* ----------------------------------------------------------- values */

/* A value as found, with its type when it is not a number: `"x" (a string)`. */
static struct lg_jshow show_typed(const cJSON *v)
{
	struct lg_jshow s = lg_json_show(v);
	if (!cJSON_IsNumber(v)) {
		size_t n = strlen(s.s);
		snprintf(s.s + n, sizeof s.s - n, " (%s)", lg_json_type(v));
	}
	return s;
}

/* An integer value within the key's declaration. */
static bool int_ok(const struct lg_key *k, int64_t x)
{
	if (k->only) {
		for (int i = 0; k->only[i]; i++)
			if (k->only[i] == x)
				return true;
		return false;
	}
	return x >= k->min && x <= k->max && (k->multiple <= 1 || x % k->multiple == 0);
}

static lg_status parse_value(const struct lg_jreader *r, const struct lg_family *f, int k, const cJSON *v,
			     struct lg_spec *s)
{
	const struct lg_key *key = &f->keys[k];
	const char *name = leaf(key->path);
	bool b = false;
	int e = 0;
	lg_status st = LG_OK;
	switch (key->type) {
	case LG_KEY_INT: {
		double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
		if (isfinite(d) && d == floor(d) && fabs(d) >= (double)INT_LIMIT) {
			char found[sizeof(struct lg_jshow) + 64];
			snprintf(found, sizeof found, "%s (2^53 or more: not exact as a JSON number)",
				 lg_json_show(v).s);
			return fail_value(r, f, k, found);
		}
		if (!(d > (double)-INT_LIMIT && d < (double)INT_LIMIT) || d != floor(d))
			return fail_value(r, f, k, show_typed(v).s);
		if (!int_ok(key, (int64_t)d)) {
			char found[32];
			snprintf(found, sizeof found, "%lld", (long long)d);
			return fail_value(r, f, k, found);
		}
		s->v[k] = (int64_t)d;
		break;
	}
	case LG_KEY_NUMBER: {
		double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
		if (!(d > key->lo && d < key->hi) || !lg_json_fp32_ok(d))
			return fail_value(r, f, k, show_typed(v).s);
		s->num[k] = d;
		break;
	}
	case LG_KEY_BOOL:
		if ((st = lg_json_bool(r, name, v, &b)) != LG_OK)
			return st;
		s->v[k] = b;
		break;
	case LG_KEY_ENUM:
		if ((st = lg_json_enum(r, name, v, key->values, (size_t)key->nvalues, ~0u, "", &e)) != LG_OK)
			return st;
		s->v[k] = e;
		break;
	case LG_KEY_OBJECT:
		LG_ASSERT(!"objects are parsed by parse_object");
	}
	s->set |= (uint64_t)1 << k;
	return LG_OK;
}

/* Is `name` a member some other family takes at the level of `parent`? */
static const char *other_family_key(const struct lg_family *f, int parent, const char *name)
{
	const char *ppath = parent < 0 ? NULL : f->keys[parent].path;
	for (int op = 0; op < LG_OP_COUNT; op++) {
		const struct lg_family *g = lg_family_get((enum lg_op)op);
		for (int i = 0; i < g->nkeys; i++) {
			const char *p = g->keys[i].path, *d = strrchr(p, '.');
			bool level = ppath ? d && (size_t)(d - p) == strlen(ppath) && strncmp(p, ppath, strlen(ppath)) == 0
					   : !d;
			if (level && strcmp(leaf(p), name) == 0)
				return g->op;
		}
	}
	return NULL;
}

#define HEADER_KEYS 3 /* op, pass, dtype: read by the spec parser */

/* Every member of obj is one the family declares there, once. */
static lg_status check_members(const struct lg_jreader *r, const cJSON *obj, const struct lg_family *f,
			       int parent)
{
	const char *names[32];
	size_t n = 0;
	if (parent < 0) {
		names[n++] = "op";
		names[n++] = "pass";
		names[n++] = "dtype";
	}
	for (int i = 0; i < f->nkeys && n < 32; i++)
		if (member_of(f, i, parent))
			names[n++] = leaf(f->keys[i].path);
	for (const cJSON *m = obj->child; m; m = m->next) {
		bool known = false;
		for (size_t i = 0; i < n && !known; i++)
			known = strcmp(m->string, names[i]) == 0;
		if (known || !other_family_key(f, parent, m->string))
			continue;
		lg_status st = lg_json_fail(r, m->string, "found %s, not used by op %s; allowed keys: ",
					    lg_json_show(m).s, f->op);
		lg_json_append_names(names, n, ~0u, false);
		return st;
	}
	uint32_t seen;
	return lg_json_check_keys(r, obj, names, n, &seen);
}

/* Does the object at key index obj hold any set key? */
static bool object_used(const struct lg_spec *s, const struct lg_family *f, int obj)
{
	for (int i = 0; i < f->nkeys; i++)
		if (member_of(f, i, obj) && lg_spec_has(s, i))
			return true;
	return false;
}

static lg_status parse_object(struct lg_jreader *r, const cJSON *obj, const struct lg_family *f, int parent,
			      struct lg_spec *s)
{
	lg_status st = check_members(r, obj, f, parent);
	for (int k = 0; st == LG_OK && k < f->nkeys; k++) {
		if (!member_of(f, k, parent))
			continue;
		const struct lg_key *key = &f->keys[k];
		const char *name = leaf(key->path);
		const cJSON *v = member(obj, name);
		if (!v && (key->flags & LG_KEY_REQUIRED)) {
			lg_buf b;
			lg_buf_init(&b);
			if (key->type == LG_KEY_OBJECT)
				describe_object(&b, f, k);
			else
				describe(&b, key);
			char *allowed = lg_buf_finish(&b, NULL);
			st = lg_json_fail(r, name, "missing, required by op %s, allowed: %s", f->op,
					  allowed ? allowed : "(out of memory)");
			free(allowed);
		} else if (!v) {
			if (key->has_def) {
				s->v[k] = key->def;
				s->num[k] = key->def_num;
				s->set |= (uint64_t)1 << k;
			}
		} else if (key->type == LG_KEY_OBJECT) {
			size_t mark = lg_json_push_key(r, name);
			if (!cJSON_IsObject(v)) {
				lg_buf b;
				lg_buf_init(&b);
				describe_object(&b, f, k);
				char *allowed = lg_buf_finish(&b, NULL);
				st = lg_json_fail(r, NULL, "found %s, allowed: %s", lg_json_show(v).s,
						  allowed ? allowed : "(out of memory)");
				free(allowed);
			} else {
				s->v[k] = 1;
				s->set |= (uint64_t)1 << k;
				st = parse_object(r, v, f, k, s);
				/* an optional object that sets nothing ("tile": {}) is
				 * the same spec as none: same canonical form, same plan */
				if (st == LG_OK && !(key->flags & LG_KEY_REQUIRED) && !object_used(s, f, k)) {
					s->v[k] = 0;
					s->set &= ~((uint64_t)1 << k);
				}
			}
			lg_json_pop(r, mark);
		} else {
			st = parse_value(r, f, k, v, s);
		}
	}
	return st;
}

lg_status lg_keys_parse(struct lg_jreader *r, const cJSON *k, const struct lg_family *f, struct lg_spec *s)
{
	return parse_object(r, k, f, -1, s);
}

lg_status lg_keys_parse_tile(struct lg_jreader *r, const cJSON *v, const struct lg_family *f,
			     struct lg_tile_choice *c)
{
	int tile = lg_family_key(f, "tile");
	memset(c, 0, sizeof *c);
	if (!cJSON_IsObject(v) || !v->child || tile < 0) {
		lg_buf b;
		lg_buf_init(&b);
		if (tile >= 0) {
			lg_emit(&b, "an object with one or more of ");
			describe_members(&b, f, tile);
		} else
			lg_emit(&b, "nothing (op %s has no tile parameters)", f->op);
		char *allowed = lg_buf_finish(&b, NULL);
		lg_status st = lg_json_fail(r, NULL, "found %s, allowed: %s",
					    cJSON_IsObject(v) ? "an empty object" : lg_json_show(v).s,
					    allowed ? allowed : "(out of memory)");
		free(allowed);
		return st;
	}
	struct lg_spec s = {.op = LG_OP_COUNT};
	lg_status st = parse_object(r, v, f, tile, &s);
	for (int k = 0; st == LG_OK && k < f->nkeys; k++)
		if (lg_key_is_tile(&f->keys[k]) && lg_spec_has(&s, k)) {
			c->v[k] = s.v[k];
			c->set |= (uint64_t)1 << k;
		}
	return st;
}

/* ------------------------------------------------------ programmatic */

struct lg_tile_choice lg_tile1(int key, int64_t v)
{
	struct lg_tile_choice c = {.set = (uint64_t)1 << key};
	c.v[key] = v;
	return c;
}

lg_status lg_spec_check(const struct lg_spec *s, const char *where)
{
	const struct lg_family *f = s->fam;
	for (int k = 0; k < f->nkeys; k++) {
		const struct lg_key *key = &f->keys[k];
		if (!lg_spec_has(s, k) || key->type != LG_KEY_INT || int_ok(key, s->v[k]))
			continue;
		lg_buf b;
		lg_buf_init(&b);
		describe(&b, key);
		char *allowed = lg_buf_finish(&b, NULL);
		lg_status st = lg_spec_error(where, "%s: found %lld, allowed: %s", key->path, (long long)s->v[k],
					     allowed ? allowed : "(out of memory)");
		free(allowed);
		return st;
	}
	return f->validate ? f->validate(s, where) : LG_OK;
}

lg_status lg_spec_with_tile(const struct lg_spec *s, const struct lg_tile_choice *c, struct lg_spec *out)
{
	const struct lg_family *f = s->fam;
	*out = *s;
	for (int k = 0; k < f->nkeys; k++) {
		if (!lg_key_is_tile(&f->keys[k]))
			continue;
		out->set &= ~((uint64_t)1 << k);
		out->v[k] = 0;
	}
	int tile = lg_family_key(f, "tile");
	bool any = false;
	for (int k = 0; c && k < LG_MAX_KEYS; k++) {
		if (!((c->set >> k) & 1u))
			continue;
		if (k >= f->nkeys || !lg_key_is_tile(&f->keys[k]))
			return lg_fail(LG_ERR_SPEC, "%s: key %d is not a tile key of op %s", s->entry, k, f->op);
		out->v[k] = c->v[k];
		out->set |= (uint64_t)1 << k;
		any = true;
	}
	if (tile >= 0) {
		out->v[tile] = any;
		out->set = any ? out->set | ((uint64_t)1 << tile) : out->set & ~((uint64_t)1 << tile);
	}
	lg_spec_make_entry(out);
	return out->entry[0] ? LG_OK : lg_fail(LG_ERR_NO_MEMORY, "out of memory");
}

/* ---------------------------------------------------- canonical form */

/* Append a string as it is: the canonical form is made once a kernel on
 * every load (the memory-cache key), so its fixed parts skip printf. */
static void put(lg_buf *b, const char *text) { lg_raw(b, text, strlen(text)); }

/* The decimal digits of v (no printf: see put). */
static void put_int(lg_buf *b, int64_t v)
{
	char d[24], *p = d + sizeof d;
	uint64_t u = v < 0 ? 0u - (uint64_t)v : (uint64_t)v;
	do
		*--p = (char)('0' + u % 10);
	while (u /= 10);
	if (v < 0)
		*--p = '-';
	lg_raw(b, p, (size_t)(d + sizeof d - p));
}

static void emit_value(lg_buf *b, const struct lg_key *key, const struct lg_spec *s, int k)
{
	char num[32];
	switch (key->type) {
	case LG_KEY_INT:
		put_int(b, s->v[k]);
		break;
	case LG_KEY_NUMBER:
		lg_json_number_text(s->num[k], num);
		put(b, num);
		break;
	case LG_KEY_BOOL:
		put(b, s->v[k] ? "true" : "false");
		break;
	case LG_KEY_ENUM:
		put(b, "\"");
		put(b, key->values[s->v[k]]);
		put(b, "\"");
		break;
	case LG_KEY_OBJECT:
		break;
	}
}


static void emit_members(lg_buf *b, const struct lg_spec *s, const struct lg_family *f, int parent,
			 const char *sep)
{
	for (int k = 0; k < f->nkeys; k++) {
		const struct lg_key *key = &f->keys[k];
		if (!member_of(f, k, parent) || !lg_spec_has(s, k))
			continue;
		if (key->type == LG_KEY_OBJECT && !object_used(s, f, k))
			continue;
		put(b, sep);
		put(b, "\"");
		put(b, leaf(key->path));
		put(b, "\": ");
		if (key->type == LG_KEY_OBJECT) {
			put(b, "{");
			emit_members(b, s, f, k, "");
			put(b, "}");
		} else {
			emit_value(b, key, s, k);
		}
		sep = ", ";
	}
}

char *lg_spec_to_json(const struct lg_spec *s)
{
	const struct lg_family *f = s->fam;
	lg_buf b;
	lg_buf_init(&b);
	put(&b, "{\"op\": \"");
	put(&b, lg_op_names[s->op]);
	put(&b, "\", \"pass\": \"");
	put(&b, lg_pass_names[s->pass]);
	put(&b, "\", \"dtype\": \"");
	put(&b, lg_dtype_names[s->dtype]);
	put(&b, "\"");
	emit_members(&b, s, f, -1, ", ");
	put(&b, "}");
	return lg_buf_finish(&b, NULL);
}

/* ------------------------------------------------------- entry names */

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h;
}

static bool is_default(const struct lg_key *key, const struct lg_spec *s, int k)
{
	if (!key->has_def)
		return false;
	return key->type == LG_KEY_NUMBER ? s->num[k] == key->def_num : s->v[k] == key->def;
}

static void name_key(lg_buf *b, const struct lg_key *key, const struct lg_spec *s, int k)
{
	uint64_t bits;
	switch (key->type) {
	case LG_KEY_INT:
		/* a negative value as m<digits>: names stay identifiers */
		lg_emit(b, "_%s%s%llu", key->abbrev ? key->abbrev : "", s->v[k] < 0 ? "m" : "",
			s->v[k] < 0 ? 0ull - (unsigned long long)s->v[k] : (unsigned long long)s->v[k]);
		break;
	case LG_KEY_NUMBER: {
		/* a short decimal that reads back exactly ("rf1", "rf0p25", "eps1em05"),
		 * else the value's bits: names stay identifiers and unique */
		char num[32];
		snprintf(num, sizeof num, "%g", s->num[k]);
		if (strtod(num, NULL) == s->num[k]) {
			for (char *c = num; *c; c++)
				*c = *c == '.' ? 'p' : *c == '-' ? 'm' : *c == '+' ? 'P' : *c;
			lg_emit(b, "_%s%s", key->abbrev ? key->abbrev : "", num);
			break;
		}
		memcpy(&bits, &s->num[k], sizeof bits);
		lg_emit(b, "_%s%016" PRIx64, key->abbrev ? key->abbrev : "", bits);
		break;
	}
	case LG_KEY_BOOL:
	case LG_KEY_ENUM:
		lg_emit(b, "_%s", key->words ? key->words[s->v[k]] : key->values[s->v[k]]);
		break;
	case LG_KEY_OBJECT:
		break;
	}
}

/* The full name: every field that tells two canonical specs apart. */
static void long_entry(lg_buf *b, const struct lg_spec *s)
{
	const struct lg_family *f = s->fam;
	lg_emit(b, "lg_%s_%s_%s", lg_op_names[s->op], lg_pass_abbrevs[s->pass],
		lg_dtype_names[s->dtype]);
	int last = -1; /* keys by rank, then index */
	for (;;) {
		int next = -1;
		for (int k = 0; k < f->nkeys; k++) {
			const struct lg_key *key = &f->keys[k];
			if (key->naming == LG_NAME_NEVER || !lg_spec_has(s, k))
				continue;
			int after = last < 0 || key->rank > f->keys[last].rank ||
				    (key->rank == f->keys[last].rank && k > last);
			if (after && (next < 0 || key->rank < f->keys[next].rank))
				next = k;
		}
		if (next < 0)
			break;
		last = next;
		if (f->keys[next].naming == LG_NAME_ALWAYS || !is_default(&f->keys[next], s, next))
			name_key(b, &f->keys[next], s, next);
	}
	const char *t = "_t";
	for (int k = 0; k < f->nkeys; k++) {
		if (!lg_key_is_tile(&f->keys[k]) || !lg_spec_has(s, k))
			continue;
		lg_emit(b, "%s%s%lld", t, f->keys[k].abbrev, (long long)s->v[k]);
		t = "";
	}
}

void lg_spec_make_entry(struct lg_spec *s)
{
	lg_buf b;
	lg_buf_init(&b);
	long_entry(&b, s);
	char *name = lg_buf_finish(&b, NULL);
	s->entry[0] = '\0';
	if (!name)
		return; /* out of memory: the parser reports an empty entry */
	if (strlen(name) < ENTRY_MAX)
		snprintf(s->entry, sizeof s->entry, "%s", name);
	else /* too long for a symbol: keep the family and hash the rest */
		snprintf(s->entry, sizeof s->entry, "lg_%s_%s_%s_x%016llx", lg_op_names[s->op],
			 lg_pass_abbrevs[s->pass], lg_dtype_names[s->dtype],
			 (unsigned long long)fnv1a(name));
	free(name);
}

/* ------------------------------------------------------------- help */

char *lg_family_help(const struct lg_family *f)
{
	lg_buf b;
	lg_buf_init(&b);
	lg_emit(&b, "op %s: %s\n\npasses:", f->op, f->summary);
	for (int p = 0; p < LG_PASS_COUNT; p++)
		if ((f->passes >> p) & 1u)
			lg_emit(&b, " %s", lg_pass_names[p]);
	lg_emit(&b, "\ndtypes:");
	for (int d = 0; d < LG_DTYPE_COUNT; d++)
		if ((f->dtypes >> d) & 1u)
			lg_emit(&b, " %s", lg_dtype_names[d]);
	lg_emit(&b, "\n\nspec keys:\n");
	for (int k = 0; k < f->nkeys; k++) {
		const struct lg_key *key = &f->keys[k];
		lg_emit(&b, "  %-18s ", key->path);
		if (key->type == LG_KEY_OBJECT)
			lg_emit(&b, "object");
		else
			describe(&b, key);
		if (key->flags & LG_KEY_REQUIRED)
			lg_emit(&b, "; required");
		else if (key->has_def && key->type == LG_KEY_NUMBER)
			lg_emit(&b, "; default %g", key->def_num);
		else if (key->has_def && key->type == LG_KEY_BOOL)
			lg_emit(&b, "; default %s", key->def ? "true" : "false");
		else if (key->has_def && key->type == LG_KEY_ENUM)
			lg_emit(&b, "; default \"%s\"", key->values[key->def]);
		else if (key->has_def)
			lg_emit(&b, "; default %lld", (long long)key->def);
		else if (key->type != LG_KEY_OBJECT)
			lg_emit(&b, "; optional");
		lg_emit(&b, "\n  %-18s   %s\n", "", key->doc ? key->doc : "");
	}
	for (int p = 0; p < LG_PASS_COUNT; p++) {
		const struct lg_sig *g = &f->sig[p];
		if (!((f->passes >> p) & 1u))
			continue;
		lg_emit(&b, "\n%s launch: run-time sizes", lg_pass_names[p]);
		for (int i = 0; i < g->nsizes; i++)
			lg_emit(&b, "%s %s (%s%lld to %lld: %s)", i ? "," : "", g->sizes[i].name,
				g->sizes[i].multiple > 1 ? "a multiple, " : "", (long long)g->sizes[i].min,
				(long long)g->sizes[i].max, g->sizes[i].doc);
		lg_emit(&b, "\n");
		static const char *const roles[] = {"in", "out", "optional in", "optional out", "workspace",
							    "tensor list"};
		for (int i = 0; i < g->nargs; i++) {
			const struct lg_arg *a = &g->args[i];
			if (a->role == LG_ARG_WORKSPACE)
				lg_emit(&b, "  %d. %-10s %-12s lg_kernel_workspace_size() bytes", i, a->name,
					roles[a->role]);
			else
				lg_emit(&b, "  %d. %-10s %-12s %s [%s]", i, a->name, roles[a->role],
					lg_elem_names[a->elem], a->shape);
			lg_emit(&b, ", %d-byte aligned%s%s\n", a->align, a->doc ? ": " : "", a->doc ? a->doc : "");
		}
		lg_form_help(&b, f, (enum lg_pass)p);
	}
	return lg_buf_finish(&b, NULL);
}

/* ------------------------------------------------ family error helper */

lg_status lg_spec_error(const char *where, const char *fmt, ...)
{
	char tail[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(tail, sizeof tail, fmt, ap);
	va_end(ap);
	/* "<file>: <path>" + "." + field message; no dot after an empty path */
	size_t n = where ? strlen(where) : 0;
	const char *sep = n == 0 || where[n - 1] == ' ' ? "" : ".";
	return lg_fail(LG_ERR_SPEC, "%s%s%s", where ? where : "", sep, tail);
}
