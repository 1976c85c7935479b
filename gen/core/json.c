/*
 * json.c - a path-tracking JSON reader on top of cJSON (see json.h).
 *
 * cJSON does the syntax; this file turns every way a document can be wrong
 * into one message naming the file, the JSON path, what was found and what
 * is allowed. Values are never trusted: strings are escaped and shortened
 * before they reach a message, numbers are checked for range and
 * integrality before they are converted.
 */
#include "json.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

#define SHOW_MAX 40  /* characters of a string shown in a message */
#define SNIPPET 16   /* bytes of source shown at a syntax error */
#define KEY_MAX 64   /* longer keys get no suggestion */

void lg_json_init(struct lg_jreader *r, const char *file)
{
	r->file = file && file[0] ? file : "<input>";
	r->path[0] = '\0';
	r->len = 0;
}

/* ------------------------------------------------------------- paths */

static size_t advance(struct lg_jreader *r, size_t mark, int n)
{
	LG_ASSERT(n > 0 && (size_t)n < sizeof r->path - mark);
	r->len = mark + (size_t)n;
	return mark;
}

size_t lg_json_push_key(struct lg_jreader *r, const char *key)
{
	size_t mark = r->len;
	return advance(r, mark, snprintf(r->path + mark, sizeof r->path - mark, "%s%s",
					 mark ? "." : "", key));
}

size_t lg_json_push_index(struct lg_jreader *r, size_t i)
{
	size_t mark = r->len;
	return advance(r, mark, snprintf(r->path + mark, sizeof r->path - mark, "[%zu]", i));
}

void lg_json_pop(struct lg_jreader *r, size_t mark)
{
	LG_ASSERT(mark <= r->len);
	r->len = mark;
	r->path[mark] = '\0';
}

/* ---------------------------------------------------------- messages */

lg_status lg_json_fail(const struct lg_jreader *r, const char *field, const char *fmt, ...)
{
	char tail[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(tail, sizeof tail, fmt, ap);
	va_end(ap);
	const char *dot = r->len && field ? "." : "";
	if (!r->len && !field)
		return lg_fail(LG_ERR_SPEC, "%s: %s", r->file, tail);
	return lg_fail(LG_ERR_SPEC, "%s: %s%s%s: %s", r->file, r->path, dot, field ? field : "",
		       tail);
}

void lg_json_append_names(const char *const *names, size_t n, uint32_t mask, bool quoted)
{
	const char *sep = "";
	for (size_t i = 0; i < n; i++) {
		if (!((mask >> i) & 1u))
			continue;
		lg_fail_append(quoted ? "%s\"%s\"" : "%s%s", sep, names[i]);
		sep = ", ";
	}
}

const char *lg_json_type(const cJSON *v)
{
	if (!v)
		return "nothing";
	if (cJSON_IsString(v))
		return "a string";
	if (cJSON_IsNumber(v))
		return "a number";
	if (cJSON_IsBool(v))
		return "a boolean";
	if (cJSON_IsNull(v))
		return "null";
	if (cJSON_IsArray(v))
		return "an array";
	if (cJSON_IsObject(v))
		return "an object";
	return "an unknown value";
}

/* Escape s[0..n) into out as the inside of a JSON string, stopping at
 * SHOW_MAX visible characters. */
static void escape(const char *s, size_t n, char *out, size_t cap)
{
	size_t o = 0, shown = 0, i;
	for (i = 0; i < n && shown < SHOW_MAX && o + 8 < cap; i++, shown++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\')
			o += (size_t)snprintf(out + o, cap - o, "\\%c", c);
		else if (c >= 0x20 && c < 0x7f)
			out[o++] = (char)c;
		else
			o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
	}
	if (i < n && o + 4 < cap)
		o += (size_t)snprintf(out + o, cap - o, "...");
	out[o] = '\0';
}

static struct lg_jshow quote_n(const char *s, size_t n)
{
	struct lg_jshow j;
	char inner[sizeof j.s - 2];
	escape(s, n, inner, sizeof inner);
	snprintf(j.s, sizeof j.s, "\"%s\"", inner);
	return j;
}

struct lg_jshow lg_json_quote(const char *s)
{
	return quote_n(s ? s : "", s ? strlen(s) : 0);
}

void lg_json_number_text(double d, char out[32])
{
	for (int p = 1; p <= 17; p++) {
		snprintf(out, 32, "%.*g", p, d);
		if (strtod(out, NULL) == d)
			return;
	}
}

struct lg_jshow lg_json_show(const cJSON *v)
{
	struct lg_jshow j;
	if (cJSON_IsString(v))
		return lg_json_quote(v->valuestring);
	if (cJSON_IsNumber(v) && isfinite(v->valuedouble)) {
		char t[32];
		lg_json_number_text(v->valuedouble, t);
		snprintf(j.s, sizeof j.s, "%s", t);
	} else if (cJSON_IsNumber(v)) {
		snprintf(j.s, sizeof j.s, "a number out of range");
	} else if (cJSON_IsBool(v)) {
		snprintf(j.s, sizeof j.s, "%s", cJSON_IsTrue(v) ? "true" : "false");
	} else {
		snprintf(j.s, sizeof j.s, "%s", lg_json_type(v));
	}
	return j;
}

/* Damerau-Levenshtein distance (optimal string alignment: insertions,
 * deletions, substitutions and swaps of two neighbours) of two strings of at
 * most KEY_MAX characters. */
static size_t distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	size_t rows[3][KEY_MAX + 1];
	size_t *two = rows[0], *prev = rows[1], *cur = rows[2];
	for (size_t j = 0; j <= lb; j++)
		prev[j] = j;
	for (size_t i = 1; i <= la; i++) {
		cur[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t best = prev[j - 1] + (a[i - 1] != b[j - 1]);
			if (prev[j] + 1 < best)
				best = prev[j] + 1;
			if (cur[j - 1] + 1 < best)
				best = cur[j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    two[j - 2] + 1 < best)
				best = two[j - 2] + 1;
			cur[j] = best;
		}
		size_t *t = two;
		two = prev;
		prev = cur;
		cur = t;
	}
	return prev[lb];
}

/* The most edits a name of len characters may be from a suggestion: a third
 * of its length, at least 1, so that a short unrelated word ("foo") is not
 * matched to a short key ("op"). */
static size_t suggest_max(size_t len)
{
	return len / 3 > 1 ? len / 3 : 1;
}

const char *lg_json_suggest(const char *s, const char *const *names, size_t n)
{
	if (!s || strlen(s) > KEY_MAX)
		return NULL;
	const char *best = NULL;
	size_t best_d = suggest_max(strlen(s)) + 1;
	for (size_t i = 0; i < n; i++) {
		if (!names[i] || strlen(names[i]) > KEY_MAX)
			continue;
		size_t d = distance(s, names[i]);
		if (d < best_d) {
			best = names[i];
			best_d = d;
		}
	}
	return best;
}

/* ------------------------------------------------------------ syntax */

static size_t skip_space(const char *t, size_t i, size_t len)
{
	while (i < len && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r'))
		i++;
	return i;
}

/* "<file>: line L, column C: <what>, found <source there>, allowed: <allowed>" */
static lg_status syntax_error(const struct lg_jreader *r, const char *t, size_t len, size_t off,
			      const char *what, const char *allowed)
{
	size_t line = 1, col = 1, n = 0;
	if (off > len)
		off = len;
	for (size_t i = 0; i < off; i++) {
		if (t[i] == '\n') {
			line++;
			col = 1;
		} else {
			col++;
		}
	}
	while (off + n < len && n < SNIPPET && t[off + n] != '\n' && t[off + n] != '\r')
		n++;
	struct lg_jshow found = quote_n(t + off, n);
	return lg_fail(LG_ERR_SPEC, "%s: line %zu, column %zu: %s, found %s, allowed: %s", r->file,
		       line, col, what, off < len ? found.s : "the end of the input", allowed);
}

/* What cJSON lets through and RFC 8259 or lingen does not: a control
 * byte (NUL included) outside a string, where cJSON skips it as space, or
 * inside one; a \u0000 escape, which would cut the C string short (no
 * lingen name or value holds a NUL). Returns the offset of the first, or
 * len; *what says which. */
static size_t bad_byte(const char *t, size_t len, const char **what)
{
	bool in_string = false;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)t[i];
		if (c < 0x20 && (in_string || (c != ' ' && c != '\t' && c != '\n' && c != '\r'))) {
			*what = in_string ? "a control character in a string" : "a control character";
			return i;
		}
		if (c == '"') {
			in_string = !in_string;
		} else if (in_string && c == '\\' && i + 1 < len) {
			if (t[i + 1] == 'u' && len - i >= 6 && memcmp(t + i + 2, "0000", 4) == 0) {
				*what = "a NUL character (\\u0000) in a string";
				return i;
			}
			i++; /* the escaped character */
		}
	}
	return len;
}

lg_status lg_json_parse(struct lg_jreader *r, const char *text, size_t len, cJSON **out)
{
	*out = NULL;
	if (len > LG_JSON_MAX)
		return lg_fail(LG_ERR_SPEC, "%s: found a document of %zu bytes, allowed: at most %zu MiB",
			       r->file, len, LG_JSON_MAX >> 20);
	if (skip_space(text, 0, len) == len)
		return lg_fail(LG_ERR_SPEC, "%s: found an empty document, allowed: a JSON object",
			       r->file);
	const char *what = NULL;
	size_t bad = bad_byte(text, len, &what);
	if (bad < len)
		return syntax_error(r, text, len, bad, what, "JSON text (RFC 8259) without NUL");
	/* cJSON records parse errors in a global: serialise its parser so
	 * concurrent spec loads stay free of data races. */
	static pthread_mutex_t parse_mu = PTHREAD_MUTEX_INITIALIZER;
	const char *end = NULL;
	pthread_mutex_lock(&parse_mu);
	cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, false);
	pthread_mutex_unlock(&parse_mu);
	size_t off = end ? (size_t)(end - text) : 0;
	if (!j)
		return syntax_error(r, text, len, off, "malformed JSON",
				    "JSON text (RFC 8259)");
	off = skip_space(text, off, len);
	if (off != len) {
		cJSON_Delete(j);
		return syntax_error(r, text, len, off, "text after the JSON value",
				    "only whitespace");
	}
	*out = j;
	return LG_OK;
}

/* ------------------------------------------------------------- reads */

static int find_name(const char *s, const char *const *names, size_t n)
{
	for (size_t i = 0; s && i < n; i++)
		if (strcmp(s, names[i]) == 0)
			return (int)i;
	return -1;
}

lg_status lg_json_check_keys(const struct lg_jreader *r, const cJSON *obj,
			     const char *const *names, size_t n, uint32_t *seen)
{
	LG_ASSERT(n <= 32);
	*seen = 0;
	for (const cJSON *m = obj->child; m; m = m->next) {
		int i = find_name(m->string, names, n);
		if (i < 0) {
			lg_status st = lg_json_fail(r, NULL, "unknown key %s, allowed keys: ",
						    lg_json_quote(m->string).s);
			lg_json_append_names(names, n, ~0u, false);
			const char *hint = lg_json_suggest(m->string, names, n);
			if (hint)
				lg_fail_append(" (did you mean \"%s\"?)", hint);
			return st;
		}
		if ((*seen >> i) & 1u)
			return lg_json_fail(r, names[i], "duplicate key, found twice, allowed: once");
		*seen |= 1u << i;
	}
	return LG_OK;
}

lg_status lg_json_int(const struct lg_jreader *r, const char *field, const cJSON *v,
		      int64_t lo, int64_t hi, int64_t *out)
{
	double d = cJSON_IsNumber(v) ? v->valuedouble : 0;
	if (!cJSON_IsNumber(v))
		return lg_json_fail(r, field, "found %s (%s), allowed: an integer from %lld to %lld",
				    lg_json_show(v).s, lg_json_type(v), (long long)lo, (long long)hi);
	if (!isfinite(d) || d != floor(d) || d < (double)lo || d > (double)hi)
		return lg_json_fail(r, field, "found %s, allowed: an integer from %lld to %lld",
				    lg_json_show(v).s, (long long)lo, (long long)hi);
	*out = (int64_t)d;
	return LG_OK;
}

lg_status lg_json_bool(const struct lg_jreader *r, const char *field, const cJSON *v, bool *out)
{
	if (!cJSON_IsBool(v))
		return lg_json_fail(r, field, "found %s (%s), allowed: true, false",
				    lg_json_show(v).s, lg_json_type(v));
	*out = cJSON_IsTrue(v);
	return LG_OK;
}

lg_status lg_json_enum(const struct lg_jreader *r, const char *field, const cJSON *v,
		       const char *const *names, size_t n, uint32_t mask, const char *qual,
		       int *out)
{
	int i = cJSON_IsString(v) ? find_name(v->valuestring, names, n) : -1;
	if (i >= 0 && ((mask >> i) & 1u)) {
		*out = i;
		return LG_OK;
	}
	lg_status st;
	if (cJSON_IsString(v))
		st = lg_json_fail(r, field, "found %s, allowed%s: ", lg_json_show(v).s, qual);
	else
		st = lg_json_fail(r, field, "found %s (%s), allowed%s: ", lg_json_show(v).s,
				  lg_json_type(v), qual);
	lg_json_append_names(names, n, mask, true);
	if (cJSON_IsString(v) && i < 0) {
		const char *allowed[32];
		size_t k = 0;
		for (size_t j = 0; j < n && j < 32; j++)
			if ((mask >> j) & 1u)
				allowed[k++] = names[j];
		const char *hint = lg_json_suggest(v->valuestring, allowed, k);
		if (hint)
			lg_fail_append(" (did you mean \"%s\"?)", hint);
	}
	return st;
}

bool lg_json_fp32_ok(double d)
{
	float f = (float)d;
	return d == 0 || (isfinite(f) && fabsf(f) >= FLT_MIN);
}

lg_status lg_json_open_unit(const struct lg_jreader *r, const char *key, const cJSON *v, double *out)
{
	if (!cJSON_IsNumber(v))
		return lg_json_fail(r, key, "found %s (%s), allowed: a number greater than 0 and less than 1",
				    lg_json_show(v).s, lg_json_type(v));
	if (!(v->valuedouble > 0 && v->valuedouble < 1) || !lg_json_fp32_ok(v->valuedouble))
		return lg_json_fail(r, key, "found %s, allowed: a number greater than 0 and less than 1, "
				    "at least 1.17549435e-38 (fp32's smallest normal)", lg_json_show(v).s);
	*out = v->valuedouble;
	return LG_OK;
}
