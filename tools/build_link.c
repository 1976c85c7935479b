/*
 * build_link.c - linking a bundle's relocatable cubins per arch
 * (build_link.h; the link itself is runtime/jitlink.c).
 */
#include "build_link.h"

#include <stdio.h>
#include <stdlib.h>

#include "bundle.h"    /* lg_bundle_linked_checksum */
#include "cubin_elf.h" /* lg_cubin_has_function */
#include "jitlink.h"

/* Does the module define every entry point of the jobs in it? Names the
 * first missing on stderr. */
static bool has_entries(const struct lg_compile_set *s, int a, const struct lg_build_linked *l, const bool *in_link)
{
	for (size_t i = 0; i < s->n; i++) {
		const struct lg_compiled *c = &s->c[i];
		for (int e = 0; c->arch == a && in_link[i] && e < c->plan.nentries; e++)
			if (!lg_cubin_has_function(l->cubin, l->size, c->plan.entry[e])) {
				fprintf(stderr, "lingen: no linked module for %s: %s is not defined in it; each kernel is loaded alone\n",
					s->archs[a], c->plan.entry[e]);
				return false;
			}
	}
	return true;
}

/* Say why a kernel of arch a is not in the module (a SASS rewrite, or its
 * relocatable compile failed). */
static void left_out(const struct lg_compile_set *s, const struct lg_compiled *c)
{
	const char *entry = lg_spec_entry(c->k->spec);
	if (c->rdc_error)
		fprintf(stderr, "lingen: %s %s: not in the linked module (its relocatable compile failed: %.300s)\n",
			entry, s->archs[c->arch], c->rdc_error);
	else
		fprintf(stderr, "lingen: %s %s: not in the linked module (its plan rewrites the SASS); loaded alone\n",
			entry, s->archs[c->arch]);
}

/* The module of arch a from the jobs' relocatable cubins. */
static bool link_arch(const struct lg_compile_set *s, int a, struct lg_build_linked *l, bool *in_link)
{
	const void **obj = calloc(s->n, sizeof *obj);
	size_t *size = calloc(s->n, sizeof *size), n = 0;
	const char **name = calloc(s->n, sizeof *name);
	bool ok = obj && size && name;
	for (size_t i = 0; ok && i < s->n; i++) {
		const struct lg_compiled *c = &s->c[i];
		if (c->arch != a || c->skipped)
			continue;
		if (!c->rdc) {
			left_out(s, c);
			continue;
		}
		obj[n] = c->rdc;
		size[n] = c->rdc_size;
		name[n++] = lg_spec_entry(c->k->spec);
		in_link[i] = true;
	}
	double t0 = lg_cli_now();
	lg_status st = ok && n ? lg_jitlink_link(s->archs[a], obj, size, (const char *const *)name, n, &l->cubin, &l->size)
			       : LG_OK;
	if (st != LG_OK)
		fprintf(stderr, "lingen: no linked module for %s: %s\n  each kernel is loaded alone\n", s->archs[a],
			lg_last_error());
	if (st == LG_OK && l->cubin && !has_entries(s, a, l, in_link)) {
		free(l->cubin);
		l->cubin = NULL;
	}
	if (l->cubin) {
		l->checksum = lg_bundle_linked_checksum(s->archs[a], l->cubin, l->size);
		fprintf(stderr, "linked %zu kernel%s for %s into one module (%zu bytes, %.1f ms)\n", n, n == 1 ? "" : "s",
			s->archs[a], l->size, 1e3 * (lg_cli_now() - t0));
	} else {
		for (size_t i = 0; i < s->n; i++)
			if (s->c[i].arch == a)
				in_link[i] = false;
	}
	free(obj);
	free(size);
	free(name);
	return ok;
}

bool lg_build_link(const struct lg_compile_set *s, struct lg_build_linked *out, bool *in_link)
{
	for (int a = 0; a < s->narch; a++)
		out[a] = (struct lg_build_linked){0};
	for (size_t i = 0; i < s->n; i++)
		in_link[i] = false;
	if (!s->relocatable)
		return true;
	for (int a = 0; a < s->narch; a++)
		if (!link_arch(s, a, &out[a], in_link))
			return false;
	return true;
}

void lg_build_linked_free(struct lg_build_linked *l, int narch)
{
	for (int a = 0; l && a < narch; a++) {
		free(l[a].cubin);
		l[a].cubin = NULL;
	}
}
