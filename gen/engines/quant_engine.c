/*
 * quant_engine.c - the blockwise FP8 quantiser engine (quant_engine.h).
 *
 * Strategy (the one fp8_quant measured at 22.3 us, ~69% of copy, at
 * 8192 x 2048 bf16 on the H200): one CTA a 128 x 128 tile (or a run of
 * `fblocks` tiles along the features), every value loaded once into
 * registers by 16-byte loads, all issued before any use; block maxima
 * rowwise by a butterfly over the half warp that holds a token's 128
 * features, columnwise over the thread's R tokens, the two half warps and
 * the warps (shared memory); one lane a token computes the rowwise scale
 * (s gets contiguous stores) and hands the inverse around by shuffles; one
 * thread a feature (a feature pair with bf16) the columnwise scale (st: one
 * 512-byte row a tile). One pass then quantises every value once per copy:
 * the rowwise bytes straight to q (a half warp stores a token's 128-byte
 * line), the columnwise bytes, two tokens per e4m3x2, into a swizzled
 * shared tile that leaves as 128-byte qt lines: in a flat tensor, rows
 * round_up(M, 128) bytes apart, whole 16-byte pieces, the last tile's lines
 * padded with its zero tail (lg_emit_qt_lines_pitched); per expert, cut at
 * memory's 16-byte boundaries: whole aligned chunks in one store each, a
 * byte a lane for the heads and tails (lg_emit_qt_lines_realign), since a
 * qt row starts at any byte there (and in a weight's transposed copy of
 * any row count).
 * In a tile short of tokens (the last one; with experts, every expert's
 * last) a thread whose tokens
 * are all absent neither loads, computes nor quantises (its column bytes
 * are zeros); the others compute their absent tokens from the last one's
 * row (straight-line code keeps the loads together) and zero them.
 * Per expert, one scan of counts a CTA (lg_expert_tiles) finds the
 * segments of its token tiles, handed over through shared memory; with
 * lg_qe.tiles > 1 the CTA takes them in turn (emit_place_and_expert). A
 * family whose values differ by feature-block group names the case
 * (lg_qe.cta_case) and gets a copy of the block loop compiled for each.
 *
 * This file: the engine's plans, geometry and kernel, and the activation
 * quantiser (LG_QE_FLAT, LG_QE_EXPERTS): its places, row and column scales
 * and qt stores (struct lg_qb_ops). The body both quantisers share (values,
 * maxima, the quantising pass, the block loop) is quant_body.c's; the
 * weight tiles (LG_QE_TILE128, one scale a tile) are quant_tile.c's.
 */
#include "quant_engine.h"

#include "error.h"
#include "quant_body.h"
#include "quant_common.h"
#include "quant_tile.h"

#define TILE 128

const int64_t lg_qe_tiles_ok[] = {1, 2, 4, 8, 0};
const int64_t lg_qe_qt_store_ok[] = {1, 2, 3, 0};

int lg_qe_flat_candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max,
			  int k_threads, const int64_t *threads_ok, int k_qt_store)
{
	static const int64_t qt_store[] = {2, 1, 0};
	int n = lg_candidate_values(s, t, out, 0, max, k_threads, threads_ok);
	return lg_quant_colwise(s) ? lg_candidate_times(s, t, out, 0, n, max, k_qt_store, qt_store) : n;
}

enum lg_qt_store lg_qe_plan_qt_store(const struct lg_spec *s, struct lg_plan *p, int k)
{
	if (k < 0)
		return LG_QT_WHOLE;
	p->tile[k] = lg_spec_has(s, k) ? lg_spec_int(s, k) : LG_QT_WHOLE;
	return (enum lg_qt_store)p->tile[k];
}

int lg_qe_tokens_per_thread(const struct lg_qe *e)
{
	return TILE * 16 / e->threads;
}

/* LG_QE_EXPERTS: token tiles a CTA takes in turn. */
static int expert_tiles(const struct lg_qe *e)
{
	return e->layout == LG_QE_EXPERTS && e->tiles > 1 ? e->tiles : 1;
}

void lg_qe_geometry(const struct lg_qe *e, int64_t m, int64_t experts, struct lg_launch_dim *d)
{
	int64_t tiles = (m + TILE - 1) / TILE;
	if (e->layout == LG_QE_EXPERTS && m > 0) /* at most that many tiles, expert_tiles() a CTA */
		tiles = (tiles + experts + expert_tiles(e) - 1) / expert_tiles(e);
	d->grid[0] = (unsigned)(tiles * lg_qb_groups(e));
	d->grid[1] = d->grid[2] = 1;
	d->block[0] = (unsigned)e->threads;
	d->block[1] = d->block[2] = 1;
	d->smem = 0;
}

int64_t lg_qe_tokens_max(int64_t n_max, int64_t e_max)
{
	return (INT32_MAX / (n_max / TILE) - e_max) * TILE;
}

void lg_qe_emit_load_bf16(lg_buf *b, const struct lg_qe *e, const struct lg_qe_row *r, const char *x)
{
	long long n = (long long)e->n;
	if (e->vals == LG_QE_BF16) {
		lg_line(b, "%s = lg_ld16_cs((const u8 *)%s + (%s * %lld + %s) * 2);", r->dst, x, r->row, n, r->col);
		return;
	}
	lg_open(b, "{ // bf16 -> fp32 is exact");
	lg_line(b, "const u8 *const qe_p =");
	lg_line(b, "\t(const u8 *)%s + (%s * %lld + %s) * 2;", x, r->row, n, r->col);
	lg_line(b, "const lg_u32x4 qe_w = lg_ld16_cs(qe_p);");
	lg_line(b, "const u32 qe_a[4] = {qe_w.x, qe_w.y, qe_w.z, qe_w.w};");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int j = 0; j < 4; j++) {");
	lg_line(b, "%s[2 * j] = lg_bf16_lo(qe_a[j]);", r->dst);
	lg_line(b, "%s[2 * j + 1] = lg_bf16_hi(qe_a[j]);", r->dst);
	lg_close(b);
	lg_close(b);
}

void lg_qe_hook_load_bf16(lg_buf *b, const struct lg_qe *e, const struct lg_qe_row *r, void *ctx)
{
	lg_qe_emit_load_bf16(b, e, r, (const char *)ctx);
}

void lg_qe_plan(const struct lg_spec *s, struct lg_plan *p, int64_t n, int k_threads, int k_fblocks, int k_values,
		int k_qt_store, int fblocks_def)
{
	bool f32 = k_values >= 0 && lg_spec_has(s, k_values) && lg_spec_int(s, k_values) == 32;
	int64_t nb = n / TILE;
	int64_t threads = k_threads >= 0 && lg_spec_has(s, k_threads) ? lg_spec_int(s, k_threads)
				 : lg_quant_pow2(s) && !f32 ? 256 : 512;
	int64_t fb = k_fblocks >= 0 && lg_spec_has(s, k_fblocks) ? lg_spec_int(s, k_fblocks) : fblocks_def;
	p->v[LG_QE_PV_N] = n;
	p->v[LG_QE_PV_THREADS] = threads;
	p->v[LG_QE_PV_FBLOCKS] = fb < nb ? fb : nb;
	p->v[LG_QE_PV_F32] = f32;
	p->v[LG_QE_PV_QT_STORE] = lg_qe_plan_qt_store(s, p, k_qt_store);
	if (k_threads >= 0)
		p->tile[k_threads] = threads;
	if (k_fblocks >= 0)
		p->tile[k_fblocks] = p->v[LG_QE_PV_FBLOCKS];
	if (k_values >= 0)
		p->tile[k_values] = f32 ? 32 : 16;
}

struct lg_qe lg_qe_planned(const struct lg_spec *s, const struct lg_plan *p, enum lg_qe_layout layout)
{
	struct lg_qe e = {.n = p->v[LG_QE_PV_N], .threads = (int)p->v[LG_QE_PV_THREADS],
			  .fblocks = (int)p->v[LG_QE_PV_FBLOCKS], .vals = p->v[LG_QE_PV_F32] ? LG_QE_F32 : LG_QE_BF16,
			  .qt_store = (enum lg_qt_store)p->v[LG_QE_PV_QT_STORE], .layout = layout};
	if (s) {
		e.rows = layout == LG_QE_TILE128 || lg_quant_rowwise(s);
		e.cols = layout != LG_QE_TILE128 && lg_quant_colwise(s);
		e.pow2 = lg_quant_pow2(s);
	}
	return e;
}

void lg_qe_emit_kernel(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p, const struct lg_qe *e,
		       const struct lg_qe_hooks *h, const char *title)
{
	lg_section(b, "helpers for this spec", NULL);
	lg_qe_emit_helpers(b, e);
	lg_section(b, p->entry[0], title);
	int r = lg_qe_tokens_per_thread(e), fb = lg_qb_fblocks(e);
	lg_comment(b, "CTA: %s x %d block%s of 128 features%s.",
		   e->layout == LG_QE_EXPERTS ? "a token tile of one expert (from counts)" : "128 tokens", fb,
		   fb > 1 ? "s" : "", fb > 1 ? " in turn" : "");
	lg_comment(b, "%d threads: thread (rb, lb) holds tokens %d rb .. %d rb + %d x features 8 lb .. 8 lb + 7.",
		   e->threads, r, r, r - 1);
	lg_emit_signature(b, s, p->entry[0], "__launch_bounds__(%d)", e->threads);
	lg_open(b, "{");
	lg_qe_emit_body(b, e, h);
	lg_close(b);
}

void lg_qe_emit_helpers(lg_buf *b, const struct lg_qe *e)
{
	lg_emit_quant_q(b, e->pow2); /* lg_max_bf16x2 (bf16 values) is a template helper */
}

/* LG_QE_EXPERTS: a CTA takes the token tiles slot, slot + slots, ...
 * (`tiles` of them; slots: the grid's CTAs along the tokens,
 * lg_qe_geometry), whose expert segments one scan of counts finds
 * (lg_expert_tiles: every warp scans, warp 0 writes them to shared
 * memory; a scan in warp 0 alone costs ~20 registers by ptxas). With
 * tiles > 1 the tile loop (opened here, closed by emit_tile_end) pays the
 * scan's latency (one L2 round trip and a shuffle chain before the first
 * load of x) once for several tiles, and fewer CTAs are launched only to
 * find they have no tile (the grid, a bound, has E tiles more than a flat
 * tensor). Measured with a tile a CTA (K6 forward 65536 x 512,
 * git history, commit 8b8e268: bench/h200-2026-12-01f): 71.4 us at E = 1 against 63.8 without the
 * scan; at E = 512, 96.9 against 77.3 without the surplus CTAs. */
static void emit_place_and_expert(lg_buf *b, const struct lg_qb *k, int64_t g)
{
	const struct lg_qe *e = k->e;
	int nt = expert_tiles(e);
	LG_ASSERT(!e->tile); /* the grid is the engine's (the tiles' stride) */
	if (g > 1)
		lg_line(b, "const int cg = blockIdx.x %% %lldu; // feature group", (long long)g);
	else
		lg_line(b, "const int cg = 0; // feature group");
	lg_line(b, "const i64 qe_slot = blockIdx.x / %lldu, qe_slots = gridDim.x / %lldu;", (long long)g,
		(long long)g);
	lg_line(b, "__shared__ i64 qe_seg[%d][4]; // each tile's expert, first token, tokens, first tile", nt);
	if (nt > 1) {
		lg_comment(b, "The expert segments of the CTA's token tiles qe_slot + i qe_slots (a scan");
		lg_comment(b, "of counts); then each tile in turn (the loop's body is not indented: the");
		lg_comment(b, "hooks' lines keep their width), to the last tile or an expert overrunning");
		lg_comment(b, "%s (bad counts: it and the later ones are not written).", k->m);
	} else {
		lg_comment(b, "The expert segment of token tile qe_slot (a scan of counts); past the");
		lg_comment(b, "last tile, or at an expert overrunning %s (bad counts: it and the later ones", k->m);
		lg_comment(b, "are not written), the CTA leaves.");
	}
	lg_line(b, "lg_expert_tiles((const int *)%s, %s, qe_slot, qe_slots, %d, &qe_seg[0][0]);",
		lg_qb_name(e->counts, "counts"), lg_qb_name(e->experts, "E"), nt);
	lg_line(b, "__syncthreads();");
	if (nt > 1) {
		lg_line(b, "#pragma unroll 1");
		lg_line(b, "for (int qe_i = 0; qe_i < %d; qe_i++) {", nt);
	} else {
		lg_line(b, "const int qe_i = 0;");
	}
	lg_line(b, "const int ex = (int)qe_seg[qe_i][0];");
	lg_line(b, "const i64 seg0 = qe_seg[qe_i][1], segn = qe_seg[qe_i][2], tbeg = qe_seg[qe_i][3];");
	lg_line(b, "if (ex < 0 || seg0 + segn > %s) %s;", k->m, nt > 1 ? "break" : "return");
	lg_line(b, "const i64 tt = qe_slot + qe_i * qe_slots; // the token tile");
	lg_line(b, "const i64 lt = tt - tbeg; // the tile within the segment");
	lg_line(b, "const i64 m0 = seg0 + lt * 128; // the tile's first token in x and q");
	lg_line(b, "const int rows = (int)(segn - lt * 128 < 128 ? segn - lt * 128 : 128); // its tokens");
	if (e->rows)
		lg_line(b, "float *const sg = (float *)%s + seg0 * %lld; // [%lld, segn] scales", k->s,
			(long long)k->nb, (long long)k->nb);
	if (e->cols) {
		lg_line(b, "u8 *const qtg = (u8 *)%s + seg0 * %lld; // the expert's [%lld, segn] qt", k->qt,
			(long long)e->n, (long long)e->n);
		lg_line(b, "float *const stg = (float *)%s + (tbeg + lt) * %lld; // the tile's st row", k->st,
			(long long)e->n);
	}
}

/* LG_QE_EXPERTS with several tiles a CTA: the end of the tile loop (a
 * barrier not needed: qe_seg is only read in it, and the block's barriers
 * order the shared tiles' reuse). */
static void emit_tile_end(lg_buf *b, const struct lg_qb *k)
{
	if (expert_tiles(k->e) > 1)
		lg_line(b, "} // the CTA's token tiles");
}

/* Shared memory, the thread's place, the tile's place (and expert). */
static void emit_place(lg_buf *b, const struct lg_qb *k)
{
	const struct lg_qe *e = k->e;
	lg_qb_emit_smem(b, k);
	if (e->cols) {
		lg_line(b, "__shared__ __align__(16) float cinv[128]; // 1 / column scale");
		if (!e->pow2)
			lg_line(b, "__shared__ __align__(16) float csc[128]; // column scales");
	}
	lg_qb_emit_thread_place(b, k);
	if (e->layout == LG_QE_EXPERTS) {
		emit_place_and_expert(b, k, lg_qb_groups(e));
		return;
	}
	lg_qb_emit_tile_place(b, k);
	if (e->rows)
		lg_line(b, "float *const sg = (float *)%s; // rowwise scales [%lld, %s]", k->s, (long long)k->nb, k->m);
	if (e->cols) {
		if (e->qt_pitch)
			lg_line(b, "u8 *const qtg = (u8 *)%s; // columnwise data [%lld, %s]", k->qt, (long long)e->n,
				e->qt_pitch);
		else
			lg_line(b, "u8 *const qtg = (u8 *)%s; // columnwise data [%lld, round_up(%s, %d)]", k->qt,
				(long long)e->n, k->m, LG_QT_PITCH_BYTES);
		lg_line(b, "float *const stg = (float *)%s + tt * %lld; // this tile's row of st", k->st,
			(long long)e->n);
	}
}

/* Row scales: one lane a token, s stores, the inverses (and with exact
 * scales the scales) of the thread's R tokens in ri[] (rs[]). */
static void emit_row_scales(lg_buf *b, const struct lg_qb *k)
{
	bool pow2 = k->e->pow2;
	lg_comment(b, "Row amax: a butterfly over the half warp's 16 lanes (a token's 128 features).");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int m = 1; m < 16; m <<= 1) {");
	lg_line(b, "#pragma unroll");
	if (k->bf16) {
		lg_open(b, "for (int p = 0; p < %d; p++) {", k->r / 2);
		lg_line(b, "const u32 o = __shfl_xor_sync(0xffffffffu, rmax[p], m);");
		lg_line(b, "rmax[p] = lg_max_bf16x2(rmax[p], o);");
		lg_close(b);
	} else {
		lg_line(b, "for (int i = 0; i < %d; i++)", k->r);
		lg_line(b, "\trmax[i] = fmaxf(rmax[i], __shfl_xor_sync(~0u, rmax[i], m));");
	}
	lg_close(b);
	lg_comment(b, "Row scales, a lane a token: lane lb takes token r0 + lb %% %d; lanes 0..%d",
		   k->r, k->r - 1);
	lg_comment(b, "of a half warp store them (%d bytes a warp), then each lane fetches the inverses",
		   8 * k->r);
	lg_comment(b, "of its %d tokens from the lanes that own them.", k->r);
	lg_line(b, "const int own = lb & %d;", k->r - 1);
	if (k->bf16) {
		lg_line(b, "const u32 rp = %s;",
			k->r == 8 ? "own < 2 ? rmax[0] : own < 4 ? rmax[1] : own < 6 ? rmax[2] : rmax[3]"
				  : "own < 2 ? rmax[0] : rmax[1]");
		lg_line(b, "const float ramax = own & 1 ? lg_bf16_hi(rp) : lg_bf16_lo(rp);");
	} else {
		lg_line(b, "float ramax = rmax[0];");
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int i = 1; i < %d; i++) ramax = own == i ? rmax[i] : ramax;", k->r);
	}
	lg_emit_scale(b, pow2, "rsc", "ramax", "rinv");
	const char *ld = k->e->layout == LG_QE_EXPERTS ? "segn" : k->m;
	const char *t0 = k->e->layout == LG_QE_EXPERTS ? "lt * 128" : "m0";
	lg_line(b, "if (lb < %d && r0 + lb < rows)", k->r);
	lg_line(b, "\tsg[cb * %s + %s + r0 + lb] = rsc;", ld, t0);
	lg_line(b, "float ri[%d];", k->r);
	if (!pow2)
		lg_line(b, "float rs[%d];", k->r);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < %d; i++) {", k->r);
	lg_line(b, "ri[i] = __shfl_sync(0xffffffffu, rinv, (threadIdx.x & 16) + i);");
	if (!pow2)
		lg_line(b, "rs[i] = __shfl_sync(0xffffffffu, rsc, (threadIdx.x & 16) + i);");
	lg_close(b);
}

/* Column scales into st and shared memory (cinv, csc); the barrier after
 * leaves them visible to every thread. */
static void emit_col_scales(lg_buf *b, const struct lg_qb *k)
{
	bool pow2 = k->e->pow2;
	if (k->bf16) {
		lg_comment(b, "Column scales: thread t < 64 for features 2t, 2t + 1; st: a 512-byte row.");
		lg_open(b, "if (threadIdx.x < 64) {");
		lg_line(b, "u32 a = cpart[0][threadIdx.x];");
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int k = 1; k < %d; k++) a = lg_max_bf16x2(a, cpart[k][threadIdx.x]);", k->warps);
		lg_emit_scale(b, pow2, "sc0", "lg_bf16_lo(a)", "inv0");
		lg_emit_scale(b, pow2, "sc1", "lg_bf16_hi(a)", "inv1");
		lg_line(b, "*(float2 *)(stg + k0 + 2 * threadIdx.x) = make_float2(sc0, sc1);");
		lg_line(b, "*(float2 *)(cinv + 2 * threadIdx.x) = make_float2(inv0, inv1);");
		if (!pow2)
			lg_line(b, "*(float2 *)(csc + 2 * threadIdx.x) = make_float2(sc0, sc1);");
	} else {
		lg_comment(b, "Column scales: thread t < 128 for feature t; st: a 512-byte row a tile.");
		lg_open(b, "if (threadIdx.x < 128) {");
		lg_line(b, "float a = fmaxf(0.0f, cpart[0][threadIdx.x]); // the 0 the maxima start from");
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int k = 1; k < %d; k++) a = fmaxf(a, cpart[k][threadIdx.x]);", k->warps);
		lg_emit_scale(b, pow2, "sc", "a", "inv");
		lg_line(b, "stg[k0 + threadIdx.x] = sc;");
		lg_line(b, "cinv[threadIdx.x] = inv;");
		if (!pow2)
			lg_line(b, "csc[threadIdx.x] = sc;");
	}
	lg_close(b);
	lg_line(b, "__syncthreads();");
}

/* The block's scales: rowwise (s; ri, rs), columnwise (st; cinv, csc). */
static void emit_scales(lg_buf *b, const struct lg_qb *k)
{
	if (k->e->rows)
		emit_row_scales(b, k);
	if (k->e->cols) {
		lg_qb_emit_col_amax(b, k);
		emit_col_scales(b, k);
	}
}

/* The columnwise copy's scales: the loads before the quantising pass. */
static void emit_col_setup(lg_buf *b, const struct lg_qb *k)
{
	lg_comment(b, "  columnwise: with its feature's scale, two tokens an e4m3x2; cw[c] gets");
	lg_comment(b, "  the %d bytes of feature 8 lb + c, token r0 first.", k->r);
	lg_line(b, "const float4 c0 = *(const float4 *)(cinv + 8 * lb);");
	lg_line(b, "const float4 c1 = *(const float4 *)(cinv + 8 * lb + 4);");
	lg_line(b, "const float ci[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};");
	if (!k->e->pow2) {
		lg_line(b, "const float4 s0 = *(const float4 *)(csc + 8 * lb);");
		lg_line(b, "const float4 s1 = *(const float4 *)(csc + 8 * lb + 4);");
		lg_line(b, "const float cs[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};");
	}
}

/* A pair's tokens take their own scales (ri, rs). */
static void row_args(lg_buf *b, const struct lg_qb *k, const char **a0, const char **a1)
{
	bool pow2 = k->e->pow2;
	*a0 = lg_quant_q_args(pow2, "s0, i0", "i0");
	*a1 = lg_quant_q_args(pow2, "s1, i1", "i1");
	lg_line(b, "const float i0 = ri[2 * p], i1 = ri[2 * p + 1];");
	if (!pow2)
		lg_line(b, "const float s0 = rs[2 * p], s1 = rs[2 * p + 1];");
}

/* The staged tile to qt: per expert at any byte; a flat activation's rows
 * round_up(M, 128) apart (or qt_pitch), a zero tail. */
static void store_qt(lg_buf *b, const struct lg_qb *k)
{
	const struct lg_qe *e = k->e;
	if (e->layout == LG_QE_EXPERTS)
		lg_emit_qt_lines_realign(b, e->threads, "qtg", "segn", "lt * 128");
	else
		lg_emit_qt_lines_pitched(b, e->threads, "qtg", k->m, e->qt_pitch, "m0", e->qt_store);
}

static const struct lg_qb_ops act_ops = {
	.scales = emit_scales, .col_setup = emit_col_setup, .row_args = row_args, .store_qt = store_qt};

void lg_qe_emit_body(lg_buf *b, const struct lg_qe *e, const struct lg_qe_hooks *h)
{
	if (e->layout == LG_QE_TILE128) { /* a scale a 128 x 128 tile: the weight-tile emitter's */
		lg_qtile_emit_body(b, e, h);
		return;
	}
	struct lg_qb k;
	lg_qb_init(&k, e, h, &act_ops);
	k.rword = "token's";
	k.cq = lg_quant_q_args(e->pow2, "cs[c], ci[c]", "ci[c]");
	emit_place(b, &k);
	lg_qb_emit_body(b, &k);
	emit_tile_end(b, &k);
}
