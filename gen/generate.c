/*
 * generate.c - drives a family: plan, banner, emit (generate.h), and the
 * public lg_generate().
 */
#include "generate.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

lg_status lg_generate_for(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p,
			  char **src, size_t *len)
{
	const struct lg_family *f = lg_family_get(s->op);
	memset(p, 0, sizeof *p);
	lg_status st = f->plan(s, t, p);
	if (st != LG_OK)
		return st;
	lg_buf b;
	lg_buf_init(&b);
	lg_emit_banner(&b, s, t);
	f->emit(&b, s, t, p);
	*src = lg_buf_finish(&b, len);
	if (!*src)
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory generating %s", s->entry);
	return LG_OK;
}

lg_status lg_generate(const lg_spec *s, const char *arch, char **src)
{
	lg_clear_error();
	if (!s || !src)
		return lg_fail(LG_ERR_INVALID_ARG, "lg_generate: spec and src must not be NULL");
	struct lg_target t;
	if (!lg_target_parse(arch ? arch : "sm_90a", &t))
		return lg_fail(LG_ERR_INVALID_ARG, "unknown arch '%s': expected sm_<NN>[a] with NN >= 80, e.g. sm_90a",
			       arch);
	struct lg_plan p;
	return lg_generate_for(s, &t, &p, src, NULL);
}
