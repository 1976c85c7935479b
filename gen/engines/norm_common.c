/*
 * norm_common.c - emission shared by the RMSNorm families (norm_common.h).
 */
#include "norm_common.h"

#include "quant_engine.h"

void lg_emit_rrms(lg_buf *b, const struct lg_spec *s)
{
	lg_emit_rrms_n(b, s, lg_spec_int(s, lg_family_key(s->fam, "hidden")));
}

void lg_emit_rrms_n(lg_buf *b, const struct lg_spec *s, int64_t n)
{
	const struct lg_family *f = s->fam;
	char eps[LG_FLOAT_LITERAL_MAX];
	lg_double_literal(lg_spec_num(s, lg_family_key(f, "eps")), eps);
	lg_comment(b, "Reciprocal RMS from the fp64 sum of squares of one row as lg_sumsq_bf16x8 gives it");
	lg_comment(b, "(times 2^256: the exact multiply by 2^-256 takes it off), every step correctly");
	lg_comment(b, "rounded in fp64, so it matches the float64 reference bit for bit.");
	lg_line(b, "static __device__ __forceinline__ float lg_rrms(double sumsq)");
	lg_open(b, "{");
	lg_line(b, "return (float)(1.0 / sqrt(sumsq * 0x1p-256 / %lld.0 + %s));", (long long)n, eps);
	lg_close(b);
}

struct lg_rowlayout lg_rowlayout_make(int64_t hidden, int kmax, int threads)
{
	struct lg_rowlayout l = {.hidden = hidden, .lpr = 16};
	int64_t pieces = hidden / 8;
	while ((pieces + l.lpr - 1) / l.lpr > kmax)
		l.lpr *= 2;
	l.k = (int)((pieces + l.lpr - 1) / l.lpr);
	l.threads = threads < l.lpr ? l.lpr : threads;
	l.rows = l.threads / l.lpr;
	return l;
}

void lg_rowlayout_save(const struct lg_rowlayout *l, struct lg_plan *p)
{
	p->v[LG_ROW_HIDDEN] = l->hidden;
	p->v[LG_ROW_LPR] = l->lpr;
	p->v[LG_ROW_K] = l->k;
	p->v[LG_ROW_ROWS] = l->rows;
	p->v[LG_ROW_THREADS] = l->threads;
}

struct lg_rowlayout lg_rowlayout_load(const struct lg_plan *p)
{
	return (struct lg_rowlayout){.hidden = p->v[LG_ROW_HIDDEN], .lpr = (int)p->v[LG_ROW_LPR],
				     .k = (int)p->v[LG_ROW_K], .threads = (int)p->v[LG_ROW_THREADS],
				     .rows = (int)p->v[LG_ROW_ROWS]};
}

void lg_emit_row_prologue(lg_buf *b, const struct lg_rowlayout *l, bool fsum)
{
	lg_emit_row_prologue_sums(b, l, true, fsum);
}

void lg_emit_row_prologue_sums(lg_buf *b, const struct lg_rowlayout *l, bool dsum, bool fsum)
{
	if (l->rows > 1)
		lg_line(b, "const int slot = threadIdx.x / %d, t = threadIdx.x %% %d; // row, lane in the row",
			l->lpr, l->lpr);
	else
		lg_line(b, "const int t = threadIdx.x; // lane in the row (one row per CTA)");
	if (l->lpr > 32) {
		lg_line(b, "const int lane = threadIdx.x & 31;");
		if (dsum)
			lg_line(b, "__shared__ double dred[%d];", l->threads / 32);
		if (fsum)
			lg_line(b, "__shared__ float fred[%d];", l->threads / 32);
	}
}

void lg_emit_row_index(lg_buf *b, const struct lg_rowlayout *l)
{
	if (l->rows > 1)
		lg_line(b, "const i64 m = (i64)blockIdx.x * %d + slot;", l->rows);
	else
		lg_line(b, "const i64 m = blockIdx.x;");
	lg_line(b, "const bool live = m < M;");
}

void lg_emit_row_piece(lg_buf *b, const struct lg_rowlayout *l, const char *k)
{
	if (l->pair8)
		lg_line(b, "const int c = 16 * ((t >> 3) + (%s >> 1) * %d) + (t & 7) + 8 * (%s & 1);", k, l->lpr / 8, k);
	else
		lg_line(b, "const int c = t + %s * %d;", k, l->lpr);
}

void lg_emit_row_load_at(lg_buf *b, const struct lg_rowlayout *l, const char *dst, const char *base,
			 const char *ld, const char *extra, const char *m, const char *live)
{
	int64_t pieces = l->hidden / 8;
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int k = 0; k < %d; k++) {", l->k);
	lg_emit_row_piece(b, l, "k");
	lg_line(b, "%s[k] = lg_u32x4{0u, 0u, 0u, 0u};", dst);
	lg_line(b, "if (%s && c < %lld)", live, (long long)pieces);
	lg_line(b, "\t%s[k] = %s(%s + (%s * %lld + c * 8) * 2%s%s);", dst, ld, base, m, (long long)l->hidden,
		extra ? ", " : "", extra ? extra : "");
	lg_close(b);
}

void lg_emit_row_load(lg_buf *b, const struct lg_rowlayout *l, const char *dst, const char *base,
		      const char *ld, const char *extra)
{
	lg_emit_row_load_at(b, l, dst, base, ld, extra, "m", "live");
}

void lg_emit_row_weights(lg_buf *b, const struct lg_rowlayout *l, const char *dst, const char *w)
{
	lg_line(b, "lg_u32x4 %s[%d];", dst, l->k);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int k = 0; k < %d; k++) {", l->k);
	lg_emit_row_piece(b, l, "k");
	lg_line(b, "%s[k] = c < %lld ? lg_ld16_keep((const u8 *)%s + c * 16) : lg_u32x4{0u, 0u, 0u, 0u};", dst,
		(long long)(l->hidden / 8), w);
	lg_close(b);
}

void lg_emit_row_sum(lg_buf *b, const struct lg_rowlayout *l, const char *type, const char *var)
{
	const char *fn = type[0] == 'd' ? "lg_dsum_xor" : "lg_sum_xor";
	if (l->lpr <= 32) {
		lg_line(b, "%s = %s(%s, 1, %d);", var, fn, var, l->lpr / 2);
		return;
	}
	const char *scratch = type[0] == 'd' ? "dred" : "fred";
	lg_line(b, "%s = %s(%s, 1, 16);", var, fn, var);
	lg_line(b, "if (lane == 0) %s[threadIdx.x >> 5] = %s;", scratch, var);
	lg_line(b, "__syncthreads();");
	lg_line(b, "%s = 0;", var);
	lg_line(b, "#pragma unroll");
	if (l->rows > 1)
		lg_line(b, "for (int i = 0; i < %d; i++) %s += %s[slot * %d + i]; // fixed order", l->lpr / 32,
			var, scratch, l->lpr / 32);
	else
		lg_line(b, "for (int i = 0; i < %d; i++) %s += %s[i]; // fixed order", l->lpr / 32, var, scratch);
	lg_line(b, "__syncthreads();");
}

void lg_emit_row_sumsq(lg_buf *b, const struct lg_rowlayout *l, const char *v)
{
	lg_comment(b, "Sum of squares: one fp64 chain per piece, added in a fixed order.");
	lg_line(b, "double sk[%d];", l->k);
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int k = 0; k < %d; k++) sk[k] = lg_sumsq_bf16x8(0.0, %s[k]);", l->k, v);
	lg_line(b, "double ss = sk[0];");
	if (l->k > 1) {
		lg_line(b, "#pragma unroll");
		lg_line(b, "for (int k = 1; k < %d; k++) ss += sk[k];", l->k);
	}
	lg_emit_row_sum(b, l, "double", "ss");
}

static void emit_dw_sliced(lg_buf *b, int64_t n, const char *ctas)
{
	lg_line(b, "__shared__ float slice[8][32];");
	lg_line(b, "const int cx = threadIdx.x & 31, sl = threadIdx.x >> 5; // column, row slice");
	lg_line(b, "const i64 col = (i64)blockIdx.x * 32 + cx;");
	lg_line(b, "const i64 n = %s;", ctas);
	lg_line(b, "float sum = 0.0f;");
	lg_line(b, "if (col < %lld)", (long long)n);
	lg_line(b, "\tfor (i64 i = sl; i < n; i += 8) sum += ((const float *)ws)[i * %lld + col];", (long long)n);
	lg_line(b, "slice[sl][cx] = sum;");
	lg_line(b, "__syncthreads();");
	lg_line(b, "if (sl != 0 || col >= %lld) return;", (long long)n);
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int k = 1; k < 8; k++) sum += slice[k][cx]; // fixed order");
	lg_line(b, "((float *)dw)[col] = sum;");
}

void lg_emit_dw_reduce(lg_buf *b, const struct lg_spec *s, const char *entry, int64_t n, bool early,
		       const char *ctas, bool sliced)
{
	lg_section(b, entry, "dw from the partials");
	if (sliced) {
		lg_comment(b, "dw[col] = sum of the workspace rows: 8 warps add every 8th row each, then");
		lg_comment(b, "their sums are added in a fixed order (deterministic).");
	} else {
		lg_comment(b, "dw[col] = sum of the workspace rows, in CTA order (deterministic).");
	}
	lg_emit_signature(b, s, entry, "__launch_bounds__(256)");
	lg_open(b, "{");
	if (early) {
		lg_comment(b, "Wait until the partial sums are written.");
		lg_line(b, "asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");");
	}
	if (sliced) {
		emit_dw_sliced(b, n, ctas);
		lg_close(b);
		return;
	}
	lg_line(b, "const i64 col = (i64)blockIdx.x * 256 + threadIdx.x;");
	lg_line(b, "if (col >= %lld) return;", (long long)n);
	lg_line(b, "const i64 n = %s;", ctas);
	lg_line(b, "float sum = 0.0f;");
	lg_line(b, "for (i64 i = 0; i < n; i++) sum += ((const float *)ws)[i * %lld + col];", (long long)n);
	lg_line(b, "((float *)dw)[col] = sum;");
	lg_close(b);
}

void lg_dw_reduce_geometry(int64_t n, bool sliced, struct lg_launch_dim *d)
{
	int64_t per = sliced ? 32 : 256;
	d->grid[0] = (unsigned)((n + per - 1) / per);
	d->grid[1] = d->grid[2] = d->block[1] = d->block[2] = 1;
	d->block[0] = 256;
	d->smem = 0;
}

void lg_norm_qe_block(lg_buf *b, const struct lg_qe *e, void *ctx)
{
	(void)e, (void)ctx;
	lg_line(b, "const lg_u32x4 wv = lg_ld16_keep((const u8 *)w + (k0 + 8 * lb) * 2);");
	lg_line(b, "const u32 ww[4] = {wv.x, wv.y, wv.z, wv.w};");
}

void lg_norm_qe_values(lg_buf *b, const struct lg_qe *e, const struct lg_qe_row *r, void *ctx)
{
	(void)ctx;
	lg_open(b, "{ // x re-read from L2 (evict first), times its row's rms, times w");
	lg_line(b, "const u8 *const xp = (const u8 *)x + (%s * %lld + %s) * 2;", r->row, (long long)e->n, r->col);
	lg_line(b, "const lg_u32x4 xv = lg_ld16_cs(xp);");
	lg_line(b, "const u32 xw[4] = {xv.x, xv.y, xv.z, xv.w};");
	lg_line(b, "const float rr = ((const float *)rms)[%s];", r->row);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int j = 0; j < 4; j++) {");
	lg_line(b, "%s[2 * j] = (lg_bf16_lo(xw[j]) * rr) * lg_bf16_lo(ww[j]);", r->dst);
	lg_line(b, "%s[2 * j + 1] =", r->dst);
	lg_line(b, "\t(lg_bf16_hi(xw[j]) * rr) * lg_bf16_hi(ww[j]);");
	lg_close(b);
	lg_close(b);
}
