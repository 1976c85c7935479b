/*
 * test_sizes.c - the size limits of docs/style.md, checked on the source
 * tree: no C source or header over 1000 lines and no C function over 100
 * lines (gen/, runtime/, tools/, include/, tests/), no Python file over 600
 * lines (python/). It names each file and function over its limit.
 *
 * A function, for this scanner: a line that begins in column 0 with an
 * identifier, contains '(' before any '=' and does not end in ';', whose
 * header (that line and the indented lines after it) ends in '{' or is
 * followed by a line "{"; it ends at the next line beginning with '}'.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#define FILE_LINES 1000
#define FUNC_LINES 100
#define PY_LINES 600

/* Exemptions, the one place they are listed (none now: every file is
 * within the limits; a line here is a debt, with the reason beside it). */
static const char *const exempt[] = {
	NULL,
};

struct scan {
	int bad;   /* limits broken */
	int files; /* files read */
};

static bool is_exempt(const char *rel)
{
	for (size_t i = 0; i < sizeof exempt / sizeof exempt[0]; i++)
		if (exempt[i] && strcmp(rel, exempt[i]) == 0)
			return true;
	return false;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The file's lines (NUL-terminated, without '\n'), or NULL; *n their count. */
static char **read_lines(const char *path, int *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	char **v = NULL, *line = NULL;
	size_t cap = 0;
	ssize_t len;
	*n = 0;
	while ((len = getline(&line, &cap, f)) >= 0) {
		while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = '\0';
		char **w = realloc(v, (size_t)(*n + 1) * sizeof *v);
		assert_non_null(w);
		v = w;
		v[(*n)++] = strdup(line);
	}
	free(line);
	fclose(f);
	return v;
}

static void free_lines(char **v, int n)
{
	for (int i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* The last character of s that is not a space or tab, or 0. */
static char last_char(const char *s)
{
	size_t n = strlen(s);
	while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
		n--;
	return n ? s[n - 1] : 0;
}

/* Whether line i opens a function definition; *body the line of its '{'. */
static bool function_at(char **v, int n, int i, int *body)
{
	const char *l = v[i], *paren = strchr(l, '('), *eq = strchr(l, '=');
	bool ident = (l[0] >= 'a' && l[0] <= 'z') || (l[0] >= 'A' && l[0] <= 'Z') || l[0] == '_';
	if (!ident || !paren || (eq && eq < paren))
		return false;
	for (int j = i; j < n && j < i + 10; j++) {
		char c = last_char(v[j]);
		if (j > i && strcmp(v[j], "{") == 0) {
			*body = j;
			return true;
		}
		if (j > i && v[j][0] != ' ' && v[j][0] != '\t')
			return false; /* the header ended without a body */
		if (c == '{') {
			*body = j;
			return true;
		}
		if (c == ';')
			return false;
	}
	return false;
}

static void check_functions(struct scan *sc, const char *rel, char **v, int n)
{
	for (int i = 0; i < n; i++) {
		int body;
		if (!function_at(v, n, i, &body))
			continue;
		int end = body + 1;
		while (end < n && v[end][0] != '}')
			end++;
		int len = end - i + 1;
		if (len > FUNC_LINES) {
			printf("%s:%d: function over %d lines (%d): %.70s\n", rel, i + 1, FUNC_LINES, len, v[i]);
			sc->bad++;
		}
		i = end;
	}
}

static void check_file(struct scan *sc, const char *path, const char *rel, bool functions)
{
	bool py = ends_with(rel, ".py"), c = ends_with(rel, ".c") || ends_with(rel, ".h");
	if ((!py && !c) || is_exempt(rel))
		return;
	int n = 0;
	char **v = read_lines(path, &n);
	if (!v && n == 0) {
		FILE *f = fopen(path, "rb");
		assert_non_null(f); /* readable, only empty */
		fclose(f);
		return;
	}
	sc->files++;
	int limit = py ? PY_LINES : FILE_LINES;
	if (n > limit) {
		printf("%s: %d lines, over %d\n", rel, n, limit);
		sc->bad++;
	}
	if (c && functions)
		check_functions(sc, rel, v, n);
	free_lines(v, n);
}

/* Every file under dir (relative to the source root), skipping hidden
 * folders, __pycache__ and tests/golden (generated sources). */
static void walk(struct scan *sc, const char *rel, bool functions)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", LG_SOURCE_DIR, rel);
	DIR *d = opendir(path);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.' || strcmp(e->d_name, "__pycache__") == 0)
			continue;
		char sub[4096], full[8192];
		snprintf(sub, sizeof sub, "%s/%s", rel, e->d_name);
		snprintf(full, sizeof full, "%s/%s", LG_SOURCE_DIR, sub);
		if (strcmp(sub, "tests/golden") == 0)
			continue;
		struct stat st;
		if (stat(full, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode))
			walk(sc, sub, functions);
		else if (S_ISREG(st.st_mode))
			check_file(sc, full, sub, functions);
	}
	closedir(d);
}

static void test_limits(void **state)
{
	(void)state;
	struct scan sc = {0};
	static const char *const code[] = {"gen", "runtime", "tools", "include", "tests"};
	for (int i = 0; i < 5; i++)
		walk(&sc, code[i], true);
	walk(&sc, "python", false);
	printf("%d files read, %d over a limit\n", sc.files, sc.bad);
	assert_true(sc.files > 100); /* the tree was found */
	assert_int_equal(sc.bad, 0);
}

/* The scanner itself: a function of 101 lines is found, one of 100 is not,
 * and a declaration or an initialiser is not a function. */
static void test_scanner(void **state)
{
	(void)state;
	for (int n = FUNC_LINES; n <= FUNC_LINES + 1; n++) {
		char **v = calloc((size_t)n, sizeof *v);
		assert_non_null(v);
		v[0] = strdup("static int f(int a,");
		v[1] = strdup("\t     int b)");
		v[2] = strdup("{");
		for (int i = 3; i < n - 1; i++)
			v[i] = strdup("\treturn a;");
		v[n - 1] = strdup("}");
		struct scan sc = {0};
		check_functions(&sc, "x.c", v, n);
		assert_int_equal(sc.bad, n > FUNC_LINES);
		free_lines(v, n);
	}
	static const char *const text[] = {"static int g(int a);", "static const struct s t = f(", "{", "}"};
	char *decl[4];
	for (int i = 0; i < 4; i++)
		decl[i] = strdup(text[i]);
	int body;
	assert_false(function_at(decl, 4, 0, &body));
	assert_false(function_at(decl, 4, 1, &body));
	for (int i = 0; i < 4; i++)
		free(decl[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scanner),
		cmocka_unit_test(test_limits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
