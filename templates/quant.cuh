// quant.cuh - blockwise e4m3 scales (docs/kernels.md 1.2) and the correctly
// rounded divide by a scale.

// @helper lg_scale_exact
// s = max(amax / 448, 1e-30), the dequantisation multiplier of a block, the
// divide correctly rounded (one FMA correction of amax * (1/448); quotients
// too small for it are clamped to 1e-30 anyway, and an infinite amax stays
// infinite).
static __device__ __forceinline__ float lg_scale_exact(float amax)
{
	const float r = 1.0f / 448.0f;
	const float q = amax * r;
	const float d = fmaf(fmaf(-q, 448.0f, amax), r, q);
	return fmaxf(amax == __int_as_float(0x7f800000) ? amax : d, 1e-30f);
}

// @helper lg_scale_pow2
// With round_scale: s = 2^ceil(log2 s) by exponent arithmetic (exact).
static __device__ __forceinline__ float lg_scale_pow2(float amax)
{
	u32 u = lg_f2u(lg_scale_exact(amax));
	return lg_u2f((u + 0x7fffffu) & 0xff800000u);
}

// @helper lg_inv_pow2
// 1/s for a power-of-two s (exact): y * lg_inv_pow2(s) == y / s.
static __device__ __forceinline__ float lg_inv_pow2(float s)
{
	return lg_u2f(0x7f000000u - (lg_f2u(s) & 0x7f800000u));
}

// @helper lg_div_rn
// y / s correctly rounded, from r = 1/s correctly rounded (one divide per
// block): q0 = y r, then one FMA correction, RN(q0 + r (y - q0 s)) = RN(y / s)
// (Markstein). Quotients that underflow fp32 give e4m3 zero either way; the
// sign of q0 is kept, since the correction turns -0 into +0.
static __device__ __forceinline__ float lg_div_rn(float y, float s, float r)
{
	const float q = y * r;
	return lg_u2f(lg_f2u(fmaf(fmaf(-q, s, y), r, q)) | (lg_f2u(q) & 0x80000000u));
}

// @helper lg_expert_tiles
// Per-expert (batched) tensors (docs/kernels.md 1.3): the expert segments that
// hold token tiles t0, t0 + stride, ... (k of them), where expert e has
// counts[e] tokens (E of them, in device memory; negative counts count as
// 0) and cdiv(counts[e], 128) token tiles, segments and tiles in expert
// order. One warp scans the counts once for all k, 256 experts a step (8
// consecutive ones a lane: its sums, then an inclusive scan over the
// lanes); the lane holding a tile walks its 8 experts and writes seg[4 i ..
// 4 i + 3] = the expert, its first token, its tokens, its first tile (the
// expert -1 for a tile past the last). Every warp of the CTA calls it (a
// call in warp 0 only takes ~20 registers more by ptxas) and warp 0 writes
// seg, shared memory read after a barrier.
static __device__ __noinline__ void lg_expert_tiles(const int *__restrict__ counts, i64 E, i64 t0,
						    i64 stride, int k, i64 *seg)
{
	const int lane = threadIdx.x & 31;
	i64 rbase = 0, tbase = 0; // tokens and tiles of the experts before this step
	int i = 0;                // the next tile to find: t0 + i stride
	for (i64 c0 = 0; c0 < E && i < k; c0 += 256) {
		const i64 e0 = c0 + 8 * lane; // this lane's first expert
		int n[8];
#pragma unroll
		for (int j = 0; j < 8; j++) n[j] = e0 + j < E ? max(__ldg(counts + e0 + j), 0) : 0;
		i64 sr = 0, st = 0; // the lane's tokens and tiles
#pragma unroll
		for (int j = 0; j < 8; j++) sr += n[j], st += (n[j] + 127) >> 7;
		i64 r = sr, tl = st; // inclusive scans over the warp
#pragma unroll
		for (int d = 1; d < 32; d <<= 1) {
			const i64 a = __shfl_up_sync(0xffffffffu, r, d);
			const i64 b = __shfl_up_sync(0xffffffffu, tl, d);
			if (lane >= d) r += a, tl += b;
		}
		const i64 tot = __shfl_sync(0xffffffffu, tl, 31); // the step's tiles
		const i64 rtot = __shfl_sync(0xffffffffu, r, 31); // and tokens
		for (i64 t = t0 + i * stride; i < k && t < tbase + tot; i++, t += stride) {
			// the first lane whose tiles end past t holds it; it walks its 8 experts
			const int L = __ffs(__ballot_sync(0xffffffffu, t < tbase + tl)) - 1;
			if (lane != L || threadIdx.x >= 32)
				continue;
			i64 tb = tbase + tl - st, rb = rbase + r - sr;
#pragma unroll
			for (int j = 0; j < 8; j++) {
				const i64 nt = (n[j] + 127) >> 7;
				i64 *const sp = seg + 4 * i;
				if (t >= tb && t < tb + nt)
					sp[0] = e0 + j, sp[1] = rb, sp[2] = n[j], sp[3] = tb;
				tb += nt, rb += n[j];
			}
		}
		tbase += tot, rbase += rtot;
	}
	if (threadIdx.x == 0)
		for (; i < k; i++) seg[4 * i] = -1;
}
