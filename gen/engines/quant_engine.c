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
 * round_up(M, 16) bytes apart, whole 16-byte pieces, the last tile's lines
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
 */
#include "quant_engine.h"

#include "code.h"
#include "error.h"
#include "quant_common.h"

#include <stdlib.h>

#define TILE 128

static const char *nm(const char *name, const char *def)
{
	return name ? name : def;
}

const int64_t lg_qe_tiles_ok[] = {1, 2, 4, 8, 0};
const int64_t lg_qe_qt_store_ok[] = {1, 2, 0};

int lg_qe_flat_candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max,
			  int k_threads, const int64_t *threads_ok, int k_qt_store)
{
	static const int64_t qt_store[] = {2, 1, 0};
	int n = lg_candidate_values(s, t, out, 0, max, k_threads, threads_ok);
	return lg_quant_colwise(s) ? lg_candidate_times(s, t, out, 0, n, max, k_qt_store, qt_store) : n;
}

bool lg_qe_plan_qt_store(const struct lg_spec *s, struct lg_plan *p, int k)
{
	if (k < 0)
		return false;
	p->tile[k] = lg_spec_has(s, k) ? lg_spec_int(s, k) : 2;
	return p->tile[k] == 1;
}

int lg_qe_tokens_per_thread(const struct lg_qe *e)
{
	return TILE * 16 / e->threads;
}

static int fblocks(const struct lg_qe *e)
{
	int nb = (int)(e->n / TILE);
	return e->fblocks <= 1 ? 1 : e->fblocks > nb ? nb : e->fblocks;
}

/* LG_QE_EXPERTS: token tiles a CTA takes in turn. */
static int expert_tiles(const struct lg_qe *e)
{
	return e->layout == LG_QE_EXPERTS && e->tiles > 1 ? e->tiles : 1;
}

/* Feature groups of a token tile (CTAs along the features). */
static int64_t groups(const struct lg_qe *e)
{
	int64_t nb = e->n / TILE, fb = fblocks(e);
	return (nb + fb - 1) / fb;
}

void lg_qe_geometry(const struct lg_qe *e, int64_t m, int64_t experts, struct lg_launch_dim *d)
{
	int64_t tiles = (m + TILE - 1) / TILE;
	if (e->layout == LG_QE_EXPERTS && m > 0) /* at most that many tiles, expert_tiles() a CTA */
		tiles = (tiles + experts + expert_tiles(e) - 1) / expert_tiles(e);
	d->grid[0] = (unsigned)(tiles * groups(e));
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
	p->v[LG_QE_PV_QT_NARROW] = lg_qe_plan_qt_store(s, p, k_qt_store);
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
			  .qt_narrow = p->v[LG_QE_PV_QT_NARROW] != 0, .layout = layout};
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
	int r = lg_qe_tokens_per_thread(e), fb = fblocks(e);
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

/* The emission state of one body. */
struct ctx {
	const struct lg_qe *e;
	const struct lg_qe_hooks *h;
	int r, warps, fb;
	int64_t nb;
	bool bf16, tile, cmax; /* bf16 values; one scale a 128x128 tile; column maxima needed */
	const char *q, *s, *qt, *st, *m;
};

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
static void emit_place_and_expert(lg_buf *b, const struct ctx *k, int64_t g)
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
		nm(e->counts, "counts"), nm(e->experts, "E"), nt);
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
static void emit_tile_end(lg_buf *b, const struct ctx *k)
{
	if (expert_tiles(k->e) > 1)
		lg_line(b, "} // the CTA's token tiles");
}

/* Shared memory, the thread's place, the tile's place (and expert). */
static void emit_place(lg_buf *b, const struct ctx *k)
{
	const struct lg_qe *e = k->e;
	if (e->cols) {
		lg_comment(b, "qt staging (128 features x 128 tokens, swizzled).");
		lg_line(b, "__shared__ __align__(16) u8 stage[128 * 128];");
	}
	if (k->cmax) {
		if (k->bf16)
			lg_line(b, "__shared__ __align__(16) u32 cpart[%d][64]; // each warp's column amax, bf16x2", k->warps);
		else
			lg_line(b, "__shared__ __align__(16) float cpart[%d][128]; // each warp's column amax", k->warps);
	}
	if (e->cols && !k->tile) {
		lg_line(b, "__shared__ __align__(16) float cinv[128]; // 1 / column scale");
		if (!e->pow2)
			lg_line(b, "__shared__ __align__(16) float csc[128]; // column scales");
	}
	if (k->tile)
		lg_line(b, "__shared__ float tmax[4]; // the tile amax of each warp that reduces it");
	lg_comment(b, "lb: this thread's block of 8 features; rb: its block of %d tokens.", k->r);
	lg_line(b, "const int lb = threadIdx.x & 15, rb = threadIdx.x >> 4;");
	lg_line(b, "const int r0 = %d * rb; // this thread's first token in the tile", k->r);
	int64_t g = groups(e);
	if (e->layout == LG_QE_EXPERTS) {
		emit_place_and_expert(b, k, g);
		return;
	}
	if (e->tile) {
		lg_line(b, "const i64 tt = %s; // token tile", e->tile);
		lg_line(b, "const int cg = %s; // feature group", e->group ? e->group : "0");
	} else if (g > 1) {
		lg_line(b, "const i64 tt = blockIdx.x / %lldu; // token tile", (long long)g);
		lg_line(b, "const int cg = blockIdx.x %% %lldu; // feature group", (long long)g);
	} else {
		lg_line(b, "const i64 tt = blockIdx.x; // token tile");
		lg_line(b, "const int cg = 0; // feature group");
	}
	lg_line(b, "const i64 m0 = tt * 128; // the tile's first token");
	lg_line(b, "const int rows = (int)(%s - m0 < 128 ? %s - m0 : 128); // tokens in the tile", k->m, k->m);
	if (e->rows && !k->tile)
		lg_line(b, "float *const sg = (float *)%s; // rowwise scales [%lld, %s]", k->s, (long long)k->nb, k->m);
	if (e->cols && k->tile && e->expert_rows) {
		long long n = (long long)e->expert_rows;
		lg_line(b, "const i64 qex = m0 / %lld; // the tile's expert (%lld rows each)", n, n);
		lg_line(b, "const i64 qe0 = qex * %lld; // its first row", n);
		lg_line(b, "const i64 qen = %s - qe0 < %lld ? %s - qe0 : %lld; // its rows", k->m, n, k->m, n);
		lg_line(b, "const i64 lm0 = m0 - qe0; // the tile's first row in the expert");
		lg_line(b, "u8 *const qtg = (u8 *)%s + qe0 * %lld; // the expert's qt [%lld, qen]", k->qt,
			(long long)e->n, (long long)e->n);
		lg_line(b, "float *const stg = (float *)%s + qe0 / 128 * %lld; // its st [%lld, cdiv(qen, 128)]",
			k->st, (long long)k->nb, (long long)k->nb);
	} else if (e->cols) {
		lg_line(b, "u8 *const qtg = (u8 *)%s; // columnwise data [%lld, %s%s%s]", k->qt, (long long)e->n,
			e->layout == LG_QE_FLAT ? "round_up(" : "", k->m, e->layout == LG_QE_FLAT ? ", 16)" : "");
	}
	if (e->cols && !k->tile)
		lg_line(b, "float *const stg = (float *)%s + tt * %lld; // this tile's row of st", k->st,
			(long long)e->n);
}

/* Whether the hooks split the values (fetch, compute) and the engine
 * prefetches the next feature block. */
static bool split(const struct ctx *k)
{
	return k->h->fetch && k->h->compute;
}

static bool prefetching(const struct ctx *k)
{
	return k->e->prefetch && k->fb > 1 && split(k);
}

/* The hook `fn` for each of the thread's rows at column col (an i64
 * expression), in an unrolled loop. */
static void emit_rows(lg_buf *b, const struct ctx *k, const char *col,
		      void (*fn)(lg_buf *, const struct lg_qe *, const struct lg_qe_row *, void *))
{
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < %d; i++) {", k->r);
	struct lg_qe_row r = {.row = "qe_row", .lrow = "(r0 + i)", .col = col, .dst = "v[i]",
			      .valid = "(r0 + i < rows)", .slot = "i"};
	/* the hook's code first, so that qe_row is declared only where it is read */
	lg_buf hook;
	lg_buf_init(&hook);
	hook.depth = b->depth;
	fn(&hook, k->e, &r, k->h->ctx);
	size_t len = 0;
	char *text = lg_buf_finish(&hook, &len);
	if (!text) {
		b->failed = true;
		return;
	}
	if (lg_code_names(text, r.row))
		lg_line(b, "const i64 qe_row = m0 + r0 + min(i, rows - 1 - r0);");
	lg_raw(b, text, len);
	free(text);
	lg_close(b);
}

/* With split hooks: the raw registers, before the feature-block loop. */
static void emit_raw(lg_buf *b, const struct ctx *k)
{
	if (split(k))
		k->h->raw(b, k->e, k->r, k->h->ctx);
}

/* With prefetch: the loads of the CTA's first feature block, before the
 * feature-block loop. */
static void emit_first_fetch(lg_buf *b, const struct ctx *k)
{
	if (!prefetching(k))
		return;
	lg_comment(b, "The first feature block's loads (each block's compute is followed by the next's).");
	lg_open(b, "if (r0 < rows) {");
	lg_line(b, "const i64 qe_col = (i64)cg * %d + 8 * lb; // the thread's first feature", 128 * k->fb);
	emit_rows(b, k, "qe_col", k->h->fetch);
	lg_close(b);
}

/* v: the thread's R tokens x 8 features, from the family's hook. */
static void emit_values(lg_buf *b, const struct ctx *k)
{
	lg_comment(b, "The values: %d tokens x 8 features a thread (the family's code, a token",
		   k->r);
	lg_comment(b, "a step; a token past the tile's last computes the last one's, then counts");
	lg_comment(b, "as 0).");
	if (k->bf16)
		lg_line(b, "lg_u32x4 v[%d];", k->r);
	else
		lg_line(b, "float v[%d][8];", k->r);
	lg_comment(b, "A thread whose tokens are all absent (a short tile: experts' last tiles)");
	lg_comment(b, "neither loads nor computes; the others run straight-line code, loads");
	lg_comment(b, "first.");
	lg_open(b, "if (r0 < rows) {");
	lg_line(b, "const i64 qe_col = k0 + 8 * lb; // the thread's first feature");
	if (!split(k)) {
		emit_rows(b, k, "qe_col", k->h->values);
	} else {
		if (!prefetching(k))
			emit_rows(b, k, "qe_col", k->h->fetch);
		emit_rows(b, k, "qe_col", k->h->compute);
		if (prefetching(k)) {
			lg_comment(b, "The next feature block's loads, in flight during this block's stores.");
			lg_open(b, "if (cb + 1 < cb_end) {");
			lg_line(b, "const i64 qe_next = qe_col + 128;");
			emit_rows(b, k, "qe_next", k->h->fetch);
			lg_close(b);
		}
	}
	lg_close_with(b, "} // r0 < rows");
	lg_open(b, "if (rows < 128) { // a tile short of tokens: the absent ones count as 0");
	lg_line(b, "#pragma unroll");
	if (k->bf16) {
		lg_line(b, "for (int i = 0; i < %d; i++)", k->r);
		lg_line(b, "\tif (r0 + i >= rows) v[i] = lg_u32x4{0u, 0u, 0u, 0u};");
	} else {
		lg_line(b, "for (int i = 0; i < %d; i++)", k->r);
		lg_line(b, "\tif (r0 + i >= rows)");
		lg_line(b, "\t\tfor (int j = 0; j < 8; j++) v[i][j] = 0.0f;");
	}
	lg_close(b);
}

static void emit_thread_amax_bf16(lg_buf *b, const struct ctx *k)
{
	bool rows = k->e->rows && !k->tile;
	lg_comment(b, "Block maxima of the thread's values on the bf16 bits (sign bits cleared).");
	if (rows) {
		lg_comment(b, "rmax[p]: tokens r0 + 2p (low half), r0 + 2p + 1 (high) over its 8 features.");
		lg_line(b, "u32 rmax[%d];", k->r / 2);
	}
	if (k->cmax) {
		lg_comment(b, "cmax[j]: features 8 lb + 2j (low half), 8 lb + 2j + 1 (high) over %d tokens.",
			   k->r);
		lg_line(b, "u32 cmax[4] = {0u, 0u, 0u, 0u};");
	}
	lg_line(b, "#pragma unroll");
	if (rows) { /* two tokens at a time: their row maxima share a word */
		lg_open(b, "for (int p = 0; p < %d; p++) {", k->r / 2);
		lg_line(b, "u32 pr[2];");
		lg_line(b, "#pragma unroll");
		lg_open(b, "for (int i = 0; i < 2; i++) {");
		lg_line(b, "const lg_u32x4 w = v[2 * p + i];");
	} else {
		lg_open(b, "for (int i = 0; i < %d; i++) {", k->r);
		lg_line(b, "const lg_u32x4 w = v[i];");
	}
	lg_line(b, "const u32 a[4] = {w.x & 0x7fff7fffu, w.y & 0x7fff7fffu,");
	lg_line(b, "\tw.z & 0x7fff7fffu, w.w & 0x7fff7fffu};");
	if (rows) {
		lg_line(b, "pr[i] = lg_max_bf16x2(lg_max_bf16x2(a[0], a[1]),");
		lg_line(b, "\tlg_max_bf16x2(a[2], a[3]));");
	}
	if (k->cmax) {
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int j = 0; j < 4; j++) cmax[j] = lg_max_bf16x2(cmax[j], a[j]);");
	}
	lg_close(b);
	if (rows) {
		lg_comment(b, "even features' maxima of both tokens against the odd features'");
		lg_line(b, "rmax[p] = lg_max_bf16x2(__byte_perm(pr[0], pr[1], 0x5410),");
		lg_line(b, "\t__byte_perm(pr[0], pr[1], 0x7632));");
		lg_close(b);
	}
}

static void emit_thread_amax_f32(lg_buf *b, const struct ctx *k)
{
	bool rows = k->e->rows && !k->tile;
	lg_comment(b, "Block maxima of |v| over the thread's values:");
	if (rows) {
		lg_comment(b, "rmax[i]: token r0 + i over its 8 features.");
		lg_line(b, "float rmax[%d];", k->r);
	}
	if (k->cmax) {
		lg_comment(b, "cmax[j]: feature 8 lb + j over its %d tokens; the 0 a max starts from", k->r);
		lg_comment(b, "joins once, at the scale (a max that ignores NaN is order-free: same bits).");
		lg_line(b, "float cmax[8];");
	}
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < %d; i++) {", k->r);
	if (rows)
		lg_line(b, "float a = 0.0f;");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int j = 0; j < 8; j++) {");
	if (rows)
		lg_line(b, "a = fmaxf(a, fabsf(v[i][j]));");
	if (k->cmax)
		lg_line(b, "cmax[j] = i == 0 ? fabsf(v[i][j]) : fmaxf(cmax[j], fabsf(v[i][j]));");
	lg_close(b);
	if (rows)
		lg_line(b, "rmax[i] = a;");
	lg_close(b);
}

/* Row scales: one lane a token, s stores, the inverses (and with exact
 * scales the scales) of the thread's R tokens in ri[] (rs[]). */
static void emit_row_scales(lg_buf *b, const struct ctx *k)
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

/* Column maxima across the CTA: cpart after the barrier. */
static void emit_col_amax(lg_buf *b, const struct ctx *k)
{
	lg_comment(b, "Column amax: the warp's two token blocks (lanes l, l ^ 16), then the %d warps", k->warps);
	lg_comment(b, "through shared memory.");
	lg_line(b, "#pragma unroll");
	if (k->bf16) {
		lg_line(b, "for (int j = 0; j < 4; j++)");
		lg_line(b, "\tcmax[j] = lg_max_bf16x2(cmax[j], __shfl_xor_sync(~0u, cmax[j], 16));");
		lg_line(b, "if ((threadIdx.x & 16) == 0)");
		lg_line(b, "\t*(uint4 *)&cpart[threadIdx.x >> 5][4 * lb] =");
		lg_line(b, "\t\tmake_uint4(cmax[0], cmax[1], cmax[2], cmax[3]);");
	} else {
		lg_line(b, "for (int j = 0; j < 8; j++)");
		lg_line(b, "\tcmax[j] = fmaxf(cmax[j], __shfl_xor_sync(~0u, cmax[j], 16));");
		lg_open(b, "if ((threadIdx.x & 16) == 0) {");
		lg_line(b, "float *const cp = &cpart[threadIdx.x >> 5][8 * lb];");
		lg_line(b, "*(float4 *)cp = make_float4(cmax[0], cmax[1], cmax[2], cmax[3]);");
		lg_line(b, "*(float4 *)(cp + 4) = make_float4(cmax[4], cmax[5], cmax[6], cmax[7]);");
		lg_close(b);
	}
	lg_line(b, "__syncthreads();");
}

/* Column scales into st and shared memory (cinv, csc); the barrier after
 * leaves them visible to every thread. */
static void emit_col_scales(lg_buf *b, const struct ctx *k)
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

/* One scale for the whole 128 x 128 tile (weights): the column maxima
 * reduced by the warps that hold them, then every thread takes the scale. */
static void emit_tile_scale(lg_buf *b, const struct ctx *k)
{
	int nt = k->bf16 ? 64 : 128; /* threads holding column maxima: whole warps */
	lg_comment(b, "Tile amax: the column maxima over the %d threads holding them, a butterfly,", nt);
	lg_comment(b, "then across those %d warps.", nt / 32);
	lg_open(b, "if (threadIdx.x < %d) {", nt);
	if (k->bf16) {
		lg_line(b, "u32 a = cpart[0][threadIdx.x];");
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int k = 1; k < %d; k++) a = lg_max_bf16x2(a, cpart[k][threadIdx.x]);", k->warps);
		lg_line(b, "float t = fmaxf(lg_bf16_lo(a), lg_bf16_hi(a));");
	} else {
		lg_line(b, "float t = fmaxf(0.0f, cpart[0][threadIdx.x]); // the 0 the maxima start from");
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int k = 1; k < %d; k++) t = fmaxf(t, cpart[k][threadIdx.x]);", k->warps);
	}
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int m = 16; m > 0; m >>= 1)");
	lg_line(b, "\tt = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, m));");
	lg_line(b, "if ((threadIdx.x & 31) == 0) tmax[threadIdx.x >> 5] = t;");
	lg_close(b);
	lg_line(b, "__syncthreads();");
	if (nt == 64)
		lg_line(b, "const float tamax = fmaxf(tmax[0], tmax[1]);");
	else
		lg_line(b, "const float tamax = fmaxf(fmaxf(tmax[0], tmax[1]), fmaxf(tmax[2], tmax[3]));");
	lg_emit_scale(b, k->e->pow2, "tsc", "tamax", "tinv");
	lg_line(b, "if (threadIdx.x == 0) ((float *)%s)[tt * %lld + cb] = tsc;", k->s, (long long)k->nb);
	if (k->e->cols && k->e->expert_rows) /* the expert's st [K / 128, cdiv(qen, 128)] */
		lg_line(b, "if (threadIdx.x == 0) stg[cb * ((qen + 127) / 128) + lm0 / 128] = tsc;");
	else if (k->e->cols) /* the transposed copy's scales: st [K / 128, cdiv(M, 128)] */
		lg_line(b, "if (threadIdx.x == 0) ((float *)%s)[cb * ((%s + 127) / 128) + tt] = tsc;", k->st, k->m);
}

/* The columnwise copy's scales (per feature, or the tile's) and its words
 * cw: the declarations before the quantising pass. */
static void emit_col_setup(lg_buf *b, const struct ctx *k, int words)
{
	const struct lg_qe *e = k->e;
	bool pow2 = e->pow2;
	if (e->cols && k->tile) {
		lg_comment(b, "  transposed: with the tile's scale, two rows an e4m3x2; cw[c] gets the");
		lg_comment(b, "  %d bytes of column 8 lb + c, row r0 first.", k->r);
		lg_line(b, "u32 cw[8]%s;", words == 2 ? "[2]" : "");
	} else if (e->cols) {
		lg_comment(b, "  columnwise: with its feature's scale, two tokens an e4m3x2; cw[c] gets");
		lg_comment(b, "  the %d bytes of feature 8 lb + c, token r0 first.", k->r);
		lg_line(b, "const float4 c0 = *(const float4 *)(cinv + 8 * lb);");
		lg_line(b, "const float4 c1 = *(const float4 *)(cinv + 8 * lb + 4);");
		lg_line(b, "const float ci[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};");
		if (!pow2) {
			lg_line(b, "const float4 s0 = *(const float4 *)(csc + 8 * lb);");
			lg_line(b, "const float4 s1 = *(const float4 *)(csc + 8 * lb + 4);");
			lg_line(b, "const float cs[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};");
		}
		lg_line(b, "u32 cw[8]%s;", words == 2 ? "[2]" : "");
	}
}

/* y0, y1: the fp32 values of the pair's two tokens r0 + 2p, r0 + 2p + 1. */
static void emit_quantise_pair_values(lg_buf *b, const struct ctx *k)
{
	lg_line(b, "float y0[8], y1[8]; // tokens r0 + 2p and r0 + 2p + 1");
	if (!k->bf16) {
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int j = 0; j < 8; j++)");
		lg_line(b, "\ty0[j] = v[2 * p][j], y1[j] = v[2 * p + 1][j];");
		return;
	}
	lg_line(b, "const lg_u32x4 w0 = v[2 * p], w1 = v[2 * p + 1];");
	lg_line(b, "const u32 a[4] = {w0.x, w0.y, w0.z, w0.w},");
	lg_line(b, "\tb[4] = {w1.x, w1.y, w1.z, w1.w};");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int e = 0; e < 4; e++) { // bf16 -> fp32 is exact");
	lg_line(b, "y0[2 * e] = lg_bf16_lo(a[e]),");
	lg_line(b, "\ty0[2 * e + 1] = lg_bf16_hi(a[e]);");
	lg_line(b, "y1[2 * e] = lg_bf16_lo(b[e]),");
	lg_line(b, "\ty1[2 * e + 1] = lg_bf16_hi(b[e]);");
	lg_close(b);
}

/* The pair's two q rows: 8 bytes each, to qrow. */
static void emit_quantise_pair_rows(lg_buf *b, const struct ctx *k)
{
	bool pow2 = k->e->pow2;
	long long n = (long long)k->e->n;
	const char *a0, *a1;
	if (k->tile) {
		a0 = a1 = lg_quant_q_args(pow2, "tsc, tinv", "tinv");
	} else {
		a0 = lg_quant_q_args(pow2, "s0, i0", "i0");
		a1 = lg_quant_q_args(pow2, "s1, i1", "i1");
		lg_line(b, "const float i0 = ri[2 * p], i1 = ri[2 * p + 1];");
		if (!pow2)
			lg_line(b, "const float s0 = rs[2 * p], s1 = rs[2 * p + 1];");
	}
	lg_line(b, "u32 qa[2], qb[2];");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int e = 0; e < 2; e++) {");
	lg_line(b, "qa[e] = lg_e4m3x4(lg_q(y0[4 * e], %s),", a0);
	lg_line(b, "\tlg_q(y0[4 * e + 1], %s),", a0);
	lg_line(b, "\tlg_q(y0[4 * e + 2], %s),", a0);
	lg_line(b, "\tlg_q(y0[4 * e + 3], %s));", a0);
	lg_line(b, "qb[e] = lg_e4m3x4(lg_q(y1[4 * e], %s),", a1);
	lg_line(b, "\tlg_q(y1[4 * e + 1], %s),", a1);
	lg_line(b, "\tlg_q(y1[4 * e + 2], %s),", a1);
	lg_line(b, "\tlg_q(y1[4 * e + 3], %s));", a1);
	lg_close(b);
	lg_line(b, "if (r0 + 2 * p < rows) lg_st8_cs(qrow + 2 * p * %lld, qa[0], qa[1]);", n);
	lg_line(b, "if (r0 + 2 * p + 1 < rows)");
	lg_line(b, "\tlg_st8_cs(qrow + (2 * p + 1) * %lld, qb[0], qb[1]);", n);
}

/* The pair's column bytes: one e4m3x2 a feature into cw. */
static void emit_quantise_pair_cols(lg_buf *b, const struct ctx *k)
{
	bool pow2 = k->e->pow2;
	const char *ca = k->tile ? lg_quant_q_args(pow2, "tsc, tinv", "tinv")
				 : lg_quant_q_args(pow2, "cs[c], ci[c]", "ci[c]");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int c = 0; c < 8; c++) {");
	lg_line(b, "const u32 h = lg_e4m3x2(lg_q(y0[c], %s),", ca);
	lg_line(b, "\tlg_q(y1[c], %s));", ca);
	if (k->r / 4 == 2)
		lg_line(b, "cw[c][p / 2] = p %% 2 == 0 ? h : cw[c][p / 2] | h << 16;");
	else
		lg_line(b, "cw[c] = p == 0 ? h : cw[c] | h << 16;");
	lg_close(b);
}

/* The column words into the staging tile, then the tile to qt. */
static void emit_stage_and_store(lg_buf *b, const struct ctx *k)
{
	const struct lg_qe *e = k->e;
	bool two = k->r / 4 == 2;
	lg_comment(b, "Stage the columns: token byte t of feature c's line at t ^ (8 (c / 8)), so");
	if (two)
		lg_comment(b, "the 8-byte stores of a half warp (lb = 0..15) hit 16 distinct bank pairs.");
	else
		lg_comment(b, "the 4-byte stores of a warp (two token blocks) hit 32 distinct banks.");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int c = 0; c < 8; c++)");
	if (two) {
		lg_line(b, "\t*(uint2 *)(stage + (8 * lb + c) * 128 + (r0 ^ (8 * lb))) =");
		lg_line(b, "\t\tmake_uint2(cw[c][0], cw[c][1]);");
	} else
		lg_line(b, "\t*(u32 *)(stage + (8 * lb + c) * 128 + (r0 ^ (8 * lb))) = cw[c];");
	lg_line(b, "__syncthreads();");
	if (e->layout == LG_QE_EXPERTS)
		lg_emit_qt_lines_realign(b, e->threads, "qtg", "segn", "lt * 128");
	else if (e->layout == LG_QE_TILE128 && e->expert_rows) /* the expert's: rows qen apart */
		lg_emit_qt_lines_flat(b, e->threads, "qtg", "qen", "lm0");
	else if (e->layout == LG_QE_TILE128) /* the weight's transposed copy: rows M apart */
		lg_emit_qt_lines_flat(b, e->threads, "qtg", k->m, "m0");
	else /* a flat activation's columnwise copy: rows round_up(M, 16) apart, a zero tail */
		lg_emit_qt_lines_pitched(b, e->threads, "qtg", k->m, "m0", e->qt_narrow);
}

/* One pass over the thread's values: q rows, and the column bytes into the
 * staging tile, then the qt lines. */
static void emit_quantise(lg_buf *b, const struct ctx *k)
{
	const struct lg_qe *e = k->e;
	lg_comment(b, "Quantise every value once per copy%s", e->rows && e->cols ? ":" : ".");
	if (e->rows)
		lg_comment(b, "  rowwise: with its %s scale; a half warp stores a token's q line.",
			   k->tile ? "tile's" : "token's");
	emit_col_setup(b, k, k->r / 4);
	if (e->rows)
		lg_line(b, "u8 *const qrow = (u8 *)%s + (m0 + r0) * %lld + k0 + 8 * lb;", k->q, (long long)e->n);
	if (e->cols) {
		lg_comment(b, "A thread whose tokens are all absent has nothing to store but zero bytes");
		lg_comment(b, "(+0 quantises to 0x00 under any scale).");
		lg_open(b, "if (r0 >= rows) {");
		lg_line(b, "#pragma unroll");
		if (k->r / 4 == 2)
			lg_line(b, "for (int c = 0; c < 8; c++) cw[c][0] = cw[c][1] = 0u;");
		else
			lg_line(b, "for (int c = 0; c < 8; c++) cw[c] = 0u;");
		lg_close_with(b, "} else {");
	} else {
		lg_open(b, "if (r0 < rows) { // else: no token of this thread to store");
	}
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int p = 0; p < %d; p++) {", k->r / 2);
	emit_quantise_pair_values(b, k);
	if (e->rows)
		emit_quantise_pair_rows(b, k);
	if (e->cols)
		emit_quantise_pair_cols(b, k);
	lg_close(b);
	lg_close_with(b, "} // r0 < rows");
	if (e->cols)
		emit_stage_and_store(b, k);
}

/* The feature-block loop (or the one block) for the engine as given
 * (its variant set). */
static void emit_blocks(lg_buf *b, const struct ctx *k)
{
	const struct lg_qe *e = k->e;
	const struct lg_qe_hooks *h = k->h;
	emit_first_fetch(b, k);
	if (k->fb > 1) {
		lg_line(b, "const int cb_end = cg * %d + %d < %lld ? cg * %d + %d : %lld;", k->fb, k->fb,
			(long long)k->nb, k->fb, k->fb, (long long)k->nb);
		lg_open(b, "for (int cb = cg * %d; cb < cb_end; cb++) { // the feature blocks of this CTA", k->fb);
	} else {
		lg_line(b, "const int cb = cg; // the feature block");
	}
	lg_line(b, "const i64 k0 = (i64)cb * 128; // its first feature");
	if (h->block)
		h->block(b, e, h->ctx);
	emit_values(b, k);
	if (k->bf16)
		emit_thread_amax_bf16(b, k);
	else
		emit_thread_amax_f32(b, k);
	if (e->rows && !k->tile)
		emit_row_scales(b, k);
	if (k->cmax)
		emit_col_amax(b, k);
	if (e->cols && !k->tile)
		emit_col_scales(b, k);
	if (k->tile)
		emit_tile_scale(b, k);
	emit_quantise(b, k);
	if (h->epilogue)
		h->epilogue(b, e, h->ctx);
	if (k->fb > 1)
		lg_close(b);
}

void lg_qe_emit_body(lg_buf *b, const struct lg_qe *e, const struct lg_qe_hooks *h)
{
	struct lg_qe ev = *e;
	ev.variant = -1;
	struct ctx k = {.e = &ev, .h = h, .r = lg_qe_tokens_per_thread(e), .warps = e->threads / 32,
			.fb = fblocks(e), .nb = e->n / TILE, .bf16 = e->vals == LG_QE_BF16,
			.tile = e->layout == LG_QE_TILE128, .q = nm(e->q, "q"), .s = nm(e->s, "s"),
			.qt = nm(e->qt, "qt"), .st = nm(e->st, "st"), .m = nm(e->m, "M")};
	k.cmax = e->cols || k.tile;
	emit_place(b, &k);
	if (h->prologue)
		h->prologue(b, &ev, h->ctx);
	emit_raw(b, &k);
	if (!e->cta_case) {
		emit_blocks(b, &k);
		emit_tile_end(b, &k);
		return;
	}
	lg_comment(b, "Two copies of the feature blocks, each compiled for its case (the condition is");
	lg_comment(b, "the same in every thread of the CTA; the copies are not indented: the hooks'");
	lg_comment(b, "lines keep their width).");
	for (int v = 1; v >= 0; v--) {
		ev.variant = v;
		lg_line(b, v ? "if (%s) {" : "} else { // not %s", e->cta_case);
		emit_blocks(b, &k);
	}
	lg_line(b, "}");
	emit_tile_end(b, &k);
}
