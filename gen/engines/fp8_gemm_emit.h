/*
 * fp8_gemm_emit.h - the blockwise FP8 GEMM emitter (sm_90a) shared by the
 * FP8 GEMM families (fp8_gemm, fp8_grouped_gemm): C [rows, cols] fp32 =
 * sum over 128-blocks kb of the reduction of (A_kb . B_kb^T) sa sb, both
 * operands e4m3, K-major (reduction-contiguous), read by TMA into shared
 * memory and multiplied by wgmma.m64n<bn>k32.f32.e4m3.e4m3 from shared
 * memory descriptors.
 *
 * Two-level accumulation (DeepGEMM's): each 128-block of the reduction is
 * one stage of the ring (A bm x 128 bytes, B bn x 128 bytes, 128-byte
 * swizzle); a consumer warpgroup issues its four k32 wgmmas of the stage
 * into fresh fp32 partial sums (the first with scale-d 0), waits for them,
 * releases the stage and promotes: acc += partial * sa[row] * sb[col], in
 * full fp32 FMA. The tensor cores' reduced-precision FP8 accumulation thus
 * spans only 128 products; the operands are never dequantised in memory.
 * Scales never come from global memory in the K loop: the producer
 * copies each stage's (A's per row, B's per 128 x 128 tile, one or two a
 * tile, or per row: the wgrad's columnwise copy) into a slot beside the
 * stage by cp.async, arriving on the stage's barrier; the consumers read
 * their rows' and columns' from shared memory after the stage's wait.
 *
 * The ring, barriers, producer fill, waits and release are the one sm_90a
 * pipeline's (wgmma_pipe.h); the e4m3 wgmma, the promotion, the scale warp's
 * copies and the epilogue are this emitter's.
 *
 * CTA: bm / 64 consumer warpgroups (64 rows each) and a producer
 * warpgroup, one thread of which issues the TMA loads into a `stages`-deep
 * ring (full / empty mbarriers, the producer's stage count running on
 * across tiles); persistent: CTA blockIdx.x computes tiles blockIdx.x,
 * + gridDim.x, ... so that the producer loads the next tile's stages while
 * the consumers store this one. The family says what a tile is (struct
 * lg_fp8_sched): its operands' coordinates, its reduction, its valid rows,
 * and emits the store.
 *
 * With a cluster of 2 (consecutive blockIdx.x, `rank` blockIdx.x % 2) the
 * schedule's tiles are cluster tiles of bm x 2 bn: both CTAs take the same
 * one, rank r its columns r bn.. (the family adds `rank * bn` to tb and
 * oc). They share A's tile: each loads its half (bm / 2 rows, the box of
 * A's tensor map) and multicasts it to both, so that a stage reads
 * (bm / 2 + bn) x 128 bytes from L2 a CTA instead of (bm + bn) x 128 (the
 * bound of 128 x 128 tiles: bench/fp8-gemm.md). A stage is refilled once
 * the consumer warps of both CTAs released it (each arrives on both CTAs'
 * `empty`), and neither CTA leaves before the other is done with it (a
 * cluster barrier at the start and the end). The columns of rank 1 may lie
 * past the output's (an odd count of bn tiles): TMA reads zeros, B's scale
 * reads are guarded, the store skips them.
 *
 * The epilogue (with c_tmap): each consumer warpgroup writes its 64 rows of
 * the tile into its own buffer of shared memory in the output tensor map's
 * swizzle, and one of its threads stores them by TMA (adds them, with
 * c_add) in boxes of 64 rows; the warpgroup goes on to its next tile while
 * the stores drain and waits for them to have read the buffer only at the
 * next epilogue. A warpgroup whose rows reach past rend (a segment's last
 * tile) stores from registers instead, as without c_tmap. With tile.m 256
 * each wave's 64 rows are stored so (by TMA when whole, else from
 * registers), each through a 64-row buffer of its warpgroup's taken in
 * turn: 2 c_bufs, halved while they take more than 64 KB in all (bf16
 * 256 x 128: two, the stores of a tile drain during the next; fp32: one, a
 * wave's stores wait for the wave before's to have read it); its consumers
 * then run at 232 registers, the producer at 40.
 */
#ifndef LG_FP8_GEMM_EMIT_H
#define LG_FP8_GEMM_EMIT_H

#include <stdbool.h>

#include "buf.h"
#include "family.h"

/* The schedule: code the family emits into the kernel. */
struct lg_fp8_sched {
	void *ctx;
	/* Before the role split (every thread): declare `const i64 tiles`
	 * (tiles of the launch) and whatever tile() reads; may use shared
	 * memory it declares itself and __syncthreads. */
	void (*setup)(lg_buf *b, void *ctx);
	/* In each tile loop, at `const i64 tile`, what one role reads and no
	 * more. The producer's (producer true): `const int ta, tb` (A's and B's
	 * first row in their tensor maps; the reduction starts at element 0)
	 * and `const int nkt` (its 128-blocks); with manual operands instead ta,
	 * nkt and what the copies read (struct lg_fp8_gemm's `manual`). The
	 * consumers': `const int ta, nkt` (ta: the output row of the tile's
	 * first row), `const i64 oc` (its first output column) and `const i64
	 * rend` (rows from ta below rend are real: scales and stores past it
	 * are skipped), and whatever the scale macros read. */
	void (*tile)(lg_buf *b, void *ctx, bool producer);
	/* With pingpong, where the tiles' nkt differ (NULL: every tile's is
	 * the same): `const int <name>`, the stages of tile `t` (an i64
	 * expression, a tile below `tiles`), from what setup declared. */
	void (*count)(lg_buf *b, void *ctx, const char *t, const char *name);
};

struct lg_fp8_gemm {
	int bm, bn, stages;
	/* tensor map pointers: parameters ("&tm_x") or, manual, the
	 * schedule's per-block maps ("ma") */
	const char *a_tmap, *b_tmap;
	/* the scales: the family defines the macros LG_SA(kb, row), A's of row
	 * `row` (< rend) at reduction block kb, and LG_SB(kb, c): B's of output
	 * column c (< cols) when b_rowscale, else of the 128 x 128 tile c
	 * (the output column's 128-block) */
	bool b_rowscale;
	const char *cols; /* output columns (an expression: B's scale guard) */
	/* false: A and B are read by TMA through the kernel's tensor maps
	 * a_tmap, b_tmap, one thread loading, a scale warp copying the scales.
	 * true: blocks of rows whose strides vary by tile (the grouped wgrad's
	 * per-expert blocks, rows of count_e bytes), filled by the producer
	 * warpgroup's 128 threads: by TMA through per-block maps a_tmap, b_tmap
	 * (patched on the device by the family before the GEMM) where the
	 * rows are 16-byte aligned, else byte by byte into the swizzled layout
	 * (zeros past the tile's valid rows and reduction); the scales by the
	 * same threads. The schedule's producer tile() then also declares the
	 * consumers' view (the scales' copies read it), `const bool al` (the
	 * rows 16-byte aligned: TMA), the maps' pointers and `const int ya, yb`
	 * (A's and B's first row in them), and for the byte copies `const u8
	 * *ga, *gb` (A's and B's first row at reduction element 0), `const i64
	 * lda, ldb` (their row strides, bytes), `const int na, nb` (valid rows
	 * from ga, gb) and `const i64 rlen` (valid reduction elements). */
	bool manual;
	/* CTAs a cluster sharing A's tile by multicast: 1 (0: 1) or 2; TMA only */
	int cluster;
	/* 0, or the consumers issue the next stage's wgmmas (into a second
	 * buffer of partial sums) before promoting this one's, in groups of 4
	 * stages (1) or of `ahead` stages (2..32): bn <= 128. A group's last
	 * promotion waits for its wgmmas (ptxas serialises a loop whose back
	 * edge a wgmma is in flight across), so longer groups leave fewer of
	 * those; a static reduction of one group has none but the tile's last. */
	int ahead;
	/* each tile's epilogue runs in the next tile's first stage, after
	 * that stage's wgmmas were issued into the partial sums, so that the
	 * tensor cores work while the warpgroup stores (acc lives across tiles;
	 * a tile without stages stores the one before at once, the last tile
	 * after the loop); one wave a warpgroup (bm <= 128) */
	bool overlap;
	/* the output through shared memory and TMA (above): c_tmap its tensor
	 * map ("&tm_y"; NULL: stores from registers), c_elem its element bytes
	 * (2: bf16, 4: fp32), c_add: the stores add to it (accumulate, fp32) */
	const char *c_tmap;
	int c_elem;
	bool c_add;
	/* the two consumer warpgroups on different tiles (CUTLASS's
	 * ping-pong, at the stage): each warpgroup takes every other tile of
	 * the CTA's whole, its 128 rows in two waves (bm 128, the wave rules
	 * of tile.m 256: TMA operands, bn <= 128, no ahead or overlap) or 64
	 * rows in one (bm 64: any operands, the grouped wgrad's too), and
	 * the producer loads the stages of a pair of tiles in
	 * turn (tile 0's block kt, tile 1's block kt, ...), so that one
	 * warpgroup's promotion and epilogue run while the other's wgmmas
	 * keep the tensor cores busy; a stage is A's 128 rows and B's tile,
	 * released by its one warpgroup. The consumers find where a tile's
	 * stages lie from the other tile's nkt: the schedule's count, or every
	 * tile's the same. */
	bool pingpong;
	/* buffers a warpgroup (c_tmap): 1, or 2 used by alternate tiles, so that
	 * a tile's stores wait only for those of the tile before the last
	 * (tile.m 256: 64-row buffers a wave's stores take in turn, 2 c_bufs
	 * of them halved while they take more than 64 KB) */
	int c_bufs;
};

/* Threads of a CTA (bm / 64 consumer warpgroups and the producer's). */
int lg_fp8_gemm_threads(const struct lg_fp8_gemm *g);
/* Dynamic shared memory bytes. */
unsigned lg_fp8_gemm_smem(const struct lg_fp8_gemm *g);
/* CTAs of g's cluster (1 or 2). */
int lg_fp8_gemm_cluster(const struct lg_fp8_gemm *g);
/* May g be `ahead` (three buffers of bn / 2 registers: bn <= 128, one
 * wave, not pingpong; with per-row B scales those are read from shared
 * memory in the promotion)? */
bool lg_fp8_gemm_can_ahead(const struct lg_fp8_gemm *g);
/* NULL when g is a valid tile, else why not: bm 64 or 128 (or 256, or 128
 * with pingpong, with bn up to 128, no ahead and TMA operands: not the
 * grouped wgrad), bn a multiple of 16 up to 256 whose tiles span at most two
 * 128-blocks of B's tile scales, stages 2..8, a cluster of 1 or 2 (1 with
 * manual operands), ahead 0..32 with bn <= 128, overlap with bm <= 128. */
const char *lg_fp8_gemm_problem(const struct lg_fp8_gemm *g);
/* The stages that fit `limit` bytes, at most `want` (at least 2). */
int lg_fp8_gemm_fit_stages(struct lg_fp8_gemm *g, int want, unsigned limit);
/* The tensor map boxes (elements, rows) of A and B (128-byte swizzle; A's
 * a CTA's share of the cluster's). */
void lg_fp8_gemm_boxes(const struct lg_fp8_gemm *g, unsigned box_a[2], unsigned box_b[2]);
/* The output tensor map's box (elements, rows) and swizzle (bytes) with
 * c_tmap: 64 rows of the widest swizzle span (128, 64 or 32 bytes) that
 * divides a tile's row. */
void lg_fp8_gemm_out_box(const struct lg_fp8_gemm *g, unsigned box[2], int *swizzle);
/* <prefix>_wgmma: the wgmma of the tile's width (before the kernel). */
void lg_fp8_gemm_emit_helpers(lg_buf *b, const struct lg_fp8_gemm *g, const char *prefix);
/* The kernel body after its signature's `{`: shared memory, setup, the
 * producer, the consumers' loops and the epilogue, which calls
 * `<store>row, col, v0, v1)` for each accumulator pair ((row, col) and
 * (row, col + 1), col even; rows below rend, columns unchecked), or with
 * c_tmap stores by TMA where a warpgroup's rows are whole. */
void lg_fp8_gemm_emit_body(lg_buf *b, const struct lg_fp8_gemm *g, const struct lg_fp8_sched *sc,
			   const char *prefix, const char *store);

#endif
