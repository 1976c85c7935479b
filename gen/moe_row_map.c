/*
 * moe_row_map.c - family "moe_row_map" (KERNELS.md K4, the row map of a
 * padded MoE dispatch): from the routing, the padded row of every (token,
 * expert) pair, the experts' counts and padded offsets, and the source
 * token of every padded row.
 *
 * Routing (key `routing`): "mask" [tokens, experts] bool / u8 (non-zero:
 * routed), or top-k indices [tokens, top_k] int32 ("topk_i32") or int64
 * ("topk_i64"), where an index outside [0, experts) is no expert (a dropped
 * slot: a token may have fewer than top_k experts) and a repeated index
 * counts once. Outputs:
 *   row_id_map [tokens, experts] int32: base_e + (routed tokens of e
 *     before t) where routed, else -1 (token-major; rows expert-major,
 *     ascending token within an expert);
 *   counts [experts] int32; offsets [experts + 1] int32, the padded
 *     exclusive prefix sums of round_up(count_e, multiple): base_e =
 *     offsets[e], and offsets[experts] is the padded total P. P stays on
 *     the device; a host that must size buffers copies the one int32
 *     offsets[experts] (4 bytes, e.g. cuMemcpyDtoH after the launch), or
 *     sizes them by the static bound tokens * top_k + experts * (multiple
 *     - 1), which every dispatch buffer uses;
 *   row_index [tokens * top_k + experts * (multiple - 1)] int32 (optional):
 *     the source token of row r < P, -1 for a padding row and for r >= P;
 *   padded_counts [experts] int32 (optional): round_up(count_e, multiple),
 *     the segments of the per-expert layout (moe_permute_quant) and the
 *     row counts a grouped GEMM takes.
 * A mask with more than top_k experts in a token may give P past the
 * bound: row_index and the dispatch kernels drop the rows past it.
 *
 * Strategy: the tokens are cut into S = min(tile.slices, tokens) slices of
 * consecutive tokens, one CTA each, in two kernels. The first counts each
 * expert's tokens in its slice (shared-memory integer atomics: the sums
 * do not depend on their order) into a workspace row [S][experts]. The
 * second (launched early with programmatic dependent launch on sm_90,
 * waiting for the first) sums the workspace column of each expert
 * (total, and the part before its slice), scans the padded counts over the
 * experts in warp 0, then walks its slice: a chunk of tokens of the
 * routing is staged in shared memory as a dense [tokens][experts] byte
 * mask (the next chunk's loads in flight meanwhile), one thread per expert
 * walks the chunk's tokens in order assigning rows, and the chunk's
 * row_id_map block, which is contiguous, is stored by every thread, 4
 * bytes each, coalesced. Deterministic: no result depends on timing.
 */
#include <stdio.h>

#include "family.h"

#include "error.h"
#include "moe_common.h"

enum { K_EXPERTS, K_TOPK, K_MULTIPLE, K_ROUTING, K_TILE, K_SLICES, NKEYS };
enum { R_MASK, R_I32, R_I64, R_COUNT };
static const char *const routing_names[R_COUNT] = {"mask", "topk_i32", "topk_i64"};
static const int64_t slices_ok[] = {32, 64, 128, 256, 0};
static const struct lg_key keys[NKEYS] = {
	LG_KEYS_MOE(K_EXPERTS),
	[K_ROUTING] = {.path = "routing", .type = LG_KEY_ENUM, .values = routing_names, .nvalues = R_COUNT,
		       .has_def = true, .def = R_MASK, .naming = LG_NAME_ALWAYS, .rank = 20,
		       .doc = "mask [tokens, experts] u8/bool, or top-k indices [tokens, top_k] int32 / int64"},
	[K_TILE] = LG_KEY_TILE_OBJ,
	[K_SLICES] = LG_KEY_TILE("slices", "s", 32, 256, slices_ok,
				 "token slices (CTAs of each kernel) at most; the workspace holds slices x experts "
				 "counts"),
};

static const struct lg_size sizes[] = {{"tokens", "T", 0, (int64_t)1 << 30, "tokens", 0}};

enum { A_MASK, A_I32, A_I64, A_MAP, A_COUNTS, A_OFFSETS, A_INDEX, A_PADDED, A_WS, NARGS };
static const struct lg_arg args[NARGS] = {
	[A_MASK] = {"mask", LG_ARG_IN, LG_ELEM_U8, "tokens, experts", 4, "routing \"mask\": non-zero = routed"},
	[A_I32] = {"topk", LG_ARG_IN, LG_ELEM_I32, "tokens, top_k", 4, "routing \"topk_i32\""},
	[A_I64] = {"topk64", LG_ARG_IN, LG_ELEM_I64, "tokens, top_k", 8, "routing \"topk_i64\""},
	[A_MAP] = {"row_id_map", LG_ARG_OUT, LG_ELEM_I32, "tokens, experts", 4, "padded row, -1: not routed"},
	[A_COUNTS] = {"counts", LG_ARG_OUT, LG_ELEM_I32, "experts", 4, "tokens of each expert"},
	[A_OFFSETS] = {"offsets", LG_ARG_OUT, LG_ELEM_I32, "experts + 1", 4,
		       "padded offsets; offsets[experts] = P, the padded total"},
	[A_INDEX] = {"row_index", LG_ARG_OPT_OUT, LG_ELEM_I32, LG_MOE_ROWS, 4,
		     "source token of each padded row, -1: padding or past P"},
	[A_PADDED] = {"padded_counts", LG_ARG_OPT_OUT, LG_ELEM_I32, "experts", 4,
		      "round_up(counts, multiple): each expert's rows (the per-expert quantiser's segments)"},
	[A_WS] = {"workspace", LG_ARG_WORKSPACE, LG_ELEM_U8, NULL, 16, NULL},
};

enum { P_E, P_K, P_M, P_ROUTING, P_SLICES, P_THREADS, P_CHUNK, P_EARLY };

static lg_status validate(const struct lg_spec *s, const char *where)
{
	return lg_moe_validate(s, K_EXPERTS, where);
}

static void uses(const struct lg_spec *s, unsigned char *used)
{
	int64_t r = lg_spec_int(s, K_ROUTING);
	used[A_MASK] = r == R_MASK;
	used[A_I32] = r == R_I32;
	used[A_I64] = r == R_I64;
}

static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	int64_t e = lg_spec_int(s, K_EXPERTS);
	p->v[P_E] = e;
	p->v[P_K] = lg_spec_int(s, K_TOPK);
	p->v[P_M] = lg_spec_int(s, K_MULTIPLE);
	p->v[P_ROUTING] = lg_spec_int(s, K_ROUTING);
	p->v[P_SLICES] = p->tile[K_SLICES] = lg_spec_has(s, K_SLICES) ? lg_spec_int(s, K_SLICES) : 128;
	p->v[P_THREADS] = 512;
	/* a chunk of up to 32 tokens: its byte mask and row ids (5 bytes a pair)
	 * and the counts and offsets (8 bytes an expert) within 40 KB of
	 * static shared memory */
	int64_t chunk = (40960 - 8 * e) / (5 * e);
	p->v[P_CHUNK] = chunk < 1 ? 1 : chunk > 32 ? 32 : chunk;
	p->nentries = 2;
	snprintf(p->entry[0], sizeof p->entry[0], "%s_count", s->entry);
	snprintf(p->entry[1], sizeof p->entry[1], "%s", s->entry);
	p->v[P_EARLY] = t->sm >= 90;
	p->early[1] = p->v[P_EARLY] != 0;
	return LG_OK;
}

static void geometry(const struct lg_plan *p, int e, const int64_t *sz, struct lg_launch_dim *d)
{
	(void)e;
	int64_t n = sz[0] < p->v[P_SLICES] ? sz[0] : p->v[P_SLICES];
	d->grid[0] = (unsigned)(n < 1 ? 1 : n);
	d->grid[1] = d->grid[2] = d->block[1] = d->block[2] = 1;
	d->block[0] = (unsigned)p->v[P_THREADS];
	d->smem = 0;
}

static size_t workspace(const struct lg_plan *p)
{
	return (size_t)(p->v[P_SLICES] * p->v[P_E]) * 4;
}

/* ------------------------------------------------------------ emission */

struct shape {
	int64_t e, k, m, chunk;
	int routing, threads, slices;
};

static struct shape shape_of(const struct lg_plan *p)
{
	return (struct shape){.e = p->v[P_E], .k = p->v[P_K], .m = p->v[P_M], .chunk = p->v[P_CHUNK],
			      .routing = (int)p->v[P_ROUTING], .threads = (int)p->v[P_THREADS],
			      .slices = (int)p->v[P_SLICES]};
}

/* The slice of CTA blockIdx.x: tokens [t0, t1) of S slices. */
static void emit_slice(lg_buf *b, const struct shape *k)
{
	lg_line(b, "const i64 S = T < %d ? (T > 0 ? T : 1) : %d; // slices", k->slices, k->slices);
	lg_line(b, "const i64 t0 = T * (i64)blockIdx.x / S, t1 = T * ((i64)blockIdx.x + 1) / S;");
	lg_line(b, "const int tid = threadIdx.x;");
}

/* Top-k slot j of token tt: its expert, or -1 (out of range, or a repeat of
 * an earlier slot of the token). */
static void emit_topk_helper(lg_buf *b, const struct shape *k)
{
	const char *ty = k->routing == R_I64 ? "long long" : "int";
	lg_comment(b, "Slot j of token tt's top-k list: its expert, or -1 (no expert, or one an earlier slot has).");
	lg_line(b, "static __device__ __forceinline__ int lg_expert(const %s *ix, i64 tt, int j)", ty);
	lg_open(b, "{");
	lg_line(b, "const %s e = ix[tt * %lld + j];", ty, (long long)k->k);
	lg_line(b, "if (e < 0 || e >= %lld) return -1;", (long long)k->e);
	lg_line(b, "for (int i = 0; i < j; i++)");
	lg_line(b, "\tif (ix[tt * %lld + i] == e) return -1;", (long long)k->k);
	lg_line(b, "return (int)e;");
	lg_close(b);
}

static const char *routing_ptr(const struct shape *k)
{
	return k->routing == R_MASK ? "mask" : k->routing == R_I32 ? "topk" : "topk64";
}

static void emit_count(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	struct shape k = shape_of(p);
	lg_section(b, p->entry[0], "each expert's tokens in a slice of tokens");
	lg_comment(b, "CTA i counts slice i into workspace row i (shared-memory integer atomics).");
	lg_emit_signature(b, s, p->entry[0], "__launch_bounds__(%d)", k.threads);
	lg_open(b, "{");
	lg_line(b, "__shared__ int cnt[%lld];", (long long)k.e);
	emit_slice(b, &k);
	if (p->v[P_EARLY]) {
		lg_comment(b, "The second kernel may be scheduled (it waits for this one's results).");
		lg_line(b, "asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");");
	}
	lg_line(b, "for (int e = tid; e < %lld; e += %d) cnt[e] = 0;", (long long)k.e, k.threads);
	lg_line(b, "__syncthreads();");
	if (k.routing == R_MASK && k.e % 4 == 0) {
		lg_comment(b, "The slice's mask, 4 bytes a load (rows of %lld bytes: 4-byte aligned).", (long long)k.e);
		lg_line(b, "const u32 *const w = (const u32 *)((const u8 *)mask + t0 * %lld);", (long long)k.e);
		lg_line(b, "const i64 nw = (t1 - t0) * %lld;", (long long)(k.e / 4));
		lg_line(b, "#pragma unroll 4");
		lg_open(b, "for (i64 j = tid; j < nw; j += %d) {", k.threads);
		lg_line(b, "const u32 v = w[j];");
		lg_line(b, "if (!v) continue;");
		lg_line(b, "const int e0 = (int)(j %% %lld) * 4;", (long long)(k.e / 4));
		lg_line(b, "for (int q = 0; q < 4; q++)");
		lg_line(b, "\tif ((v >> (8 * q)) & 0xffu) atomicAdd(&cnt[e0 + q], 1);");
		lg_close(b);
	} else if (k.routing == R_MASK) {
		lg_comment(b, "The slice's mask, a byte a load.");
		lg_line(b, "const u8 *const w = (const u8 *)mask + t0 * %lld;", (long long)k.e);
		lg_line(b, "const i64 nw = (t1 - t0) * %lld;", (long long)k.e);
		lg_line(b, "#pragma unroll 4");
		lg_line(b, "for (i64 j = tid; j < nw; j += %d)", k.threads);
		lg_line(b, "\tif (w[j]) atomicAdd(&cnt[(int)(j %% %lld)], 1);", (long long)k.e);
	} else {
		lg_comment(b, "The slice's top-k slots.");
		lg_line(b, "const i64 nw = (t1 - t0) * %lld;", (long long)k.k);
		lg_open(b, "for (i64 j = tid; j < nw; j += %d) {", k.threads);
		lg_line(b, "const int e = lg_expert((const %s *)%s, t0 + j / %lld, (int)(j %% %lld));",
			k.routing == R_I64 ? "long long" : "int", routing_ptr(&k), (long long)k.k, (long long)k.k);
		lg_line(b, "if (e >= 0) atomicAdd(&cnt[e], 1);");
		lg_close(b);
	}
	lg_line(b, "__syncthreads();");
	lg_line(b, "for (int e = tid; e < %lld; e += %d) ((int *)ws)[(i64)blockIdx.x * %lld + e] = cnt[e];",
		(long long)k.e, k.threads, (long long)k.e);
	lg_close(b);
}

/* Load the routing of chunk [c0, c0 + n) into registers ld[]; store them
 * into the dense byte mask sm[n][E]. */
static int chunk_regs(const struct shape *k)
{
	int64_t units = k->routing == R_MASK ? (k->e % 4 == 0 ? k->chunk * k->e / 4 : k->chunk * k->e)
					     : k->chunk * k->k;
	return (int)((units + k->threads - 1) / k->threads);
}

static void emit_chunk_load(lg_buf *b, const struct shape *k, const char *c0)
{
	int nr = chunk_regs(k);
	bool words = k->routing == R_MASK && k->e % 4 == 0;
	int64_t per = k->routing == R_MASK ? (words ? k->e / 4 : k->e) : k->k;
	const char *ty = k->routing == R_MASK ? (words ? "u32" : "u8") : k->routing == R_I64 ? "long long" : "int";
	lg_open(b, "{");
	lg_line(b, "const i64 left = t1 - %s;", c0);
	lg_line(b, "const i64 nl = left < CHUNK ? (left > 0 ? left : 0) : CHUNK;");
	if (k->routing == R_MASK)
		lg_line(b, "const %s *const w = (const %s *)((const u8 *)mask + %s * %lld);", ty, ty, c0, (long long)k->e);
	else
		lg_line(b, "const %s *const w = (const %s *)%s;", ty, ty, routing_ptr(k));
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int q = 0; q < %d; q++) {", nr);
	lg_line(b, "const i64 j = tid + q * %d;", k->threads);
	if (k->routing == R_MASK)
		lg_line(b, "ld[q] = j < nl * %lld ? w[j] : 0;", (long long)per);
	else
		lg_line(b, "ld[q] = j < nl * %lld ? lg_expert(w, %s + j / %lld, (int)(j %% %lld)) : -1;", (long long)per,
			c0, (long long)k->k, (long long)k->k);
	lg_close(b);
	lg_close(b);
}

static void emit_chunk_store(lg_buf *b, const struct shape *k)
{
	int nr = chunk_regs(k);
	if (k->routing == R_MASK) {
		bool words = k->e % 4 == 0;
		lg_line(b, "#pragma unroll");
		lg_open(b, "for (int q = 0; q < %d; q++) {", nr);
		lg_line(b, "const int j = tid + q * %d;", k->threads);
		lg_line(b, "if (j >= %lld) break;", (long long)(words ? k->chunk * k->e / 4 : k->chunk * k->e));
		if (words) {
			lg_comment(b, "each byte to 0 or 1");
			lg_line(b, "const u32 v = ld[q];");
			lg_line(b, "((u32 *)sm)[j] = (((v & 0x7f7f7f7fu) + 0x7f7f7f7fu) | v) >> 7 & 0x01010101u;");
		} else {
			lg_line(b, "sm[j] = ld[q] != 0;");
		}
		lg_close(b);
		return;
	}
	lg_line(b, "for (int j = tid; j < %lld; j += %d) sm[j] = 0;", (long long)(k->chunk * k->e), k->threads);
	lg_line(b, "__syncthreads();");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int q = 0; q < %d; q++) {", nr);
	lg_line(b, "const int j = tid + q * %d;", k->threads);
	lg_line(b, "if (ld[q] >= 0) sm[(j / %lld) * %lld + ld[q]] = 1;", (long long)k->k, (long long)k->e);
	lg_close(b);
}

static void emit_map(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	struct shape k = shape_of(p);
	int ept = (int)((k.e + k.threads - 1) / k.threads); /* experts a thread */
	int64_t per_e = (k.e + 31) / 32; /* experts a lane in the scan */
	int tpe = 1; /* threads an expert in the workspace sums */
	while (tpe * 2 * k.e <= k.threads)
		tpe *= 2;
	lg_section(b, p->entry[1], "row_id_map, counts, padded offsets, row_index");
	lg_comment(b, "CTA i: slice i, in chunks of %lld tokens staged as a byte mask [%lld][%lld].", (long long)k.chunk,
		   (long long)k.chunk, (long long)k.e);
	lg_emit_signature(b, s, p->entry[1], "__launch_bounds__(%d)", k.threads);
	lg_open(b, "{");
	lg_line(b, "__shared__ int pe[%lld]; // padded counts, then their exclusive prefix sums", (long long)k.e);
	lg_line(b, "__shared__ int cn[%lld]; // counts", (long long)k.e);
	lg_line(b, "__shared__ int ptot;");
	lg_line(b, "__shared__ __align__(16) u8 sm[%lld];", (long long)(k.chunk * k.e));
	lg_line(b, "__shared__ int ids[%lld];", (long long)(k.chunk * k.e));
	emit_slice(b, &k);
	lg_line(b, "const i64 cap = T * %lld + %lld;", (long long)k.k, (long long)(k.e * (k.m - 1)));
	lg_line(b, "int *const rix = (int *)row_index; // may be 0");
	lg_line(b, "%s ld[%d];", k.routing == R_MASK ? (k.e % 4 == 0 ? "u32" : "u8") : "int", chunk_regs(&k));
	lg_comment(b, "The first chunk's routing is loaded before the wait (the routing is an input).");
	lg_line(b, "i64 c0 = t0;");
	emit_chunk_load(b, &k, "c0");
	if (p->v[P_EARLY]) {
		lg_comment(b, "Wait for the counts of the first kernel.");
		lg_line(b, "asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");");
	}
	lg_comment(b, "Each expert's total and its tokens before this slice: the workspace column, %d thread%s",
		   tpe, tpe > 1 ? "s" : "");
	lg_comment(b, "an expert, the slices i with i %% %d == sub, 16 loads in flight (integer sums: any", tpe);
	lg_comment(b, "order gives the same).");
	lg_line(b, "for (int e = tid; e < %lld; e += %d) cn[e] = 0, pe[e] = 0;", (long long)k.e, k.threads);
	lg_line(b, "__syncthreads();");
	if (tpe > 1) {
		lg_open(b, "if (tid < %lld) {", (long long)(tpe * k.e));
		lg_line(b, "const int e = tid %% %lld, sub = tid / %lld;", (long long)k.e, (long long)k.e);
	} else {
		lg_open(b, "for (int e = tid; e < %lld; e += %d) {", (long long)k.e, k.threads);
		lg_line(b, "const int sub = 0;");
	}
	lg_line(b, "int a = 0, before = 0;");
	lg_line(b, "#pragma unroll 16");
	lg_open(b, "for (i64 i = sub; i < S; i += %d) {", tpe);
	lg_line(b, "const int v = ((const int *)ws)[i * %lld + e];", (long long)k.e);
	lg_line(b, "a += v;");
	lg_line(b, "if (i < (i64)blockIdx.x) before += v;");
	lg_close(b);
	lg_line(b, "atomicAdd(&cn[e], a);");
	lg_line(b, "atomicAdd(&pe[e], before); // the tokens before the slice, for now");
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_line(b, "int nxt[%d];", ept);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int q = 0; q < %d; q++) {", ept);
	lg_line(b, "const int e = tid + q * %d;", k.threads);
	lg_line(b, "nxt[q] = e < %lld ? pe[e] : 0;", (long long)k.e);
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_line(b, "for (int e = tid; e < %lld; e += %d) pe[e] = (cn[e] + %lld) / %lld * %lld;", (long long)k.e,
		k.threads, (long long)(k.m - 1), (long long)k.m, (long long)k.m);
	lg_line(b, "__syncthreads();");
	lg_comment(b, "Exclusive scan of the padded counts over the experts: warp 0, %lld a lane.", (long long)per_e);
	lg_open(b, "if (tid < 32) {");
	lg_line(b, "const int e0 = tid * %lld;", (long long)per_e);
	lg_line(b, "int sum = 0;");
	lg_line(b, "for (int e = e0; e < e0 + %lld && e < %lld; e++) sum += pe[e];", (long long)per_e, (long long)k.e);
	lg_line(b, "int inc = sum;");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int d = 1; d < 32; d <<= 1) {");
	lg_line(b, "const int o = __shfl_up_sync(0xffffffffu, inc, d);");
	lg_line(b, "if (tid >= d) inc += o;");
	lg_close(b);
	lg_line(b, "int run = inc - sum;");
	lg_open(b, "for (int e = e0; e < e0 + %lld && e < %lld; e++) {", (long long)per_e, (long long)k.e);
	lg_line(b, "const int v = pe[e];");
	lg_line(b, "pe[e] = run;");
	lg_line(b, "run += v;");
	lg_close(b);
	lg_line(b, "if (tid == 31) ptot = inc;");
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_line(b, "const int P = ptot;");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int q = 0; q < %d; q++) {", ept);
	lg_line(b, "const int e = tid + q * %d;", k.threads);
	lg_line(b, "if (e >= %lld) break;", (long long)k.e);
	lg_line(b, "nxt[q] += pe[e]; // the row of the slice's first token of e");
	lg_open(b, "if (blockIdx.x == 0) {");
	lg_line(b, "((int *)counts)[e] = cn[e];");
	lg_line(b, "((int *)offsets)[e] = pe[e];");
	lg_line(b, "if (e == 0) ((int *)offsets)[%lld] = P;", (long long)k.e);
	lg_line(b, "if (padded_counts) // the padded count: the next offset minus this one");
	lg_line(b, "\t((int *)padded_counts)[e] = (e + 1 < %lld ? pe[e + 1] : P) - pe[e];", (long long)k.e);
	lg_close(b);
	lg_close(b);
	lg_comment(b, "row_index of the padding rows (experts i, i + S, ...) and of the rows past P: -1.");
	lg_open(b, "if (rix) {");
	lg_open(b, "for (i64 e = blockIdx.x; e < %lld; e += S) {", (long long)k.e);
	lg_line(b, "const i64 r1 = e + 1 < %lld ? (i64)pe[e + 1] : (i64)P;", (long long)k.e);
	lg_line(b, "for (i64 r = pe[e] + cn[e] + tid; r < r1 && r < cap; r += %d) rix[r] = -1;", k.threads);
	lg_close(b);
	lg_line(b, "for (i64 r = P + (i64)blockIdx.x * %d + tid; r < cap; r += S * %d) rix[r] = -1;", k.threads,
		k.threads);
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_open(b, "for (; c0 < t1; c0 += %lld) {", (long long)k.chunk);
	lg_line(b, "const int n = (int)(t1 - c0 < %lld ? t1 - c0 : %lld);", (long long)k.chunk, (long long)k.chunk);
	emit_chunk_store(b, &k);
	lg_line(b, "__syncthreads();");
	lg_comment(b, "The next chunk's routing, in flight during this one's walk and stores.");
	lg_line(b, "const i64 cnext = c0 + %lld;", (long long)k.chunk);
	emit_chunk_load(b, &k, "cnext");
	lg_comment(b, "One thread an expert walks the chunk's tokens in order.");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int q = 0; q < %d; q++) {", ept);
	lg_line(b, "const int e = tid + q * %d;", k.threads);
	lg_line(b, "if (e >= %lld) break;", (long long)k.e);
	lg_open(b, "for (int j = 0; j < n; j++) {");
	lg_line(b, "int r = -1;");
	lg_open(b, "if (sm[j * %lld + e]) {", (long long)k.e);
	lg_line(b, "r = nxt[q]++;");
	lg_line(b, "if (rix && r < cap) rix[r] = (int)(c0 + j);");
	lg_close(b);
	lg_line(b, "ids[j * %lld + e] = r;", (long long)k.e);
	lg_close(b);
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_comment(b, "The chunk's row_id_map block [n][%lld] is contiguous: coalesced 4-byte stores.", (long long)k.e);
	lg_line(b, "int *const out = (int *)row_id_map + c0 * %lld;", (long long)k.e);
	lg_line(b, "for (int j = tid; j < n * %lld; j += %d) out[j] = ids[j];", (long long)k.e, k.threads);
	lg_line(b, "__syncthreads();");
	lg_close(b);
	lg_close(b);
}

static void emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	(void)t;
	struct shape k = shape_of(p);
	lg_section(b, "helpers for this spec", NULL);
	lg_line(b, "#define CHUNK %lld // tokens a chunk of the second kernel", (long long)k.chunk);
	if (k.routing != R_MASK)
		emit_topk_helper(b, &k);
	emit_count(b, s, p);
	emit_map(b, s, p);
}

/* Tile variants for `lingen tune`: the slice counts. */
static int candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max)
{
	return lg_candidate_values(s, t, out, 0, max, K_SLICES, slices_ok);
}

const struct lg_family lg_family_moe_row_map = {
	.op = "moe_row_map",
	.summary = "MoE padded row map: row_id_map, counts, padded offsets, row_index from a mask or top-k (K4)",
	.passes = 1u << LG_PASS_FORWARD,
	.dtypes = 1u << LG_DTYPE_BF16,
	.nkeys = NKEYS,
	.keys = keys,
	.sig = {[LG_PASS_FORWARD] = {1, sizes, NARGS, args}},
	.validate = validate,
	.uses = uses,
	.plan = plan,
	.emit = emit,
	.geometry = geometry,
	.workspace = workspace,
	.candidates = candidates,
};
