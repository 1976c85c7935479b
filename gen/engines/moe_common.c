/*
 * moe_common.c - the dispatch and combine kernels of the MoE families
 * (moe_common.h says what each does).
 *
 * Both are token-driven: CTA t owns token t. Warp 0 reads row_id_map[t, :]
 * 32 experts at a time (coalesced) and packs the token's rows into shared
 * memory in ascending expert order (a ballot and a prefix popcount per 32
 * experts: the order, and so every byte written, is fixed), while the other
 * warps already load the token's row (dispatch). A row is held as `kp`
 * pieces a thread in registers: dispatch stores them to each expert row;
 * combine loads up to 8 expert rows at once (their pieces all in flight)
 * and adds them in expert order in fp32. Nothing is atomic, nothing depends
 * on timing: the same inputs give the same bytes.
 *
 * The combine's critical path is three dependent DRAM trips a token (the
 * map row, then the probabilities of the routed rows, then the rows), with
 * 4 CTAs of 256 threads an SM at hidden 2048 (52-54 registers; 175 at
 * hidden 7168, one CTA an SM). The pipelined form (tile.pipeline 2, the
 * combine's default: 83.4 us against 120.1 on the H200 at the target
 * shape) makes it one trip a token:
 * persistent CTAs (the co-resident count, lg_plan.persistent) loop over
 * tokens t, t + G, ...; one more warp, the map warp, loads the next token's
 * map row (up to 256 experts at once in registers) and packs its rows and
 * each expert's row into the other of two shared buffers, while the adding
 * warps load this token's rows, their lanes 0..7 gather the rows' weights
 * beside them (passed by shuffles: the weights are needed only by the
 * adds), and the restored probabilities are loaded beside them and stored
 * last; one __syncthreads a token. The adds are those of the default form
 * (ascending expert, fp32, the same expressions): the same bytes. One
 * piece a thread: registers capped at 56 (4 CTAs of 288 threads an SM);
 * rows 8, 4 or 2 at a time: at most 32 registers of pieces a thread.
 *
 * The plain dispatch's warp 0 (and the pipelined form's map warp) loads
 * up to 256 experts of the map row at once, then the routed experts'
 * probabilities at once, before any store (the stores to out_probs may
 * alias probs for the compiler: in one loop each load waited for the
 * previous store, up to top_k dependent DRAM trips before the CTA's
 * barrier); two trips a token, the token row loading beside the first.
 * Each CTA still pays a launch, those trips and a barrier before its
 * stores. Its pipelined form (tile.pipeline
 * 2, opt-in; see moe_permute.c) is the combine's: persistent CTAs
 * (the co-resident count) loop over tokens; the map warp reads token
 * t + G's map row into the other shared buffer and writes its rows'
 * probabilities, while the moving warps load token t + G's row (and
 * scales) into registers and store token t's, loaded the token before, to
 * its rows; one __syncthreads a token. The zero rows go to all CTAs (worker
 * b of G), before the first token, while its loads are in flight. The same
 * bytes as one CTA a token (tools/emu/permute.sh). No register cap: the
 * inlined map row takes 51 to 56 registers (4 CTAs of 288 an SM at hidden
 * 2048; 32 without it; capped at 40, ptxas spills).
 */
#include "moe_common.h"

#include <stdio.h>

#include "error.h"

lg_status lg_moe_validate(const struct lg_spec *s, int e, const char *where)
{
	int64_t experts = lg_spec_int(s, e), k = lg_spec_int(s, e + 1);
	if (k > experts)
		return lg_spec_error(where, "top_k: found %lld, allowed: 1 to experts = %lld", (long long)k,
				     (long long)experts);
	return LG_OK;
}

const int64_t lg_moe_threads_ok[] = {32, 64, 128, 256, 512, 1024, 0};

struct lg_moe_rows lg_moe_rows_of(int64_t hidden, int es, int threads)
{
	struct lg_moe_rows r = {.hidden = hidden, .bytes = hidden * es, .vb = 16};
	while (r.bytes % r.vb)
		r.vb /= 2;
	r.pieces = (int)(r.bytes / r.vb);
	r.threads = r.pieces >= 256 ? 256 : (r.pieces + 31) / 32 * 32;
	if (threads)
		r.threads = threads;
	r.kp = (r.pieces + r.threads - 1) / r.threads;
	return r;
}

lg_status lg_moe_validate_threads(const struct lg_spec *s, int k, int64_t hidden, int es, const char *where)
{
	if (!lg_spec_has(s, k))
		return LG_OK;
	struct lg_moe_rows r = lg_moe_rows_of(hidden, es, 0);
	int64_t most = (r.pieces + 31) / 32 * 32, t = lg_spec_int(s, k);
	if (t > most)
		return lg_spec_error(where, "tile.threads: found %lld, allowed: at most %lld (a row is %d pieces of %d "
				     "bytes)", (long long)t, (long long)most, r.pieces, r.vb);
	return LG_OK;
}

lg_status lg_moe_validate_pipeline(const struct lg_spec *s, int kp, int kt, bool piped, const char *where)
{
	if (!lg_spec_has(s, kp) || lg_spec_int(s, kp) == 1)
		return LG_OK;
	if (!piped)
		return lg_spec_error(where, "tile.pipeline: found %lld on pass %s, allowed: 1 (the pipelined forms are "
				     "the combine's, moe_unpermute forward and moe_permute backward, and the plain "
				     "dispatch's, moe_permute forward)",
				     (long long)lg_spec_int(s, kp), lg_pass_names[s->pass]);
	if (lg_spec_has(s, kt) && lg_spec_int(s, kt) > 992)
		return lg_spec_error(where, "tile.threads: found %lld with tile.pipeline 2, allowed: at most 992 (the "
				     "map warp makes 32 more, 1024 a CTA)", (long long)lg_spec_int(s, kt));
	return LG_OK;
}

int lg_moe_candidates(const struct lg_spec *s, const struct lg_target *t, struct lg_tile_choice *out, int max,
		      int k, int kp, bool piped)
{
	static const int64_t threads[] = {64, 128, 256, 512, 0}, pipeline[] = {1, 2, 0};
	if (!piped)
		return lg_candidate_values(s, t, out, 0, max, k, threads);
	/* both forms named (the combine's default is the pipelined one, the dispatch's the other) */
	int n = lg_candidate_grid(s, t, out, 0, max, k, threads, kp, pipeline);
	if (n == 0) /* no thread count but the default (short rows): the two forms alone */
		n = lg_candidate_values(s, t, out, 0, max, kp, pipeline);
	return n;
}

void lg_moe_geometry(const struct lg_moe_rows *r, bool dispatch, int64_t tokens, unsigned resident,
		     struct lg_launch_dim *d)
{
	d->grid[0] = (unsigned)(tokens + (dispatch ? LG_MOE_ZERO_CTAS : 0));
	if (r->pipelined && resident && resident < d->grid[0])
		d->grid[0] = resident;
	d->grid[1] = d->grid[2] = d->block[1] = d->block[2] = 1;
	d->block[0] = (unsigned)(r->threads + (r->pipelined ? 32 : 0));
	d->smem = 0;
}

void lg_moe_refuse_past_int32(int64_t tokens, int64_t top_k, int64_t experts, int64_t multiple,
			      struct lg_launch_dim *d)
{
	/* tokens <= 2^30 and the keys <= 1024: no int64 overflow */
	if (tokens * top_k + experts * (multiple - 1) > INT32_MAX)
		d->grid[0] = UINT32_MAX;
}

enum { P_HIDDEN, P_ES, P_DISPATCH, P_THREADS, P_PIPELINE, P_EXPERTS, P_TOPK, P_MULTIPLE };

void lg_moe_plan(const struct lg_spec *s, struct lg_plan *p, int64_t hidden, int es, bool dispatch, int kmoe,
		 int kthreads, int kpipe)
{
	p->v[P_HIDDEN] = hidden;
	p->v[P_ES] = es;
	p->v[P_DISPATCH] = dispatch;
	p->v[P_EXPERTS] = lg_spec_int(s, kmoe);
	p->v[P_TOPK] = lg_spec_int(s, kmoe + 1);
	p->v[P_MULTIPLE] = lg_spec_int(s, kmoe + 2);
	p->v[P_THREADS] = p->tile[kthreads] = lg_spec_has(s, kthreads) ? lg_spec_int(s, kthreads) : 0;
	/* the combine pipelined by default, unless tile.threads leaves no room for the map warp */
	int64_t pipe = dispatch || p->v[P_THREADS] > 992 ? 1 : 2;
	p->v[P_PIPELINE] = p->tile[kpipe] = lg_spec_has(s, kpipe) ? lg_spec_int(s, kpipe) : pipe;
	p->nentries = 1;
	p->persistent[0] = p->v[P_PIPELINE] == 2;
	snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
}

struct lg_moe_rows lg_moe_plan_rows(const struct lg_plan *p)
{
	struct lg_moe_rows r = lg_moe_rows_of(p->v[P_HIDDEN], (int)p->v[P_ES], (int)p->v[P_THREADS]);
	r.pipelined = p->v[P_PIPELINE] == 2;
	return r;
}

void lg_moe_plan_geometry(const struct lg_plan *p, int e, const int64_t *sizes, struct lg_launch_dim *d)
{
	struct lg_moe_rows r = lg_moe_plan_rows(p);
	lg_moe_geometry(&r, p->v[P_DISPATCH] != 0, sizes[0], p->persistent[e] ? p->resident[e] : 0, d);
	lg_moe_refuse_past_int32(sizes[0], p->v[P_TOPK], p->v[P_EXPERTS], p->v[P_MULTIPLE], d);
}

/* The piece type of the rows (vb bytes), its load and store, and for bf16
 * arithmetic its elements as floats. */
static void emit_pieces(lg_buf *b, const struct lg_moe_rows *r, bool math)
{
	lg_comment(b, "A piece: %d byte%s of a row (the largest power of two up to 16 dividing %lld).", r->vb,
		   r->vb > 1 ? "s" : "", (long long)r->bytes);
	if (r->vb >= 4)
		lg_line(b, "struct __attribute__((aligned(%d))) lg_pc { u32 w[%d]; };", r->vb, r->vb / 4);
	else if (r->vb == 2)
		lg_line(b, "struct __attribute__((aligned(2))) lg_pc { u16 w[1]; };");
	else
		lg_line(b, "struct lg_pc { u8 w[1]; };");
	lg_line(b, "static __device__ __forceinline__ lg_pc lg_ldp(const u8 *p) { return *(const lg_pc *)p; }");
	lg_line(b, "static __device__ __forceinline__ void lg_stp(u8 *p, lg_pc v) { *(lg_pc *)p = v; }");
	if (!math)
		return;
	int ne = r->vb / 2;
	lg_comment(b, "Element i (0 to %d) of a piece of bf16, as fp32; %d floats to a piece (RNE).", ne - 1, ne);
	lg_line(b, "static __device__ __forceinline__ float lg_pget(const lg_pc &v, int i)");
	lg_open(b, "{");
	if (r->vb >= 4)
		lg_line(b, "return i & 1 ? lg_bf16_hi(v.w[i >> 1]) : lg_bf16_lo(v.w[i >> 1]);");
	else
		lg_line(b, "return lg_bf16_lo((u32)v.w[0]);");
	lg_close(b);
	lg_line(b, "static __device__ __forceinline__ lg_pc lg_pmake(const float *f)");
	lg_open(b, "{");
	lg_line(b, "lg_pc v;");
	if (r->vb >= 4) {
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int i = 0; i < %d; i++) v.w[i] = lg_pack_bf16x2(f[2 * i], f[2 * i + 1]);", r->vb / 4);
	} else {
		lg_line(b, "v.w[0] = (u16)(lg_pack_bf16x2(f[0], 0.0f) & 0xffffu);");
	}
	lg_line(b, "return v;");
	lg_close(b);
}

/* Warp 0 packs token t's expert rows (ascending expert) into rows[0..nrows)
 * of shared memory; `extra` lines run for each routed expert e at slot `at`
 * with its row r (and for every expert, routed or not, where `every`). */
static void emit_rowlist(lg_buf *b, int64_t experts, const char *every, void (*extra)(lg_buf *, const void *),
			 const void *arg)
{
	lg_comment(b, "Warp 0: the token's rows in ascending expert order, 32 experts a step.");
	lg_open(b, "if (tid < 32) {");
	lg_line(b, "int n = 0;");
	lg_line(b, "#pragma unroll 8");
	lg_open(b, "for (int c = 0; c < %lld; c += 32) {", (long long)experts);
	lg_line(b, "const int e = c + tid;");
	lg_line(b, "const int r = e < %lld ? mp[t * %lld + e] : -1;", (long long)experts, (long long)experts);
	lg_line(b, "const bool routed = r >= 0 && r < cap; // r >= cap: never within top_k");
	lg_line(b, "const unsigned m = __ballot_sync(0xffffffffu, routed);");
	if (every)
		lg_line(b, "%s", every);
	lg_open(b, "if (routed) {");
	lg_line(b, "const int at = n + __popc(m & ((1u << tid) - 1u));");
	lg_line(b, "rows[at] = r;");
	if (extra)
		extra(b, arg);
	lg_close(b);
	lg_line(b, "n += __popc(m);");
	lg_close(b);
	lg_line(b, "if (tid == 0) nrows = n;");
	lg_close(b);
}

/* The capacity and the typed pointers of a kernel's arguments. */
static void emit_pointers(lg_buf *b, const struct lg_moe_kernel *k)
{
	long long pad = (long long)(k->experts * (k->multiple - 1)); /* 0: no padding */
	lg_line(b, "const i64 cap = T * %lld%s%.0lld; // rows of the padded buffers", (long long)k->top_k,
		pad ? " + " : "", pad);
	lg_line(b, "const int *const mp = (const int *)%s;", k->map);
	if (k->fp8)
		lg_line(b, "const float *const xs = (const float *)%s; float *const ys = (float *)%s;", k->src_s,
			k->dst_s);
	if (k->pin)
		lg_line(b, "const float *const pi = (const float *)%s; // may be 0", k->pin);
	if (k->pout)
		lg_line(b, "float *const po = (float *)%s; // may be 0", k->pout);
}

/* The kernel's head: signature, shared row list, token t, capacity. */
static void emit_head(lg_buf *b, const struct lg_spec *s, const struct lg_moe_kernel *k, bool dispatch)
{
	lg_section(b, k->entry, k->what);
	lg_comment(b, "CTA t < T: token t, %d threads, %d piece%s of %d bytes each a thread.", k->r.threads, k->r.kp,
		   k->r.kp > 1 ? "s" : "", k->r.vb);
	if (dispatch)
		lg_comment(b, "CTAs T to T + %d: the zero rows (padding, and past the padded total).",
			   LG_MOE_ZERO_CTAS - 1);
	lg_emit_signature(b, s, k->entry, "__launch_bounds__(%d)", k->r.threads);
	lg_open(b, "{");
	lg_line(b, "__shared__ int rows[%lld]; // the token's rows, ascending expert", (long long)k->experts);
	if (k->dot)
		lg_line(b, "__shared__ int exps[%lld]; // their experts", (long long)k->experts);
	if (k->weights || k->dot)
		lg_line(b, "__shared__ float wts[%lld]; // their weights", (long long)k->experts);
	if (k->dot)
		lg_line(b, "__shared__ float red[%d];", k->r.threads / 32);
	lg_line(b, "__shared__ int nrows;");
	lg_line(b, "const int tid = threadIdx.x;");
	emit_pointers(b, k);
}

static void open_pieces(lg_buf *b, const struct lg_moe_rows *r)
{
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int k = 0; k < %d; k++) {", r->kp);
	lg_line(b, "const int c = tid + k * %d;", r->threads);
	if (r->pieces % r->threads)
		lg_line(b, "if (c >= %d) continue;", r->pieces);
}

/* Row r of a dispatch's output written as zeros (probability 0, the zero
 * block's scale). */
static void emit_zero_row(lg_buf *b, const struct lg_moe_kernel *k)
{
	int64_t ns = k->r.hidden / 128;
	open_pieces(b, &k->r);
	lg_line(b, "lg_stp((u8 *)%s + r * %lld + c * %d, zero);", k->dst, (long long)k->r.bytes, k->r.vb);
	lg_close(b);
	if (k->fp8)
		lg_line(b, "for (int j = tid; j < %lld; j += %d) ys[r * %lld + j] = %s;", (long long)ns, k->r.threads,
			(long long)ns, k->pow2 ? "0x1p-99f" : "1e-30f");
	if (k->pout)
		lg_line(b, "if (tid == 0 && po) po[r] = 0.0f;");
	if (k->dot && k->dot != k->pout)
		lg_line(b, "if (tid == 0 && %s) ((float *)%s)[r] = 0.0f;", k->dot, k->dot);
}

/* Zero-row worker z's rows (one of `step` workers): the padding of experts
 * z, z + step, ..., then the rows P + z, P + z + step, ... below cap. */
static void emit_zero_work(lg_buf *b, const struct lg_moe_kernel *k, const char *step)
{
	lg_line(b, "const int *const off = (const int *)%s, *const cnt = (const int *)%s;", k->offsets, k->counts);
	lg_line(b, "lg_pc zero;");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < %d; i++) zero.w[i] = 0;", k->r.vb >= 4 ? k->r.vb / 4 : 1);
	lg_open(b, "for (int e = z; e < %lld; e += %s) {", (long long)k->experts, step);
	lg_line(b, "const i64 end = off[e + 1] < cap ? (i64)off[e + 1] : cap;");
	lg_open(b, "for (i64 r = (i64)off[e] + cnt[e]; r < end; r++) {");
	emit_zero_row(b, k);
	lg_close(b);
	lg_close(b);
	lg_open(b, "for (i64 r = (i64)off[%lld] + z; r < cap; r += %s) {", (long long)k->experts, step);
	emit_zero_row(b, k);
	lg_close(b);
}

/* The zero rows of a dispatch: each expert's padding, then [P, cap). */
static void emit_zero_rows(lg_buf *b, const struct lg_moe_kernel *k)
{
	lg_open(b, "if (blockIdx.x >= T) {");
	lg_comment(b, "Padding rows [offsets[e] + counts[e], offsets[e + 1]) of experts e = z, z + %d,",
		   LG_MOE_ZERO_CTAS);
	lg_comment(b, "..., then the rows past the padded total P = offsets[E], every %d-th from P + z.",
		   LG_MOE_ZERO_CTAS);
	if (k->fp8)
		lg_comment(b, "Their scale: that of a zero block, %s.", k->pow2 ? "2^-99 (power of two)" : "1e-30");
	lg_line(b, "const int z = (int)(blockIdx.x - T);");
	char step[16];
	snprintf(step, sizeof step, "%d", LG_MOE_ZERO_CTAS);
	emit_zero_work(b, k, step);
	lg_line(b, "return;");
	lg_close(b);
}

static void dispatch_extra(lg_buf *b, const void *arg)
{
	const struct lg_moe_kernel *k = arg;
	if (k->pout)
		lg_line(b, "if (po) po[r] = pi ? pi[t * %lld + e] : 0.0f;", (long long)k->experts);
	if (k->dot)
		lg_line(b, "exps[at] = e;");
	if (k->weights)
		lg_line(b, "wts[at] = %s ? ((const float *)%s)[r] : 1.0f; // no weights: 1", k->weights, k->weights);
}

/* dot[r] = <token row, other[r]> + pin[t, e]: a block sum in a fixed order. */
static void emit_dot(lg_buf *b, const struct lg_moe_kernel *k)
{
	int warps = k->r.threads / 32, ne = k->r.vb / 2;
	lg_comment(b, "%s[r] = the token's row times %s[r], summed (fp32: lanes, then warps",
		   k->dot, k->other);
	lg_comment(b, "in order), plus %s[t, e].", k->pin);
	lg_line(b, "float part = 0.0f;");
	open_pieces(b, &k->r);
	lg_line(b, "const lg_pc o = lg_ldp((const u8 *)%s + r * %lld + c * %d);", k->other, (long long)k->r.bytes,
		k->r.vb);
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int j = 0; j < %d; j++)", ne);
	lg_line(b, "\tpart += lg_pget(v[k], j) * lg_pget(o, j);");
	lg_close(b);
	lg_line(b, "part = lg_sum_xor(part, 1, 16);");
	lg_line(b, "if ((tid & 31) == 0) red[tid >> 5] = part;");
	lg_line(b, "__syncthreads();");
	lg_open(b, "if (tid == 0) {");
	lg_line(b, "float sum = 0.0f;");
	lg_line(b, "for (int w = 0; w < %d; w++) sum += red[w];", warps);
	lg_line(b, "if (pi) sum += pi[t * %lld + exps[i]];", (long long)k->experts);
	lg_line(b, "((float *)%s)[r] = sum;", k->dot);
	lg_close(b);
	lg_line(b, "__syncthreads();");
}

static void emit_map_row(lg_buf *b, int64_t experts, bool disp);
static void emit_dispatch_pipelined(lg_buf *b, const struct lg_spec *s, const struct lg_moe_kernel *k);

void lg_moe_emit_dispatch(lg_buf *b, const struct lg_spec *s, const struct lg_moe_kernel *k)
{
	int64_t ns = k->r.hidden / 128;
	bool math = k->weights || k->dot;
	lg_section(b, "helpers for this spec", NULL);
	emit_pieces(b, &k->r, math);
	if (k->r.pipelined) { /* only the plain dispatch (lg_moe_validate_pipeline) */
		emit_dispatch_pipelined(b, s, k);
		return;
	}
	if (!math) /* warp 0's row list: the map warp's, its loads all in flight at once */
		emit_map_row(b, k->experts, true);
	emit_head(b, s, k, true);
	emit_zero_rows(b, k);
	lg_line(b, "const i64 t = blockIdx.x;");
	lg_comment(b, "The token's row, in flight while warp 0 reads its experts.");
	lg_line(b, "lg_pc v[%d];", k->r.kp);
	open_pieces(b, &k->r);
	lg_line(b, "v[k] = lg_ldp((const u8 *)%s + t * %lld + c * %d);", k->src, (long long)k->r.bytes, k->r.vb);
	lg_close(b);
	if (math)
		emit_rowlist(b, k->experts, NULL, dispatch_extra, k);
	else
		lg_line(b, "if (tid < 32) lg_map_row(mp, t, cap, tid, rows, pi, po, &nrows);");
	lg_line(b, "__syncthreads();");
	lg_line(b, "const int n = nrows;");
	lg_open(b, "for (int i = 0; i < n; i++) {");
	lg_line(b, "const i64 r = rows[i];");
	if (k->weights)
		lg_line(b, "const float wr = wts[i];");
	open_pieces(b, &k->r);
	if (k->weights) {
		lg_line(b, "float f[%d];", k->r.vb / 2);
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int j = 0; j < %d; j++) f[j] = wr * lg_pget(v[k], j);", k->r.vb / 2);
		lg_line(b, "lg_stp((u8 *)%s + r * %lld + c * %d, lg_pmake(f));", k->dst, (long long)k->r.bytes, k->r.vb);
	} else {
		lg_line(b, "lg_stp((u8 *)%s + r * %lld + c * %d, v[k]);", k->dst, (long long)k->r.bytes, k->r.vb);
	}
	lg_close(b);
	if (k->fp8) {
		lg_line(b, "for (int j = tid; j < %lld; j += %d) ys[r * %lld + j] = xs[t * %lld + j];", (long long)ns,
			k->r.threads, (long long)ns, (long long)ns);
	}
	if (k->dot) {
		lg_open(b, "if (%s && %s) { // the dot products asked for (a uniform branch)", k->dot, k->other);
		emit_dot(b, k);
		lg_close(b);
	}
	lg_close(b);
	lg_close(b);
}

static void combine_extra(lg_buf *b, const void *arg)
{
	const struct lg_moe_kernel *k = arg;
	if (k->weights)
		lg_line(b, "wts[at] = %s ? ((const float *)%s)[r] : 1.0f; // no weights: 1", k->weights, k->weights);
}

/* Token t's sum into out[t]: acc, then the rows in batches of `batch`
 * (rows[i0 + i] in shared memory; `after` lines after a batch's loads, `wr`
 * the line giving row i0 + i's weight wr, NULL: unweighted), each batch's
 * pieces all loaded, then added in expert order; the row stored. */
static void emit_sum(lg_buf *b, const struct lg_moe_kernel *k, int batch, const char *rows,
		     const char *const *after, const char *wr)
{
	int ne = k->r.vb / 2;
	lg_line(b, "float acc[%d][%d];", k->r.kp, ne);
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int k = 0; k < %d; k++)", k->r.kp);
	lg_line(b, "\tfor (int j = 0; j < %d; j++) acc[k][j] = 0.0f;", ne);
	lg_comment(b, "%d rows at a time: all their pieces loaded, then added in expert order.", batch);
	lg_open(b, "for (int i0 = 0; i0 < n; i0 += %d) {", batch);
	lg_line(b, "lg_pc gr[%d][%d];", batch, k->r.kp);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < %d; i++) {", batch);
	lg_line(b, "if (i0 + i >= n) break;");
	lg_line(b, "const i64 r = %s[i0 + i];", rows);
	open_pieces(b, &k->r);
	lg_line(b, "gr[i][k] = lg_ldp((const u8 *)%s + r * %lld + c * %d);", k->src, (long long)k->r.bytes, k->r.vb);
	lg_close(b);
	lg_close(b);
	for (int i = 0; after && after[i]; i++)
		lg_line(b, "%s", after[i]);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int i = 0; i < %d; i++) {", batch);
	lg_line(b, "if (i0 + i >= n) break;");
	if (wr)
		lg_line(b, "%s", wr);
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int k = 0; k < %d; k++)", k->r.kp);
	lg_line(b, "\tfor (int j = 0; j < %d; j++) acc[k][j] += %slg_pget(gr[i][k], j);", ne, wr ? "wr * " : "");
	lg_close(b);
	lg_close(b);
	open_pieces(b, &k->r);
	lg_line(b, "lg_stp((u8 *)%s + t * %lld + c * %d, lg_pmake(acc[k]));", k->dst, (long long)k->r.bytes, k->r.vb);
	lg_close(b);
}

/* The map warp's helper of the pipelined combine: token t's rows in
 * ascending expert order into rw[0..*nr), each expert's row (-1: not
 * routed) into em; the map row loaded `ch` 32-expert steps at once (all in
 * flight), then balloted step by step. */
static void emit_map_row(lg_buf *b, int64_t experts, bool disp)
{
	int ch = experts >= 256 ? 8 : (int)((experts + 31) / 32);
	if (disp) {
		lg_comment(b, "The map warp: token t's rows (ascending expert) into rw[0..*nr), and po[r] = pi[t, e]");
		lg_comment(b, "of each (0: no pi); %d experts of the map row loaded at once, then their", ch * 32);
		lg_comment(b, "probabilities all at once (before any store: pi and po may alias for the compiler).");
	} else {
		lg_comment(b, "The map warp: token t's rows (ascending expert) into rw[0..*nr), each expert's row");
		lg_comment(b, "(-1: not routed) into em; %d experts of the map row loaded at once.", ch * 32);
	}
	lg_line(b, "static __device__ __forceinline__ void lg_map_row(const int *mp, i64 t, i64 cap, int lane, int *rw,");
	lg_line(b, "\t\t\t\t\t\t\t  %s, int *nr)", disp ? "const float *pi, float *po" : "int *em");
	lg_open(b, "{");
	lg_line(b, "int n = 0;");
	lg_open(b, "for (int c0 = 0; c0 < %lld; c0 += %d) {", (long long)experts, ch * 32);
	lg_line(b, "int v[%d];", ch);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int j = 0; j < %d; j++) {", ch);
	lg_line(b, "const int e = c0 + j * 32 + lane;");
	lg_line(b, "v[j] = e < %lld ? mp[t * %lld + e] : -1;", (long long)experts, (long long)experts);
	lg_close(b);
	if (disp) {
		lg_line(b, "float pv[%d];", ch);
		lg_line(b, "#pragma unroll");
		lg_open(b, "for (int j = 0; j < %d; j++) {", ch);
		lg_line(b, "const int e = c0 + j * 32 + lane, r = v[j];");
		lg_line(b, "pv[j] = r >= 0 && r < cap && po && pi ? pi[t * %lld + e] : 0.0f;", (long long)experts);
		lg_close(b);
	}
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int j = 0; j < %d; j++) {", ch);
	lg_line(b, "const int %sr = v[j];", disp ? "" : "e = c0 + j * 32 + lane, ");
	lg_line(b, "const bool routed = r >= 0 && r < cap; // r >= cap: never within top_k");
	lg_line(b, "const unsigned m = __ballot_sync(0xffffffffu, routed);");
	if (disp) {
		lg_open(b, "if (routed) {");
		lg_line(b, "rw[n + __popc(m & ((1u << lane) - 1u))] = r;");
		lg_line(b, "if (po) po[r] = pv[j];");
		lg_close(b);
	} else {
		lg_line(b, "if (e < %lld) em[e] = routed ? r : -1;", (long long)experts);
		lg_line(b, "if (routed) rw[n + __popc(m & ((1u << lane) - 1u))] = r;");
	}
	lg_line(b, "n += __popc(m);");
	lg_close(b);
	lg_close(b);
	lg_line(b, "if (lane == 0) *nr = n;");
	lg_close(b);
}

/* The minimum CTAs an SM of a pipelined kernel (threads + the map warp)
 * that leaves `regs` registers a thread: at most what fits 2048 threads,
 * and 16; each of an SM's four quarters holds 16384 registers (whole warps,
 * a multiple of 8 registers a thread). */
static int pipelined_min_ctas(const struct lg_moe_rows *r, int regs)
{
	int th = r->threads + 32, minc = 65536 / (th * regs);
	if (minc > 2048 / th)
		minc = 2048 / th;
	if (minc > 16) /* sm_86's most CTAs an SM (ptxas ignores more) */
		minc = 16;
	while (minc > 1 && 16384 / ((minc * th / 32 + 3) / 4 * 32) / 8 * 8 < regs)
		minc--;
	return minc;
}

/* The pipelined combine (tile.pipeline 2): persistent CTAs; the last warp
 * reads token t + G's map row into one buffer while the other warps add
 * token t's rows from the other; the weights gathered by lanes 0 to
 * batch - 1 of each warp beside the row loads and passed by shuffles, the
 * restored probabilities loaded beside them and stored last. */
/* The adding warps' part of the pipelined combine, a function of its own:
 * token t's n rows rw[0..n) summed into its output row, the weights
 * (weighted) gathered by lanes 0 to batch - 1 beside the row loads and
 * passed by shuffles. */
static void emit_token_sum(lg_buf *b, const struct lg_moe_kernel *k, int batch)
{
	/* pw is never 0 (weighted: the launch requires it); testing it too took
	 * ptxas from 64 to 94 registers at hidden 2048. */
	lg_comment(b, "The adding warps: token t's n rows rw[0..n) (ascending expert) added into %s[t]%s.", k->dst,
		   k->weights ? ", each" : "");
	if (k->weights)
		lg_comment(b, "times its weight pw[r], gathered by lanes 0 to %d beside the row loads", batch - 1);
	lg_line(b, "static __device__ __forceinline__ void lg_token_sum(u64 %s, u64 %s, const int *rw, int n, i64 t,",
		k->src, k->dst);
	lg_line(b, "\t\t\t\t\t\t\t    int tid%s)", k->weights ? ", const float *pw" : "");
	lg_open(b, "{");
	char own[96];
	snprintf(own, sizeof own, "const bool wo = lane < %d && i0 + lane < n; // lane i: row i0 + i's weight", batch);
	const char *const after[] = {own, "const float wl = wo ? pw[rw[i0 + lane]] : 1.0f;", NULL};
	if (k->weights)
		lg_line(b, "const int lane = tid & 31;");
	emit_sum(b, k, batch, "rw", k->weights ? after : NULL,
		 k->weights ? "const float wr = __shfl_sync(0xffffffffu, wl, i);" : NULL);
	lg_close(b);
}

/* The pipelined combine (tile.pipeline 2): persistent CTAs; the last warp
 * reads token t + G's map row into one buffer while the other warps add
 * token t's rows from the other (lg_token_sum); the restored probabilities
 * loaded beside the rows and stored last. */
static void emit_combine_pipelined(lg_buf *b, const struct lg_spec *s, const struct lg_moe_kernel *k)
{
	const int th = k->r.threads, pk = (int)((k->experts + th - 1) / th);
	/* rows at once: at most 32 registers of pieces a thread (8 rows of one
	 * 16-byte piece, 4 of two, 2 of four; 8 of four 2-byte pieces) */
	const int regs = k->r.kp * (k->r.vb >= 4 ? k->r.vb / 4 : 1);
	const int batch = regs <= 4 ? 8 : regs <= 8 ? 4 : 2;
	const long long E = (long long)k->experts;
	emit_map_row(b, k->experts, false);
	emit_token_sum(b, k, batch);
	lg_section(b, k->entry, k->what);
	lg_comment(b, "Persistent: CTA b takes tokens b, b + G, ... (G = gridDim.x, the co-resident CTAs at most).");
	lg_comment(b, "Warps 0 to %d (%d piece%s of %d bytes each a thread) add token t's rows while warp %d,", th / 32 - 1,
		   k->r.kp, k->r.kp > 1 ? "s" : "", k->r.vb, th / 32);
	lg_comment(b, "the map warp, reads token t + G's map row into the other buffer: one __syncthreads a token.");
	/* One piece a thread (and few experts a thread): registers capped at 56
	 * through __launch_bounds__'s minimum CTAs (4 of 288 threads an SM
	 * where ptxas takes 62 to 64 for 3; no spills at H = 2048). */
	int minc = k->r.kp == 1 && pk <= 2 ? pipelined_min_ctas(&k->r, 56) : 1;
	char lb[48];
	lg_comment(b, "%d adding threads and the map warp%s.", th,
		   minc > 1 ? ", at least that many CTAs an SM (registers capped)" : "");
	lg_emit_signature(b, s, k->entry, "%s", lg_launch_bounds(lb, th + 32, minc));
	lg_open(b, "{");
	lg_line(b, "__shared__ int rows[2][%lld]; // two tokens' rows, ascending expert", E);
	lg_line(b, "__shared__ int emap[2][%lld]; // their row of each expert (-1: not routed)", E);
	lg_line(b, "__shared__ int nrows[2];");
	lg_line(b, "const int tid = threadIdx.x, lane = tid & 31;");
	emit_pointers(b, k);
	if (k->weights)
		lg_line(b, "const float *const pw = (const float *)%s; // the weights", k->weights);
	lg_line(b, "const i64 G = gridDim.x;");
	lg_line(b, "i64 t = blockIdx.x; // < T: the grid is at most T");
	lg_line(b, "if (tid >= %d) lg_map_row(mp, t, cap, lane, rows[0], emap[0], &nrows[0]);", th);
	lg_line(b, "__syncthreads();");
	lg_open(b, "for (int b = 0; t < T; t += G, b ^= 1) {");
	lg_open(b, "if (tid >= %d) {", th);
	lg_line(b, "const int o = b ^ 1;");
	lg_line(b, "const i64 tn = t + G; // the next token");
	lg_line(b, "if (tn < T) lg_map_row(mp, tn, cap, lane, rows[o], emap[o], &nrows[o]);");
	lg_close_with(b, "} else {");
	lg_comment(b, "%s[t, :]: loaded beside the rows, stored last.", k->pout);
	lg_line(b, "float rp[%d];", pk);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int q = 0; q < %d; q++) {", pk);
	lg_line(b, "const int e = tid + q * %d, r = e < %lld ? emap[b][e] : -1;", th, E);
	lg_line(b, "rp[q] = po && r >= 0 && pi ? pi[r] : 0.0f;");
	lg_close(b);
	lg_line(b, "lg_token_sum(%s, %s, rows[b], nrows[b], t, tid%s);", k->src, k->dst, k->weights ? ", pw" : "");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int q = 0; q < %d; q++) {", pk);
	lg_line(b, "const int e = tid + q * %d;", th);
	lg_line(b, "if (po && e < %lld) po[t * %lld + e] = rp[q];", E, E);
	lg_close(b);
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_close(b);
	lg_close(b);
}

/* Token `tok`'s row (and e4m3 scales) into registers v (sv) of the moving
 * threads. */
static void emit_load_token(lg_buf *b, const struct lg_moe_kernel *k, const char *v, const char *tok, int nsk)
{
	open_pieces(b, &k->r);
	lg_line(b, "%s[k] = lg_ldp((const u8 *)%s + %s * %lld + c * %d);", v, k->src, tok, (long long)k->r.bytes,
		k->r.vb);
	lg_close(b);
	if (!k->fp8)
		return;
	int64_t ns = k->r.hidden / 128;
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int q = 0; q < %d; q++) {", nsk);
	lg_line(b, "const int j = tid + q * %d;", k->r.threads);
	lg_line(b, "if (j < %lld) s%s[q] = xs[%s * %lld + j];", (long long)ns, v, tok, (long long)ns);
	lg_close(b);
}

/* The pipelined plain dispatch (tile.pipeline 2; no weights, no dot
 * products): persistent CTAs; the map warp reads token t + G's map row
 * (and writes its rows' probabilities) into one buffer while the other
 * warps store token t's row, loaded one token ahead, to the rows of the
 * other; the zero rows spread over all CTAs, first (while the first map
 * row and token row are in flight). */
static void emit_dispatch_pipelined(lg_buf *b, const struct lg_spec *s, const struct lg_moe_kernel *k)
{
	const int th = k->r.threads;
	const int64_t ns = k->r.hidden / 128;
	const int nsk = k->fp8 ? (int)((ns + th - 1) / th) : 0;
	const long long E = (long long)k->experts;
	emit_map_row(b, k->experts, true);
	lg_section(b, k->entry, k->what);
	lg_comment(b, "Persistent: CTA b takes tokens b, b + G, ... (G = gridDim.x) and the zero rows of worker b");
	lg_comment(b, "of G (padding of experts b, b + G, ..., rows P + b, P + b + G, ...). Warps 0 to %d (%d",
		   th / 32 - 1, k->r.kp);
	lg_comment(b, "piece%s of %d bytes each a thread) store token t's row, loaded while token t - G's was",
		   k->r.kp > 1 ? "s" : "", k->r.vb);
	lg_comment(b, "stored, while warp %d, the map warp, reads token t + G's map row into the other buffer.",
		   th / 32);
	/* No register cap: the inlined map row takes the registers (51 to 56 at
	 * H = 2048, 4 CTAs of 288 an SM; 32 without it); capped at 40 (5 CTAs)
	 * ptxas spills 8 bytes, at 32 (7 CTAs) 108. */
	char lb[48];
	lg_comment(b, "%d moving threads and the map warp.", th);
	lg_emit_signature(b, s, k->entry, "%s", lg_launch_bounds(lb, th + 32, 1));
	lg_open(b, "{");
	lg_line(b, "__shared__ int rows[2][%lld]; // two tokens' rows, ascending expert", E);
	lg_line(b, "__shared__ int nrows[2];");
	lg_line(b, "const int tid = threadIdx.x, lane = tid & 31;");
	emit_pointers(b, k);
	lg_line(b, "const i64 G = gridDim.x;");
	lg_line(b, "i64 t = blockIdx.x;");
	lg_line(b, "lg_pc v[%d];", k->r.kp);
	if (k->fp8)
		lg_line(b, "float sv[%d];", nsk);
	lg_open(b, "if (tid >= %d) {", th);
	lg_line(b, "if (t < T) lg_map_row(mp, t, cap, lane, rows[0], pi, po, &nrows[0]);");
	lg_close_with(b, "} else {");
	lg_open(b, "if (t < T) {");
	emit_load_token(b, k, "v", "t", nsk);
	lg_close(b);
	lg_comment(b, "This CTA's zero rows (padding, and past the padded total P = offsets[E]).");
	lg_line(b, "const int z = (int)blockIdx.x;");
	emit_zero_work(b, k, "G");
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_open(b, "for (int b = 0; t < T; t += G, b ^= 1) {");
	lg_line(b, "const i64 tn = t + G; // the next token");
	lg_open(b, "if (tid >= %d) {", th);
	lg_line(b, "const int o = b ^ 1;");
	lg_line(b, "if (tn < T) lg_map_row(mp, tn, cap, lane, rows[o], pi, po, &nrows[o]);");
	lg_close_with(b, "} else {");
	lg_line(b, "lg_pc w[%d];", k->r.kp);
	if (k->fp8)
		lg_line(b, "float sw[%d];", nsk);
	lg_open(b, "if (tn < T) {");
	emit_load_token(b, k, "w", "tn", nsk);
	lg_close(b);
	lg_line(b, "const int n = nrows[b];");
	lg_open(b, "for (int i = 0; i < n; i++) {");
	lg_line(b, "const i64 r = rows[b][i];");
	open_pieces(b, &k->r);
	lg_line(b, "lg_stp((u8 *)%s + r * %lld + c * %d, v[k]);", k->dst, (long long)k->r.bytes, k->r.vb);
	lg_close(b);
	if (k->fp8) {
		lg_line(b, "#pragma unroll");
		lg_open(b, "for (int q = 0; q < %d; q++) {", nsk);
		lg_line(b, "const int j = tid + q * %d;", th);
		lg_line(b, "if (j < %lld) ys[r * %lld + j] = sv[q];", (long long)ns, (long long)ns);
		lg_close(b);
	}
	lg_close(b);
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int k = 0; k < %d; k++) v[k] = w[k];", k->r.kp);
	if (k->fp8) {
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int q = 0; q < %d; q++) sv[q] = sw[q];", nsk);
	}
	lg_close(b);
	lg_line(b, "__syncthreads();");
	lg_close(b);
	lg_close(b);
}

void lg_moe_emit_combine(lg_buf *b, const struct lg_spec *s, const struct lg_moe_kernel *k)
{
	lg_section(b, "helpers for this spec", NULL);
	emit_pieces(b, &k->r, true);
	if (k->r.pipelined) {
		emit_combine_pipelined(b, s, k);
		return;
	}
	emit_head(b, s, k, false);
	lg_line(b, "const i64 t = blockIdx.x;");
	char every[256] = "";
	if (k->pout)
		snprintf(every, sizeof every, "if (po && e < %lld) po[t * %lld + e] = routed && pi ? pi[r] : 0.0f;",
			 (long long)k->experts, (long long)k->experts);
	emit_rowlist(b, k->experts, k->pout ? every : NULL, combine_extra, k);
	lg_line(b, "__syncthreads();");
	lg_line(b, "const int n = nrows;");
	emit_sum(b, k, 8, "rows", NULL, k->weights ? "const float wr = wts[i0 + i];" : NULL);
	lg_close(b);
}
