/*
 * describe.c - the family declarations (family.h) for programs outside
 * lingen: lg_families_json() writes every family's spec keys, run-time
 * sizes and arguments as JSON, and lg_spec_arg_shape() evaluates one
 * argument's shape for a spec and run-time sizes. Bindings (the Python
 * package) read these instead of keeping a second copy of any family's
 * keys or shape rules.
 */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "error.h"
#include "family.h"
#include "form.h"
#include "generate.h"

static const char *const key_types[] = {
	[LG_KEY_INT] = "int", [LG_KEY_NUMBER] = "number", [LG_KEY_BOOL] = "bool",
	[LG_KEY_ENUM] = "enum", [LG_KEY_OBJECT] = "object",
};
static const char *const roles[] = {
	[LG_ARG_IN] = "in", [LG_ARG_OUT] = "out", [LG_ARG_OPT_IN] = "optional_in",
	[LG_ARG_OPT_OUT] = "optional_out", [LG_ARG_WORKSPACE] = "workspace",
	[LG_ARG_LIST] = "list",
};

static cJSON *key_json(const struct lg_key *k)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "path", k->path);
	cJSON_AddStringToObject(o, "type", key_types[k->type]);
	cJSON_AddBoolToObject(o, "required", (k->flags & LG_KEY_REQUIRED) != 0);
	cJSON_AddBoolToObject(o, "shape", (k->flags & LG_KEY_SHAPE) != 0);
	cJSON_AddBoolToObject(o, "tile", lg_key_is_tile(k));
	if (k->type == LG_KEY_INT) {
		cJSON_AddNumberToObject(o, "min", (double)k->min);
		cJSON_AddNumberToObject(o, "max", (double)k->max);
		if (k->multiple > 1)
			cJSON_AddNumberToObject(o, "multiple", (double)k->multiple);
		if (k->only) {
			cJSON *a = cJSON_AddArrayToObject(o, "only");
			for (int i = 0; a && k->only[i]; i++)
				cJSON_AddItemToArray(a, cJSON_CreateNumber((double)k->only[i]));
		}
	} else if (k->type == LG_KEY_NUMBER) {
		cJSON_AddNumberToObject(o, "above", k->lo);
		cJSON_AddNumberToObject(o, "below", k->hi);
	} else if (k->type == LG_KEY_ENUM) {
		cJSON *a = cJSON_AddArrayToObject(o, "values");
		for (int i = 0; a && i < k->nvalues; i++)
			cJSON_AddItemToArray(a, cJSON_CreateString(k->values[i]));
	}
	if (k->has_def) {
		if (k->type == LG_KEY_NUMBER)
			cJSON_AddNumberToObject(o, "default", k->def_num);
		else if (k->type == LG_KEY_BOOL)
			cJSON_AddBoolToObject(o, "default", k->def != 0);
		else if (k->type == LG_KEY_ENUM)
			cJSON_AddStringToObject(o, "default", k->values[k->def]);
		else
			cJSON_AddNumberToObject(o, "default", (double)k->def);
	}
	cJSON_AddStringToObject(o, "doc", k->doc ? k->doc : "");
	return o;
}

static cJSON *sig_json(const struct lg_sig *g)
{
	cJSON *o = cJSON_CreateObject();
	cJSON *sizes = cJSON_AddArrayToObject(o, "sizes"), *args = cJSON_AddArrayToObject(o, "args");
	for (int i = 0; sizes && i < g->nsizes; i++) {
		cJSON *s = cJSON_CreateObject();
		cJSON_AddStringToObject(s, "name", g->sizes[i].name);
		cJSON_AddNumberToObject(s, "min", (double)g->sizes[i].min);
		cJSON_AddNumberToObject(s, "max", (double)g->sizes[i].max);
		if (g->sizes[i].multiple > 1)
			cJSON_AddNumberToObject(s, "multiple", (double)g->sizes[i].multiple);
		cJSON_AddStringToObject(s, "doc", g->sizes[i].doc ? g->sizes[i].doc : "");
		cJSON_AddItemToArray(sizes, s);
	}
	for (int i = 0; args && i < g->nargs; i++) {
		const struct lg_arg *a = &g->args[i];
		cJSON *x = cJSON_CreateObject();
		cJSON_AddStringToObject(x, "name", a->name);
		cJSON_AddStringToObject(x, "role", roles[a->role]);
		cJSON_AddStringToObject(x, "elem", lg_elem_names[a->elem]);
		if (a->role == LG_ARG_WORKSPACE)
			cJSON_AddNullToObject(x, "shape");
		else
			cJSON_AddStringToObject(x, "shape", a->shape);
		cJSON_AddNumberToObject(x, "align", a->align);
		cJSON_AddStringToObject(x, "doc", a->doc ? a->doc : "");
		cJSON_AddItemToArray(args, x);
	}
	return o;
}

/* A form's fixed key value as JSON: a name, a boolean or a number. */
static cJSON *key_value_json(const struct lg_key *k, int64_t v)
{
	if (k->type == LG_KEY_ENUM)
		return cJSON_CreateString(k->values[v]);
	return k->type == LG_KEY_BOOL ? cJSON_CreateBool(v != 0) : cJSON_CreateNumber((double)v);
}

/* The typed launchers of a pass (form.h): name, keys fixed, sizes taken
 * and fixed, parameters and the arguments each goes to, comment. */
static cJSON *forms_json(enum lg_op op, enum lg_pass pass)
{
	const struct lg_family *f = lg_family_get(op);
	const struct lg_sig *g = &f->sig[pass];
	cJSON *arr = cJSON_CreateArray();
	for (int i = 0; arr && i < lg_form_count(f, pass); i++) {
		struct lg_launcher l;
		char names[LG_MAX_ARGS][32];
		if (lg_form_resolve(op, pass, i, &l, names) != LG_OK)
			continue; /* test_forms fails the build's declarations first */
		cJSON *o = cJSON_CreateObject(), *keys = cJSON_AddObjectToObject(o, "keys");
		cJSON_AddItemToArray(arr, o);
		cJSON_AddStringToObject(o, "launcher", l.name);
		for (int k = 0; keys && k < l.nkeys; k++)
			cJSON_AddItemToObject(keys, f->keys[l.key[k]].path, key_value_json(&f->keys[l.key[k]], l.value[k]));
		cJSON *sizes = cJSON_AddArrayToObject(o, "sizes"), *fixed = cJSON_AddObjectToObject(o, "fixed");
		for (int n = 0; sizes && n < l.size_params; n++)
			for (int j = 0; j < g->nsizes; j++)
				if (l.size_from[j] == n)
					cJSON_AddItemToArray(sizes, cJSON_CreateString(g->sizes[j].name));
		for (int j = 0; fixed && j < g->nsizes; j++)
			if (l.size_from[j] == LG_FORM_FIXED)
				cJSON_AddNumberToObject(fixed, g->sizes[j].name, (double)l.size_value[j]);
		cJSON *params = cJSON_AddArrayToObject(o, "params");
		for (int j = 0; params && j < l.params; j++) {
			cJSON *p = cJSON_CreateObject(), *to = cJSON_AddArrayToObject(p, "to");
			cJSON_AddItemToArray(params, p);
			cJSON_AddStringToObject(p, "name", names[j]);
			for (int a = 0; to && a < g->nargs; a++)
				if ((l.param_args[j] >> a) & 1u)
					cJSON_AddItemToArray(to, cJSON_CreateString(g->args[a].name));
		}
		const char *doc = lg_form_doc(op, pass, i);
		cJSON_AddStringToObject(o, "doc", doc ? doc : "");
	}
	return arr;
}

static cJSON *family_json(const struct lg_family *f, enum lg_op op)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "op", f->op);
	cJSON_AddStringToObject(o, "summary", f->summary);
	cJSON *dtypes = cJSON_AddArrayToObject(o, "dtypes");
	for (int d = 0; dtypes && d < LG_DTYPE_COUNT; d++)
		if ((f->dtypes >> d) & 1u)
			cJSON_AddItemToArray(dtypes, cJSON_CreateString(lg_dtype_names[d]));
	cJSON *keys = cJSON_AddArrayToObject(o, "keys");
	for (int k = 0; keys && k < f->nkeys; k++)
		cJSON_AddItemToArray(keys, key_json(&f->keys[k]));
	cJSON *passes = cJSON_AddObjectToObject(o, "passes");
	for (int p = 0; passes && p < LG_PASS_COUNT; p++)
		if ((f->passes >> p) & 1u) {
			cJSON *g = sig_json(&f->sig[p]);
			cJSON_AddStringToObject(g, "doc", f->sig[p].doc ? f->sig[p].doc : "");
			cJSON_AddItemToObject(g, "forms", forms_json(op, (enum lg_pass)p));
			cJSON_AddItemToObject(passes, lg_pass_names[p], g);
		}
	return o;
}

lg_status lg_families_json(char **json)
{
	lg_clear_error();
	if (!json)
		return lg_fail(LG_ERR_INVALID_ARG, "lg_families_json: NULL argument");
	cJSON *root = cJSON_CreateObject();
	cJSON_AddStringToObject(root, "lingen", LINGEN_VERSION);
	cJSON *ops = cJSON_AddArrayToObject(root, "ops");
	for (int op = 0; ops && op < LG_OP_COUNT; op++)
		cJSON_AddItemToArray(ops, family_json(lg_family_get((enum lg_op)op), (enum lg_op)op));
	/* cJSON's adders fail quietly: the printer sees every missing piece */
	*json = root && ops ? cJSON_PrintUnformatted(root) : NULL;
	cJSON_Delete(root);
	return *json ? LG_OK : lg_fail(LG_ERR_NO_MEMORY, "out of memory describing the families");
}

lg_status lg_spec_arg_shape(const lg_spec *s, int i, const int64_t *sizes, int nsizes, int64_t *dims,
			    int maxdims, int *ndims)
{
	lg_clear_error();
	if (!s || !ndims || (!sizes && nsizes) || (!dims && maxdims))
		return lg_fail(LG_ERR_INVALID_ARG, "lg_spec_arg_shape: NULL argument");
	const struct lg_sig *g = &s->fam->sig[s->pass];
	if (i < 0 || i >= g->nargs)
		return lg_fail(LG_ERR_INVALID_ARG, "%s: argument %d, allowed: 0 to %d", s->entry, i, g->nargs - 1);
	if (nsizes != g->nsizes)
		return lg_fail(LG_ERR_INVALID_ARG, "%s: %d run-time sizes given, the kernel takes %d", s->entry, nsizes,
			       g->nsizes);
	int64_t sz[LG_MAX_SIZES] = {0}, d[8];
	for (int k = 0; k < nsizes; k++) {
		lg_status st = lg_size_check(s->entry, &g->sizes[k], sizes[k]);
		if (st != LG_OK)
			return st;
		sz[k] = sizes[k];
	}
	int n = 0;
	lg_status st = lg_arg_shape(s, i, sz, d, &n);
	if (st != LG_OK)
		return st;
	if (n > maxdims)
		return lg_fail(LG_ERR_INVALID_ARG, "%s: argument %s has %d dimensions, room for %d", s->entry,
			       g->args[i].name, n, maxdims);
	if (n)
		memcpy(dims, d, (size_t)n * sizeof *d);
	*ndims = n;
	return LG_OK;
}

int lg_spec_arg_used(const lg_spec *s, int i)
{
	if (!s)
		return -1;
	const struct lg_sig *g = &s->fam->sig[s->pass];
	if (i < 0 || i >= g->nargs)
		return -1;
	unsigned char used[LG_MAX_ARGS];
	lg_spec_uses(s, used);
	return used[i] == LG_ARG_REQUIRED ? 2 : used[i] ? 1 : 0;
}
