/*
 * gemm_emit.h - the tensor-core GEMM emitter shared by the GEMM families:
 * C [rows, cols] (fp32 accumulators) = A . B^T over a reduction, as plain
 * CUDA with inline PTX, specialised by a tile (no templates).
 *
 * Operands. A has the output dimension "rows", B "cols"; both share the
 * reduction. Each is in memory either reduction-contiguous ("K-major",
 * element (o, r) at o * ld + r) or output-contiguous ("MN-major", at
 * r * ld + o), bf16, or (A only) fp32 split in registers into 1 to 3 bf16
 * terms (lg_split_bf16x2): t terms give 8 t significant bits of A, so 3
 * terms give fp32 A exactly; products with a bf16 B are exact and the
 * accumulation is fp32 (with `tf32`, A is rounded to tf32 first: its 2
 * terms hold it exactly, the products of tf32 tensor cores).
 *
 * The sm_80 path (also what sm_89 and sm_90 run): a CTA computes a
 * bm x bn tile with warps_m x warps_n warps (each a (bm / warps_m) x
 * (bn / warps_n) warp tile of 16 x 8 mma.sync.m16n8k16 tiles), over
 * reduction tiles of bk in a `stages`-deep cp.async ring in shared memory
 * (one commit group a stage, a __syncthreads a reduction tile). Shared
 * tiles are swizzled (lg_swz: 16-byte chunks XOR the row mod 8) so that
 * ldmatrix (bf16; .trans for MN-major) and the fp32 fragment loads are
 * free of bank conflicts. Every load is predicated against the operand's
 * extents at 16-byte (or 4-byte) granularity with zero fill, so any M, N,
 * K work given that each operand's contiguous extent and row stride are
 * multiples of its chunk's elements (the family validates that).
 *
 * The sm_90a path (lg_gemm90_*; bf16 operands, or an fp32 A) runs on the one
 * sm_90a pipeline (wgmma_pipe.h: ring, barriers, producer, waits, release),
 * with the bf16 wgmma, the split of an fp32 A and the epilogue its own. A
 * CTA of bm / 64 consumer warpgroups and one producer warpgroup computes a
 * bm x bn tile.
 * One thread of the producer issues TMA loads of the A (bm x 64) and B
 * (bn x 64) tiles of each reduction tile of 64 into a `stages`-deep ring
 * of 1024-byte aligned stages (128-byte rows, the 128-byte swizzle TMA
 * writes and wgmma reads). A K-major operand is one box of 64 reduction
 * elements x its rows; an MN-major one boxes of 64 outputs x the 64
 * reduction rows, 8 KB each, read by wgmma transposed (imm-trans 1,
 * lg_wg_desc_mn: the boxes 8 KB apart, 8-row groups 1 KB apart). An fp32
 * A arrives in unswizzled boxes of 64 x 64 (16 KB, one a consumer
 * warpgroup: its 64 rows, either major): each consumer warpgroup splits
 * its box into `terms` bf16 planes (lg_split_bf16x2) in the swizzled
 * layout wgmma reads, in one of two plane buffers outside the ring (tile
 * kt in buffer kt % 2: the group of tile kt - 2 that read it is done),
 * fences them to the async proxy, meets its four warps at a named barrier
 * and issues one wgmma a plane with the same B tile into the same
 * accumulators; the split of tile kt runs while the group of tile kt - 1
 * computes. (Its tensor map needs rows of a multiple of 16 bytes.) Each
 * stage's `full` mbarrier completes on the bytes, its `empty` mbarrier on one arrival
 * of every consumer warp. Consumer warpgroup c issues wgmma.mma_async
 * m64 n<bn> k16 (both operands by shared memory descriptors, fp32
 * accumulators in registers: bn / 2 a thread) over its 64 rows, four a
 * stage, commits them as one group and keeps one group in flight: the
 * stage of the previous group is released when it completes. The
 * producer gives up registers (setmaxnreg) to the consumers. TMA zero-
 * fills what lies outside the operands, so any M, N, K work (K a
 * multiple of 8: TMA's 16-byte row stride); the family passes each
 * operand's tensor map (lg_gemm90_boxes) in its plan.
 * With a cluster of 2 CTAs (consecutive blockIdx.x, tiles at consecutive
 * row blocks, the same columns), each loads half of the B tile (box
 * 64 x bn / 2) and multicasts it to both, halving B's L2 traffic: a stage
 * is refilled once the consumer warps of both CTAs released it (their
 * arrivals on each CTA's `empty`), and neither CTA leaves before the other
 * is done with it (a cluster barrier at the start and the end).
 *
 * Persistent CTAs (lg_gemm90_emit_tiles, no cluster) loop over tiles: the
 * stage and phase counts run on across tiles and the consumers release the
 * last stage of each tile, so that the producer loads the next tile while
 * the consumers store this one.
 *
 * With `convert`, an fp32 A's tile is split once by the CTA: in the
 * iteration of tile kt the CTA waits for tile kt + 1 (one stage less of
 * look-ahead), splits its A into bf16 planes (buffer (kt + 1) % 2) and runs
 * the mma of tile kt on buffer kt % 2: one __syncthreads a tile still
 * orders both buffers and the ring.
 *
 * The epilogue hands each pair of accumulators (row, col) and (row,
 * col + 1), col even, to a store function the family emits: it
 * predicates, converts and writes.
 */
#ifndef LG_GEMM_EMIT_H
#define LG_GEMM_EMIT_H

#include <stdbool.h>

#include "buf.h"
#include "family.h"

struct lg_gemm_operand {
	const char *name;    /* "a" or "b": the prefix of its generated loader */
	bool fp32;           /* fp32 in memory (A only), else bf16 */
	bool mn_major;       /* the output dimension contiguous in memory (else the reduction) */
	const char *ptr;     /* the u64 kernel argument holding its address; NULL (A only):
				produced by the kernel (lg_gemm_emit_mainloop_fill) */
	const char *ld;      /* elements between consecutive rows in memory (an expression) */
	const char *out_ext; /* extent of its output dimension (an expression) */
	const char *red_ext; /* extent of its reduction dimension (an expression) */
	int chunk;           /* bytes one cp.async copies: 16, or 4 (fp32 only) */
	const char *tmap;    /* sm_90a: its tensor map parameter ("tm_x"; family.h, lg_tmap_decl) */
};

struct lg_gemm_tile {
	int bm, bn, bk;         /* the CTA tile: rows, columns, reduction step */
	int warps_m, warps_n;   /* the warp grid */
	int stages;             /* reduction tiles in flight (2..8) */
};

struct lg_gemm {
	struct lg_gemm_tile t;
	struct lg_gemm_operand a, b;
	/* bf16 terms of an fp32 A: 1..3 (1 for bf16 loaded); a bf16 A made by
	 * the kernel (or split by `convert`) of several terms is held as that
	 * many planes, <prefix>_st_a splitting the fp32 values it is given */
	int terms;
	/* fp32 A rounded to tf32 before its split (lg_split_tf32; terms 2,
	 * which hold it exactly): the products of tf32 tensor cores */
	bool tf32;
	/* fp32 A (loaded): split into `terms` bf16 planes in shared memory once
	 * a reduction tile, by the whole CTA one tile ahead of the mma (two
	 * plane buffers), instead of by every warp as it builds its fragments
	 * (ldmatrix then reads the planes); stages >= 3. */
	bool convert;
	/* sm_90a: CTAs of a cluster along the rows (1 or 2) sharing B: each
	 * loads 1 / cluster of B's rows and multicasts it to all (0: 1). */
	int cluster;
};

/* The spec keys (key indices of a family's table, -1: not declared) that
 * set a tile's fields. */
struct lg_gemm_tile_keys {
	int bm, bn, bk, stages, warps_m, warps_n;
};
/* t with each field whose key the spec s gives replaced by its value. */
void lg_gemm_tile_from_spec(const struct lg_spec *s, const struct lg_gemm_tile_keys *k, struct lg_gemm_tile *t);
/* The dynamic shared memory a CTA may have on t (bytes): 227 KB on sm_90
 * and newer, 163 KB on sm_80, 99 KB on the others (sm_86, sm_89). */
unsigned lg_gemm_smem_limit(const struct lg_target *t);

/* Threads of a CTA (32 a warp). */
int lg_gemm_threads(const struct lg_gemm_tile *t);

/* Warps for a tile the spec sized itself (unless it names them too): a
 * power of two, up to 4 across its columns and 8 in all, each warp's share
 * of rows and columns a multiple of 16. */
void lg_gemm_fit_warps(struct lg_gemm_tile *t);
/* Dynamic shared memory bytes of g's pipeline. */
unsigned lg_gemm_smem(const struct lg_gemm *g);
/* NULL when t is a valid tile for operands of these kinds, else why not
 * (for a spec error): warp tiles multiples of 16, bk a multiple of 16,
 * shared rows of 64 bytes or a multiple of 128. */
const char *lg_gemm_tile_problem(const struct lg_gemm *g);

/* The stage loaders of g's operands: <prefix>_load_a, <prefix>_load_b. */
void lg_gemm_emit_loaders(lg_buf *b, const struct lg_gemm *g, const char *prefix);
/* The main loop, inline in a kernel body with `smem` (the dynamic shared
 * memory, 128-byte aligned) in scope: declares `acc`, `lane`, `wm`, `wn`
 * and accumulates the tile at A rows o0a.., B rows o0b.. over reduction
 * tiles [kt0, kt1) (i64 expressions). */
void lg_gemm_emit_mainloop(lg_buf *b, const struct lg_gemm *g, const char *prefix, const char *o0a,
			   const char *o0b, const char *kt0, const char *kt1);
/* A main loop whose A the kernel makes itself (g->a.ptr NULL; e.g. a
 * normalised input, so that it is never read back from memory). Two hooks
 * emit code inside the loop, at an i64 expression `r0` (the first reduction
 * index of a tile): fetch issues the global loads of tile r0 into registers
 * the kernel declared before the loop; fill, called one tile later (the
 * loads have had a whole tile of mma to land), turns them into the A values
 * and writes them into the stage `dst` (a u8 * expression) with
 * <prefix>_st_a(dst, row, col, v) (plain shared stores, so complete when it
 * returns), zeros for rows and reduction indices past the operand. Each
 * tile is fetched once and filled once, in order; B's cp.async copies of
 * the tile are issued before its fill. */
struct lg_gemm_fill {
	void *ctx;
	void (*fetch)(lg_buf *b, const struct lg_gemm *g, const char *r0, void *ctx);
	void (*fill)(lg_buf *b, const struct lg_gemm *g, const char *r0, const char *dst, void *ctx);
};
void lg_gemm_emit_mainloop_fill(lg_buf *b, const struct lg_gemm *g, const char *prefix, const char *o0a,
				const char *o0b, const char *kt0, const char *kt1, const struct lg_gemm_fill *fill);
/* `name(float *out, i64 rows, i64 cols, i64 row, i64 col, float v0, float
 * v1)`: the store of an fp32 accumulator pair into a row-major [rows, cols]
 * output, predicated (even: cols is even, one 8-byte store). */
void lg_gemm_emit_store_f32(lg_buf *b, const char *name, bool even);
/* The epilogue after the main loop: `<store>row, col, v0, v1)` for every
 * accumulator pair (store is e.g. "lg_store(y, M, "). */
void lg_gemm_emit_epilogue(lg_buf *b, const struct lg_gemm *g, const char *o0a, const char *o0b,
			   const char *store);

/* ------------------------------------------------------------ sm_90a */

/* Threads of a CTA: bm / 64 consumer warpgroups and the producer's. */
int lg_gemm90_threads(const struct lg_gemm_tile *t);
/* Dynamic shared memory bytes (the ring, its mbarriers, alignment slack). */
unsigned lg_gemm90_smem(const struct lg_gemm *g);
/* NULL when g can run on the sm_90a path, else why not: bf16 operands or
 * an fp32 A (1 to 3 terms, no `convert`), tile.m 64 or 128, tile.n a
 * multiple of 16 up to 256 (of 64 when B is MN-major), tile.k 64, stages
 * 2 to 8, a cluster only with a bf16 A and a K-major B. */
const char *lg_gemm90_tile_problem(const struct lg_gemm *g);
/* The tensor map box of each operand (elements, rows) with its swizzle
 * (bytes: 128, none for an fp32 A). */
void lg_gemm90_boxes(const struct lg_gemm *g, unsigned box_a[2], unsigned box_b[2], int *swizzle_a,
		     int *swizzle_b);
/* CTAs of g's cluster (1 or 2). */
int lg_gemm90_cluster(const struct lg_gemm *g);
/* <prefix>_wgmma: one wgmma.mma_async of the tile's width. */
void lg_gemm90_emit_helpers(lg_buf *b, const struct lg_gemm *g, const char *prefix);
/* The producer / consumer main loop, inline in a kernel body with `smem`
 * (dynamic shared memory) in scope, over reduction tiles [kt0, kt1) of
 * the tile at A rows o0a.., B rows o0b.. (int expressions). The producer
 * warpgroup returns; consumers leave with `acc`, `wg`, `lane`, `warp`
 * declared for lg_gemm90_emit_epilogue. */
void lg_gemm90_emit_mainloop(lg_buf *b, const struct lg_gemm *g, const char *prefix, const char *o0a,
			     const char *o0b, const char *kt0, const char *kt1);
/* The main loop of persistent CTAs (no cluster): CTA blockIdx.x computes
 * tiles blockIdx.x, + gridDim.x, ... of `tiles` (an i64 expression) in
 * row-major order of `cols` tile columns, each over reduction tiles
 * [kt0, kt1). Each consumer warpgroup opens its loop over the tiles and
 * declares `o0a`, `o0b` (the tile's origin) there: the family emits the
 * epilogue, then lg_gemm90_emit_tiles_end closes the loop. The producer
 * counts its stages on across tiles, so it loads the next tile's first
 * stages while the consumers store this one, and one CTA's prologue
 * (barriers, tensor map prefetch, the first loads' latency) serves all. */
void lg_gemm90_emit_tiles(lg_buf *b, const struct lg_gemm *g, const char *prefix, const char *tiles, long long cols,
			  const char *kt0, const char *kt1);
void lg_gemm90_emit_tiles_end(lg_buf *b);
/* The consumers' epilogue: `<store>row, col, v0, v1)` as lg_gemm_emit_epilogue
 * (then, with a cluster, the cluster barrier the producer also waits at). */
void lg_gemm90_emit_epilogue(lg_buf *b, const struct lg_gemm *g, const char *o0a, const char *o0b,
			     const char *store);

#endif
