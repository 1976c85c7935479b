/*
 * code.c - reading back emitted CUDA source (code.h).
 */
#include "code.h"

#include <stdlib.h>
#include <string.h>

/* A copy of s[0..n) with comments, string and character literals blanked
 * (newlines kept, so offsets match); NULL when out of memory. */
static char *code_only(const char *s, size_t n)
{
	char *c = malloc(n + 1);
	if (!c)
		return NULL;
	memcpy(c, s, n);
	c[n] = '\0';
	for (char *p = c; *p;) {
		if (p[0] == '/' && p[1] == '/') {
			while (*p && *p != '\n')
				*p++ = ' ';
		} else if (p[0] == '/' && p[1] == '*') {
			char *e = strstr(p + 2, "*/");
			char *end = e ? e + 2 : c + n;
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

static bool ident_char(char ch)
{
	return ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
}

/* Whether the word at code[i] follows a member access (`.`, `->`): a
 * field's name (blockIdx.x), not the identifier. The `.` of a number
 * (1.f) takes only a suffix; an even run of '-' before '>' is `--` then
 * `>` (i-->n reads n). Space between them keeps the word a use. */
static bool member(const char *code, size_t i)
{
	if (i == 0)
		return false;
	if (code[i - 1] == '.')
		return true;
	if (code[i - 1] != '>')
		return false;
	size_t dashes = 0;
	while (dashes + 1 < i && code[i - 2 - dashes] == '-')
		dashes++;
	return dashes % 2 == 1;
}

/* Whether code[0..n) holds the identifier name as a whole word. */
static bool names_in(const char *code, size_t n, const char *name)
{
	size_t k = strlen(name);
	for (size_t i = 0; k && i + k <= n; i++)
		if (memcmp(code + i, name, k) == 0 && (i == 0 || !ident_char(code[i - 1])) && !member(code, i) &&
		    (i + k == n || !ident_char(code[i + k])))
			return true;
	return false;
}

bool lg_code_names(const char *text, const char *name)
{
	char *code = code_only(text, strlen(text));
	bool named = !code || names_in(code, strlen(code), name); /* out of memory: keep it */
	free(code);
	return named;
}

/* The offset of the bracket matching the opening one at code[at] (the
 * same kind), or 0 if it is not closed. */
static size_t matching(const char *code, size_t at)
{
	char open = code[at], close = open == '(' ? ')' : '}';
	int depth = 0;
	for (size_t i = at; code[i]; i++) {
		if (code[i] == open)
			depth++;
		else if (code[i] == close && --depth == 0)
			return i;
	}
	return 0;
}

/* One entry point's parameter list text[lp + 1 .. rp) rewritten into out
 * (", "-separated, each unused name in a comment); whether any changed. */
static bool rewrite_params(lg_buf *out, const char *text, const char *code, size_t lp, size_t rp,
			   size_t body, size_t end)
{
	bool changed = false;
	for (size_t p = lp + 1; p < rp;) {
		size_t q = p;
		while (q < rp && code[q] != ',')
			q++;
		size_t s = p, e = q;
		while (s < e && (text[s] == ' ' || text[s] == '\t' || text[s] == '\n'))
			s++;
		while (e > s && (text[e - 1] == ' ' || text[e - 1] == '\t' || text[e - 1] == '\n'))
			e--;
		size_t nm = e;
		while (nm > s && ident_char(text[nm - 1]))
			nm--;
		char name[128];
		size_t k = e - nm;
		bool unused = nm > s && k && k < sizeof name;
		if (unused) {
			memcpy(name, text + nm, k);
			name[k] = '\0';
			unused = !names_in(code + body, end - body, name);
		}
		lg_emit(out, "%s", p == lp + 1 ? "" : ", ");
		if (unused)
			lg_emit(out, "%.*s/* %s */", (int)(nm - s), text + s, name);
		else
			lg_raw(out, text + s, e - s);
		changed |= unused;
		p = q + 1;
	}
	return changed;
}

void lg_code_unname_unused(lg_buf *b, size_t at)
{
	if (b->failed)
		return;
	const char *text = b->data + at;
	size_t n = b->len - at, copied = 0;
	char *code = code_only(text, n);
	if (!code) {
		b->failed = true;
		return;
	}
	lg_buf out, params;
	lg_buf_init(&out);
	lg_buf_init(&params);
	for (const char *g = code; (g = strstr(g, "__global__ void")) != NULL; g++) {
		/* the head: the line after the attributes, name(params) */
		const char *nl = strchr(g, '\n'), *lpp = nl ? strchr(nl, '(') : NULL;
		const char *brace = lpp ? strchr(lpp, '{') : NULL;
		if (!brace)
			break;
		size_t head = (size_t)(nl + 1 - code), lp = (size_t)(lpp - code), rp = matching(code, lp);
		size_t body = (size_t)(brace - code), end = matching(code, body);
		if (!rp || !end || rp > body || text[rp + 1] != '\n')
			continue;
		if (rewrite_params(&params, text, code, lp, rp, body, end)) {
			char *list = lg_buf_finish(&params, NULL);
			char *name = malloc(lp - head + 1);
			if (name) {
				memcpy(name, text + head, lp - head);
				name[lp - head] = '\0';
			}
			lg_raw(&out, text + copied, head - copied);
			if (list && name)
				lg_head(&out, name, list);
			else
				out.failed = true;
			copied = rp + 2;
			free(list);
			free(name);
		}
		lg_buf_free(&params);
	}
	lg_raw(&out, text + copied, n - copied);
	size_t len = 0;
	char *done = lg_buf_finish(&out, &len);
	free(code);
	if (!done) {
		b->failed = true;
		return;
	}
	b->len = at;
	lg_raw(b, done, len);
	free(done);
}
