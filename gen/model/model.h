/*
 * model.h - model configs (configs/models/<name>.json) and their expansion into
 * the kernels one training step needs.
 *
 * A model config holds a model's static dimensions (hidden, heads, head
 * dim, experts, top-k, expert and shared-expert intermediate sizes, vocab),
 * its RMSNorm epsilon, its FP8 recipe and (optional, 0.5 when absent) the
 * share of the head dim RoPE rotates. Expansion walks a fixed table of
 * the kernels one MoE decoder layer, the final norm and the loss need,
 * forward and backward (docs/kernels.md §2), and gives each as a kernel spec
 * when its family is in the registry, else as a skipped entry naming the
 * docs/kernels.md section that will implement it. Kernels that come out
 * identical (the input and post-attention norms) are listed once.
 */
#ifndef LG_MODEL_H
#define LG_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lingen.h"
#include "spec.h"

/* The integer fields of a model config, by their JSON names. */
enum lg_model_key {
	LG_MK_HIDDEN,              /* "hidden" */
	LG_MK_LAYERS,              /* "layers" */
	LG_MK_Q_HEADS,             /* "q_heads" */
	LG_MK_KV_HEADS,            /* "kv_heads" */
	LG_MK_HEAD_DIM,            /* "head_dim" */
	LG_MK_EXPERTS,             /* "experts": routed experts */
	LG_MK_TOPK,                /* "topk": experts per token */
	LG_MK_EXPERT_INTERMEDIATE, /* "expert_intermediate": routed expert FFN width */
	LG_MK_SHARED_EXPERTS,      /* "shared_experts": 0 if none */
	LG_MK_SHARED_INTERMEDIATE, /* "shared_intermediate": 0 iff no shared expert */
	LG_MK_VOCAB,               /* "vocab" */
	LG_MK_COUNT
};

extern const char *const lg_model_key_names[LG_MK_COUNT];

#define LG_MODEL_NAME_MAX 64

struct lg_model {
	char name[LG_MODEL_NAME_MAX]; /* [A-Za-z0-9._-]+ */
	int64_t v[LG_MK_COUNT];
	double eps;            /* rms_norm_eps */
	double rotary_fraction; /* share of head_dim RoPE rotates (optional, 0.5: Ling; 1: Qwen3) */
	bool plain_heads;      /* optional "head_layout": "plain" (q | k | v) rather than "interleaved"
				  (Megatron's GQA groups), the K2 kernels' head_layout */
	struct lg_quant fp8;   /* format, block, round_scale; output unused */
	bool fused_router;     /* optional, false: the MoE input's RMSNorm and the router GEMM
				  as one kernel (rmsnorm_router, docs/kernels.md K3b) */
};

/* Upper bound on the entries of one expansion (the step table's size). */
#define LG_MODEL_MAX_STEPS 48
/* Upper bound on the skipped entries: the steps, and per arch of
 * lg_model_step_for_archs those its families do not run on. */
#define LG_MODEL_MAX_ARCHS 8
#define LG_MODEL_MAX_SKIPS (LG_MODEL_MAX_STEPS * (LG_MODEL_MAX_ARCHS + 1))

struct lg_model_skip {
	const char *op;     /* family name it will have, e.g. "qk_norm_rope" */
	enum lg_pass pass;
	const char *why;    /* "family not implemented yet (docs/kernels.md K2)" */
	const char *arch;   /* NULL: every arch; else skipped for this arch only, */
	const char *only;   /* because its family runs on this one only (target_only) */
};

/* One training step: the kernels (deduplicated, in step order) and the
 * kernels that cannot be generated yet. */
struct lg_model_step {
	size_t nkernels;
	struct lg_spec kernels[LG_MODEL_MAX_STEPS];
	size_t nskipped;
	struct lg_model_skip skipped[LG_MODEL_MAX_SKIPS];
};

/* Parse a model config held in memory; `file` names it in messages (NULL:
 * "<input>"). Every error names the file, the JSON path, what was found and
 * what is allowed; unknown keys are errors. */
lg_status lg_model_parse(const char *text, size_t len, const char *file, struct lg_model *m);

/* True if text is a JSON object with no "kernels" and at least one model
 * key (hidden, experts, fp8, ...): a model config rather than a spec file.
 * Never fails; may leave a message in lg_last_error(). */
bool lg_model_is_config(const char *text, size_t len);

/* Expand a parsed model into one training step. A kernel its family
 * rejects (say, hidden not a multiple of 128) is an LG_ERR_SPEC naming
 * `file`, the model key and the kernel. */
lg_status lg_model_expand(const struct lg_model *m, const char *file, struct lg_model_step *s);

/* Restrict a step to some archs (normalised names, at most
 * LG_MODEL_MAX_ARCHS): each kernel whose family does not run on an arch
 * (lg_family target_only) is listed as skipped for that arch (once per op,
 * pass and arch) and left out of the kernels when no arch runs it. */
void lg_model_step_for_archs(struct lg_model_step *s, char *const *archs, int narch);

/* The step as a spec file (2-space indent; "name", "model", "kernels" in
 * canonical form, "skipped"), ending in a newline. The caller frees the
 * result with free(); NULL on allocation failure. */
char *lg_model_step_json(const struct lg_model *m, const struct lg_model_step *s);

#endif
