/*
 * model.c - model configs: parse and validate (see model.h), and expand
 * into the kernels of one training step.
 *
 * The step is a table (`steps` below), one row per kernel and pass, in the
 * order a training step runs them. A row names the family it needs by its
 * op name; the row becomes a kernel spec as soon as a family of that name is
 * in the registry (and supports the pass), and is listed as skipped until
 * then. So adding a family needs no change here unless its spec takes
 * fields the row does not give. Each implemented row is built as kernel
 * JSON from the model's values and parsed by the spec parser, so the
 * family's own checks apply; a rejection names the model file and key.
 */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "error.h"
#include "family.h"
#include "file.h"
#include "json.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

const char *const lg_model_key_names[LG_MK_COUNT] = {
	[LG_MK_HIDDEN] = "hidden",
	[LG_MK_LAYERS] = "layers",
	[LG_MK_Q_HEADS] = "q_heads",
	[LG_MK_KV_HEADS] = "kv_heads",
	[LG_MK_HEAD_DIM] = "head_dim",
	[LG_MK_EXPERTS] = "experts",
	[LG_MK_TOPK] = "topk",
	[LG_MK_EXPERT_INTERMEDIATE] = "expert_intermediate",
	[LG_MK_SHARED_EXPERTS] = "shared_experts",
	[LG_MK_SHARED_INTERMEDIATE] = "shared_intermediate",
	[LG_MK_VOCAB] = "vocab",
};
_Static_assert(COUNT(lg_model_key_names) == LG_MK_COUNT, "one name per model key");

/* Allowed range of each integer field. */
static const int64_t key_range[LG_MK_COUNT][2] = {
	[LG_MK_HIDDEN] = {1, 1 << 20},
	[LG_MK_LAYERS] = {1, 100000},
	[LG_MK_Q_HEADS] = {1, 4096},
	[LG_MK_KV_HEADS] = {1, 4096},
	[LG_MK_HEAD_DIM] = {1, 4096},
	[LG_MK_EXPERTS] = {1, 65536},
	[LG_MK_TOPK] = {1, 65536},
	[LG_MK_EXPERT_INTERMEDIATE] = {1, 1 << 20},
	[LG_MK_SHARED_EXPERTS] = {0, 256},
	[LG_MK_SHARED_INTERMEDIATE] = {0, 1 << 20},
	[LG_MK_VOCAB] = {1, INT32_MAX},
};

/* Keys of a model config, in the order messages list them. */
#define NKEYS (LG_MK_COUNT + 8)
static const char *const fp8_keys[] = {"format", "block", "round_scale"};

#define NAME_CHARS "A-Z a-z 0-9 . _ -"

/* ------------------------------------------------------------- parse */

static const cJSON *member(const cJSON *obj, const char *key)
{
	return cJSON_GetObjectItemCaseSensitive(obj, key);
}

static void model_keys(const char *names[NKEYS])
{
	size_t n = 0;
	names[n++] = "name";
	names[n++] = "source";
	names[n++] = "notes";
	for (int i = 0; i < LG_MK_COUNT; i++)
		names[n++] = lg_model_key_names[i];
	names[n++] = "eps";
	names[n++] = "rotary_fraction";
	names[n++] = "head_layout";
	names[n++] = "fp8";
	names[n++] = "fused_router";
	LG_ASSERT(n == NKEYS);
}

static lg_status parse_name(const struct lg_jreader *r, const cJSON *root, struct lg_model *m)
{
	const cJSON *v = member(root, "name");
	if (!v)
		return lg_json_fail(r, "name", "missing, allowed: 1 to %d characters from " NAME_CHARS,
				    LG_MODEL_NAME_MAX - 1);
	const char *s = cJSON_IsString(v) ? v->valuestring : NULL;
	size_t n = s ? strlen(s) : 0;
	bool ok = n > 0 && n < LG_MODEL_NAME_MAX && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
							      "abcdefghijklmnopqrstuvwxyz0123456789._-") == n;
	if (!ok)
		return lg_json_fail(r, "name", "found %s%s%s%s, allowed: 1 to %d characters from " NAME_CHARS,
				    lg_json_show(v).s, s ? "" : " (", s ? "" : lg_json_type(v),
				    s ? "" : ")", LG_MODEL_NAME_MAX - 1);
	memcpy(m->name, s, n + 1);
	return LG_OK;
}

/* "source" (required) and "notes" (optional): strings, kept in the file only. */
static lg_status parse_texts(const struct lg_jreader *r, const cJSON *root)
{
	const cJSON *src = member(root, "source"), *notes = member(root, "notes");
	if (!src)
		return lg_json_fail(r, "source", "missing, allowed: a string naming where the "
						 "dimensions come from (e.g. a config.json URL)");
	if (!cJSON_IsString(src) || !src->valuestring[0])
		return lg_json_fail(r, "source", "found %s (%s), allowed: a non-empty string",
				    lg_json_show(src).s, lg_json_type(src));
	if (notes && !cJSON_IsString(notes))
		return lg_json_fail(r, "notes", "found %s (%s), allowed: a string",
				    lg_json_show(notes).s, lg_json_type(notes));
	return LG_OK;
}

static lg_status parse_ints(const struct lg_jreader *r, const cJSON *root, struct lg_model *m)
{
	for (int i = 0; i < LG_MK_COUNT; i++) {
		const char *key = lg_model_key_names[i];
		const cJSON *v = member(root, key);
		if (!v)
			return lg_json_fail(r, key, "missing, allowed: an integer from %lld to %lld",
					    (long long)key_range[i][0], (long long)key_range[i][1]);
		lg_status st = lg_json_int(r, key, v, key_range[i][0], key_range[i][1], &m->v[i]);
		if (st != LG_OK)
			return st;
	}
	return LG_OK;
}

static lg_status parse_eps(const struct lg_jreader *r, const cJSON *root, struct lg_model *m)
{
	const cJSON *v = member(root, "eps");
	if (!v)
		return lg_json_fail(r, "eps", "missing, allowed: a number greater than 0 and less than 1 "
					      "(the model's rms_norm_eps)");
	return lg_json_open_unit(r, "eps", v, &m->eps);
}

/* "rotary_fraction" (optional): 0 < f <= 1, 0.5 when absent (docs/kernels.md K2). */
static lg_status parse_rotary(const struct lg_jreader *r, const cJSON *root, struct lg_model *m)
{
	const cJSON *v = member(root, "rotary_fraction");
	m->rotary_fraction = 0.5;
	if (!v)
		return LG_OK;
	if (!cJSON_IsNumber(v) || !(v->valuedouble > 0.0 && v->valuedouble <= 1.0))
		return lg_json_fail(r, "rotary_fraction", "found %s, allowed: a number greater than 0 and at "
							 "most 1 (the share of head_dim RoPE rotates: 0.5 Ling, 1 Qwen3)",
				    lg_json_show(v).s);
	m->rotary_fraction = v->valuedouble;
	return LG_OK;
}

/* "head_layout" (optional): how the fused qkv projection orders a token's
 * heads, the K2 kernels' head_layout: "interleaved" (Megatron's GQA groups
 * [q x H/h, k, v], when absent) or "plain" (all q | k | v). */
static const char *const head_layouts[] = {"interleaved", "plain"};
static lg_status parse_head_layout(const struct lg_jreader *r, const cJSON *root, struct lg_model *m)
{
	const cJSON *v = member(root, "head_layout");
	int layout = 0;
	lg_status st = v ? lg_json_enum(r, "head_layout", v, head_layouts, COUNT(head_layouts), ~0u, "", &layout)
			 : LG_OK;
	m->plain_heads = layout == 1;
	return st;
}

/* "fused_router" (optional): true, false; false when absent. */
static lg_status parse_fused_router(const struct lg_jreader *r, const cJSON *root, struct lg_model *m)
{
	const cJSON *v = member(root, "fused_router");
	m->fused_router = false;
	if (!v)
		return LG_OK;
	return lg_json_bool(r, "fused_router", v, &m->fused_router);
}

static lg_status parse_fp8_fields(const struct lg_jreader *r, const cJSON *q, struct lg_quant *qt)
{
	const cJSON *v;
	int64_t block;
	int fmt = 0;
	lg_status st;
	for (size_t i = 0; i < COUNT(fp8_keys); i++)
		if (!member(q, fp8_keys[i]))
			return lg_json_fail(r, fp8_keys[i], "missing, allowed: %s",
					    i == 0 ? "\"e4m3\"" : i == 1 ? "an integer (128)" : "true, false");
	v = member(q, "format");
	if ((st = lg_json_enum(r, "format", v, lg_quant_format_names, LG_QFMT_COUNT, ~0u, "", &fmt)) != LG_OK)
		return st;
	qt->format = (enum lg_quant_format)fmt;
	if ((st = lg_json_int(r, "block", member(q, "block"), 1, 65536, &block)) != LG_OK)
		return st;
	qt->block = (int)block;
	return lg_json_bool(r, "round_scale", member(q, "round_scale"), &qt->round_scale);
}

static lg_status parse_fp8(struct lg_jreader *r, const cJSON *root, struct lg_model *m)
{
	const cJSON *q = member(root, "fp8");
	if (!q)
		return lg_json_fail(r, "fp8", "missing, allowed: an object with keys format, block, "
					      "round_scale (the FP8 recipe)");
	m->fp8 = (struct lg_quant){.present = true, .output = LG_QOUT_BOTH};
	size_t mark = lg_json_push_key(r, "fp8");
	lg_status st;
	uint32_t seen;
	if (!cJSON_IsObject(q))
		st = lg_json_fail(r, NULL, "found %s, allowed: an object with keys format, block, round_scale",
				  lg_json_show(q).s);
	else if ((st = lg_json_check_keys(r, q, fp8_keys, COUNT(fp8_keys), &seen)) == LG_OK)
		st = parse_fp8_fields(r, q, &m->fp8);
	lg_json_pop(r, mark);
	return st;
}

/* Checks between fields. */
static lg_status check_model(const struct lg_jreader *r, const struct lg_model *m)
{
	const int64_t *v = m->v;
	if (v[LG_MK_Q_HEADS] % v[LG_MK_KV_HEADS] != 0)
		return lg_json_fail(r, "kv_heads", "found %lld, allowed: a divisor of q_heads (%lld)",
				    (long long)v[LG_MK_KV_HEADS], (long long)v[LG_MK_Q_HEADS]);
	if (v[LG_MK_TOPK] > v[LG_MK_EXPERTS])
		return lg_json_fail(r, "topk", "found %lld, allowed: an integer from 1 to experts (%lld)",
				    (long long)v[LG_MK_TOPK], (long long)v[LG_MK_EXPERTS]);
	if (v[LG_MK_SHARED_EXPERTS] == 0 && v[LG_MK_SHARED_INTERMEDIATE] != 0)
		return lg_json_fail(r, "shared_intermediate", "found %lld, allowed: 0 when shared_experts is 0",
				    (long long)v[LG_MK_SHARED_INTERMEDIATE]);
	if (v[LG_MK_SHARED_EXPERTS] > 0 && v[LG_MK_SHARED_INTERMEDIATE] == 0)
		return lg_json_fail(r, "shared_intermediate", "found 0, allowed: an integer from 1 to %lld "
				    "when shared_experts is %lld",
				    (long long)key_range[LG_MK_SHARED_INTERMEDIATE][1],
				    (long long)v[LG_MK_SHARED_EXPERTS]);
	return LG_OK;
}

static lg_status parse_model(struct lg_jreader *r, const cJSON *root, struct lg_model *m)
{
	const char *names[NKEYS];
	uint32_t seen;
	lg_status st;
	if (!cJSON_IsObject(root))
		return lg_json_fail(r, NULL, "top level: found %s, allowed: a model config object "
					     "{\"name\": ..., \"hidden\": ..., ...}", lg_json_show(root).s);
	model_keys(names);
	if ((st = lg_json_check_keys(r, root, names, NKEYS, &seen)) != LG_OK)
		return st;
	if ((st = parse_name(r, root, m)) != LG_OK || (st = parse_texts(r, root)) != LG_OK ||
	    (st = parse_ints(r, root, m)) != LG_OK || (st = parse_eps(r, root, m)) != LG_OK ||
	    (st = parse_rotary(r, root, m)) != LG_OK || (st = parse_head_layout(r, root, m)) != LG_OK ||
	    (st = parse_fp8(r, root, m)) != LG_OK ||
	    (st = parse_fused_router(r, root, m)) != LG_OK)
		return st;
	return check_model(r, m);
}

lg_status lg_model_parse(const char *text, size_t len, const char *file, struct lg_model *m)
{
	struct lg_jreader r;
	cJSON *root = NULL;
	lg_json_init(&r, file);
	memset(m, 0, sizeof *m);
	lg_status st = lg_json_parse(&r, text ? text : "", text ? len : 0, &root);
	if (st == LG_OK)
		st = parse_model(&r, root, m);
	cJSON_Delete(root);
	return st;
}

bool lg_model_is_config(const char *text, size_t len)
{
	struct lg_jreader r;
	cJSON *root = NULL;
	lg_json_init(&r, NULL);
	if (!text || lg_json_parse(&r, text, len, &root) != LG_OK)
		return false;
	bool yes = cJSON_IsObject(root) && !member(root, "kernels") && member(root, "fp8");
	for (int i = 0; !yes && cJSON_IsObject(root) && !member(root, "kernels") && i < LG_MK_COUNT; i++)
		yes = member(root, lg_model_key_names[i]) != NULL;
	cJSON_Delete(root);
	return yes;
}

/* ------------------------------------------------------------ expand */

/* One kernel of the training step, as the spec its family takes. */
struct step {
	const char *op;      /* family name, as in lg_op_names once it exists */
	const char *section; /* docs/kernels.md section */
	enum lg_pass pass;
	const char *dtype;   /* input dtype */
	struct { const char *key; enum lg_model_key from; } dims[3]; /* spec key, model key */
	int ndims;
	unsigned flags;      /* EPS, QUANT, SHARED_ONLY, ROPE, UNFUSED, FUSED */
	int gemm;            /* an FP8 GEMM's n and k (and experts): enum gemm_kind; 0: dims */
};
/* The FP8 GEMMs of a layer: their n (output features) and k (input). */
enum gemm_kind {
	G_NONE,
	G_QKV,        /* qkv projection: n (q_heads + 2 kv_heads) head_dim, k hidden */
	G_OUT,        /* output projection: n hidden, k q_heads head_dim */
	G_SHARED_UP,  /* shared expert gate/up: n 2 shared_intermediate, k hidden */
	G_SHARED_DOWN, /* shared expert down: n hidden, k shared_intermediate */
	G_EXPERT_UP,  /* routed experts' gate/up (grouped): n 2 expert_intermediate, k hidden */
	G_EXPERT_DOWN, /* routed experts' down (grouped): n hidden, k expert_intermediate */
};
enum {
	EPS = 1,         /* takes the model's eps */
	QUANT = 2,       /* takes the model's fp8 recipe, output "both" */
	SHARED_ONLY = 4, /* only for models with shared experts */
	ROPE = 8,        /* takes the model's rotary_fraction and head_layout */
	UNFUSED = 16,    /* only when the model's fused_router is false */
	FUSED = 32,      /* only when it is true */
};

#define FWD LG_PASS_FORWARD
#define BWD LG_PASS_BACKWARD
#define D1(a, fa) {{a, fa}}, 1
#define D2(a, fa, b, fb) {{a, fa}, {b, fb}}, 2
#define D3(a, fa, b, fb, c, fc) {{a, fa}, {b, fb}, {c, fc}}, 3
#define HID D1("hidden", LG_MK_HIDDEN)
#define NODIM {{"hidden", LG_MK_HIDDEN}}, 0
#define ATTN D3("head_dim", LG_MK_HEAD_DIM, "q_heads", LG_MK_Q_HEADS, "kv_heads", LG_MK_KV_HEADS)
#define ROUTE D2("hidden", LG_MK_HIDDEN, "experts", LG_MK_EXPERTS)
#define PERM D3("hidden", LG_MK_HIDDEN, "experts", LG_MK_EXPERTS, "top_k", LG_MK_TOPK)
#define ROWMAP D2("experts", LG_MK_EXPERTS, "top_k", LG_MK_TOPK)
#define EXPERT D2("intermediate", LG_MK_EXPERT_INTERMEDIATE, "experts", LG_MK_EXPERTS)
#define SHARED D1("intermediate", LG_MK_SHARED_INTERMEDIATE)
#define VOCAB D1("vocab", LG_MK_VOCAB)
#define DG LG_PASS_DGRAD
#define WG LG_PASS_WGRAD
/* a GEMM's three products: forward and dgrad bf16, wgrad fp32 */
#define GEMM3(op, g, flags)                                  \
	{op, "1.3", FWD, "bf16", NODIM, flags, g}, {op, "1.3", DG, "bf16", NODIM, flags, g}, \
		{op, "1.3", WG, "fp32", NODIM, flags, g}

/* One training step of an FP8 MoE decoder (docs/kernels.md §2): a layer's
 * kernels, then the final norm, the loss and the optimizer-side reductions. */
static const struct step steps[] = {
	/* input RMSNorm + FP8 quantisation of the attention input; its backward
	 * is the plain RMSNorm backward (docs/kernels.md K1) */
	{"rmsnorm_quant", "K1", FWD, "bf16", HID, EPS | QUANT, G_NONE},
	{"rmsnorm", "K1", BWD, "bf16", HID, EPS, G_NONE},
	/* split + per-head q/k RMSNorm + half RoPE + transpose */
	/* the FP8 GEMMs of attention: qkv and output projections */
	GEMM3("fp8_gemm", G_QKV, 0),
	GEMM3("fp8_gemm", G_OUT, 0),
	{"qk_norm_rope", "K2", FWD, "bf16", ATTN, EPS | ROPE, G_NONE},
	{"qk_norm_rope", "K2", BWD, "bf16", ATTN, EPS | ROPE, G_NONE},
	/* router logits in fp32 */
	{"router_gemm", "K3", FWD, "bf16", ROUTE, UNFUSED, G_NONE},
	{"router_gemm", "K3", BWD, "bf16", ROUTE, 0, G_NONE}, /* x, w bf16; dy is fp32 */
	/* post-attention RMSNorm + FP8: the same kernels as the input norm;
	 * with fused_router, this norm and the router's forward are one
	 * kernel (both copies: the recipe's output) */
	{"rmsnorm_quant", "K1", FWD, "bf16", HID, EPS | QUANT | UNFUSED, G_NONE},
	{"rmsnorm_router", "K3b", FWD, "bf16", ROUTE, EPS | QUANT | FUSED, G_NONE},
	{"rmsnorm", "K1", BWD, "bf16", HID, EPS, G_NONE},
	/* MoE dispatch and combine: the padded row map of the router's mask,
	 * the permute into expert rows and its backward, the combine and its
	 * backward */
	{"moe_row_map", "K4", FWD, "bf16", ROWMAP, 0, G_NONE},
	{"moe_permute", "K4", FWD, "bf16", PERM, 0, G_NONE},
	/* the FP8 recipe's dispatch: permute + pad + per-expert quantisation */
	{"moe_permute_quant", "K4b", FWD, "bf16", PERM, QUANT, G_NONE},
	{"moe_permute", "K4", BWD, "bf16", PERM, 0, G_NONE},
	{"moe_unpermute", "K5", FWD, "bf16", PERM, 0, G_NONE},
	{"moe_unpermute", "K5", BWD, "bf16", PERM, 0, G_NONE},
	/* routed experts: prob-weighted SwiGLU + FP8, per expert */
	{"batch_swiglu_quant", "K6", FWD, "bf16", EXPERT, QUANT, G_NONE},
	{"batch_swiglu_quant", "K6", BWD, "bf16", EXPERT, QUANT, G_NONE},
	/* the experts' FP8 GEMMs: routed (grouped over their rows) and shared */
	GEMM3("fp8_grouped_gemm", G_EXPERT_UP, 0),
	GEMM3("fp8_grouped_gemm", G_EXPERT_DOWN, 0),
	GEMM3("fp8_gemm", G_SHARED_UP, SHARED_ONLY),
	GEMM3("fp8_gemm", G_SHARED_DOWN, SHARED_ONLY),
	/* shared expert: SwiGLU + FP8 */
	{"swiglu_quant", "K7", FWD, "bf16", SHARED, QUANT | SHARED_ONLY, G_NONE},
	{"swiglu_quant", "K7", BWD, "bf16", SHARED, QUANT | SHARED_ONLY, G_NONE},
	/* final RMSNorm before the LM head: not quantised in linghe's recipe */
	{"rmsnorm", "K1", FWD, "bf16", HID, EPS, G_NONE},
	{"rmsnorm", "K1", BWD, "bf16", HID, EPS, G_NONE},
	/* softmax cross entropy over the vocabulary */
	{"cross_entropy", "K9", FWD, "bf16", VOCAB, 0, G_NONE},
	{"cross_entropy", "K9", BWD, "bf16", VOCAB, 0, G_NONE},
	/* global grad norm and zero count over the fp32 gradients */
	{"grad_norm", "K10", FWD, "fp32", NODIM, 0, G_NONE},
	{"count_zero", "K11", FWD, "fp32", NODIM, 0, G_NONE},
};
_Static_assert(COUNT(steps) <= LG_MODEL_MAX_STEPS, "LG_MODEL_MAX_STEPS holds the step table");

/* Reasons for a skip, one per section, as static strings. */
#define WHY(k) "family not implemented yet (docs/kernels.md " k ")"
#define WHY_PASS(k) "pass not implemented yet (docs/kernels.md " k ")"
static const char *why_of(const char *section, bool family)
{
	static const struct { const char *section, *family, *pass; } whys[] = {
		{"K1", WHY("K1"), WHY_PASS("K1")},   {"K2", WHY("K2"), WHY_PASS("K2")},
		{"K3", WHY("K3"), WHY_PASS("K3")},   {"K3b", WHY("K3b"), WHY_PASS("K3b")},
		{"K4", WHY("K4"), WHY_PASS("K4")},
		{"K4b", WHY("K4b"), WHY_PASS("K4b")},
		{"K5", WHY("K5"), WHY_PASS("K5")},   {"K6", WHY("K6"), WHY_PASS("K6")},
		{"K7", WHY("K7"), WHY_PASS("K7")},   {"K9", WHY("K9"), WHY_PASS("K9")},
		{"K10", WHY("K10"), WHY_PASS("K10")}, {"K11", WHY("K11"), WHY_PASS("K11")},
		{"1.3", WHY("1.3, FP8 GEMMs"), WHY_PASS("1.3, FP8 GEMMs")},
	};
	for (size_t i = 0; i < COUNT(whys); i++)
		if (strcmp(whys[i].section, section) == 0)
			return family ? whys[i].family : whys[i].pass;
	LG_ASSERT(!"every step's section has a reason");
	return "";
}

/* The registered family of a step's op, or -1. */
static int find_op(const char *op)
{
	for (int i = 0; i < LG_OP_COUNT; i++)
		if (strcmp(lg_op_names[i], op) == 0)
			return i;
	return -1;
}

/* A GEMM step's keys: n, k (and experts for the grouped ones). */
static void emit_gemm_dims(lg_buf *b, const struct lg_model *m, int g)
{
	const int64_t *v = m->v;
	int64_t qkv = (v[LG_MK_Q_HEADS] + 2 * v[LG_MK_KV_HEADS]) * v[LG_MK_HEAD_DIM];
	int64_t h = v[LG_MK_HIDDEN], q = v[LG_MK_Q_HEADS] * v[LG_MK_HEAD_DIM];
	int64_t si = v[LG_MK_SHARED_INTERMEDIATE], ei = v[LG_MK_EXPERT_INTERMEDIATE];
	const int64_t n[] = {[G_QKV] = qkv, [G_OUT] = h, [G_SHARED_UP] = 2 * si, [G_SHARED_DOWN] = h,
			     [G_EXPERT_UP] = 2 * ei, [G_EXPERT_DOWN] = h};
	const int64_t k[] = {[G_QKV] = h, [G_OUT] = q, [G_SHARED_UP] = h, [G_SHARED_DOWN] = si,
			     [G_EXPERT_UP] = h, [G_EXPERT_DOWN] = ei};
	lg_emit(b, ", \"n\": %lld, \"k\": %lld", (long long)n[g], (long long)k[g]);
	if (g == G_EXPERT_UP || g == G_EXPERT_DOWN)
		lg_emit(b, ", \"experts\": %lld", (long long)v[LG_MK_EXPERTS]);
}

/* The kernel object of a step, as JSON text the spec parser reads. */
static char *step_json(const struct lg_model *m, const struct step *st)
{
	lg_buf b;
	lg_buf_init(&b);
	lg_emit(&b, "{\"op\": \"%s\", \"pass\": \"%s\", \"dtype\": \"%s\"", st->op,
		lg_pass_names[st->pass], st->dtype);
	if (st->gemm)
		emit_gemm_dims(&b, m, st->gemm);
	for (int i = 0; i < st->ndims; i++)
		lg_emit(&b, ", \"%s\": %lld", st->dims[i].key,
			(long long)m->v[st->dims[i].from]);
	if (st->flags & EPS) {
		char eps[32];
		lg_json_number_text(m->eps, eps);
		lg_emit(&b, ", \"eps\": %s", eps);
	}
	if (st->flags & ROPE) {
		char f[32];
		lg_json_number_text(m->rotary_fraction, f);
		lg_emit(&b, ", \"rotary_fraction\": %s, \"head_layout\": \"%s\"", f,
			head_layouts[m->plain_heads]);
	}
	if (st->flags & QUANT)
		lg_emit(&b, ", \"quant\": {\"format\": \"%s\", \"block\": %d, \"round_scale\": %s, "
			    "\"output\": \"both\"}",
			lg_quant_format_names[m->fp8.format], m->fp8.block,
			m->fp8.round_scale ? "true" : "false");
	lg_emit(&b, "}");
	return lg_buf_finish(&b, NULL);
}

/* The model key a spec key of a step comes from ("quant" -> "fp8"). */
static const char *model_key_of(const struct step *st, const char *key, size_t n)
{
	if (n == 5 && strncmp(key, "quant", 5) == 0)
		return "fp8";
	for (int i = 0; i < st->ndims; i++) {
		const char *d = st->dims[i].key;
		if (strlen(d) == n && strncmp(key, d, n) == 0)
			return lg_model_key_names[st->dims[i].from];
	}
	return NULL;
}

/* Where a GEMM step's n and k come from: the model keys and the formula. */
struct gemm_source {
	int keys[3], nkeys; /* enum lg_model_key */
	const char *formula;
};
static const struct gemm_source gemm_n[] = {
	[G_QKV] = {{LG_MK_Q_HEADS, LG_MK_KV_HEADS, LG_MK_HEAD_DIM}, 3,
		   "n = (q_heads + 2 kv_heads) head_dim"},
	[G_OUT] = {{LG_MK_HIDDEN}, 1, "n = hidden"},
	[G_SHARED_UP] = {{LG_MK_SHARED_INTERMEDIATE}, 1, "n = 2 shared_intermediate"},
	[G_SHARED_DOWN] = {{LG_MK_HIDDEN}, 1, "n = hidden"},
	[G_EXPERT_UP] = {{LG_MK_EXPERT_INTERMEDIATE}, 1, "n = 2 expert_intermediate"},
	[G_EXPERT_DOWN] = {{LG_MK_HIDDEN}, 1, "n = hidden"},
};
static const struct gemm_source gemm_k[] = {
	[G_QKV] = {{LG_MK_HIDDEN}, 1, "k = hidden"},
	[G_OUT] = {{LG_MK_Q_HEADS, LG_MK_HEAD_DIM}, 2, "k = q_heads head_dim"},
	[G_SHARED_UP] = {{LG_MK_HIDDEN}, 1, "k = hidden"},
	[G_SHARED_DOWN] = {{LG_MK_SHARED_INTERMEDIATE}, 1, "k = shared_intermediate"},
	[G_EXPERT_UP] = {{LG_MK_HIDDEN}, 1, "k = hidden"},
	[G_EXPERT_DOWN] = {{LG_MK_EXPERT_INTERMEDIATE}, 1, "k = expert_intermediate"},
};

/* The model keys a GEMM step's spec key (n, k; experts is a model key by
 * its own name) comes from, or NULL. */
static const struct gemm_source *gemm_source_of(const struct step *st, const char *key, size_t n)
{
	if (!st->gemm || n != 1)
		return NULL;
	return key[0] == 'n' ? &gemm_n[st->gemm] : key[0] == 'k' ? &gemm_k[st->gemm] : NULL;
}

/* A family rejected a step's kernel: the message, "<file>: <spec key>...",
 * gets the model key(s) it came from when they differ, and the kernel. */
static lg_status explain(const char *file, const struct lg_model *m, const struct step *st,
			 lg_status status)
{
	const char *msg = lg_last_error();
	size_t nf = strlen(file);
	const char *mk = NULL, *key = msg + nf + 2;
	const struct gemm_source *g = NULL;
	size_t n = 0;
	if (strncmp(msg, file, nf) == 0 && strncmp(msg + nf, ": ", 2) == 0) {
		n = strcspn(key, ".:[ ");
		mk = model_key_of(st, key, n);
		g = gemm_source_of(st, key, n);
	}
	if (g) {
		lg_fail_append(" (model key%s ", g->nkeys > 1 ? "s" : "");
		for (int i = 0; i < g->nkeys; i++)
			lg_fail_append("%s%s %lld", i ? ", " : "", lg_model_key_names[g->keys[i]],
				       (long long)m->v[g->keys[i]]);
		lg_fail_append(": %s; ", g->formula);
	} else if (mk && (strlen(mk) != n || strncmp(mk, key, n) != 0)) {
		lg_fail_append(" (model key %s%.*s; ", mk, (int)strcspn(key + n, ":"), key + n);
	} else {
		lg_fail_append(" (");
	}
	lg_fail_append("needed by kernel %s %s of the training step)", st->op, lg_pass_names[st->pass]);
	return status;
}

static void add_skip(struct lg_model_step *s, const struct step *st, bool family)
{
	for (size_t i = 0; i < s->nskipped; i++)
		if (strcmp(s->skipped[i].op, st->op) == 0 && s->skipped[i].pass == st->pass)
			return;
	s->skipped[s->nskipped++] = (struct lg_model_skip){st->op, st->pass, why_of(st->section, family), NULL, NULL};
}

/* Add a kernel unless an identical one is there. */
static lg_status add_kernel(struct lg_model_step *s, const struct lg_spec *k, const char *file)
{
	char *canon = lg_spec_to_json(k);
	bool dup = false;
	if (!canon)
		return lg_fail(LG_ERR_NO_MEMORY, "%s: out of memory", file);
	for (size_t i = 0; i < s->nkernels && !dup; i++) {
		char *other = lg_spec_to_json(&s->kernels[i]);
		if (!other) {
			free(canon);
			return lg_fail(LG_ERR_NO_MEMORY, "%s: out of memory", file);
		}
		dup = strcmp(other, canon) == 0;
		free(other);
	}
	free(canon);
	if (!dup)
		s->kernels[s->nkernels++] = *k;
	return LG_OK;
}

lg_status lg_model_expand(const struct lg_model *m, const char *file, struct lg_model_step *s)
{
	const char *f = file && file[0] ? file : "<input>";
	memset(s, 0, sizeof *s);
	for (size_t i = 0; i < COUNT(steps); i++) {
		const struct step *st = &steps[i];
		if ((st->flags & SHARED_ONLY) && m->v[LG_MK_SHARED_EXPERTS] == 0)
			continue;
		if ((st->flags & (m->fused_router ? UNFUSED : FUSED)) != 0)
			continue;
		int op = find_op(st->op);
		if (op < 0 || !((lg_family_get((enum lg_op)op)->passes >> st->pass) & 1u)) {
			add_skip(s, st, op < 0);
			continue;
		}
		char *json = step_json(m, st);
		if (!json)
			return lg_fail(LG_ERR_NO_MEMORY, "%s: out of memory", f);
		struct lg_spec k;
		lg_status rc = lg_spec_parse_kernel(json, f, &k);
		free(json);
		if (rc == LG_ERR_SPEC)
			return explain(f, m, st, rc);
		if (rc == LG_OK)
			rc = add_kernel(s, &k, f);
		if (rc != LG_OK)
			return rc;
	}
	return LG_OK;
}

void lg_model_step_for_archs(struct lg_model_step *s, char *const *archs, int narch)
{
	size_t kept = 0;
	for (size_t i = 0; i < s->nkernels; i++) {
		const struct lg_spec *k = &s->kernels[i];
		const char *only = k->fam->target_only;
		int runs = 0;
		for (int a = 0; a < narch && a < LG_MODEL_MAX_ARCHS; a++) {
			if (!only || strcmp(only, archs[a]) == 0) {
				runs++;
				continue;
			}
			bool seen = false;
			for (size_t j = 0; j < s->nskipped && !seen; j++)
				seen = s->skipped[j].arch && strcmp(s->skipped[j].op, k->fam->op) == 0 &&
				       s->skipped[j].pass == k->pass && strcmp(s->skipped[j].arch, archs[a]) == 0;
			if (!seen && s->nskipped < LG_MODEL_MAX_SKIPS)
				s->skipped[s->nskipped++] = (struct lg_model_skip){k->fam->op, k->pass, NULL, archs[a], only};
		}
		if (runs)
			s->kernels[kept++] = *k;
	}
	s->nkernels = kept;
}

/* ------------------------------------------------------------ output */

char *lg_model_step_json(const struct lg_model *m, const struct lg_model_step *s)
{
	lg_buf b;
	lg_buf_init(&b);
	lg_emit(&b, "{\n  \"name\": \"%s training step\",\n  \"model\": \"%s\",\n  \"kernels\": [", m->name,
		m->name);
	for (size_t i = 0; i < s->nkernels; i++) {
		char *k = lg_spec_to_json(&s->kernels[i]);
		if (!k) {
			lg_buf_free(&b);
			return NULL;
		}
		lg_emit(&b, "%s\n    %s", i ? "," : "", k);
		free(k);
	}
	lg_emit(&b, "\n  ],\n  \"skipped\": [");
	for (size_t i = 0; i < s->nskipped; i++)
	{
		const struct lg_model_skip *k = &s->skipped[i];
		lg_emit(&b, "%s\n    {\"op\": \"%s\", \"pass\": \"%s\", ", i ? "," : "", k->op,
			lg_pass_names[k->pass]);
		if (k->arch)
			lg_emit(&b, "\"arch\": \"%s\", \"why\": \"family runs on %s only\"}", k->arch, k->only);
		else
			lg_emit(&b, "\"why\": \"%s\"}", k->why);
	}
	lg_emit(&b, "%s]\n}\n", s->nskipped ? "\n  " : "");
	return lg_buf_finish(&b, NULL);
}

/* ------------------------------------------------------- public API */

lg_status lg_model_expand_text(const char *text, size_t len, const char *filename,
			       char **spec_json)
{
	lg_clear_error();
	if (!spec_json || (!text && len))
		return lg_fail(LG_ERR_INVALID_ARG, "lg_model_expand_text: NULL argument");
	*spec_json = NULL;
	struct lg_model m;
	struct lg_model_step *s = malloc(sizeof *s);
	const char *f = filename && filename[0] ? filename : "<input>";
	lg_status st;
	if (!s)
		return lg_fail(LG_ERR_NO_MEMORY, "%s: out of memory", f);
	if ((st = lg_model_parse(text, len, f, &m)) != LG_OK)
		goto fail;
	if ((st = lg_model_expand(&m, f, s)) != LG_OK)
		goto fail;
	if (!(*spec_json = lg_model_step_json(&m, s)))
		st = lg_fail(LG_ERR_NO_MEMORY, "%s: out of memory", f);
fail:
	free(s);
	return st;
}

lg_status lg_model_expand_file(const char *path, char **spec_json)
{
	lg_clear_error();
	if (!path || !spec_json)
		return lg_fail(LG_ERR_INVALID_ARG, "lg_model_expand_file: NULL argument");
	*spec_json = NULL;
	char *text = NULL;
	size_t len = 0;
	lg_status st = lg_read_file(path, &text, &len);
	if (st == LG_OK)
		st = lg_model_expand_text(text, len, path, spec_json);
	free(text);
	return st;
}
