/*
 * fp8_gemm_common.h - what the FP8 GEMM families (fp8_gemm,
 * fp8_grouped_gemm) share beyond the emitter (fp8_gemm_emit.h): their tile
 * keys, checks, plan and launch geometry (persistent CTAs), the output
 * store and the kernel's head (their tiles' raster is the pipeline's:
 * wgmma_pipe.h's lg_wgp_emit_raster).
 */
#ifndef LG_FP8_GEMM_COMMON_H
#define LG_FP8_GEMM_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "family.h"
#include "fp8_gemm_emit.h"

/* Key indices of a family's table: tile.m, tile.n, tile.stages, accumulate
 * (-1: none), tile.cluster, tile.ahead, tile.epilogue, tile.overlap, tile.ffma,
 * tile.pingpong, and the shape's n
 * and k (the forward's reduction is k, the dgrad's n, the wgrad's the
 * tokens, known at run time only). */
struct lg_fp8_keys {
	int tm, tn, stages, acc, cl, ah, ep, ov, ff, pp, n, k;
	int e2_at;   /* the static reduction from which two epilogue buffers are (0: never) */
	bool pair;   /* clusters of two are the forward's and dgrad's default */
	bool overlap; /* so is tile.overlap at a static reduction of 2 blocks or more */
};
/* cluster: CTAs a cluster (1 or 2), ahead: 0..32 (fp8_gemm_emit.h), epilogue: 0 from
 * registers, else through shared memory and TMA with that many buffers a
 * warpgroup (fp8_gemm_emit.h), overlap, pingpong: 0 or 1 (fp8_gemm_emit.h) */
struct lg_fp8_tile {
	int bm, bn, stages, cluster, ahead, epilogue, overlap, pingpong;
};
/* The tile.cluster key of a family's table. */
#define LG_FP8_KEY_CLUSTER                                                                                   \
	LG_KEY_TILE("cluster", "c", 1, 2, NULL,                                                               \
		    "CTAs a cluster: 2 share A's tile by TMA multicast (bm / 2 rows each), halving its L2 reads")
/* The tile.ahead key of a family's table. */
#define LG_FP8_KEY_AHEAD                                                                                     \
	LG_KEY_TILE("ahead", "a", 0, 32, NULL,                                                                \
		    "the next stage's wgmmas issued before this one's promotion (tile.n up to 128), in groups of "   \
		    "4 stages (1) or of this many (2-32; a group's last promotion waits); 0: off")
/* The tile.epilogue key of a family's table. */
#define LG_FP8_KEY_EPILOGUE                                                                                  \
	LG_KEY_TILE("epilogue", "e", 0, 3, NULL,                                                              \
		    "1: the output through shared memory and TMA stores that drain during the next tile, 2: "    \
		    "two buffers, the next two tiles (tile.m 256: 64-row buffers its waves' stores take in "    \
		    "turn, twice this many a warpgroup halved while they take more than 64 KB: two at bf16 "     \
		    "256 x 128, one at fp32); 3: one buffer of half the columns, stored in two passes (a "      \
		    "stage more fits); 0: stores from registers")
/* The tile.overlap key of a family's table. */
#define LG_FP8_KEY_OVERLAP                                                                                   \
	LG_KEY_TILE("overlap", "d", 0, 1, NULL,                                                               \
		    "1: a tile's epilogue runs in the next tile's first stage, under its wgmmas (tile.m up to "  \
		    "128); 0: at the tile's end")
/* The tile.ffma key of a family's table (runtime/sass.h's modes). */
#define LG_FP8_KEY_FFMA                                                                                      \
	LG_KEY_TILE("ffma", "f", 0, 3, NULL,                                                                  \
		    "the promotion's FFMA runs in the cubin: 0 as NVRTC schedules them; more of them let the "   \
		    "warp yield (their operand reuse dropped): 1 by DeepGEMM's rule, 2 all in the first 9/16 of " \
		    "a run, 3 all")
/* The tile.pingpong key of a family's table. */
#define LG_FP8_KEY_PINGPONG                                                                                  \
	LG_KEY_TILE("pingpong", "p", 0, 1, NULL,                                                              \
		    "1: the two consumer warpgroups on tiles of their own, 128 rows each in two waves, the "     \
		    "producer loading a pair's stages in turn, so that one's promotion and epilogue run under "  \
		    "the other's wgmmas (tile.m 128, TMA operands: not the grouped wgrad; no ahead or "        \
		    "overlap); 0: both on each tile")
/* Plan values (struct lg_plan.v) the families share; a family's own from P8_OWN. */
enum { P8_BM, P8_BN, P8_STAGES, P8_AH, P8_EP, P8_OV, P8_PP, P8_SMEM, P8_COLS, P8_ROWS, P8_OWN };

static inline int64_t lg_fp8_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Tile keys within what the emitter allows; accumulate only in a wgrad
 * with an fp32 output. */
lg_status lg_fp8_validate(const struct lg_spec *s, const char *where, const struct lg_fp8_keys *k, bool manual);
/* The GEMM of tile tl over spec s (its dtype the output's), the tensor maps
 * a_tmap and b_tmap, B's per-row scales or not, its output columns cols,
 * manual operands or not, and its output's map c_tmap with tl->epilogue. */
struct lg_fp8_gemm lg_fp8_gemm_of(const struct lg_spec *s, const struct lg_fp8_keys *k, const struct lg_fp8_tile *tl,
				  const char *const tmaps[3], const char *cols, bool manual);
/* The tile on t: the spec's keys, else 128 x 128 (with k->pair clusters
 * of two in the forward and dgrad), the epilogue through TMA where 3
 * stages fit beside its buffers, two buffers from a static reduction of
 * k->e2_at where 4 fit (measured: bench/fp8-gemm.md), ahead where it can
 * be, and the stages that fit beside
 * `reserve` bytes of the kernel's static shared memory. Refuses every target
 * but sm_90a. */
lg_status lg_fp8_plan_tile(const struct lg_spec *s, const struct lg_target *t, const struct lg_fp8_keys *k,
			   unsigned reserve, bool manual, struct lg_fp8_tile *tl);
/* The plan of g: tile keys, one persistent entry, A's and B's tensor maps
 * (arguments a and b; with g->manual the templates the kernel patches),
 * with g->c_tmap the output's (argument c) after them. A
 * family may put entries before it: the GEMM is the plan's last entry
 * (lg_fp8_planned, lg_fp8_geometry and lg_fp8_emit_head take that one). */
lg_status lg_fp8_plan_finish(const struct lg_spec *s, struct lg_plan *p, const struct lg_fp8_gemm *g,
			     const struct lg_fp8_keys *k, int a, int b, int c);
struct lg_fp8_tile lg_fp8_planned(const struct lg_plan *p);
/* Persistent CTAs for `tiles` tiles (cluster tiles with a cluster): at
 * most what is resident (one an SM; whole clusters). */
void lg_fp8_geometry(const struct lg_plan *p, int64_t tiles, struct lg_launch_dim *d);
/* The tile choices `lingen tune` sweeps. */
int lg_fp8_candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max,
		      const struct lg_fp8_keys *k);

/* lg_st_out(u8 *out, i64 row, i64 col, float v0, float v1): an output
 * pair into a row-major [rows, cols] bf16 or fp32 (accumulate: +=) output,
 * columns past cols skipped (cols even). */
void lg_fp8_emit_store(lg_buf *b, bool fp32, bool accumulate, int64_t cols);
/* The entry point's section, signature (tensor maps) and `{`, shared memory. */
void lg_fp8_emit_head(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p, const char *what,
		      const struct lg_fp8_gemm *g);

#endif
