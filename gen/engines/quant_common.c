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

/* How qt_pieces stores a piece: tested at run time (rows of any pitch),
 * rows known 16-byte aligned (narrow stores for the tile's last tokens
 * only), or whole pieces only (aligned rows, whole 128-byte lines: `rows`
 * 128), evict-first or write-back. */
enum pieces { PIECES_TESTED, PIECES_ALIGNED, PIECES_WHOLE, PIECES_WHOLE_WB };

/* The loop storing each 16-byte piece of a staged line at the tile's
 * offset, `rows` bytes of it. */
static void qt_pieces(lg_buf *b, int threads, const char *base, const char *ld, const char *t0, const char *rows,
		      enum pieces how)
{
	bool whole = how == PIECES_WHOLE || how == PIECES_WHOLE_WB;
	if (how == PIECES_TESTED)
		lg_line(b, "const bool vec_ok = (%s & 15) == 0; // 16-byte aligned qt rows", ld);
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int e = threadIdx.x; e < %d; e += %d) {", 128 * 8, threads);
	lg_line(b, "const int c = e >> 3, h = e & 7, sw = (c >> 3) & 15;");
	lg_line(b, "const int pc = (h ^ (sw >> 1)) << 4; // piece h of line c, staged");
	lg_line(b, "uint4 v = *(const uint4 *)(stage + c * 128 + pc);");
	lg_line(b, "if (sw & 1) v = make_uint4(v.z, v.w, v.x, v.y);");
	lg_line(b, "u8 *const dst = %s + (k0 + c) * %s + %s + 16 * h;", base, ld, t0);
	lg_line(b, "const lg_u32x4 w = {v.x, v.y, v.z, v.w};");
	if (whole) {
		lg_line(b, how == PIECES_WHOLE_WB ? "lg_st16(dst, w); // write-back" : "lg_st16_cs(dst, w);");
	} else {
		lg_open(b, "if (%s16 * h + 16 <= %s) {", how == PIECES_ALIGNED ? "" : "vec_ok && ", rows);
		lg_line(b, "lg_st16_cs(dst, w);");
		lg_close_with(b, how == PIECES_ALIGNED ? "} else { // the tile's last tokens"
						       : "} else { // unaligned rows or the last tokens");
		lg_line(b, "lg_st16_any(dst, w, %s - 16 * h);", rows);
		lg_close(b);
	}
	lg_close(b);
}

void lg_emit_qt_lines_to(lg_buf *b, int threads, const char *base, const char *ld, const char *t0)
{
	lg_comment(b, "qt: each column's 128 tokens are one 128-byte line; 16 bytes a thread.");
	qt_pieces(b, threads, base, ld, t0, "rows", PIECES_TESTED);
}

void lg_emit_qt_lines_flat(lg_buf *b, int threads, const char *base, const char *ld, const char *t0)
{
	lg_comment(b, "qt rows 16-byte aligned (%s a multiple of 16): a 16-byte piece of a staged", ld);
	lg_comment(b, "line a thread, each in one store (the tile's last tokens: narrow ones). Else");
	lg_comment(b, "the lines realigned to memory's 16-byte chunks (bench/odd-counts.md: at 6001");
	lg_comment(b, "and 8191 tokens the pieces' narrow stores took 1.5-1.9x the aligned time,");
	lg_comment(b, "these 1.1-1.35x; at aligned counts these took 2-8%% more than the pieces).");
	lg_open(b, "if ((%s & 15) == 0) {", ld);
	qt_pieces(b, threads, base, ld, t0, "rows", PIECES_ALIGNED);
	b->depth--; /* the realigned lines not indented: their lines keep their width */
	lg_line(b, "} else { // qt rows at any byte (the block below is not indented)");
	lg_emit_qt_lines_realign(b, threads, base, ld, t0);
	lg_line(b, "} // qt rows at any byte");
}

void lg_emit_qt_lines(lg_buf *b, int threads, enum lg_qt_store store)
{
	lg_line(b, "u8 *const qtg = (u8 *)qt;");
	lg_emit_qt_lines_pitched(b, threads, "qtg", "M", NULL, "m0", store);
}

void lg_emit_qt_lines_pitched(lg_buf *b, int threads, const char *base, const char *m, const char *pitch,
			      const char *t0, enum lg_qt_store store)
{
	if (pitch) {
		lg_comment(b, "qt [hidden, %s]: rows %d-byte aligned, each column's 128 tokens one whole", pitch,
			   LG_QT_PITCH_BYTES);
		lg_comment(b, "128-byte line, 16 bytes a thread; the last tile's line also covers the zero");
		lg_comment(b, "tail up to round_up(%s, %d) (its absent tokens are staged as zeros), the", m,
			   LG_QT_PITCH_BYTES);
		lg_comment(b, "columns past it (another launch's) untouched.");
		lg_line(b, "const i64 qtp = %s ? %s : (%s + %d) & ~(i64)%d; // qt's row pitch", pitch, pitch, m,
			LG_QT_PITCH_BYTES - 1, LG_QT_PITCH_BYTES - 1);
	} else {
		lg_comment(b, "qt [hidden, round_up(%s, %d)]: rows %d-byte aligned, each column's 128 tokens",
			   m, LG_QT_PITCH_BYTES, LG_QT_PITCH_BYTES);
		lg_comment(b, "one whole 128-byte line, 16 bytes a thread; the last tile's line also covers");
		lg_comment(b, "the zero tail up to the pitch (its absent tokens are staged as zeros).");
		lg_line(b, "const i64 qtp = (%s + %d) & ~(i64)%d; // qt's row pitch", m, LG_QT_PITCH_BYTES - 1,
			LG_QT_PITCH_BYTES - 1);
	}
	if (store == LG_QT_NARROW)
		lg_comment(b, "The former store (tile.qt_store 1): narrow stores where a piece is not whole.");
	if (store == LG_QT_WB) {
		lg_comment(b, "Write-back stores (tile.qt_store 3): kept in L2, not evicted first (for rows");
		lg_comment(b, "an odd multiple of 16 apart, the former pitch, whose lines shared 32-byte");
		lg_comment(b, "sectors with the neighbouring tiles' lines).");
	}
	qt_pieces(b, threads, base, "qtp", t0, "128",
		  store == LG_QT_NARROW ? PIECES_TESTED : store == LG_QT_WB ? PIECES_WHOLE_WB : PIECES_WHOLE);
}

void lg_emit_qt_lines_realign(lg_buf *b, int threads, const char *base, const char *ld, const char *t0)
{
	lg_comment(b, "qt: each column's tokens are one line of up to 128 bytes at any byte address, cut");
	lg_comment(b, "at the 16-byte boundaries of memory: a head of (16 - addr) %% 16 bytes, whole");
	lg_comment(b, "chunks, a tail. Thread h of a line stores whole chunk h in one aligned 16-byte");
	lg_comment(b, "store (taken from the staged line at byte o: three 8-byte words shifted); then");
	lg_comment(b, "a warp a line, lane q a byte, stores the head's and the tail's bytes (at most");
	lg_comment(b, "30): one store instruction a warp for both, where a chunk at a time takes up to");
	lg_comment(b, "eight small stores for each.");
	lg_line(b, "#pragma unroll");
	lg_open(b, "for (int e = threadIdx.x; e < %d; e += %d) {", 128 * 8, threads);
	lg_line(b, "const int c = e >> 3, h = e & 7, sw = (c >> 3) & 15;");
	lg_line(b, "const u8 *const sl = stage + c * 128; // staged line c");
	lg_line(b, "u8 *const line = %s + (k0 + c) * %s + %s;", base, ld, t0);
	lg_line(b, "const int head = min((16 - (int)((size_t)line & 15)) & 15, rows);");
	lg_line(b, "if (h >= (rows - head) >> 4) continue; // not a whole chunk of the line");
	lg_line(b, "const int o = head + 16 * h; // its bytes o..o+15");
	lg_line(b, "const int w0 = o >> 3, sh = 8 * (o & 7); // word, shift");
	lg_line(b, "u64 wd[3];");
	lg_line(b, "#pragma unroll");
	lg_line(b, "for (int k = 0; k < 3; k++) // word w of line c: at 8 (w ^ sw)");
	lg_line(b, "	wd[k] = w0 + k < 16 && (k < 2 || sh)");
	lg_line(b, "		? *(const u64 *)(sl + ((w0 + k) ^ sw) * 8) : 0ull;");
	lg_line(b, "const u64 lo = sh ? wd[0] >> sh | wd[1] << (64 - sh) : wd[0];");
	lg_line(b, "const u64 hi = sh ? wd[1] >> sh | wd[2] << (64 - sh) : wd[1];");
	lg_line(b, "lg_st16_cs(line + o, lg_u32x4{(u32)lo, (u32)(lo >> 32), (u32)hi,");
	lg_line(b, "\t(u32)(hi >> 32)});");
	lg_close(b);
	lg_comment(b, "The heads and tails: none when every line starts and ends on a chunk");
	lg_comment(b, "boundary (qt 16-byte aligned, the line stride %s, the tile's first token", ld);
	lg_comment(b, "and its tokens multiples of 16); 16 bytes a line in a whole tile (16 lanes");
	lg_comment(b, "a line), at most 30 in a short one (32).");
	lg_open(b, "if (((%s | rows) & 15) != 0) {", ld);
	lg_line(b, "const int lb2 = rows == 128 ? 4 : 5; // log2 of the lanes a line");
	lg_line(b, "#pragma unroll 2");
	lg_open(b, "for (int e = threadIdx.x; e < (128 << lb2); e += %d) {", threads);
	lg_line(b, "const int c = e >> lb2, q = e & ((1 << lb2) - 1); // line c, lane q");
	lg_line(b, "u8 *const line = %s + (k0 + c) * %s + %s;", base, ld, t0);
	lg_line(b, "const int head = min((16 - (int)((size_t)line & 15)) & 15, rows);");
	lg_line(b, "const int t = q < head ? q : ((rows - head) & ~15) + q;");
	lg_line(b, "if (t < rows) line[t] = stage[c * 128 + (t ^ (8 * (c >> 3)))];");
	lg_close(b);
	lg_close(b);
}
