// quant.cuh - blockwise e4m3 scales (KERNELS.md 1.2) and the correctly
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

// @helper lg_expert_tile
// Per-expert (batched) tensors (KERNELS.md 1.3): the expert segment that
// holds token tile t, where expert e has counts[e] tokens (E of them, in
// device memory; negative counts count as 0) and cdiv(counts[e], 128) token
// tiles, segments and tiles in expert order. Every warp scans the counts on
// its own, 256 experts a step (8 consecutive ones a lane: its sums, then an
// inclusive scan over the lanes), and stops at the step that holds t: no
// shared memory and no barrier, so the CTA's loads start one L1/L2 round
// trip after its launch. Every lane of a warp must call it (whole warps).
// Gives the expert, its first token, its tokens and its first tile; false
// when t is past the last tile.
static __device__ __noinline__ bool lg_expert_tile(const int *__restrict__ counts, i64 E, i64 t,
						   int *ex, i64 *seg0, i64 *segn, i64 *tbeg)
{
	const int lane = threadIdx.x & 31;
	i64 rbase = 0, tbase = 0; // tokens and tiles of the experts before this step
	for (i64 c0 = 0; c0 < E; c0 += 256) {
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
		if (t < tbase + tot) {
			// the first lane whose tiles end past t holds it; it walks its 8 experts
			const int L = __ffs(__ballot_sync(0xffffffffu, t < tbase + tl)) - 1;
			i64 tb = tbase + tl - st, rb = rbase + r - sr, fs = 0, fn = 0, ft = 0;
			int fe = -1;
#pragma unroll
			for (int j = 0; j < 8; j++) {
				const i64 nt = (n[j] + 127) >> 7;
				if (fe < 0 && t >= tb && t < tb + nt)
					fe = (int)(e0 + j), fs = rb, fn = n[j], ft = tb;
				tb += nt, rb += n[j];
			}
			*ex = __shfl_sync(0xffffffffu, fe, L);
			*seg0 = __shfl_sync(0xffffffffu, fs, L);
			*segn = __shfl_sync(0xffffffffu, fn, L);
			*tbeg = __shfl_sync(0xffffffffu, ft, L);
			return true;
		}
		tbase += tot, rbase += rtot;
	}
	return false;
}
