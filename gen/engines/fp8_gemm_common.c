/*
 * fp8_gemm_common.c - the FP8 GEMM families' shared plan, geometry and
 * pieces of emission (fp8_gemm_common.h).
 */
#include "fp8_gemm_common.h"

#include <stdio.h>
#include <string.h>

#include "error.h"
#include "gemm_emit.h"
#include "wgmma_pipe.h"

#define SMS 132u  /* SMs of the target (H200) when the device's count is not known */

/* What the spec says of the GEMM beside its tile: B's per-row scales (the
 * wgrad), manual operands, the output's element and accumulation. */
static struct lg_fp8_gemm spec_part(const struct lg_spec *s, const struct lg_fp8_keys *k, bool manual)
{
	return (struct lg_fp8_gemm){.b_rowscale = s->pass == LG_PASS_WGRAD, .manual = manual,
				    .c_elem = s->dtype == LG_DTYPE_FP32 ? 4 : 2,
				    .c_add = k->acc >= 0 && lg_spec_int(s, k->acc) != 0};
}

/* The pass's reduction when the spec fixes it: the forward's k, the
 * dgrad's n; 0 for the wgrad (the tokens, known at run time only). */
static int64_t static_reduction(const struct lg_spec *s, const struct lg_fp8_keys *k)
{
	return s->pass == LG_PASS_WGRAD ? 0 : lg_spec_int(s, s->pass == LG_PASS_FORWARD ? k->k : k->n);
}

/* The tile of a spec: its keys over the defaults (128 x 128, clusters of
 * two where k->pair says so; stages 4 until fitted; ahead where it can be:
 * H100, bench/fp8-gemm.md, forward and dgrad 1-5% faster at every shape
 * measured). 256 x 128 was the dense default from a reduction of 7168
 * until session 12: at 4096x7168x16384 1072 TFLOP/s, 128 x 128 with two
 * epilogue buffers 1153 (H100, bench/fp8-gemm.md). */
static struct lg_fp8_gemm tile_keys(const struct lg_spec *s, const struct lg_fp8_keys *k, bool manual)
{
	struct lg_fp8_gemm g = spec_part(s, k, manual);
	g.bm = 128;
	g.bn = 128;
	g.stages = 4;
	g.cluster = 1;
	/* the epilogue through TMA, one buffer a warpgroup, unless the spec says
	 * otherwise (its buffers count in the stages' fit; two, for the grouped
	 * wgrad's short tiles, are not yet measured on the GPU) */
	if (lg_spec_has(s, k->tm))
		g.bm = (int)lg_spec_int(s, k->tm);
	g.pingpong = lg_spec_has(s, k->pp) && lg_spec_int(s, k->pp) != 0;
	/* (tile.m 256 from registers unless the spec says otherwise: with the
	 * TMA epilogue it measured the same, 1071 against 1072 TFLOP/s at
	 * 4096x7168x16384, H100, session 12) */
	g.c_bufs = lg_spec_has(s, k->ep) ? (int)lg_spec_int(s, k->ep) : g.bm <= 128;
	if (g.c_bufs > 0)
		g.c_tmap = "c";
	if (lg_spec_has(s, k->tn))
		g.bn = (int)lg_spec_int(s, k->tn);
	if (lg_spec_has(s, k->stages))
		g.stages = (int)lg_spec_int(s, k->stages);
	/* clusters of two in the dense forward and dgrad (k->pair) at the tiles
	 * measured, 128 or 256 rows by up to 128 columns: H100 and H200, this
	 * session's two calls, 8192x3072x2048 826 -> 885 and 827 -> 881 TFLOP/s,
	 * 4096x7168x16384 +3%, 9973x3584x5120 +1% */
	if (k->pair && s->pass != LG_PASS_WGRAD && g.bm >= 128 && g.bn <= 128)
		g.cluster = 2;
	if (lg_spec_has(s, k->cl))
		g.cluster = (int)lg_spec_int(s, k->cl);
	/* the dense wgrad ahead in groups of 8 stages (H100, session 13,
	 * bench/fp8-gemm.md, each tile twice: +8% to +12% at five shapes, the LM
	 * head's 157184x2048 over 8192 tokens 740 -> 822 TFLOP/s, 9984x3584x5120
	 * 745 -> 833; groups of 16 about the same, of 32 less), not with
	 * accumulate (its epilogue's reads of dw spill 24 bytes); the grouped
	 * wgrad's experts are a few stages long: not measured there */
	g.ahead = lg_spec_has(s, k->ah) ? (int)lg_spec_int(s, k->ah)
		: !lg_fp8_gemm_can_ahead(&g) ? 0 : !g.b_rowscale ? 1 : k->pair && !g.c_add ? 8 : 0;
	/* the dense forward's and dgrad's epilogue under the next tile's first
	 * wgmmas (the first ahead group out of the loop), at a static reduction of
	 * 2 blocks or more (H100, bench/fp8-gemm.md, session 9: with the
	 * reduction one group, K 2048 forward 871 -> 949 TFLOP/s, dgrad at 3072
	 * 880 -> 950, the LM head 898 -> 952, K 512 571 -> 595) */
	if (k->overlap && g.ahead && g.bm <= 128 && lg_fp8_cdiv(static_reduction(s, k), 128) >= 2)
		g.overlap = true;
	if (lg_spec_has(s, k->ov))
		g.overlap = lg_spec_int(s, k->ov) != 0;
	return g;
}

lg_status lg_fp8_validate(const struct lg_spec *s, const char *where, const struct lg_fp8_keys *k, bool manual)
{
	struct lg_fp8_gemm g = tile_keys(s, k, manual);
	const char *why = lg_fp8_gemm_problem(&g);
	if (why) { /* the keys given as found; the others as the defaults checked with them */
		const int key[8] = {k->tm, k->tn, k->stages, k->cl, k->ah, k->ep, k->ov, k->pp};
		const int val[8] = {g.bm, g.bn, g.stages, g.cluster, g.ahead, g.c_bufs, g.overlap, g.pingpong};
		static const char *const name[8] = {"m", "n", "stages", "cluster", "ahead", "epilogue", "overlap",
						    "pingpong"};
		char found[224] = "", dflt[224] = "";
		for (int i = 0; i < 8; i++) {
			if (key[i] == k->pp && !lg_spec_has(s, key[i]))
				continue; /* (off unless asked for: not a default the tile was checked with) */
			char *to = lg_spec_has(s, key[i]) ? found : dflt;
			size_t n = strlen(to);
			snprintf(to + n, sizeof found - n, "%s%s %d", n ? ", " : "", name[i], val[i]);
		}
		return lg_spec_error(where, "tile: found %s%s%s%s; allowed: %s", found, *dflt ? " (with the default " : "",
				     dflt, *dflt ? ")" : "", why);
	}
	if (k->acc >= 0 && lg_spec_int(s, k->acc) && (s->pass != LG_PASS_WGRAD || s->dtype != LG_DTYPE_FP32))
		return lg_spec_error(where, "accumulate: found true, allowed: only in the wgrad with dtype fp32 (an "
				     "fp32 main gradient)");
	return LG_OK;
}

lg_status lg_fp8_plan_tile(const struct lg_spec *s, const struct lg_target *t, const struct lg_fp8_keys *k,
			   unsigned reserve, bool manual, struct lg_fp8_tile *tl)
{
	unsigned limit = lg_gemm_smem_limit(t) - reserve;
	if (t->sm != 90 || !t->arch_specific)
		return lg_fail(LG_ERR_SPEC, "%s: target: found %s, allowed: sm_90a (the FP8 GEMMs run on wgmma e4m3 and "
			       "TMA only)", s->entry, t->name);
	struct lg_fp8_gemm g = tile_keys(s, k, manual);
	/* the default epilogue through TMA where its buffers leave 3 stages, two
	 * buffers from a static reduction of k->e2_at where they leave 4 (dense:
	 * 3072; the grouped GEMMs' not measured at long reductions) (H100, session 12,
	 * bench/fp8-gemm.md: against stores from registers, 4096x4096x4096
	 * 962 -> 1091 TFLOP/s, 9984x3584x5120 1000 -> 1127, dgrad 9984x5120x3584
	 * 914 -> 1129; dgrad 8192x3072x2048 1010 -> 1028), else one (K 2048:
	 * forward 1009 with one, 938 with two, whose buffer takes a stage).
	 * Stores from registers were the default at 4096 and more until the ring
	 * addressed shared memory as such (f32bd58): the buffer's stores were
	 * generic then. */
	if (g.c_tmap && !lg_spec_has(s, k->ep)) {
		if (k->e2_at > 0 && static_reduction(s, k) >= k->e2_at && g.c_bufs == 1) {
			g.c_bufs = 2;
			if (lg_fp8_gemm_fit_stages(&g, 4, limit) < 4)
				g.c_bufs = 1;
		}
		/* one half-width buffer (tile.epilogue 3: the stage it frees) from a
		 * static reduction of 2048 up to the two buffers' (H100, session 13,
		 * bench/fp8-gemm.md, bf16 out: +0.5% to +2.9% at the five K 2048 shapes
		 * of the step, the LM head's forward 1002 -> 1031 TFLOP/s; at K 512
		 * -8%, at 4096 -2%), where the tile takes it (lg_fp8_gemm_problem) */
		if (k->e2_at > 0 && g.c_bufs == 1 && g.c_elem == 2 && g.bm == 128 &&
		    static_reduction(s, k) >= 2048 && static_reduction(s, k) < k->e2_at) {
			g.c_bufs = 3;
			if (lg_fp8_gemm_problem(&g))
				g.c_bufs = 1;
		}
		if (lg_fp8_gemm_fit_stages(&g, 3, limit) < 3) {
			g.c_tmap = NULL;
			g.c_bufs = 0;
		}
	}
	g.stages = lg_spec_has(s, k->stages) ? (int)lg_spec_int(s, k->stages) : 4;
	if (!lg_spec_has(s, k->stages))
		lg_fp8_gemm_fit_stages(&g, 8, limit);
	if (lg_fp8_gemm_smem(&g) > limit)
		return lg_fail(LG_ERR_SPEC, "%s: tile.stages: found %d, needing %u bytes of shared memory; allowed: at "
			       "most %u bytes on %s", s->entry, g.stages, lg_fp8_gemm_smem(&g), limit, t->name);
	*tl = (struct lg_fp8_tile){g.bm, g.bn, g.stages, lg_fp8_gemm_cluster(&g), g.ahead, g.c_bufs, g.overlap,
				   g.pingpong};
	return LG_OK;
}

struct lg_fp8_gemm lg_fp8_gemm_of(const struct lg_spec *s, const struct lg_fp8_keys *k, const struct lg_fp8_tile *tl,
				  const char *const tmaps[3], const char *cols, bool manual)
{
	struct lg_fp8_gemm g = spec_part(s, k, manual);
	g.bm = tl->bm;
	g.bn = tl->bn;
	g.stages = tl->stages;
	g.cluster = tl->cluster;
	g.ahead = tl->ahead;
	g.overlap = tl->overlap;
	g.pingpong = tl->pingpong;
	g.c_bufs = tl->epilogue;
	g.a_tmap = tmaps[0];
	g.b_tmap = tmaps[1];
	g.c_tmap = tl->epilogue ? tmaps[2] : NULL;
	g.cols = cols;
	return g;
}

lg_status lg_fp8_plan_finish(const struct lg_spec *s, struct lg_plan *p, const struct lg_fp8_gemm *g,
			     const struct lg_fp8_keys *k, int a, int b, int c)
{
	p->tile[k->tm] = p->v[P8_BM] = g->bm;
	p->tile[k->tn] = p->v[P8_BN] = g->bn;
	p->tile[k->stages] = p->v[P8_STAGES] = g->stages;
	p->tile[k->cl] = p->cluster[0] = (unsigned)lg_fp8_gemm_cluster(g);
	p->tile[k->ah] = p->v[P8_AH] = g->ahead;
	p->tile[k->ep] = p->v[P8_EP] = g->c_tmap ? g->c_bufs : 0;
	p->tile[k->ov] = p->v[P8_OV] = g->overlap;
	p->tile[k->pp] = p->v[P8_PP] = g->pingpong;
	p->tile[k->ff] = p->sass_ffma = lg_spec_has(s, k->ff) ? (int)lg_spec_int(s, k->ff) : 0;
	p->v[P8_SMEM] = lg_fp8_gemm_smem(g);
	p->nentries = 1;
	snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
	p->persistent[0] = true;
	p->per_sm[0] = 1;
	p->ntmaps = 2;
	p->tmap[0].arg = a;
	p->tmap[1].arg = b;
	p->tmap[0].swizzle = p->tmap[1].swizzle = 128;
	p->tmap[0].patched = p->tmap[1].patched = g->manual; /* templates of the per-block maps */
	lg_fp8_gemm_boxes(g, p->tmap[0].box, p->tmap[1].box);
	if (g->c_tmap) { /* the output's, for the epilogue's TMA stores */
		p->tmap[p->ntmaps] = (struct lg_tmap_decl){.arg = c};
		lg_fp8_gemm_out_box(g, p->tmap[p->ntmaps].box, &p->tmap[p->ntmaps].swizzle);
		p->ntmaps++;
	}
	return LG_OK;
}

struct lg_fp8_tile lg_fp8_planned(const struct lg_plan *p)
{
	return (struct lg_fp8_tile){(int)p->v[P8_BM], (int)p->v[P8_BN], (int)p->v[P8_STAGES],
				    (int)p->cluster[p->nentries - 1], (int)p->v[P8_AH], (int)p->v[P8_EP],
				    (int)p->v[P8_OV], (int)p->v[P8_PP]};
}

void lg_fp8_geometry(const struct lg_plan *p, int64_t tiles, struct lg_launch_dim *d)
{
	int e = p->nentries - 1; /* the GEMM: the plan's last entry */
	unsigned cl = p->cluster[e] ? p->cluster[e] : 1, cap = p->resident[e] ? p->resident[e] : SMS / cl;
	d->grid[0] = (tiles > (int64_t)cap ? cap : (unsigned)tiles) * cl;
	d->grid[1] = d->grid[2] = d->block[1] = d->block[2] = 1;
	/* the threads depend on bm and pingpong alone */
	const struct lg_fp8_gemm g = {.bm = (int)p->v[P8_BM], .pingpong = p->v[P8_PP] != 0};
	d->block[0] = (unsigned)lg_fp8_gemm_threads(&g);
	d->smem = (unsigned)p->v[P8_SMEM];
}

/* lingen tune's tiles, the likeliest first (-1: the key left to the
 * default), at most LG_MAX_CANDIDATES. From the H100 sweeps of
 * bench/fp8-gemm.md: the epilogue's buffers trade a stage against the
 * stores' overlap by reduction (session 12, K 2048: one, 3072 and more:
 * two); one ahead group of the whole reduction helped the LM head (955 ->
 * 1028 TFLOP/s) in one call; 256 rows with the TMA epilogue 937-1063, bit
 * for bit the default's; ahead 8 was the wgrad's best (session 8); a
 * half-width epilogue buffer (tile.epilogue 3) for the stage it frees;
 * tile.ffma 2 (session 15: +1% at K 2048, -2% at K 512); tile.pingpong
 * (session 17, H100: 0.78-0.93x the default at every dense shape, in a
 * call whose defaults had the scale warp's rolled copies; timed again
 * without them). Left out, far behind in every sweep: 64-row tiles, among
 * them the grouped wgrad's 64-row pingpong (session 17: 0.28-0.38x its
 * default, 2123 against 597 us at the w1 wgrad), and (session 12) 160 and
 * 192 columns without ahead, 787-788 against 1009 at K 2048. */
enum { C_TM, C_TN, C_ST, C_CL, C_AH, C_EP, C_OV, C_FF, C_PP, C_NKEYS };
static const int64_t tune_tiles[][C_NKEYS] = {
	{-1, -1, -1, -1, -1, 2, -1, -1, -1},  {-1, -1, -1, -1, -1, 1, -1, -1, -1},  {-1, -1, -1, -1, -1, 0, -1, -1, -1},
	{-1, -1, -1, -1, -1, -1, -1, 2, -1},  {-1, -1, -1, -1, -1, -1, -1, -1, 1},  {-1, -1, -1, -1, -1, 2, -1, -1, 1},
	{-1, -1, -1, -1, 16, -1, 1, -1, -1},  {-1, -1, -1, -1, 32, -1, 1, -1, -1},  {256, -1, -1, 2, -1, 1, -1, -1, -1},
	{256, -1, -1, 2, -1, 0, -1, -1, -1},  {-1, -1, -1, 1, -1, -1, -1, -1, -1},  {-1, -1, 4, -1, -1, -1, -1, -1, -1},
	{-1, -1, -1, -1, 8, -1, -1, -1, -1},  {-1, -1, -1, -1, 0, -1, -1, -1, -1},  {-1, 64, -1, -1, -1, -1, -1, -1, -1},
	{-1, -1, -1, -1, -1, 3, -1, -1, -1},
};

int lg_fp8_candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max,
		      const struct lg_fp8_keys *k)
{
	const int key[C_NKEYS] = {k->tm, k->tn, k->stages, k->cl, k->ah, k->ep, k->ov, k->ff, k->pp};
	int n = 0;
	for (size_t i = 0; i < sizeof tune_tiles / sizeof tune_tiles[0]; i++) {
		struct lg_tile_choice c = {{0}, 0};
		for (int j = 0; j < C_NKEYS; j++)
			if (tune_tiles[i][j] >= 0) {
				c.v[key[j]] = tune_tiles[i][j];
				c.set |= (uint64_t)1 << key[j];
			}
		n = lg_candidate_add(s, t, out, n, max, c);
	}
	return n;
}

void lg_fp8_emit_store(lg_buf *b, bool fp32, bool accumulate, int64_t cols)
{
	lg_comment(b, "An output pair (row, col), (row, col + 1) of [rows, %lld] %s%s.", (long long)cols,
		   fp32 ? "fp32" : "bf16", accumulate ? ", added" : "");
	lg_line(b, "static __device__ __forceinline__ void");
	lg_head(b, "lg_st_out", "u8 *out, i64 row, i64 col, float v0, float v1");
	lg_open(b, "{");
	lg_line(b, "if (col >= %lldll) return;", (long long)cols);
	if (!fp32) {
		lg_line(b, "*(u32 *)(out + (row * %lldll + col) * 2) = lg_pack_bf16x2(v0, v1);", (long long)cols);
	} else if (accumulate) {
		lg_line(b, "float2 *const p = (float2 *)(out + (row * %lldll + col) * 4);", (long long)cols);
		lg_line(b, "const float2 o = *p;");
		lg_line(b, "*p = make_float2(o.x + v0, o.y + v1);");
	} else {
		lg_line(b, "*(float2 *)(out + (row * %lldll + col) * 4) = make_float2(v0, v1);", (long long)cols);
	}
	lg_close(b);
}

void lg_fp8_emit_head(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p, const char *what,
		      const struct lg_fp8_gemm *g)
{
	lg_wgp_emit_head(b, s, p, p->entry[p->nentries - 1], what, lg_fp8_gemm_cluster(g), lg_fp8_gemm_threads(g));
}
