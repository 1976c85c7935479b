/*
 * quant_common.c - emission shared by the quantising families (quant_common.h).
 */
#include "quant_common.h"

bool lg_quant_rowwise(const struct lg_spec *s)
{
	return lg_spec_quant(s).output != LG_QOUT_COLUMNWISE;
}

bool lg_quant_colwise(const struct lg_spec *s)
{
	return lg_spec_quant(s).output != LG_QOUT_ROWWISE;
}

bool lg_quant_pow2(const struct lg_spec *s)
{
	return lg_spec_quant(s).round_scale;
}

void lg_quant_uses(const struct lg_spec *s, unsigned char *used, int q, int sc, int qt, int st)
{
	if (!lg_quant_rowwise(s))
		used[q] = used[sc] = 0;
	if (!lg_quant_colwise(s))
		used[qt] = used[st] = 0;
}

void lg_emit_quant_q(lg_buf *b, bool pow2)
{
	if (pow2) {
		lg_comment(b, "The e4m3 input of y under a power-of-two scale of inverse inv (exact).");
		lg_line(b, "static __device__ __forceinline__ float lg_q(float y, float inv) { return y * inv; }");
		return;
	}
	lg_comment(b, "The e4m3 input of y under scale sc (inv = 1 / sc): y / sc correctly rounded.");
	lg_line(b, "static __device__ __forceinline__ float lg_q(float y, float sc, float inv)");
	lg_open(b, "{");
	lg_line(b, "return lg_div_rn(y, sc, inv);");
	lg_close(b);
}

const char *lg_quant_q_args(bool pow2, const char *both, const char *inv)
{
	return pow2 ? inv : both;
}

void lg_emit_scale(lg_buf *b, bool pow2, const char *sc, const char *amax, const char *inv)
{
	if (pow2)
		lg_line(b, "const float %s = lg_scale_pow2(%s), %s = lg_inv_pow2(%s);", sc, amax, inv, sc);
	else
		lg_line(b, "const float %s = lg_scale_exact(%s), %s = 1.0f / %s;", sc, amax, inv, sc);
}

void lg_emit_pack8(lg_buf *b, bool pow2, const char *y)
{
	lg_emit_scale(b, pow2, "sc", "amax", "inv");
	const char *qa = lg_quant_q_args(pow2, "sc, inv", "inv");
	lg_line(b, "const u32 p0 = lg_e4m3x4(lg_q(%s[0], %s), lg_q(%s[1], %s),", y, qa, y, qa);
	lg_line(b, "\tlg_q(%s[2], %s), lg_q(%s[3], %s));", y, qa, y, qa);
	lg_line(b, "const u32 p1 = lg_e4m3x4(lg_q(%s[4], %s), lg_q(%s[5], %s),", y, qa, y, qa);
	lg_line(b, "\tlg_q(%s[6], %s), lg_q(%s[7], %s));", y, qa, y, qa);
}

static void qt_lines(lg_buf *b, int threads, const char *base, const char *ld, const char *t0);

void lg_emit_qt_lines(lg_buf *b, int threads)
{
	lg_comment(b, "qt: each column's 128 tokens are one 128-byte line; 16 bytes a thread.");
	lg_line(b, "u8 *const qtg = (u8 *)qt;");
	qt_lines(b, threads, "qtg", "M", "m0");
}

void lg_emit_qt_lines_to(lg_buf *b, int threads, const char *base, const char *ld, const char *t0)
{
	lg_comment(b, "qt: each column's 128 tokens are one 128-byte line; 16 bytes a thread.");
	qt_lines(b, threads, base, ld, t0);
}

static void qt_lines(lg_buf *b, int threads, const char *base, const char *ld, const char *t0)
{
	lg_line(b, "const bool vec_ok = (%s & 15) == 0; // 16-byte aligned qt rows", ld);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int e = threadIdx.x; e < %d; e += %d) {", 128 * 8, threads);
	lg_line(b, "const int c = e >> 3, h = e & 7, sw = (c >> 3) & 15;");
	lg_line(b, "uint4 v = *(const uint4 *)(stage + c * 128 + ((h ^ (sw >> 1)) << 4));");
	lg_line(b, "if (sw & 1) v = make_uint4(v.z, v.w, v.x, v.y);");
	lg_line(b, "u8 *const dst = %s + (k0 + c) * %s + %s + 16 * h;", base, ld, t0);
	lg_open(b, "if (vec_ok && 16 * h + 16 <= rows) {");
	lg_line(b, "lg_st16_cs(dst, lg_u32x4{v.x, v.y, v.z, v.w});");
	lg_close_with(b, "} else {");
	lg_line(b, "const u32 u[4] = {v.x, v.y, v.z, v.w};");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int i = 0; i < 16; i++)");
	lg_line(b, "\tif (16 * h + i < rows)");
	lg_line(b, "\t\tdst[i] = (u8)(u[i >> 2] >> (8 * (i & 3)));");
	lg_close(b);
	lg_close(b);
}
