/*
 * code.h - reading back the CUDA source a generator emitted: which names
 * its code uses, and the one rewrite made after emission (entry points'
 * unused parameters left unnamed).
 *
 * "Code" is the text with comments, string and character literals blanked
 * (an asm string's braces and a comment's words are not code).
 */
#ifndef LG_CODE_H
#define LG_CODE_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"

/* Whether the code of text names the identifier name (a whole word, not a
 * member: blockIdx.x does not name x). */
bool lg_code_names(const char *text, const char *name);

/* In b's text from offset at: each entry point's (`extern "C" __global__`)
 * parameter that its body never names keeps its type and loses its name
 * (`u64 g` becomes `u64` and g in a comment after it). The calling
 * convention (family.h) stays whole: the launch passes every argument, the
 * kernel reads those it needs. Each head changed is laid out again
 * (lg_head). */
void lg_code_unname_unused(lg_buf *b, size_t at);

#endif
