/*
 * fp8_gemm_ref.c - CPU reference of family "fp8_gemm" (docs/kernels.md 1.3):
 * plain float64 products of the dequantised operands (each e4m3 value
 * times its block's scale), summed in float64:
 *   forward  y [M, n]  = x [M, k] . w [n, k]^T
 *   dgrad    dx [M, k] = dy [M, n] . wt [k, n]^T
 *   wgrad    dw [n, k] = dyt [n, M] . xt [k, M]^T (dyt, xt: rows
 *            round_up(M, 128) apart, the tail random and never read)
 * (accumulate: checked from dw = 0, the buffer zeroed instead of poisoned;
 * the GPU test checks dw += on its own).
 *
 * Bound. The GPU sums 128 products of e4m3 on the tensor cores (reduced-
 * precision fp32 accumulation) and promotes each such partial with both
 * scales into fp32: every element within 2e-3 of max |ref| (fp32 output);
 * a bf16 output adds its rounding and the reference's, half a bf16 step
 * each: one step of a value up to max |ref| is at most 2^-7 of max |ref|
 * (a value just above a power of two): within 2e-3 + 2^-7 of max |ref|.
 * (That the bf16 output is the fp32 one rounded to nearest, bit for bit,
 * the GPU tests check apart: lg_test_bf16_exact.)
 */
#include <math.h>
#include <stdlib.h>

#include "fp8_gemm_ref.h"
#include "numeric_ref.h"
#include "ref.h"

enum { A_IN, A_IN_S, B_IN, B_IN_S, C_OUT };

#define TOL_FP32 2e-3

/* dw's check, both GEMM families: fp32 or bf16 within TOL_FP32 of max |ref|;
 * accumulate (dw += the product) from dw = 0, the GPU tests checking the
 * sum of two launches apart. */
void lg_ref_fp8_out(const struct lg_spec *s, struct lg_ref_buf *out)
{
	out->cmp = s->dtype == LG_DTYPE_FP32 ? LG_CMP_FP32 : LG_CMP_BF16;
	out->rtol = 0.0;
	out->atol = TOL_FP32; /* of max(1, rms): run() makes it of max |ref| */
	out->zeroed = lg_spec_int(s, lg_family_key(s->fam, "accumulate")) != 0;
}

static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	lg_ref_fp8_out(s, &c->buf[C_OUT]);
}

void lg_ref_fp8_fill(uint8_t *q, size_t n, float *sc, size_t ns, uint64_t *st)
{
	for (size_t i = 0; i < n; i++)
		q[i] = lg_ref_quant(2.0f * lg_ref_randn(st), 1.0f, true);
	for (size_t i = 0; i < ns; i++) /* (0.5 .. 1.5) x 2^(-3 .. 3) */
		sc[i] = ldexpf(0.5f + (float)(lg_ref_rand(st) >> 40) / (float)(1 << 24),
			       (int)(lg_ref_rand(st) % 7) - 3);
}

/* The pass's shape: rows r, columns c, reduction l. */
static void shape(const struct lg_spec *s, const struct lg_ref_case *c, size_t *r, size_t *cl, size_t *l)
{
	size_t m = (size_t)c->sizes[0], n = (size_t)lg_ref_int(s, "n"), k = (size_t)lg_ref_int(s, "k");
	*r = s->pass == LG_PASS_WGRAD ? n : m;
	*cl = s->pass == LG_PASS_FORWARD ? n : k;
	*l = s->pass == LG_PASS_FORWARD ? k : s->pass == LG_PASS_DGRAD ? n : m;
}

static void fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed)
{
	uint64_t st = seed;
	for (int i = A_IN; i <= B_IN; i += 2)
		lg_ref_fp8_fill(c->buf[i].host, c->buf[i].count, c->buf[i + 1].host, c->buf[i + 1].count, &st);
	(void)s;
}

struct prod {
	const double *a, *b;
	double *out;
	size_t cols, red;
};

/* Rows [lo, hi) of the product. */
static void prod_rows(void *ctx, size_t lo, size_t hi)
{
	const struct prod *p = ctx;
	for (size_t i = lo; i < hi; i++)
		for (size_t j = 0; j < p->cols; j++) {
			double sum = 0.0;
			for (size_t x = 0; x < p->red; x++)
				sum += p->a[i * p->red + x] * p->b[j * p->red + x];
			p->out[i * p->cols + j] = sum;
		}
}

void lg_ref_fp8_product(const struct lg_ref_fp8_op *o, double *out)
{
	size_t r = o->rows, cl = o->cols, l = o->red, lb = (l + 127) / 128, ld = o->ld ? o->ld : l;
	double *a = malloc(r * l * sizeof *a), *b = malloc(cl * l * sizeof *b);
	if (!a || !b)
		abort();
	for (size_t i = 0; i < r; i++)
		for (size_t j = 0; j < l; j++)
			a[i * l + j] = (double)lg_ref_e4m3_to_f32(o->a[i * ld + j]) * o->sa[(j / 128) * r + i];
	for (size_t i = 0; i < cl; i++)
		for (size_t j = 0; j < l; j++) {
			double sb = o->b_rowscale ? o->sb[(j / 128) * cl + i] : o->sb[(i / 128) * lb + j / 128];
			b[i * l + j] = (double)lg_ref_e4m3_to_f32(o->b[i * ld + j]) * sb;
		}
	struct prod p = {a, b, out, cl, l};
	lg_ref_parallel_rows(r, cl * l, prod_rows, &p); /* rows: independent */
	free(a);
	free(b);
}

void lg_ref_fp8_store(const struct lg_spec *s, struct lg_ref_buf *o, const double *y, size_t n)
{
	double mx = 0.0, ss = 0.0;
	for (size_t i = 0; i < n; i++) {
		mx = fmax(mx, fabs(y[i]));
		ss += y[i] * y[i];
	}
	double rms = n ? sqrt(ss / (double)n) : 0.0;
	bool fp32 = s->dtype == LG_DTYPE_FP32;
	o->atol = (fp32 ? TOL_FP32 : TOL_FP32 + ldexp(1.0, -7)) * mx / fmax(1.0, rms);
	for (size_t i = 0; i < n; i++)
		if (fp32)
			((float *)o->host)[i] = (float)y[i];
		else
			((uint16_t *)o->host)[i] = lg_ref_f32_to_bf16((float)y[i]);
}

static void run(const struct lg_spec *s, struct lg_ref_case *c)
{
	struct lg_ref_fp8_op o = {c->buf[A_IN].host, c->buf[A_IN_S].host, c->buf[B_IN].host, c->buf[B_IN_S].host,
				  0, 0, 0, s->pass == LG_PASS_WGRAD, 0};
	shape(s, c, &o.rows, &o.cols, &o.red);
	if (s->pass == LG_PASS_WGRAD) /* the columnwise copies: rows round_up(M, 128) apart, the tail not read */
		o.ld = lg_ref_qt_pitch(o.red);
	double *y = malloc((o.rows * o.cols + 1) * sizeof *y);
	if (!y)
		abort();
	lg_ref_fp8_product(&o, y);
	lg_ref_fp8_store(s, &c->buf[C_OUT], y, o.rows * o.cols);
	free(y);
}

const struct lg_ref_family lg_ref_fp8_gemm = {describe, fill, run};
