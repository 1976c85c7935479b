/*
 * test_family.c - every registered family is complete and its declaration
 * is sound: the op table, the spec keys (ranges, defaults, objects, entry
 * names), the signature of each pass (sizes, arguments, shapes that
 * evaluate), the CPU reference (a compare mode for every output), and a
 * smallest valid spec that parses back from its canonical form, plans and
 * generates for sm_90a and sm_80. A family added to gen/core/families.h is
 * checked here without a line of this file changing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <cjson/cJSON.h>

#include "family.h"
#include "generate.h"
#include "lingen.h"
#include "ref.h"
#include "spec.h"

/* The smallest value a key allows. */
static int64_t smallest(const struct lg_key *k)
{
	if (k->only)
		return k->only[0];
	int64_t v = k->min;
	if (k->multiple > 1 && v % k->multiple)
		v += k->multiple - v % k->multiple;
	return v;
}

/* A valid spec of f's pass p with every required key at its smallest value. */
static void smallest_spec(const struct lg_family *f, int op, int p, struct lg_spec *s)
{
	memset(s, 0, sizeof *s);
	s->op = (enum lg_op)op;
	s->fam = f;
	s->pass = (enum lg_pass)p;
	for (int d = 0; d < LG_DTYPE_COUNT; d++)
		if ((f->dtypes >> d) & 1u) {
			s->dtype = (enum lg_dtype)d;
			break;
		}
	for (int k = 0; k < f->nkeys; k++) {
		const struct lg_key *key = &f->keys[k];
		const char *dot = strrchr(key->path, '.');
		bool parent_set = true;
		if (dot) {
			char parent[64];
			snprintf(parent, sizeof parent, "%.*s", (int)(dot - key->path), key->path);
			int pk = lg_family_key(f, parent);
			parent_set = pk >= 0 && lg_spec_has(s, pk);
		}
		if (!parent_set)
			continue;
		if (key->type == LG_KEY_OBJECT && (key->flags & LG_KEY_REQUIRED)) {
			s->v[k] = 1;
		} else if (key->flags & LG_KEY_REQUIRED) {
			s->v[k] = smallest(key);
		} else if (key->has_def) {
			s->v[k] = key->def;
			s->num[k] = key->def_num;
		} else {
			continue;
		}
		s->set |= (uint64_t)1 << k;
	}
	lg_spec_make_entry(s);
}

static void check_keys(const struct lg_family *f)
{
	assert_true(f->nkeys >= 0 && f->nkeys <= LG_MAX_KEYS);
	for (int k = 0; k < f->nkeys; k++) {
		const struct lg_key *key = &f->keys[k];
		assert_non_null(key->path);
		assert_true(key->path[0] != '\0');
		assert_int_equal(lg_family_key(f, key->path), k); /* declared once */
		const char *dot = strrchr(key->path, '.');
		if (dot) { /* its object is declared before it */
			char parent[64];
			snprintf(parent, sizeof parent, "%.*s", (int)(dot - key->path), key->path);
			int pk = lg_family_key(f, parent);
			assert_true(pk >= 0 && pk < k);
			assert_int_equal(f->keys[pk].type, LG_KEY_OBJECT);
		}
		assert_false((key->flags & LG_KEY_REQUIRED) && key->has_def);
		if (lg_key_is_tile(key)) { /* optional, no default, named after _t */
			assert_int_equal(key->type, LG_KEY_INT);
			assert_false(key->has_def || (key->flags & LG_KEY_REQUIRED));
			assert_non_null(key->abbrev);
		}
		switch (key->type) {
		case LG_KEY_INT:
			assert_true(key->min <= key->max);
			for (int i = 0; key->only && key->only[i]; i++)
				assert_true(key->only[i] >= key->min && key->only[i] <= key->max);
			if (key->has_def)
				assert_true(key->def >= key->min && key->def <= key->max);
			break;
		case LG_KEY_NUMBER:
			assert_true(key->lo < key->hi);
			if (key->has_def)
				assert_true(key->def_num > key->lo && key->def_num < key->hi);
			break;
		case LG_KEY_ENUM:
			assert_non_null(key->values);
			assert_true(key->nvalues > 0);
			assert_true(!key->has_def || (key->def >= 0 && key->def < key->nvalues));
			break;
		case LG_KEY_BOOL:
			assert_true(!key->has_def || key->def == 0 || key->def == 1);
			assert_true(key->naming == LG_NAME_NEVER || key->words);
			break;
		case LG_KEY_OBJECT:
			assert_int_equal(key->naming, LG_NAME_NEVER);
			break;
		}
		if (key->naming != LG_NAME_NEVER && (key->type == LG_KEY_INT || key->type == LG_KEY_NUMBER))
			assert_non_null(key->abbrev);
	}
}

static void check_sig(const struct lg_family *f, const struct lg_spec *s)
{
	const struct lg_sig *g = &f->sig[s->pass];
	assert_true(g->nargs >= 1 && g->nargs <= LG_MAX_ARGS);
	assert_true(g->nsizes >= 0 && g->nsizes <= LG_MAX_SIZES);
	for (int i = 0; i < g->nsizes; i++) {
		assert_non_null(g->sizes[i].name);
		assert_non_null(g->sizes[i].cname);
		assert_true(g->sizes[i].min >= 0 && g->sizes[i].min <= g->sizes[i].max);
	}
	int64_t sizes[LG_MAX_SIZES];
	lg_sizes_at(f, s->pass, 7, sizes);
	for (int i = 0; i < g->nargs; i++) {
		const struct lg_arg *a = &g->args[i];
		assert_non_null(a->name);
		for (int j = 0; j < i; j++)
			assert_string_not_equal(a->name, g->args[j].name);
		assert_true(a->align >= 1 && (a->align & (a->align - 1)) == 0);
		assert_true((unsigned)a->elem < LG_ELEM_COUNT);
		int64_t n = -1;
		if (lg_arg_count(s, i, sizes, &n) != LG_OK)
			fail_msg("%s %s: %s", f->op, a->name, lg_last_error());
		if (a->role != LG_ARG_WORKSPACE)
			assert_true(n > 0);
	}
}

/* The reference describes a compare mode for every output. */
static void check_ref(const struct lg_spec *s)
{
	const struct lg_ref_family *r = lg_ref_family_get(s->op);
	assert_non_null(r->describe);
	assert_non_null(r->fill);
	assert_non_null(r->run);
	struct lg_ref_case c;
	int64_t sizes[LG_MAX_SIZES];
	lg_sizes_at(lg_family_get(s->op), s->pass, 7, sizes);
	assert_int_equal(lg_ref_case_init(&c, s, sizes, NULL, 0), LG_OK);
	r->describe(s, &c);
	for (int i = 0; i < c.n; i++)
		if (c.buf[i].output)
			assert_int_not_equal(c.buf[i].cmp, LG_CMP_NONE);
		else
			assert_int_equal(c.buf[i].cmp, LG_CMP_NONE);
}

/* Canonical JSON parses back to the same spec; plans and generates. */
static void check_spec(const struct lg_spec *s)
{
	char *canon = lg_spec_to_json(s);
	assert_non_null(canon);
	lg_spec *back = NULL;
	if (lg_spec_parse(canon, &back) != LG_OK)
		fail_msg("%s: %s", canon, lg_last_error());
	char *again = lg_spec_to_json(back);
	assert_string_equal(canon, again);
	assert_string_equal(back->entry, s->entry);
	static const char *const archs[] = {"sm_90a", "sm_80"};
	for (int a = 0; a < 2; a++) {
		struct lg_target t;
		struct lg_plan p;
		char *src = NULL;
		assert_true(lg_target_parse(archs[a], &t));
		if (back->fam->target_only && strcmp(back->fam->target_only, archs[a]) != 0) {
			/* refused, naming the target it needs */
			assert_int_not_equal(lg_generate_for(back, &t, &p, &src, NULL), LG_OK);
			assert_non_null(strstr(lg_last_error(), back->fam->target_only));
			assert_null(src);
			continue;
		}
		if (lg_generate_for(back, &t, &p, &src, NULL) != LG_OK)
			fail_msg("%s for %s: %s", canon, archs[a], lg_last_error());
		assert_true(p.nentries >= 1 && p.nentries <= LG_MAX_ENTRIES);
		for (int e = 0; e < p.nentries; e++)
			assert_non_null(strstr(src, p.entry[e]));
		free(src);
	}
	free(again);
	free(canon);
	lg_spec_free(back);
}

static void test_every_family(void **state)
{
	(void)state;
	assert_true(LG_OP_COUNT >= 2);
	for (int op = 0; op < LG_OP_COUNT; op++) {
		const struct lg_family *f = lg_family_get((enum lg_op)op);
		assert_non_null(f);
		assert_string_equal(f->op, lg_op_names[op]);
		assert_non_null(f->summary);
		assert_true(f->passes != 0 && f->dtypes != 0);
		assert_non_null(f->plan);
		assert_non_null(f->emit);
		assert_non_null(f->geometry);
		check_keys(f);
		for (int p = 0; p < LG_PASS_COUNT; p++) {
			if (!((f->passes >> p) & 1u))
				continue;
			struct lg_spec s;
			smallest_spec(f, op, p, &s);
			check_sig(f, &s);
			check_ref(&s);
			check_spec(&s);
			char *help = lg_family_help(f);
			assert_non_null(help);
			assert_non_null(strstr(help, f->op));
			free(help);
		}
	}
}

/* Shape expressions: the operators, cdiv, round_up, and errors naming the argument. */
static void test_shapes(void **state)
{
	(void)state;
	lg_spec *s = NULL;
	assert_int_equal(lg_spec_parse("{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
				       "\"hidden\": 384, \"quant\": {}}",
				       &s),
			 LG_OK);
	const struct lg_sig *g = &lg_family_get(s->op)->sig[s->pass];
	int64_t sizes[LG_MAX_SIZES] = {129}, dims[8];
	int n = 0;
	for (int i = 0; i < g->nargs; i++) {
		assert_int_equal(lg_arg_shape(s, i, sizes, dims, &n), LG_OK);
		if (strcmp(g->args[i].name, "st") == 0) { /* cdiv(tokens, 128), hidden */
			assert_int_equal(n, 2);
			assert_int_equal(dims[0], 2);
			assert_int_equal(dims[1], 384);
		}
		if (strcmp(g->args[i].name, "qt") == 0) { /* hidden, round_up(tokens, 128) */
			assert_int_equal(n, 2);
			assert_int_equal(dims[0], 384);
			assert_int_equal(dims[1], 256);
		}
		if (strcmp(g->args[i].name, "s") == 0) { /* hidden / 128, tokens */
			assert_int_equal(n, 2);
			assert_int_equal(dims[0], 3);
			assert_int_equal(dims[1], 129);
		}
	}
	/* all seven outputs and inputs: x, w, q, s, rms, qt [384, round_up(129, 128)], st */
	unsigned char used[LG_MAX_ARGS] = {1, 1, 1, 1, 1, 1, 1};
	double want = 129.0 * 384 * 2 + 384 * 2 + 129.0 * 384 + 3 * 129 * 4 + 129 * 4 + 256.0 * 384 +
		      2 * 384 * 4;
	assert_true(lg_bytes_moved(s, used, sizes) == want);
	used[2] = used[3] = 0; /* columnwise only */
	assert_true(lg_bytes_moved(s, used, sizes) == want - 129.0 * 384 - 3 * 129 * 4);
	/* one expression (a tensor map's row length) */
	int64_t v = -1;
	assert_int_equal(lg_shape_value(s, "round_up(tokens, 16)", sizes, &v), LG_OK);
	assert_int_equal(v, 144);
	assert_int_equal(lg_shape_value(s, LG_QT_PITCH, sizes, &v), LG_OK); /* the columnwise copies' pitch */
	assert_int_equal(v, 256);
	assert_int_equal(lg_shape_value(s, "round_up(hidden, 128) + cdiv(tokens, 128)", sizes, &v), LG_OK);
	assert_int_equal(v, 386);
	assert_int_equal(lg_shape_value(s, "tokens", sizes, &v), LG_OK);
	assert_int_equal(v, 129);
	assert_int_equal(lg_shape_value(s, "round_up(tokens, 0)", sizes, &v), LG_ERR_INVALID_ARG);
	assert_non_null(strstr(lg_last_error(), "round_up to a value <= 0"));
	assert_int_equal(lg_shape_value(s, "tokens, hidden", sizes, &v), LG_ERR_INVALID_ARG);
	lg_spec_free(s);
}

/* The JSON export holds every family with its keys, sizes and arguments as
 * declared, and the public shape call agrees with the declaration. */
static void test_export(void **state)
{
	(void)state;
	char *text = NULL;
	assert_int_equal(lg_families_json(&text), LG_OK);
	cJSON *root = cJSON_Parse(text);
	assert_non_null(root);
	cJSON *ops = cJSON_GetObjectItem(root, "ops");
	assert_int_equal(cJSON_GetArraySize(ops), LG_OP_COUNT);
	for (int op = 0; op < LG_OP_COUNT; op++) {
		const struct lg_family *f = lg_family_get((enum lg_op)op);
		cJSON *o = cJSON_GetArrayItem(ops, op);
		assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(o, "op")), f->op);
		assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "keys")), f->nkeys);
		for (int p = 0; p < LG_PASS_COUNT; p++) {
			cJSON *g = cJSON_GetObjectItem(cJSON_GetObjectItem(o, "passes"), lg_pass_names[p]);
			assert_int_equal(g != NULL, ((f->passes >> p) & 1u) != 0);
			if (!g)
				continue;
			assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(g, "args")), f->sig[p].nargs);
			assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(g, "sizes")), f->sig[p].nsizes);
		}
	}
	cJSON_Delete(root);
	free(text);
	lg_spec *s = NULL;
	assert_int_equal(lg_spec_parse("{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
				       "\"hidden\": 384, \"quant\": {}}",
				       &s),
			 LG_OK);
	int64_t sizes[1] = {129}, dims[4];
	int n = 0;
	assert_int_equal(lg_spec_arg_shape(s, 6, sizes, 1, dims, 4, &n), LG_OK); /* st */
	assert_int_equal(n, 2);
	assert_int_equal(dims[0], 2);
	assert_int_equal(dims[1], 384);
	assert_int_equal(lg_spec_arg_shape(s, 7, sizes, 1, dims, 4, &n), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_spec_arg_shape(s, 0, sizes, 0, dims, 4, &n), LG_ERR_INVALID_ARG);
	sizes[0] = -1;
	assert_int_equal(lg_spec_arg_shape(s, 0, sizes, 1, dims, 4, &n), LG_ERR_INVALID_ARG);
	assert_non_null(strstr(lg_last_error(), "tokens = -1"));
	sizes[0] = 5;
	assert_int_equal(lg_spec_arg_shape(s, 0, sizes, 1, dims, 1, &n), LG_ERR_INVALID_ARG);
	for (int i = 0; i < 7; i++) /* output both: every argument */
		assert_int_equal(lg_spec_arg_used(s, i), 1);
	assert_int_equal(lg_spec_arg_used(s, 7), -1);
	assert_int_equal(lg_spec_arg_used(s, -1), -1);
	assert_int_equal(lg_spec_arg_used(NULL, 0), -1);
	lg_spec_free(s);
	/* the rowwise copy only: qt and st (5, 6) unused, x w q s rms used */
	assert_int_equal(lg_spec_parse("{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
				       "\"hidden\": 384, \"quant\": {\"output\": \"rowwise\"}}",
				       &s),
			 LG_OK);
	const int rowwise[7] = {1, 1, 1, 1, 1, 0, 0};
	for (int i = 0; i < 7; i++)
		assert_int_equal(lg_spec_arg_used(s, i), rowwise[i]);
	lg_spec_free(s);
	/* fp8_quant columnwise: x qt st (0, 3, 4) used, q s not */
	assert_int_equal(lg_spec_parse("{\"op\": \"fp8_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", "
				       "\"hidden\": 256, \"quant\": {\"output\": \"columnwise\"}}",
				       &s),
			 LG_OK);
	const int colwise[5] = {1, 0, 0, 1, 1};
	for (int i = 0; i < 5; i++)
		assert_int_equal(lg_spec_arg_used(s, i), colwise[i]);
	lg_spec_free(s);
	/* the typed launchers refuse a NULL kernel before touching anything */
	assert_int_equal(lg_group_rmsnorm_gate_forward(NULL, NULL, 2, 8, 0, 0, 0, 0), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_group_rmsnorm_gate_backward(NULL, NULL, 2, 8, 0, 0, 0, 0, 0, 0, 0, 0),
			 LG_ERR_INVALID_ARG);
	assert_int_equal(lg_qk_norm_rope_forward(NULL, NULL, 8, 2, 0, 0, 0, 0, 0, 0, 0, 0), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_qk_norm_rope_backward(NULL, NULL, 8, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
			 LG_ERR_INVALID_ARG);
	assert_int_equal(lg_rmsnorm_forward(NULL, NULL, 8, 0, 0, 0, 0), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_swiglu_quant_forward(NULL, NULL, 8, 0, 0, 0, 0, 0), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_swiglu_quant_backward(NULL, NULL, 8, 0, 0, 0, 0, 0, 0, 0), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_batch_swiglu_quant_forward(NULL, NULL, 8, 0, 0, 0, 0, 0, 0, 0), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_batch_swiglu_quant_backward(NULL, NULL, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
			 LG_ERR_INVALID_ARG);
	assert_int_equal(lg_fp8_quant_forward(NULL, NULL, 8, 0, 0, 0, 0, 0), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_fp8_quant_batched_forward(NULL, NULL, 8, 2, 0, 0, 0, 0, 0, 0), LG_ERR_INVALID_ARG);
	assert_int_equal(lg_fp8_quant_weight_forward(NULL, NULL, 8, 0, 0, 0, 0, 0), LG_ERR_INVALID_ARG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_family),
		cmocka_unit_test(test_shapes),
		cmocka_unit_test(test_export),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
