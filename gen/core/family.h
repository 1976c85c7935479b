/*
 * family.h - the interface every kernel family implements.
 *
 * A family is its generator, gen/families/<family>.c, exporting one
 * `const struct lg_family lg_family_<family>` (a large one splits its
 * emitter into <family>_emit.c and a private header beside it); its
 * plain-C reference, gen/ref/<family>_ref.c, exporting `const struct
 * lg_ref_family lg_ref_<family>` (linked into the tools and tests, never
 * into the runtime library); one line in gen/core/families.h, from which
 * the op enum, the names and both registries are made; and its case table,
 * tests/cases/<family>.json. Code shared by several families (the FP8
 * quantiser, the GEMM emitters, the norm, SwiGLU, MoE and list pieces)
 * lives in gen/engines/; what every family uses (this interface, the spec
 * parser, the string builder, templates, tuning) in gen/core/.
 *
 * A family is declared, not coded, wherever it can be:
 *   - keys: its spec keys (name, type, range or allowed values, default,
 *     which are static shape, how they appear in entry names). The parser,
 *     canonical JSON, entry names, tuning files and `lingen help OP` read
 *     them; validate() only checks what spans several keys.
 *   - sig[pass]: per pass, its run-time sizes (tokens, ...: what a launch
 *     needs beyond pointers, with their ranges) and its pointer arguments
 *     (name, role, element type, shape as an expression over spec keys and
 *     run-time sizes, alignment). Launch checks, the check/bench harness
 *     (buffer sizes, bytes moved), bundle manifests and the Python package
 *     read them.
 * What remains is code: plan() resolves the tile (spec, else heuristic)
 * for a target; emit() writes the CUDA source; geometry() gives the launch
 * shape of each entry point for the run-time sizes; candidates() lists the
 * tiles worth tuning.
 *
 * Calling convention of every generated entry point (lg_emit_signature):
 * all of the pass's pointer arguments in order (0 for an output not asked
 * for) as `u64`, then each run-time size as `i64`, then `i64 part`
 * (struct lg_plan.part of the launch: which slice a launch of a
 * multi-launch plan covers; 0 otherwise).
 */
#ifndef LG_FAMILY_H
#define LG_FAMILY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "spec.h"

#define LG_MAX_ARGS 12
#define LG_MAX_SIZES 4
#define LG_MAX_ENTRIES 8
#define LG_PLAN_VALUES 20
#define LG_MAX_TMAPS 4

/* The compile target, parsed from "sm_90a", "sm_80", ... */
struct lg_target {
	int sm;             /* 80, 89, 90, 100, ... */
	bool arch_specific; /* the "a" suffix */
	char name[16];      /* as given, e.g. "sm_90a" */
};
/* Parse an arch name; false if it is not of the form sm_<NN>[a] with NN >= 80. */
bool lg_target_parse(const char *name, struct lg_target *t);

/* ------------------------------------------------------------ spec keys */

enum lg_key_type {
	LG_KEY_INT,    /* an integer in [min, max], a multiple of `multiple`, or one of `only` */
	LG_KEY_NUMBER, /* a number in the open interval (lo, hi) */
	LG_KEY_BOOL,
	LG_KEY_ENUM,   /* one of `values` */
	LG_KEY_OBJECT, /* an object holding the keys "<path>.<name>" declared after it */
};
enum {
	LG_KEY_REQUIRED = 1u, /* must be given (else: its default, or absent) */
	LG_KEY_SHAPE = 2u,    /* a static shape dimension */
};
/* How a key shows in the entry-point name ("lg_<op>_<pass>_<dtype>" and then
 * the named keys by rank; tile keys last, after "_t"). */
enum lg_key_naming { LG_NAME_NEVER, LG_NAME_ALWAYS, LG_NAME_IF_NOT_DEFAULT };

struct lg_key {
	const char *path;      /* "hidden", "eps", "quant", "quant.block", "tile.threads" */
	enum lg_key_type type;
	unsigned flags;        /* LG_KEY_REQUIRED, LG_KEY_SHAPE */
	int64_t min, max;      /* INT: the range */
	int64_t multiple;      /* INT: a multiple of this (0: any) */
	const int64_t *only;   /* INT: the allowed values, 0-terminated (NULL: the range) */
	double lo, hi;         /* NUMBER: the open interval */
	const char *const *values; /* ENUM: the names */
	int nvalues;
	bool has_def;          /* not given: the default (else absent) */
	int64_t def;           /* INT, BOOL, ENUM index */
	double def_num;        /* NUMBER */
	enum lg_key_naming naming;
	int rank;              /* order in the entry name (lower first) */
	const char *abbrev;    /* INT, NUMBER: prefix of the value in the name ("h": _h2048) */
	const char *const *words; /* ENUM, BOOL: the name's word per value (NULL: values) */
	const char *doc;       /* one line for `lingen help OP` */
};

/* Declaration helpers. Tile keys are optional, without default (the plan
 * chooses), and named after "_t" when given. */
#define LG_KEY_DIM(p, ab, lo_, hi_, mult, doc_)                                                \
	{.path = (p), .type = LG_KEY_INT, .flags = LG_KEY_REQUIRED | LG_KEY_SHAPE, .min = (lo_), \
	 .max = (hi_), .multiple = (mult), .naming = LG_NAME_ALWAYS, .rank = 10, .abbrev = (ab),   \
	 .doc = (doc_)}
#define LG_KEY_EPS                                                                              \
	{.path = "eps", .type = LG_KEY_NUMBER, .lo = 0.0, .hi = 1.0, .has_def = true,              \
	 .def_num = 1e-6, .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 30, .abbrev = "eps",            \
	 .doc = "RMSNorm epsilon: r = rsqrt(sum x^2 / n + eps)"}
#define LG_KEY_TILE_OBJ                                                                         \
	{.path = "tile", .type = LG_KEY_OBJECT, .doc = "tile parameters (default: tuning file, else heuristic)"}
#define LG_KEY_TILE(name, ab, lo_, hi_, only_, doc_)                                            \
	{.path = "tile." name, .type = LG_KEY_INT, .min = (lo_), .max = (hi_), .only = (only_),     \
	 .abbrev = (ab), .doc = (doc_)}
/* tile.min_ctas: CTAs of the kernel each SM must hold at once, the second
 * value of __launch_bounds__ (ptxas then caps the registers a thread to fit
 * them, spilling if it must); 1, the default, asks nothing. Families whose
 * occupancy is set by registers declare it; lg_launch_bounds emits it. */
extern const int64_t lg_min_ctas_ok[];
#define LG_KEY_TILE_MIN_CTAS                                                                    \
	LG_KEY_TILE("min_ctas", "o", 1, 4, lg_min_ctas_ok,                                     \
		    "CTAs an SM must hold at once (__launch_bounds__ minimum; caps registers)")
/* "__launch_bounds__(threads)" or, for min_ctas > 1, "(threads, min_ctas)". */
const char *lg_launch_bounds(char buf[48], int threads, int64_t min_ctas);
/* The quantisation recipe (docs/kernels.md §1): five keys, in this order,
 * at indices k .. k + LG_QUANT_KEYS - 1 of a family's table. */
#define LG_QUANT_KEYS 5
extern const char *const lg_quant_output_words[LG_QOUT_COUNT];
extern const char *const lg_round_scale_words[2];
#define LG_KEYS_QUANT(k) LG_KEYS_QUANT_OUT(k, LG_QOUT_BOTH)
/* The same with another default quant.output. */
#define LG_KEYS_QUANT_OUT(k, out_def)                                                          \
	[(k)] = {.path = "quant", .type = LG_KEY_OBJECT, .flags = LG_KEY_REQUIRED,                 \
		 .doc = "blockwise FP8 recipe (docs/kernels.md 1)"},                                     \
	[(k) + 1] = {.path = "quant.format", .type = LG_KEY_ENUM, .values = lg_quant_format_names, \
		     .nvalues = LG_QFMT_COUNT, .has_def = true, .def = LG_QFMT_E4M3,               \
		     .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 22, .doc = "FP8 format"},           \
	[(k) + 2] = {.path = "quant.block", .type = LG_KEY_INT, .min = 128, .max = 128,            \
		     .has_def = true, .def = 128, .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 23,    \
		     .abbrev = "b", .doc = "elements per scale block"},                             \
	[(k) + 3] = {.path = "quant.round_scale", .type = LG_KEY_BOOL, .has_def = true, .def = 1,  \
		     .naming = LG_NAME_ALWAYS, .rank = 21, .words = lg_round_scale_words,          \
		     .doc = "power-of-two scales, rounded up"},                                     \
	[(k) + 4] = {.path = "quant.output", .type = LG_KEY_ENUM, .values = lg_quant_output_names, \
		     .nvalues = LG_QOUT_COUNT, .has_def = true, .def = (out_def),                  \
		     .naming = LG_NAME_ALWAYS, .rank = 20, .words = lg_quant_output_words,         \
		     .doc = "which copies: rowwise 1x128, columnwise 128x1 (transposed), both"}

/* ------------------------------------------- run-time sizes, arguments */

struct lg_size {
	const char *name;  /* "tokens" */
	const char *cname; /* its name in generated code ("M") */
	int64_t min, max;  /* the range a launch accepts */
	const char *doc;
	/* What lg_sizes_at gives it (check, bench and tune at "N tokens"): 0
	 * for N itself, else this value (e.g. a batch of 2 beside seq N). */
	int64_t at;
	/* A launch takes only multiples of it (0 or 1: any value in range);
	 * checked with the range, by lg_size_check. */
	int64_t multiple;
};

enum lg_arg_role {
	LG_ARG_IN,
	LG_ARG_OUT,
	LG_ARG_OPT_IN,  /* may be 0 (e.g. recomputed) */
	LG_ARG_OPT_OUT, /* may be 0 (not written) */
	LG_ARG_WORKSPACE, /* lg_kernel_workspace_size() bytes of scratch */
	/* The device table of a tensor list (lingen.h, lg_tensor_list_table):
	 * elem U8, shape "items, 16" (a run-time size "items" of the pass, the
	 * table's rows). The kernel reads the tensors the rows point to; the
	 * harness cannot make one from random bytes (tests build lists). */
	LG_ARG_LIST,
};
enum lg_elem {
	LG_ELEM_DTYPE, /* the spec's dtype */
	LG_ELEM_BF16,
	LG_ELEM_FP32,
	LG_ELEM_E4M3,
	LG_ELEM_I32,
	LG_ELEM_I64,
	LG_ELEM_U8,
	LG_ELEM_INDEX, /* int64, or int32 where the spec's "index" key says "int32" (labels) */
	LG_ELEM_COUNT
};
extern const char *const lg_elem_names[LG_ELEM_COUNT];
extern const int lg_elem_bytes[LG_ELEM_COUNT];

struct lg_arg {
	const char *name;  /* "x", "q", "st" */
	enum lg_arg_role role;
	enum lg_elem elem;
	/* Comma-separated dimension expressions over the family's integer spec
	 * keys and the pass's run-time sizes: integers, + - * /, parentheses and
	 * cdiv(a, b) (shape.c). Ignored for a workspace. */
	const char *shape;
	int align;         /* bytes the pointer must be aligned to */
	const char *doc;
};

/* The row pitch of a flat columnwise (transposed) FP8 copy of `tokens`
 * tokens, qt [features, round_up(tokens, 128)], as the dense quantisers
 * write it (zeros past the tokens, up to 127 bytes) and the FP8 wgrad and
 * the grouped GEMM's one-copy form read it by TMA: rows 128-byte aligned,
 * so that each 128-token tile's line is one whole 128-byte line. (At the
 * former round_up(tokens, 16), an odd multiple of 16 at 6025 and 8169 tokens,
 * the lines straddled 32-byte L2 sectors: fp8_quant took 1.07-1.10x its time at
 * the count rounded up to 128 on an H100, against 1.00-1.01x at 6001 and
 * 8191; the rule is 1.05x.) LG_QT_PITCH is its shape expression (shape.c),
 * LG_QT_PITCH_BYTES the same multiple. */
#define LG_QT_PITCH "round_up(tokens, 128)"
#define LG_QT_PITCH_BYTES 128

/* plan.used[i] (family.uses): an argument optional by its role that this
 * spec requires. */
#define LG_ARG_REQUIRED 2
/* plan.used[i] (family.uses): used, optional, and when given, argument j
 * must be given too (a gradient computed from a saved input). */
#define LG_ARG_NEEDS(j) (3 + (j))
/* The argument that plan.used value u makes needed with it, or -1. */
static inline int lg_arg_needs(unsigned u)
{
	return u >= 3 ? (int)u - 3 : -1;
}

/* A launch form of a pass: one typed launcher of lingen.h, written at
 * build time from this declaration (build/include/lingen_ops.h and
 * lingen_ops.c, by tools/surface through form.h). Its parameters are
 * (const lg_kernel *k, lg_stream stream), the run-time sizes it takes
 * (int64_t), then the arguments it takes (lg_dptr; const lg_tensor_list *
 * for a list), each in the pass's order; the arguments it does not take
 * are 0. The lists are words separated by spaces. */
struct lg_form {
	const char *name; /* the launcher lg_<op>_<name>; "": lg_<op> */
	/* "key=value" for each key its kernels must have ("part=full
	 * fused=false": enum names, true / false, integers); NULL: any spec
	 * of the pass */
	const char *keys;
	/* The sizes it takes, "name=value" for one it fixes ("tokens
	 * vocab_start=0 shards=1"); a size that a list argument's shape
	 * starts with comes from the list. NULL: every size. */
	const char *sizes;
	/* The arguments it takes; "name=a|b|c": one parameter `name` for
	 * whichever of a, b and c the spec uses (uses()). NULL: every one. */
	const char *args;
	const char *doc; /* its comment in lingen_ops.h (NULL: the pass's doc) */
};

/* The launch signature of one pass. */
struct lg_sig {
	int nsizes;
	const struct lg_size *sizes;
	int nargs;
	const struct lg_arg *args;
	/* What a launch computes, for people: the comment of the pass's typed
	 * launcher (lingen_ops.h; with several forms, before them). */
	const char *doc;
	/* Its launch forms; none (0): one, named after the pass ("forward"),
	 * taking every size and argument. */
	int nforms;
	const struct lg_form *forms;
};

/* ----------------------------------------------------------------- plans */

/* Values of some keys of a family (by key index): a tile. */
struct lg_tile_choice {
	int64_t v[LG_MAX_KEYS];
	uint64_t set; /* bit k: key k given */
};
#define LG_MAX_CANDIDATES 16

/* A TMA tensor map of one pointer argument, declared by a plan: the runtime
 * encodes it at every launch (cuTensorMapEncodeTiled) from the argument's
 * pointer and declared shape at the launch's sizes, row-major (the last
 * dimension contiguous, the others folded into rows; its row bytes a
 * multiple of 16), and passes it to every entry point after `part` as
 * `const __grid_constant__ lg_tmap tm_<arg name>` (lg_emit_signature_tmaps).
 * A box is box[0] elements of a row x box[1] rows; elements outside the
 * tensor read as zeros. A null pointer or an empty tensor gives a zero map
 * (the kernel must not read it). With `cols`, a row holds that many
 * elements (a shape expression, at most the last dimension, which is then
 * the row pitch only: qt [k, round_up(tokens, 128)] read as rows of
 * `tokens`, the pitch's tail never read, a zero read past `tokens`). */
struct lg_tmap_decl {
	int arg;          /* index of the pointer argument */
	unsigned box[2];  /* elements (inner), rows (outer), each 1..256 */
	int swizzle;      /* bytes: 0 (none), 32, 64 or 128 (box[0] elements at most that many bytes) */
	const char *cols; /* NULL: the last dimension; else a row's elements (a static string) */
	/* a template the kernel patches on the device (tensormap.replace of its
	 * address, dims and pitch): encoded over the argument's pointer as
	 * box[1] rows of box[0] elements, whatever its shape (zero when the
	 * pointer is null or the tensor empty) */
	bool patched;
};

/* Resolved parameters of one kernel for one target: the entry points and
 * how to launch them. Filled by plan(); stored in the kernel handle, so
 * launches compute geometry from it without touching the spec. */
struct lg_plan {
	struct lg_tile_choice given; /* the tile the spec gave plan() (tuning included) */
	int64_t tile[LG_MAX_KEYS];   /* the tile chosen, by key index (tile keys only) */
	int64_t v[LG_PLAN_VALUES];   /* family-private values (never stored outside) */
	int nentries;
	char entry[LG_MAX_ENTRIES][160]; /* full entry-point names */
	int nargs, nsizes;
	/* which arguments this spec uses: 0 ignored (may be 0), 1 used
	 * (lg_spec_uses, before plan()) */
	unsigned char used[LG_MAX_ARGS];
	/* Persistent entry points size their grid by what is co-resident on
	 * the device: the context fills `resident` (CTAs, or clusters when the
	 * entry uses clusters) when it loads the kernel; 0 when not loaded. */
	bool persistent[LG_MAX_ENTRIES];
	unsigned resident[LG_MAX_ENTRIES];
	/* At most this many CTAs an SM count as resident (0: all that fit), for
	 * entries whose occupancy may exceed the one they were planned for. */
	unsigned per_sm[LG_MAX_ENTRIES];
	/* CTAs per compile-time cluster of each entry (0 or 1: none); above 8
	 * the context allows non-portable cluster sizes when loading. */
	unsigned cluster[LG_MAX_ENTRIES];
	/* Entry e (> 0) may be launched before entry e-1 has finished
	 * (programmatic dependent launch, sm_90+): it waits for it with
	 * griddepcontrol.wait before touching its results. */
	bool early[LG_MAX_ENTRIES];
	/* The `part` argument of each launch (see the calling convention). */
	int64_t part[LG_MAX_ENTRIES];
	/* The tensor maps every entry takes after `part` (sm_90+ TMA). */
	int ntmaps;
	struct lg_tmap_decl tmap[LG_MAX_TMAPS];
	/* After NVRTC, the cubin's FFMA runs rewritten by this mode of
	 * runtime/sass.h (0: not). */
	int sass_ffma;
};

struct lg_launch_dim {
	unsigned grid[3], block[3];
	unsigned smem; /* dynamic shared memory bytes */
};

struct lg_family {
	const char *op;      /* "rmsnorm_quant" */
	const char *summary; /* one line for --help */
	unsigned passes;     /* bit (1u << lg_pass) for each pass supported */
	unsigned dtypes;     /* bit (1u << lg_dtype) for each input dtype */
	int nkeys;
	const struct lg_key *keys;
	struct lg_sig sig[LG_PASS_COUNT];
	/* Checks across keys (each key's own range is declared). On failure,
	 * return LG_ERR_SPEC through lg_spec_error(where, ...) naming the key.
	 * NULL: none. */
	lg_status (*validate)(const struct lg_spec *s, const char *where);
	/* Clear used[i] for each argument i the spec leaves out (an output
	 * copy its options do not ask for); every argument starts used (1).
	 * Set used[i] = LG_ARG_REQUIRED for an optional argument (OPT_IN,
	 * OPT_OUT) that this spec's keys make required (a weighted sum needs
	 * its weights): launches, bindings and the harness then refuse 0 for
	 * it. Set used[i] = LG_ARG_NEEDS(j) for an optional argument that, when
	 * given, needs argument j given too: launches refuse it without j.
	 * Never depends on the target. NULL: the spec uses every argument. */
	void (*uses)(const struct lg_spec *s, unsigned char *used);
	/* Resolve the tile and entry points for a target. May fail when a
	 * spec-given tile does not fit the target: LG_ERR_SPEC, naming the key,
	 * what was found and what the target allows. */
	lg_status (*plan)(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p);
	/* Write the source of every entry point (after the shared banner). */
	void (*emit)(lg_buf *b, const struct lg_spec *s, const struct lg_target *t,
		     const struct lg_plan *p);
	/* Launch shape of entry e for the run-time sizes (each within its
	 * declared range). A zero grid dimension: the entry is not launched. */
	void (*geometry)(const struct lg_plan *p, int e, const int64_t *sizes, struct lg_launch_dim *d);
	/* Device workspace bytes a launch needs (NULL: none). */
	size_t (*workspace)(const struct lg_plan *p);
	/* Checks across the run-time sizes of a launch, each already within
	 * its declared range (a bound on their product, say): on failure
	 * LG_ERR_INVALID_ARG through lg_fail, naming the entry p->entry[0], the
	 * sizes found and what is allowed. NULL: none. */
	lg_status (*check_sizes)(const struct lg_plan *p, const int64_t *sizes);
	/* A launch over a tensor list (LG_ARG_LIST): may the kernel of spec s
	 * read a list holding these element types (bit 1 << lg_list_elem)?
	 * On refusal LG_ERR_INVALID_ARG through lg_fail, naming the launcher
	 * fn and the kernel's entry. NULL: any list. */
	lg_status (*check_list)(const struct lg_spec *s, const char *fn, const char *entry, unsigned elems);
	/* The tile variants worth sweeping for a spec (its own tile ignored)
	 * and target, at most max, each passing validate() and plan(); returns
	 * how many. NULL: nothing to tune. */
	int (*candidates)(const struct lg_spec *s, const struct lg_target *t,
			  struct lg_tile_choice *out, int max);
	/* The one target the family runs on ("sm_90a": plan() refuses every
	 * other with LG_ERR_SPEC naming it); NULL: every target. */
	const char *target_only;
};

/* The registry: one entry per lg_op (families.h). */
const struct lg_family *lg_family_get(enum lg_op op);

/* Index of the key at `path` in f's declaration, or -1. */
int lg_family_key(const struct lg_family *f, const char *path);
/* Is key k a tile key ("tile.<name>")? */
bool lg_key_is_tile(const struct lg_key *k);

/* For candidates(): append c to out[0..n) if n < max and the spec with
 * tile c (replacing its own) passes the family's checks and plan() for t;
 * returns the new count. Leaves no error message behind. */
int lg_candidate_add(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out,
		     int n, int max, struct lg_tile_choice c);
/* lg_candidate_add of one choice per value of key k (values 0-terminated). */
int lg_candidate_values(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out,
			int n, int max, int k, const int64_t *values);
/* lg_candidate_add of one choice per pair of values of keys k1 and k2
 * (each list 0-terminated), k1 the outer loop. */
int lg_candidate_grid(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int n,
		      int max, int k1, const int64_t *values1, int k2, const int64_t *values2);
/* Each of the candidates out[n0 .. n) again with key k at each value of
 * values (0-terminated) after the first (the first is what they have),
 * appended while max allows; returns the new count. */
int lg_candidate_times(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int n0,
		       int n, int max, int k, const int64_t *values);
/* A tile choice of one key. */
struct lg_tile_choice lg_tile1(int key, int64_t v);
/* The spec s with tile c in place of its own (c NULL: none), entry name
 * remade. Fails (LG_ERR_SPEC, naming the key) when c sets a key that is
 * not a tile key of the family or a value outside the key's range. */
lg_status lg_spec_with_tile(const struct lg_spec *s, const struct lg_tile_choice *c,
			    struct lg_spec *out);
/* Check every tile value of s against its declaration and the family's
 * validate(); `where` prefixes messages. */
lg_status lg_spec_check(const struct lg_spec *s, const char *where);

/* The quantisation recipe of a spec (present false: the family has none). */
struct lg_quant lg_spec_quant(const struct lg_spec *s);
/* Canonical JSON of a spec (every field set, fixed key order, no spaces
 * beyond ", " and ": ", numbers printed shortest-round-trip). The caller
 * frees the result with free(). */
char *lg_spec_to_json(const struct lg_spec *s);
/* Fill s->entry from the other fields (called by the parser). */
void lg_spec_make_entry(struct lg_spec *s);

/* A spec error from a family's validate(): "<where>.<field>: ..." */
lg_status lg_spec_error(const char *where, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Parse the keys of kernel object k into s (op, pass and dtype are the
 * caller's): schema.c. */
struct cJSON;
struct lg_jreader;
lg_status lg_keys_parse(struct lg_jreader *r, const struct cJSON *k, const struct lg_family *f,
			struct lg_spec *s);
/* The members of a "tile" object v (as a tuning file holds it): at least
 * one, each a tile key of f within its declaration. r is at v. */
lg_status lg_keys_parse_tile(struct lg_jreader *r, const struct cJSON *v, const struct lg_family *f,
			     struct lg_tile_choice *c);
/* `lingen help OP`: the family's keys, sizes and arguments as text. The
 * caller frees the result with free(); NULL when out of memory. */
char *lg_family_help(const struct lg_family *f);

/* ------------------------------------------------ shapes (shape.c) */

/* Element type and bytes of argument a of spec s (LG_ELEM_DTYPE resolved). */
enum lg_elem lg_arg_elem(const struct lg_spec *s, const struct lg_arg *a);
/* The dimensions of argument i of s's pass for run-time sizes (nsizes of
 * the pass): dims[0..*ndims). A workspace has none (*ndims = 0). */
lg_status lg_arg_shape(const struct lg_spec *s, int i, const int64_t *sizes, int64_t dims[8], int *ndims);
/* One integer expression of the shape syntax over s's keys and its pass's
 * run-time sizes (a tensor map's row length: "tokens"). */
lg_status lg_shape_value(const struct lg_spec *s, const char *expr, const int64_t *sizes, int64_t *v);
/* Elements of argument i (the product of its dimensions). */
lg_status lg_arg_count(const struct lg_spec *s, int i, const int64_t *sizes, int64_t *count);
/* Minimum bytes a launch moves: each used input read once, each used
 * output written once (workspaces not counted), a list's table and its
 * items as if each were a whole LG_LIST_ITEM_BYTES (the harness's lists
 * are); `used` from the plan. */
double lg_bytes_moved(const struct lg_spec *s, const unsigned char *used, const int64_t *sizes);

/* Every run-time size of f's pass set to n (or to its declared `at`),
 * clamped to its range and up to its multiple (and n beyond them): the sizes geometry is shown
 * and checked at, and check, bench and tune run at. */
void lg_sizes_at(const struct lg_family *f, enum lg_pass pass, int64_t n, int64_t sz[LG_MAX_SIZES]);
/* A run-time size v against its declaration (range and multiple): LG_OK,
 * or LG_ERR_INVALID_ARG with "<entry>: <name> = v, allowed: ...". */
lg_status lg_size_check(const char *entry, const struct lg_size *z, int64_t v);

/* Emit the banner every generated file starts with (generator version,
 * family, target, canonical spec, "generated, do not edit"). */
void lg_emit_banner(lg_buf *b, const struct lg_spec *s, const struct lg_target *t);
/* Emit `extern "C" __global__ void <attrs>` (printf-style: launch bounds,
 * cluster dims) and `<name>(<the pass's pointer arguments and run-time
 * sizes by the calling convention, then part>)`, from the declaration. */
void lg_emit_signature(lg_buf *b, const struct lg_spec *s, const char *name, const char *attrs, ...)
	__attribute__((format(printf, 4, 5)));
/* lg_emit_signature, then the plan's tensor maps after `part`. */
void lg_emit_signature_tmaps(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p, const char *name,
			     const char *attrs, ...) __attribute__((format(printf, 5, 6)));

#endif
