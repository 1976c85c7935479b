/*
 * ref.h - what each family's CPU reference offers the check and bench
 * harness: the buffers of a launch (sizes, element kinds, tolerances),
 * random inputs, and the reference outputs computed with float64
 * accumulation. Linked into the tools and tests, not the runtime library.
 */
#ifndef LG_REF_H
#define LG_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "family.h"

/* How an output is compared (docs/kernels.md 4). The _ULP kinds are for outputs
 * the reference computes exactly as the GPU must: each element may be at
 * most `ulps` steps of its format from the reference (0: bit-equal), plus
 * slack[i] where the reference gives a slack (an output whose GPU
 * arithmetic it can bound but not reproduce). */
enum lg_cmp {
	LG_CMP_NONE,   /* an input, or a workspace */
	LG_CMP_E4M3,   /* bit-equal for >= 1 - 1e-6 of bytes, the rest within one e4m3 step */
	LG_CMP_SCALE,  /* fp32, bit-equal */
	LG_CMP_FP32,   /* fp32, |d| <= rtol |ref| + atol max(1, rms(ref)) */
	LG_CMP_BF16,   /* bf16, |d| <= rtol |ref| + atol max(1, rms(ref)) */
	LG_CMP_E4M3_ULP, /* e4m3, within ulps (+ slack[i]) e4m3 steps */
	LG_CMP_BF16_ULP, /* bf16, within ulps (+ slack[i]) bf16 ulps */
	LG_CMP_FP32_ULP, /* fp32, within ulps (+ slack[i]) fp32 ulps */
	LG_CMP_EXACT,  /* any element type (fp32, int64), bit-equal */
};

struct lg_ref_buf {
	const char *name;
	size_t elem;      /* bytes per element */
	size_t count;     /* elements; 0 = not used by this spec (pointer 0) */
	bool output;
	bool zeroed;      /* an output the kernel reads first (dw += ...): the harness
			     sets it to 0, not the poison, and the reference is of 0 */
	enum lg_cmp cmp;
	double rtol, atol;
	void *host;       /* inputs: the data; outputs: the reference result */
	int ulps;         /* _ULP kinds: the bound for every element (0: bit-equal) */
	uint16_t *slack;  /* _ULP kinds, or NULL: more ulps allowed per element, set by
			     run() (allocated there; freed by whoever frees host) */
};

struct lg_ref_case {
	int n; /* == the family's argument count for the pass */
	int64_t sizes[LG_MAX_SIZES]; /* the run-time sizes */
	struct lg_ref_buf buf[LG_MAX_ARGS];
	/* A list family's tensors (host memory, malloc'd by fill(), freed by
	 * whoever frees the buffers): the rows of its list argument's table
	 * point into them; the harness copies them to the device and points a
	 * device copy of the table there. NULL for other families. */
	void *data;
	size_t data_bytes;
};

/* A case's buffers as the family declares them (family.h: name, element
 * size, count from the shape at `sizes`, output or not); `used` from the
 * plan (NULL: all), workspace bytes for a workspace argument. Every cmp is
 * LG_CMP_NONE until the reference's describe() sets those of the outputs. */
lg_status lg_ref_case_init(struct lg_ref_case *c, const struct lg_spec *s, const int64_t *sizes,
			   const unsigned char *used, size_t workspace);

struct lg_ref_family {
	/* How each output is compared: cmp and tolerances of c->buf[i]. */
	void (*describe)(const struct lg_spec *s, struct lg_ref_case *c);
	/* Random inputs (never all zero) into the host buffers of the inputs. */
	void (*fill)(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed);
	/* Reference outputs into the host buffers of the outputs. */
	void (*run)(const struct lg_spec *s, struct lg_ref_case *c);
};

const struct lg_ref_family *lg_ref_family_get(enum lg_op op);

/* The integer (or number) value of the spec key at `path` ("hidden"). */
int64_t lg_ref_int(const struct lg_spec *s, const char *path);
double lg_ref_num(const struct lg_spec *s, const char *path);

/* Helpers shared by the references. */
uint64_t lg_ref_rand(uint64_t *state);       /* splitmix64 */
float lg_ref_randn(uint64_t *state);         /* standard normal (ziggurat) */
/* The start of stream `index` of a family of independent streams named by
 * base (a row's or a piece's own random numbers, so rows can be filled in
 * parallel and in any order). */
uint64_t lg_ref_stream(uint64_t base, uint64_t index);
/* n values bf16(scale N(0, 1)); advances *state by one draw (the pieces of
 * p take streams of it), so the values do not depend on the threads. */
void lg_ref_fill_bf16(uint16_t *p, size_t n, float scale, uint64_t *state);
/* n norm weights bf16(1 + 0.25 N(0, 1)), every eighth (k % 8 == 3) negated:
 * models have negative ones, and a kernel that lets a zero row's product
 * with one through as -0 (0x80 in an FP8 copy's zero tail) must fail. */
void lg_ref_fill_norm_weight(uint16_t *w, size_t n, uint64_t *state);

/* The references' threads: LINGEN_REF_THREADS, else the online CPUs (at
 * most 64); lg_ref_threads_set(n > 0) fixes it (tests), 0 restores that. */
int lg_ref_threads(void);
void lg_ref_threads_set(int n);
/* fn(ctx, lo, hi) over the rows [0, n) in pieces, on lg_ref_threads()
 * threads at once (on the calling thread alone when n x cost, the rough
 * operations of all rows, is small). fn may write only what belongs to
 * its rows; then the result is fn(ctx, 0, n)'s, bit for bit. */
typedef void (*lg_ref_rows_fn)(void *ctx, size_t lo, size_t hi);
void lg_ref_parallel_rows(size_t n, size_t cost, lg_ref_rows_fn fn, void *ctx);
/* y[i] = x[i] widened (exact), for i < n, in parallel. */
void lg_ref_widen_bf16(const uint16_t *x, float *y, size_t n);
/* The float64 sum of squares of n bf16 values, in order. */
double lg_ref_sumsq_bf16(const uint16_t *row, size_t n);

/* A quantiser's copies compared as they must match (quant_ref.c): buffers q
 * and qt e4m3 bit for bit, s and st as scales. */
void lg_ref_describe_copies(struct lg_ref_case *c, int q, int s, int qt, int st);
/* The blockwise e4m3 quantisation of docs/kernels.md 1.2-1.3 (quant_ref.c): y
 * [m, n] fp32 (n a multiple of 128) into the copies qr.output asks for:
 * rowwise q [m, n] with scales s [n/128, m], columnwise qt [n, m] with
 * scales st [ceil(m/128), n]. The pointers of a copy not asked for are
 * not touched (may be NULL). */
void lg_ref_quant_blockwise(const float *y, size_t m, size_t n, struct lg_quant qr, uint8_t *q, float *s,
			    uint8_t *qt, float *st);
/* lg_ref_quant_blockwise with the flat columnwise layout of the dense
 * quantisers (fp8_quant, rmsnorm_quant, rmsnorm_router, swiglu_quant): qt
 * [n, round_up(m, 128)], rows 128-byte aligned (LG_QT_PITCH; the FP8 wgrad
 * reads them by TMA), the tail past m zeros. */
void lg_ref_quant_flat(const float *y, size_t m, size_t n, struct lg_quant qr, uint8_t *q, float *s, uint8_t *qt,
		       float *st);
/* round_up(m, 128): the row pitch of a flat columnwise copy (LG_QT_PITCH). */
static inline size_t lg_ref_qt_pitch(size_t m)
{
	return (m + LG_QT_PITCH_BYTES - 1) / LG_QT_PITCH_BYTES * LG_QT_PITCH_BYTES;
}

/* The per-expert form (docs/kernels.md 1.3): the tokens of y [m, n] grouped by
 * expert in segments of counts[e] rows, each quantised as a tensor of its
 * own by lg_ref_quant_blockwise into the concatenated layout (s, qt: the
 * expert's block at element start_e n/128, start_e n; st: its rows at row
 * sum of the earlier experts' cdiv(count, 128)). Elements no expert writes
 * (tokens past the counts' sum, st rows past the last expert's: st has
 * st_rows) are set to 0xff bytes, the harness's poison, as the kernel
 * leaves them. Experts past the capacity m (bad counts) stop the walk. */
void lg_ref_quant_experts(const float *y, size_t m, size_t n, const int32_t *counts, size_t experts,
			  struct lg_quant qr, uint8_t *q, float *s, uint8_t *qt, float *st, size_t st_rows);
/* Random bf16 input for a quantiser test (x [m, n]): rows of varied
 * magnitude, rows of +0 and -0, rows below the scale floor and above 448,
 * outliers, an all-zero feature. */
void lg_ref_fill_quant_input(uint16_t *x, size_t m, size_t n, uint64_t *state);

/* Random bf16 input of an RMSNorm, x [m, n]: rows of varied magnitude
 * (2^-6 .. 2^6), a few all-zero rows, a few outliers (x 40), each row
 * drawn again until its reciprocal RMS is one no fp64 summation order
 * changes (lg_ref_rrms_stable): the GPU's r is then the reference's. */
void lg_ref_fill_norm_input(uint16_t *x, int64_t m, size_t n, double eps, uint64_t *state);

/* The distance compare.c measures between two sign-magnitude encodings
 * of nbits bits (e4m3 8, bf16 16, fp32 32): how many representable values
 * apart they are (+0 and -0: 1), capped at UINT16_MAX: a slack. */
uint16_t lg_ref_steps(uint32_t a, uint32_t b, int nbits);

/* The outputs of a quantisation whose fp32 inputs the GPU computes only
 * to a bound (an approximate exp, another order of operations): the copies
 * and, where not NULL, the slack of each element (the e4m3 steps, or fp32
 * steps of a scale, by which the GPU may differ: LG_CMP_E4M3_ULP and
 * LG_CMP_FP32_ULP with ulps 0). */
struct lg_ref_qout {
	uint8_t *q, *qt;
	float *s, *st;
	uint16_t *q_slack, *s_slack, *qt_slack, *st_slack;
	/* qt's row pitch: 0 for m (an expert's block); a flat copy's
	 * round_up(m, 128), the tail [m, qt_ld) of each row written as zeros */
	size_t qt_ld;
};
/* lg_ref_quant_blockwise of y [m, n] whose GPU value of element i lies
 * within err[i] of y[i] (err NULL: exactly y): the nominal copies of y,
 * and a slack for each payload and scale from every value in those
 * intervals. Returns how many power-of-two scales are ambiguous (the
 * interval of a block's amax straddles a power of two times 448: slack
 * UINT16_MAX); a fill draws inputs again that give any. */
size_t lg_ref_quant_tol(const float *y, const float *err, size_t m, size_t n, struct lg_quant qr,
			const struct lg_ref_qout *o);
/* lg_ref_quant_experts (below) of values known to a bound, as
 * lg_ref_quant_tol: y [m, n] (m the capacity), each expert's segment by
 * lg_ref_quant_tol; what no expert writes is 0xff poison (slack 0).
 * Returns the ambiguous scales. */
size_t lg_ref_quant_experts_tol(const float *y, const float *err, size_t m, size_t n, const int32_t *counts,
				size_t experts, struct lg_quant qr, const struct lg_ref_qout *o, size_t st_rows);

/* One value of K9's gradient (cross_entropy_ref.c): (p - t) g for the
 * softmax p = exp(x - m) / S (float64) and the target t ((1 - e) at the
 * label, plus e / C), and in *err the bound of the GPU's fp32 value
 * around it (the approximate exp and the divide, the cancellation of
 * p - t). */
double lg_ref_ce_grad(double p, double t, double g, double *err);

#endif
