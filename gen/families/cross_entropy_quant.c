/*
 * cross_entropy_quant.c - family "cross_entropy_quant" (docs/kernels.md K9 and
 * 1.3): the gradient of softmax cross entropy over bf16 logits [tokens,
 * vocab], written only as its blockwise FP8 copies: the FP8 LM head's
 * backward (python/lingen/nn/layers.py, fp8_head) without the bf16 logits
 * gradient (at Ling's vocab 2.6 GB written and read again a step at 8192
 * tokens).
 *
 * Math (K9's backward, cross_entropy.c), per token with label y, m and S
 * from the cross entropy forward (max_logit, sum_exp), g = g[0]:
 *   grad_v = (exp(x_v - m) / S - (1 - e) [v == y] - e / C) g
 * (C = vocab, e the label smoothing; an ignore_index row: 0; a label
 * outside [0, C): no target share), each value rounded to bf16, then
 * quantised as fp8_quant quantises that bf16 gradient: q [tokens, vocab]
 * with s [vocab/128, tokens], qt [vocab, round_up(tokens, 128)] (zeros past
 * tokens) with st [cdiv(tokens, 128), vocab]; quant.output picks the
 * copies. qt's rows may be a wider pitch apart (the run-time size
 * qt_pitch): qt is then one chunk's columns of a whole step's copy.
 * The gradient is computed with the instructions of cross_entropy's
 * backward (cross_entropy_grad.h: lg_ce_exp(x - m) * (g / S) - e g / C,
 * less (1 - e) g at the label, then the bf16 rounding), so the copies are
 * bit for bit cross_entropy's backward (dloss = g[0] on every row) then
 * fp8_quant: the FP8 head's numbers do not change.
 *
 * Strategy: the quant engine (quant_engine.h), bf16 values: a CTA owns 128
 * tokens x 128 classes; its prologue reads the tile's 128 labels, m and
 * g / S into shared memory; the values hook reads 8 logits a 16-byte load
 * and computes their bf16 gradient in registers. The logits are read once
 * and nothing but the copies is written.
 * Tile options: threads 256 / 512 (fp8_quant's), qt_store.
 */
#include <stdio.h>

#include "family.h"

#include "cross_entropy_grad.h"
#include "quant_common.h"
#include "quant_engine.h"

#define TILE 128
/* The widest vocab: o200k's 201088 and more, fp8_quant's widest row. */
#define VOCAB_MAX 262144
/* One CTA a 128 x 128 tile along the grid's x (at most 2^31 - 1). */
#define TOKENS_MAX ((int64_t)(INT32_MAX / (VOCAB_MAX / TILE)) * TILE)
/* qt's widest row pitch: a whole step's copy of up to 2^31 - 128 tokens. */
#define QT_PITCH_MAX ((int64_t)(INT32_MAX / LG_QT_PITCH_BYTES) * LG_QT_PITCH_BYTES)

enum { K_VOCAB, K_INDEX, K_IGNORE, K_SMOOTH, K_QUANT, K_TILE = K_QUANT + LG_QUANT_KEYS, K_THREADS, K_QT_STORE,
       NKEYS };
static const char *const index_names[2] = {"int64", "int32"};
static const char *const index_words[2] = {"i64", "i32"};
static const int64_t threads_ok[] = {256, 512, 0};
static const struct lg_key keys[NKEYS] = {
	[K_VOCAB] = LG_KEY_DIM("vocab", "v", 128, VOCAB_MAX, 128, "classes C: columns of the logits"),
	[K_INDEX] = {.path = "index", .type = LG_KEY_ENUM, .values = index_names, .nvalues = 2, .has_def = true,
		     .def = 0, .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 20, .words = index_words,
		     .doc = "element type of the labels"},
	[K_IGNORE] = {.path = "ignore_index", .type = LG_KEY_INT, .min = INT32_MIN, .max = INT32_MAX,
		      .has_def = true, .def = -100, .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 21, .abbrev = "ii",
		      .doc = "rows with this label get a zero gradient"},
	[K_SMOOTH] = {.path = "label_smoothing", .type = LG_KEY_NUMBER, .lo = -1.0, .hi = 2.0, .has_def = true,
		      .def_num = 0.0, .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 24, .abbrev = "ls",
		      .doc = "e in [0, 1], as torch: label smoothing (target (1 - e) onehot + e / C)"},
	LG_KEYS_QUANT(K_QUANT),
	[K_TILE] = LG_KEY_TILE_OBJ,
	[K_THREADS] = LG_KEY_TILE("threads", "t", 256, 512, threads_ok,
				  "threads per 128 x 128 tile: 256 (8 tokens a thread) or 512 (4 tokens)"),
	[K_QT_STORE] = LG_QE_KEY_QT_STORE,
};

/* qt_pitch: the FP8 head (python/lingen/nn/head.py) runs the tokens in
 * chunks, each launch writing its chunk's columns straight into the whole
 * step's copy (qt at the chunk's first column, a multiple of 128, rows the
 * whole copy's pitch apart), no copy of the chunk's after it. */
static const struct lg_size sizes[] = {
	{"tokens", "M", 0, TOKENS_MAX, "rows of the logits (one CTA per 128 tokens x 128 classes)", 0, 0},
	{"qt_pitch", "QTP", 0, QT_PITCH_MAX,
	 "bytes between qt's rows: 0 for round_up(tokens, 128), else a multiple of 128 at least that (qt: "
	 "the tokens' columns of a wider copy, the columns past round_up(tokens, 128) not written)",
	 0, LG_QT_PITCH_BYTES},
};

enum { ARG_LOGITS, ARG_LABELS, ARG_SUM, ARG_MAX, ARG_G, ARG_Q, ARG_S, ARG_QT, ARG_ST, NARGS };
static const struct lg_arg fwd_args[NARGS] = {
	[ARG_LOGITS] = {"logits", LG_ARG_IN, LG_ELEM_BF16, "tokens, vocab", 16, NULL},
	[ARG_LABELS] = {"labels", LG_ARG_IN, LG_ELEM_INDEX, "tokens", 4, "int64 read as two words: 4-byte aligned"},
	[ARG_SUM] = {"sum_exp", LG_ARG_IN, LG_ELEM_FP32, "tokens", 4, "S, the cross entropy forward's"},
	[ARG_MAX] = {"max_logit", LG_ARG_IN, LG_ELEM_FP32, "tokens", 4, "m, the cross entropy forward's"},
	[ARG_G] = {"g", LG_ARG_IN, LG_ELEM_FP32, "1", 4, "the output gradient of every row (e.g. 1 / rows)"},
	[ARG_Q] = {"q", LG_ARG_OUT, LG_ELEM_E4M3, "tokens, vocab", 8, "rowwise (0 for columnwise)"},
	[ARG_S] = {"s", LG_ARG_OUT, LG_ELEM_FP32, "vocab / 128, tokens", 4,
		   "rowwise scales, transposed (0 for columnwise)"},
	[ARG_QT] = {"qt", LG_ARG_OUT, LG_ELEM_E4M3, "vocab, pick(qt_pitch, " LG_QT_PITCH ", qt_pitch)", 16,
		    "columnwise, transposed, rows qt_pitch (0: round_up(tokens, 128)) bytes apart, zeros from "
		    "tokens to round_up(tokens, 128) (0 for rowwise)"},
	[ARG_ST] = {"st", LG_ARG_OUT, LG_ELEM_FP32, "cdiv(tokens, 128), vocab", 8, "columnwise scales (0 for rowwise)"},
};

static lg_status validate(const struct lg_spec *s, const char *where)
{
	return lg_ce_check_smoothing(lg_spec_num(s, K_SMOOTH), lg_spec_int(s, K_VOCAB), where);
}

static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	(void)t;
	/* fp8_quant's defaults: bf16 values, 256 threads with power-of-two
	 * scales, 512 with the exact divide (its registers) */
	lg_qe_plan(s, p, lg_spec_int(s, K_VOCAB), K_THREADS, -1, -1, K_QT_STORE, 1);
	p->nentries = 1;
	snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
	return LG_OK;
}

/* A pitch given (not 0) holds the launch's round_up(tokens, 128) columns. */
static lg_status check_sizes(const struct lg_plan *p, const int64_t *sz)
{
	int64_t need = (sz[0] + LG_QT_PITCH_BYTES - 1) / LG_QT_PITCH_BYTES * LG_QT_PITCH_BYTES;
	if (!sz[1] || sz[1] >= need)
		return LG_OK;
	return lg_fail(LG_ERR_INVALID_ARG, "%s: qt_pitch = %lld at tokens = %lld, allowed: 0 or at least "
		       "round_up(tokens, %d) = %lld", p->entry[0], (long long)sz[1], (long long)sz[0],
		       LG_QT_PITCH_BYTES, (long long)need);
}

static void geometry(const struct lg_plan *p, int e, const int64_t *sz, struct lg_launch_dim *d)
{
	(void)e;
	struct lg_qe q = lg_qe_planned(NULL, p, LG_QE_FLAT);
	lg_qe_geometry(&q, sz[0], 0, d);
}

/* The spec, for the hooks. */
struct ctx {
	const struct lg_spec *s;
};

/* Once a CTA: the tile's 128 tokens' label (its column), m, g / S and
 * whether ignored, into shared memory; the shares gy, ge of g[0]. */
static void prologue(lg_buf *b, const struct lg_qe *e, void *vctx)
{
	const struct ctx *c = vctx;
	(void)e;
	lg_line(b, "__shared__ float ce_m[%d], ce_gs[%d]; // m, g / S of the tile's tokens", TILE, TILE);
	lg_line(b, "__shared__ i64 ce_y[%d]; // their labels", TILE);
	lg_line(b, "__shared__ bool ce_ign[%d]; // ignored: a zero gradient", TILE);
	lg_line(b, "const float g0 = *(const float *)g;");
	lg_ce_emit_shares(b, lg_spec_num(c->s, K_SMOOTH), lg_spec_int(c->s, K_VOCAB));
	lg_open(b, "if (threadIdx.x < %d) {", TILE);
	lg_comment(b, "(a token past the tile's last: the last's, never used)");
	lg_line(b, "const i64 tok = m0 + min((int)threadIdx.x, rows - 1);");
	lg_ce_emit_label(b, lg_spec_int(c->s, K_INDEX) == 1, lg_spec_int(c->s, K_IGNORE), "tok");
	lg_line(b, "ce_y[threadIdx.x] = y;");
	lg_line(b, "ce_ign[threadIdx.x] = ign;");
	lg_line(b, "ce_m[threadIdx.x] = ((const float *)max_logit)[tok];");
	lg_comment(b, "as cross_entropy's backward: an fp32 divide");
	lg_line(b, "ce_gs[threadIdx.x] = g0 / ((const float *)sum_exp)[tok];");
	lg_close(b);
	lg_line(b, "__syncthreads();");
}

/* One token's 8 gradient values in bf16: cross_entropy's backward's
 * arithmetic on a 16-byte load of its logits (an ignored token: zeros).
 * The body of the engine's loop over the thread's tokens: no block of its
 * own needed. */
static void values(lg_buf *b, const struct lg_qe *e, const struct lg_qe_row *r, void *vctx)
{
	(void)vctx;
	struct lg_qe_row ld = *r;
	ld.dst = "xv";
	lg_line(b, "lg_u32x4 xv;");
	lg_qe_emit_load_bf16(b, e, &ld, "logits");
	lg_line(b, "const int lr = %s;", r->lrow);
	lg_line(b, "const float mr = ce_m[lr], gs = ce_gs[lr];");
	lg_line(b, "const i64 yc = ce_y[lr] - %s; // the label among the 8 (or outside)", r->col);
	lg_line(b, "float o[8];");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int j = 0; j < 8; j++) {");
	lg_line(b, "o[j] = lg_ce_exp(lg_bf16_at(xv, j) - mr) * gs - ge;");
	lg_line(b, "if (j == yc) o[j] -= gy;");
	lg_close(b);
	lg_line(b, "%s = ce_ign[lr] ? lg_u32x4{0u, 0u, 0u, 0u} : lg_pack_bf16x8(o);", r->dst);
}

static void emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	struct lg_qe e = lg_qe_planned(s, p, LG_QE_FLAT);
	struct ctx c = {s};
	e.qt_pitch = "QTP";
	struct lg_qe_hooks h = {.values = values, .prologue = prologue, .ctx = &c};
	(void)t;
	lg_ce_emit_exp(b);
	lg_qe_emit_kernel(b, s, p, &e, &h, "cross entropy gradient, blockwise FP8");
}

/* Tile variants for `lingen tune`: fp8_quant's. */
static int candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max)
{
	return lg_qe_flat_candidates(s, t, out, max, K_THREADS, threads_ok, K_QT_STORE);
}

static void uses(const struct lg_spec *s, unsigned char *used)
{
	lg_quant_uses(s, used, ARG_Q, ARG_S, ARG_QT, ARG_ST);
}

static const char doc_forward[] =
	"K9's gradient as blockwise FP8 (op \"cross_entropy_quant\", the FP8 LM head's\n"
	"  backward): logits [tokens, vocab] bf16, labels [tokens] int64 (int32 with\n"
	"  \"index\": \"int32\"), sum_exp S and max_logit m [tokens] fp32 from the\n"
	"  cross entropy forward, g [1] fp32 (device); grad = (exp(x - m) / S -\n"
	"  (1 - e) onehot - e / C) g[0] rounded to bf16 (0 on ignore_index rows),\n"
	"  quantised as fp8_quant: q, s, qt, st as fp8_quant's (0 for a copy\n"
	"  quant.output does not ask for). Bit for bit cross entropy's backward\n"
	"  then fp8_quant. qt_pitch (0: round_up(tokens, 128)): qt's row pitch,\n"
	"  so that qt may be columns a.. of a wider copy (a multiple of 128).";

const struct lg_family lg_family_cross_entropy_quant = {
	.op = "cross_entropy_quant",
	.summary = "cross entropy gradient straight into blockwise FP8 copies (the FP8 LM head's backward) (K9)",
	.passes = 1u << LG_PASS_FORWARD,
	.dtypes = 1u << LG_DTYPE_BF16,
	.nkeys = NKEYS,
	.keys = keys,
	.sig = {[LG_PASS_FORWARD] = {2, sizes, NARGS, fwd_args, doc_forward}},
	.validate = validate,
	.uses = uses,
	.plan = plan,
	.emit = emit,
	.geometry = geometry,
	.check_sizes = check_sizes,
	.candidates = candidates,
};
