/*
 * bundle.h - deployment bundles: pre-built cubins looked up by spec and arch
 * instead of the JIT (no NVRTC, no disk cache).
 *
 * A bundle comes from a folder written by `lingen build` (index.lgb and
 * cubins.lgc, bundle_pack.h; manifest.json + <entry>.<arch>.cubin) or from
 * a table embedded by `lingen aot` (struct lg_aot_table, include/lingen.h). Both give the same items: canonical spec,
 * entry, arch, cubin (file or bytes), size, XXH3-64 checksum and the launch
 * plan the cubin was generated with; an index of format 3 adds a linked
 * module per arch (lg_bundle_linked). The manifest layout is documented at
 * the top of bundle.c, beside its reader, the index's at the top of
 * bundle_index.c, the cubin file's in bundle_pack.h; the writers (tools/cmd_build.c,
 * tools/cmd_aot.c) use lg_plan_to_json below.
 */
#ifndef LG_RUNTIME_BUNDLE_H
#define LG_RUNTIME_BUNDLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "blob.h"
#include "family.h"
#include "lingen.h"

/* Version of manifest.json and of struct lg_aot_table (LG_AOT_FORMAT). */
#define LG_MANIFEST_FORMAT 3
/* Version of index.lgb, the bundle's index (bundle_index.c); formats 1
 * (no cubin file), 2 (no linked module) and 3 are read. */
#define LG_INDEX_FORMAT 3
/* The most cubins a bundle holds (records of "kernels"), and archs. */
#define LG_BUNDLE_MAX_ITEMS 16384
#define LG_BUNDLE_MAX_ARCHS 16

typedef struct lg_bundle lg_bundle;

/* Open the bundle in folder dir: read index.lgb and map the cubin file it
 * names, or without an index read and check manifest.json (the cubins'
 * own files are then read on lookup). LG_ERR_IO for a missing or unreadable
 * manifest, LG_ERR_SPEC for one that does not parse or has the wrong format.
 * The caller frees *out with lg_bundle_free. */
lg_status lg_bundle_open(const char *dir, lg_bundle **out);
/* The same over a table embedded by `lingen aot` (not copied: it must
 * outlive the bundle, as static data does). */
lg_status lg_bundle_from_aot(const struct lg_aot_table *t, lg_bundle **out);
void lg_bundle_free(lg_bundle *b);

/* The cubin and plan of spec s (its canonical JSON `canon`) for target t.
 * *cubin points into the bundle (an embedded table, or the mapped cubin
 * file of an index of format 2), valid until lg_bundle_free, with *owned
 * empty; or it was read from its own file (manifest bundles, index format
 * 1) into *owned, a malloc'd blob at the same pointer (the caller releases
 * it, blob.h). A kernel not in the bundle is
 * LG_ERR_MISSING naming the entry, the arch and the bundle; a record of the
 * index whose plan is not the one this lingen makes is LG_ERR_SPEC; a cubin
 * that cannot be read or fails its checksum is LG_ERR_IO. Thread-safe. */
lg_status lg_bundle_get(const lg_bundle *b, const struct lg_spec *s, const char *canon, const struct lg_target *t,
			struct lg_plan *plan, const void **cubin, size_t *size, struct lg_blob *owned);

/* The linked module of the bundle for target t (index format 3: the
 * kernels' relocatable cubins linked into one, lingen build), checked
 * against its recorded checksum: *cubin points into the bundle's mapped
 * cubin file, valid until lg_bundle_free. LG_ERR_MISSING when the bundle
 * has none for t, LG_ERR_IO naming the bundle when it fails its checksum.
 * Thread-safe. */
lg_status lg_bundle_linked(const lg_bundle *b, const struct lg_target *t, const void **cubin, size_t *size);
/* Whether the kernel `entry` for `arch` is in the bundle's linked module
 * for that arch (false when either is not in the bundle). */
bool lg_bundle_in_linked(const lg_bundle *b, const char *entry, const char *arch);
/* The checksum of a linked module: XXH3-64 of its bytes, seeded as
 * lg_bundle_checksum's with the spec "linked module", entry "" and given
 * tile "" (no kernel's record seeds it so). */
uint64_t lg_bundle_linked_checksum(const char *arch, const void *cubin, size_t size);

/* The checksum a manifest or aot table records for a cubin: XXH3-64 of
 * its bytes, seeded with the XXH3-64 of
 * "<canonical spec>\0<entry>\0<arch>\0<given>\0" (given: the plan's "given"
 * tile as lg_plan_given_json prints it), so a cubin moved to another
 * kernel's or arch's record, or a record given another tile (whose plan
 * would launch the cubin with another geometry), fails it. */
uint64_t lg_bundle_checksum(const char *canon, const char *entry, const char *arch, const char *given,
			    const void *cubin, size_t size);
/* The "given" tile of a plan as unformatted JSON ({} for a heuristic
 * plan); malloc'd, NULL on allocation failure. */
char *lg_plan_given_json(const struct lg_spec *s, const struct lg_plan *p);

/* The plan digest index.lgb records: XXH3-64 over every field of the plan
 * that lg_plan_to_json writes (given and chosen tile, used arguments, each
 * entry point's name and geometry, tensor maps), and the FFMA rewrite, as
 * fixed-width integers and length-prefixed strings. */
uint64_t lg_plan_digest(const struct lg_spec *s, const struct lg_plan *p);

/* The plan as the manifest stores it: tile, args, aux, and per entry point
 * its name and launch geometry (block, dynamic smem, cluster, persistent,
 * the grid at 1 and 8192 tokens). NULL on allocation failure. */
cJSON *lg_plan_to_json(const struct lg_spec *s, const struct lg_plan *p);

#endif
