/*
 * form.h - the launch forms of a pass (family.h, struct lg_form) resolved:
 * what a typed launcher takes and where each of its parameters goes.
 *
 * The build writes the typed launchers from it (tools/surface: lingen_ops.h
 * and lingen_ops.c); each launches through lg_kernel_run_form (runtime),
 * which checks the kernel with lg_form_check and makes the pass's sizes and
 * pointers with lg_form_map. lg_families_json and the tests read it too.
 */
#ifndef LG_FORM_H
#define LG_FORM_H

#include "family.h"

#define LG_FORM_KEYS 4     /* keys a form may fix */
#define LG_FORM_NAME 64    /* bytes of a launcher's name */
#define LG_FORM_FIXED (-1) /* size_from: the size is size_value[i] */
#define LG_FORM_LIST (-2)  /* size_from: the size is the rows of the launcher's list */

struct lg_launcher {
	char name[LG_FORM_NAME]; /* "lg_cross_entropy_forward" */
	enum lg_op op;
	enum lg_pass pass;
	int nsizes, nargs; /* the pass's */
	/* keys the kernel must have: key[i] (index in the family) = value[i] */
	int nkeys;
	int key[LG_FORM_KEYS];
	int64_t value[LG_FORM_KEYS];
	/* size i of the pass: size parameter size_from[i], or LG_FORM_FIXED, or
	 * LG_FORM_LIST; size_params of them are parameters */
	int size_params;
	signed char size_from[LG_MAX_SIZES];
	int64_t size_value[LG_MAX_SIZES];
	/* pointer parameter j goes to argument i for each bit i of
	 * param_args[j]; of several, to those the spec uses */
	int params;
	unsigned param_args[LG_MAX_ARGS];
	int list; /* the parameter that is a tensor list, or -1 */
};

/* Launch forms of f's pass: 0 when f has no such pass, else its declared
 * forms or 1 (the pass's own). */
int lg_form_count(const struct lg_family *f, enum lg_pass pass);

/* Form i of op's pass resolved into *l; names (NULL: not wanted) gets the
 * name of each pointer parameter (a size parameter's is its size's). A
 * declaration that does not resolve is LG_ERR_SPEC, naming the op, the
 * launcher and the word. */
lg_status lg_form_resolve(enum lg_op op, enum lg_pass pass, int i, struct lg_launcher *l,
			  char (*names)[32]);

/* The comment of form i of op's pass: the form's doc, else the pass's
 * (NULL: none). */
const char *lg_form_doc(enum lg_op op, enum lg_pass pass, int i);

/* Whether a kernel of spec s (entry: its entry point, for messages) may be
 * launched through l: its op and pass, and the keys l fixes; else
 * LG_ERR_INVALID_ARG through lg_fail, saying what it is and what l takes. */
lg_status lg_form_check(const struct lg_launcher *l, const struct lg_spec *s, const char *entry);

/* The pass's sizes (l->nsizes) and pointers (l->nargs) of a launch through
 * l from its parameters: sizes (l->size_params), ptrs (l->params; the
 * list's slot unread), the list's rows and table; used: the plan's (which
 * of several arguments a parameter goes to; NULL: all of them). */
void lg_form_map(const struct lg_launcher *l, const unsigned char *used, const int64_t *sizes, const lg_dptr *ptrs,
		 int64_t items, lg_dptr table, int64_t *all_sizes, lg_dptr *all_ptrs);

/* `lingen help OP`: a line per launcher of f's pass (its parameters and
 * the keys it fixes). */
void lg_form_help(lg_buf *b, const struct lg_family *f, enum lg_pass pass);

#endif
