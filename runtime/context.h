/*
 * context.h - internals of lg_ctx and lg_kernel shared by the runtime files
 * (context.c: JIT, cache and bundles; launch.c: the hot path).
 */
#ifndef LG_RUNTIME_CONTEXT_H
#define LG_RUNTIME_CONTEXT_H

#include <pthread.h>

#include "bundle.h"
#include "cache.h"
#include "cuda.h"
#include "family.h"
#include "tuning.h"

struct lg_kernel {
	const struct lg_family *fam;
	const struct lg_sig *sig;   /* the pass's sizes and arguments */
	const struct lg_cu *cu;     /* driver table, resolved at load */
	struct lg_plan plan;
	struct lg_spec spec;        /* shapes of the arguments, for launch errors */
	CUlibrary lib;
	CUkernel fn[LG_MAX_ENTRIES];
	size_t workspace;
	int nargs, nsizes;
	unsigned char need[LG_MAX_ARGS]; /* pointer i must not be 0 */
	signed char with[LG_MAX_ARGS];   /* pointer i, when not 0, needs pointer with[i] (-1: none) */
	unsigned align[LG_MAX_ARGS];     /* pointer i must be a multiple of this */
	bool early; /* programmatic dependent launch allowed ($LINGEN_PDL != 0) */
	uint64_t id; /* unique in the process (the launch's tensor map cache key) */
};

/* One spec known to a context: its source plan, cubin and loaded kernel. */
struct lg_ctx_entry {
	char *canon;            /* canonical spec JSON: the memory-cache key */
	struct lg_plan plan;
	const void *cubin;      /* inside cubin_own, or inside the context's bundle */
	struct lg_blob cubin_own; /* the cubin's memory when the entry owns it (blob.h: compiled, a
				   * mapped cache entry, a bundle's own cubin file); released with it */
	size_t cubin_size;
	struct lg_kernel *kernel; /* NULL until loaded */
};

struct lg_ctx {
	pthread_mutex_t mu;
	struct lg_target target;
	lg_cache *cache;   /* NULL with a bundle */
	lg_bundle *bundle; /* NULL: JIT */
	struct lg_tuning *tuning; /* tiles for target (tuning.h); NULL: heuristics */
	int nvrtc_major, nvrtc_minor; /* for cache keys, once known (under mu) */
	bool nvrtc_known;
	struct lg_ctx_entry **entries;
	size_t n, cap;
	/* The bundle's linked module for target (lg_bundle_linked), loaded by
	 * the first kernel asked for that is in it (under mu) and shared by all
	 * of them (their lg_kernel.lib NULL); unloaded by lg_ctx_destroy after
	 * the entries, before the bundle that holds its bytes. */
	CUlibrary linked;
	const struct lg_cu *linked_cu;
	int linked_state; /* 0: not tried; 1: loaded; -1: none or failed (kernels load alone) */
};

/* A launch through a typed launcher's resolved form (form.h; lingen_ops.c,
 * generated): the kernel checked against the form (op, pass, fixed keys;
 * a list's element types by the family's check_list), then lg_kernel_run
 * with the pass's sizes and pointers made from the launcher's (sizes,
 * ptrs: the form's parameters; list: its tensor list, or NULL). */
struct lg_launcher;
lg_status lg_kernel_run_form(const lg_kernel *k, lg_stream stream, const struct lg_launcher *l,
			     const int64_t *sizes, const lg_dptr *ptrs, const lg_tensor_list *list);

/* Encode tensor map m of k's plan for a launch at these sizes and pointers
 * (launch.c does at every launch; the launch benchmark's raw baseline once). */
lg_status lg_kernel_tmap(const lg_kernel *k, const struct lg_tmap_decl *m, const int64_t *sizes,
			 const lg_dptr *ptrs, CUtensorMap *out);

/* The plan of a spec for the context's arch, as its cubin was (or will be)
 * generated with: for `lingen build` and `lingen aot`, which record it. */
lg_status lg_ctx_plan(lg_ctx *c, const lg_spec *s, struct lg_plan *out);
/* The relocatable cubin of s for the context's arch (lg_nvrtc_compile_relocatable),
 * through the disk cache like the loadable one: for `lingen build`, which
 * links them into one module (jitlink.h). The SASS rewrite of the plan is
 * not made on it: the caller leaves kernels whose plan has one out of the
 * link. *own holds the memory (blob.h; the caller releases it). Not on a
 * context with a bundle. */
lg_status lg_ctx_relocatable(lg_ctx *c, const lg_spec *s, struct lg_blob *own, const void **cubin, size_t *size);
/* The spec the context plans for s: s when it gives a tile, else s with the
 * tile of its tuning entry, else s (the family heuristic). */
lg_status lg_ctx_resolve(const lg_ctx *c, const struct lg_spec *s, struct lg_spec *out);

#endif
