/*
 * moe_unpermute_ref.c - CPU reference of family "moe_unpermute"
 * (docs/kernels.md K5): forward, the sum of each token's rows in ascending
 * expert order (unweighted: the GPU's fp32 adds, bit-equal; weighted: in
 * float64, compared with a bf16 tolerance, since the GPU may fuse the
 * multiply and add), probabilities restored; backward, the gradient
 * dispatched to the padded rows (weighted: times probs[r] in fp32, rounded
 * once: bit-equal) and dprobs (weighted: the float64 dot product with g,
 * an fp32 tolerance).
 */
#include "moe_ref.h"
#include "ref.h"

enum { F_G, F_PROBS, F_MAP, F_OUT, F_RPROBS };
enum { B_DOUT, B_DRP, B_MAP, B_OFF, B_CNT, B_G, B_PROBS, B_DG, B_DPROBS };

static bool weighted(const struct lg_spec *s)
{
	return lg_ref_int(s, "weighted") != 0;
}

static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	if (s->pass == LG_PASS_FORWARD) {
		c->buf[F_OUT].cmp = LG_CMP_BF16_ULP;
		if (weighted(s))
			c->buf[F_OUT].cmp = LG_CMP_BF16, c->buf[F_OUT].rtol = 8e-3, c->buf[F_OUT].atol = 1e-3;
		c->buf[F_RPROBS].cmp = LG_CMP_SCALE;
		return;
	}
	c->buf[B_DG].cmp = LG_CMP_BF16_ULP;
	c->buf[B_DPROBS].cmp = LG_CMP_SCALE;
	if (weighted(s))
		c->buf[B_DPROBS].cmp = LG_CMP_FP32, c->buf[B_DPROBS].rtol = 1e-4, c->buf[B_DPROBS].atol = 1e-4;
}

static void fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed)
{
	struct lg_moe_ref_io io = lg_moe_ref_io_of(s, c);
	uint64_t st = seed ^ 0x27d4eb2fu;
	if (s->pass == LG_PASS_FORWARD) {
		lg_moe_ref_fill_map(io.T, io.E, io.K, io.M, seed, c->buf[F_MAP].host, NULL, NULL);
		lg_ref_fill_bf16(c->buf[F_G].host, c->buf[F_G].count, 1.0f, &st);
		if (c->buf[F_PROBS].count)
			lg_moe_ref_fill_probs(c->buf[F_PROBS].host, c->buf[F_PROBS].count, &st);
		return;
	}
	lg_moe_ref_fill_map(io.T, io.E, io.K, io.M, seed, c->buf[B_MAP].host, c->buf[B_OFF].host, c->buf[B_CNT].host);
	lg_ref_fill_bf16(c->buf[B_DOUT].host, c->buf[B_DOUT].count, 1.0f, &st);
	if (c->buf[B_DRP].count)
		lg_moe_ref_fill_probs(c->buf[B_DRP].host, c->buf[B_DRP].count, &st);
	if (c->buf[B_G].count)
		lg_ref_fill_bf16(c->buf[B_G].host, c->buf[B_G].count, 1.0f, &st);
	if (c->buf[B_PROBS].count)
		lg_moe_ref_fill_probs(c->buf[B_PROBS].host, c->buf[B_PROBS].count, &st);
}

static void run(const struct lg_spec *s, struct lg_ref_case *c)
{
	struct lg_moe_ref_io io = lg_moe_ref_io_of(s, c);
	if (s->pass == LG_PASS_FORWARD) {
		io.map = c->buf[F_MAP].host, io.src = c->buf[F_G].host, io.dst = c->buf[F_OUT].host;
		io.pin = lg_moe_ref_opt(c, F_PROBS), io.pout = lg_moe_ref_opt(c, F_RPROBS);
		io.weights = weighted(s) ? io.pin : NULL;
		lg_moe_ref_combine(&io);
		return;
	}
	io.map = c->buf[B_MAP].host, io.offsets = c->buf[B_OFF].host, io.counts = c->buf[B_CNT].host;
	io.src = c->buf[B_DOUT].host, io.dst = c->buf[B_DG].host;
	io.pin = lg_moe_ref_opt(c, B_DRP), io.pout = lg_moe_ref_opt(c, B_DPROBS);
	if (weighted(s)) {
		io.weights = lg_moe_ref_opt(c, B_PROBS);
		io.other = lg_moe_ref_opt(c, B_G);
		io.dot = lg_moe_ref_opt(c, B_DPROBS);
	}
	lg_moe_ref_dispatch(&io);
}

const struct lg_ref_family lg_ref_moe_unpermute = {describe, fill, run};
