/*
 * fp8_grouped_gemm_ref.c - CPU reference of family "fp8_grouped_gemm"
 * (docs/kernels.md 1.3): for each expert e, its rows [start_e, start_e +
 * counts[e]) by fp8_gemm's float64 product of the dequantised operands
 * (fp8_gemm_ref.h) with its own weight and its own block of scales:
 *   forward  y = x . w[e]^T     dgrad  dx = dy . wt[e]^T
 * and the wgrad dw[e] = dyt_e . xt_e^T over expert e's tokens, from its
 * [n, count_e] and [k, count_e] blocks at elements start_e n, start_e k
 * and its scale blocks at row sum of cdiv(counts[:e], 128) (an expert of
 * no tokens: dw[e] = 0).
 * Rows past the counts' sum are not written by the kernel: random counts
 * here always sum to the tokens (some experts 0; for the wgrad at a
 * multiple of 32 tokens, multiples of 16, as moe_row_map pads them; at 16
 * more than a multiple of 32, with an even number of experts, every count
 * odd). Bound as fp8_gemm's.
 */
#include <stdlib.h>

#include "fp8_gemm_ref.h"
#include "ref.h"

enum { A_IN, A_IN_S, B_IN, B_IN_S, COUNTS, C_OUT };

static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	lg_ref_fp8_out(s, &c->buf[C_OUT]);
}

/* counts: E - 1 random cuts of [0, m] (so some experts get 0 rows), a
 * quarter of the experts emptied into their neighbour; each a multiple of
 * `unit` (m is too). */
static void fill_counts(int32_t *counts, size_t e, size_t m, size_t unit, uint64_t *st)
{
	size_t left = m;
	for (size_t i = 0; i + 1 < e; i++) {
		size_t c = (lg_ref_rand(st) % 4 == 0 || !left) ? 0 : (size_t)(lg_ref_rand(st) % (2 * m / e + 1));
		c = c / unit * unit;
		c = c > left ? left : c;
		counts[i] = (int32_t)c;
		left -= c;
	}
	counts[e - 1] = (int32_t)left;
}

static void fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed)
{
	uint64_t st = seed;
	for (int i = A_IN; i <= B_IN; i += 2)
		lg_ref_fp8_fill(c->buf[i].host, c->buf[i].count, c->buf[i + 1].host, c->buf[i + 1].count, &st);
	/* wgrad at a multiple of 32 tokens: counts of 16 (moe_row_map's padded
	 * segments), the rows of the columnwise copies 16-byte aligned; at 16
	 * more (an even number of experts): every count odd, one each and the
	 * rest (even) in even cuts, no expert's rows aligned though the tokens
	 * are a multiple of 16 */
	size_t m = (size_t)c->sizes[0], e = c->buf[COUNTS].count;
	bool wg = s->pass == LG_PASS_WGRAD, odd = wg && m % 32 == 16 && e % 2 == 0 && m >= e;
	int32_t *counts = c->buf[COUNTS].host;
	fill_counts(counts, e, odd ? m - e : m, odd ? 2 : wg && m % 16 == 0 ? 16 : 1, &st);
	for (size_t i = 0; odd && i < e; i++)
		counts[i]++;
}

/* dw[e] = dyt_e . xt_e^T, every expert. */
static void run_wgrad(const struct lg_spec *s, struct lg_ref_case *c)
{
	size_t n = (size_t)lg_ref_int(s, "n"), k = (size_t)lg_ref_int(s, "k");
	size_t e = (size_t)lg_ref_int(s, "experts");
	const int32_t *counts = c->buf[COUNTS].host;
	double *y = calloc(e * n * k + 1, sizeof *y);
	if (!y)
		abort();
	const uint8_t *a = c->buf[A_IN].host, *b = c->buf[B_IN].host;
	const float *sa = c->buf[A_IN_S].host, *sb = c->buf[B_IN_S].host;
	size_t t0 = 0, blk = 0;
	for (size_t i = 0; i < e; i++) {
		size_t m = (size_t)counts[i];
		if (m) {
			struct lg_ref_fp8_op o = {a + t0 * n, sa + blk * n, b + t0 * k, sb + blk * k, n, k, m, true, 0};
			lg_ref_fp8_product(&o, y + i * n * k);
		}
		t0 += m;
		blk += (m + 127) / 128;
	}
	lg_ref_fp8_store(s, &c->buf[C_OUT], y, e * n * k);
	free(y);
}

static void run(const struct lg_spec *s, struct lg_ref_case *c)
{
	if (s->pass == LG_PASS_WGRAD) {
		run_wgrad(s, c);
		return;
	}
	bool fwd = s->pass == LG_PASS_FORWARD;
	size_t m = (size_t)c->sizes[0], n = (size_t)lg_ref_int(s, "n"), k = (size_t)lg_ref_int(s, "k");
	size_t cols = fwd ? n : k, red = fwd ? k : n, rb = (red + 127) / 128, cb = (cols + 127) / 128;
	size_t e = (size_t)lg_ref_int(s, "experts");
	const int32_t *counts = c->buf[COUNTS].host;
	double *y = calloc(m * cols + 1, sizeof *y);
	if (!y)
		abort();
	const uint8_t *a = c->buf[A_IN].host, *b = c->buf[B_IN].host;
	const float *sa = c->buf[A_IN_S].host, *sb = c->buf[B_IN_S].host;
	size_t r0 = 0;
	for (size_t i = 0; i < e; i++) {
		size_t rows = (size_t)counts[i];
		if (rows) {
			struct lg_ref_fp8_op o = {a + r0 * red, sa + r0 * rb, b + i * cols * red, sb + i * cb * rb,
						  rows, cols, red, false, 0};
			lg_ref_fp8_product(&o, y + r0 * cols);
		}
		r0 += rows;
	}
	lg_ref_fp8_store(s, &c->buf[C_OUT], y, m * cols);
	free(y);
}

const struct lg_ref_family lg_ref_fp8_grouped_gemm = {describe, fill, run};
