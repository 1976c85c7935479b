/*
 * test_bundle_index.c - a bundle's index.lgb and cubin file, what the
 * loader reads when a bundle has them: `lingen build` writes index format 2
 * (a "cubins" line naming cubins.lgc, and each record's offset in it); a
 * context serves every cubin from the mapped file, the bytes of the
 * bundle's own cubin files, without reading the manifest or those files; an
 * index of format 1 (no cubin file) still loads, from the cubin files. No
 * record is trusted: a plan digest, given tile, spec or checksum that is not
 * what this lingen makes is refused when the kernel is asked for; an offset
 * outside the cubin file, a truncated, missing or foreign cubin file, or a
 * corrupt cubin in it is refused with the file named, never read past.
 * Index format 3's linked module per arch (every kernel's relocatable
 * cubin linked into one): it defines every entry point; a corrupt one is
 * refused while each kernel's own cubin still serves; an index of format 2
 * (none) still loads; a kernel whose plan rewrites its SASS stays out of it;
 * without nvJitLink the build succeeds, saying why, with no linked module.
 *
 * Needs NVRTC (for the build) but no GPU. Runs the CLI (LG_CLI).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "bundle.h"
#include "bundle_fixture.h"
#include "bundle_pack.h"
#include "cubin_elf.h"
#include "generate.h"
#include "lingen.h"
#include "nvrtc.h"
#include "proc.h"
#include "testutil.h"

#define OTHER_SPEC "{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 4096}"
#define FIELDS 11 /* of a kernel line, format 3 */

static const char *const archs[] = {"sm_90a", "sm_80"};

static char *tmp, *bundle;
static char *index_text, *ipath; /* index.lgb as built, and its path */
static char *pack, *ppath;       /* cubins.lgc as built, and its path */
static size_t pack_len;
static lg_spec_file *norms;

static int setup(void **state)
{
	(void)state;
	tmp = lg_test_tmpdir("bundle-index");
	if (lg_spec_file_load(LG_TEST_NORMS, &norms) != LG_OK)
		return -1;
	bundle = lg_test_build_norms(tmp, true);
	ipath = lg_test_path(bundle, "index.lgb");
	ppath = lg_test_path(bundle, LG_PACK_FILE);
	index_text = lg_test_read_file(ipath, NULL);
	pack = lg_test_read_file(ppath, &pack_len);
	return index_text && pack ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	lg_spec_file_free(norms);
	free(index_text);
	free(pack);
	free(ipath);
	free(ppath);
	lg_test_rm_rf(tmp);
	free(bundle);
	free(tmp);
	return 0;
}

/* Every test starts from the bundle as built, NVRTC made unloadable (a
 * bundle never needs it). */
static int restore(void **state)
{
	(void)state;
	lg_test_write_file(ipath, index_text, strlen(index_text));
	lg_test_write_file(ppath, pack, pack_len);
	lg_nvrtc_block_for_tests(1);
	return 0;
}

static int unblock(void **state)
{
	(void)state;
	lg_nvrtc_block_for_tests(0);
	return 0;
}

/* The built index's kernel line of entry x arch (asserted present): a
 * pointer into index_text. */
static const char *record(const char *entry, const char *arch)
{
	char key[256];
	snprintf(key, sizeof key, "\nkernel\t%s\t%s\t", arch, entry);
	const char *at = strstr(index_text, key);
	assert_non_null(at);
	return at + 1;
}

/* Field i of the built record of entry x arch (malloc'd). */
static char *field(const char *entry, const char *arch, int i)
{
	const char *at = record(entry, arch);
	for (int k = 0; k < i; k++)
		at = strchr(at, '\t') + 1;
	return strndup(at, strcspn(at, "\t\n"));
}

/* Write the built index with: field `field` (0: "kernel") of the record of
 * entry x arch set to value (entry NULL: no record changed); the first
 * line replaced by header (NULL: as built); the second (the cubins line)
 * by cubins (NULL: as built, "": left out). */
static void write_index(const char *entry, const char *arch, int f, const char *value, const char *header,
			const char *cubins)
{
	char *out = NULL;
	size_t len = 0;
	FILE *fp = open_memstream(&out, &len);
	assert_non_null(fp);
	const char *rec = entry ? record(entry, arch) : NULL;
	int n = 0;
	for (const char *line = index_text; *line; n++) {
		const char *end = strchr(line, '\n');
		assert_non_null(end);
		if (n == 0 && header) {
			fprintf(fp, "%s\n", header);
		} else if (n == 1 && cubins) {
			fprintf(fp, "%s%s", cubins, *cubins ? "\n" : "");
		} else if (line == rec) {
			const char *at = line;
			for (int i = 0; i < FIELDS; i++) {
				const char *tab = memchr(at, '\t', (size_t)(end - at));
				const char *stop = tab ? tab : end;
				if (i == f)
					fputs(value, fp);
				else
					fwrite(at, 1, (size_t)(stop - at), fp);
				fputc(i == FIELDS - 1 ? '\n' : '\t', fp);
				at = stop + 1;
			}
		} else {
			fwrite(line, 1, (size_t)(end + 1 - line), fp);
		}
		line = end + 1;
	}
	fclose(fp);
	lg_test_write_file(ipath, out, len);
	free(out);
}

/* Asking for spec s on arch fails with st and a message holding needle
 * (the context opens: records are checked when asked for). */
static void expect_bad_record(const lg_spec *s, const char *arch, lg_status st, const char *needle)
{
	lg_ctx *c = lg_test_bundle_ctx(bundle, arch, NULL);
	const void *cubin;
	size_t size;
	assert_int_equal(lg_ctx_cubin(c, s, &cubin, &size), st);
	fprintf(stderr, "%s\n", lg_last_error());
	assert_non_null(strstr(lg_last_error(), needle));
	lg_ctx_destroy(c);
}

/* Every kernel of the bundle for both archs served with the bytes of its
 * own cubin file; with `aligned`, from the mapped cubin file (each at a
 * multiple of LG_PACK_ALIGN). */
static void expect_all_served(bool aligned)
{
	for (int a = 0; a < 2; a++) {
		char *cache = lg_test_path(tmp, "untouched-cache");
		lg_ctx *c = lg_test_bundle_ctx(bundle, archs[a], cache);
		for (size_t i = 0; i < lg_spec_file_count(norms); i++) {
			const lg_spec *s = lg_spec_file_get(norms, i);
			const void *cubin;
			size_t size, n;
			if (lg_ctx_cubin(c, s, &cubin, &size) != LG_OK)
				fail_msg("%s", lg_last_error());
			char *want = lg_test_bundle_cubin(bundle, lg_spec_entry(s), archs[a], &n);
			assert_int_equal(size, n);
			assert_memory_equal(cubin, want, n);
			if (aligned)
				assert_int_equal((uintptr_t)cubin % LG_PACK_ALIGN, 0);
			free(want);
		}
		lg_spec *other;
		const void *cubin;
		size_t size;
		assert_int_equal(lg_spec_parse(OTHER_SPEC, &other), LG_OK);
		assert_int_equal(lg_ctx_cubin(c, other, &cubin, &size), LG_ERR_MISSING);
		assert_non_null(strstr(lg_last_error(), bundle));
		lg_spec_free(other);
		lg_ctx_destroy(c);
		assert_int_equal(access(cache, F_OK), -1); /* no cache folder made */
		free(cache);
	}
}

/* The index and cubin file as built: every cubin from the mapping; neither
 * the manifest nor a kernel's own cubin file is read. */
static void test_round_trip(void **state)
{
	(void)state;
	char header[64];
	snprintf(header, sizeof header, "LGINDEX\t%d\t%s\t", LG_INDEX_FORMAT, LINGEN_VERSION);
	assert_int_equal(LG_INDEX_FORMAT, 3);
	assert_int_equal(strncmp(index_text, header, strlen(header)), 0);
	char cubins[64];
	snprintf(cubins, sizeof cubins, "\ncubins\t%s\t%zu\n", LG_PACK_FILE, pack_len);
	assert_non_null(strstr(index_text, cubins));
	assert_int_equal(memcmp(pack, "LGCUBINS\t1\n", 11), 0);

	char *mpath = lg_test_path(bundle, "manifest.json"), *manifest = lg_test_read_file(mpath, NULL);
	lg_test_write_file(mpath, "{", 1);
	expect_all_served(true);
	/* a kernel's own file gone: served from the cubin file all the same */
	const char *e = lg_spec_entry(lg_spec_file_get(norms, 0));
	char *own = lg_test_path(bundle, "own.cubin"), *name = field(e, "sm_80", 3), *path = lg_test_path(bundle, name);
	assert_int_equal(rename(path, own), 0);
	expect_bad_record(lg_spec_file_get(norms, 0), "sm_80", LG_OK, "");
	assert_int_equal(rename(own, path), 0);
	lg_test_write_file(mpath, manifest, strlen(manifest));
	free(path);
	free(name);
	free(own);
	free(manifest);
	free(mpath);
}

/* Write the built index as an older format: 2 (no linked modules: no
 * linked lines, no last field of the kernel lines) or 1 (neither a cubins
 * line nor offsets either). */
static void write_older(int format)
{
	char *out = NULL;
	size_t len = 0;
	FILE *fp = open_memstream(&out, &len);
	assert_non_null(fp);
	int n = 0;
	for (const char *line = index_text; *line; n++) {
		const char *end = strchr(line, '\n');
		if (n == 0) {
			const char *rest = strchr(strchr(line, '\t') + 1, '\t');
			fprintf(fp, "LGINDEX\t%d%.*s", format, (int)(end + 1 - rest), rest);
		} else if (strncmp(line, "kernel\t", 7) == 0) {
			const char *at = line;
			for (int i = 0; i < FIELDS - 1; i++) {
				const char *stop = strchr(at, '\t');
				if (i != 4 || format > 1)
					fprintf(fp, "%.*s%c", (int)(stop - at), at, i == FIELDS - 2 ? '\n' : '\t');
				at = stop + 1;
			}
		} else if (strncmp(line, "linked\t", 7) != 0 && (format > 1 || strncmp(line, "cubins\t", 7) != 0)) {
			fwrite(line, 1, (size_t)(end + 1 - line), fp);
		}
		line = end + 1;
	}
	fclose(fp);
	lg_test_write_file(ipath, out, len);
	free(out);
}

/* An index of format 1, as built before the cubin file (no cubins line,
 * no offsets): loaded, each cubin read from its own file. */
static void test_format_1(void **state)
{
	(void)state;
	write_older(1);
	assert_int_equal(unlink(ppath), 0);
	expect_all_served(false);
	/* format 1's kernel line has 9 fields */
	write_index(NULL, NULL, 0, NULL, "LGINDEX\t1\t" LINGEN_VERSION "\t13.0", "");
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "expected a kernel line (9 fields)");
}

/* An index of format 2, as built before linked modules: loaded, every
 * cubin from the cubin file, no linked module. */
static void test_format_2(void **state)
{
	(void)state;
	write_older(2);
	expect_all_served(true);
	lg_bundle *b = NULL;
	assert_int_equal(lg_bundle_open(bundle, &b), LG_OK);
	for (int a = 0; a < 2; a++) {
		struct lg_target t;
		const void *cubin;
		size_t size;
		assert_true(lg_target_parse(archs[a], &t));
		assert_int_equal(lg_bundle_linked(b, &t, &cubin, &size), LG_ERR_MISSING);
		assert_non_null(strstr(lg_last_error(), "has no linked module for"));
		assert_false(lg_bundle_in_linked(b, lg_spec_entry(lg_spec_file_get(norms, 0)), archs[a]));
	}
	lg_bundle_free(b);
	/* format 2's kernel line has 10 fields, and no linked line */
	write_index(NULL, NULL, 0, NULL, "LGINDEX\t2\t" LINGEN_VERSION "\t13.0", NULL);
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "expected a kernel line (10 fields) or a skipped line");
}

/* The built index with the line starting with prefix replaced by with
 * (asserted present; with "": left out), then `extra` lines added at its
 * end (NULL: none). */
static void replace_line(const char *prefix, const char *with, const char *extra)
{
	const char *at = strstr(index_text, prefix);
	assert_non_null(at);
	const char *end = strchr(at, '\n') + 1;
	char *out = NULL;
	assert_true(asprintf(&out, "%.*s%s%s%s%s", (int)(at - index_text), index_text, with, *with ? "\n" : "", end,
			     extra ? extra : "") > 0);
	lg_test_write_file(ipath, out, strlen(out));
	free(out);
}

/* The fields of the built linked line of arch: its offset and size. */
static void linked_line(const char *arch, size_t *offset, size_t *size, char **line)
{
	char key[64];
	snprintf(key, sizeof key, "\nlinked\t%s\t", arch);
	const char *at = strstr(index_text, key);
	assert_non_null(at);
	assert_int_equal(sscanf(at + strlen(key), "%zu\t%zu", offset, size), 2);
	*line = strndup(at + 1, strcspn(at + 1, "\n"));
}

/* Whether readelf (binutils) lists name as a function defined in the cubin
 * at path; true when there is no readelf to ask. */
static bool readelf_defines(const char *path, const char *name)
{
	if (system("command -v readelf >/dev/null 2>&1") != 0)
		return true;
	char *cmd = NULL;
	assert_true(asprintf(&cmd, "readelf -Ws '%s' | awk '$4 == \"FUNC\" && $(NF - 1) != \"UND\" && $NF == \"%s\"' | grep -q .",
			     path, name) > 0);
	int rc = system(cmd);
	free(cmd);
	return rc == 0;
}

/* The linked module of each arch (lingen build: every kernel's relocatable
 * cubin linked into one): in the cubin file, its checksum sound, defining
 * every entry point of every kernel (its ELF symbols read in C, and by
 * readelf where there is one), every kernel marked as in it. */
static void test_linked_module(void **state)
{
	(void)state;
	lg_bundle *b = NULL;
	assert_int_equal(lg_bundle_open(bundle, &b), LG_OK);
	for (int a = 0; a < 2; a++) {
		struct lg_target t;
		const void *cubin;
		size_t size, offset, recorded;
		char *line;
		assert_true(lg_target_parse(archs[a], &t));
		assert_int_equal(lg_bundle_linked(b, &t, &cubin, &size), LG_OK);
		linked_line(archs[a], &offset, &recorded, &line);
		assert_int_equal(size, recorded);
		assert_true(offset % LG_PACK_ALIGN == 0 && offset + size <= pack_len);
		assert_memory_equal(cubin, pack + offset, size);
		char *path = lg_test_path(tmp, "linked.cubin");
		lg_test_write_file(path, cubin, size);
		for (size_t i = 0; i < lg_spec_file_count(norms); i++) {
			const lg_spec *s = lg_spec_file_get(norms, i);
			char *canon = lg_spec_canonical(s);
			struct lg_plan plan;
			const void *own;
			size_t own_size;
			struct lg_blob blob;
			assert_true(lg_bundle_in_linked(b, lg_spec_entry(s), archs[a]));
			assert_int_equal(lg_bundle_get(b, s, canon, &t, &plan, &own, &own_size, &blob), LG_OK);
			for (int e = 0; e < plan.nentries; e++) {
				assert_true(lg_cubin_has_function(cubin, size, plan.entry[e]));
				assert_true(readelf_defines(path, plan.entry[e]));
			}
			lg_blob_release(&blob);
			free(canon);
		}
		assert_false(lg_cubin_has_function(cubin, size, "lg_no_such_kernel"));
		assert_false(lg_cubin_has_function(cubin, 63, lg_spec_entry(lg_spec_file_get(norms, 0))));
		free(path);
		free(line);
	}
	lg_bundle_free(b);
}

/* A linked module that fails its checksum is refused, naming it, and every
 * kernel is still served from its own cubin; linked lines and flags that
 * are not what was built are refused when the bundle opens. */
static void test_bad_linked(void **state)
{
	(void)state;
	size_t offset, size;
	char *line, with[256];
	linked_line("sm_80", &offset, &size, &line);
	pack[offset + size / 2] = (char)~pack[offset + size / 2];
	lg_test_write_file(ppath, pack, pack_len);
	pack[offset + size / 2] = (char)~pack[offset + size / 2];
	lg_bundle *b = NULL;
	struct lg_target t;
	const void *cubin;
	assert_int_equal(lg_bundle_open(bundle, &b), LG_OK);
	assert_true(lg_target_parse("sm_80", &t));
	assert_int_equal(lg_bundle_linked(b, &t, &cubin, &size), LG_ERR_IO);
	fprintf(stderr, "%s\n", lg_last_error());
	assert_non_null(strstr(lg_last_error(), "the linked module for sm_80"));
	assert_non_null(strstr(lg_last_error(), "is corrupt"));
	assert_true(lg_target_parse("sm_90a", &t));
	assert_int_equal(lg_bundle_linked(b, &t, &cubin, &size), LG_OK); /* the other arch's is sound */
	lg_bundle_free(b);
	expect_all_served(true);
	lg_test_write_file(ppath, pack, pack_len);

	snprintf(with, sizeof with, "linked\tsm_80\t100\t%zu\t0123456789abcdef", size);
	replace_line("linked\tsm_80\t", with, NULL);
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "is not inside cubins.lgc");
	snprintf(with, sizeof with, "linked\tsm_80\t%zu\t%zu\txyz", offset, size);
	replace_line("linked\tsm_80\t", with, NULL);
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "checksum: expected 16 hex digits, found 'xyz'");
	replace_line("linked\tsm_80\t", "linked\tsm_7\t64\t64\t0123456789abcdef", NULL);
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "arch: 'sm_7' is not an arch");
	char *twice = NULL;
	assert_true(asprintf(&twice, "%s\n", line) > 0);
	replace_line("linked\tsm_80\t", line, twice);
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "a second linked module for sm_80");
	const char *e = lg_spec_entry(lg_spec_file_get(norms, 1));
	write_index(e, "sm_80", 10, "2", NULL, NULL);
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "linked: found '2'");
	write_index(e, "sm_80", 10, "0", NULL, NULL); /* left out of the module: loaded alone */
	assert_int_equal(lg_bundle_open(bundle, &b), LG_OK);
	assert_false(lg_bundle_in_linked(b, e, "sm_80"));
	assert_true(lg_bundle_in_linked(b, e, "sm_90a"));
	lg_bundle_free(b);
	free(twice);
	free(line);
}

/* A kernel whose plan rewrites its SASS (an FP8 GEMM with tile.ffma) is
 * left out of the linked module, said by lingen build, marked 0 and loaded
 * alone; the other kernels are linked. */
static void test_sass_rewrite_left_out(void **state)
{
	(void)state;
	static const char gemm[] = "{\"op\": \"fp8_gemm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"n\": 3072, "
				   "\"k\": 2048, \"tile\": {\"ffma\": 2}}";
	char *specs = lg_test_path(tmp, "ffma.json"), *dir = lg_test_path(tmp, "ffma-bundle"), *text = NULL;
	assert_true(asprintf(&text, "{\"kernels\": [%s, %s]}\n", gemm, OTHER_SPEC) > 0);
	lg_test_write_file(specs, text, strlen(text));
	char *argv[] = {(char *)LG_CLI, (char *)"build", specs,	    (char *)"--arch", (char *)"sm_90a",
			(char *)"-o",	dir,		 (char *)"--link", NULL};
	struct lg_proc p = lg_test_run_cached(tmp, 0, argv);
	assert_non_null(strstr(p.err, "not in the linked module (its plan rewrites the SASS)"));
	assert_non_null(strstr(p.err, "linked 1 kernel for sm_90a into one module"));
	lg_proc_free(&p);
	lg_spec *g, *o;
	struct lg_target t;
	struct lg_plan plan;
	assert_int_equal(lg_spec_parse(gemm, &g), LG_OK);
	assert_int_equal(lg_spec_parse(OTHER_SPEC, &o), LG_OK);
	assert_true(lg_target_parse("sm_90a", &t));
	assert_int_equal(lg_plan_for(g, &t, &plan), LG_OK);
	assert_true(plan.sass_ffma != 0);
	lg_bundle *b = NULL;
	const void *cubin;
	size_t size;
	assert_int_equal(lg_bundle_open(dir, &b), LG_OK);
	assert_false(lg_bundle_in_linked(b, lg_spec_entry(g), "sm_90a"));
	assert_true(lg_bundle_in_linked(b, lg_spec_entry(o), "sm_90a"));
	assert_int_equal(lg_bundle_linked(b, &t, &cubin, &size), LG_OK);
	for (int e = 0; e < plan.nentries; e++)
		assert_false(lg_cubin_has_function(cubin, size, plan.entry[e]));
	assert_true(lg_cubin_has_function(cubin, size, lg_spec_entry(o)));
	lg_bundle_free(b);
	lg_spec_free(o);
	lg_spec_free(g);
	free(text);
	free(dir);
	free(specs);
}

/* Without nvJitLink (LINGEN_NVJITLINK naming no library) lingen build
 * still succeeds, says why there is no linked module, and writes a bundle
 * with none: every kernel marked 0, served from its own cubin. */
static void test_no_nvjitlink(void **state)
{
	(void)state;
	char *dir = lg_test_path(tmp, "no-link"), *cache = lg_test_path(tmp, "cache");
	char *env[3] = {NULL, (char *)"LINGEN_NVJITLINK=/nonexistent/libnvJitLink.so", NULL};
	assert_true(asprintf(&env[0], "LINGEN_CACHE_DIR=%s", cache) > 0);
	char *argv[] = {(char *)LG_CLI, (char *)"build", (char *)LG_TEST_NORMS, (char *)"--arch", (char *)"sm_80", (char *)"-o",
			dir, (char *)"--link", NULL};
	struct lg_proc p;
	assert_int_equal(lg_proc_run(argv, env, &p), 0);
	fprintf(stderr, "%s", p.err);
	assert_int_equal(p.status, 0);
	assert_non_null(strstr(p.err, "no linked module (cannot load nvJitLink from LINGEN_NVJITLINK=/nonexistent/"));
	assert_non_null(strstr(p.err, "each kernel of the bundle is loaded alone"));
	lg_proc_free(&p);
	char *ipath2 = lg_test_path(dir, "index.lgb"), *text = lg_test_read_file(ipath2, NULL);
	assert_non_null(text);
	assert_null(strstr(text, "\nlinked\t"));
	assert_null(strstr(text, "\t1\n"));
	lg_bundle *b = NULL;
	struct lg_target t;
	const void *cubin;
	size_t size;
	assert_int_equal(lg_bundle_open(dir, &b), LG_OK);
	assert_true(lg_target_parse("sm_80", &t));
	assert_int_equal(lg_bundle_linked(b, &t, &cubin, &size), LG_ERR_MISSING);
	for (size_t i = 0; i < lg_spec_file_count(norms); i++) {
		const lg_spec *s = lg_spec_file_get(norms, i);
		char *canon = lg_spec_canonical(s);
		struct lg_plan plan;
		struct lg_blob blob;
		assert_false(lg_bundle_in_linked(b, lg_spec_entry(s), "sm_80"));
		assert_int_equal(lg_bundle_get(b, s, canon, &t, &plan, &cubin, &size, &blob), LG_OK);
		lg_blob_release(&blob);
		free(canon);
	}
	lg_bundle_free(b);
	free(text);
	free(ipath2);
	free(env[0]);
	free(cache);
	free(dir);
}

/* Records whose plan, tile, spec or checksum is not what was built. */
static void test_bad_records(void **state)
{
	(void)state;
	const lg_spec *s = lg_spec_file_get(norms, 1);
	const char *e = lg_spec_entry(s);
	write_index(e, "sm_80", 7, "0123456789abcdef", NULL, NULL); /* plan digest */
	expect_bad_record(s, "sm_80", LG_ERR_SPEC, "the launch plan recorded differs from what lingen");
	expect_bad_record(lg_spec_file_get(norms, 0), "sm_80", LG_OK, ""); /* the other records serve */
	write_index(e, "sm_80", 8, "{\"threads\":512}", NULL, NULL); /* a sound tile, not the plan built */
	expect_bad_record(s, "sm_80", LG_ERR_SPEC, "the launch plan recorded differs");
	write_index(e, "sm_80", 8, "{\"threads\":64}", NULL, NULL);
	expect_bad_record(s, "sm_80", LG_ERR_SPEC, "given.threads: found 64");
	write_index(e, "sm_80", 8, "{\"rows\":0}", NULL, NULL);
	expect_bad_record(s, "sm_80", LG_ERR_SPEC, "given.rows: found 0");
	write_index(e, "sm_80", 8, "[]", NULL, NULL);
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "expected the given tile and the spec as JSON objects");
	char *canon = lg_spec_canonical(s), *at = strstr(canon, "2048");
	assert_non_null(at);
	at[3] = '9'; /* hidden 2049: another spec under this entry's name */
	write_index(e, "sm_80", 9, canon, NULL, NULL);
	expect_bad_record(s, "sm_80", LG_ERR_MISSING, "with this spec");
	write_index(e, "sm_80", 6, "0000000000000000", NULL, NULL); /* checksum */
	expect_bad_record(s, "sm_80", LG_ERR_IO, "checksum");
	write_index(e, "sm_80", 3, "../x.cubin", NULL, NULL);
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "must be a file name inside the bundle");
	write_index(e, "sm_80", 5, "12x", NULL, NULL);
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "size: found '12x'");
	write_index(e, "sm_80", 1, "sm_7", NULL, NULL);
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "arch: 'sm_7' is not an arch");
	free(canon);
}

/* Offsets outside the cubin file, and another record's cubin. */
static void test_bad_offsets(void **state)
{
	(void)state;
	const lg_spec *s = lg_spec_file_get(norms, 1);
	const char *e = lg_spec_entry(s);
	static const char *const outside[] = {"0", "1", "100", "18446744073709551615"};
	for (size_t i = 0; i < sizeof outside / sizeof outside[0]; i++) {
		write_index(e, "sm_80", 4, outside[i], NULL, NULL);
		lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "is not inside cubins.lgc");
	}
	write_index(e, "sm_80", 4, "99999999999999999999", NULL, NULL); /* over 2^64 */
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "offset: found '99999999999999999999'");
	write_index(e, "sm_80", 4, "12x", NULL, NULL);
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "offset: found '12x', expected a byte offset in cubins.lgc");
	char last[32]; /* the first cubin as long as the rest of the file and one byte: past its end */
	const char *e0 = lg_spec_entry(lg_spec_file_get(norms, 0));
	char *off = field(e0, "sm_80", 4);
	snprintf(last, sizeof last, "%zu", pack_len - (size_t)strtoull(off, NULL, 10) + 1);
	write_index(e0, "sm_80", 5, last, NULL, NULL);
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "is not inside cubins.lgc");
	/* another kernel's offset (inside the file): the bytes there fail the checksum */
	write_index(e, "sm_80", 4, off, NULL, NULL);
	expect_bad_record(s, "sm_80", LG_ERR_IO, "checksum");
	assert_non_null(strstr(lg_last_error(), LG_PACK_FILE " at offset "));
	free(off);
}

/* The cubin file: a flipped byte, truncated, missing, foreign, or another
 * size than the index records. */
static void test_bad_pack(void **state)
{
	(void)state;
	const lg_spec *s = lg_spec_file_get(norms, 1);
	char *off = field(lg_spec_entry(s), "sm_80", 4), *size = field(lg_spec_entry(s), "sm_80", 5);
	size_t at = (size_t)strtoull(off, NULL, 10) + (size_t)strtoull(size, NULL, 10) / 2;
	pack[at] = (char)~pack[at];
	lg_test_write_file(ppath, pack, pack_len);
	pack[at] = (char)~pack[at];
	expect_bad_record(s, "sm_80", LG_ERR_IO, "checksum");
	assert_non_null(strstr(lg_last_error(), LG_PACK_FILE " at offset "));
	expect_bad_record(lg_spec_file_get(norms, 0), "sm_80", LG_OK, ""); /* the other cubins serve */

	lg_test_write_file(ppath, pack, pack_len - 1); /* truncated */
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "bytes, its index records");
	assert_non_null(strstr(lg_last_error(), ppath));
	lg_test_write_file(ppath, pack, pack_len);
	pack[3] = 'X'; /* another header */
	lg_test_write_file(ppath, pack, pack_len);
	pack[3] = 'U';
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "is not a lingen cubin file");
	assert_int_equal(unlink(ppath), 0);
	lg_test_expect_bad_bundle(bundle, LG_ERR_IO, "cannot open the bundle's cubin file");
	assert_non_null(strstr(lg_last_error(), ppath));
	lg_test_write_file(ppath, pack, pack_len);

	char line[96];
	snprintf(line, sizeof line, "cubins\t%s\t%zu", LG_PACK_FILE, pack_len + 64);
	write_index(NULL, NULL, 0, NULL, NULL, line);
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "its index records");
	write_index(NULL, NULL, 0, NULL, NULL, "cubins\t../cubins.lgc\t64");
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "must be a file name inside the bundle");
	write_index(NULL, NULL, 0, NULL, NULL, "cubins\tcubins.lgc\tx");
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "bytes: found 'x'");
	write_index(NULL, NULL, 0, NULL, NULL, ""); /* no cubins line */
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "expected the cubin file's line");
	free(off);
	free(size);
}

/* The header: another format or lingen, not an index, a partial one. */
static void test_bad_header(void **state)
{
	(void)state;
	int major, minor;
	char header[96];
	lg_nvrtc_block_for_tests(0);
	assert_int_equal(lg_nvrtc_version(&major, &minor), LG_OK);
	lg_nvrtc_block_for_tests(1);
	snprintf(header, sizeof header, "LGINDEX\t4\t%s\t%d.%d", LINGEN_VERSION, major, minor);
	write_index(NULL, NULL, 0, NULL, header, NULL);
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "bundle index format 4, this lingen");
	snprintf(header, sizeof header, "LGINDEX\t2\t9.9.9\t%d.%d", major, minor);
	write_index(NULL, NULL, 0, NULL, header, NULL);
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "made by lingen 9.9.9");
	write_index(NULL, NULL, 0, NULL, "{\"format\": 3}", NULL);
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "not a lingen bundle index");
	lg_test_write_file(ipath, index_text, strlen(index_text) - 1); /* its last line cut */
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "a partial index");
	lg_test_write_file(ipath, "LGINDEX\t2\n\tkernel\n", strlen("LGINDEX\t2\n\tkernel\n"));
	lg_test_expect_bad_bundle(bundle, LG_ERR_SPEC, "header: expected LGINDEX, format, lingen and NVRTC versions");
}

int main(void)
{
	unsetenv("LINGEN_ARCH");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_round_trip, restore, unblock),
		cmocka_unit_test_setup_teardown(test_format_1, restore, unblock),
		cmocka_unit_test_setup_teardown(test_format_2, restore, unblock),
		cmocka_unit_test_setup_teardown(test_linked_module, restore, unblock),
		cmocka_unit_test_setup_teardown(test_bad_linked, restore, unblock),
		cmocka_unit_test(test_sass_rewrite_left_out),
		cmocka_unit_test(test_no_nvjitlink),
		cmocka_unit_test_setup_teardown(test_bad_records, restore, unblock),
		cmocka_unit_test_setup_teardown(test_bad_offsets, restore, unblock),
		cmocka_unit_test_setup_teardown(test_bad_pack, restore, unblock),
		cmocka_unit_test_setup_teardown(test_bad_header, restore, unblock),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
