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
 * accumulation is fp32.
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
};

struct lg_gemm_tile {
	int bm, bn, bk;         /* the CTA tile: rows, columns, reduction step */
	int warps_m, warps_n;   /* the warp grid */
	int stages;             /* reduction tiles in flight (2..8) */
};

struct lg_gemm {
	struct lg_gemm_tile t;
	struct lg_gemm_operand a, b;
	int terms; /* bf16 terms of an fp32 A: 1..3 (1 for bf16) */
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

#endif
