/*
 * bundle_impl.h - what the bundle readers share (bundle.c: the manifest,
 * embedded tables and lookups; bundle_index.c: index.lgb and the cubin
 * file): a bundle's items, its table by entry x arch, and the checks every
 * format makes. Not part of bundle.h's interface.
 */
#ifndef LG_RUNTIME_BUNDLE_IMPL_H
#define LG_RUNTIME_BUNDLE_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "bundle.h"
#include "bundle_pack.h"

#define WHERE_MAX 4352 /* "<path>: kernels[i]" in messages */

struct item {
	char *canon;                /* canonical spec JSON */
	char *entry, *arch;
	char *given;                /* the plan's "given" tile as JSON text */
	char *file;                 /* folder bundles: path of the cubin */
	const unsigned char *data;  /* embedded tables and mapped cubin files: the cubin */
	size_t size;
	uint64_t checksum;
	struct lg_plan plan;        /* the manifest's and tables': checked when opened */
	uint64_t digest;            /* the index's: the plan checked when asked for */
	bool indexed;               /* from index.lgb: strings point into lg_bundle.index */
	bool linked;                /* in its arch's linked module (index format 3) */
};

/* A linked module of an index of format 3: the kernels' relocatable cubins
 * of one arch linked into one, inside the mapped cubin file. */
struct linked {
	const char *arch; /* into lg_bundle.index */
	const unsigned char *data;
	size_t size;
	uint64_t checksum;
};

struct lg_bundle {
	char *where;   /* "bundle /path" or "the embedded bundle (lingen aot)" */
	struct item *items;
	size_t n;
	size_t *slot;    /* open addressing on entry x arch: item index + 1, 0 empty */
	size_t nslot;    /* a power of two, at least twice n */
	size_t nkernels; /* distinct entries */
	char archs[160]; /* "sm_90a, sm_80" */
	cJSON *skipped;  /* the manifest's "skipped" (entry, arch, why), NULL if none */
	char *index;     /* index.lgb's text, its lines cut at the tabs, when read */
	struct lg_pack pack; /* the cubin file index.lgb names, mapped (format 2) */
	struct linked linked[LG_BUNDLE_MAX_ARCHS]; /* format 3: at most one an arch */
	int nlinked;
};

/* Room for n items: the items and a table at most half full. */
lg_status lg_bundle_alloc(lg_bundle *b, size_t n, const char *where);
/* Put item i in the table; a second record of the same entry and arch is
 * refused (LG_ERR_SPEC naming where). */
lg_status lg_bundle_add(lg_bundle *b, size_t i, const char *where);
/* The versions a bundle records: of this lingen, and of an NVRTC. */
lg_status lg_bundle_check_versions(const char *where, const char *lingen, const char *nvrtc);

/* Read dir/index.lgb into b when the bundle has one (*found false when
 * not, b untouched), mapping the cubin file it names (bundle_index.c). */
lg_status lg_bundle_open_index(lg_bundle *b, const char *dir, bool *found);

#endif
