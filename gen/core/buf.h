/*
 * buf.h - the one string builder behind all code emission.
 *
 * Errors are sticky: an allocation failure is recorded once, every later call
 * is a no-op, and lg_buf_finish() reports it. Generators are therefore flat
 * lists of emit calls with no checks in between. Indentation and braces live
 * here: lg_open() writes a line and indents, lg_close() dedents and writes
 * the closing brace, so emitted code is laid out as a person would write it.
 */
#ifndef LG_BUF_H
#define LG_BUF_H

#include <stdbool.h>
#include <stddef.h>

/* Generated lines stay within this many columns, a tab counting 8. */
#define LG_LINE_MAX 100

typedef struct lg_buf {
	char *data;
	size_t len, cap;
	int depth;   /* indentation level, one tab each */
	bool failed; /* sticky allocation failure */
} lg_buf;

void lg_buf_init(lg_buf *b);
void lg_buf_free(lg_buf *b);
/* Hand over the text (NUL-terminated; *len if len != NULL). NULL after an
 * allocation failure. The caller frees the result with free(). The buffer is
 * left empty and reusable. */
char *lg_buf_finish(lg_buf *b, size_t *len);

/* Append formatted text exactly as given (no indentation, no newline). */
void lg_emit(lg_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append raw bytes (templates, canonical JSON). */
void lg_raw(lg_buf *b, const char *s, size_t n);
/* Insert raw bytes at offset at (<= the length), moving the rest up. */
void lg_insert(lg_buf *b, size_t at, const char *s, size_t n);
/* One indented line; a newline is added. An empty format gives an empty line. */
void lg_line(lg_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An indented line ending a block opener ("for (...) {"), then indent. */
void lg_open(lg_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Dedent and write "}" (lg_close) or a closing line such as "};" or "} else {". */
void lg_close(lg_buf *b);
void lg_close_with(lg_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "// text" at the current indentation: each fused stage is explained. */
void lg_comment(lg_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The head of a function definition, `name(params)`; when that passes
 * LG_LINE_MAX columns, the parameters go on the next line, indented once. */
void lg_head(lg_buf *b, const char *name, const char *params);
/* Every float constant a generator writes: the shortest text that reads
 * back as (float)v, always a CUDA float literal ("2.0f", "1e-06f",
 * "-0.5f", never "2f"). v must round to 0 or a finite normal fp32 (the
 * spec readers refuse other values: lg_json_fp32_ok). */
#define LG_FLOAT_LITERAL_MAX 32
void lg_float_literal(double v, char out[LG_FLOAT_LITERAL_MAX]);
/* The same for a double constant ("2.0", "1e-06", "0.1"): v finite, 0 or
 * normal. */
void lg_double_literal(double v, char out[LG_FLOAT_LITERAL_MAX]);

/* The separator that opens a part of a generated file, "// ----- title: what
 * -----" (a kernel: its entry name and what it does; what may be NULL), after
 * a blank line unless the text so far is empty or ends with one. When that
 * passes LG_LINE_MAX columns, "what" goes on the next line as a comment. */
void lg_section(lg_buf *b, const char *title, const char *what);

#endif
