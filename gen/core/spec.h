/*
 * spec.h - the parsed, validated form of one kernel spec.
 *
 * A spec names a family (`op`), a direction (`pass`) and the input dtype;
 * every other key is one the family declares (struct lg_family.keys,
 * family.h): static dimensions, epsilon, the quantisation recipe, tile
 * parameters. The parser reads any family from its declaration; values
 * are stored by the index of their key in that declaration. Every key the
 * family does not declare is an error. Static dimensions become literals
 * in the generated source; run-time sizes (tokens, ...) are kernel
 * arguments.
 *
 * This header is the bottom of gen/core: it includes no other of its
 * headers but the family list; what reads a spec through its family's
 * declaration (canonical JSON, entry names, the quant recipe) is declared
 * in family.h (schema.c).
 */
#ifndef LG_SPEC_H
#define LG_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "families.h"
#include "lingen.h"

/* Families, in the order of families.h. */
enum lg_op {
#define LG_OP_ENUM(name, NAME) LG_OP_##NAME,
	LG_FAMILIES(LG_OP_ENUM)
#undef LG_OP_ENUM
	LG_OP_COUNT
};

/* dgrad, wgrad: a GEMM's two backward products (the input's gradient, the
 * weight's), for families whose backward is two separate launches. */
enum lg_pass { LG_PASS_FORWARD, LG_PASS_BACKWARD, LG_PASS_DGRAD, LG_PASS_WGRAD, LG_PASS_COUNT };
/* The pass in entry-point names: fwd, bwd, dgrad, wgrad. */
extern const char *const lg_pass_abbrevs[LG_PASS_COUNT];

/* e4m3: FP8 tokens (with their blockwise scales), for the families that
 * move data without arithmetic (moe_permute). */
enum lg_dtype { LG_DTYPE_BF16, LG_DTYPE_FP32, LG_DTYPE_E4M3, LG_DTYPE_COUNT };

/* The shared quantisation recipe (docs/kernels.md §1), read from the "quant"
 * keys of a quantising family (LG_KEYS_QUANT in family.h). */
enum lg_quant_format { LG_QFMT_E4M3, LG_QFMT_COUNT };
enum lg_quant_output { LG_QOUT_ROWWISE, LG_QOUT_COLUMNWISE, LG_QOUT_BOTH, LG_QOUT_COUNT };
struct lg_quant {
	bool present;
	enum lg_quant_format format;
	int block;        /* elements per scale block: 128 */
	bool round_scale; /* power-of-two scales, rounded up */
	enum lg_quant_output output;
};

#define LG_MAX_KEYS 32 /* keys a family declares, objects included */

struct lg_family; /* family.h: the declaration a spec's keys are read by */

struct lg_spec {
	enum lg_op op;
	const struct lg_family *fam; /* the family of op, set by the parser */
	enum lg_pass pass;
	enum lg_dtype dtype;
	/* By key index of the family's declaration: integers, enum indices,
	 * booleans (0/1) and objects (1: present) in v, numbers in num. */
	int64_t v[LG_MAX_KEYS];
	double num[LG_MAX_KEYS];
	uint64_t set;    /* bit k: key k given, or filled with its default */
	char entry[128]; /* entry-point base name, derived from the fields above */
};

/* Names used in JSON and messages; tables indexed by the enums above. */
extern const char *const lg_op_names[LG_OP_COUNT];
extern const char *const lg_pass_names[LG_PASS_COUNT];
extern const char *const lg_dtype_names[LG_DTYPE_COUNT];
extern const char *const lg_quant_format_names[LG_QFMT_COUNT];
extern const char *const lg_quant_output_names[LG_QOUT_COUNT];

static inline bool lg_spec_has(const struct lg_spec *s, int key)
{
	return (s->set >> key) & 1u;
}
/* Integer, enum index or boolean value of key k (0 when absent). */
static inline int64_t lg_spec_int(const struct lg_spec *s, int key)
{
	return s->v[key];
}
static inline double lg_spec_num(const struct lg_spec *s, int key)
{
	return s->num[key];
}

/* Parse one kernel object read through r (its JSON path in messages), as
 * in a spec file's "kernels" array: for other files that hold specs. */
struct cJSON;
struct lg_jreader;
lg_status lg_spec_from_json(struct lg_jreader *r, const struct cJSON *k, struct lg_spec *s);

/* Parse one kernel object (text, NUL-terminated) into *out, with messages
 * naming `file` and the kernel's keys as top-level paths ("<file>: hidden:
 * ..."): for kernels built from another document, e.g. a model config.
 * Does not clear the thread's last error on entry. */
lg_status lg_spec_parse_kernel(const char *json, const char *file, struct lg_spec *out);

#endif
