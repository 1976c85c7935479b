/*
 * form.c - launch forms (form.h): a pass's declared forms resolved against
 * its sizes, arguments and the family's keys, the kernel checks of a
 * typed launcher and the mapping of its parameters onto the pass's.
 */
#include "form.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "error.h"

#define WORD 64

int lg_form_count(const struct lg_family *f, enum lg_pass pass)
{
	if (!((f->passes >> pass) & 1u))
		return 0;
	return f->sig[pass].nforms > 0 ? f->sig[pass].nforms : 1;
}

/* The next word of a space-separated list into w (NULL at the end). */
static const char *next_word(const char *p, char w[WORD])
{
	while (p && *p == ' ')
		p++;
	if (!p || !*p)
		return NULL;
	size_t n = strcspn(p, " ");
	snprintf(w, WORD, "%.*s", (int)(n < WORD ? n : WORD - 1), p);
	return p + n;
}

/* Split "name=value" at its '=' (value NULL without one). */
static char *split_value(char *w)
{
	char *eq = strchr(w, '=');
	if (!eq)
		return NULL;
	*eq = '\0';
	return eq + 1;
}

static int find_size(const struct lg_sig *g, const char *name)
{
	for (int i = 0; i < g->nsizes; i++)
		if (strcmp(g->sizes[i].name, name) == 0)
			return i;
	return -1;
}

static int find_arg(const struct lg_sig *g, const char *name)
{
	for (int i = 0; i < g->nargs; i++)
		if (strcmp(g->args[i].name, name) == 0)
			return i;
	return -1;
}

static bool parse_int(const char *v, int64_t *out)
{
	char *end;
	long long x = strtoll(v, &end, 10);
	*out = x;
	return *v && !*end;
}

/* The value of key k written as a form writes it. */
static bool key_value(const struct lg_key *k, const char *v, int64_t *out)
{
	switch (k->type) {
	case LG_KEY_ENUM:
		for (int i = 0; i < k->nvalues; i++)
			if (strcmp(k->values[i], v) == 0) {
				*out = i;
				return true;
			}
		return false;
	case LG_KEY_BOOL:
		*out = strcmp(v, "true") == 0;
		return *out || strcmp(v, "false") == 0;
	case LG_KEY_INT:
		return parse_int(v, out);
	default:
		return false;
	}
}

static lg_status parse_keys(const struct lg_family *f, const char *list, struct lg_launcher *l, const char *where)
{
	char w[WORD];
	for (const char *p = next_word(list, w); p; p = next_word(p, w)) {
		char *v = split_value(w);
		int k = lg_family_key(f, w);
		if (k < 0 || !v || !key_value(&f->keys[k], v, &l->value[l->nkeys]))
			return lg_fail(LG_ERR_SPEC, "%s: keys: \"%s%s%s\", expected key=value of a key of the family "
				       "(an enum's name, true / false, an integer)", where, w, v ? "=" : "", v ? v : "");
		if (l->nkeys == LG_FORM_KEYS)
			return lg_fail(LG_ERR_SPEC, "%s: keys: more than %d", where, LG_FORM_KEYS);
		l->key[l->nkeys++] = k;
	}
	return LG_OK;
}

/* A parameter's name: the argument's, but never that of the launcher's own
 * parameters (k, stream): then with _in or _out. */
static void param_name(const struct lg_arg *a, char out[32])
{
	bool taken = strcmp(a->name, "k") == 0 || strcmp(a->name, "stream") == 0;
	bool out_role = a->role == LG_ARG_OUT || a->role == LG_ARG_OPT_OUT;
	snprintf(out, 32, "%s%s", a->name, !taken ? "" : out_role ? "_out" : "_in");
}

/* One word of the args list: "name" or "alias=a|b|c", arguments after last. */
static lg_status parse_param(const struct lg_sig *g, char *w, struct lg_launcher *l, char names[32], int *last,
			     const char *where)
{
	char *alts = split_value(w);
	unsigned bits = 0;
	for (char *a = alts ? alts : w, *bar; a; a = bar) {
		if ((bar = strchr(a, '|')))
			*bar++ = '\0';
		int i = find_arg(g, a);
		if (i <= *last)
			return lg_fail(LG_ERR_SPEC, "%s: args: \"%s\" is %s, expected the pass's arguments in their "
				       "order", where, a, i < 0 ? "no argument of the pass" : "out of order");
		if (g->args[i].role == LG_ARG_LIST && (alts || l->list >= 0))
			return lg_fail(LG_ERR_SPEC, "%s: args: the list \"%s\" must be a parameter of its own, and the "
				       "only list", where, a);
		if (g->args[i].role == LG_ARG_LIST)
			l->list = l->params;
		bits |= 1u << i;
		*last = i;
	}
	if (alts)
		snprintf(names, 32, "%s", w);
	else
		param_name(&g->args[*last], names);
	l->param_args[l->params++] = bits;
	return LG_OK;
}

static lg_status parse_args(const struct lg_sig *g, const char *list, struct lg_launcher *l, char (*names)[32],
			    const char *where)
{
	char w[WORD], scratch[LG_MAX_ARGS][32];
	char (*nm)[32] = names ? names : scratch;
	int last = -1;
	if (!list) {
		for (int i = 0; i < g->nargs; i++) {
			snprintf(w, sizeof w, "%s", g->args[i].name);
			lg_status st = parse_param(g, w, l, nm[i], &last, where);
			if (st != LG_OK)
				return st;
		}
		return LG_OK;
	}
	for (const char *p = next_word(list, w); p; p = next_word(p, w)) {
		lg_status st = parse_param(g, w, l, nm[l->params], &last, where);
		if (st != LG_OK)
			return st;
	}
	return LG_OK;
}

/* The size a list argument's shape starts with ("items, 16": items). */
static int list_size(const struct lg_sig *g, const struct lg_launcher *l)
{
	if (l->list < 0)
		return -1;
	for (int i = 0; i < g->nargs; i++)
		if ((l->param_args[l->list] >> i) & 1u) {
			char w[WORD];
			const char *shape = g->args[i].shape ? g->args[i].shape : "";
			snprintf(w, sizeof w, "%.*s", (int)strcspn(shape, ", "), shape);
			return find_size(g, w);
		}
	return -1;
}

static lg_status parse_sizes(const struct lg_sig *g, const char *list, struct lg_launcher *l, const char *where)
{
	enum { UNSET = -3 };
	for (int i = 0; i < g->nsizes; i++)
		l->size_from[i] = UNSET;
	int ls = list_size(g, l), last = -1;
	if (ls >= 0)
		l->size_from[ls] = LG_FORM_LIST;
	char w[WORD];
	for (const char *p = next_word(list, w); p; p = next_word(p, w)) {
		char *v = split_value(w);
		int i = find_size(g, w);
		if (i < 0 || l->size_from[i] != UNSET || (!v && i < last))
			return lg_fail(LG_ERR_SPEC, "%s: sizes: \"%s\" is %s", where, w,
				       i < 0 ? "no size of the pass" : l->size_from[i] != UNSET ? "given twice or by the list"
												  : "out of the pass's order");
		if (v && (!parse_int(v, &l->size_value[i]) || l->size_value[i] < g->sizes[i].min ||
			  l->size_value[i] > g->sizes[i].max))
			return lg_fail(LG_ERR_SPEC, "%s: sizes: %s = \"%s\", expected an integer in %lld .. %lld", where, w,
				       v, (long long)g->sizes[i].min, (long long)g->sizes[i].max);
		l->size_from[i] = v ? (signed char)LG_FORM_FIXED : (signed char)l->size_params++;
		last = v ? last : i;
	}
	for (int i = 0; i < g->nsizes; i++) {
		if (l->size_from[i] != UNSET)
			continue;
		if (list)
			return lg_fail(LG_ERR_SPEC, "%s: sizes: %s is neither taken nor fixed (write %s or %s=value)",
				       where, g->sizes[i].name, g->sizes[i].name, g->sizes[i].name);
		l->size_from[i] = (signed char)l->size_params++;
	}
	return LG_OK;
}

lg_status lg_form_resolve(enum lg_op op, enum lg_pass pass, int i, struct lg_launcher *l, char (*names)[32])
{
	const struct lg_family *f = lg_family_get(op);
	const struct lg_sig *g = &f->sig[pass];
	LG_ASSERT(i >= 0 && i < lg_form_count(f, pass));
	static const struct lg_form own = {0};
	const struct lg_form *m = g->nforms > 0 ? &g->forms[i] : &own;
	const char *form = g->nforms > 0 ? m->name : lg_pass_names[pass];
	memset(l, 0, sizeof *l);
	l->op = op;
	l->pass = pass;
	l->nsizes = g->nsizes;
	l->nargs = g->nargs;
	l->list = -1;
	if (form[0])
		snprintf(l->name, sizeof l->name, "lg_%s_%s", f->op, form);
	else
		snprintf(l->name, sizeof l->name, "lg_%s", f->op);
	char where[128];
	snprintf(where, sizeof where, "op %s, pass %s, launcher %s", f->op, lg_pass_names[pass], l->name);
	lg_status st = parse_keys(f, m->keys, l, where);
	if (st == LG_OK)
		st = parse_args(g, m->args, l, names, where);
	if (st == LG_OK)
		st = parse_sizes(g, m->sizes, l, where);
	return st;
}

const char *lg_form_doc(enum lg_op op, enum lg_pass pass, int i)
{
	const struct lg_sig *g = &lg_family_get(op)->sig[pass];
	return g->nforms > 0 && g->forms[i].doc ? g->forms[i].doc : g->doc;
}

/* `key "value"` of a key, for messages. */
static void show_key(lg_buf *b, const struct lg_key *k, int64_t v)
{
	if (k->type == LG_KEY_ENUM && v >= 0 && v < k->nvalues)
		lg_emit(b, "%s \"%s\"", k->path, k->values[v]);
	else if (k->type == LG_KEY_BOOL)
		lg_emit(b, "%s %s", k->path, v ? "true" : "false");
	else
		lg_emit(b, "%s %lld", k->path, (long long)v);
}

lg_status lg_form_check(const struct lg_launcher *l, const struct lg_spec *s, const char *entry)
{
	if (s->op != l->op || s->pass != l->pass)
		return lg_fail(LG_ERR_INVALID_ARG, "%s: kernel %s is op \"%s\", pass \"%s\"; this launcher takes "
			       "op \"%s\", pass \"%s\"", l->name, entry, lg_op_names[s->op], lg_pass_names[s->pass],
			       lg_op_names[l->op], lg_pass_names[l->pass]);
	bool ok = true;
	for (int i = 0; i < l->nkeys; i++)
		ok = ok && lg_spec_int(s, l->key[i]) == l->value[i];
	if (ok)
		return LG_OK;
	lg_buf has, takes;
	lg_buf_init(&has);
	lg_buf_init(&takes);
	for (int i = 0; i < l->nkeys; i++) {
		const struct lg_key *k = &s->fam->keys[l->key[i]];
		lg_emit(&has, "%s", i ? ", " : "");
		show_key(&has, k, lg_spec_int(s, l->key[i]));
		lg_emit(&takes, "%s", i ? ", " : "");
		show_key(&takes, k, l->value[i]);
	}
	char *a = lg_buf_finish(&has, NULL), *b = lg_buf_finish(&takes, NULL);
	lg_status st = lg_fail(LG_ERR_INVALID_ARG, "%s: kernel %s has %s; this launcher takes %s", l->name, entry,
			       a ? a : "?", b ? b : "?");
	free(a);
	free(b);
	return st;
}

void lg_form_map(const struct lg_launcher *l, const unsigned char *used, const int64_t *sizes, const lg_dptr *ptrs,
		 int64_t items, lg_dptr table, int64_t *all_sizes, lg_dptr *all_ptrs)
{
	for (int i = 0; i < l->nsizes; i++)
		all_sizes[i] = l->size_from[i] >= 0		 ? sizes[l->size_from[i]]
			       : l->size_from[i] == LG_FORM_LIST ? items
								 : l->size_value[i];
	for (int i = 0; i < l->nargs; i++)
		all_ptrs[i] = 0;
	for (int j = 0; j < l->params; j++) {
		unsigned bits = l->param_args[j];
		bool several = (bits & (bits - 1)) != 0;
		for (int i = 0; i < l->nargs; i++)
			if ((bits >> i) & 1u && (!several || !used || used[i]))
				all_ptrs[i] = j == l->list ? table : ptrs[j];
	}
}

void lg_form_help(lg_buf *b, const struct lg_family *f, enum lg_pass pass)
{
	int op = 0;
	while (op < LG_OP_COUNT && lg_family_get((enum lg_op)op) != f)
		op++;
	const struct lg_sig *g = &f->sig[pass];
	for (int i = 0; op < LG_OP_COUNT && i < lg_form_count(f, pass); i++) {
		struct lg_launcher l;
		char names[LG_MAX_ARGS][32];
		if (lg_form_resolve((enum lg_op)op, pass, i, &l, names) != LG_OK) {
			lg_emit(b, "  launcher: %s\n", lg_last_error());
			continue;
		}
		lg_emit(b, "  launcher: %s(k, stream", l.name);
		for (int n = 0; n < l.size_params; n++)
			for (int j = 0; j < g->nsizes; j++)
				if (l.size_from[j] == n)
					lg_emit(b, ", %s", g->sizes[j].name);
		for (int j = 0; j < l.params; j++)
			lg_emit(b, ", %s", names[j]);
		lg_emit(b, ")");
		for (int k = 0; k < l.nkeys; k++) {
			lg_emit(b, "%s", k ? ", " : ": ");
			show_key(b, &f->keys[l.key[k]], l.value[k]);
		}
		lg_emit(b, "\n");
	}
}
