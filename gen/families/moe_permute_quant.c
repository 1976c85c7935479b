/*
 * moe_permute_quant.c - family "moe_permute_quant" (docs/kernels.md K4b): MoE
 * permute + pad + blockwise FP8 quantisation in one kernel, into the
 * per-expert layout a grouped FP8 GEMM takes (docs/kernels.md 1.3).
 *
 * Padded row r of expert e (rows [offsets[e], offsets[e + 1]) of the
 * padded dispatch, padded_counts[e] = round_up(count_e, multiple) of them)
 * holds x[row_index[r]], or zeros for a padding row (row_index[r] < 0);
 * each expert's padded segment is quantised as a tensor of its own: q
 * [rows, hidden] e4m3 with s a [hidden / 128, P_e] block an expert (rowwise
 * 1x128), qt a [hidden, P_e] block an expert with st cdiv(P_e, 128) rows an
 * expert (columnwise 128x1, transposed); the copies quant.output asks for.
 * Padding rows are quantised zeros (their 1x128 scales the zero block's).
 * out_probs[r] = probs[row_index[r], e] (0 on padding rows). The inputs are
 * moe_row_map's row_index and padded_counts; rows = tokens * top_k +
 * experts * (multiple - 1) is the static capacity (P is known on the device
 * only; past 2^31 - 1 the launch is refused: int32 row ids), and rows past
 * P (and st rows past the last expert's) are not written.
 *
 * Strategy: the FP8 quant engine (quant_engine.h, the per-expert layout):
 * a CTA quantises a 128-row tile of one expert's segment x its feature
 * blocks, the engine finding the expert by a warp scan of padded_counts;
 * this family's values hook gathers each row from its source token
 * (row_index, one 16-byte load of 8 bf16 a thread and row, the loads of a
 * thread's rows issued together; x rows are read once per expert they go
 * to, from L2 after the first) and the prologue writes the tile's
 * probabilities. No intermediate permuted bf16 copy is written.
 * tile.prefetch 1 (the default; 0 gathers into registers): the rows of each feature block
 * are copied by cp.async into one of two 32 KB shared stages (dynamic
 * shared memory) while the block before is quantised, each thread copying
 * the 16-byte pieces it then reads itself (no barrier); the gathers of the
 * next block overlap this one's maxima and stores instead of waiting for
 * them (2 CTAs an SM, as the default's registers allow). The first block
 * still waits for its copies.
 *
 * Bytes at the target (8192 tokens, hidden 2048, top-8, 256 experts,
 * multiple 16, output both): x read once from DRAM (32 MB; its 8 reads a
 * token hit L2 after the first), q and qt P x 2048 bytes each (P about
 * 67.5K padded rows: 138 MB each), s P x 16 and st about 3 x 256 rows of
 * 2048 fp32 (4.3 + 6.3 MB), row_index and out_probs (0.3 MB each): about
 * 320 MB, 76 us at the 4.23 TB/s copy ceiling (the bench counts 338 MB at
 * the capacity rows, 80 us); the goal of 95 us is 84% of it. Measured
 * 186 us (DRAM 56%, issue 46%, 2 CTAs of 8 warps an SM by registers): a
 * tile's critical path is three dependent trips (padded_counts' block
 * scan, row_index, the gathered rows) and then its loads, maxima and
 * stores in turn, with only 16 warps an SM to overlap them. With the
 * prefetch (the default since): 148.8 us, the first block's three trips
 * per tile still exposed.
 */
#include <stdio.h>

#include "family.h"

#include "error.h"
#include "moe_common.h"
#include "quant_common.h"
#include "quant_engine.h"

#define HIDDEN_MAX 32768

enum { K_HIDDEN, K_EXPERTS, K_TOPK, K_MULTIPLE, K_QUANT, K_TILE = K_QUANT + LG_QUANT_KEYS, K_THREADS,
       K_FBLOCKS, K_MIN_CTAS, K_PREFETCH, NKEYS };
static const int64_t threads_ok[] = {256, 512, 0};
static const int64_t fblocks_ok[] = {1, 2, 4, 8, 0};
static const struct lg_key keys[NKEYS] = {
	[K_HIDDEN] = LG_KEY_DIM("hidden", "h", 128, HIDDEN_MAX, 128, "features per token (a multiple of 128)"),
	LG_KEYS_MOE(K_EXPERTS),
	LG_KEYS_QUANT(K_QUANT),
	[K_TILE] = LG_KEY_TILE_OBJ,
	[K_THREADS] = LG_KEY_TILE("threads", "t", 256, 512, threads_ok,
				  "threads per 128 x 128 tile: 256 (8 rows a thread) or 512 (4 rows)"),
	[K_FBLOCKS] = LG_KEY_TILE("fblocks", "f", 1, 8, fblocks_ok,
				  "128-feature blocks a CTA quantises in turn (one expert lookup for all)"),
	[K_MIN_CTAS] = LG_KEY_TILE_MIN_CTAS,
	[K_PREFETCH] = LG_KEY_TILE("prefetch", "a", 0, 1, NULL,
				   "1: each feature block's rows copied into shared memory (cp.async) while the "
				   "block before is quantised; 0: loaded into registers"),
};

static const struct lg_size sizes[] = {{"tokens", "T", 0, (int64_t)1 << 24, "tokens", 0, 0}};

#define ROWS LG_MOE_ROWS
enum { A_X, A_PROBS, A_INDEX, A_PADDED, A_Q, A_S, A_QT, A_ST, A_OUTP, NARGS };
static const struct lg_arg args[NARGS] = {
	[A_X] = {"x", LG_ARG_IN, LG_ELEM_BF16, "tokens, hidden", 16, "the tokens"},
	[A_PROBS] = {"probs", LG_ARG_OPT_IN, LG_ELEM_FP32, "tokens, experts", 4, "router probabilities (0: none)"},
	[A_INDEX] = {"row_index", LG_ARG_IN, LG_ELEM_I32, ROWS, 4, "moe_row_map: source token of each row"},
	[A_PADDED] = {"padded_counts", LG_ARG_IN, LG_ELEM_I32, "experts", 4, "moe_row_map: rows of each expert"},
	[A_Q] = {"q", LG_ARG_OUT, LG_ELEM_E4M3, ROWS ", hidden", 16, "rowwise data (0 for columnwise)"},
	[A_S] = {"s", LG_ARG_OUT, LG_ELEM_FP32, "hidden / 128, " ROWS, 4,
		 "rowwise scales: a [hidden/128, P_e] block an expert (0 for columnwise)"},
	[A_QT] = {"qt", LG_ARG_OUT, LG_ELEM_E4M3, "hidden, " ROWS, 16,
		  "columnwise data: a [hidden, P_e] block an expert (0 for rowwise)"},
	[A_ST] = {"st", LG_ARG_OUT, LG_ELEM_FP32, "cdiv(" ROWS ", 128) + experts, hidden", 8,
		  "columnwise scales: cdiv(P_e, 128) rows an expert (a capacity; 0 for rowwise)"},
	[A_OUTP] = {"out_probs", LG_ARG_OPT_OUT, LG_ELEM_FP32, ROWS, 4, "probs[t, e] of each row (0: padding)"},
};

enum { P_HIDDEN, P_THREADS, P_FBLOCKS, P_EXPERTS, P_TOPK, P_MULTIPLE, P_MIN_CTAS, P_PREFETCH };

/* tile.prefetch: two stages of a 128-row x 128-feature bf16 block (dynamic
 * shared memory) */
#define STAGE_BYTES (128 * 128 * 2)

static struct lg_qe engine(const struct lg_spec *s, const struct lg_plan *p, char *m, size_t mlen, char *ne,
			   size_t nlen)
{
	long long pad = (long long)(p->v[P_EXPERTS] * (p->v[P_MULTIPLE] - 1)); /* 0: no padding */
	snprintf(m, mlen, "(T * %lld%s%.0lld)", (long long)p->v[P_TOPK], pad ? " + " : "", pad);
	snprintf(ne, nlen, "%lld", (long long)p->v[P_EXPERTS]);
	/* one token tile a CTA: lg_qe.tiles 2 and 4 measured 149.8 / 161.0 us
	 * against 146.2 (8192 tokens, git history, commit 8b8e268: bench/h200-2026-12-01f) */
	struct lg_qe e = {.n = p->v[P_HIDDEN], .threads = (int)p->v[P_THREADS], .fblocks = (int)p->v[P_FBLOCKS],
			  .vals = LG_QE_BF16, .layout = LG_QE_EXPERTS, .m = m, .counts = "padded_counts",
			  .experts = ne};
	if (s) {
		e.rows = lg_quant_rowwise(s);
		e.cols = lg_quant_colwise(s);
		e.pow2 = lg_quant_pow2(s);
	}
	return e;
}

static lg_status validate(const struct lg_spec *s, const char *where)
{
	return lg_moe_validate(s, K_EXPERTS, where);
}

static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	(void)t;
	int64_t nb = lg_spec_int(s, K_HIDDEN) / 128;
	int64_t fb = lg_spec_has(s, K_FBLOCKS) ? lg_spec_int(s, K_FBLOCKS) : 4;
	p->v[P_HIDDEN] = nb * 128;
	p->tile[K_THREADS] = p->v[P_THREADS] =
		lg_spec_has(s, K_THREADS) ? lg_spec_int(s, K_THREADS) : lg_quant_pow2(s) ? 256 : 512;
	p->tile[K_FBLOCKS] = p->v[P_FBLOCKS] = fb < nb ? fb : nb;
	/* prefetch by default: 148.8 us against 188.3 without on the H200 at the
	 * target (git history, commit 8b8e268: bench/h200-2026-12-01d) */
	p->tile[K_PREFETCH] = p->v[P_PREFETCH] = lg_spec_has(s, K_PREFETCH) ? lg_spec_int(s, K_PREFETCH) : 1;
	/* 100 to 128 registers a thread at 256 threads: 2 CTAs an SM (ptxas);
	 * a higher minimum is a tuning choice. tile.prefetch: 2 (its 64 KB of
	 * stages allow no more; uncapped, ptxas took 164 registers, 1 CTA) */
	p->tile[K_MIN_CTAS] = p->v[P_MIN_CTAS] =
		lg_spec_has(s, K_MIN_CTAS) ? lg_spec_int(s, K_MIN_CTAS) : p->v[P_PREFETCH] ? 2 : 1;
	p->v[P_EXPERTS] = lg_spec_int(s, K_EXPERTS);
	p->v[P_TOPK] = lg_spec_int(s, K_TOPK);
	p->v[P_MULTIPLE] = lg_spec_int(s, K_MULTIPLE);
	p->nentries = 1;
	snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
	return LG_OK;
}

static void geometry(const struct lg_plan *p, int e, const int64_t *sz, struct lg_launch_dim *d)
{
	(void)e;
	char m[64], ne[24];
	struct lg_qe q = engine(NULL, p, m, sizeof m, ne, sizeof ne);
	int64_t rows = sz[0] * p->v[P_TOPK] + p->v[P_EXPERTS] * (p->v[P_MULTIPLE] - 1);
	lg_qe_geometry(&q, sz[0] > 0 ? rows : 0, p->v[P_EXPERTS], d);
	if (p->v[P_PREFETCH])
		d->smem = 2 * STAGE_BYTES;
	lg_moe_refuse_past_int32(sz[0], p->v[P_TOPK], p->v[P_EXPERTS], p->v[P_MULTIPLE], d);
}

/* tile.prefetch: lg_gather, the cp.async copies of a thread's rows (those
 * the values hook reads: r0 + i, a row past the tile's last taking the last
 * one's source) x its 16 bytes of the feature block at feature k0, into a
 * stage (row r0 + i at 256 (r0 + i) bytes; a padding row's copy fills
 * zeros); none for a thread whose rows are all absent; one commit group. */
static void emit_gather_helper(lg_buf *b, const struct lg_qe *e)
{
	lg_comment(b, "tile.prefetch: this thread's rows r0 + i (past the tile's last: the last one's source)");
	lg_comment(b, "x its 16 bytes of feature block k0 into `stage` (row r0 + i at 256 (r0 + i); padding rows");
	lg_comment(b, "zero-filled) by cp.async, one commit group (empty for a thread with no row).");
	lg_line(b, "static __device__ __forceinline__ void lg_gather(u8 *stage, u64 x, const int *ri, i64 m0, int rows,");
	lg_line(b, "\t\t\t\t\t\t\t int r0, int lb, i64 k0)");
	lg_open(b, "{");
	lg_open(b, "if (r0 < rows) {");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < %d; i++) {", lg_qe_tokens_per_thread(e));
	lg_line(b, "const int src = ri[m0 + min(r0 + i, rows - 1)];");
	lg_line(b, "const u8 *const xr = (const u8 *)x + (i64)(src >= 0 ? src : 0) * %lld;", (long long)e->n * 2);
	lg_line(b, "lg_cp16(stage + (r0 + i) * 256 + lb * 16, xr + (k0 + 8 * lb) * 2,");
	lg_line(b, "\tsrc >= 0 ? 16 : 0);");
	lg_close(b);
	lg_close(b);
	lg_line(b, "lg_cp_commit();");
	lg_close(b);
}

/* A call of lg_gather into stage `st` of gx at feature `k0`. */
static void emit_gather(lg_buf *b, const char *k0, const char *st)
{
	lg_line(b, "lg_gather(gx + (%s) * %d, x, (const int *)row_index, m0, rows,", st, STAGE_BYTES);
	lg_line(b, "\t  r0, lb, %s);", k0);
}

/* tile.prefetch, at each feature block: the next block's rows copied into
 * the other stage, then this block's copies awaited (each thread reads only
 * the bytes it copied: no barrier). */
static void block_prefetch(lg_buf *b, const struct lg_qe *e, void *ctx)
{
	const struct lg_plan *p = ctx;
	(void)e;
	long long fb = (long long)p->v[P_FBLOCKS], nb = (long long)(p->v[P_HIDDEN] / 128);
	lg_comment(b, "Block cb + 1's rows copied into the other stage while this block's are used, then");
	lg_comment(b, "this block's copies (issued a block before) awaited.");
	lg_line(b, "const int qe_st = (cb - cg * %lld) & 1; // this block's stage", fb);
	lg_open(b, "if (cb + 1 < cg * %lld + %lld && cb + 1 < %lld) {", fb, fb, nb);
	emit_gather(b, "k0 + 128", "qe_st ^ 1");
	lg_close_with(b, "} else {");
	lg_line(b, "lg_cp_commit(); // an empty group: one a block");
	lg_close(b);
	lg_line(b, "lg_cp_wait(1);");
	lg_line(b, "const u8 *const qe_gs = gx + qe_st * %d; // this block's rows", STAGE_BYTES);
}

/* Row qe_row's 8 features: those of its source token, zeros for padding
 * (tile.prefetch: from the stage this thread copied them into). */
static void values(lg_buf *b, const struct lg_qe *e, const struct lg_qe_row *r, void *ctx)
{
	const struct lg_plan *p = ctx;
	if (p->v[P_PREFETCH]) {
		lg_line(b, "%s = *(const lg_u32x4 *)(qe_gs + %s * 256 +", r->dst, r->lrow);
		lg_line(b, "\t(%s - k0) * 2);", r->col);
		return;
	}
	lg_open(b, "{");
	lg_line(b, "const int src = ((const int *)row_index)[%s];", r->row);
	lg_line(b, "%s = lg_u32x4{0u, 0u, 0u, 0u};", r->dst);
	lg_line(b, "const u8 *const xr = (const u8 *)x + (i64)src * %lld;", (long long)e->n * 2);
	lg_line(b, "if (src >= 0) %s = lg_ld16(xr + %s * 2);", r->dst, r->col);
	lg_close(b);
}

/* The tile's probabilities, by the CTAs of the first feature group
 * (tile.prefetch: then the group's first feature block's copies issued). */
static void prologue(lg_buf *b, const struct lg_qe *e, void *ctx)
{
	const struct lg_plan *p = ctx;
	lg_comment(b, "The tile's rows' probabilities probs[row_index[r], ex] (0 for padding rows).");
	lg_open(b, "if (cg == 0 && out_probs) {");
	lg_open(b, "for (int i = threadIdx.x; i < rows; i += %d) {", e->threads);
	lg_line(b, "const int src = ((const int *)row_index)[m0 + i];");
	lg_line(b, "const float *const pin = (const float *)probs;");
	lg_line(b, "const float p = src >= 0 && pin ? pin[(i64)src * %s + ex] : 0.0f;", e->experts);
	lg_line(b, "((float *)out_probs)[m0 + i] = p;");
	lg_close(b);
	lg_close(b);
	if (!p->v[P_PREFETCH])
		return;
	lg_comment(b, "The rows of the group's feature blocks, copied a block ahead into two stages");
	lg_comment(b, "of 128 rows x 256 bytes (row r0 + i of a thread at 256 (r0 + i)): the first now.");
	lg_line(b, "extern __shared__ __align__(16) u8 gx[];");
	char k0[48];
	snprintf(k0, sizeof k0, "(i64)cg * %lld", (long long)p->v[P_FBLOCKS] * 128);
	emit_gather(b, k0, "0");
}

static void emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	char m[64], ne[24];
	struct lg_qe e = engine(s, p, m, sizeof m, ne, sizeof ne);
	struct lg_qe_hooks h = {.ctx = (void *)p, .values = values, .prologue = prologue,
				.block = p->v[P_PREFETCH] ? block_prefetch : NULL};
	(void)t;
	lg_section(b, "helpers for this spec", NULL);
	lg_qe_emit_helpers(b, &e);
	if (p->v[P_PREFETCH])
		emit_gather_helper(b, &e);
	lg_section(b, p->entry[0], "MoE permute + pad + per-expert blockwise FP8 quantisation");
	lg_comment(b, "CTA: a 128-row tile of one expert's padded segment (found from padded_counts) x %d",
		   (int)p->v[P_FBLOCKS]);
	lg_comment(b, "feature blocks of 128; %d threads, %d rows x 8 features a thread, each row gathered",
		   e.threads, lg_qe_tokens_per_thread(&e));
	lg_comment(b, "from its source token (row_index; padding rows are zeros)%s", p->v[P_PREFETCH] ?
		   ", copied into shared" : ".");
	if (p->v[P_PREFETCH])
		lg_comment(b, "memory a feature block ahead (cp.async).");
	char lb[48];
	lg_emit_signature(b, s, p->entry[0], "%s", lg_launch_bounds(lb, e.threads, p->v[P_MIN_CTAS]));
	lg_open(b, "{");
	lg_qe_emit_body(b, &e, &h);
	lg_close(b);
}

static void uses(const struct lg_spec *s, unsigned char *used)
{
	lg_quant_uses(s, used, A_Q, A_S, A_QT, A_ST);
}

/* Tile variants for `lingen tune`: feature blocks a CTA x threads. */
static int candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max)
{
	static const int64_t min_ctas[] = {1, 3, 0}; /* and each again with 3 CTAs an SM */
	int n = lg_candidate_grid(s, t, out, 0, max, K_FBLOCKS, fblocks_ok, K_THREADS, threads_ok);
	return lg_candidate_times(s, t, out, 0, n, max, K_MIN_CTAS, min_ctas);
}

/* What a launch computes: the comment of its typed launcher (lingen_ops.h). */
static const char doc_forward[] =
	"K4b: MoE permute + pad + per-expert blockwise FP8 quantisation (op\n"
	"  \"moe_permute_quant\"): x [tokens, hidden] bf16 (hidden a multiple of\n"
	"  128), probs [tokens, experts] fp32 or 0, moe_row_map's row_index [rows]\n"
	"  and padded_counts [experts] (rows = tokens * top_k + experts *\n"
	"  (multiple - 1)). Each expert's padded segment (padding rows zeros) is\n"
	"  quantised as its own tensor (docs/kernels.md 1.3): q [rows, hidden] e4m3,\n"
	"  s a [hidden/128, P_e] block an expert; qt a [hidden, P_e] block an\n"
	"  expert, st [cdiv(rows, 128) + experts, hidden] (cdiv(P_e, 128) rows an\n"
	"  expert); the copies quant.output does not ask for take 0. out_probs\n"
	"  [rows] fp32 or 0. Rows past the padded total are not written.";

const struct lg_family lg_family_moe_permute_quant = {
	.op = "moe_permute_quant",
	.summary = "MoE permute + pad + per-expert blockwise FP8 quantisation in one kernel (K4b)",
	.passes = 1u << LG_PASS_FORWARD,
	.dtypes = 1u << LG_DTYPE_BF16,
	.nkeys = NKEYS,
	.keys = keys,
	.sig = {[LG_PASS_FORWARD] = {1, sizes, NARGS, args, doc_forward}},
	.validate = validate,
	.uses = uses,
	.plan = plan,
	.emit = emit,
	.geometry = geometry,
	.candidates = candidates,
};
