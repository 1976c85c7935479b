/*
 * spec.c - kernel spec files: parse, validate, canonical JSON, entry names.
 *
 * A spec file is {"name": "...", "kernels": [ {kernel}, ... ]} (DESIGN.md,
 * "Spec files"). A file written by `lingen expand` also carries "model" (the
 * model config's name) and "skipped" (the kernels of the training step whose
 * families do not exist yet): both are validated and otherwise ignored. Each kernel is read in a fixed order: its op first (which
 * picks the family), then its keys against the family's declared needs
 * (passes, dtypes, dims, eps, quant, tile keys), then each value, and last
 * the family's own validate(). Every message names the file, the JSON path,
 * what was found and what is allowed; nothing here keeps global state.
 */
#include "spec.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "error.h"
#include "family.h"
#include "file.h"
#include "json.h"

#define DIM_MAX ((int64_t)1 << 53) /* every dimension is exact in a double */
#define TILE_MAX 65536
#define BLOCK_MAX 65536
#define EPS_DEFAULT 1e-6
#define ENTRY_MAX 120

const char *const lg_op_names[LG_OP_COUNT] = {
	[LG_OP_RMSNORM_QUANT] = "rmsnorm_quant",
	[LG_OP_RMSNORM] = "rmsnorm",
};
const char *const lg_pass_names[LG_PASS_COUNT] = {
	[LG_PASS_FORWARD] = "forward",
	[LG_PASS_BACKWARD] = "backward",
};
const char *const lg_dtype_names[LG_DTYPE_COUNT] = {
	[LG_DTYPE_BF16] = "bf16",
	[LG_DTYPE_FP32] = "fp32",
};
const char *const lg_dim_names[LG_DIM_COUNT] = {
	[LG_DIM_HIDDEN] = "hidden",     [LG_DIM_HEAD_DIM] = "head_dim",
	[LG_DIM_Q_HEADS] = "q_heads",   [LG_DIM_KV_HEADS] = "kv_heads",
	[LG_DIM_VOCAB] = "vocab",       [LG_DIM_EXPERTS] = "experts",
	[LG_DIM_TOPK] = "topk",         [LG_DIM_INTERMEDIATE] = "intermediate",
};
const char *const lg_quant_format_names[LG_QFMT_COUNT] = {
	[LG_QFMT_E4M3] = "e4m3",
};
const char *const lg_quant_output_names[LG_QOUT_COUNT] = {
	[LG_QOUT_ROWWISE] = "rowwise",
	[LG_QOUT_COLUMNWISE] = "columnwise",
	[LG_QOUT_BOTH] = "both",
};
const char *const lg_tile_names[LG_TILE_COUNT] = {
	[LG_TILE_ROWS] = "rows",
	[LG_TILE_COLS] = "cols",
	[LG_TILE_THREADS] = "threads",
	[LG_TILE_CLUSTER] = "cluster",
	[LG_TILE_STAGES] = "stages",
};

/* Short names of dims and tile keys in entry names: a prefix then digits. */
static const char *const dim_short[LG_DIM_COUNT] = {
	[LG_DIM_HIDDEN] = "h",   [LG_DIM_HEAD_DIM] = "d", [LG_DIM_Q_HEADS] = "qh",
	[LG_DIM_KV_HEADS] = "kvh", [LG_DIM_VOCAB] = "v",  [LG_DIM_EXPERTS] = "e",
	[LG_DIM_TOPK] = "k",     [LG_DIM_INTERMEDIATE] = "i",
};
static const char *const tile_short[LG_TILE_COUNT] = {
	[LG_TILE_ROWS] = "r", [LG_TILE_COLS] = "c", [LG_TILE_THREADS] = "t",
	[LG_TILE_CLUSTER] = "cl",
	[LG_TILE_STAGES] = "st",
};
static const char *const quant_keys[] = {"format", "block", "round_scale", "output"};
static const char *const file_keys[] = {"name", "model", "kernels", "skipped"};
static const char *const skip_keys[] = {"op", "pass", "why"};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
_Static_assert(COUNT(lg_op_names) == LG_OP_COUNT, "one name per op");
_Static_assert(COUNT(lg_dim_names) == LG_DIM_COUNT, "one name per dim");
_Static_assert(COUNT(lg_tile_names) == LG_TILE_COUNT, "one name per tile key");
_Static_assert(3 + LG_DIM_COUNT + 3 <= 32, "kernel keys fit a 32-bit mask");

struct lg_spec_file {
	char *name;
	size_t count;
	struct lg_spec *specs;
};

/* ------------------------------------------------------- kernel keys */

/* The keys of a kernel object, in canonical order: op, pass, dtype, every
 * dim, eps, quant, tile. Bit i of the family mask: names[i] is allowed. */
enum { K_OP, K_PASS, K_DTYPE, K_DIM0, K_EPS = K_DIM0 + LG_DIM_COUNT, K_QUANT, K_TILE, K_COUNT };

static void kernel_keys(const char *names[K_COUNT])
{
	names[K_OP] = "op";
	names[K_PASS] = "pass";
	names[K_DTYPE] = "dtype";
	for (int d = 0; d < LG_DIM_COUNT; d++)
		names[K_DIM0 + d] = lg_dim_names[d];
	names[K_EPS] = "eps";
	names[K_QUANT] = "quant";
	names[K_TILE] = "tile";
}

static uint32_t family_keys(const struct lg_family *f)
{
	uint32_t m = (1u << K_OP) | (1u << K_PASS) | (1u << K_DTYPE);
	m |= f->dims_required << K_DIM0;
	if (f->has_eps)
		m |= 1u << K_EPS;
	if (f->quant)
		m |= 1u << K_QUANT;
	if (f->tile_keys)
		m |= 1u << K_TILE;
	return m;
}

/* Every key of the kernel object is one the family takes, once. */
static lg_status check_kernel_keys(const struct lg_jreader *r, const cJSON *k,
				   const struct lg_family *f)
{
	const char *names[K_COUNT];
	kernel_keys(names);
	uint32_t allowed = family_keys(f);
	const char *fam_names[K_COUNT];
	size_t n = 0;
	for (int i = 0; i < K_COUNT; i++)
		if ((allowed >> i) & 1u)
			fam_names[n++] = names[i];
	for (const cJSON *m = k->child; m; m = m->next) {
		for (int i = 0; i < K_COUNT; i++) {
			if (((allowed >> i) & 1u) || strcmp(m->string, names[i]) != 0)
				continue;
			lg_status st = lg_json_fail(r, names[i], "found %s, not used by op %s; allowed keys: ",
						    lg_json_show(m).s, f->op);
			lg_json_append_names(fam_names, n, ~0u, false);
			return st;
		}
	}
	uint32_t seen;
	return lg_json_check_keys(r, k, fam_names, n, &seen);
}

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

static lg_status parse_dims(const struct lg_jreader *r, const cJSON *k, const struct lg_family *f,
			    struct lg_spec *s)
{
	for (int d = 0; d < LG_DIM_COUNT; d++) {
		if (!((f->dims_required >> d) & 1u))
			continue;
		const cJSON *v = member(k, lg_dim_names[d]);
		if (!v)
			return lg_json_fail(r, lg_dim_names[d],
					    "missing, required by op %s, allowed: an integer from 1 to %lld",
					    f->op, (long long)DIM_MAX);
		lg_status st = lg_json_int(r, lg_dim_names[d], v, 1, DIM_MAX, &s->dim[d]);
		if (st != LG_OK)
			return st;
		s->dim_set |= 1u << d;
	}
	return LG_OK;
}

static lg_status parse_eps(const struct lg_jreader *r, const cJSON *k, struct lg_spec *s)
{
	const cJSON *v = member(k, "eps");
	s->eps = EPS_DEFAULT;
	return v ? lg_json_open_unit(r, "eps", v, &s->eps) : LG_OK;
}

static lg_status parse_quant_fields(const struct lg_jreader *r, const cJSON *q, struct lg_quant *qt)
{
	const cJSON *v;
	int i;
	int64_t block;
	lg_status st = LG_OK;
	if ((v = member(q, "format")) &&
	    (st = lg_json_enum(r, "format", v, lg_quant_format_names, LG_QFMT_COUNT, ~0u, "", &i)) == LG_OK)
		qt->format = (enum lg_quant_format)i;
	if (st == LG_OK && (v = member(q, "block")) &&
	    (st = lg_json_int(r, "block", v, 1, BLOCK_MAX, &block)) == LG_OK)
		qt->block = (int)block;
	if (st == LG_OK && (v = member(q, "round_scale")))
		st = lg_json_bool(r, "round_scale", v, &qt->round_scale);
	if (st == LG_OK && (v = member(q, "output")) &&
	    (st = lg_json_enum(r, "output", v, lg_quant_output_names, LG_QOUT_COUNT, ~0u, "", &i)) == LG_OK)
		qt->output = (enum lg_quant_output)i;
	return st;
}

static lg_status parse_quant(struct lg_jreader *r, const cJSON *k, const struct lg_family *f,
			     struct lg_quant *qt)
{
	const cJSON *q = member(k, "quant");
	if (!f->quant)
		return LG_OK; /* present: already refused by check_kernel_keys */
	if (!q)
		return lg_json_fail(r, "quant", "missing, required by op %s, allowed: an object with "
					       "keys format, block, round_scale, output", f->op);
	*qt = (struct lg_quant){.present = true, .format = LG_QFMT_E4M3, .block = 128,
				.round_scale = true, .output = LG_QOUT_BOTH};
	size_t mark = lg_json_push_key(r, "quant");
	lg_status st;
	uint32_t seen;
	if (!cJSON_IsObject(q))
		st = lg_json_fail(r, NULL, "found %s, allowed: an object with keys format, block, "
					   "round_scale, output", lg_json_show(q).s);
	else if ((st = lg_json_check_keys(r, q, quant_keys, COUNT(quant_keys), &seen)) == LG_OK)
		st = parse_quant_fields(r, q, qt);
	lg_json_pop(r, mark);
	return st;
}

static lg_status parse_tile_fields(struct lg_jreader *r, const cJSON *t, const struct lg_family *f,
				   struct lg_spec *s)
{
	for (const cJSON *m = t->child; m; m = m->next) {
		int key = -1;
		for (int i = 0; i < LG_TILE_COUNT; i++)
			if (strcmp(m->string, lg_tile_names[i]) == 0)
				key = i;
		if (key >= 0 && !((f->tile_keys >> key) & 1u)) {
			lg_status st = lg_json_fail(r, lg_tile_names[key],
						    "found %s, not used by op %s; allowed keys: ",
						    lg_json_show(m).s, f->op);
			lg_json_append_names(lg_tile_names, LG_TILE_COUNT, f->tile_keys, false);
			return st;
		}
	}
	const char *names[LG_TILE_COUNT];
	size_t n = 0;
	for (int i = 0; i < LG_TILE_COUNT; i++)
		if ((f->tile_keys >> i) & 1u)
			names[n++] = lg_tile_names[i];
	uint32_t seen;
	lg_status st = lg_json_check_keys(r, t, names, n, &seen);
	for (int i = 0; st == LG_OK && i < LG_TILE_COUNT; i++) {
		const cJSON *v = member(t, lg_tile_names[i]);
		int64_t x;
		if (!v)
			continue;
		if ((st = lg_json_int(r, lg_tile_names[i], v, 1, TILE_MAX, &x)) != LG_OK)
			break;
		s->tile[i] = (int)x;
		s->tile_set |= 1u << i;
	}
	return st;
}

static lg_status parse_tile(struct lg_jreader *r, const cJSON *k, const struct lg_family *f,
			    struct lg_spec *s)
{
	const cJSON *t = member(k, "tile");
	if (!t)
		return LG_OK;
	size_t mark = lg_json_push_key(r, "tile");
	lg_status st;
	if (!cJSON_IsObject(t)) {
		st = lg_json_fail(r, NULL, "found %s, allowed: an object with keys ", lg_json_show(t).s);
		lg_json_append_names(lg_tile_names, LG_TILE_COUNT, f->tile_keys, false);
	} else {
		st = parse_tile_fields(r, t, f, s);
	}
	lg_json_pop(r, mark);
	return st;
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
	const struct lg_family *f = lg_family_get(s->op);
	if ((st = check_kernel_keys(r, k, f)) != LG_OK)
		return st;
	if ((st = parse_name(r, k, "pass", lg_pass_names, LG_PASS_COUNT, f->passes, f, &i)) != LG_OK)
		return st;
	s->pass = (enum lg_pass)i;
	if ((st = parse_name(r, k, "dtype", lg_dtype_names, LG_DTYPE_COUNT, f->dtypes, f, &i)) != LG_OK)
		return st;
	s->dtype = (enum lg_dtype)i;
	if ((st = parse_dims(r, k, f, s)) != LG_OK)
		return st;
	if (f->has_eps && (st = parse_eps(r, k, s)) != LG_OK)
		return st;
	if ((st = parse_quant(r, k, f, &s->quant)) != LG_OK)
		return st;
	if ((st = parse_tile(r, k, f, s)) != LG_OK)
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

/* One item of "skipped": {"op": string, "pass": "forward"|"backward", "why": string}. */
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

/* ---------------------------------------------------- canonical form */

char *lg_spec_to_json(const struct lg_spec *s)
{
	const struct lg_family *f = lg_family_get(s->op);
	lg_buf b;
	lg_buf_init(&b);
	lg_emit(&b, "{\"op\": \"%s\", \"pass\": \"%s\", \"dtype\": \"%s\"", lg_op_names[s->op],
		lg_pass_names[s->pass], lg_dtype_names[s->dtype]);
	for (int d = 0; d < LG_DIM_COUNT; d++)
		if (lg_spec_has_dim(s, (enum lg_dim)d))
			lg_emit(&b, ", \"%s\": %lld", lg_dim_names[d], (long long)s->dim[d]);
	if (f->has_eps) {
		char eps[32];
		lg_json_number_text(s->eps, eps);
		lg_emit(&b, ", \"eps\": %s", eps);
	}
	if (s->quant.present)
		lg_emit(&b, ", \"quant\": {\"format\": \"%s\", \"block\": %d, \"round_scale\": %s, "
			    "\"output\": \"%s\"}",
			lg_quant_format_names[s->quant.format], s->quant.block,
			s->quant.round_scale ? "true" : "false", lg_quant_output_names[s->quant.output]);
	if (s->tile_set) {
		const char *sep = "";
		lg_emit(&b, ", \"tile\": {");
		for (int t = 0; t < LG_TILE_COUNT; t++) {
			if (!lg_spec_has_tile(s, (enum lg_tile_key)t))
				continue;
			lg_emit(&b, "%s\"%s\": %d", sep, lg_tile_names[t], s->tile[t]);
			sep = ", ";
		}
		lg_emit(&b, "}");
	}
	lg_emit(&b, "}");
	return lg_buf_finish(&b, NULL);
}

char *lg_spec_canonical(const lg_spec *s)
{
	return s ? lg_spec_to_json(s) : NULL;
}

/* ------------------------------------------------------- entry names */

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h;
}

/* The full name: every field that tells two canonical specs apart. */
static void long_entry(lg_buf *b, const struct lg_spec *s)
{
	static const char *const out_short[LG_QOUT_COUNT] = {
		[LG_QOUT_ROWWISE] = "rowwise", [LG_QOUT_COLUMNWISE] = "colwise",
		[LG_QOUT_BOTH] = "both",
	};
	lg_emit(b, "lg_%s_%s_%s", lg_op_names[s->op], s->pass == LG_PASS_FORWARD ? "fwd" : "bwd",
		lg_dtype_names[s->dtype]);
	for (int d = 0; d < LG_DIM_COUNT; d++)
		if (lg_spec_has_dim(s, (enum lg_dim)d))
			lg_emit(b, "_%s%lld", dim_short[d], (long long)s->dim[d]);
	if (s->quant.present) {
		lg_emit(b, "_%s_%s", out_short[s->quant.output], s->quant.round_scale ? "pow2" : "exact");
		if (s->quant.format != LG_QFMT_E4M3)
			lg_emit(b, "_%s", lg_quant_format_names[s->quant.format]);
		if (s->quant.block != 128)
			lg_emit(b, "_b%d", s->quant.block);
	}
	if (lg_family_get(s->op)->has_eps && s->eps != EPS_DEFAULT) {
		uint64_t bits;
		memcpy(&bits, &s->eps, sizeof bits);
		lg_emit(b, "_eps%016llx", (unsigned long long)bits);
	}
	if (s->tile_set) {
		lg_emit(b, "_t");
		for (int t = 0; t < LG_TILE_COUNT; t++)
			if (lg_spec_has_tile(s, (enum lg_tile_key)t))
				lg_emit(b, "%s%d", tile_short[t], s->tile[t]);
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
			 s->pass == LG_PASS_FORWARD ? "fwd" : "bwd", lg_dtype_names[s->dtype],
			 (unsigned long long)fnv1a(name));
	free(name);
}

const char *lg_spec_entry(const lg_spec *s)
{
	return s ? s->entry : "";
}
