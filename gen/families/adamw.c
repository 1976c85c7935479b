/*
 * adamw.c - family "adamw" (issue 35, item 2): one fused AdamW step over a
 * list of parameter tensors, in place, as torch.optim.AdamW computes it
 * (decoupled weight decay, bias correction, amsgrad off):
 *   p  = p * (1 - lr wd)
 *   m  = lerp(m, g, 1 - beta1)            (an fma, as torch's lerp)
 *   v  = v beta2 + ((1 - beta2) g) g
 *   p  = p + (-lr / bc1) (m / (sqrt(v) / sqrt(bc2) + eps))
 * bc1 = 1 - beta1^step, bc2 = 1 - beta2^step in fp64, each scalar then
 * rounded once to fp32 as torch rounds its Python floats; the element math
 * is fp32, one rounding an operation, in that order (no contraction).
 * p fp32 (master weights) or bf16 ("param": a bf16 model's own weights,
 * updated in fp32 and rounded to nearest even once, as torch's fused AdamW
 * does); g fp32 or bf16 ("grad"); m and v fp32 or bf16 ("moments"); every
 * bf16 array read widened, written rounded to nearest even.
 * beta1, beta2, eps and weight_decay are spec keys (literals, as torch's
 * Python floats); step and lr are read from device memory (0-d fp32
 * tensors), as torch's capturable AdamW reads them, so a CUDA graph of the
 * step replays with a new step and learning rate.
 *
 * The list: a table (an int64 device tensor [items, 6]) of rows
 *   p, g, m, v (device addresses), count (elements, < 2^32), 0,
 * each a chunk of one parameter (the caller cuts every tensor into chunks
 * of at most LG_ADAMW_CHUNK elements from its start; any count works).
 * Strategy: the list engine's grid (list_common.h: 132 x tile.per_sm CTAs
 * of tile.threads threads, whatever the list); warp w of the grid takes
 * chunks w, w + W, ... (a persistent grid-stride over the concatenated
 * tensors); a lane updates 4 elements a step (8 with a bf16 tensor: every
 * access a whole 16-byte vector), tile.unroll steps in flight; a chunk whose
 * four addresses are not all 16-byte aligned, and the tail of every chunk,
 * go element by element. Each element is read and written once: 16 bytes an
 * element with fp32 state (p, g, m, v read, p, m, v written: 28 B), 18 with
 * bf16 moments and grads.
 */
#include <stdio.h>

#include "family.h"

#include "adamw.h"
#include "error.h"
#include "list_common.h"

#define LG_ADAMW_CHUNK 8192 /* elements a row at most, as lingen.optim cuts them */

enum { K_PARAM, K_HP, K_GRAD = K_HP + LG_ADAMW_KEY_GRAD, K_MOMENTS = K_HP + LG_ADAMW_KEY_MOMENTS,
       K_BETA1 = K_HP + LG_ADAMW_KEY_BETA1, K_BETA2 = K_HP + LG_ADAMW_KEY_BETA2,
       K_EPS = K_HP + LG_ADAMW_KEY_EPS, K_WD = K_HP + LG_ADAMW_KEY_WD,
       K_TILE = K_HP + LG_ADAMW_KEYS, NKEYS = K_TILE + LG_LIST_TILE_KEYS };
enum { T_FP32, T_BF16, T_COUNT };
const char *const lg_adamw_type_values[T_COUNT] = {"fp32", "bf16"};
const char *const lg_adamw_grad_words[T_COUNT] = {"g32", "gbf16"};
const char *const lg_adamw_moment_words[T_COUNT] = {"m32", "mbf16"};
static const char *const param_words[T_COUNT] = {"p32", "pbf16"};

static const struct lg_key keys[NKEYS] = {
	[K_PARAM] = {.path = "param", .type = LG_KEY_ENUM, .values = lg_adamw_type_values, .nvalues = T_COUNT,
		     .has_def = true, .def = T_FP32, .naming = LG_NAME_IF_NOT_DEFAULT, .rank = 19,
		     .words = param_words,
		     .doc = "the parameters' element type: fp32, or bf16 (updated in fp32, rounded once)"},
	LG_KEYS_ADAMW(K_HP),
	LG_KEYS_LIST_TILE(K_TILE),
};

static const struct lg_size sizes[1] = {
	{"items", "I", 0, INT32_MAX, "rows of the table (chunks of at most 8192 elements)", 0, 0},
};

enum { ARG_TABLE, ARG_STEP, ARG_LR, NARGS };
static const struct lg_arg args[NARGS] = {
	[ARG_TABLE] = {"table", LG_ARG_IN, LG_ELEM_I64, "items, 6", 16,
		       "rows p, g, m, v, count, 0: one chunk of a parameter each"},
	[ARG_STEP] = {"step", LG_ARG_IN, LG_ELEM_FP32, "1", 4, "the step count after this step (1 first)"},
	[ARG_LR] = {"lr", LG_ARG_IN, LG_ELEM_FP32, "1", 4, "the learning rate"},
};

lg_status lg_adamw_validate_hp(const struct lg_spec *s, const char *where, int k0)
{
	static const int nonneg[] = {LG_ADAMW_KEY_BETA1, LG_ADAMW_KEY_BETA2, LG_ADAMW_KEY_WD};
	for (int i = 0; i < 3; i++)
		if (lg_spec_num(s, k0 + nonneg[i]) < 0)
			return lg_spec_error(where, "%s: found %g, allowed: >= 0", s->fam->keys[k0 + nonneg[i]].path,
					     lg_spec_num(s, k0 + nonneg[i]));
	return LG_OK;
}

static lg_status validate(const struct lg_spec *s, const char *where)
{
	lg_status st = lg_adamw_validate_hp(s, where, K_HP);
	return st != LG_OK ? st : lg_list_validate(s, where);
}

/* Defaults: 2 CTAs of 256 threads an SM (128 registers a thread) and
 * 64 floats a lane in flight (unroll x 4 arrays x its vector's elements:
 * 2 x 4 x 8 with a bf16 array, 4 x 4 x 4 with fp32 ones). The list
 * engine's 4 CTAs an SM cap a thread at 64 registers: 4 x 4 x 8 floats
 * spilled (464 bytes of stack; measured 60 ms for the 3.9 G bf16
 * parameters of the training example, 0.9 TB/s). */
static lg_status plan(const struct lg_spec *s, const struct lg_target *t, struct lg_plan *p)
{
	(void)t;
	bool any16 = lg_spec_int(s, K_GRAD) == T_BF16 || lg_spec_int(s, K_MOMENTS) == T_BF16 ||
		     lg_spec_int(s, K_PARAM) == T_BF16;
	lg_list_plan_grid_with(s, p, 2, any16 ? 2 : 4);
	p->nentries = 1;
	snprintf(p->entry[0], sizeof p->entry[0], "%s", s->entry);
	return LG_OK;
}

static void geometry(const struct lg_plan *p, int e, const int64_t *sz, struct lg_launch_dim *d)
{
	(void)e;
	d->grid[1] = d->grid[2] = d->block[1] = d->block[2] = 1;
	d->smem = 0;
	d->grid[0] = sz[0] ? (unsigned)p->v[LG_LIST_P_CTAS] : 0;
	d->block[0] = (unsigned)p->v[LG_LIST_P_THREADS];
}

void lg_adamw_emit_access(lg_buf *b, bool bf16, int g)
{
	const char *t = bf16 ? "bf16" : "f32";
	int per = bf16 ? 8 : 4, nv = g / per;
	lg_line(b, "static __device__ __forceinline__ void lg_ld_%s(u64 base, u64 e, float *x)", t);
	lg_open(b, "{");
	lg_open(b, "for (int j = 0; j < %d; j++) {", nv);
	lg_line(b, "const lg_u32x4 w = lg_ld16((const char *)base + (e + %du * j) * %du);", per, bf16 ? 2 : 4);
	if (bf16)
		lg_line(b, "for (int i = 0; i < 8; i++) x[8 * j + i] = lg_bf16_at(w, i);");
	else
		lg_line(b, "for (int i = 0; i < 4; i++) x[4 * j + i] = lg_f32_at(w, i);");
	lg_close(b);
	lg_close(b);
	lg_line(b, "static __device__ __forceinline__ void lg_st_%s(u64 base, u64 e, const float *x)", t);
	lg_open(b, "{");
	lg_line(b, "for (int j = 0; j < %d; j++)", nv);
	lg_line(b, "\tlg_st16((char *)base + (e + %du * j) * %du, lg_pack_%s(x + %d * j));", per, bf16 ? 2 : 4,
		bf16 ? "bf16x8" : "f32x4", per);
	lg_close(b);
	lg_line(b, "%s", "");
}


void lg_adamw_emit_update(lg_buf *b, double beta1, double beta2, double eps)
{
	float w1 = (float)(1.0 - beta1);
	lg_comment(b, "One element, torch.optim.AdamW's operations in its order, each rounded once.");
	lg_line(b, "struct lg_adamw_k { float decay, neg_step, bc2_sqrt; };");
	lg_line(b, "static __device__ __forceinline__ void lg_adamw1(float &p, float g, float &m, float &v,");
	lg_line(b, "\t\t\t\t\t\t const lg_adamw_k k)");
	lg_open(b, "{");
	lg_line(b, "p = __fmul_rn(p, k.decay);");
	if (w1 < 0.5f)
		lg_line(b, "m = __fmaf_rn(%.9gf, __fsub_rn(g, m), m); // lerp(m, g, 1 - beta1)", (double)w1);
	else
		lg_line(b, "m = __fmaf_rn(%.9gf, __fsub_rn(g, m), g); // lerp(m, g, 1 - beta1)",
			(double)(w1 - 1.0f));
	lg_line(b, "v = __fadd_rn(__fmul_rn(v, %.9gf), __fmul_rn(__fmul_rn(%.9gf, g), g));", (double)(float)beta2,
		(double)(float)(1.0 - beta2));
	lg_line(b, "const float den = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), k.bc2_sqrt), %.9gf);",
		(double)(float)eps);
	lg_line(b, "p = __fadd_rn(p, __fmul_rn(k.neg_step, __fdiv_rn(m, den)));");
	lg_close(b);
	lg_line(b, "%s", "");
}

void lg_adamw_emit_scalars(lg_buf *b, double beta1, double beta2, double wd)
{
	lg_line(b, "const double t = (double)*(const float *)step, rate = (double)*(const float *)lr;");
	lg_line(b, "const double bc1 = 1.0 - pow(%.17g, t);", beta1);
	lg_line(b, "const double bc2 = 1.0 - pow(%.17g, t);", beta2);
	lg_line(b, "lg_adamw_k k;");
	if (wd == 0)
		lg_line(b, "k.decay = 1.0f; // no weight decay: p * 1 is p");
	else
		lg_line(b, "k.decay = (float)(1.0 - rate * %.17g);", wd);
	lg_line(b, "k.neg_step = (float)-(rate / bc1);");
	lg_line(b, "k.bc2_sqrt = (float)sqrt(bc2);");
}

/* lg_adamw_chunk: a warp's chunk (one table row). */
static void emit_chunk(lg_buf *b, const struct lg_spec *s, int g, int unroll)
{
	bool gb = lg_spec_int(s, K_GRAD) == T_BF16, mb = lg_spec_int(s, K_MOMENTS) == T_BF16;
	bool pb = lg_spec_int(s, K_PARAM) == T_BF16;
	const char *gt = gb ? "bf16" : "f32", *mt = mb ? "bf16" : "f32", *pt = pb ? "bf16" : "f32";
	lg_comment(b, "A chunk: whole vectors of %d elements a lane (%d in flight), then the tail element by", g,
		   unroll);
	lg_comment(b, "element; a chunk with an address not 16-byte aligned goes element by element.");
	lg_line(b, "static __device__ __forceinline__ void lg_adamw_chunk(u64 P, u64 G, u64 M, u64 V, u32 n, u32 lane,");
	lg_line(b, "\t\t\t\t\t\t      const lg_adamw_k k)");
	lg_open(b, "{");
	lg_line(b, "const u32 nv = ((P | G | M | V) & 15u) ? 0u : n / %du;", g);
	lg_open(b, "for (u32 v0 = lane; v0 < nv; v0 += %du) {", 32u * (unsigned)unroll);
	lg_line(b, "float p[%d][%d], g[%d][%d], m[%d][%d], v[%d][%d];", unroll, g, unroll, g, unroll, g, unroll, g);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int u = 0; u < %d; u++) {", unroll);
	lg_line(b, "const u64 e = (u64)(v0 + 32u * u) * %du;", g);
	lg_open(b, "if (v0 + 32u * u < nv) {");
	lg_line(b, "lg_ld_%s(P, e, p[u]);", pt);
	lg_line(b, "lg_ld_%s(G, e, g[u]);", gt);
	lg_line(b, "lg_ld_%s(M, e, m[u]);", mt);
	lg_line(b, "lg_ld_%s(V, e, v[u]);", mt);
	lg_close(b);
	lg_close(b);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int u = 0; u < %d; u++) {", unroll);
	lg_line(b, "const u64 e = (u64)(v0 + 32u * u) * %du;", g);
	lg_line(b, "if (v0 + 32u * u >= nv)");
	lg_line(b, "\tbreak;");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < %d; i++)", g);
	lg_line(b, "\tlg_adamw1(p[u][i], g[u][i], m[u][i], v[u][i], k);");
	lg_line(b, "lg_st_%s(P, e, p[u]);", pt);
	lg_line(b, "lg_st_%s(M, e, m[u]);", mt);
	lg_line(b, "lg_st_%s(V, e, v[u]);", mt);
	lg_close(b);
	lg_close(b);
	lg_open(b, "for (u32 e = nv * %du + lane; e < n; e += 32u) {", g);
	lg_line(b, pb ? "float p = lg_u2f((u32)((const u16 *)P)[e] << 16);" : "float p = ((const float *)P)[e];");
	if (mb) {
		lg_line(b, "float m = lg_u2f((u32)((const u16 *)M)[e] << 16);");
		lg_line(b, "float v = lg_u2f((u32)((const u16 *)V)[e] << 16);");
	} else {
		lg_line(b, "float m = ((const float *)M)[e], v = ((const float *)V)[e];");
	}
	lg_line(b, gb ? "const float g = lg_u2f((u32)((const u16 *)G)[e] << 16);" : "const float g = ((const float *)G)[e];");
	lg_line(b, "lg_adamw1(p, g, m, v, k);");
	lg_line(b, pb ? "((u16 *)P)[e] = (u16)lg_pack_bf16x2(p, 0.0f);" : "((float *)P)[e] = p;");
	if (mb) {
		lg_line(b, "((u16 *)M)[e] = (u16)lg_pack_bf16x2(m, 0.0f);");
		lg_line(b, "((u16 *)V)[e] = (u16)lg_pack_bf16x2(v, 0.0f);");
	} else {
		lg_line(b, "((float *)M)[e] = m;");
		lg_line(b, "((float *)V)[e] = v;");
	}
	lg_close(b);
	lg_close(b);
	lg_line(b, "%s", "");
}

static void emit_entry(lg_buf *b, const struct lg_spec *s, const struct lg_plan *p)
{
	int threads = (int)p->v[LG_LIST_P_THREADS], warps = threads / 32, per_sm = (int)p->v[LG_LIST_P_PER_SM];
	long long ctas = (long long)p->v[LG_LIST_P_CTAS], w = ctas * warps;
	lg_section(b, p->entry[0], "one AdamW step of every chunk of the table");
	lg_comment(b, "%lld CTAs of %d warps, W = %lld warps: warp w takes rows w, w + W, ... The scalars", ctas,
		   warps, w);
	lg_comment(b, "of the step in fp64 from step and lr (device memory), each rounded once to fp32.");
	lg_emit_signature(b, s, p->entry[0], "__launch_bounds__(%d, %d)", threads, per_sm);
	lg_open(b, "{");
	lg_line(b, "const u32 lane = threadIdx.x & 31u;");
	lg_adamw_emit_scalars(b, lg_spec_num(s, K_BETA1), lg_spec_num(s, K_BETA2), lg_spec_num(s, K_WD));
	lg_open(b, "for (i64 r = (i64)blockIdx.x * %d + (threadIdx.x >> 5); r < I; r += %lld) {", warps, w);
	lg_line(b, "const char *row = (const char *)table + r * 48;");
	lg_line(b, "const lg_u32x4 a = lg_ld16(row), c = lg_ld16(row + 16), n = lg_ld16(row + 32);");
	lg_line(b, "const u64 P = (u64)a.x | ((u64)a.y << 32), G = (u64)a.z | ((u64)a.w << 32);");
	lg_line(b, "const u64 M = (u64)c.x | ((u64)c.y << 32), V = (u64)c.z | ((u64)c.w << 32);");
	lg_line(b, "lg_adamw_chunk(P, G, M, V, n.x, lane, k);");
	lg_close(b);
	lg_close(b);
}

static void emit(lg_buf *b, const struct lg_spec *s, const struct lg_target *t, const struct lg_plan *p)
{
	(void)t;
	bool gb = lg_spec_int(s, K_GRAD) == T_BF16, mb = lg_spec_int(s, K_MOMENTS) == T_BF16;
	bool pb = lg_spec_int(s, K_PARAM) == T_BF16;
	int g = gb || mb || pb ? 8 : 4; /* elements a lane's step: whole 16-byte vectors of every array */
	lg_section(b, "the update of this spec", NULL);
	lg_adamw_emit_update(b, lg_spec_num(s, K_BETA1), lg_spec_num(s, K_BETA2), lg_spec_num(s, K_EPS));
	if (!(pb && gb && mb))
		lg_adamw_emit_access(b, false, g);
	if (gb || mb || pb)
		lg_adamw_emit_access(b, true, g);
	emit_chunk(b, s, g, (int)p->v[LG_LIST_P_UNROLL]);
	emit_entry(b, s, p);
}

/* What a launch computes: the comment of its typed launcher (lingen_ops.h). */
static const char doc_forward[] =
	"Issue 35: one fused AdamW step (op \"adamw\", pass \"forward\"), in place,\n"
	"  over the chunks of table (int64 [items, 6]: p, g, m, v, count, 0 a row;\n"
	"  p as \"param\", g as \"grad\", m and v as \"moments\"), with the step count and\n"
	"  learning rate read from device memory (0-d fp32): torch.optim.AdamW's\n"
	"  update, graph-capturable.";
static const struct lg_form forms[1] = {{.name = "", .doc = doc_forward}};

const struct lg_family lg_family_adamw = {
	.op = "adamw",
	.summary = "fused AdamW over a list of parameters: fp32 or bf16 parameters, grads and moments (issue 35)",
	.passes = 1u << LG_PASS_FORWARD,
	.dtypes = 1u << LG_DTYPE_FP32,
	.nkeys = NKEYS,
	.keys = keys,
	.sig = {[LG_PASS_FORWARD] = {1, sizes, NARGS, args, NULL, 1, forms}},
	.validate = validate,
	.plan = plan,
	.emit = emit,
	.geometry = geometry,
	.candidates = lg_list_candidates,
};
