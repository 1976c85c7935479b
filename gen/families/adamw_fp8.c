/*
 * adamw_fp8.c - family "adamw_fp8" (issue 35, item 2; docs/kernels.md G2):
 * one AdamW step of a 2-D weight w [rows, hidden] (expert weights [E, N, K]
 * as one [E N, K] weight) in place, and in the same pass the weight's FP8
 * copies the next forward reads, as fp8_quant_weight (transposed) writes
 * them from the updated weight: q [rows, hidden] e4m3, s [cdiv(rows, 128),
 * hidden / 128] (one scale a 128 x 128 tile), qt [hidden, rows] = q^T and
 * st [hidden / 128, cdiv(rows, 128)] = s^T.
 * The update is family adamw's (adamw.h: the same emitted code, so p, m and
 * v are bit for bit the adamw kernel's): dtype is the weight's type (bf16:
 * a bf16 model's own weight, updated in fp32 and rounded once; fp32: master
 * weights); "grad" and "moments" as adamw's; step and lr in device memory.
 * The quantised values are the weight as stored after the step (the bf16
 * rounding of a bf16 weight: the bytes fp8_quant_weight gives for the new
 * weight; an fp32 weight quantised from its fp32 values).
 * hidden must be a multiple of 128 (as fp8_quant_weight); rows any count:
 * a partial last row of tiles takes its amax over its real rows.
 * Expert weights (key expert_rows N, a multiple of 128, so that each tile
 * lies within one expert): the transposed copies are written per expert,
 * qt [E, hidden, N] and st [E, hidden / 128, N / 128] (expert e's blocks
 * one after the other: what the grouped GEMMs' dgrad reads, as
 * lingen.nn._quant.experts_transposed gives it), each tile's lines at its
 * expert's block with rows N apart; rows not a multiple of N: a short last
 * expert (its [hidden, n] block).
 *
 * Strategy: the quant engine (quant_engine.h), layout LG_QE_TILE128 (its
 * weight-tile emitter, quant_tile.c), one CTA a 128 x 128 tile, as
 * fp8_quant_weight; its values hook loads a thread's 8 elements of p, g,
 * m and v (16-byte vectors), updates them, stores p, m and v, and hands
 * the new weight to the engine (amax, scales, q rows, the staged
 * transposed lines). Each element read and written once:
 * 28 B an element with fp32 state and a bf16 weight's 2 + 2 + 2 B plus 2 B
 * of q (10 B with bf16 grads and moments), against adamw's pass plus
 * fp8_quant_weight's (2 B read, 2 B written) of the two kernels.
 */
#include <stdio.h>

#include "adamw.h"
#include "error.h"
#include "family.h"

#include "quant_common.h"
#include "quant_engine.h"

#define HIDDEN_MAX 65536
#define ROWS_MAX (((int64_t)INT32_MAX / (HIDDEN_MAX / 128)) * 128)

enum { K_HIDDEN, K_EXPERT_ROWS, K_QUANT, K_HP = K_QUANT + LG_QUANT_KEYS, K_TILE = K_HP + LG_ADAMW_KEYS, K_THREADS, NKEYS };
enum { K_GRAD = K_HP + LG_ADAMW_KEY_GRAD, K_MOMENTS = K_HP + LG_ADAMW_KEY_MOMENTS };
static const int64_t threads_ok[] = {256, 512, 0};
static const struct lg_key keys[NKEYS] = {
	[K_HIDDEN] = LG_KEY_DIM("hidden", "h", 128, HIDDEN_MAX, 128, "columns of the weight (its input features)"),
	[K_EXPERT_ROWS] = {.path = "expert_rows", .type = LG_KEY_INT, .min = 0, .max = ROWS_MAX, .multiple = 128,
			   .has_def = true, .def = 0, .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 11, .abbrev = "er",
			   .doc = "0: one weight; N: expert weights [E, N, K] as [E N, K] rows, qt and st each "
				  "expert's own (qt [E, K, N], st [E, K/128, N/128])"},
	LG_KEYS_QUANT(K_QUANT),
	LG_KEYS_ADAMW(K_HP),
	[K_TILE] = LG_KEY_TILE_OBJ,
	[K_THREADS] = LG_KEY_TILE("threads", "t", 256, 512, threads_ok,
				  "threads per 128 x 128 tile: 512 (4 rows a thread, the default) or 256 (8)"),
};

static const struct lg_size sizes[] = {
	{"rows", "M", 0, ROWS_MAX, "rows of the weight (its output features)", 0, 0},
};

enum { ARG_P, ARG_G, ARG_M, ARG_V, ARG_STEP, ARG_LR, ARG_Q, ARG_S, ARG_QT, ARG_ST, NARGS };
static const struct lg_arg fwd_args[NARGS] = {
	[ARG_P] = {"w", LG_ARG_IN, LG_ELEM_DTYPE, "rows, hidden", 16, "the weight, updated in place"},
	[ARG_G] = {"grad", LG_ARG_IN, LG_ELEM_U8, "rows, hidden * (4 - 2 * grad)", 16,
		   "the gradient (fp32 or bf16 as \"grad\", rows x hidden elements)"},
	[ARG_M] = {"exp_avg", LG_ARG_IN, LG_ELEM_U8, "rows, hidden * (4 - 2 * moments)", 16,
		   "exp_avg (as \"moments\"), updated in place"},
	[ARG_V] = {"exp_avg_sq", LG_ARG_IN, LG_ELEM_U8, "rows, hidden * (4 - 2 * moments)", 16,
		   "exp_avg_sq (as \"moments\"), updated in place"},
	[ARG_STEP] = {"step", LG_ARG_IN, LG_ELEM_FP32, "1", 4, "the step count after this step (1 first)"},
	[ARG_LR] = {"lr", LG_ARG_IN, LG_ELEM_FP32, "1", 4, "the learning rate"},
	[ARG_Q] = {"q", LG_ARG_OUT, LG_ELEM_E4M3, "rows, hidden", 8, "the new weight in e4m3"},
	[ARG_S] = {"s", LG_ARG_OUT, LG_ELEM_FP32, "cdiv(rows, 128), hidden / 128", 4, "one scale a 128 x 128 tile"},
	[ARG_QT] = {"qt", LG_ARG_OUT, LG_ELEM_E4M3, "hidden, rows", 8,
		    "q^T (with expert_rows N: each expert's, [E, hidden, N])"},
	[ARG_ST] = {"st", LG_ARG_OUT, LG_ELEM_FP32, "hidden / 128, cdiv(rows, 128)", 4,
		    "s^T (with expert_rows N: each expert's, [E, hidden / 128, N / 128])"},
};

static lg_status validate(const struct lg_spec *s, const char *where)
{
	if (lg_spec_quant(s).output != LG_QOUT_BOTH)
		return lg_spec_error(where, "quant.output: found \"%s\", allowed: \"both\" (a weight has one copy, "
				     "128 x 128 tiles)", lg_quant_output_names[lg_spec_quant(s).output]);
	return lg_adamw_validate_hp(s, where, K_HP);
}

/* The engine's plan, 512 threads unless tile.threads says (a thread's
 * update holds 4 arrays of 8 floats a row), values of the weight's type. */
static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	(void)t;
	lg_qe_plan(s, p, lg_spec_int(s, K_HIDDEN), K_THREADS, -1, -1, -1, 1);
	if (!lg_spec_has(s, K_THREADS))
		p->v[LG_QE_PV_THREADS] = p->tile[K_THREADS] = 512;
	p->v[LG_QE_PV_F32] = s->dtype == LG_DTYPE_FP32;
	p->nentries = 1;
	snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
	return LG_OK;
}

static void geometry(const struct lg_plan *p, int e, const int64_t *sz, struct lg_launch_dim *d)
{
	(void)e;
	struct lg_qe q = lg_qe_planned(NULL, p, LG_QE_TILE128);
	lg_qe_geometry(&q, sz[0], 0, d);
}

static const char *type_word(bool bf16)
{
	return bf16 ? "bf16" : "f32";
}

/* The values hook: a thread's 8 elements of a real row updated and stored,
 * the new weight handed to the engine (a row past the tile's last: nothing
 * loaded or stored; the engine counts it as 0). */
static void hook_values(lg_buf *b, const struct lg_qe *e, const struct lg_qe_row *r, void *ctx)
{
	const struct lg_spec *s = ctx;
	bool pb = e->vals == LG_QE_BF16, gb = lg_spec_int(s, K_GRAD) == LG_ADAMW_BF16;
	bool mb = lg_spec_int(s, K_MOMENTS) == LG_ADAMW_BF16;
	lg_open(b, "if %s {", r->valid);
	lg_line(b, "const u64 ae = (u64)(%s * %lld + %s); // the first element", r->row, (long long)e->n, r->col);
	lg_line(b, "float ap[8], ag[8], am[8], av[8];");
	lg_line(b, "lg_ld_%s(w, ae, ap);", type_word(pb));
	lg_line(b, "lg_ld_%s(grad, ae, ag);", type_word(gb));
	lg_line(b, "lg_ld_%s(exp_avg, ae, am);", type_word(mb));
	lg_line(b, "lg_ld_%s(exp_avg_sq, ae, av);", type_word(mb));
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int j = 0; j < 8; j++)");
	lg_line(b, "\tlg_adamw1(ap[j], ag[j], am[j], av[j], k);");
	lg_line(b, "lg_st_%s(w, ae, ap);", type_word(pb));
	lg_line(b, "lg_st_%s(exp_avg, ae, am);", type_word(mb));
	lg_line(b, "lg_st_%s(exp_avg_sq, ae, av);", type_word(mb));
	if (pb) {
		lg_line(b, "%s = lg_pack_bf16x8(ap); // the stored weight", r->dst);
	} else {
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int j = 0; j < 8; j++)");
		lg_line(b, "\t%s[j] = ap[j];", r->dst);
	}
	lg_close(b);
}

/* The step's scalars, once a CTA. */
static void hook_prologue(lg_buf *b, const struct lg_qe *e, void *ctx)
{
	const struct lg_spec *s = ctx;
	(void)e;
	lg_adamw_emit_scalars(b, lg_spec_num(s, K_HP + LG_ADAMW_KEY_BETA1), lg_spec_num(s, K_HP + LG_ADAMW_KEY_BETA2),
			      lg_spec_num(s, K_HP + LG_ADAMW_KEY_WD));
}

static void emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	struct lg_qe e = lg_qe_planned(s, p, LG_QE_TILE128);
	bool pb = s->dtype != LG_DTYPE_FP32, gb = lg_spec_int(s, K_GRAD) == LG_ADAMW_BF16;
	bool mb = lg_spec_int(s, K_MOMENTS) == LG_ADAMW_BF16;
	e.cols = true;
	e.expert_rows = lg_spec_int(s, K_EXPERT_ROWS);
	struct lg_qe_hooks h = {.values = hook_values, .prologue = hook_prologue, .ctx = (void *)s};
	(void)t;
	lg_section(b, "the AdamW update of this spec (family adamw's)", NULL);
	lg_adamw_emit_update(b, lg_spec_num(s, K_HP + LG_ADAMW_KEY_BETA1), lg_spec_num(s, K_HP + LG_ADAMW_KEY_BETA2),
			     lg_spec_num(s, K_HP + LG_ADAMW_KEY_EPS));
	if (!(pb && gb && mb))
		lg_adamw_emit_access(b, false, 8);
	if (pb || gb || mb)
		lg_adamw_emit_access(b, true, 8);
	lg_qe_emit_kernel(b, s, p, &e, &h, "AdamW step of a weight and its FP8 copies in 128 x 128 tiles");
}

static int candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max)
{
	return lg_candidate_values(s, t, out, 0, max, K_THREADS, threads_ok);
}

/* What a launch computes: the comment of its typed launcher (lingen_ops.h). */
static const char doc_forward[] =
	"Issue 35: one AdamW step of a weight w [rows, hidden] in place (op\n"
	"  \"adamw_fp8\": family adamw's update; grad, exp_avg, exp_avg_sq as \"grad\"\n"
	"  and \"moments\"; step and lr 0-d fp32 in device memory) and, in the same\n"
	"  pass, its FP8 copies as fp8_quant_weight (transposed) gives them for the\n"
	"  new weight: q [rows, hidden] e4m3, s [cdiv(rows, 128), hidden/128],\n"
	"  qt = q^T, st = s^T; with expert_rows N (expert weights [E, N, hidden])\n"
	"  each expert's: qt [E, hidden, N], st [E, hidden/128, N/128].";

const struct lg_family lg_family_adamw_fp8 = {
	.op = "adamw_fp8",
	.summary = "fused AdamW step of a weight writing its FP8 copies (128 x 128 tiles, transposed too)",
	.passes = 1u << LG_PASS_FORWARD,
	.dtypes = 1u << LG_DTYPE_BF16 | 1u << LG_DTYPE_FP32,
	.nkeys = NKEYS,
	.keys = keys,
	.sig = {[LG_PASS_FORWARD] = {1, sizes, NARGS, fwd_args, doc_forward}},
	.validate = validate,
	.plan = plan,
	.emit = emit,
	.geometry = geometry,
	.candidates = candidates,
};
