/*
 * generate.c - drives a family: plan, banner, emit (generate.h), and the
 * public lg_generate().
 */
#include "generate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "code.h"
#include "error.h"
#include "templates.h"

void lg_spec_uses(const struct lg_spec *s, unsigned char used[LG_MAX_ARGS])
{
	const struct lg_family *f = s->fam;
	memset(used, 1, LG_MAX_ARGS);
	if (f->uses)
		f->uses(s, used);
}

/* A plan's tensor maps are what cuTensorMapEncodeTiled takes (a bug in the
 * family otherwise): sm_90+, pointer arguments of 1-byte to 8-byte
 * elements, boxes of 1 to 256, a row of the box a multiple of 16 bytes and
 * within the swizzle's span, a row length (cols) that evaluates. */
static void check_tmaps(const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	const struct lg_sig *g = &s->fam->sig[s->pass];
	LG_ASSERT(p->ntmaps >= 0 && p->ntmaps <= LG_MAX_TMAPS);
	LG_ASSERT(p->ntmaps == 0 || t->sm >= 90);
	for (int i = 0; i < p->ntmaps; i++) {
		const struct lg_tmap_decl *m = &p->tmap[i];
		LG_ASSERT(m->arg >= 0 && m->arg < g->nargs);
		const struct lg_arg *a = &g->args[m->arg];
		LG_ASSERT(a->role != LG_ARG_WORKSPACE && a->role != LG_ARG_LIST && a->align % 16 == 0);
		unsigned row = m->box[0] * (unsigned)lg_elem_bytes[lg_arg_elem(s, a)];
		LG_ASSERT(m->box[0] >= 1 && m->box[0] <= 256 && m->box[1] >= 1 && m->box[1] <= 256);
		LG_ASSERT(row % 16 == 0);
		LG_ASSERT(m->swizzle == 0 || m->swizzle == 32 || m->swizzle == 64 || m->swizzle == 128);
		LG_ASSERT(m->swizzle == 0 || row <= (unsigned)m->swizzle);
		if (m->cols) { /* a row's elements: an expression over the keys and sizes */
			int64_t sz[LG_MAX_SIZES], v = 0;
			lg_sizes_at(s->fam, s->pass, 1, sz);
			LG_ASSERT(lg_shape_value(s, m->cols, sz, &v) == LG_OK);
		}
	}
}

lg_status lg_plan_for(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	const struct lg_family *f = s->fam;
	memset(p, 0, sizeof *p);
	p->nargs = f->sig[s->pass].nargs;
	p->nsizes = f->sig[s->pass].nsizes;
	lg_spec_uses(s, p->used);
	for (int k = 0; k < f->nkeys; k++)
		if (lg_key_is_tile(&f->keys[k]) && lg_spec_has(s, k)) {
			p->given.v[k] = s->v[k];
			p->given.set |= (uint64_t)1 << k;
		}
	lg_status st = f->plan(s, t, p);
	if (st == LG_OK)
		check_tmaps(s, t, p);
	return st;
}

lg_status lg_generate_planned(const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p,
			      char **src, size_t *len)
{
	lg_buf b;
	lg_buf_init(&b);
	lg_emit_banner(&b, s, t);
	size_t body = b.len;
	s->fam->emit(&b, s, t, p);
	lg_code_unname_unused(&b, body); /* the convention's arguments a kernel does not read */
	lg_emit_helpers(&b, body, t->sm); /* the helpers the kernels use, before them */
	*src = lg_buf_finish(&b, len);
	if (!*src)
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory generating %s", s->entry);
	return LG_OK;
}

lg_status lg_generate_for(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p,
			  char **src, size_t *len)
{
	lg_status st = lg_plan_for(s, t, p);
	return st == LG_OK ? lg_generate_planned(s, t, p, src, len) : st;
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

/* ------------------------------------------------- tile candidates */

/* Opt-in dynamic shared memory per CTA the target allows. */
static unsigned smem_limit(const struct lg_target *t)
{
	if (t->sm >= 90)
		return 227 * 1024;
	return t->sm == 80 || t->sm == 87 ? 163 * 1024 : 99 * 1024;
}

int lg_candidate_add(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out,
		     int n, int max, struct lg_tile_choice c)
{
	const struct lg_family *f = s->fam;
	struct lg_spec v;
	struct lg_plan p;
	if (n >= max)
		return n;
	bool ok = lg_spec_with_tile(s, &c, &v) == LG_OK && lg_spec_check(&v, "") == LG_OK;
	ok = ok && lg_plan_for(&v, t, &p) == LG_OK;
	int64_t one[LG_MAX_SIZES];
	lg_sizes_at(f, s->pass, 1, one);
	for (int e = 0; ok && e < p.nentries; e++) {
		struct lg_launch_dim d;
		f->geometry(&p, e, one, &d);
		ok = d.smem <= smem_limit(t) && d.block[0] * d.block[1] * d.block[2] <= 1024;
	}
	lg_clear_error();
	if (ok)
		out[n++] = c;
	return n;
}

int lg_candidate_grid(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int n,
		      int max, int k1, const int64_t *values1, int k2, const int64_t *values2)
{
	for (int i = 0; values1[i]; i++)
		for (int j = 0; values2[j]; j++) {
			struct lg_tile_choice c = lg_tile1(k1, values1[i]);
			c.v[k2] = values2[j];
			c.set |= (uint64_t)1 << k2;
			n = lg_candidate_add(s, t, out, n, max, c);
		}
	return n;
}

int lg_candidate_times(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int n0,
		       int n, int max, int k, const int64_t *values)
{
	int end = n;
	for (int j = 1; values[0] && values[j]; j++)
		for (int i = n0; i < end; i++) {
			struct lg_tile_choice c = out[i];
			c.v[k] = values[j];
			c.set |= (uint64_t)1 << k;
			n = lg_candidate_add(s, t, out, n, max, c);
		}
	return n;
}

const int64_t lg_min_ctas_ok[] = {1, 2, 3, 4, 0};

const char *lg_launch_bounds(char buf[48], int threads, int64_t min_ctas)
{
	if (min_ctas > 1)
		snprintf(buf, 48, "__launch_bounds__(%d, %lld)", threads, (long long)min_ctas);
	else
		snprintf(buf, 48, "__launch_bounds__(%d)", threads);
	return buf;
}

int lg_candidate_values(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out,
			int n, int max, int k, const int64_t *values)
{
	for (int i = 0; values[i]; i++)
		n = lg_candidate_add(s, t, out, n, max, lg_tile1(k, values[i]));
	return n;
}
