/*
 * moe_row_map.c - family "moe_row_map" (docs/kernels.md K4, the row map of a
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
 * bound: row_index and the dispatch kernels drop the rows past it. Row ids
 * are int32: a token count whose bound passes 2^31 - 1 is refused at the
 * launch.
 *
 * Strategy: the tokens are cut into S = min(tile.slices, tokens) slices of
 * consecutive tokens; two kernels of S CTAs of 512 threads, CTA i owning
 * slice i, with no atomics in global memory and nothing assumed of the
 * workspace (the caller's scratch): every byte read of it is written
 * first by the same launch. A chunk of up to 64 tokens is made into bits
 * in shared memory: bits[h][e] holds, one bit a token, the chunk's tokens
 * of expert e in 32-token group h (a mask: staged in rows of an odd word
 * count, then one __ballot_sync an expert per 32 tokens; top-k slots:
 * or-ed in, so a repeated expert counts once). Chunks go in batches of
 * CACHE (2): every load of a batch is issued before its bits are made.
 * Kernel 1 (_count): CTA i counts slice i's tokens of each expert
 * (popcounts) and stores them plainly to workspace row i: a table
 * [S][experts]. Kernel 2, launched early on sm_90 (programmatic dependent
 * launch; kernel 1 allows it first thing): CTA i makes the bits of its
 * slice's first batch before griddepcontrol.wait (the routing is an
 * input), then reads the whole table at L2 (16-byte loads, all in
 * flight): each expert's total (every row) and its tokens in the slices
 * before i (rows < i); a warp scans the padded totals over the experts
 * (every CTA the same scan: the offsets), and each chunk's rows follow:
 * row = the expert's next row + popc(bits below the token); the chunk's
 * row_id_map block [chunk][E] is contiguous, so every thread stores 4
 * bytes, coalesced. CTA 0 writes counts, offsets, padded_counts. Integer
 * sums only: the bytes never depend on timing.
 * Bounded by latency (T = 8192, E = 256: 2 MB read, 8.5 MB written): per
 * kernel one launch, the routing read (DRAM), the table's plain stores
 * (kernel 1) or one L2 trip for it (kernel 2, overlapped with kernel 1's
 * tail by the early launch), the row stores. The table read grows as S^2
 * x E (S = 128: 128 KB a CTA, 16 MB in all, from L2); more slices give
 * more CTAs for the stores. H200, T = 8192, E = 256, multiple 16 (`lingen
 * tune`, git history, commit 8b8e268: bench/h200-2026-12-01d): mask 14.9 us at 128 slices (32: 32.2,
 * 64: 18.6, 256: 22.9), top-k int64 13.8 (64: 16.2): 128 is the default.
 * The goal is 10 us; the one-kernel form before this one (a reset kernel,
 * then counts by atomics and a spin wait) measured 18.3 / 16.2.
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

static const struct lg_size sizes[] = {{"tokens", "T", 0, (int64_t)1 << 30, "tokens", 0, 0}};

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

#define THREADS 512  /* threads of each kernel */
#define LOADS_MAX 16 /* routing units a thread holds for a chunk at most */
#define CACHE 2      /* chunks a batch: loaded together, their bits in shared memory */

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

/* Routing units a token: 4-byte words of its mask row (experts % 4 == 0),
 * bytes of it, or top-k slots. */
static int64_t units_per_token(int routing, int64_t e, int64_t k)
{
	return routing != R_MASK ? k : e % 4 == 0 ? e / 4 : e;
}

/* Words a staged mask row (odd: the lanes of a warp reading one column of
 * 32 rows hit 32 distinct banks). */
static int64_t stage_words(int64_t e)
{
	return ((e + 3) / 4) | 1;
}

static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	int64_t e = lg_spec_int(s, K_EXPERTS);
	p->v[P_E] = e;
	p->v[P_K] = lg_spec_int(s, K_TOPK);
	p->v[P_M] = lg_spec_int(s, K_MULTIPLE);
	p->v[P_ROUTING] = lg_spec_int(s, K_ROUTING);
	p->v[P_SLICES] = p->tile[K_SLICES] = lg_spec_has(s, K_SLICES) ? lg_spec_int(s, K_SLICES) : 128;
	p->v[P_THREADS] = THREADS;
	/* a chunk of up to 64 tokens: its routing at most LOADS_MAX units a
	 * thread, its staged mask within 32 KB of shared memory */
	int64_t chunk = 64, upt = units_per_token((int)p->v[P_ROUTING], e, p->v[P_K]);
	while (chunk > 8 && ((chunk * upt + THREADS - 1) / THREADS > LOADS_MAX ||
			     (p->v[P_ROUTING] == R_MASK && chunk * stage_words(e) * 4 > 32768)))
		chunk /= 2;
	p->v[P_CHUNK] = chunk;
	p->nentries = 2;
	snprintf(p->entry[0], sizeof p->entry[0], "%s_count", s->entry);
	snprintf(p->entry[1], sizeof p->entry[1], "%s", s->entry);
	p->v[P_EARLY] = t->sm >= 90;
	p->early[1] = p->v[P_EARLY] != 0;
	return LG_OK;
}

static void geometry(const struct lg_plan *p, int e, const int64_t *sz, struct lg_launch_dim *d)
{
	int64_t n = sz[0] < p->v[P_SLICES] ? sz[0] : p->v[P_SLICES];
	(void)e;
	d->grid[0] = (unsigned)(n < 1 ? 1 : n);
	d->grid[1] = d->grid[2] = d->block[1] = d->block[2] = 1;
	d->block[0] = (unsigned)p->v[P_THREADS];
	d->smem = 0;
	lg_moe_refuse_past_int32(sz[0], p->v[P_K], p->v[P_E], p->v[P_M], d);
}

/* The workspace, int32: each slice's counts [slices][experts], written by
 * the count kernel, read by the map kernel. */
static size_t workspace(const struct lg_plan *p)
{
	return (size_t)((p->v[P_SLICES] * p->v[P_E] + 3) / 4 * 4) * 4;
}

/* ------------------------------------------------------------ emission */

struct shape {
	int64_t e, k, m, chunk, upt, sw;
	int routing, threads, slices, groups, nr;
	bool words; /* mask rows loaded 4 bytes at a time */
};

static struct shape shape_of(const struct lg_plan *p)
{
	struct shape k = {.e = p->v[P_E], .k = p->v[P_K], .m = p->v[P_M], .chunk = p->v[P_CHUNK],
			  .routing = (int)p->v[P_ROUTING], .threads = (int)p->v[P_THREADS],
			  .slices = (int)p->v[P_SLICES]};
	k.upt = units_per_token(k.routing, k.e, k.k);
	k.sw = stage_words(k.e);
	k.groups = (int)((k.chunk + 31) / 32);
	k.nr = (int)((k.chunk * k.upt + k.threads - 1) / k.threads);
	k.words = k.routing == R_MASK && k.e % 4 == 0;
	return k;
}

static const char *routing_ptr(const struct shape *k)
{
	return k->routing == R_MASK ? "mask" : k->routing == R_I32 ? "topk" : "topk64";
}

static const char *unit_type(const struct shape *k)
{
	return k->routing == R_MASK ? (k->words ? "u32" : "u8") : "int";
}

static const char *source_type(const struct shape *k)
{
	return k->routing == R_MASK ? unit_type(k) : k->routing == R_I64 ? "long long" : "int";
}

/* The chunk's routing into registers: lg_load. */
static void emit_load_helper(lg_buf *b, const struct shape *k)
{
	const long long E = (long long)k->e;
	lg_comment(b, "The routing of tokens [c0, c0 + n) into registers, %d unit%s a thread", k->nr,
		   k->nr > 1 ? "s" : "");
	lg_comment(b, "(%s).", k->routing != R_MASK ? "top-k slots as experts, -1: none"
			       : k->words ? "4 mask bytes a unit" : "a mask byte a unit");
	lg_line(b, "static __device__ __forceinline__ void lg_load(const %s *src, i64 c0, int n, int tid,",
		source_type(k));
	lg_line(b, "\t\t\t\t\t\t       %s *ld)", unit_type(k));
	lg_open(b, "{");
	if (k->routing == R_MASK)
		lg_line(b, "const %s *const w = (const %s *)((const u8 *)src + c0 * %lld);", unit_type(k), unit_type(k),
			E);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int q = 0; q < %d; q++) {", k->nr);
	lg_line(b, "const int j = tid + q * %d;", k->threads);
	if (k->routing == R_MASK) {
		lg_line(b, "ld[q] = j < n * %lld ? w[j] : 0;", (long long)k->upt);
	} else {
		lg_line(b, "const %s e = j < n * %lld ? src[c0 * %lld + j] : -1;", source_type(k), (long long)k->k,
			(long long)k->k);
		lg_line(b, "ld[q] = e >= 0 && e < %lld ? (int)e : -1; // outside [0, %lld): no expert", E, E);
	}
	lg_close(b);
	lg_close(b);
}

/* Registers to bits: lg_bits. */
static void emit_bits_helper(lg_buf *b, const struct shape *k)
{
	const long long E = (long long)k->e;
	lg_comment(b, "The chunk's bits: bit l of bits[h][e] set when token c0 + 32 h + l is routed to e.");
	if (k->routing != R_MASK)
		lg_comment(b, "Top-k slots or-ed in (a repeated expert counts once).");
	else
		lg_comment(b, "The mask staged in rows of %lld words, then a warp a (32 tokens, 32 experts)",
			   (long long)k->sw);
	if (k->routing == R_MASK)
		lg_comment(b, "block: a ballot an expert.");
	lg_line(b, "static __device__ __forceinline__ void lg_bits(const %s *ld, int n, int tid, u32 *%s,",
		unit_type(k), k->routing == R_MASK ? "stage" : " /* stage */");
	lg_line(b, "\t\t\t\t\t\t       u32 (*bits)[%lld])", E);
	lg_open(b, "{");
	if (k->routing != R_MASK) {
		lg_line(b, "for (int j = tid; j < %lld; j += %d) bits[0][j] = 0;", (long long)k->groups * k->e,
			k->threads);
		lg_line(b, "__syncthreads();");
		lg_line(b, "#pragma unroll");
		lg_open(b, "for (int q = 0; q < %d; q++) {", k->nr);
		lg_line(b, "const int tk = (tid + q * %d) / %lld; // a token of the chunk", k->threads, (long long)k->k);
		lg_line(b, "if (ld[q] >= 0) atomicOr(&bits[tk >> 5][ld[q]], 1u << (tk & 31));");
		lg_close(b);
		lg_line(b, "__syncthreads();");
		lg_close(b);
		return;
	}
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int q = 0; q < %d; q++) {", k->nr);
	lg_line(b, "const int j = tid + q * %d;", k->threads);
	if (k->words)
		lg_line(b, "if (j < n * %lld) stage[(j / %lld) * %lld + j %% %lld] = ld[q];", (long long)k->upt,
			(long long)k->upt, (long long)k->sw, (long long)k->upt);
	else
		lg_line(b, "if (j < n * %lld) ((u8 *)stage)[(j / %lld) * %lld + j %% %lld] = ld[q];", E, E,
			(long long)k->sw * 4, E);
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_line(b, "const int lane = tid & 31;");
	long long ec = (k->e + 31) / 32;
	lg_open(b, "for (int task = tid >> 5; task < %lld; task += %d) {", (long long)k->groups * ec, k->threads / 32);
	lg_line(b, "const int h = task / %lld, c = task %% %lld, row = h * 32 + lane;", ec, ec);
	lg_line(b, "const u8 *const src = (const u8 *)(stage + row * %lld) + c * 32;", (long long)k->sw);
	lg_line(b, "u32 mine = 0;");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int x = 0; x < 32; x++) {");
	lg_line(b, "const bool on = row < n && c * 32 + x < %lld && src[x] != 0;", E);
	lg_line(b, "const u32 m = __ballot_sync(0xffffffffu, on);");
	lg_line(b, "if (lane == x) mine = m;");
	lg_close(b);
	lg_line(b, "if (c * 32 + lane < %lld) bits[h][c * 32 + lane] = mine;", E);
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_close(b);
}

/* The workspace's parts, the slice bounds, the L2 loads of what other CTAs
 * wrote, the chunk's routing loaded into registers and made into bits. */
static void emit_helpers(lg_buf *b, const struct shape *k)
{
	lg_line(b, "#define CHUNK %lld // tokens a chunk", (long long)k->chunk);
	lg_comment(b, "Tokens [*t0, *t1) of slice i of S.");
	lg_line(b, "static __device__ __forceinline__ void lg_slice(i64 T, i64 S, i64 i, i64 *t0, i64 *t1)");
	lg_open(b, "{");
	lg_line(b, "*t0 = T * i / S;");
	lg_line(b, "*t1 = T * (i + 1) / S;");
	lg_close(b);
	lg_comment(b, "Tokens of the chunk from c0 in a slice ending at t1 (0: past it).");
	lg_line(b, "static __device__ __forceinline__ int lg_chunk_n(i64 c0, i64 t1)");
	lg_open(b, "{");
	lg_line(b, "return (int)(t1 - c0 < CHUNK ? (t1 > c0 ? t1 - c0 : 0) : CHUNK);");
	lg_close(b);
	lg_comment(b, "The count kernel's table: read at L2.");
	if (k->e % 4 != 0) {
		lg_line(b, "static __device__ __forceinline__ int lg_ld_l2(const int *p)");
		lg_open(b, "{");
		lg_line(b, "int v;");
		lg_line(b, "asm volatile(\"ld.global.cg.b32 %%0, [%%1];\" : \"=r\"(v) : \"l\"(p) : \"memory\");");
		lg_line(b, "return v;");
		lg_close(b);
	} else {
		lg_line(b, "static __device__ __forceinline__ uint4 lg_ld4_l2(const int *p)");
		lg_open(b, "{");
		lg_line(b, "uint4 v;");
		lg_line(b, "asm volatile(\"ld.global.cg.v4.u32 {%%0, %%1, %%2, %%3}, [%%4];\"");
		lg_line(b, "\t     : \"=r\"(v.x), \"=r\"(v.y), \"=r\"(v.z), \"=r\"(v.w) : \"l\"(p) : \"memory\");");
		lg_line(b, "return v;");
		lg_close(b);
	}
	emit_load_helper(b, k);
	emit_bits_helper(b, k);
}

/* The chunks of a batch (up to CACHE chunks from c0, within the slice's
 * end t1): their routing loaded into registers first (every load in
 * flight at once), then made into bits, chunk c into bits[c]. */
static void emit_batch(lg_buf *b, const struct shape *k)
{
	const long long E = (long long)k->e;
	lg_comment(b, "The chunks of tokens [c0, c0 + %d CHUNK) within t1: every load issued, then chunk c's bits",
		   CACHE);
	lg_comment(b, "into bits[c] (a chunk past t1 is skipped: n = 0).");
	lg_line(b, "static __device__ __forceinline__ void lg_batch(const %s *src, i64 c0, i64 t1, int tid,",
		source_type(k));
	lg_line(b, "\t\t\t\t\t\t\tu32 *stage, u32 (*bits)[%d][%lld])", k->groups, E);
	lg_open(b, "{");
	lg_line(b, "%s ld[%d][%d];", unit_type(k), CACHE, k->nr);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int c = 0; c < %d; c++) {", CACHE);
	lg_line(b, "const i64 a = c0 + c * CHUNK;");
	lg_line(b, "lg_load(src, a, lg_chunk_n(a, t1), tid, ld[c]);");
	lg_close(b);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int c = 0; c < %d; c++) {", CACHE);
	lg_line(b, "const int n = lg_chunk_n(c0 + c * CHUNK, t1);");
	lg_line(b, "if (n > 0) lg_bits(ld[c], n, tid, stage, bits[c]);");
	lg_close(b);
	lg_close(b);
}

/* Shared declarations of both kernels: the staged mask and the batch's
 * bits. */
static void emit_batch_smem(lg_buf *b, const struct shape *k)
{
	if (k->routing == R_MASK)
		lg_line(b, "__shared__ u32 stage[%lld]; // a chunk's mask, rows of %lld words",
			(long long)(k->chunk * k->sw), (long long)k->sw);
	else
		lg_line(b, "u32 *const stage = 0;");
	lg_line(b, "__shared__ u32 bits[%d][%d][%lld]; // the batch's tokens of each expert, 32 a word", CACHE,
		k->groups, (long long)k->e);
	lg_line(b, "const i64 S = T < %d ? (T > 0 ? T : 1) : %d; // slices", k->slices, k->slices);
	lg_line(b, "const int tid = threadIdx.x;");
	lg_line(b, "i64 t0, t1; // this CTA's slice");
	lg_line(b, "lg_slice(T, S, blockIdx.x, &t0, &t1);");
}

/* Kernel 1: each CTA counts its slice's tokens of each expert and writes
 * them, plainly, to its workspace row. */
static void emit_count(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	struct shape k = shape_of(p);
	const long long E = (long long)k.e;
	int ept = (int)((k.e + k.threads - 1) / k.threads);
	lg_section(b, p->entry[0], "each slice's tokens of each expert");
	lg_comment(b, "CTA i counts slice i (chunks of %lld tokens, %d at a time) into workspace row i: plain",
		   (long long)k.chunk, CACHE);
	lg_comment(b, "stores, no atomics, nothing read of the workspace.");
	lg_emit_signature(b, s, p->entry[0], "__launch_bounds__(%d)", k.threads);
	lg_open(b, "{");
	if (p->v[P_EARLY]) {
		lg_comment(b, "The map kernel may be scheduled: it loads its routing, then waits for this grid.");
		lg_line(b, "asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");");
	}
	emit_batch_smem(b, &k);
	lg_line(b, "int acc[%d];", ept);
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int q = 0; q < %d; q++) acc[q] = 0;", ept);
	lg_open(b, "for (i64 c0 = t0; c0 < t1; c0 += %d * CHUNK) {", CACHE);
	lg_line(b, "lg_batch((const %s *)%s, c0, t1, tid, stage, bits);", source_type(&k), routing_ptr(&k));
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int q = 0; q < %d; q++) {", ept);
	lg_line(b, "const int e = tid + q * %d;", k.threads);
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int c = 0; c < %d; c++)", CACHE);
	lg_line(b, "\tif (e < %lld && lg_chunk_n(c0 + c * CHUNK, t1) > 0)", E);
	lg_line(b, "\t\tfor (int h = 0; h < %d; h++) acc[q] += __popc(bits[c][h][e]);", k.groups);
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_close(b);
	lg_line(b, "int *const row = (int *)ws + (i64)blockIdx.x * %lld;", E);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int q = 0; q < %d; q++) {", ept);
	lg_line(b, "const int e = tid + q * %d;", k.threads);
	lg_line(b, "if (e < %lld) row[e] = acc[q];", E);
	lg_close(b);
	lg_close(b);
}

/* Kernel 2 after the wait: the workspace table [S][E] read at L2, each
 * expert's total (every row) into cn[] and its tokens before slice i (rows
 * 0 .. i - 1) into nx[], both zeroed before the wait. */
static void emit_table(lg_buf *b, const struct shape *k)
{
	const long long E = (long long)k->e;
	bool quad = k->e % 4 == 0;
	long long units = quad ? E / 4 : E, tpe = 1;
	while (tpe * 2 * units <= k->threads)
		tpe *= 2;
	lg_comment(b, "The table: %lld thread%s a%s (every %lld-th row), all loads independent.", tpe,
		   tpe > 1 ? "s" : "", quad ? " 4 experts" : "n expert", tpe);
	lg_line(b, "const int *const wsi = (const int *)ws;");
	lg_open(b, "for (int x = tid; x < %lld; x += %d) {", tpe * units, k->threads);
	lg_line(b, "const int u = x %% %lld, sub = x / %lld;", units, units);
	if (quad) {
		lg_line(b, "int a[4] = {0, 0, 0, 0}, bf[4] = {0, 0, 0, 0}; // every slice, the slices before i");
		lg_line(b, "#pragma unroll 8");
		lg_open(b, "for (int j = sub; j < (int)S; j += %lld) {", tpe);
		lg_line(b, "const uint4 v = lg_ld4_l2(wsi + (i64)j * %lld + 4 * u);", E);
		lg_line(b, "const int w[4] = {(int)v.x, (int)v.y, (int)v.z, (int)v.w};");
		lg_line(b, "const int bm = j < i ? -1 : 0; // a slice before i");
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int z = 0; z < 4; z++) a[z] += w[z], bf[z] += w[z] & bm;");
		lg_close(b);
		lg_line(b, "#pragma unroll");
		lg_open(b, "for (int z = 0; z < 4; z++) {");
		lg_line(b, "if (a[z]) atomicAdd(&cn[4 * u + z], a[z]);");
		lg_line(b, "if (bf[z]) atomicAdd(&nx[4 * u + z], bf[z]);");
		lg_close(b);
	} else {
		lg_line(b, "int a = 0, bf = 0;");
		lg_line(b, "#pragma unroll 8");
		lg_open(b, "for (int j = sub; j < (int)S; j += %lld) {", tpe);
		lg_line(b, "const int v = lg_ld_l2(wsi + (i64)j * %lld + u);", E);
		lg_line(b, "a += v;");
		lg_line(b, "bf += j < i ? v : 0; // a slice before i");
		lg_close(b);
		lg_line(b, "if (a) atomicAdd(&cn[u], a);");
		lg_line(b, "if (bf) atomicAdd(&nx[u], bf);");
	}
	lg_close(b);
	lg_line(b, "__syncthreads();");
}

/* The padded exclusive scan of the totals over the experts (warp 0), P,
 * and each expert's first row in slice i. */
static void emit_offsets(lg_buf *b, const struct shape *k)
{
	const long long E = (long long)k->e, per_e = (k->e + 31) / 32;
	if (k->m > 1)
		lg_line(b, "for (int e = tid; e < %lld; e += %d) pe[e] = (cn[e] + %lld) / %lld * %lld;", E,
			k->threads, (long long)(k->m - 1), (long long)k->m, (long long)k->m);
	else
		lg_line(b, "for (int e = tid; e < %lld; e += %d) pe[e] = cn[e];", E, k->threads);
	lg_line(b, "__syncthreads();");
	lg_comment(b, "Exclusive scan of the padded counts over the experts: warp 0, %lld a lane.", per_e);
	lg_open(b, "if (tid < 32) {");
	lg_line(b, "const int e0 = tid * %lld;", per_e);
	lg_line(b, "int sum = 0;");
	lg_line(b, "for (int e = e0; e < e0 + %lld && e < %lld; e++) sum += pe[e];", per_e, E);
	lg_line(b, "int inc = sum;");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int d = 1; d < 32; d <<= 1) {");
	lg_line(b, "const int o = __shfl_up_sync(0xffffffffu, inc, d);");
	lg_line(b, "if (tid >= d) inc += o;");
	lg_close(b);
	lg_line(b, "int run = inc - sum;");
	lg_open(b, "for (int e = e0; e < e0 + %lld && e < %lld; e++) {", per_e, E);
	lg_line(b, "const int v = pe[e];");
	lg_line(b, "pe[e] = run;");
	lg_line(b, "nx[e] += run;");
	lg_line(b, "run += v;");
	lg_close(b);
	lg_line(b, "if (tid == 31) ptot = inc;");
	lg_close(b);
	lg_line(b, "__syncthreads();");
}

/* Slice i: counts and offsets (slice 0), the row_index of padding rows
 * (experts i, i + S, ...) and past P (every S-th block from i). */
static void emit_slice_extras(lg_buf *b, const struct shape *k)
{
	const long long E = (long long)k->e;
	lg_open(b, "if (i == 0) {");
	lg_open(b, "for (int e = tid; e < %lld; e += %d) {", E, k->threads);
	lg_line(b, "((int *)counts)[e] = cn[e];");
	lg_line(b, "((int *)offsets)[e] = pe[e];");
	lg_line(b, "if (e == 0) ((int *)offsets)[%lld] = P;", E);
	lg_line(b, "const int end = e + 1 < %lld ? pe[e + 1] : P; // the next offset", E);
	lg_line(b, "if (padded_counts) ((int *)padded_counts)[e] = end - pe[e];");
	lg_close(b);
	lg_close(b);
	lg_comment(b, "row_index of the padding rows (experts i, i + S, ...) and of the rows past P: -1.");
	lg_open(b, "if (rix) {");
	lg_open(b, "for (i64 e = i; e < %lld; e += S) {", E);
	lg_line(b, "const i64 end = e + 1 < %lld ? (i64)pe[e + 1] : (i64)P;", E);
	lg_line(b, "const i64 r1 = end < cap ? end : cap;");
	lg_line(b, "for (i64 r = pe[e] + cn[e] + tid; r < r1; r += %d) rix[r] = -1;", k->threads);
	lg_close(b);
	lg_line(b, "for (i64 r = P + i * %d + tid; r < cap; r += S * %d) rix[r] = -1;", k->threads, k->threads);
	lg_close(b);
}

/* Slice i's batches (the first loaded before the wait), each chunk's rows:
 * each 32-token group's first row of each expert, then the chunk's
 * row_id_map block [n][E] (contiguous: coalesced 4-byte stores) and
 * row_index. */
static void emit_rows(lg_buf *b, const struct shape *k, int ept)
{
	const long long E = (long long)k->e;
	lg_open(b, "for (i64 b0 = t0; b0 < t1; b0 += %d * CHUNK) {", CACHE);
	lg_line(b, "if (b0 != t0) lg_batch((const %s *)%s, b0, t1, tid, stage, bits);", source_type(k),
		routing_ptr(k));
	lg_open(b, "for (int c = 0; c < %d; c++) {", CACHE);
	lg_line(b, "const i64 c0 = b0 + c * CHUNK;");
	lg_line(b, "const int n = lg_chunk_n(c0, t1);");
	lg_line(b, "if (n <= 0) break;");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int q = 0; q < %d; q++) {", ept);
	lg_line(b, "const int e = tid + q * %d;", k->threads);
	lg_open(b, "if (e < %lld) {", E);
	lg_line(b, "int run = nx[e];");
	lg_open(b, "for (int h = 0; h < %d; h++) {", k->groups);
	lg_line(b, "first[h][e] = run;");
	lg_line(b, "run += __popc(bits[c][h][e]);");
	lg_close(b);
	lg_line(b, "nx[e] = run;");
	lg_close(b);
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_line(b, "int *const out = (int *)row_id_map + c0 * %lld;", E);
	lg_open(b, "for (int j = tid; j < n * %lld; j += %d) {", E, k->threads);
	lg_line(b, "const int tk = j / %lld, e = j - tk * %lld; // token, expert", E, E);
	lg_line(b, "const int h = tk >> 5, l = tk & 31;");
	lg_line(b, "const u32 w = bits[c][h][e];");
	lg_line(b, "int r = -1;");
	lg_open(b, "if ((w >> l) & 1u) {");
	lg_line(b, "r = first[h][e] + __popc(w & ((1u << l) - 1u));");
	lg_line(b, "if (rix && r < cap) rix[r] = (int)(c0 + tk);");
	lg_close(b);
	lg_line(b, "out[j] = r;");
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_close(b);
	lg_close(b);
}

static void emit_map(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	struct shape k = shape_of(p);
	const long long E = (long long)k.e;
	int ept = (int)((k.e + k.threads - 1) / k.threads); /* experts a thread */
	lg_section(b, p->entry[1], "row_id_map, counts, padded offsets, row_index");
	lg_comment(b, "CTA i: slice i's first %d chunks of %lld tokens made into bits, then (after the count",
		   CACHE, (long long)k.chunk);
	lg_comment(b, "kernel) the totals and the tokens of the slices before i from the table, the padded");
	lg_comment(b, "offsets, and slice i's rows.");
	lg_emit_signature(b, s, p->entry[1], "__launch_bounds__(%d)", k.threads);
	lg_open(b, "{");
	emit_batch_smem(b, &k);
	lg_line(b, "__shared__ int first[%d][%lld]; // each 32-token group's first row of each expert", k.groups,
		E);
	lg_line(b, "__shared__ int cn[%lld], pe[%lld], nx[%lld]; // totals, offsets, the next row of each expert",
		E, E, E);
	lg_line(b, "__shared__ int ptot;");
	lg_line(b, "const i64 i = blockIdx.x;");
	long long pad = (long long)(k.e * (k.m - 1)); /* 0: no padding */
	lg_line(b, "const i64 cap = T * %lld%s%.0lld;", (long long)k.k, pad ? " + " : "", pad);
	lg_line(b, "int *const rix = (int *)row_index; // may be 0");
	lg_line(b, "for (int e = tid; e < %lld; e += %d) cn[e] = nx[e] = 0;", E, k.threads);
	lg_comment(b, "The slice's first batch made into bits before the wait (the routing is an input).");
	lg_line(b, "lg_batch((const %s *)%s, t0, t1, tid, stage, bits);", source_type(&k), routing_ptr(&k));
	if (p->v[P_EARLY]) {
		lg_comment(b, "Wait for the count kernel's table.");
		lg_line(b, "asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");");
	}
	lg_line(b, "__syncthreads();");
	emit_table(b, &k);
	emit_offsets(b, &k);
	lg_line(b, "const int P = ptot;");
	emit_slice_extras(b, &k);
	emit_rows(b, &k, ept);
	lg_close(b);
}

static void emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	(void)t;
	struct shape k = shape_of(p);
	lg_section(b, "helpers for this spec", NULL);
	emit_helpers(b, &k);
	emit_batch(b, &k);
	emit_count(b, s, p);
	emit_map(b, s, p);
}

/* Tile variants for `lingen tune`: the slice counts. */
static int candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max)
{
	return lg_candidate_values(s, t, out, 0, max, K_SLICES, slices_ok);
}

/* What a launch computes: the comment of its typed launcher (lingen_ops.h). */
static const char doc_forward[] =
	"K4: the padded MoE row map (op \"moe_row_map\"): routing is the mask\n"
	"  [tokens, experts] u8/bool (non-zero: routed; routing \"mask\"), or the\n"
	"  top-k indices [tokens, top_k] int32 (\"topk_i32\") / int64 (\"topk_i64\"),\n"
	"  where an index outside [0, experts) is no expert and a repeat counts\n"
	"  once. row_id_map [tokens, experts] int32 (the padded row, -1 where not\n"
	"  routed; rows expert-major, ascending token within an expert); counts\n"
	"  [experts] int32; offsets [experts + 1] int32, each expert's first row\n"
	"  with counts padded to `multiple`, offsets[experts] = P, the padded\n"
	"  total. P stays on the device: a host that needs it copies the 4 bytes\n"
	"  of offsets[experts] (cuMemcpyDtoH), or sizes buffers by the bound\n"
	"  rows = tokens * top_k + experts * (multiple - 1) that every dispatch\n"
	"  buffer uses (below 2^31, the row ids being int32: every MoE launcher\n"
	"  refuses a larger one). row_index [rows] int32 or 0: the source token of row r < P,\n"
	"  -1 for padding rows and rows >= P. padded_counts [experts] int32 or 0:\n"
	"  round_up(counts, multiple), each expert's rows (the segments of\n"
	"  moe_permute_quant; a grouped GEMM's row counts). workspace:\n"
	"  lg_kernel_workspace_size(k) bytes.";
/* One routing parameter, for the input the routing key uses. */
static const struct lg_form forms[] = {
	{"forward", NULL, NULL, "routing=mask|topk|topk64 row_id_map counts offsets row_index padded_counts workspace",
	 NULL},
};

const struct lg_family lg_family_moe_row_map = {
	.op = "moe_row_map",
	.summary = "MoE padded row map: row_id_map, counts, padded offsets, row_index from a mask or top-k (K4)",
	.passes = 1u << LG_PASS_FORWARD,
	.dtypes = 1u << LG_DTYPE_BF16,
	.nkeys = NKEYS,
	.keys = keys,
	.sig = {[LG_PASS_FORWARD] = {1, sizes, NARGS, args, doc_forward, 1, forms}},
	.validate = validate,
	.uses = uses,
	.plan = plan,
	.emit = emit,
	.geometry = geometry,
	.workspace = workspace,
	.candidates = candidates,
};
