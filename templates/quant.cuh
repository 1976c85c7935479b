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
