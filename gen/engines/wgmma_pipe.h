/*
 * wgmma_pipe.h - the one TMA / mbarrier / wgmma pipeline of the sm_90a
 * GEMMs (gemm_emit.h's lg_gemm90_*, bf16 or a split fp32 A; fp8_gemm_emit.h,
 * e4m3 with blockwise promotion). What they share is written here once;
 * the operand type, the promotion and the scale warp, the split of an fp32
 * A and the epilogues stay in their emitters, as hooks of this one.
 *
 * The pipeline. A CTA is `consumers` consumer warpgroups (64 rows of the
 * tile each, or 128 in two m64 waves: the FP8 GEMM's tile.m 256) and a
 * producer warpgroup (warpgroup `consumers`). The ring is
 * `stages` stages at 1024-byte boundaries (`ring`, the 128-byte swizzle TMA
 * writes and wgmma reads); each stage has a `full` mbarrier (completes on
 * its bytes and `full_count` arrivals) and an `empty` one (one arrival of
 * every consumer warp of the cluster). The producer claims stage `it %
 * stages` once its consumers released it (phase ((it / stages) - 1) & 1;
 * the first `stages` need no wait), and its loads complete full[s]; the
 * consumers wait on full[s] with phase (it / stages) & 1 and release it.
 * The count `it` runs on across a persistent CTA's tiles, so that the
 * producer loads the next tile's stages while the consumers store this one.
 *
 * With a cluster of 2 (consecutive blockIdx.x), both CTAs' consumers
 * release each stage of both (its producer multicasts into both), the
 * barriers are ready in both before any load (a cluster barrier after
 * their initialisation) and neither CTA leaves while the other may still
 * arrive on its barriers (a cluster barrier at the end of each role).
 *
 * setmaxnreg (with two consumer warpgroups, 384 threads launched at 168
 * registers a thread): a setmaxnreg.inc waits for registers the CTA's
 * other warps released, so 2 x 128 (inc - 168) <= 128 (168 - dec): the
 * pairs below. The producer's count is what its busiest thread needs: the
 * loads' thread alone, a scale warp walking the tiles as the consumers
 * do, or 128 threads copying bytes.
 */
#ifndef LG_WGMMA_PIPE_H
#define LG_WGMMA_PIPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

struct lg_spec;
struct lg_plan;

#define LG_WGP_DEC_TMA 40    /* the loads' thread only */
#define LG_WGP_INC_TMA 232
#define LG_WGP_DEC_SCALES 48 /* and a scale warp (232 would then wait forever; the FP8
			      * GEMM's tile.m 256 through TMA and its wgrad take the pair
			      * above: their scale warps fit 40, by ptxas) */
#define LG_WGP_INC_SCALES 224
#define LG_WGP_DEC_COPY 96   /* every producer thread copies */
#define LG_WGP_INC_COPY 200

struct lg_wgp {
	int consumers;         /* consumer warpgroups (64 rows each; 128 in two waves) */
	int stages;            /* the ring's depth */
	int cluster;           /* CTAs a cluster: 1 or 2 */
	unsigned stage_bytes;  /* a stage's bytes in the ring (the loads' transaction) */
	int full_count;        /* arrivals on a full barrier besides the bytes */
	const char *full_why;  /* who makes them (a comment), or NULL */
	int dec, inc;          /* setmaxnreg of the producer, of the consumers (LG_WGP_*) */
	int readers;           /* warpgroups that read (and release) each stage: 1, or 0 for
				* all the consumers (with 1, the tiles' stages in pairs) */
};

/* Threads of a CTA: the consumer warpgroups and the producer's. */
static inline int lg_wgp_threads(int consumers) { return 128 * (consumers + 1); }

/* acc (64 x n, fp32) += A . B^T: `name`(float acc[n / 2], u64 da, u64 db
 * [, int add]), one wgmma.mma_async.m64n<n>k<k>.f32.<type>.<type> from
 * shared memory descriptors; `trans` the transpose immediates ("0, 1"; NULL:
 * none, as e4m3 takes), `add` false: always accumulates, else scale-d from
 * the argument. The caller comments it first. */
void lg_wgp_emit_mma(lg_buf *b, const char *name, int n, int k, const char *type, const char *trans, bool add);
/* With a cluster, <prefix>_release(u64 *bar): a consumer warp's arrival on
 * both CTAs' barriers. */
void lg_wgp_emit_helpers(lg_buf *b, const struct lg_wgp *p, const char *prefix);
/* No read or write of `acc` (`regs` floats) moves across this point:
 * CUTLASS's warpgroup_fence_operand. */
void lg_wgp_emit_hold(lg_buf *b, const char *acc, int regs);

/* Entry point `entry`'s section (`what` its title), its signature (the
 * plan's tensor maps as kernel parameters) for `threads` (one CTA an SM,
 * of a cluster of `cluster` when 2), its `{` and the dynamic shared
 * memory `smem`, at 1024 bytes for the ring. */
void lg_wgp_emit_head(lg_buf *b, const struct lg_spec *s, const struct lg_plan *pl, const char *entry,
		      const char *what, int cluster, int threads);
/* `u8 *const ring`: the dynamic shared memory `smem` aligned to 1024. */
void lg_wgp_emit_ring(lg_buf *b);
/* `u64 *const full, *const empty` at `at` (a pointer expression). */
void lg_wgp_emit_barriers(lg_buf *b, const struct lg_wgp *p, const char *at);
/* `wg`, `warp`, `lane` of every thread. */
void lg_wgp_emit_roles(lg_buf *b);
/* Thread 0 runs `first` (e.g. the tensor maps' prefetch; NULL: nothing)
 * and initialises the barriers; the CTA (cluster) then meets. */
void lg_wgp_emit_init(lg_buf *b, const struct lg_wgp *p, void (*first)(lg_buf *b, void *ctx), void *ctx);

/* The loop over a persistent CTA's tiles of `tiles` (an i64 expression):
 * `tile` from blockIdx.x (its cluster's) on, a grid (of clusters) apart. */
void lg_wgp_open_tiles(lg_buf *b, const struct lg_wgp *p, const char *tiles);
/* The loop over a persistent CTA's tiles in pairs: `tstep` the tiles a
 * grid (of clusters) apart, each pair's first `pt` (its second pt + tstep,
 * where below `tiles`), from blockIdx.x's (its cluster's) on. */
void lg_wgp_open_tile_pairs(lg_buf *b, const struct lg_wgp *p, const char *tiles);

/* Row tiles a column sweep of the grouped raster covers. */
#define LG_WGP_RASTER 16
/* The grouped raster of tile `tile` (an i64 expression) of `rtiles` row
 * tiles x `ct` column tiles: LG_WGP_RASTER row tiles at a time sweep the
 * columns, so that the CTAs of a wave share their operands' tiles in L2.
 * `first` is its group's first row tile and `gs` the group's row tiles
 * (fewer in the last group): its row tile is first + r % gs, its column
 * tile r / gs. */
void lg_wgp_emit_group(lg_buf *b, const char *tile, const char *rtiles, int64_t ct);
/* That for a persistent CTA's `tile` of `rtiles` row tiles (commented):
 * `ta` its first row (an int, bm rows a tile), and its first column, `tb`
 * (an int, TMA's coordinate: the producer) or `oc` (an i64: the
 * consumers), of column tiles of bn cl columns (cl CTAs a cluster: rank's
 * bn of them, lg_wgp_col). The order the FP8 GEMMs take; the bf16 GEMM's
 * persistent tiles are row-major (gemm_emit.c), its forward's one tile a
 * CTA in the group order above (router_gemm_emit.c). */
void lg_wgp_emit_raster(lg_buf *b, int64_t ct, int bm, int bn, int cl, bool producer);
/* "(<base>) * <bn cl>" or, with a cluster, " + rank * <bn>" after it: a
 * tile's first column within its cluster tile's. */
const char *lg_wgp_col(char *out, size_t size, const char *base, int bn, int cl);

/* The producer warpgroup's block (`note` its comment), setmaxnreg.dec
 * with several consumer warpgroups; its close leaves the role (after the
 * cluster barrier) and gives the consumers their registers. */
void lg_wgp_open_producer(lg_buf *b, const struct lg_wgp *p, const char *note);
void lg_wgp_close_producer(lg_buf *b, const struct lg_wgp *p);
/* A producer leaves its role: after the cluster barrier its consumers
 * meet at the end (with a cluster), the other CTA done with its stages. */
void lg_wgp_emit_leave(lg_buf *b, const struct lg_wgp *p);
/* The producer's loads' thread (its first). */
void lg_wgp_open_loader(lg_buf *b, const struct lg_wgp *p);

/* A filler of the ring: the producer's loads' thread, its 128 threads, or
 * a warp of it that adds the scales. */
struct lg_wgp_fill {
	void *ctx;
	/* the tiles (persistent: counting `it` on across them), or NULL: the
	 * one tile, counting stages by kt */
	const char *tiles;
	/* at `tile` (or before the one tile's loop): the tile's locals and
	 * `nkt` its stages where the CTA's is not (NULL: nothing) */
	void (*tile)(lg_buf *b, void *ctx);
	/* once stage `s` (of reduction tile `kt`) is free: what lands in it */
	void (*stage)(lg_buf *b, void *ctx);
	bool sd;     /* declare `sd`, the stage's bytes */
	bool expect; /* and arm full[s] for stage_bytes (one TMA thread) */
	/* the reduction tile's name, its count's `n<k>` (NULL: kt, nkt) */
	const char *k;
	/* where the stages lie, `sd`'s base (NULL: ring, lg_wgp_emit_ring's) */
	const char *ring;
	/* the tiles in pairs (lg_wgp_open_tile_pairs), their stages in turn:
	 * the first tile's block kt, then the second's, kt on while either has
	 * blocks; tile() runs at each stage's `tile` (with tiles only) */
	bool pairs;
};
/* The filler's loops: the tiles, each's stages from 0 to nkt, each stage
 * claimed once its consumers released it (with pairs, in turn). */
void lg_wgp_emit_fill(lg_buf *b, const struct lg_wgp *p, const struct lg_wgp_fill *f);
/* `const int s = <ctr> % stages` and the wait until its consumers released it. */
void lg_wgp_emit_wait_empty(lg_buf *b, const struct lg_wgp *p, const char *ctr);

/* The consumers' end: with a cluster, the CTA stays until the other's
 * consumers no longer arrive on its barriers. */
void lg_wgp_emit_done(lg_buf *b, const struct lg_wgp *p);

/* The consumers' wait for stage `s` (the ring's count `n`) to be full. */
void lg_wgp_emit_wait_full(lg_buf *b, const struct lg_wgp *p, const char *s, const char *n);
/* A consumer warp releases stage `s` (an index expression) for the
 * producer(s) when `when` (NULL: always): its lane 0 arrives on empty[s] (of
 * every CTA of the cluster through <prefix>_release, or, prefix NULL, in
 * line: a kernel whose helpers are not this pipeline's). */
void lg_wgp_emit_release(lg_buf *b, const struct lg_wgp *p, const char *prefix, const char *when, const char *s);

/* `float <name>[n]`, zeroed: a consumer's accumulators (or partial sums),
 * n / 2 of a 64 x n wgmma's a wave. */
void lg_wgp_emit_acc(lg_buf *b, const char *name, int n);
/* The loop over a consumer thread's accumulator pairs of an n-column tile
 * (wgmma's fragment: j's 4 of acc at 4 j, v[0], v[1] of row, v[2], v[3] of
 * row + 8, at columns col, col + 1): opens it and declares `col` (`col0`
 * + j 8 + (lane & 3) 2) and `v`; the caller stores the pairs
 * (lg_wgp_emit_pair) and closes it. */
void lg_wgp_open_pairs(lg_buf *b, int n, const char *col0);
/* Pair v[i], v[i + 1] of row + r (r 0: row) to `store` (a call's text up
 * to its arguments: `<store>row, col, v0, v1);`), where that row is below
 * `rend` (NULL: always). */
void lg_wgp_emit_pair(lg_buf *b, const char *store, int r, int i, const char *rend);

#endif
