/*
 * moe_permute_ref.c - CPU reference of family "moe_permute" (docs/kernels.md
 * K4): forward, every padded row copied from its token (or zeros: padding
 * and rows past P; e4m3 scale of a zero block); backward, the fp32 sum of
 * each token's rows in ascending expert order (the same adds in the same
 * order as the GPU: bit-equal) and the probabilities restored. The row map
 * inputs come from a random routing (moe_common_ref.c).
 */
#include "moe_ref.h"
#include "ref.h"

enum { F_X, F_XS, F_PROBS, F_MAP, F_OFF, F_CNT, F_OUT, F_OUTS, F_OUTP };
enum { B_DOUT, B_DOUTP, B_MAP, B_DX, B_DPROBS };

static void describe(const struct lg_spec *s, struct lg_ref_case *c)
{
	if (s->pass == LG_PASS_FORWARD) {
		c->buf[F_OUT].cmp = s->dtype == LG_DTYPE_E4M3 ? LG_CMP_E4M3_ULP : LG_CMP_BF16_ULP;
		c->buf[F_OUTS].cmp = LG_CMP_SCALE;
		c->buf[F_OUTP].cmp = LG_CMP_SCALE;
		return;
	}
	c->buf[B_DX].cmp = LG_CMP_BF16_ULP;
	c->buf[B_DPROBS].cmp = LG_CMP_SCALE;
}

static void fill(const struct lg_spec *s, struct lg_ref_case *c, uint64_t seed)
{
	struct lg_moe_ref_io io = lg_moe_ref_io_of(s, c);
	uint64_t st = seed ^ 0x5bd1e995u;
	if (s->pass == LG_PASS_FORWARD) {
		lg_moe_ref_fill_map(io.T, io.E, io.K, io.M, seed, c->buf[F_MAP].host, c->buf[F_OFF].host,
				    c->buf[F_CNT].host);
		if (io.es == 1) {
			lg_moe_ref_fill_e4m3(c->buf[F_X].host, c->buf[F_X].count, &st);
			lg_moe_ref_fill_probs(c->buf[F_XS].host, c->buf[F_XS].count, &st);
		} else {
			lg_ref_fill_bf16(c->buf[F_X].host, c->buf[F_X].count, 1.0f, &st);
		}
		if (c->buf[F_PROBS].count)
			lg_moe_ref_fill_probs(c->buf[F_PROBS].host, c->buf[F_PROBS].count, &st);
		return;
	}
	lg_moe_ref_fill_map(io.T, io.E, io.K, io.M, seed, c->buf[B_MAP].host, NULL, NULL);
	lg_ref_fill_bf16(c->buf[B_DOUT].host, c->buf[B_DOUT].count, 1.0f, &st);
	if (c->buf[B_DOUTP].count)
		lg_moe_ref_fill_probs(c->buf[B_DOUTP].host, c->buf[B_DOUTP].count, &st);
}

static void run(const struct lg_spec *s, struct lg_ref_case *c)
{
	struct lg_moe_ref_io io = lg_moe_ref_io_of(s, c);
	if (s->pass == LG_PASS_FORWARD) {
		io.map = c->buf[F_MAP].host, io.offsets = c->buf[F_OFF].host, io.counts = c->buf[F_CNT].host;
		io.src = c->buf[F_X].host, io.src_s = lg_moe_ref_opt(c, F_XS), io.dst = c->buf[F_OUT].host;
		io.dst_s = lg_moe_ref_opt(c, F_OUTS), io.pin = lg_moe_ref_opt(c, F_PROBS), io.pout = lg_moe_ref_opt(c, F_OUTP);
		lg_moe_ref_dispatch(&io);
		return;
	}
	io.map = c->buf[B_MAP].host, io.src = c->buf[B_DOUT].host, io.dst = c->buf[B_DX].host;
	io.pin = lg_moe_ref_opt(c, B_DOUTP), io.pout = lg_moe_ref_opt(c, B_DPROBS);
	lg_moe_ref_combine(&io);
}

const struct lg_ref_family lg_ref_moe_permute = {describe, fill, run};
