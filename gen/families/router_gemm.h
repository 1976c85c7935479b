/*
 * router_gemm.h - what the two files of family "router_gemm" share:
 * router_gemm.c (keys, declaration, plan) and router_gemm_emit.c (the kernels'
 * source). Private to gen/families/.
 */
#ifndef LG_FAMILY_ROUTER_GEMM_H
#define LG_FAMILY_ROUTER_GEMM_H

#include "family.h"
#include "gemm_emit.h"
#include "wgmma_pipe.h"

enum {
	K_HIDDEN,
	K_EXPERTS,
	K_PRECISION,
	K_TILE,
	K_TM,
	K_TN,
	K_TK,
	K_STAGES,
	K_WM,
	K_WN,
	K_SPLIT,
	K_CLUSTER,
	K_XM,
	K_XN,
	K_XK,
	K_XS,
	K_XWM,
	K_XWN,
	K_XP,
	NKEYS
};


/* Plan values. */
enum {
	P_BM, /* P_BM .. P_WN, P_SMEM: the forward's tile, or the backward's dw */
	P_BN,
	P_BK,
	P_STAGES,
	P_WM,
	P_WN,
	P_SPLIT,
	P_K,
	P_N,
	P_TERMS,
	P_BWD,
	P_SMEM,
	P_WG,
	P_CLUSTER,
	P_XTILE, /* the backward's dx tile (pack_tile) */
	P_XSMEM,
	P_XPERS /* dx on persistent CTAs (sm_90a) */
};

/* Row tiles a column sweep of the forward's raster covers: the
 * pipeline's group (wgmma_pipe.h's lg_wgp_emit_group, on sm_80 too). */
#define RASTER LG_WGP_RASTER

/* The GEMMs of a spec (router_gemm.c: 0 the forward, 1 dx, 2 dw; 3, 4 on sm_90a). */
struct lg_gemm lg_router_gemm_of(const struct lg_spec *s, int which, struct lg_gemm_tile t);
/* A tile packed into one plan value (router_gemm.c), unpacked. */
struct lg_gemm_tile lg_router_gemm_unpack_tile(int64_t v);

/* The kernels' source of a planned spec (the family's emit). */
void lg_router_gemm_emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p);

#endif
