/*
 * spec.h - the parsed, validated form of one kernel spec.
 *
 * A spec names a family (`op`), a direction (`pass`), the input dtype, the
 * static dimensions the family needs (by KERNELS.md's names), an optional
 * quantisation recipe and optional family-specific tile parameters. Every
 * field the family does not use must be absent; every unknown key is an
 * error. Static dimensions become literals in the generated source; the
 * token count is a run-time kernel argument.
 */
#ifndef LG_SPEC_H
#define LG_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "lingen.h"

/* Families, in registry order (gen/registry.c). */
enum lg_op {
	LG_OP_RMSNORM_QUANT, /* K1: RMSNorm + 1x128/128x1 FP8 quantisation */
	LG_OP_RMSNORM,       /* K1: plain RMSNorm forward / backward */
	LG_OP_COUNT
};

enum lg_pass { LG_PASS_FORWARD, LG_PASS_BACKWARD, LG_PASS_COUNT };

enum lg_dtype { LG_DTYPE_BF16, LG_DTYPE_FP32, LG_DTYPE_COUNT };

/* Static dimensions, by the names used in JSON and KERNELS.md. */
enum lg_dim {
	LG_DIM_HIDDEN,       /* "hidden" */
	LG_DIM_HEAD_DIM,     /* "head_dim" */
	LG_DIM_Q_HEADS,      /* "q_heads" */
	LG_DIM_KV_HEADS,     /* "kv_heads" */
	LG_DIM_VOCAB,        /* "vocab" */
	LG_DIM_EXPERTS,      /* "experts" */
	LG_DIM_TOPK,         /* "topk" */
	LG_DIM_INTERMEDIATE, /* "intermediate" */
	LG_DIM_COUNT
};

enum lg_quant_format { LG_QFMT_E4M3, LG_QFMT_COUNT };
enum lg_quant_output { LG_QOUT_ROWWISE, LG_QOUT_COLUMNWISE, LG_QOUT_BOTH, LG_QOUT_COUNT };

/* Tile parameters, by their JSON names inside "tile". Each family states
 * which it accepts (struct lg_family.tile_keys) and checks their values. */
enum lg_tile_key {
	LG_TILE_ROWS,    /* "rows": rows (tokens) per CTA */
	LG_TILE_COLS,    /* "cols": columns (features) per CTA */
	LG_TILE_THREADS, /* "threads": threads per CTA */
	LG_TILE_CLUSTER, /* "cluster": CTAs per thread-block cluster (sm_90+) */
	LG_TILE_STAGES,  /* "stages": tiles in flight in shared memory (pipelining) */
	LG_TILE_COUNT
};

struct lg_quant {
	bool present;
	enum lg_quant_format format;
	int block;        /* elements per scale block: 128 */
	bool round_scale; /* power-of-two scales, rounded up */
	enum lg_quant_output output;
};

struct lg_spec {
	enum lg_op op;
	enum lg_pass pass;
	enum lg_dtype dtype;
	int64_t dim[LG_DIM_COUNT];
	uint32_t dim_set; /* bit (1u << lg_dim) for each dimension given */
	double eps;       /* RMSNorm epsilon (families with has_eps) */
	struct lg_quant quant;
	int tile[LG_TILE_COUNT];
	uint32_t tile_set; /* bit (1u << lg_tile_key) for each tile key given */
	char entry[128];   /* entry-point base name, derived from the fields above */
};

/* Names used in JSON and messages; tables indexed by the enums above. */
extern const char *const lg_op_names[LG_OP_COUNT];
extern const char *const lg_pass_names[LG_PASS_COUNT];
extern const char *const lg_dtype_names[LG_DTYPE_COUNT];
extern const char *const lg_dim_names[LG_DIM_COUNT];
extern const char *const lg_quant_format_names[LG_QFMT_COUNT];
extern const char *const lg_quant_output_names[LG_QOUT_COUNT];
extern const char *const lg_tile_names[LG_TILE_COUNT];

static inline bool lg_spec_has_dim(const struct lg_spec *s, enum lg_dim d)
{
	return (s->dim_set >> d) & 1u;
}
static inline bool lg_spec_has_tile(const struct lg_spec *s, enum lg_tile_key k)
{
	return (s->tile_set >> k) & 1u;
}

/* Canonical JSON of a spec (every field set, fixed key order, no spaces
 * beyond ", " and ": ", numbers printed shortest-round-trip). The caller
 * frees the result with free(). */
char *lg_spec_to_json(const struct lg_spec *s);

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

/* Fill s->entry from the other fields (called by the parser). */
void lg_spec_make_entry(struct lg_spec *s);

#endif
