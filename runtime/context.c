/*
 * context.c - contexts and kernel handles: the memory cache, the disk cache,
 * NVRTC on a miss, and loading with cuLibraryLoadData. A context made with a
 * deployment bundle (opts.bundle, opts.aot) takes every cubin from it
 * instead (bundle.c): no NVRTC, no disk cache; when the bundle has a linked
 * module for the arch, it is loaded once and the kernels in it take their
 * entry points from it (linked_module).
 *
 * A context maps canonical spec JSON to an entry holding the plan, the cubin
 * and (once loaded) the kernel handle. A spec without a tile is planned with
 * the tile of the context's tuning file when it has an entry for it
 * (lg_ctx_resolve); the memory cache stays keyed by the spec as given. Entries are never removed before
 * lg_ctx_destroy, so handles stay valid and launches need no lock.
 */
#include "context.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "error.h"
#include "env.h"
#include "generate.h"
#include "log.h"
#include "nvrtc.h"
#include "sass.h"

/* A bundle instead of the JIT: from a folder or an embedded table. */
static lg_status open_bundle(lg_ctx *c, const lg_ctx_opts *opts)
{
	if (opts->bundle && opts->aot)
		return lg_fail(LG_ERR_INVALID_ARG, "lg_ctx_create: give a bundle folder or an embedded table, not both");
	return opts->bundle ? lg_bundle_open(opts->bundle, &c->bundle) : lg_bundle_from_aot(opts->aot, &c->bundle);
}

lg_status lg_ctx_create(const lg_ctx_opts *opts, lg_ctx **out)
{
	lg_clear_error();
	if (!out)
		return lg_fail(LG_ERR_INVALID_ARG, "lg_ctx_create: out must not be NULL");
	*out = NULL;
	const char *arch = opts && opts->arch ? opts->arch : lg_env_get(LG_ENV_ARCH);
	char detected[16];
	if (!arch) {
		lg_status st = lg_cu_device_arch(detected);
		if (st != LG_OK) {
			lg_fail_append("\n(no target arch given, and none detected: give the context one "
				       "(lg_ctx_opts.arch, the arch argument of lingen.Context, --arch of the "
				       "commands that take it) or set LINGEN_ARCH, e.g. sm_90a)");
			return st;
		}
		arch = detected;
	}
	lg_ctx *c = calloc(1, sizeof *c);
	if (!c)
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory creating a context");
	if (!lg_target_parse(arch, &c->target)) {
		free(c);
		return lg_fail(LG_ERR_INVALID_ARG, "unknown arch '%s': expected sm_<NN> with NN >= 80 or sm_<NN>a with NN >= 90, e.g. sm_90a",
			       arch);
	}
	if (opts && (opts->bundle || opts->aot)) {
		/* a bundle's kernels were planned (and tuned) when it was built */
		lg_status st = open_bundle(c, opts);
		if (st != LG_OK) {
			free(c);
			return st;
		}
	} else {
		const char *tuning = opts && opts->tuning ? opts->tuning : lg_env_get(LG_ENV_TUNING);
		lg_status tst = lg_tuning_open(tuning, c->target.name, &c->tuning);
		if (tst != LG_OK) {
			free(c);
			return tst;
		}
		c->cache = lg_cache_open(opts ? opts->cache_dir : NULL, 0);
	}
	if (!c->bundle && !c->cache) {
		lg_tuning_free(c->tuning);
		free(c);
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory opening the cache");
	}
	pthread_mutex_init(&c->mu, NULL);
	*out = c;
	return LG_OK;
}

static void entry_free(struct lg_ctx_entry *e)
{
	if (!e)
		return;
	if (e->kernel) {
		if (e->kernel->lib)
			e->kernel->cu->cuLibraryUnload(e->kernel->lib);
		free(e->kernel);
	}
	free(e->canon);
	lg_blob_release(&e->cubin_own);
	free(e);
}

void lg_ctx_destroy(lg_ctx *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++)
		entry_free(c->entries[i]);
	free(c->entries);
	if (c->linked)
		c->linked_cu->cuLibraryUnload(c->linked);
	lg_cache_close(c->cache);
	lg_bundle_free(c->bundle); /* after the entries and the linked module: their cubins may be in it */
	lg_tuning_free(c->tuning);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

const char *lg_ctx_arch(const lg_ctx *c) { return c ? c->target.name : ""; }

static struct lg_ctx_entry *find(lg_ctx *c, const char *canon)
{
	for (size_t i = 0; i < c->n; i++)
		if (strcmp(c->entries[i]->canon, canon) == 0)
			return c->entries[i];
	return NULL;
}

/* A new entry owning canon; NULL when out of memory (canon freed, the error
 * set). Callers read the key through the entry from then on: canon is no
 * longer theirs. */
static struct lg_ctx_entry *entry_new(char *canon)
{
	struct lg_ctx_entry *e = calloc(1, sizeof *e);
	if (!e) {
		free(canon);
		lg_fail(LG_ERR_NO_MEMORY, "out of memory");
		return NULL;
	}
	e->canon = canon;
	return e;
}

/* An entry from the context's bundle: its cubin and stored plan; called
 * unlocked. Never generates or compiles. */
static lg_status bundle_entry(lg_ctx *c, const struct lg_spec *s, char *canon,
			      struct lg_ctx_entry **out)
{
	double t0 = lg_now();
	struct lg_ctx_entry *e = entry_new(canon);
	if (!e)
		return LG_ERR_NO_MEMORY;
	lg_status st = lg_bundle_get(c->bundle, s, e->canon, &c->target, &e->plan, &e->cubin, &e->cubin_size,
				     &e->cubin_own);
	if (st != LG_OK) {
		entry_free(e);
		return st;
	}
	lg_log("bundle: %s %s (read %.3f ms)", s->entry, c->target.name, (lg_now() - t0) * 1e3);
	*out = e;
	return LG_OK;
}

lg_status lg_ctx_resolve(const lg_ctx *c, const struct lg_spec *s, struct lg_spec *out)
{
	return lg_tuning_apply(c->tuning, s, out);
}

/* NVRTC's version for this context's cache keys, found once a context: a
 * warm cache needs no NVRTC (its version is recorded in the folder), and
 * the folder's record is read once, not once a kernel. */
static lg_status key_version(lg_ctx *c, int *major, int *minor)
{
	pthread_mutex_lock(&c->mu);
	lg_status st = LG_OK;
	if (!c->nvrtc_known) {
		char lib[1024];
		int ma = 0, mi = 0;
		if (lg_nvrtc_loaded(lib, sizeof lib) || !lg_cache_nvrtc_get(c->cache, &ma, &mi)) {
			st = lg_nvrtc_version(&ma, &mi);
			if (st == LG_OK) {
				lg_nvrtc_loaded(lib, sizeof lib);
				lg_cache_nvrtc_put(c->cache, ma, mi, lib);
			}
		}
		c->nvrtc_major = ma;
		c->nvrtc_minor = mi;
		c->nvrtc_known = st == LG_OK;
	}
	*major = c->nvrtc_major;
	*minor = c->nvrtc_minor;
	pthread_mutex_unlock(&c->mu);
	return st;
}

/* The disk-cache key of a resolved spec: the generator's identity and the
 * resolved canonical spec stand for the source they deterministically give
 * (cmake/genid.cmake), so a hit needs no generation. canon: the resolved
 * spec's canonical JSON when the caller has it, else NULL. relocatable: the
 * key of its relocatable compile (the options end in LG_NVRTC_RDC). */
static lg_status key_of(lg_ctx *c, const struct lg_spec *s, const char *canon, bool relocatable,
			uint8_t key[LG_KEY_BYTES])
{
	int major = 0, minor = 0;
	lg_status st = key_version(c, &major, &minor);
	if (st != LG_OK)
		return st;
	lg_buf b;
	lg_buf_init(&b);
	char *json = canon ? NULL : lg_spec_to_json(s);
	const char *text = canon ? canon : json;
	if (text)
		lg_emit(&b, "lingen generator %s\n%s", lg_generator_id, text);
	free(json);
	size_t len = 0;
	char *ident = text ? lg_buf_finish(&b, &len) : (lg_buf_free(&b), NULL);
	if (!ident)
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory");
	int nopts = 0;
	const char *const *base = lg_nvrtc_options(c->target.name, major, minor, &nopts);
	if (!base) {
		free(ident);
		return LG_ERR_INVALID_ARG; /* LINGEN_NVRTC_OPTIONS (said) */
	}
	const char *opts[LG_NVRTC_MAX_OPTIONS + 1];
	LG_ASSERT(nopts <= LG_NVRTC_MAX_OPTIONS);
	memcpy(opts, base, (size_t)nopts * sizeof *opts);
	if (relocatable)
		opts[nopts++] = LG_NVRTC_RDC;
	lg_cache_key(c->target.name, ident, len, opts, nopts, major, minor, key);
	free(ident);
	return LG_OK;
}

/* The cubin of resolved spec s planned as p, from the disk cache or
 * generated and compiled (then stored): the loadable one, its SASS
 * rewritten as the plan says, or with relocatable set the relocatable one
 * (lg_nvrtc_compile_relocatable). canon: s's canonical JSON when the caller
 * has it (key_of). *own holds the memory (blob.h). */
static lg_status cubin_of(lg_ctx *c, const struct lg_spec *s, const struct lg_plan *p, const char *canon,
			  bool relocatable, struct lg_blob *own, const void **cubin, size_t *size)
{
	double t0 = lg_now();
	uint8_t key[LG_KEY_BYTES];
	lg_status st = key_of(c, s, canon, relocatable, key);
	if (st != LG_OK)
		return st;
	const char *what = relocatable ? " (relocatable)" : "";
	if (lg_cache_get(c->cache, key, own, cubin, size)) {
		lg_log("cache hit: %s %s%s (plan + key + read %.3f ms)", s->entry, c->target.name, what,
		       (lg_now() - t0) * 1e3);
		return LG_OK;
	}
	char *src = NULL;
	st = lg_generate_planned(s, &c->target, p, &src, NULL);
	double t1 = lg_now();
	void *bin = NULL;
	if (st == LG_OK)
		st = relocatable ? lg_nvrtc_compile_relocatable(src, s->entry, c->target.name, &bin, size)
				 : lg_nvrtc_compile(src, s->entry, c->target.name, &bin, size, NULL);
	*own = lg_blob_heap(bin);
	if (st == LG_OK && !relocatable && p->sass_ffma)
		st = lg_sass_ffma_yield(bin, *size, p->sass_ffma, NULL);
	free(src);
	if (st != LG_OK) {
		lg_blob_release(own);
		return st;
	}
	*cubin = bin;
	lg_cache_put(c->cache, key, s->entry, c->target.name, bin, *size);
	lg_log("cache miss: %s %s%s (generate %.3f ms, compile %.1f ms)", s->entry, c->target.name, what,
	       (t1 - t0) * 1e3, (lg_now() - t1) * 1e3);
	return LG_OK;
}

/* Plan, then take the cubin from the disk cache or generate and compile it;
 * called unlocked. canon: the user's spec (the memory-cache key); the plan
 * and source are made from the resolved spec (tuning.h precedence). */
static lg_status build_entry(lg_ctx *c, const struct lg_spec *user, char *canon,
			     struct lg_ctx_entry **out)
{
	if (c->bundle)
		return bundle_entry(c, user, canon, out);
	struct lg_ctx_entry *e = entry_new(canon);
	if (!e)
		return LG_ERR_NO_MEMORY;
	struct lg_spec resolved;
	lg_status st = lg_ctx_resolve(c, user, &resolved);
	if (st == LG_OK)
		st = lg_plan_for(&resolved, &c->target, &e->plan);
	/* untuned (the resolved spec is the user's): the key's spec text is canon */
	if (st == LG_OK)
		st = cubin_of(c, &resolved, &e->plan, memcmp(&resolved, user, sizeof resolved) == 0 ? e->canon : NULL,
			      false, &e->cubin_own, &e->cubin, &e->cubin_size);
	if (st != LG_OK) {
		entry_free(e);
		return st;
	}
	*out = e;
	return LG_OK;
}

lg_status lg_ctx_relocatable(lg_ctx *c, const lg_spec *s, struct lg_blob *own, const void **cubin, size_t *size)
{
	*own = (struct lg_blob){0};
	if (c->bundle)
		return lg_fail(LG_ERR_INVALID_ARG, "lg_ctx_relocatable: a context on a bundle compiles nothing");
	struct lg_spec resolved;
	struct lg_plan p;
	lg_status st = lg_ctx_resolve(c, s, &resolved);
	if (st == LG_OK)
		st = lg_plan_for(&resolved, &c->target, &p);
	if (st == LG_OK)
		st = cubin_of(c, &resolved, &p, NULL, true, own, cubin, size);
	return st;
}

/* The entry of a spec, compiled if needed. Thread-safe: two threads asking
 * for the same new spec may both compile it; the first stored wins. */
static lg_status get_entry(lg_ctx *c, const lg_spec *s, struct lg_ctx_entry **out)
{
	char *canon = lg_spec_to_json(s);
	if (!canon)
		return lg_fail(LG_ERR_NO_MEMORY, "out of memory");
	pthread_mutex_lock(&c->mu);
	struct lg_ctx_entry *e = find(c, canon);
	pthread_mutex_unlock(&c->mu);
	if (e) {
		free(canon);
		*out = e;
		return LG_OK;
	}
	struct lg_ctx_entry *fresh = NULL;
	lg_status st = build_entry(c, s, canon, &fresh);
	if (st != LG_OK)
		return st;
	pthread_mutex_lock(&c->mu);
	e = find(c, fresh->canon);
	if (!e) {
		if (c->n == c->cap) {
			size_t cap = c->cap ? 2 * c->cap : 16;
			struct lg_ctx_entry **p = realloc(c->entries, cap * sizeof *p);
			if (!p) {
				pthread_mutex_unlock(&c->mu);
				entry_free(fresh);
				return lg_fail(LG_ERR_NO_MEMORY, "out of memory");
			}
			c->entries = p;
			c->cap = cap;
		}
		c->entries[c->n++] = e = fresh;
		fresh = NULL;
	}
	pthread_mutex_unlock(&c->mu);
	entry_free(fresh);
	*out = e;
	return LG_OK;
}

lg_status lg_ctx_plan(lg_ctx *c, const lg_spec *s, struct lg_plan *out)
{
	struct lg_ctx_entry *e;
	lg_status st = get_entry(c, s, &e);
	if (st == LG_OK)
		*out = e->plan;
	return st;
}

lg_status lg_ctx_cubin(lg_ctx *c, const lg_spec *s, const void **cubin, size_t *size)
{
	lg_clear_error();
	if (!c || !s || !cubin || !size)
		return lg_fail(LG_ERR_INVALID_ARG, "lg_ctx_cubin: arguments must not be NULL");
	struct lg_ctx_entry *e;
	lg_status st = get_entry(c, s, &e);
	if (st != LG_OK)
		return st;
	*cubin = e->cubin;
	*size = e->cubin_size;
	return LG_OK;
}

/* How many CTAs (or clusters, for clustered entries: `cluster` CTAs a
 * compile-time cluster, plan.cluster, above 1) of a persistent entry are
 * co-resident on the current device, at most per_sm CTAs an SM when
 * per_sm is not 0 (plan.per_sm). Whether the entry is clustered is the
 * plan's word, not the geometry's: a grid of more than one CTA at one token
 * (a pipelined dispatch's 1 + 256 CTAs) taken for a cluster gave
 * a grid of one CTA, 13.2 ms at its target on the H200). */
static lg_status query_resident(const struct lg_cu *cu, CUkernel kern, const struct lg_launch_dim *d,
				unsigned cluster, unsigned per_sm, unsigned *out)
{
	CUfunction fn;
	LG_CU_TRY(cu, cuKernelGetFunction, (&fn, kern));
	int n = 0;
	if (cluster > 1) { /* a compile-time cluster of `cluster` CTAs */
		CUlaunchConfig cfg = {.gridDimX = cluster, .gridDimY = 1, .gridDimZ = 1,
				      .blockDimX = d->block[0], .blockDimY = d->block[1],
				      .blockDimZ = d->block[2], .sharedMemBytes = d->smem};
		LG_CU_TRY(cu, cuOccupancyMaxActiveClusters, (&n, fn, &cfg));
	} else {
		CUdevice dev;
		int sms = 0;
		LG_CU_TRY(cu, cuCtxGetDevice, (&dev));
		LG_CU_TRY(cu, cuDeviceGetAttribute, (&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
		LG_CU_TRY(cu, cuOccupancyMaxActiveBlocksPerMultiprocessor,
			  (&n, fn, (int)(d->block[0] * d->block[1] * d->block[2]), d->smem));
		if (per_sm && n > (int)per_sm)
			n = (int)per_sm;
		n *= sms;
	}
	*out = n > 0 ? (unsigned)n : 1;
	return LG_OK;
}

/* Load a cubin as a library. The entry (its blob: a buffer, or a mapped
 * cache entry) or the context's bundle (its table or mapped cubin file,
 * freed after every entry and the linked module) keeps the cubin until
 * after cuLibraryUnload (entry_free, lg_ctx_destroy): the driver may use it
 * in place instead of copying it (a hint; a driver that refuses the option
 * gets the plain call). */
static lg_status load_library(const struct lg_cu *cu, const void *cubin, CUlibrary *lib)
{
	CUlibraryOption keep = CU_LIBRARY_BINARY_IS_PRESERVED;
	void *yes = (void *)(uintptr_t)1;
	if (cu->cuLibraryLoadData(lib, cubin, NULL, NULL, 0, &keep, &yes, 1) != CUDA_SUCCESS)
		LG_CU_TRY(cu, cuLibraryLoadData, (lib, cubin, NULL, NULL, 0, NULL, NULL, 0));
	return LG_OK;
}

/* The context's linked module when the kernel `entry` is in it: loaded
 * (its checksum checked first) by the first such kernel; NULL when the
 * bundle has none for the arch, the kernel is not in it, or it could not
 * be loaded (said once: its kernels are then loaded alone). Under c->mu. */
static CUlibrary linked_module(lg_ctx *c, const struct lg_cu *cu, const char *entry)
{
	if (!c->bundle || c->linked_state < 0 || !lg_bundle_in_linked(c->bundle, entry, c->target.name))
		return NULL;
	if (c->linked_state == 0) {
		double t0 = lg_now();
		const void *cubin = NULL;
		size_t size = 0;
		lg_status st = lg_bundle_linked(c->bundle, &c->target, &cubin, &size);
		if (st == LG_OK)
			st = load_library(cu, cubin, &c->linked);
		c->linked_state = st == LG_OK ? 1 : -1;
		if (st == LG_OK) {
			c->linked_cu = cu;
			lg_log("linked module for %s: %zu bytes loaded (%.3f ms)", c->target.name, size,
			       (lg_now() - t0) * 1e3);
		} else {
			c->linked = NULL;
			lg_warn("cannot use the linked module: %s; its kernels are loaded one by one", lg_last_error());
			lg_clear_error();
		}
	}
	return c->linked_state > 0 ? c->linked : NULL;
}

/* Resolve the entry points of k's plan in lib; raise the dynamic shared
 * memory limit on every device where an entry needs more than 32 KB (the
 * default is 48 KB less the static), and size the grids of persistent
 * entries for the current device. */
static lg_status entry_points(const struct lg_cu *cu, const struct lg_ctx_entry *e, const struct lg_spec *s,
			      CUlibrary lib, struct lg_kernel *k)
{
	const struct lg_family *f = s->fam;
	int64_t one[LG_MAX_SIZES];
	lg_sizes_at(f, s->pass, 1, one);
	int ndev = 0;
	LG_CU_TRY(cu, cuDeviceGetCount, (&ndev));
	for (int i = 0; i < e->plan.nentries; i++) {
		LG_CU_TRY(cu, cuLibraryGetKernel, (&k->fn[i], lib, e->plan.entry[i]));
		struct lg_launch_dim d;
		f->geometry(&e->plan, i, one, &d);
		/* the default dynamic limit is 48 KB less the static shared memory:
		 * raise it for any entry within 16 KB of that (a ring of 48 KB
		 * plus a reduction scratch would otherwise not launch) */
		if (d.smem > 32 * 1024)
			for (int dev = 0; dev < ndev; dev++)
				LG_CU_TRY(cu, cuKernelSetAttribute,
					  (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)d.smem,
					   k->fn[i], dev));
		if (e->plan.cluster[i] > 8)
			for (int dev = 0; dev < ndev; dev++)
				LG_CU_TRY(cu, cuKernelSetAttribute,
					  (CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1, k->fn[i], dev));
		if (e->plan.persistent[i]) {
			lg_status st = query_resident(cu, k->fn[i], &d, e->plan.cluster[i], e->plan.per_sm[i],
						      &k->plan.resident[i]);
			if (st != LG_OK)
				return st;
			if (e->plan.cluster[i] > 1)
				lg_log("%s: %u clusters of %u CTAs co-resident", e->plan.entry[i], k->plan.resident[i],
				       e->plan.cluster[i]);
			else
				lg_log("%s: %u CTAs co-resident", e->plan.entry[i], k->plan.resident[i]);
		}
	}
	return LG_OK;
}

/* Fill k from entry e: its launch data, and its entry points from the
 * context's linked module when the kernel is in it (k->lib NULL), else
 * from its own cubin loaded as a library (k->lib, unloaded by entry_free).
 * Under c->mu. */
static lg_status load(lg_ctx *c, const struct lg_ctx_entry *e, const struct lg_spec *s, struct lg_kernel *k,
		      double *lib_ms)
{
	const struct lg_family *f = s->fam;
	const struct lg_cu *cu;
	lg_status st = lg_cu_get(&cu);
	if (st == LG_OK)
		st = lg_cu_ensure_context(0);
	if (st != LG_OK)
		return st;
	k->cu = cu;
	k->fam = f;
	k->sig = &f->sig[s->pass];
	k->plan = e->plan;
	k->spec = *s;
	LG_ASSERT(k->sig->nargs >= 0 && k->sig->nargs <= LG_MAX_ARGS && k->sig->nsizes >= 0 &&
		  k->sig->nsizes <= LG_MAX_SIZES);
	k->nargs = k->sig->nargs;
	k->nsizes = k->sig->nsizes;
	k->workspace = f->workspace ? f->workspace(&e->plan) : 0;
	for (int i = 0; i < k->nargs && i < LG_MAX_ARGS; i++) {
		enum lg_arg_role role = k->sig->args[i].role;
		k->need[i] = e->plan.used[i] == LG_ARG_REQUIRED ||
			     (e->plan.used[i] && (role == LG_ARG_IN || role == LG_ARG_OUT || role == LG_ARG_LIST ||
						  (role == LG_ARG_WORKSPACE && k->workspace > 0)));
		k->align[i] = (unsigned)k->sig->args[i].align;
		int j = lg_arg_needs(e->plan.used[i]);
		LG_ASSERT(j < k->nargs);
		k->with[i] = (signed char)j;
	}
	const char *pdl = lg_env_get(LG_ENV_PDL);
	k->early = !(pdl && strcmp(pdl, "0") == 0);
	static _Atomic uint64_t next_id = 1;
	k->id = next_id++;
	double t0 = lg_now();
	CUlibrary linked = linked_module(c, cu, s->entry);
	if (linked) {
		*lib_ms = (lg_now() - t0) * 1e3;
		if (entry_points(cu, e, s, linked, k) == LG_OK)
			return LG_OK;
		lg_warn("%s: not taken from the linked module (%s); loading its own cubin", s->entry, lg_last_error());
		lg_clear_error();
		t0 = lg_now();
	}
	st = load_library(cu, e->cubin, &k->lib);
	*lib_ms = (lg_now() - t0) * 1e3;
	return st == LG_OK ? entry_points(cu, e, s, k->lib, k) : st;
}

lg_status lg_kernel_get(lg_ctx *c, const lg_spec *s, lg_kernel **out)
{
	lg_clear_error();
	if (!c || !s || !out)
		return lg_fail(LG_ERR_INVALID_ARG, "lg_kernel_get: arguments must not be NULL");
	struct lg_ctx_entry *e;
	lg_status st = get_entry(c, s, &e);
	if (st != LG_OK)
		return st;
	pthread_mutex_lock(&c->mu);
	if (!e->kernel) {
		double t0 = lg_now();
		struct lg_kernel *k = calloc(1, sizeof *k);
		double lib_ms = 0;
		st = k ? load(c, e, s, k, &lib_ms) : lg_fail(LG_ERR_NO_MEMORY, "out of memory");
		if (st == LG_OK) {
			e->kernel = k;
			double ms = (lg_now() - t0) * 1e3;
			lg_log("loaded %s (%.3f ms: %s %.3f, entry points and attributes %.3f)", s->entry, ms,
			       k->lib ? "cuLibraryLoadData" : "the linked module", lib_ms, ms - lib_ms);
		} else if (k) {
			if (k->lib)
				k->cu->cuLibraryUnload(k->lib);
			free(k);
		}
	}
	*out = e->kernel;
	pthread_mutex_unlock(&c->mu);
	return st;
}

size_t lg_kernel_workspace_size(const lg_kernel *k) { return k ? k->workspace : 0; }
