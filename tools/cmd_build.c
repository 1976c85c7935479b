/*
 * cmd_build.c - `lingen build SPEC|MODEL... --arch A[,B...] -o DIR [-j N]`:
 * pre-generate a deployment bundle, DIR/<entry>.<arch>.cubin for every
 * kernel x arch, the same cubins in one file, DIR/cubins.lgc (what the
 * loader maps; after them each arch's linked module, build_link.h),
 * DIR/index.lgb (what the loader reads) and
 * DIR/manifest.json (the same records as JSON). Needs no GPU.
 *
 * Compiling is compile_all.c's (shared with `lingen aot`): N threads, a
 * progress line per cubin. The cubins are then written atomically and the
 * manifest last, so a bundle with a manifest is complete. The manifest's
 * layout (format LG_MANIFEST_FORMAT = 3) is documented at the top of
 * runtime/bundle.c, beside its reader:
 *   format, lingen and NVRTC versions, archs, and per cubin: the canonical
 *   spec, entry, arch, file, size, XXH3-64 checksum, and the plan (tile,
 *   arguments, and per entry point its name, block, dynamic smem, cluster,
 *   persistence and grid at 1 and 8192 tokens).
 * A context created with lg_ctx_opts.bundle = DIR loads from it.
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "buf.h"
#include "bundle.h" /* LG_MANIFEST_FORMAT, LG_INDEX_FORMAT, lg_plan_to_json, lg_plan_digest */
#include "build_link.h"
#include "bundle_pack.h" /* LG_PACK_FILE, lg_pack_build */
#include "cli.h"
#include "compile_all.h"

enum { O_OUT = LG_CA_OUT, O_ARCH = LG_CA_ARCH, O_JOBS = LG_CA_JOBS, O_LINK };
static const struct lg_cli_opt opts[] = {
	[O_OUT] = {"out", 'o', "DIR", "bundle folder (created if missing)"},
	[O_ARCH] = {"arch", 'a', "ARCH[,ARCH...]", "target archs (default $LINGEN_ARCH, else sm_90a)"},
	[O_JOBS] = {"jobs", 'j', "N", "compile in N threads (default: number of CPUs)"},
	[O_LINK] = {"link", 0, NULL, "also one linked module per arch, loaded once for all its kernels"},
	{0},
};

/* "<entry>.<arch>.cubin", malloc'd; NULL on allocation failure. */
static char *cubin_name(const struct lg_compile_set *s, const struct lg_compiled *c)
{
	char *name = NULL;
	if (asprintf(&name, "%s.%s.cubin", lg_spec_entry(c->k->spec), s->archs[c->arch]) < 0)
		return NULL;
	return name;
}

/* One element of "kernels"; NULL on allocation failure. */
static cJSON *manifest_kernel(const struct lg_compile_set *s, const struct lg_compiled *c)
{
	const lg_spec *spec = c->k->spec;
	char *canon = lg_spec_canonical(spec), *file = cubin_name(s, c);
	cJSON *o = cJSON_CreateObject(), *js = canon ? cJSON_Parse(canon) : NULL;
	cJSON *plan = lg_plan_to_json(spec, &c->plan);
	char sum[17];
	snprintf(sum, sizeof sum, "%016llx", (unsigned long long)c->checksum);
	bool ok = o && js && plan && file && cJSON_AddItemToObject(o, "spec", js);
	if (ok) {
		js = NULL;
		cJSON_AddStringToObject(o, "entry", lg_spec_entry(spec));
		cJSON_AddStringToObject(o, "arch", s->archs[c->arch]);
		cJSON_AddStringToObject(o, "file", file);
		cJSON_AddNumberToObject(o, "size", (double)c->size);
		cJSON_AddStringToObject(o, "checksum", sum);
		ok = cJSON_AddItemToObject(o, "plan", plan);
		plan = ok ? NULL : plan;
	}
	cJSON_Delete(js);
	cJSON_Delete(plan);
	free(canon);
	free(file);
	if (!ok) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

/* One element of "skipped": {"entry", "arch", "why"}; false on
 * allocation failure. */
static bool manifest_skip(cJSON *sk, const struct lg_compile_set *s, const struct lg_compiled *c)
{
	char why[160];
	snprintf(why, sizeof why, "family %s runs on %s only", c->k->spec->fam->op, c->skipped);
	cJSON *o = cJSON_CreateObject();
	bool ok = o && cJSON_AddStringToObject(o, "entry", lg_spec_entry(c->k->spec)) &&
		  cJSON_AddStringToObject(o, "arch", s->archs[c->arch]) && cJSON_AddStringToObject(o, "why", why);
	if (!ok || !cJSON_AddItemToArray(sk, o)) {
		cJSON_Delete(o);
		return false;
	}
	return true;
}

/* The manifest as JSON text (malloc'd, ending in a newline), NULL on
 * allocation failure. */
static char *manifest(const struct lg_compile_set *s)
{
	char nv[32];
	lg_compile_nvrtc_version(nv);
	cJSON *m = cJSON_CreateObject();
	cJSON_AddNumberToObject(m, "format", LG_MANIFEST_FORMAT);
	cJSON_AddStringToObject(m, "lingen", lg_version());
	cJSON_AddStringToObject(m, "nvrtc", nv);
	cJSON *archs = cJSON_AddArrayToObject(m, "archs");
	for (int i = 0; archs && i < s->narch; i++)
		cJSON_AddItemToArray(archs, cJSON_CreateString(s->archs[i]));
	cJSON *ks = cJSON_AddArrayToObject(m, "kernels");
	bool ok = m && archs && ks;
	for (size_t i = 0; ok && i < s->n; i++) {
		cJSON *k = s->c[i].skipped ? NULL : manifest_kernel(s, &s->c[i]);
		ok = s->c[i].skipped || (k && cJSON_AddItemToArray(ks, k));
	}
	cJSON *sk = ok && s->nskipped ? cJSON_AddArrayToObject(m, "skipped") : NULL;
	ok = ok && (sk || !s->nskipped);
	for (size_t i = 0; ok && sk && i < s->n; i++)
		if (s->c[i].skipped)
			ok = manifest_skip(sk, s, &s->c[i]);
	char *text = ok ? cJSON_Print(m) : NULL;
	cJSON_Delete(m);
	size_t n = text ? strlen(text) : 0;
	char *t = text ? realloc(text, n + 2) : NULL;
	if (!t) {
		free(text);
		return NULL;
	}
	memcpy(t + n, "\n", 2);
	return t;
}

/* index.lgb (runtime/bundle_index.c): what the loader reads, the manifest's
 * records as tab-separated lines, the cubin file of `bytes` bytes holding
 * cubin i at offset[i]; NULL on allocation failure. */
static char *index_text(const struct lg_compile_set *s, const size_t *offset, size_t bytes,
			const struct lg_build_linked *linked, const bool *in_link)
{
	char nv[32];
	lg_compile_nvrtc_version(nv);
	lg_buf b;
	lg_buf_init(&b);
	lg_emit(&b, "LGINDEX\t%d\t%s\t%s\n", LG_INDEX_FORMAT, lg_version(), nv);
	lg_emit(&b, "cubins\t%s\t%zu\n", LG_PACK_FILE, bytes);
	for (int a = 0; a < s->narch; a++)
		if (linked[a].cubin)
			lg_emit(&b, "linked\t%s\t%zu\t%zu\t%016llx\n", s->archs[a], linked[a].offset, linked[a].size,
				(unsigned long long)linked[a].checksum);
	for (size_t i = 0; i < s->n; i++) {
		const struct lg_compiled *c = &s->c[i];
		const lg_spec *spec = c->k->spec;
		if (c->skipped) {
			lg_emit(&b, "skipped\t%s\t%s\tfamily %s runs on %s only\n", lg_spec_entry(spec),
				s->archs[c->arch], spec->fam->op, c->skipped);
			continue;
		}
		char *canon = lg_spec_canonical(spec), *file = cubin_name(s, c);
		char *given = lg_plan_given_json(spec, &c->plan);
		if (canon && file && given)
			lg_emit(&b, "kernel\t%s\t%s\t%s\t%zu\t%zu\t%016llx\t%016llx\t%s\t%s\t%d\n", s->archs[c->arch],
				lg_spec_entry(spec), file, offset[i], c->size, (unsigned long long)c->checksum,
				(unsigned long long)lg_plan_digest(spec, &c->plan), given, canon, in_link[i]);
		else
			b.failed = true;
		free(canon);
		free(file);
		free(given);
	}
	return lg_buf_finish(&b, NULL);
}

/* Remove the cubins of an earlier build that this one does not list:
 * files named like lingen's ("lg_<...>.sm_<...>.cubin") only. */
static int remove_stale(const char *dir, const struct lg_compile_set *s)
{
	DIR *d = opendir(dir);
	if (!d)
		return lg_cli_fail(LG_EXIT_FAIL, "%s: %s", dir, strerror(errno));
	int rc = LG_EXIT_OK;
	struct dirent *e;
	while (rc == LG_EXIT_OK && (e = readdir(d))) {
		size_t n = strlen(e->d_name);
		if (strncmp(e->d_name, "lg_", 3) != 0 || n < 7 || strcmp(e->d_name + n - 6, ".cubin") != 0 ||
		    !strstr(e->d_name, ".sm_"))
			continue;
		bool listed = false;
		for (size_t i = 0; !listed && i < s->n; i++) {
			if (s->c[i].skipped)
				continue;
			char *name = cubin_name(s, &s->c[i]);
			if (!name) {
				rc = lg_cli_fail(LG_EXIT_FAIL, "out of memory");
				break;
			}
			listed = strcmp(name, e->d_name) == 0;
			free(name);
		}
		char *path = rc == LG_EXIT_OK && !listed ? lg_cli_path(dir, e->d_name) : NULL;
		if (path && unlink(path) != 0 && errno != ENOENT)
			rc = lg_cli_fail(LG_EXIT_FAIL, "cannot remove %s of an earlier build: %s", path, strerror(errno));
		free(path);
	}
	closedir(d);
	return rc;
}

/* Remove an earlier build's file of this name before writing anything. */
static int remove_old(const char *dir, const char *name)
{
	char *old = lg_cli_path(dir, name);
	if (!old)
		return lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	int rc = LG_EXIT_OK;
	if (unlink(old) != 0 && errno != ENOENT)
		rc = lg_cli_fail(LG_EXIT_FAIL, "cannot replace %s: %s", old, strerror(errno));
	free(old);
	return rc;
}

/* The cubin file (runtime/bundle_pack.h), one arch's cubins after
 * another, then the archs' linked modules, written to a temporary name and
 * renamed into place (a loader maps it: a file changed in place under a
 * mapping could fault); offset[i]: where cubin i is, linked[a].offset where
 * arch a's module is, *bytes the file's size. */
static int write_pack(const char *dir, const struct lg_compile_set *s, struct lg_build_linked *linked,
		      size_t *offset, size_t *bytes)
{
	size_t cap = s->n + (size_t)s->narch;
	const void **data = calloc(cap, sizeof *data);
	size_t *size = calloc(cap, sizeof *size), *at = calloc(cap, sizeof *at);
	size_t *which = calloc(cap, sizeof *which), n = 0;
	for (int a = 0; data && size && at && which && a < s->narch; a++)
		for (size_t i = 0; i < s->n; i++)
			if (!s->c[i].skipped && s->c[i].arch == a) {
				data[n] = s->c[i].cubin;
				size[n] = s->c[i].size;
				which[n++] = i;
			}
	size_t kernels = n;
	for (int a = 0; data && size && at && which && a < s->narch; a++)
		if (linked[a].cubin) {
			data[n] = linked[a].cubin;
			size[n++] = linked[a].size;
		}
	unsigned char *pack = data && size && at && which ? lg_pack_build(data, size, n, at, bytes) : NULL;
	for (size_t j = 0; pack && j < kernels; j++)
		offset[which[j]] = at[j];
	for (int a = 0, j = (int)kernels; pack && a < s->narch; a++)
		if (linked[a].cubin)
			linked[a].offset = at[j++];
	char *path = lg_cli_path(dir, LG_PACK_FILE);
	int rc = lg_cli_save(pack ? path : NULL, pack, *bytes);
	free(path);
	free(pack);
	free(which);
	free(at);
	free(size);
	free(data);
	return rc;
}

/* Write every cubin, the cubin file, then the index and the manifest (an
 * earlier build's are removed first, so that a folder with either is
 * always complete), then remove the cubins of an earlier build the new
 * manifest does not list. Each file is written under a temporary name and
 * renamed into place (lg_cli_save). */
static int write_bundle(const char *dir, const struct lg_compile_set *s)
{
	int rc = remove_old(dir, "manifest.json");
	if (rc == LG_EXIT_OK)
		rc = remove_old(dir, "index.lgb");
	for (size_t i = 0; rc == LG_EXIT_OK && i < s->n; i++) {
		if (s->c[i].skipped)
			continue;
		char *name = cubin_name(s, &s->c[i]);
		char *path = lg_cli_path(dir, name);
		rc = lg_cli_save(path, s->c[i].cubin, s->c[i].size);
		free(path);
		free(name);
	}
	size_t *offset = calloc(s->n ? s->n : 1, sizeof *offset), bytes = 0;
	struct lg_build_linked *linked = calloc((size_t)s->narch, sizeof *linked);
	bool *in_link = calloc(s->n ? s->n : 1, sizeof *in_link);
	if (rc == LG_EXIT_OK && !(offset && linked && in_link && lg_build_link(s, linked, in_link)))
		rc = lg_cli_fail(LG_EXIT_FAIL, "out of memory");
	if (rc == LG_EXIT_OK)
		rc = write_pack(dir, s, linked, offset, &bytes);
	char *index = rc == LG_EXIT_OK ? index_text(s, offset, bytes, linked, in_link) : NULL;
	lg_build_linked_free(linked, s->narch);
	free(linked);
	free(in_link);
	free(offset);
	char *ipath = lg_cli_path(dir, "index.lgb");
	if (rc == LG_EXIT_OK)
		rc = lg_cli_save(ipath, index, index ? strlen(index) : 0);
	free(index);
	free(ipath);
	char *text = rc == LG_EXIT_OK ? manifest(s) : NULL;
	char *path = lg_cli_path(dir, "manifest.json");
	if (rc == LG_EXIT_OK)
		rc = lg_cli_save(path, text, text ? strlen(text) : 0);
	free(text);
	free(path);
	return rc == LG_EXIT_OK ? remove_stale(dir, s) : rc;
}

static int run(const struct lg_cli_cmd *cmd, const struct lg_cli_args *a)
{
	/* the linked module on request only until the GPU has timed its load
	 * and its kernels (compiled as relocatable code) against the per-kernel
	 * cubins: it doubles the build's compiles */
	return lg_compile_cmd(cmd, a, a->val[O_LINK] != NULL, write_bundle, "built");
}

const struct lg_cli_cmd lg_cmd_build = {
	.name = "build",
	.synopsis = "SPEC... --arch ARCH[,ARCH...] -o DIR [-j N] [--link]",
	.summary = "pre-generate cubins into a deployment bundle (manifest + cubins)",
	.details = "Writes DIR/<entry>.<arch>.cubin for every kernel and arch, the\n"
		   "same cubins in one file, DIR/cubins.lgc (what the loader maps; with\n"
		   "--link and nvJitLink, also one linked module per arch: every kernel\n"
		   "compiled again as relocatable code and linked into one cubin, which a\n"
		   "context loads once for all of them; without nvJitLink, or when the\n"
		   "link fails, the build says why and the kernels load one by one), then\n"
		   "DIR/index.lgb (what the loader reads: the records as text lines) and\n"
		   "DIR/manifest.json (format 3: canonical spec, entry, arch, file, size,\n"
		   "checksum and launch plan of each cubin; lingen and NVRTC versions),\n"
		   "and removes the cubins of an earlier build into DIR that it does not\n"
		   "list. A kernel x arch its family does not run on (the FP8 GEMMs run\n"
		   "on sm_90a only) is not built: it is listed under \"skipped\" in the\n"
		   "manifest and the summary, for a model config always, for a spec file\n"
		   "when another arch builds it. Needs NVRTC on a cache miss, never a GPU. Cubins go through\n"
		   "the disk cache. Load the bundle from C with lg_ctx_opts.bundle = DIR:\n"
		   "no NVRTC is needed there, and a kernel missing from it is an error.\n",
	.opts = opts,
	.min_pos = 1,
	.max_pos = -1,
	.run = run,
};
