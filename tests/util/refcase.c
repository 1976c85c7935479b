/*
 * refcase.c - spec and reference-case helpers of the tests (refcase.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "refcase.h"

#define SPEC_FMT "{\"op\": \"%s\", \"pass\": \"%s\", \"dtype\": \"%s\", %s}"

char *lg_test_spec_json(const char *op, const char *pass, const char *dtype, const char *keys)
{
	int n = snprintf(NULL, 0, SPEC_FMT, op, pass, dtype, keys);
	char *json = malloc((size_t)n + 1);
	assert_non_null(json);
	snprintf(json, (size_t)n + 1, SPEC_FMT, op, pass, dtype, keys);
	return json;
}

lg_spec *lg_test_spec(const char *op, const char *pass, const char *dtype, const char *keys)
{
	char *json = lg_test_spec_json(op, pass, dtype, keys);
	lg_spec *s = NULL;
	if (lg_spec_parse(json, &s) != LG_OK)
		fail_msg("%s: %s", json, lg_last_error());
	free(json);
	return s;
}

void lg_test_refused(const char *json, const char *what, const char *want1, const char *want2)
{
	lg_spec *s = NULL;
	assert_int_equal(lg_spec_parse(json, &s), LG_ERR_SPEC);
	const char *msg = lg_last_error();
	if (!strstr(msg, want1) || !strstr(msg, want2))
		fail_msg("%s: message \"%s\" lacks \"%s\" or \"%s\"", what, msg, want1, want2);
}

void lg_test_case_free(struct lg_ref_case *c)
{
	for (int i = 0; i < c->n; i++) {
		free(c->buf[i].host);
		free(c->buf[i].slack);
	}
}

void lg_test_plan(const lg_spec *s, const char *arch, struct lg_plan *p, lg_status want)
{
	const struct lg_family *f = lg_family_get(s->op);
	struct lg_target t;
	assert_true(lg_target_parse(arch, &t));
	memset(p, 0, sizeof *p);
	assert_int_equal(f->plan(s, &t, p), want);
}
