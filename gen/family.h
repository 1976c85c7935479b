/*
 * family.h - the interface every kernel family implements.
 *
 * Each family is one file gen/<family>.c exporting one `const struct
 * lg_family`, registered in the enum-indexed table of gen/registry.c. Its
 * plain-C reference sits beside it in gen/<family>_ref.c and is linked into
 * the tools and tests, not into the runtime library.
 *
 * Flow: the spec parser reads the common fields and checks the family's
 * declared needs (passes, dims, eps, quant, tile keys); the family's
 * validate() then checks the values. plan() resolves the tile (spec, else
 * heuristic) for a target; emit() writes the CUDA source; geometry() gives
 * the launch shape of each entry point for a token count.
 *
 * Calling convention of every generated entry point: all of the family's
 * pointer arguments (struct lg_family.args, in order; 0 for an output not
 * asked for) as `unsigned long long`, then `long long tokens`, then
 * `long long part` (struct lg_plan.part of the launch: which slice of the
 * tokens a launch of a multi-launch plan covers; 0 otherwise).
 */
#ifndef LG_FAMILY_H
#define LG_FAMILY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "spec.h"

#define LG_MAX_ARGS 12
#define LG_MAX_ENTRIES 8

/* The compile target, parsed from "sm_90a", "sm_80", ... */
struct lg_target {
	int sm;          /* 80, 89, 90, 100, ... */
	bool arch_specific; /* the "a" suffix */
	char name[16];   /* as given, e.g. "sm_90a" */
};
/* Parse an arch name; false if it is not of the form sm_<NN>[a] with NN >= 80. */
bool lg_target_parse(const char *name, struct lg_target *t);

/* How one family argument is used. */
enum lg_arg_role { LG_ARG_IN, LG_ARG_OUT, LG_ARG_OPT_IN, LG_ARG_WORKSPACE };
struct lg_arg {
	const char *name;     /* "x", "q", "st" */
	enum lg_arg_role role;
	const char *layout;   /* "[tokens, hidden] bf16": for --help and messages */
};

/* Resolved parameters of one kernel for one target: tile values (given or
 * heuristic) and the entry points. Filled by plan(); stored in the kernel
 * handle, so launches compute geometry from it without touching the spec. */
struct lg_plan {
	int tile[LG_TILE_COUNT];
	int nentries;
	char entry[LG_MAX_ENTRIES][160]; /* full entry-point names */
	int nargs;
	/* which arguments this spec uses: 1 required, 0 must be 0 */
	unsigned char used[LG_MAX_ARGS];
	int64_t hidden;    /* copies of the static dims geometry needs */
	int64_t aux[4];    /* family-private derived values */
	/* Persistent entry points size their grid by what is co-resident on
	 * the device: the context fills `resident` (CTAs, or clusters when the
	 * entry uses clusters) when it loads the kernel; 0 when not loaded. */
	bool persistent[LG_MAX_ENTRIES];
	unsigned resident[LG_MAX_ENTRIES];
	/* CTAs per compile-time cluster of each entry (0 or 1: none); above 8
	 * the context allows non-portable cluster sizes when loading. */
	unsigned cluster[LG_MAX_ENTRIES];
	/* Entry e (> 0) may be launched before entry e-1 has finished
	 * (programmatic dependent launch, sm_90+): it waits for it with
	 * griddepcontrol.wait before touching its results. */
	bool early[LG_MAX_ENTRIES];
	/* The `part` argument of each launch (see the calling convention). */
	int64_t part[LG_MAX_ENTRIES];
};

/* One tile variant worth sweeping (`lingen tune`): the tile keys set, as a
 * spec's "tile" would give them. */
struct lg_tile_choice {
	int tile[LG_TILE_COUNT];
	uint32_t set; /* bit (1u << lg_tile_key) for each key given */
};
#define LG_MAX_CANDIDATES 16

struct lg_launch_dim {
	unsigned grid[3], block[3];
	unsigned smem; /* dynamic shared memory bytes */
};

struct lg_family {
	const char *op;           /* "rmsnorm_quant" */
	const char *summary;      /* one line for --help */
	unsigned passes;          /* bit (1u << lg_pass) for each pass supported */
	unsigned dtypes;          /* bit (1u << lg_dtype) for each input dtype */
	uint32_t dims_required;   /* bits of lg_dim */
	bool has_eps;             /* takes "eps" (default 1e-6) */
	int quant;                /* 0: no "quant"; 1: "quant" required */
	uint32_t tile_keys;       /* bits of lg_tile_key accepted in "tile" */
	/* Family-specific value checks. On failure, return LG_ERR_SPEC through
	 * lg_spec_error(where, ...) naming the field. */
	lg_status (*validate)(const struct lg_spec *s, const char *where);
	/* Resolve the tile and entry points for a target. May fail when a
	 * spec-given tile does not fit the target. */
	lg_status (*plan)(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p);
	/* Write the source of every entry point (after the shared banner). */
	void (*emit)(lg_buf *b, const struct lg_spec *s, const struct lg_target *t,
		     const struct lg_plan *p);
	/* Launch shape of entry e for a token count (tokens >= 1). */
	void (*geometry)(const struct lg_plan *p, int e, int64_t tokens, struct lg_launch_dim *d);
	/* Device workspace bytes a launch needs (NULL: none). */
	size_t (*workspace)(const struct lg_plan *p);
	/* Minimum bytes moved for a token count (each input read once, each
	 * output written once): the bandwidth benchmarks' numerator. */
	double (*bytes)(const struct lg_spec *s, int64_t tokens);
	/* The tile variants worth sweeping for a spec (its own tile ignored)
	 * and target, at most max, each passing validate() and plan(); returns
	 * how many. NULL: nothing to tune. */
	int (*candidates)(const struct lg_spec *s, const struct lg_target *t,
			  struct lg_tile_choice *out, int max);
	/* Pointer arguments, in launch order, per pass. */
	int nargs[LG_PASS_COUNT];
	const struct lg_arg *args[LG_PASS_COUNT];
};

/* For candidates(): append c to out[0..n) if n < max and the spec with
 * tile c (replacing its own) passes the family's validate() and plan() for
 * t; returns the new count. Leaves no error message behind. */
int lg_candidate_add(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out,
		     int n, int max, struct lg_tile_choice c);
/* The spec s with tile c in place of its own, entry name remade. */
void lg_spec_with_tile(const struct lg_spec *s, const struct lg_tile_choice *c, struct lg_spec *out);

/* The registry: one entry per lg_op. */
const struct lg_family *lg_family_get(enum lg_op op);

/* A spec error from a family's validate(): "<where>.<field>: ..." */
lg_status lg_spec_error(const char *where, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Emit the banner every generated file starts with (generator version,
 * family, target, canonical spec, "generated, do not edit"), and the shared
 * preamble templates the family asks for. */
void lg_emit_banner(lg_buf *b, const struct lg_spec *s, const struct lg_target *t);

#endif
