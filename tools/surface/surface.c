/*
 * surface.c - writes the typed launchers from the family declarations, at
 * build time: `lg_surface HEADER SOURCE` writes lingen_ops.h (the
 * prototypes, included by lingen.h and installed beside it) and
 * lingen_ops.c (their definitions, compiled into the library).
 *
 * One launcher per launch form (family.h, struct lg_form; form.h): its
 * comment is the form's doc (or the pass's), its parameters are (k, stream),
 * the sizes it takes, then the arguments it takes, each in the pass's order.
 * Each launcher hands its parameters to lg_kernel_run_form with the form
 * resolved (a static table), which checks the kernel and launches. Built
 * from gen/ alone (no runtime): CMakeLists.txt runs it.
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "error.h"
#include "form.h"

#define WRAP 100 /* columns a prototype is wrapped at */
#define SECTION "------------------------------------------------------------------------"

/* The parameters of launcher l after (k, stream), comma-separated. */
static void emit_params(lg_buf *b, const struct lg_launcher *l, char (*names)[32], size_t indent)
{
	const struct lg_sig *g = &lg_family_get(l->op)->sig[l->pass];
	char p[LG_MAX_SIZES + LG_MAX_ARGS][48];
	int n = 0;
	for (int s = 0; s < l->size_params; s++)
		for (int i = 0; i < l->nsizes; i++)
			if (l->size_from[i] == s)
				snprintf(p[n++], sizeof p[0], "int64_t %s", g->sizes[i].name);
	for (int j = 0; j < l->params; j++)
		snprintf(p[n++], sizeof p[0], "%s%s", j == l->list ? "const lg_tensor_list *" : "lg_dptr ", names[j]);
	size_t col = indent + strlen("const lg_kernel *k, lg_stream stream");
	lg_emit(b, "const lg_kernel *k, lg_stream stream");
	for (int i = 0; i < n; i++) {
		size_t w = strlen(p[i]) + 2;
		if (col + w + 2 > WRAP) {
			lg_emit(b, ",\n%*s%s", (int)indent, "", p[i]);
			col = indent + w - 2;
		} else {
			lg_emit(b, ", %s", p[i]);
			col += w;
		}
	}
}

static void emit_doc(lg_buf *b, const char *doc)
{
	lg_emit(b, "/* ");
	for (const char *p = doc; *p;) {
		size_t n = strcspn(p, "\n");
		lg_emit(b, "%.*s", (int)n, p);
		p += n;
		if (*p == '\n') {
			p++;
			lg_emit(b, "\n * ");
		}
	}
	lg_emit(b, " */\n");
}

static void emit_prototype(lg_buf *b, const struct lg_launcher *l, char (*names)[32], const char *end)
{
	lg_emit(b, "lg_status %s(", l->name);
	emit_params(b, l, names, strlen("lg_status (") + strlen(l->name));
	lg_emit(b, ")%s\n", end);
}

static void upper(char *out, size_t n, const char *s)
{
	size_t i = 0;
	for (; s[i] && i + 1 < n; i++)
		out[i] = (char)toupper((unsigned char)s[i]);
	out[i] = '\0';
}

/* The definition: the resolved form as a table, then the launch. */
static void emit_definition(lg_buf *b, const struct lg_launcher *l, char (*names)[32])
{
	const struct lg_sig *g = &lg_family_get(l->op)->sig[l->pass];
	char op[64], pass[16];
	upper(op, sizeof op, lg_op_names[l->op]);
	upper(pass, sizeof pass, lg_pass_names[l->pass]);
	lg_emit(b, "\nstatic const struct lg_launcher form_%s = {\n", l->name);
	lg_emit(b, "\t.name = \"%s\", .op = LG_OP_%s, .pass = LG_PASS_%s, .nsizes = %d, .nargs = %d,\n", l->name, op,
		pass, l->nsizes, l->nargs);
	lg_emit(b, "\t.nkeys = %d, .key = {", l->nkeys);
	for (int i = 0; i < l->nkeys; i++)
		lg_emit(b, "%s%d", i ? ", " : "", l->key[i]);
	lg_emit(b, "%s}, .value = {", l->nkeys ? "" : "0");
	for (int i = 0; i < l->nkeys; i++)
		lg_emit(b, "%s%lld", i ? ", " : "", (long long)l->value[i]);
	lg_emit(b, "%s},\n\t.size_params = %d, .size_from = {", l->nkeys ? "" : "0", l->size_params);
	for (int i = 0; i < l->nsizes; i++)
		lg_emit(b, "%s%d", i ? ", " : "", l->size_from[i]);
	lg_emit(b, "}, .size_value = {");
	for (int i = 0; i < l->nsizes; i++)
		lg_emit(b, "%s%lld", i ? ", " : "", (long long)l->size_value[i]);
	lg_emit(b, "},\n\t.params = %d, .param_args = {", l->params);
	for (int j = 0; j < l->params; j++)
		lg_emit(b, "%s0x%x", j ? ", " : "", l->param_args[j]);
	lg_emit(b, "}, .list = %d,\n};\n\n", l->list);
	emit_prototype(b, l, names, "");
	lg_emit(b, "{\n");
	if (l->size_params) {
		lg_emit(b, "\tconst int64_t sizes[] = {");
		for (int s = 0; s < l->size_params; s++)
			for (int i = 0; i < l->nsizes; i++)
				if (l->size_from[i] == s)
					lg_emit(b, "%s%s", s ? ", " : "", g->sizes[i].name);
		lg_emit(b, "};\n");
	}
	lg_emit(b, "\tconst lg_dptr ptrs[] = {");
	for (int j = 0; j < l->params; j++)
		lg_emit(b, "%s%s", j ? ", " : "", j == l->list ? "0" : names[j]);
	lg_emit(b, "};\n\treturn lg_kernel_run_form(k, stream, &form_%s, %s, ptrs, %s);\n}\n", l->name,
		l->size_params ? "sizes" : "NULL", l->list >= 0 ? names[l->list] : "NULL");
}

static const char header_top[] =
	"/*\n"
	" * lingen_ops.h - the typed launchers, one a launch form of a family's pass.\n"
	" * GENERATED at build time by tools/surface from the family declarations\n"
	" * (gen/families/<op>.c: struct lg_family, sig[pass].doc and .forms); do not\n"
	" * edit. Included by lingen.h, which declares the types.\n"
	" *\n"
	" * Each launcher is lg_kernel_run with the kernel's sizes and pointers in its\n"
	" * pass's order (`lingen help OP`), from the sizes and pointers it takes (0\n"
	" * for the others; a launcher over a tensor list gives the list's table and\n"
	" * rows). It refuses a kernel of another op or pass, or without the keys its\n"
	" * form fixes (LG_ERR_INVALID_ARG, naming what the kernel is and what the\n"
	" * launcher takes). An output the spec did not ask for takes 0.\n"
	" */\n"
	"#ifndef LINGEN_OPS_H\n"
	"#define LINGEN_OPS_H\n"
	"#ifndef LINGEN_H\n"
	"#error \"include lingen.h, which includes lingen_ops.h\"\n"
	"#endif\n";

static const char source_top[] =
	"/*\n"
	" * lingen_ops.c - the typed launchers of lingen_ops.h. GENERATED at build\n"
	" * time by tools/surface from the family declarations; do not edit.\n"
	" */\n"
	"#include \"context.h\"\n"
	"#include \"form.h\"\n";

/* Both files, every launcher of every family in the order of families.h. */
static lg_status emit_all(lg_buf *h, lg_buf *c)
{
	lg_emit(h, "%s", header_top);
	lg_emit(c, "%s", source_top);
	for (int op = 0; op < LG_OP_COUNT; op++) {
		const struct lg_family *f = lg_family_get((enum lg_op)op);
		lg_emit(h, "\n/* %.*s %s\n * %s */\n", (int)(72 - strlen(f->op)), SECTION, f->op, f->summary);
		for (int pass = 0; pass < LG_PASS_COUNT; pass++) {
			const struct lg_sig *g = &f->sig[pass];
			int n = lg_form_count(f, (enum lg_pass)pass);
			bool group = n && g->nforms > 0 && g->doc; /* the pass's comment before its forms' */
			if (group) {
				lg_emit(h, "\n");
				emit_doc(h, g->doc);
			}
			for (int i = 0; i < n; i++) {
				struct lg_launcher l;
				char names[LG_MAX_ARGS][32];
				lg_status st = lg_form_resolve((enum lg_op)op, (enum lg_pass)pass, i, &l, names);
				if (st != LG_OK)
					return st;
				const char *doc = lg_form_doc((enum lg_op)op, (enum lg_pass)pass, i);
				bool own = doc && (g->nforms == 0 || doc != g->doc);
				if (own || !group || i > 0)
					lg_emit(h, "\n");
				if (own)
					emit_doc(h, doc);
				emit_prototype(h, &l, names, ";");
				emit_definition(c, &l, names);
			}
		}
	}
	lg_emit(h, "\n#endif /* LINGEN_OPS_H */\n");
	return LG_OK;
}

static int write_text(const char *path, lg_buf *b)
{
	size_t len = 0;
	char *text = lg_buf_finish(b, &len);
	FILE *f = text ? fopen(path, "w") : NULL;
	bool ok = f && fwrite(text, 1, len, f) == len;
	ok = (f && fclose(f) == 0) && ok;
	if (!ok)
		fprintf(stderr, "lg_surface: cannot write %s\n", path);
	free(text);
	return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: lg_surface HEADER SOURCE (lingen_ops.h, lingen_ops.c)\n");
		return 2;
	}
	lg_buf h, c;
	lg_buf_init(&h);
	lg_buf_init(&c);
	if (emit_all(&h, &c) != LG_OK) {
		fprintf(stderr, "lg_surface: %s\n", lg_last_error());
		lg_buf_free(&h);
		lg_buf_free(&c);
		return 1;
	}
	return write_text(argv[1], &h) | write_text(argv[2], &c);
}
