/*
 * gencheck.c - the rules of generated source (gencheck.h).
 */
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "buf.h"
#include "gencheck.h"
#include "nvrtc.h"

void lg_test_check_line_width(const char *what, const char *src)
{
	int line = 1, col = 0;
	for (const char *p = src;; p++) {
		if (*p == '\n' || !*p) {
			if (col > LG_LINE_MAX) {
				const char *start = p - 1;
				while (start > src && start[-1] != '\n')
					start--;
				fail_msg("%s:%d: %d columns, more than %d:\n%.*s", what, line, col, LG_LINE_MAX,
					 (int)(p - start), start);
			}
			if (!*p)
				return;
			line++;
			col = 0;
		} else if (*p == '\t') {
			col = (col / 8 + 1) * 8;
		} else if ((*p & 0xc0) != 0x80) { /* a character, not a UTF-8 continuation byte */
			col++;
		}
	}
}

/* The code of src with comments, string and character literals blanked. */
static char *code_only(const char *src)
{
	char *c = strdup(src);
	assert_non_null(c);
	for (char *p = c; *p;) {
		if (p[0] == '/' && p[1] == '/') {
			while (*p && *p != '\n')
				*p++ = ' ';
		} else if (p[0] == '/' && p[1] == '*') {
			char *e = strstr(p + 2, "*/");
			char *end = e ? e + 2 : p + strlen(p);
			for (; p < end; p++)
				if (*p != '\n')
					*p = ' ';
		} else if (*p == '"' || *p == '\'') {
			char q = *p++;
			while (*p && *p != q && *p != '\n') {
				if (*p == '\\' && p[1])
					*p++ = ' ';
				*p++ = ' ';
			}
			if (*p == q)
				p++;
		} else {
			p++;
		}
	}
	return c;
}

static bool ident_char(char ch) { return ch == '_' || isalnum((unsigned char)ch); }

/* Occurrences of the identifier name[0..n) in code. */
static int uses(const char *code, const char *name, size_t n)
{
	int count = 0;
	for (const char *p = code; (p = strstr(p, name)) != NULL; p++)
		if ((p == code || !ident_char(p[-1])) && !ident_char(p[n]) && strncmp(p, name, n) == 0)
			count++;
	return count;
}

/* The name a top-level line of code defines, or NULL: `typedef ... NAME;`,
 * `struct ... NAME {`, `#define NAME`, or a function head `... NAME(`. */
static const char *defined_name(const char *line, size_t *n)
{
	const char *end = line + strcspn(line, "\n");
	const char *stop = NULL;
	if (strncmp(line, "typedef ", 8) == 0)
		stop = memchr(line, ';', (size_t)(end - line));
	else if (strncmp(line, "struct ", 7) == 0)
		stop = memchr(line, '{', (size_t)(end - line));
	else if (strncmp(line, "static ", 7) == 0)
		stop = memchr(line, '(', (size_t)(end - line));
	else if (strncmp(line, "#define ", 8) == 0)
		for (stop = line + 8; ident_char(*stop); stop++)
			;
	if (!stop)
		return NULL;
	while (stop > line && !ident_char(stop[-1]))
		stop--;
	const char *start = stop;
	while (start > line && ident_char(start[-1]))
		start--;
	*n = (size_t)(stop - start);
	return *n ? start : NULL;
}

void lg_test_check_helpers_used(const char *what, const char *src)
{
	char *code = code_only(src);
	for (const char *line = code; *line; line += strcspn(line, "\n") + (line[strcspn(line, "\n")] != 0)) {
		size_t n = 0;
		const char *name = defined_name(line, &n);
		char id[128];
		if (!name || n >= sizeof id)
			continue;
		memcpy(id, name, n);
		id[n] = '\0';
		if (uses(code, id, n) < 2)
			fail_msg("%s: %s is defined but not used", what, id);
	}
	free(code);
}

/* Whether the binary operator at p (after a 0 or before one) is one whose
 * term a 0 leaves unchanged or zero: + - * | ^ << >> (not ++ -- || -> or
 * a compound assignment). */
static bool zero_op(const char *p)
{
	if ((p[0] == '<' && p[1] == '<') || (p[0] == '>' && p[1] == '>'))
		return p[2] != '=';
	if (!strchr("+-*|^", p[0]) || !p[0])
		return false;
	return p[1] != p[0] && p[1] != '=' && p[1] != '>';
}

/* Whether code[i] is an integer literal 0 (0, 0u, 0ll, ...): its start and
 * length in *len. */
static bool int_zero(const char *code, size_t i, size_t *len)
{
	if (code[i] != '0' || (i && (ident_char(code[i - 1]) || code[i - 1] == '.')))
		return false;
	size_t k = i + 1;
	while (code[k] == 'u' || code[k] == 'U' || code[k] == 'l' || code[k] == 'L')
		k++;
	if (ident_char(code[k]) || code[k] == '.')
		return false;
	*len = k - i;
	return true;
}

void lg_test_check_no_zero_terms(const char *what, const char *src)
{
	char *code = code_only(src);
	int line = 1;
	for (size_t i = 0; code[i]; i++) {
		size_t len = 0;
		if (code[i] == '\n')
			line++;
		if (!int_zero(code, i, &len))
			continue;
		/* the operator after the 0, and the one before it with an operand before that */
		const char *after = code + i + len;
		while (*after == ' ')
			after++;
		size_t b = i;
		while (b > 0 && code[b - 1] == ' ')
			b--;
		bool before = false;
		size_t o = b > 1 && (code[b - 1] == '<' || code[b - 1] == '>') && code[b - 2] == code[b - 1]
				   ? b - 2 : b - 1; /* the operator's first character */
		if (b > 0 && zero_op(code + o) && !(o > 0 && code[o - 1] == code[o])) {
			while (o > 0 && code[o - 1] == ' ')
				o--;
			before = o > 0 && (ident_char(code[o - 1]) || code[o - 1] == ')' || code[o - 1] == ']');
		}
		if (zero_op(after) || before) {
			const char *start = code + i, *end = code + i + strcspn(code + i, "\n");
			while (start > code && start[-1] != '\n')
				start--;
			const char *s0 = src + (start - code);
			fail_msg("%s:%d: arithmetic on a literal 0:\n%.*s", what, line, (int)(end - start), s0);
		}
	}
	free(code);
}

void lg_test_check_lint(const char *what, const char *src, const char *arch)
{
	char *log = NULL;
	if (lg_nvrtc_lint(src, what, arch, &log) != LG_OK)
		fail_msg("%s for %s: %s", what, arch, lg_last_error());
	if (log)
		fail_msg("%s for %s: dead code (NVRTC --diag-warn=177,550):\n%s", what, arch, log);
}

void lg_test_check_no_spill(const char *what, const char *src, const char *arch)
{
	char *log = NULL;
	if (lg_nvrtc_resources(src, what, arch, &log) != LG_OK)
		fail_msg("%s for %s: %s", what, arch, lg_last_error());
	/* ptxas: "N bytes stack frame, S bytes spill stores, L bytes spill loads" */
	for (const char *p = log; p && (p = strstr(p, "bytes spill stores")) != NULL; p++) {
		const char *q = p;
		while (q > log && q[-1] == ' ')
			q--;
		while (q > log && isdigit((unsigned char)q[-1]))
			q--;
		if (atol(q) != 0)
			fail_msg("%s for %s: spills to local memory (ptxas):\n%s", what, arch, log);
	}
	free(log);
}

void lg_test_check_source(const char *what, const char *src, const char *arch)
{
	lg_test_check_line_width(what, src);
	lg_test_check_helpers_used(what, src);
	lg_test_check_no_zero_terms(what, src);
	lg_test_check_lint(what, src, arch);
}
