/*
 * registry_ref.c - the enum-indexed table of CPU references, and the
 * random-number helpers they share (splitmix64; normal numbers by the
 * ziggurat; bf16 fills in pieces of independent streams, in parallel).
 */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "error.h"
#include "numeric_ref.h"
#include "ref.h"

#define LG_REF_DECL(name, NAME) extern const struct lg_ref_family lg_ref_##name;
LG_FAMILIES(LG_REF_DECL)
#undef LG_REF_DECL

static const struct lg_ref_family *const refs[LG_OP_COUNT] = {
#define LG_REF_ENTRY(name, NAME) [LG_OP_##NAME] = &lg_ref_##name,
	LG_FAMILIES(LG_REF_ENTRY)
#undef LG_REF_ENTRY
};
_Static_assert(sizeof refs / sizeof refs[0] == LG_OP_COUNT, "one reference per op");

const struct lg_ref_family *lg_ref_family_get(enum lg_op op)
{
	LG_ASSERT((unsigned)op < LG_OP_COUNT && refs[op]);
	return refs[op];
}

int64_t lg_ref_int(const struct lg_spec *s, const char *path)
{
	int k = lg_family_key(s->fam, path);
	LG_ASSERT(k >= 0);
	return s->v[k];
}

double lg_ref_num(const struct lg_spec *s, const char *path)
{
	int k = lg_family_key(s->fam, path);
	LG_ASSERT(k >= 0);
	return s->num[k];
}

lg_status lg_ref_case_init(struct lg_ref_case *c, const struct lg_spec *s, const int64_t *sizes,
			   const unsigned char *used, size_t workspace)
{
	const struct lg_sig *g = &s->fam->sig[s->pass];
	memset(c, 0, sizeof *c);
	c->n = g->nargs;
	for (int i = 0; i < g->nsizes; i++)
		c->sizes[i] = sizes[i];
	for (int i = 0; i < g->nargs; i++) {
		const struct lg_arg *a = &g->args[i];
		struct lg_ref_buf *b = &c->buf[i];
		int64_t n = 0;
		b->name = a->name;
		b->output = a->role == LG_ARG_OUT || a->role == LG_ARG_OPT_OUT;
		b->elem = (size_t)lg_elem_bytes[lg_arg_elem(s, a)];
		lg_status st = a->role == LG_ARG_WORKSPACE ? LG_OK : lg_arg_count(s, i, sizes, &n);
		if (st != LG_OK)
			return st;
		b->count = a->role == LG_ARG_WORKSPACE ? workspace : (size_t)n;
		if (used && !used[i])
			b->count = 0;
	}
	return LG_OK;
}

uint64_t lg_ref_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* ---------------------------------------------------- normal numbers */

/* The ziggurat method (G. Marsaglia and W. W. Tsang, "The Ziggurat Method
 * for Generating Random Variables", J. Stat. Softw. 5(8), 2000) in the
 * form of J. A. Doornik ("An Improved Ziggurat Method to Generate Normal
 * Random Samples", 2005): the half density e^(-x^2/2) covered by 128
 * layers of equal area V (a base strip with the tail past R, then
 * rectangles of right edges x[i]); a draw picks a layer and a point in it
 * with independent bits, so layer and value are not correlated. Most draws
 * land inside a rectangle and cost a multiply and a compare; in a wedge the
 * density itself decides; past R the tail is drawn by Marsaglia's exact
 * method (1964). Exact for the normal distribution up to the 53-bit
 * uniforms (test_ref_rand checks moments, tails and the Kolmogorov-Smirnov
 * distance). R and V for 128 layers are the published constants. */
#define ZIG_N 128
#define ZIG_R 3.442619855899
#define ZIG_V 9.91256303526217e-3

static double zig_x[ZIG_N + 1], zig_ratio[ZIG_N];
static pthread_once_t zig_once = PTHREAD_ONCE_INIT;

static void zig_init(void)
{
	double f = exp(-0.5 * ZIG_R * ZIG_R);
	zig_x[0] = ZIG_V / f; /* the base strip's width: its area V over f(R) */
	zig_x[1] = ZIG_R;
	zig_x[ZIG_N] = 0;
	for (int i = 2; i < ZIG_N; i++) {
		zig_x[i] = sqrt(-2.0 * log(ZIG_V / zig_x[i - 1] + f));
		f = exp(-0.5 * zig_x[i] * zig_x[i]);
	}
	for (int i = 0; i < ZIG_N; i++)
		zig_ratio[i] = zig_x[i + 1] / zig_x[i];
}

/* A uniform in (0, 1), 53 bits, never 0 (for log). */
static double unit_open(uint64_t *s)
{
	return ((double)(lg_ref_rand(s) >> 11) + 0.5) * 0x1p-53;
}

/* One draw; the tables must be made (zig_once). */
static inline float zig_draw(uint64_t *s)
{
	for (;;) {
		uint64_t r = lg_ref_rand(s);
		unsigned i = (unsigned)(r & (ZIG_N - 1));          /* the layer: bits 0..6 */
		double u = 2.0 * ((double)(r >> 11) * 0x1p-53) - 1.0; /* in [-1, 1): bits 11..63 */
		if (fabs(u) < zig_ratio[i])
			return (float)(u * zig_x[i]); /* inside the rectangle under the next layer */
		if (i == 0) { /* the base strip's part past R: the tail */
			double x, y;
			do {
				x = log(unit_open(s)) / ZIG_R;
				y = log(unit_open(s));
			} while (-2.0 * y < x * x);
			return (float)(u < 0 ? x - ZIG_R : ZIG_R - x);
		}
		double x = u * zig_x[i]; /* in the wedge: accept under the density */
		double f0 = exp(-0.5 * (zig_x[i] * zig_x[i] - x * x));
		double f1 = exp(-0.5 * (zig_x[i + 1] * zig_x[i + 1] - x * x));
		if (f1 + unit_open(s) * (f0 - f1) < 1.0)
			return (float)x;
	}
}

float lg_ref_randn(uint64_t *s)
{
	pthread_once(&zig_once, zig_init);
	return zig_draw(s);
}

uint64_t lg_ref_stream(uint64_t base, uint64_t index)
{
	uint64_t s = base ^ (index * 0xd1342543de82ef95ull);
	return lg_ref_rand(&s);
}

/* Pieces of FILL_PIECE values, each from its own stream, filled in
 * parallel: the values do not depend on the thread count. */
#define FILL_PIECE 4096

struct fill_bf16 {
	uint16_t *p;
	size_t n;
	float scale;
	uint64_t base;
};

static void fill_bf16_pieces(void *ctx, size_t lo, size_t hi)
{
	const struct fill_bf16 *f = ctx;
	pthread_once(&zig_once, zig_init);
	for (size_t c = lo; c < hi; c++) {
		uint64_t st = lg_ref_stream(f->base, c);
		size_t end = (c + 1) * FILL_PIECE < f->n ? (c + 1) * FILL_PIECE : f->n;
		for (size_t i = c * FILL_PIECE; i < end; i++)
			f->p[i] = lg_ref_f32_to_bf16(zig_draw(&st) * f->scale);
	}
}

void lg_ref_fill_bf16(uint16_t *p, size_t n, float scale, uint64_t *s)
{
	struct fill_bf16 f = {p, n, scale, lg_ref_rand(s)};
	lg_ref_parallel_rows((n + FILL_PIECE - 1) / FILL_PIECE, FILL_PIECE * 8, fill_bf16_pieces, &f);
}

void lg_ref_fill_norm_weight(uint16_t *w, size_t n, uint64_t *s)
{
	for (size_t k = 0; k < n; k++) {
		float v = 1.0f + 0.25f * lg_ref_randn(s);
		w[k] = lg_ref_f32_to_bf16(k % 8 == 3 ? -v : v);
	}
}

struct widen {
	const uint16_t *x;
	float *y;
	size_t n;
};

static void widen_pieces(void *ctx, size_t lo, size_t hi)
{
	const struct widen *w = ctx;
	size_t end = hi * FILL_PIECE < w->n ? hi * FILL_PIECE : w->n;
	for (size_t i = lo * FILL_PIECE; i < end; i++)
		w->y[i] = lg_ref_bf16_to_f32(w->x[i]);
}

void lg_ref_widen_bf16(const uint16_t *x, float *y, size_t n)
{
	struct widen w = {x, y, n};
	lg_ref_parallel_rows((n + FILL_PIECE - 1) / FILL_PIECE, FILL_PIECE, widen_pieces, &w);
}

double lg_ref_sumsq_bf16(const uint16_t *row, size_t n)
{
	double ss = 0.0;
	for (size_t k = 0; k < n; k++) {
		double v = lg_ref_bf16_to_f32(row[k]);
		ss += v * v;
	}
	return ss;
}
