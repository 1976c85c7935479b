/*
 * templates.c - emits the helpers of templates/<name>.cuh that generated
 * code uses, and nothing else.
 *
 * Fragments. Each templates/<name>.cuh is a list of fragments. A fragment
 * starts at a marker line
 *
 *     // @type NAME [COND]       a typedef or struct named NAME
 *     // @helper NAME [COND]     a device function or macro named NAME
 *
 * and runs to the next marker or the end of the file (trailing blank lines
 * dropped); the comment lines after the marker document it and are emitted
 * with it. Text before a file's first marker describes the file and is not
 * emitted. COND, optional, restricts a fragment to some targets: `sm>=89` or
 * `sm<89`. Fragments may share a NAME when their conditions do not overlap:
 * lg_e4m3x2 is the hardware conversion on sm_89+ and software before.
 *
 * Uses are found, not declared. A piece of code uses the fragment NAME (the
 * one for the target) when NAME occurs in it as an identifier outside
 * comments, string and character literals, numbers and member names (after
 * `.` or `->`). So a fragment's needs are read from its own code, and a
 * family just calls helpers by name in the code it emits.
 *
 * Selection. lg_emit_helpers() scans the code a family emitted (its kernels
 * and its own spec-specific device functions) and takes the fragments it
 * uses, then the fragments those use, until nothing is added (the
 * transitive closure).
 *
 * Order, byte-deterministic and declaration-before-use: the types, then the
 * helpers; within each, in template order (common.cuh, then the other files
 * by name; fragments in file order), each fragment preceded by the fragments
 * it uses that are not out yet (depth-first, in order of first mention). A
 * blank line separates two fragments unless both are one line long
 * (typedefs, one-line functions).
 *
 * The templates are parsed on every call: a few KB, and no global state, so
 * generating stays thread-safe. A malformed marker or two fragments of one
 * name for one target is a bug in templates/ and asserts.
 */
#include "templates.h"

#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

enum { KIND_TYPE, KIND_HELPER };

struct frag {
	const char *name;
	size_t nlen;
	int kind;
	int lo, hi;       /* for targets lo <= sm < hi */
	const char *text; /* emitted text: documentation and code */
	size_t len;
	bool one_line;
};

/* The fragments of every template and the selection state. */
struct helpers {
	struct frag *f;
	size_t n;
	int sm;
	unsigned char *in;   /* in the closure */
	unsigned char *done; /* emitted */
	lg_buf out;
	int last_kind;       /* of the last fragment emitted; -1: none yet */
	bool last_one_line;
};

/* ------------------------------------------------------------ scanning */

static bool ident_start(char c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static bool ident_char(char c) { return ident_start(c) || (c >= '0' && c <= '9'); }
static bool digit(char c) { return c >= '0' && c <= '9'; }

/* The end of the literal opened by the quote s[i] (' or "). */
static size_t skip_literal(const char *s, size_t n, size_t i)
{
	char q = s[i++];
	while (i < n && s[i] != q && s[i] != '\n')
		i += s[i] == '\\' && i + 1 < n ? 2 : 1;
	return i < n ? i + 1 : n;
}

/* Whether the identifier at s[i] follows `.` or `->` on its line (a member
 * name; not across lines, where the `.` may end a comment). */
static bool after_member(const char *s, size_t i)
{
	while (i > 0 && (s[i - 1] == ' ' || s[i - 1] == '\t'))
		i--;
	return i > 0 && (s[i - 1] == '.' || (i > 1 && s[i - 1] == '>' && s[i - 2] == '-'));
}

/* The next identifier of the code s[*i..n) that may name a fragment: *id,
 * *len; false at the end. */
static bool next_ident(const char *s, size_t n, size_t *i, const char **id, size_t *len)
{
	size_t p = *i;
	while (p < n) {
		char c = s[p];
		if (c == '/' && p + 1 < n && s[p + 1] == '/') {
			while (p < n && s[p] != '\n')
				p++;
		} else if (c == '/' && p + 1 < n && s[p + 1] == '*') {
			for (p += 2; p + 1 < n && !(s[p] == '*' && s[p + 1] == '/'); p++)
				;
			p = p + 2 < n ? p + 2 : n;
		} else if (c == '"' || c == '\'') {
			p = skip_literal(s, n, p);
		} else if (digit(c) || (c == '.' && p + 1 < n && digit(s[p + 1]))) {
			/* a number, suffixes and exponents included (0x7fu, 1e-30f) */
			for (p++; p < n; p++) {
				if ((s[p] == '+' || s[p] == '-') && strchr("eEpP", s[p - 1]))
					continue;
				if (!ident_char(s[p]) && s[p] != '.')
					break;
			}
		} else if (ident_start(c)) {
			size_t b = p;
			while (p < n && ident_char(s[p]))
				p++;
			if (!after_member(s, b)) {
				*i = p;
				*id = s + b;
				*len = p - b;
				return true;
			}
		} else {
			p++;
		}
	}
	*i = n;
	return false;
}

/* The fragment named id for the target, or h->n. */
static size_t find(const struct helpers *h, const char *id, size_t len)
{
	for (size_t k = 0; k < h->n; k++) {
		const struct frag *f = &h->f[k];
		if (f->nlen == len && memcmp(f->name, id, len) == 0 && f->lo <= h->sm && h->sm < f->hi)
			return k;
	}
	return h->n;
}

/* ------------------------------------------------------------- parsing */

/* If the line at s is a marker, fill f's name, kind and condition. */
static bool marker(const char *s, const char *end, struct frag *f)
{
	const char *p;
	if (strncmp(s, "// @type ", 9) == 0) {
		f->kind = KIND_TYPE;
		p = s + 9;
	} else if (strncmp(s, "// @helper ", 11) == 0) {
		f->kind = KIND_HELPER;
		p = s + 11;
	} else {
		return false;
	}
	f->name = p;
	while (p < end && ident_char(*p))
		p++;
	f->nlen = (size_t)(p - f->name);
	f->lo = 0;
	f->hi = INT_MAX;
	if (p < end && *p == ' ') {
		char *num = NULL;
		if (strncmp(p, " sm>=", 5) == 0)
			f->lo = (int)strtol(p + 5, &num, 10);
		else if (strncmp(p, " sm<", 4) == 0)
			f->hi = (int)strtol(p + 4, &num, 10);
		LG_ASSERT(num && "a condition is sm>=N or sm<N");
		p = num;
	}
	LG_ASSERT(f->nlen > 0 && p == end && "a marker is // @type|@helper NAME [sm>=N|sm<N]");
	return true;
}

/* Close fragment f at `end` (the start of the next marker, or the end of
 * its file): trailing blank lines dropped. */
static void close_frag(struct frag *f, const char *end)
{
	f->len = (size_t)(end - f->text);
	while (f->len >= 2 && f->text[f->len - 1] == '\n' && f->text[f->len - 2] == '\n')
		f->len--;
	const char *nl = memchr(f->text, '\n', f->len);
	f->one_line = !nl || nl == f->text + f->len - 1;
}

/* The fragments of every template into f (NULL: just count them). */
static size_t parse(struct frag *f)
{
	size_t n = 0;
	for (size_t t = 0; t < lg_template_count; t++) {
		const char *s = lg_templates[t].text, *end = s + lg_templates[t].len;
		struct frag *open = NULL;
		for (const char *line = s; line < end;) {
			const char *nl = memchr(line, '\n', (size_t)(end - line));
			const char *next = nl ? nl + 1 : end;
			struct frag m;
			if (marker(line, nl ? nl : end, &m)) {
				if (open)
					close_frag(open, line);
				open = NULL;
				if (f) {
					open = &f[n];
					*open = m;
					open->text = next;
				}
				n++;
			}
			line = next;
		}
		if (open)
			close_frag(open, end);
	}
	return n;
}

/* Two fragments of one name must not both serve a target. */
static void check_unique(const struct frag *f, size_t n)
{
	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n; j++)
			LG_ASSERT(f[i].nlen != f[j].nlen || memcmp(f[i].name, f[j].name, f[i].nlen) != 0 ||
				  f[i].hi <= f[j].lo || f[j].hi <= f[i].lo);
}

/* ----------------------------------------------------------- selection */

/* Add to the closure every fragment that code s[0..n) uses, and what those use. */
static void mark(struct helpers *h, const char *s, size_t n)
{
	const char *id;
	size_t len, i = 0;
	while (next_ident(s, n, &i, &id, &len)) {
		size_t k = find(h, id, len);
		if (k < h->n && !h->in[k]) {
			h->in[k] = 1;
			mark(h, h->f[k].text, h->f[k].len);
		}
	}
}

/* Emit fragment k after the fragments it uses that are not out yet. */
static void visit(struct helpers *h, size_t k)
{
	const struct frag *f = &h->f[k];
	const char *id;
	size_t len, i = 0;
	if (h->done[k])
		return;
	h->done[k] = 1;
	while (next_ident(f->text, f->len, &i, &id, &len)) {
		size_t j = find(h, id, len);
		if (j < h->n)
			visit(h, j);
	}
	if (h->last_kind < 0)
		lg_section(&h->out, "helpers from templates/, those the code below uses", NULL);
	else if (!f->one_line || !h->last_one_line || f->kind != h->last_kind)
		lg_raw(&h->out, "\n", 1);
	lg_raw(&h->out, f->text, f->len);
	if (f->len && f->text[f->len - 1] != '\n')
		lg_raw(&h->out, "\n", 1);
	h->last_kind = f->kind;
	h->last_one_line = f->one_line;
}

void lg_emit_helpers(lg_buf *b, size_t at, int sm)
{
	if (b->failed)
		return;
	LG_ASSERT(at <= b->len);
	struct helpers h = {.sm = sm, .last_kind = -1};
	size_t n = parse(NULL);
	h.f = calloc(n ? n : 1, sizeof *h.f);
	h.in = calloc(n ? n : 1, 2);
	if (!h.f || !h.in) {
		b->failed = true;
		goto done;
	}
	h.done = h.in + n;
	h.n = parse(h.f);
	check_unique(h.f, h.n);
	lg_buf_init(&h.out);
	mark(&h, b->data + at, b->len - at);
	for (int kind = KIND_TYPE; kind <= KIND_HELPER; kind++)
		for (size_t k = 0; k < h.n; k++)
			if (h.in[k] && h.f[k].kind == kind)
				visit(&h, k);
	if (h.last_kind >= 0) {
		if (at < b->len && b->data[at] != '\n')
			lg_raw(&h.out, "\n", 1); /* a blank line before the code, unless it starts with one */
		size_t len = 0;
		char *text = lg_buf_finish(&h.out, &len);
		if (text)
			lg_insert(b, at, text, len);
		else
			b->failed = true;
		free(text);
	}
	lg_buf_free(&h.out);
done:
	free(h.f);
	free(h.in);
}
