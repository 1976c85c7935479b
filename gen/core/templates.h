/*
 * templates.h - the CUDA helpers of templates/<name>.cuh, embedded at build
 * time by cmake/embed.cmake. Generated code gets only the helpers its
 * kernels use, and what those use in turn (gen/templates.c says how they
 * are found). They are plain device functions, types and macros, not C++
 * templates.
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

/* Insert at offset `at` of b the helpers that the code from `at` to the end
 * of b uses, directly or through other helpers, in the versions for a
 * target of compute capability sm (80, 89, 90, ...): types first, each
 * helper after those it uses, under a one-line heading. Inserts nothing
 * when the code uses none. A malformed template is a lingen bug (asserts). */
void lg_emit_helpers(lg_buf *b, size_t at, int sm);

#endif
