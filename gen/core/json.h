/*
 * json.h - reading JSON documents (through cJSON) with error messages that
 * name the file, the JSON path, what was found and what is allowed.
 *
 * A reader carries the display name of the file and the JSON path of the
 * value being read ("kernels[2].quant"). Every check that fails records a
 * message through lg_fail() and returns LG_ERR_SPEC, so a caller reads a
 * document as a flat list of `if ((st = lg_json_...) != LG_OK) goto fail;`.
 * The reader holds no global state: one reader per parse, any thread.
 */
#ifndef LG_JSON_H
#define LG_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "lingen.h"

#define LG_JSON_PATH_MAX 160

struct lg_jreader {
	const char *file;            /* display name: a path, or "<input>" */
	char path[LG_JSON_PATH_MAX]; /* JSON path of the current value; "" at the top */
	size_t len;                  /* strlen(path) */
};

/* A value as a message shows it: `"e5m2"`, `2048.5`, `true`, `an array`. */
struct lg_jshow {
	char s[128];
};

void lg_json_init(struct lg_jreader *r, const char *file);

/* The largest document parsed (the manifest bound; input files are read
 * with a 16 MiB bound, file.h). */
#define LG_JSON_MAX ((size_t)64 << 20)

/* Parse text[0..len) as one JSON value with nothing but whitespace after it.
 * A syntax error names the line and column. *out: free with cJSON_Delete. */
lg_status lg_json_parse(struct lg_jreader *r, const char *text, size_t len, cJSON **out);

/* Is d a number the kernels can hold as an fp32 constant without
 * changing the math: 0, or (rounded to fp32) finite and normal? (A value
 * that rounds to 0, or to a denormal, is refused by every reader of a
 * number: "eps": 5e-324 would divide by 0.) LG_JSON_FP32_RULE says so. */
bool lg_json_fp32_ok(double d);
#define LG_JSON_FP32_RULE "0 or at least 1.17549435e-38 (fp32's smallest normal) in magnitude"

/* Descend into a member or an element; returns the mark lg_json_pop() takes
 * to come back up. Member names must be the caller's own short names. */
size_t lg_json_push_key(struct lg_jreader *r, const char *key);
size_t lg_json_push_index(struct lg_jreader *r, size_t i);
void lg_json_pop(struct lg_jreader *r, size_t mark);

/* Record "<file>: <path>[.<field>]: <message>" and return LG_ERR_SPEC.
 * field may be NULL (the message is about the current value itself). */
lg_status lg_json_fail(const struct lg_jreader *r, const char *field, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* "a string", "a number", "an object", ... */
const char *lg_json_type(const cJSON *v);
/* The value as JSON text, shortened and escaped for a message. */
struct lg_jshow lg_json_show(const cJSON *v);
/* A string as a quoted, escaped JSON string for a message (shortened). */
struct lg_jshow lg_json_quote(const char *s);
/* Shortest "%.*g" text that reads back as exactly d (d finite): for JSON
 * and messages, and for double literals in generated source. */
void lg_json_number_text(double d, char out[32]);
/* The allowed name closest to s, or NULL when none is within
 * max(1, strlen(s) / 3) edits (Damerau-Levenshtein: insert, delete,
 * substitute, swap two neighbours). */
const char *lg_json_suggest(const char *s, const char *const *names, size_t n);

/* Check the members of object obj: every key must be one of names[0..n)
 * (n <= 32) and appear once. On success *seen has bit i set for each
 * names[i] present. */
lg_status lg_json_check_keys(const struct lg_jreader *r, const cJSON *obj,
			     const char *const *names, size_t n, uint32_t *seen);

/* Typed reads of member `field` (value v, never NULL) of the current object. */
/* A number strictly between 0 and 1 (an epsilon) at key. */
lg_status lg_json_open_unit(const struct lg_jreader *r, const char *key, const cJSON *v, double *out);
lg_status lg_json_int(const struct lg_jreader *r, const char *field, const cJSON *v,
		      int64_t lo, int64_t hi, int64_t *out);
lg_status lg_json_bool(const struct lg_jreader *r, const char *field, const cJSON *v,
		       bool *out);
/* A string that must be names[i] for some i with bit i of mask set; qual
 * (may be "") qualifies the allowed list: "allowed for op rmsnorm: ...". */
lg_status lg_json_enum(const struct lg_jreader *r, const char *field, const cJSON *v,
		       const char *const *names, size_t n, uint32_t mask, const char *qual,
		       int *out);
/* Append `, "a", "b"` style lists to the message just recorded. */
void lg_json_append_names(const char *const *names, size_t n, uint32_t mask, bool quoted);

#endif
