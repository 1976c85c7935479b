/*
 * tuning.h - tuning files: the tile each kernel should use on one arch,
 * measured by `lingen tune` and kept in configs/tuning/<arch>.json.
 *
 *   {"arch": "sm_90a", "made_by": "lingen tune ...", "device": "NVIDIA H200",
 *    "date": "2026-12-01",
 *    "entries": [{"key": {<a kernel spec without "tile">},
 *                 "tile": {"threads": 256}, "us": 35.1, "us_default": 35.4}]}
 *
 * "arch" and "entries" are required; "made_by", "device", "date" (strings)
 * and each entry's "us" and "us_default" (microseconds, >= 0) are records.
 * An entry's key is matched by the canonical JSON of a spec with no tile;
 * its tile must be accepted by the family (keys, validate(), plan() for the
 * file's arch). Unknown keys, a second entry for one key and a file whose
 * name (<arch>.json) disagrees with its "arch" are errors; every message
 * names the file, the JSON path, what was found and what is allowed.
 *
 * Precedence where a kernel is planned (runtime/context.c): a spec that
 * gives a tile (any key) is planned as given; else the tuning entry for its
 * key; else the family heuristic.
 */
#ifndef LG_TUNING_H
#define LG_TUNING_H

#include <stdbool.h>
#include <stddef.h>

#include "family.h"

struct lg_tuning_entry {
	char *key;                 /* canonical spec JSON without tile */
	struct lg_spec spec;       /* the key as a spec (no tile) */
	struct lg_tile_choice tile;
	double us, us_default;     /* microseconds; negative when absent */
};

struct lg_tuning {
	char arch[16];
	char *made_by, *device, *date; /* NULL when absent */
	char *file;                    /* where it was read from; NULL if made here */
	size_t n, cap;
	struct lg_tuning_entry *e;     /* sorted by key when written */
};

/* An empty table for an arch. The caller frees *out with lg_tuning_free. */
lg_status lg_tuning_create(const char *arch, struct lg_tuning **out);
void lg_tuning_free(struct lg_tuning *t);

/* Parse a tuning file held in memory; `file` names it in messages (and, when
 * its base name is <arch>.json, must agree with "arch"). */
lg_status lg_tuning_parse(const char *text, size_t len, const char *file, struct lg_tuning **out);
/* Read and parse a file. arch (may be NULL) is the arch it must be for.
 * A missing file gives *out = NULL and LG_OK when missing_ok. */
lg_status lg_tuning_load(const char *path, const char *arch, bool missing_ok,
			 struct lg_tuning **out);

/* The table a context uses for arch, from `setting` (lg_ctx_opts.tuning,
 * else $LINGEN_TUNING; may be NULL):
 *   "off"       none (*out = NULL);
 *   a folder    <folder>/<arch>.json, none if that file is missing;
 *   a file      that file (it must exist and be for arch);
 *   NULL        <arch>.json in the source tree's configs/tuning, else in
 *               the installed share/lingen/tuning; none if neither has it.
 * A file that does not parse or validate is an error. */
lg_status lg_tuning_open(const char *setting, const char *arch, struct lg_tuning **out);

/* The entry for a spec's tile-less key, or NULL (also when t is NULL or out
 * of memory). */
const struct lg_tuning_entry *lg_tuning_find(const struct lg_tuning *t, const struct lg_spec *s);
/* The spec to plan for s: s itself when it gives a tile or has no entry,
 * else s with the entry's tile (entry name remade). */
lg_status lg_tuning_apply(const struct lg_tuning *t, const struct lg_spec *s, struct lg_spec *out);

/* Add or replace the entry for s's tile-less key. us_default < 0: absent. */
lg_status lg_tuning_set(struct lg_tuning *t, const struct lg_spec *s, const struct lg_tile_choice *c,
			double us, double us_default);
/* Drop the entry for s's tile-less key; true if there was one. */
bool lg_tuning_remove(struct lg_tuning *t, const struct lg_spec *s);
/* Replace a record field (made_by, device, date) with a copy of v. */
lg_status lg_tuning_note(char **field, const char *v);

/* The file text: fixed key order, entries sorted by key, one a line. The
 * caller frees the result with free(); NULL when out of memory. */
char *lg_tuning_to_json(const struct lg_tuning *t);

#endif
