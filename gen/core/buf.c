/*
 * buf.c - the sticky-error string builder (see buf.h).
 */
#include "buf.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

void lg_buf_init(lg_buf *b) { memset(b, 0, sizeof *b); }

void lg_buf_free(lg_buf *b)
{
	free(b->data);
	lg_buf_init(b);
}

static bool reserve(lg_buf *b, size_t extra)
{
	if (b->failed)
		return false;
	if (b->len + extra + 1 <= b->cap)
		return true;
	size_t cap = b->cap ? b->cap : 4096;
	while (cap < b->len + extra + 1)
		cap *= 2;
	char *p = realloc(b->data, cap);
	if (!p) {
		b->failed = true;
		return false;
	}
	b->data = p;
	b->cap = cap;
	return true;
}

void lg_raw(lg_buf *b, const char *s, size_t n)
{
	if (!reserve(b, n))
		return;
	memcpy(b->data + b->len, s, n);
	b->len += n;
	b->data[b->len] = '\0';
}

void lg_insert(lg_buf *b, size_t at, const char *s, size_t n)
{
	if (at > b->len || !reserve(b, n))
		return;
	memmove(b->data + at + n, b->data + at, b->len - at + 1);
	memcpy(b->data + at, s, n);
	b->len += n;
}

__attribute__((format(printf, 2, 0))) static void vemit(lg_buf *b, const char *fmt, va_list ap)
{
	/* one pass when the text fits the room left (nearly always): the
	 * measuring pass is made only when it does not */
	if (!reserve(b, 64))
		return;
	va_list ap2;
	va_copy(ap2, ap);
	int n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap2);
	va_end(ap2);
	if (n < 0) {
		b->failed = true;
		b->data[b->len] = '\0';
		return;
	}
	if ((size_t)n >= b->cap - b->len) {
		if (!reserve(b, (size_t)n)) {
			b->data[b->len] = '\0';
			return;
		}
		vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	}
	b->len += (size_t)n;
}

void lg_emit(lg_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vemit(b, fmt, ap);
	va_end(ap);
}

static void indent(lg_buf *b)
{
	for (int i = 0; i < b->depth; i++)
		lg_raw(b, "\t", 1);
}

__attribute__((format(printf, 2, 0))) static void vline(lg_buf *b, const char *fmt, va_list ap)
{
	if (fmt[0])
		indent(b);
	vemit(b, fmt, ap);
	lg_raw(b, "\n", 1);
}

void lg_line(lg_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vline(b, fmt, ap);
	va_end(ap);
}

void lg_open(lg_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vline(b, fmt, ap);
	va_end(ap);
	b->depth++;
}

void lg_close(lg_buf *b) { lg_close_with(b, "}"); }

void lg_close_with(lg_buf *b, const char *fmt, ...)
{
	if (b->depth > 0)
		b->depth--;
	va_list ap;
	va_start(ap, fmt);
	vline(b, fmt, ap);
	va_end(ap);
	/* "} else {" (with a comment after it or not) reopens the block it closed */
	const char *comment = strstr(fmt, " //");
	size_t n = comment ? (size_t)(comment - fmt) : strlen(fmt);
	if (n && fmt[n - 1] == '{')
		b->depth++;
}

void lg_comment(lg_buf *b, const char *fmt, ...)
{
	indent(b);
	lg_raw(b, "// ", 3);
	va_list ap;
	va_start(ap, fmt);
	vemit(b, fmt, ap);
	va_end(ap);
	lg_raw(b, "\n", 1);
}

void lg_head(lg_buf *b, const char *name, const char *params)
{
	if ((size_t)(8 * b->depth) + strlen(name) + strlen(params) + 2 <= LG_LINE_MAX) {
		lg_line(b, "%s(%s)", name, params);
		return;
	}
	lg_line(b, "%s(", name);
	/* the parameters a tab in, as many a line as fit, broken after ", " */
	size_t room = LG_LINE_MAX - 8 * (size_t)(b->depth + 1);
	const char *p = params;
	while (strlen(p) + 1 > room) {
		const char *cut = NULL;
		for (const char *q = strstr(p, ", "); q && (size_t)(q - p) + 1 <= room; q = strstr(q + 2, ", "))
			cut = q;
		if (!cut)
			break;
		lg_line(b, "\t%.*s,", (int)(cut - p), p);
		p = cut + 2;
	}
	lg_line(b, "\t%s)", p);
}

void lg_section(lg_buf *b, const char *title, const char *what)
{
	if (b->len && !(b->len >= 2 && b->data[b->len - 1] == '\n' && b->data[b->len - 2] == '\n'))
		lg_raw(b, "\n", 1);
	if (!what)
		lg_line(b, "// ----- %s -----", title);
	else if ((size_t)(8 * b->depth) + strlen(title) + strlen(what) + 17 <= LG_LINE_MAX)
		lg_line(b, "// ----- %s: %s -----", title, what);
	else {
		lg_line(b, "// ----- %s -----", title);
		lg_comment(b, "%s", what);
	}
}

char *lg_buf_finish(lg_buf *b, size_t *len)
{
	if (b->failed || !reserve(b, 0)) {
		lg_buf_free(b);
		return NULL;
	}
	char *s = b->data;
	if (len)
		*len = b->len;
	lg_buf_init(b);
	return s;
}

/* "%.<p>g" of v into out (LG_FLOAT_LITERAL_MAX bytes); false if it did not fit. */
static bool fmt_g(char *out, int p, double v)
{
	char tmp[512]; /* any double at any precision fits: no truncation to reason about */
	int w = snprintf(tmp, sizeof tmp, "%.*g", p, v);
	if (w <= 0 || w >= LG_FLOAT_LITERAL_MAX)
		return false;
	memcpy(out, tmp, (size_t)w + 1);
	return true;
}

/* The shortest "%.<p>g" of v that reads back (by back()) as v, with a
 * point added when it would read as an integer, then suffix. */
static void literal(double v, int maxp, bool (*same)(const char *, double), const char *suffix, char *out)
{
	int p = 1;
	/* at most 17 digits, an exponent and a sign: never truncated (checked) */
	while (p < maxp) {
		if (fmt_g(out, p, v) && same(out, v))
			break;
		p++;
	}
	fmt_g(out, p, v);
	size_t n = strlen(out);
	/* "2" is an integer and "2f" no literal: a point makes it a float */
	snprintf(out + n, LG_FLOAT_LITERAL_MAX - n, "%s%s", strpbrk(out, ".e") ? "" : ".0", suffix);
}

static bool same_float(const char *t, double v) { return strtof(t, NULL) == (float)v; }
static bool same_double(const char *t, double v) { return strtod(t, NULL) == v; }

void lg_float_literal(double v, char out[LG_FLOAT_LITERAL_MAX])
{
	const float f = (float)v;
	LG_ASSERT(isfinite(f) && (f == 0 || fabsf(f) >= FLT_MIN));
	literal((double)f, 9, same_float, "f", out); /* 9 significant digits always read back */
}

void lg_double_literal(double v, char out[LG_FLOAT_LITERAL_MAX])
{
	LG_ASSERT(isfinite(v) && (v == 0 || fabs(v) >= DBL_MIN));
	literal(v, 17, same_double, "", out);
}
