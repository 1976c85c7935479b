/*
 * cmd_aot.c - `lingen aot SPEC|MODEL... --arch A[,B...] -o DIR [-j N]`:
 * the cubins of every kernel x arch embedded in C, so a deployment links its
 * kernels into its own binary with no files beside it. Needs no GPU.
 *
 * Writes DIR/lingen_aot.h and DIR/lingen_aot.c. The .c holds each cubin as a
 * byte array (hex, 16 per line), a table of struct lg_aot_entry (canonical
 * spec JSON, entry, arch, plan JSON, cubin, size, XXH3-64 checksum: the
 * fields of a manifest.json kernel, include/lingen.h) and two functions:
 *   const struct lg_aot_table *lingen_aot(void);   for lg_ctx_opts.aot
 *   const void *lingen_aot_cubin(const char *entry, const char *arch,
 *                                size_t *size);      the dispatcher by arch
 * It includes only <lingen.h> (and <string.h>). Compiling is compile_all.c's,
 * shared with `lingen build`. Output is deterministic for given inputs.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "buf.h"
#include "bundle.h" /* lg_plan_to_json */
#include "cli.h"
#include "compile_all.h"

enum { O_OUT = LG_CA_OUT, O_ARCH = LG_CA_ARCH, O_JOBS = LG_CA_JOBS };
static const struct lg_cli_opt opts[] = {
	[O_OUT] = {"out", 'o', "DIR", "folder for lingen_aot.c and lingen_aot.h (created if missing)"},
	[O_ARCH] = {"arch", 'a', "ARCH[,ARCH...]", "target archs (default $LINGEN_ARCH, else sm_90a)"},
	[O_JOBS] = {"jobs", 'j', "N", "compile in N threads (default: number of CPUs)"},
	{0},
};

static const char header[] =
	"/*\n"
	" * lingen_aot.h - kernels embedded by `lingen aot`: generated, do not edit.\n"
	" *\n"
	" * Create a context on them with\n"
	" *   lg_ctx_opts o = {.aot = lingen_aot()};\n"
	" *   lg_ctx_create(&o, &ctx);\n"
	" * then lg_kernel_get / the launchers as usual: no NVRTC, no files.\n"
	" */\n"
	"#ifndef LINGEN_AOT_H\n"
	"#define LINGEN_AOT_H\n"
	"\n"
	"#include <stddef.h>\n"
	"\n"
	"#include <lingen.h>\n"
	"\n"
	"#ifdef __cplusplus\n"
	"extern \"C\" {\n"
	"#endif\n"
	"\n"
	"/* The embedded bundle, for lg_ctx_opts.aot. */\n"
	"const struct lg_aot_table *lingen_aot(void);\n"
	"\n"
	"/* The cubin of kernel `entry` (lg_spec_entry) for `arch` (\"sm_90a\"), and\n"
	" * its size in *size (may be NULL); NULL when it was not embedded. */\n"
	"const void *lingen_aot_cubin(const char *entry, const char *arch, size_t *size);\n"
	"\n"
	"#ifdef __cplusplus\n"
	"}\n"
	"#endif\n"
	"#endif\n";

/* A C string literal of s. */
static void emit_cstr(lg_buf *b, const char *s)
{
	lg_emit(b, "\"");
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			lg_emit(b, "\\%c", *s);
		else if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
			lg_emit(b, "\\%03o", (unsigned char)*s);
		else
			lg_emit(b, "%c", *s);
	}
	lg_emit(b, "\"");
}

static void emit_cubin(lg_buf *b, const struct lg_compile_set *s, size_t i)
{
	const struct lg_compiled *c = &s->c[i];
	const unsigned char *p = c->cubin;
	lg_line(b, "/* %s for %s: %zu bytes */", lg_spec_entry(c->k->spec), s->archs[c->arch], c->size);
	lg_open(b, "LG_AOT_ALIGN16 static const unsigned char cubin_%zu[%zu] = {", i, c->size);
	for (size_t k = 0; k < c->size; k += 16) {
		lg_emit(b, "\t");
		for (size_t j = k; j < c->size && j < k + 16; j++)
			lg_emit(b, "0x%02x,%s", p[j], j + 1 < c->size && j + 1 < k + 16 ? " " : "");
		lg_emit(b, "\n");
	}
	lg_close_with(b, "};");
	lg_line(b, "%s", "");
}

/* One table row; false on allocation failure. */
static bool emit_entry(lg_buf *b, const struct lg_compile_set *s, size_t i)
{
	const struct lg_compiled *c = &s->c[i];
	char *canon = lg_spec_canonical(c->k->spec);
	cJSON *pj = lg_plan_to_json(c->k->spec, &c->plan);
	char *plan = pj ? cJSON_PrintUnformatted(pj) : NULL;
	cJSON_Delete(pj);
	if (canon && plan) {
		/* positional, in struct order: the same text is C and C++ */
		lg_open(b, "{");
		lg_line(b, "/* .spec */");
		lg_emit(b, "\t\t");
		emit_cstr(b, canon);
		lg_emit(b, ",\n");
		lg_line(b, "/* .entry */ \"%s\",", lg_spec_entry(c->k->spec));
		lg_line(b, "/* .arch */ \"%s\",", s->archs[c->arch]);
		lg_line(b, "/* .plan */");
		lg_emit(b, "\t\t");
		emit_cstr(b, plan);
		lg_emit(b, ",\n");
		lg_line(b, "/* .cubin */ cubin_%zu,", i);
		lg_line(b, "/* .size */ sizeof cubin_%zu,", i);
		lg_line(b, "/* .checksum */ 0x%016llxull,", (unsigned long long)c->checksum);
		lg_close_with(b, "},");
	}
	bool ok = canon && plan;
	free(canon);
	free(plan);
	return ok;
}

/* The whole of lingen_aot.c; NULL on allocation failure. */
static char *source(const struct lg_compile_set *s)
{
	char nv[32];
	lg_compile_nvrtc_version(nv);
	lg_buf b;
	lg_buf_init(&b);
	lg_line(&b, "/*");
	size_t count = s->n - s->nskipped;
	lg_line(&b, " * lingen_aot.c - %zu cubins embedded by `lingen aot` (lingen %s, NVRTC %s):", count,
		lg_version(), nv);
	lg_line(&b, " * generated, do not edit. See lingen_aot.h.");
	lg_line(&b, " *");
	for (size_t i = 0; i < s->n; i++)
		lg_line(&b, " *   %s %s%s%s%s", lg_spec_entry(s->c[i].k->spec), s->archs[s->c[i].arch],
			s->c[i].skipped ? ": skipped, the family runs on " : "", s->c[i].skipped ? s->c[i].skipped : "",
			s->c[i].skipped ? " only" : "");
	lg_line(&b, " */");
	lg_line(&b, "#include <string.h>");
	lg_line(&b, "%s", "");
	lg_line(&b, "/* the table needs lingen.h's types only, not the typed launchers (lingen_ops.h) */");
	lg_line(&b, "#define LINGEN_NO_TYPED_LAUNCHERS");
	lg_line(&b, "#include \"lingen_aot.h\"");
	lg_line(&b, "%s", "");
	lg_line(&b, "/* compiles as C11 and as C++11 */");
	lg_line(&b, "#ifdef __cplusplus");
	lg_line(&b, "#define LG_AOT_ALIGN16 alignas(16)");
	lg_line(&b, "#else");
	lg_line(&b, "#define LG_AOT_ALIGN16 _Alignas(16)");
	lg_line(&b, "#endif");
	lg_line(&b, "%s", "");
	for (size_t i = 0; i < s->n; i++)
		if (!s->c[i].skipped)
			emit_cubin(&b, s, i);
	lg_open(&b, "static const struct lg_aot_entry entries[%zu] = {", count ? count : 1);
	bool ok = true;
	for (size_t i = 0; ok && i < s->n; i++)
		ok = s->c[i].skipped || emit_entry(&b, s, i);
	lg_close_with(&b, "};");
	lg_line(&b, "%s", "");
	lg_open(&b, "static const struct lg_aot_table table = {");
	lg_line(&b, "/* .format */ %d,", LG_AOT_FORMAT);
	lg_line(&b, "/* .lingen */ \"%s\",", lg_version());
	lg_line(&b, "/* .nvrtc */ \"%s\",", nv);
	lg_line(&b, "/* .count */ %zu,", count);
	lg_line(&b, "/* .entries */ entries,");
	lg_close_with(&b, "};");
	lg_line(&b, "%s", "");
	lg_line(&b, "const struct lg_aot_table *lingen_aot(void) { return &table; }");
	lg_line(&b, "%s", "");
	lg_line(&b, "const void *lingen_aot_cubin(const char *entry, const char *arch, size_t *size)");
	lg_open(&b, "{");
	lg_open(&b, "for (size_t i = 0; i < table.count; i++) {");
	lg_line(&b, "const struct lg_aot_entry *e = &entries[i];");
	lg_line(&b, "if (strcmp(e->entry, entry) != 0 || strcmp(e->arch, arch) != 0)");
	lg_line(&b, "\tcontinue;");
	lg_line(&b, "if (size)");
	lg_line(&b, "\t*size = e->size;");
	lg_line(&b, "return e->cubin;");
	lg_close(&b);
	lg_line(&b, "return NULL;");
	lg_close(&b);
	char *text = lg_buf_finish(&b, NULL);
	if (!ok) {
		free(text);
		return NULL;
	}
	return text;
}

static int write_text(const char *dir, const char *name, const char *text)
{
	char *path = lg_cli_path(dir, name);
	int rc = lg_cli_save(path, text, text ? strlen(text) : 0);
	free(path);
	return rc;
}

/* lingen_aot.h and lingen_aot.c of a compiled set. */
static int write_aot(const char *dir, const struct lg_compile_set *set)
{
	int rc = write_text(dir, "lingen_aot.h", header);
	if (rc == LG_EXIT_OK) {
		char *text = source(set);
		rc = write_text(dir, "lingen_aot.c", text);
		free(text);
	}
	return rc;
}

static int run(const struct lg_cli_cmd *cmd, const struct lg_cli_args *a)
{
	return lg_compile_cmd(cmd, a, false, write_aot, "embedded");
}

const struct lg_cli_cmd lg_cmd_aot = {
	.name = "aot",
	.synopsis = "SPEC... --arch ARCH[,ARCH...] -o DIR [-j N]",
	.summary = "embed cubins in C source (lingen_aot.c/.h) to link into a program",
	.details = "Writes DIR/lingen_aot.h and DIR/lingen_aot.c: every kernel's cubin for\n"
		   "every arch as a byte array, a table (struct lg_aot_table, lingen.h) and\n"
		   "lingen_aot() / lingen_aot_cubin(entry, arch, &size). Compile lingen_aot.c\n"
		   "into your program and create the context with lg_ctx_opts.aot =\n"
		   "lingen_aot(): no NVRTC and no files are needed at run time.\n",
	.opts = opts,
	.min_pos = 1,
	.max_pos = -1,
	.run = run,
};
