/*
 * fp8_gemm_tile.c - the blockwise FP8 GEMM's tile (fp8_gemm_tile.h): its
 * warpgroups, waves, shared memory, epilogue buffers and validity.
 */
#include "fp8_gemm_tile.h"

#include <stdio.h>

#include "wgmma_pipe.h"

/* Waves a consumer warpgroup issues a stage: 2 with tile.m 256 or 128
 * pingpong rows (128 rows as two m64 wgmmas, each awaited and promoted
 * before the next, so that one buffer of partial sums serves both), else 1. */
int lg_fp8_gemm_waves(const struct lg_fp8_gemm *g) { return g->pingpong ? g->bm / 64 : g->bm > 128 ? 2 : 1; }

/* Consumer warpgroups: 64 rows each, or 128 (two waves) with tile.m 256;
 * with pingpong two, each on a tile of its own. */
int lg_fp8_gemm_consumers(const struct lg_fp8_gemm *g)
{
	return g->pingpong ? 2 : g->bm / (64 * lg_fp8_gemm_waves(g));
}

/* A consumer warpgroup's first row in its tiles (and its A rows' in a
 * stage): wg times this, 0 with pingpong (the whole tile is its). */
int lg_fp8_gemm_wg_rows(const struct lg_fp8_gemm *g) { return g->pingpong ? 0 : 64 * lg_fp8_gemm_waves(g); }

int lg_fp8_gemm_cluster(const struct lg_fp8_gemm *g) { return g->cluster > 1 ? g->cluster : 1; }

bool lg_fp8_gemm_can_ahead(const struct lg_fp8_gemm *g)
{
	return g->bn <= 128 && lg_fp8_gemm_waves(g) == 1 && !g->pingpong;
}

/* Stages a group of the `ahead` loop (tile.ahead 1: 4). */
int lg_fp8_gemm_group(const struct lg_fp8_gemm *g) { return g->ahead > 1 ? g->ahead : 4; }

/* Does the promotion read B's per-row scales from the stage's slot (the
 * wgrad ahead, or with waves: no registers for them beside two buffers of
 * partial sums, or 128 accumulators), so that the stage is released after
 * it? */
bool lg_fp8_gemm_late_scales(const struct lg_fp8_gemm *g)
{
	return (g->ahead || lg_fp8_gemm_waves(g) > 1) && g->b_rowscale;
}

int lg_fp8_gemm_threads(const struct lg_fp8_gemm *g) { return lg_wgp_threads(lg_fp8_gemm_consumers(g)); }

unsigned lg_fp8_gemm_stage_bytes(const struct lg_fp8_gemm *g) { return (unsigned)(g->bm + g->bn) * ROWB; }

/* B's scales a stage: one per column (per row of B), or the one or two
 * 128 x 128 tiles' (a slot of 4: 16-byte slots). */
static int b_scales(const struct lg_fp8_gemm *g) { return g->b_rowscale ? g->bn : 4; }

/* Floats of a stage's scale slot: A's bm, then B's. */
int lg_fp8_gemm_slot(const struct lg_fp8_gemm *g) { return g->bm + b_scales(g); }

/* tile.epilogue 3: one buffer a warpgroup of half the tile's columns, its
 * 64 rows stored in two passes (the second after the first's stores have
 * read it): 16 KB instead of 32 at 128 x 128 bf16, a stage more. */
bool lg_fp8_gemm_half_out(const struct lg_fp8_gemm *g) { return g->c_bufs == 3; }

/* Columns of an epilogue buffer's row. */
int lg_fp8_gemm_out_cols(const struct lg_fp8_gemm *g) { return lg_fp8_gemm_half_out(g) ? g->bn / 2 : g->bn; }

/* The epilogue's buffers (c_tmap) a consumer warpgroup, of 64 rows each:
 * c_bufs; with waves (tile.m 256; pingpong: c_bufs) 2 c_bufs, one a wave of c_bufs tiles'
 * (their stores in flight), halved while they take more than 64 KB in all
 * (3 stages fit beside 64 KB): bf16 256 x 128 two at c_bufs 1 and 2 (a
 * tile's), fp32 256 x 128 one (a wave's stores wait for the wave before's
 * to have read it). A wave's stores take the buffers in turn (a counter of
 * the waves stored by TMA, with more than one). */
int lg_fp8_gemm_out_slots(const struct lg_fp8_gemm *g)
{
	if (lg_fp8_gemm_waves(g) == 1)
		return lg_fp8_gemm_half_out(g) ? 1 : g->c_bufs;
	/* pingpong: c_bufs (its two waves' stores take one in turn at 1: a
	 * stage more fits, and the other warpgroup's wgmmas run meanwhile) */
	int n = g->pingpong ? g->c_bufs : lg_fp8_gemm_waves(g) * g->c_bufs;
	while (n > 1 && lg_fp8_gemm_consumers(g) * n * 64 * g->bn * g->c_elem > 65536)
		n /= 2;
	return n;
}

/* Bytes of a 64-row buffer of the epilogue. */
int lg_fp8_gemm_slot_bytes(const struct lg_fp8_gemm *g) { return 64 * lg_fp8_gemm_out_cols(g) * g->c_elem; }

/* Bytes of the epilogue's buffers (c_tmap): a tile of the output (half of
 * one with waves where out_slots says so). */
unsigned lg_fp8_gemm_out_bytes(const struct lg_fp8_gemm *g)
{
	return g->c_tmap ? (unsigned)(lg_fp8_gemm_consumers(g) * lg_fp8_gemm_out_slots(g) * lg_fp8_gemm_slot_bytes(g)) : 0u;
}

unsigned lg_fp8_gemm_smem(const struct lg_fp8_gemm *g)
{
	/* 1024 of slack to align the ring; the epilogue's buffers; a scale slot
	 * and two mbarriers a stage */
	unsigned stage = lg_fp8_gemm_stage_bytes(g) + (unsigned)lg_fp8_gemm_slot(g) * 4u + 16u;
	return 1024u + lg_fp8_gemm_out_bytes(g) + (unsigned)g->stages * stage;
}

/* The output's swizzle span: bytes of a box's row. */
int lg_fp8_gemm_out_span(const struct lg_fp8_gemm *g)
{
	int row = lg_fp8_gemm_out_cols(g) * g->c_elem;
	return row % 128 == 0 ? 128 : row % 64 == 0 ? 64 : 32;
}

void lg_fp8_gemm_out_box(const struct lg_fp8_gemm *g, unsigned box[2], int *swizzle)
{
	*swizzle = lg_fp8_gemm_out_span(g);
	box[0] = (unsigned)(lg_fp8_gemm_out_span(g) / g->c_elem);
	box[1] = 64;
}

int lg_fp8_gemm_fit_stages(struct lg_fp8_gemm *g, int want, unsigned limit)
{
	g->stages = want;
	while (g->stages > 2 && lg_fp8_gemm_smem(g) > limit)
		g->stages--;
	return g->stages;
}

/* Does every tile's column range (origins multiples of bn) lie within two
 * 128-blocks of B's scales? */
static bool two_blocks(int bn)
{
	for (int k = 0; k < 128; k++)
		if ((k * bn) % 128 + bn > 256)
			return false;
	return true;
}

/* One 128-block of B's scales a tile (bn divides 128): no select. */
bool lg_fp8_gemm_one_block(int bn) { return 128 % bn == 0; }

const char *lg_fp8_gemm_problem(const struct lg_fp8_gemm *g)
{
	if (g->bm != 64 && g->bm != 128 && g->bm != 256)
		return "tile.m 64, 128 (one consumer warpgroup a 64 rows) or 256";
	if (g->pingpong && ((g->bm != 128 && g->bm != 64) || (g->bm == 128 && g->manual) || g->ahead || g->overlap ||
			    g->bn > 128 || lg_fp8_gemm_half_out(g)))
		return "tile.pingpong with tile.m 128 (a warpgroup's tile in two waves; operands by TMA: not the "
		       "grouped wgrad) or 64, tile.n up to 128, no ahead or overlap, and an epilogue of 0, 1 or 2";
	if (lg_fp8_gemm_waves(g) > 1 && (g->manual || g->ahead || g->bn > 128))
		return "tile.m 256 (two warpgroups of 128 rows, two waves each), operands by TMA (not the grouped "
		       "wgrad), with tile.n up to 128 and no ahead";
	if (g->bn < 16 || g->bn > 256 || g->bn % 16 != 0)
		return "tile.n a multiple of 16 up to 256";
	if (!g->b_rowscale && !two_blocks(g->bn))
		return "tile.n whose tiles span at most two 128-column scale blocks (16..128, 144, 160, 192, 256)";
	if (g->stages < 2 || g->stages > 8)
		return "tile.stages 2 to 8";
	if (g->ahead < 0 || g->ahead > 32)
		return "tile.ahead 0 (off), 1 (groups of 4 stages) or the stages of a group, 2 to 32";
	if (g->ahead && !lg_fp8_gemm_can_ahead(g))
		return "tile.ahead with tile.n up to 128 (three buffers of bn / 2 registers)";
	if (g->overlap && lg_fp8_gemm_waves(g) > 1)
		return "tile.overlap with tile.m up to 128 (one wave a warpgroup)";
	if (lg_fp8_gemm_half_out(g) && (lg_fp8_gemm_waves(g) > 1 || g->bn / 2 * g->c_elem % 32 != 0))
		return "tile.epilogue 3 (half-width buffers) with tile.m up to 128 and rows of half the tile's "
		       "columns a multiple of 32 bytes (tile.n a multiple of 32 at bf16, 16 at fp32)";
	if (g->cluster < 0 || g->cluster > 2 || (g->manual && lg_fp8_gemm_cluster(g) > 1))
		return "tile.cluster 1 or 2 (1 where the operands are copied without tensor maps: the grouped wgrad)";
	return NULL;
}

void lg_fp8_gemm_boxes(const struct lg_fp8_gemm *g, unsigned box_a[2], unsigned box_b[2])
{
	box_a[0] = box_b[0] = BK;
	box_a[1] = (unsigned)(g->bm / lg_fp8_gemm_cluster(g));
	box_b[1] = (unsigned)g->bn;
}

