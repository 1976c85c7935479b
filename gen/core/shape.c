/*
 * shape.c - argument shapes as declared (struct lg_arg.shape): a comma-
 * separated list of integer expressions over the family's integer spec
 * keys (by path: "hidden", "quant.block"; an enum key is its value's index,
 * a bool 0 or 1) and the pass's run-time sizes ("tokens"), with + - * /,
 * parentheses, cdiv(a, b) = ceil(a / b), round_up(a, b) = cdiv(a, b) * b (a
 * row pitch: qt [hidden, round_up(tokens, 128)]) and pick(c, a, b) =
 * (c ? b : a). A
 * number key may follow '*' where the product is a whole number
 * ("head_dim * rotary_fraction").
 *
 *   "tokens, hidden"          x [tokens, hidden]
 *   "hidden / 128, tokens"    rowwise scales, transposed
 *   "cdiv(tokens, 128), hidden"
 *
 * Read by the check/bench harness (buffer sizes, bytes moved), `lingen
 * help` and the Python package; never on the launch path. A malformed
 * declaration is a lingen bug: test_family evaluates every one.
 */
#include <ctype.h>
#include <stdbool.h>
#include <string.h>

#include "error.h"
#include "family.h"

const char *const lg_elem_names[LG_ELEM_COUNT] = {
	[LG_ELEM_DTYPE] = "dtype", [LG_ELEM_BF16] = "bf16", [LG_ELEM_FP32] = "fp32",
	[LG_ELEM_E4M3] = "e4m3",   [LG_ELEM_I32] = "int32", [LG_ELEM_I64] = "int64",
	[LG_ELEM_U8] = "uint8",    [LG_ELEM_INDEX] = "index",
};
const int lg_elem_bytes[LG_ELEM_COUNT] = {
	[LG_ELEM_DTYPE] = 0, [LG_ELEM_BF16] = 2, [LG_ELEM_FP32] = 4, [LG_ELEM_E4M3] = 1,
	[LG_ELEM_I32] = 4,   [LG_ELEM_I64] = 8,  [LG_ELEM_U8] = 1, [LG_ELEM_INDEX] = 0,
};

enum lg_elem lg_arg_elem(const struct lg_spec *s, const struct lg_arg *a)
{
	if (a->elem == LG_ELEM_INDEX) {
		int k = lg_family_key(s->fam, "index");
		return k >= 0 && lg_spec_int(s, k) == 1 ? LG_ELEM_I32 : LG_ELEM_I64;
	}
	if (a->elem != LG_ELEM_DTYPE)
		return a->elem;
	return s->dtype == LG_DTYPE_FP32 ? LG_ELEM_FP32 : s->dtype == LG_DTYPE_E4M3 ? LG_ELEM_E4M3 : LG_ELEM_BF16;
}

struct parser {
	const char *p, *expr;
	const struct lg_spec *s;
	const struct lg_family *f;
	const struct lg_sig *g;
	const int64_t *sizes;
	const char *err; /* first error; the value is then meaningless */
};

static void skip(struct parser *x)
{
	while (*x->p == ' ')
		x->p++;
}

static int64_t sum(struct parser *x);

static int64_t ident(struct parser *x)
{
	const char *b = x->p;
	while (isalnum((unsigned char)*x->p) || *x->p == '_' || *x->p == '.')
		x->p++;
	size_t n = (size_t)(x->p - b);
	bool up = n == 8 && strncmp(b, "round_up", 8) == 0;
	if ((n == 4 && strncmp(b, "cdiv", 4) == 0) || up) {
		const char *need = up ? "round_up needs (a, b)" : "cdiv needs (a, b)";
		skip(x);
		if (*x->p++ != '(')
			return x->err = need, 0;
		int64_t a = sum(x);
		skip(x);
		if (*x->p++ != ',')
			return x->err = need, 0;
		int64_t d = sum(x);
		skip(x);
		if (*x->p++ != ')')
			return x->err = need, 0;
		if (d <= 0)
			return x->err = up ? "round_up to a value <= 0" : "cdiv by a value <= 0", 0;
		return up ? (a + d - 1) / d * d : (a + d - 1) / d;
	}
	if (n == 4 && strncmp(b, "pick", 4) == 0) { /* pick(c, a, b): a if c is 0, else b */
		int64_t v[3];
		for (int i = 0; i < 3; i++) {
			skip(x);
			if (*x->p++ != (i ? ',' : '('))
				return x->err = "pick needs (c, a, b)", 0;
			v[i] = sum(x);
		}
		skip(x);
		if (*x->p++ != ')')
			return x->err = "pick needs (c, a, b)", 0;
		return v[0] ? v[2] : v[1];
	}
	for (int i = 0; i < x->g->nsizes; i++)
		if (strlen(x->g->sizes[i].name) == n && strncmp(b, x->g->sizes[i].name, n) == 0)
			return x->sizes[i];
	for (int k = 0; k < x->f->nkeys; k++) {
		const struct lg_key *key = &x->f->keys[k];
		if (strlen(key->path) == n && strncmp(b, key->path, n) == 0 && key->type != LG_KEY_NUMBER &&
		    key->type != LG_KEY_OBJECT)
			return x->s->v[k]; /* an integer, an enum's index, a bool's 0 or 1 */
	}
	return x->err = "unknown name", 0;
}

static int64_t atom(struct parser *x)
{
	skip(x);
	if (*x->p == '(') {
		x->p++;
		int64_t v = sum(x);
		skip(x);
		if (*x->p++ != ')')
			return x->err = "missing )", 0;
		return v;
	}
	if (isdigit((unsigned char)*x->p)) {
		int64_t v = 0;
		while (isdigit((unsigned char)*x->p))
			v = v * 10 + (*x->p++ - '0');
		return v;
	}
	if (isalpha((unsigned char)*x->p) || *x->p == '_')
		return ident(x);
	return x->err = "expected a name, a number or (", 0;
}

/* At a NUMBER key's name (after '*'): consume it, its value to *num. */
static bool number_key(struct parser *x, double *num)
{
	skip(x);
	const char *b = x->p;
	size_t n = 0;
	while (isalnum((unsigned char)b[n]) || b[n] == '_' || b[n] == '.')
		n++;
	for (int k = 0; n && k < x->f->nkeys; k++) {
		const struct lg_key *key = &x->f->keys[k];
		if (key->type == LG_KEY_NUMBER && strlen(key->path) == n && strncmp(b, key->path, n) == 0) {
			x->p += n;
			*num = x->s->num[k];
			return true;
		}
	}
	return false;
}

static int64_t product(struct parser *x)
{
	int64_t v = atom(x);
	for (;;) {
		skip(x);
		char op = *x->p;
		if (op != '*' && op != '/')
			return v;
		x->p++;
		double num;
		if (op == '*' && number_key(x, &num)) {
			double d = (double)v * num;
			if (d != (double)(int64_t)d)
				return x->err = "a number key gives a fraction", 0;
			v = (int64_t)d;
			continue;
		}
		int64_t r = atom(x);
		if (op == '/' && r <= 0)
			return x->err = "division by a value <= 0", 0;
		v = op == '*' ? v * r : v / r;
	}
}

static int64_t sum(struct parser *x)
{
	int64_t v = product(x);
	for (;;) {
		skip(x);
		char op = *x->p;
		if (op != '+' && op != '-')
			return v;
		x->p++;
		int64_t r = product(x);
		v = op == '+' ? v + r : v - r;
	}
}

lg_status lg_arg_shape(const struct lg_spec *s, int i, const int64_t *sizes, int64_t dims[8], int *ndims)
{
	const struct lg_family *f = s->fam;
	const struct lg_sig *g = &f->sig[s->pass];
	LG_ASSERT(i >= 0 && i < g->nargs);
	const struct lg_arg *a = &g->args[i];
	*ndims = 0;
	if (a->role == LG_ARG_WORKSPACE)
		return LG_OK;
	struct parser x = {.p = a->shape, .expr = a->shape, .s = s, .f = f, .g = g, .sizes = sizes};
	for (;;) {
		int64_t v = sum(&x);
		skip(&x);
		if (!x.err && *ndims == 8)
			x.err = "more than 8 dimensions";
		if (!x.err && v < 0)
			x.err = "a negative dimension";
		if (x.err)
			return lg_fail(LG_ERR_INVALID_ARG, "op %s, argument %s: shape \"%s\": %s at offset %d",
				       f->op, a->name, a->shape, x.err, (int)(x.p - x.expr));
		dims[(*ndims)++] = v;
		if (*x.p == '\0')
			return LG_OK;
		if (*x.p++ != ',')
			return lg_fail(LG_ERR_INVALID_ARG, "op %s, argument %s: shape \"%s\": expected , at offset %d",
				       f->op, a->name, a->shape, (int)(x.p - 1 - x.expr));
	}
}

lg_status lg_shape_value(const struct lg_spec *s, const char *expr, const int64_t *sizes, int64_t *v)
{
	const struct lg_family *f = s->fam;
	struct parser x = {.p = expr, .expr = expr, .s = s, .f = f, .g = &f->sig[s->pass], .sizes = sizes};
	*v = sum(&x);
	skip(&x);
	if (!x.err && *x.p != '\0')
		x.err = "expected the end";
	if (x.err)
		return lg_fail(LG_ERR_INVALID_ARG, "op %s: expression \"%s\": %s at offset %d", f->op, expr, x.err,
			       (int)(x.p - x.expr));
	return LG_OK;
}

lg_status lg_arg_count(const struct lg_spec *s, int i, const int64_t *sizes, int64_t *count)
{
	int64_t dims[8];
	int n;
	lg_status st = lg_arg_shape(s, i, sizes, dims, &n);
	*count = n ? 1 : 0;
	for (int d = 0; d < n; d++)
		*count *= dims[d];
	return st;
}

double lg_bytes_moved(const struct lg_spec *s, const unsigned char *used, const int64_t *sizes)
{
	const struct lg_sig *g = &s->fam->sig[s->pass];
	double bytes = 0;
	for (int i = 0; i < g->nargs; i++) {
		int64_t n = 0;
		if (!used[i] || g->args[i].role == LG_ARG_WORKSPACE || lg_arg_count(s, i, sizes, &n) != LG_OK)
			continue;
		bytes += (double)n * lg_elem_bytes[lg_arg_elem(s, &g->args[i])];
		if (g->args[i].role == LG_ARG_LIST) /* the items the rows point at, read in full */
			bytes += (double)(n / LG_LIST_ROW_BYTES) * LG_LIST_ITEM_BYTES;
	}
	return bytes;
}

void lg_sizes_at(const struct lg_family *f, enum lg_pass pass, int64_t n, int64_t sz[LG_MAX_SIZES])
{
	const struct lg_sig *g = &f->sig[pass];
	for (int i = 0; i < LG_MAX_SIZES; i++)
		sz[i] = n;
	for (int i = 0; i < g->nsizes; i++) {
		int64_t v = g->sizes[i].at ? g->sizes[i].at : n;
		sz[i] = v < g->sizes[i].min ? g->sizes[i].min : v > g->sizes[i].max ? g->sizes[i].max : v;
		int64_t m = g->sizes[i].multiple;
		if (m > 1 && sz[i] % m != 0) /* the multiple above it, else the one below */
			sz[i] += sz[i] + m - sz[i] % m <= g->sizes[i].max ? m - sz[i] % m : -(sz[i] % m);
	}
}

lg_status lg_size_check(const char *entry, const struct lg_size *z, int64_t v)
{
	bool mult = z->multiple > 1;
	if (v >= z->min && v <= z->max && (!mult || v % z->multiple == 0))
		return LG_OK;
	if (!mult)
		return lg_fail(LG_ERR_INVALID_ARG, "%s: %s = %lld, allowed: %lld to %lld", entry, z->name,
			       (long long)v, (long long)z->min, (long long)z->max);
	return lg_fail(LG_ERR_INVALID_ARG, "%s: %s = %lld, allowed: a multiple of %lld from %lld to %lld (%s)",
		       entry, z->name, (long long)v, (long long)z->multiple, (long long)z->min,
		       (long long)z->max, z->doc);
}
