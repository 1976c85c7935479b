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
// tiles, segments and tiles in expert order. A block scan of the counts,
// blockDim.x experts a step, stopping at the step that holds t; every
// thread of the block must call it. Gives the expert, its first token, its
// tokens and its first tile; false when t is past the last tile.
static __device__ __noinline__ bool lg_expert_tile(const int *__restrict__ counts, i64 E, i64 t,
						   int *ex, i64 *seg0, i64 *segn, i64 *tbeg)
{
	__shared__ i64 wr[32], wt[32]; // each warp's tokens and tiles
	__shared__ i64 f_seg0, f_segn, f_tbeg;
	__shared__ int f_ex;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
	if (threadIdx.x == 0) f_ex = -1;
	i64 rbase = 0, tbase = 0; // tokens and tiles of the experts before this step
	for (i64 c0 = 0; c0 < E; c0 += blockDim.x) {
		const i64 e = c0 + threadIdx.x;
		const i64 n = e < E ? max(__ldg(counts + e), 0) : 0, nt = (n + 127) >> 7;
		i64 r = n, tl = nt; // inclusive scans over the warp
#pragma unroll
		for (int d = 1; d < 32; d <<= 1) {
			const i64 a = __shfl_up_sync(0xffffffffu, r, d);
			const i64 b = __shfl_up_sync(0xffffffffu, tl, d);
			if (lane >= d) r += a, tl += b;
		}
		if (lane == 31) wr[warp] = r, wt[warp] = tl;
		__syncthreads();
		i64 pr = 0, pt = 0, sr = 0, stl = 0;
		for (int w = 0; w < nw; w++) {
			if (w < warp) pr += wr[w], pt += wt[w];
			sr += wr[w], stl += wt[w];
		}
		const i64 tend = tbase + pt + tl; // one past this expert's last tile
		if (nt > 0 && t >= tend - nt && t < tend) {
			f_ex = (int)e, f_seg0 = rbase + pr + r - n, f_segn = n, f_tbeg = tend - nt;
		}
		rbase += sr, tbase += stl;
		__syncthreads();
		if (f_ex >= 0 || t < tbase) break;
	}
	__syncthreads();
	if (f_ex < 0) return false;
	*ex = f_ex, *seg0 = f_seg0, *segn = f_segn, *tbeg = f_tbeg;
	return true;
}
