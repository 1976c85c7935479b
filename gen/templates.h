/*
 * templates.h - the CUDA fragments of templates/<name>.cuh, embedded at build
 * time by cmake/embed.cmake. Generated code pastes them verbatim; they are
 * plain device functions, not C++ templates.
 */
#ifndef LG_TEMPLATES_H
#define LG_TEMPLATES_H

#include <stddef.h>

#include "buf.h"

struct lg_template {
	const char *name; /* file name without .cuh */
	const char *text;
	size_t len;
};

extern const struct lg_template lg_templates[];
extern const size_t lg_template_count;

/* Text of a template by name; an unknown name is a lingen bug (asserts). */
const struct lg_template *lg_template_get(const char *name);
/* Paste a template into generated source, framed by a one-line comment. */
void lg_emit_template(lg_buf *b, const char *name);

#endif
