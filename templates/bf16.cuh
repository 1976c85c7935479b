// bf16.cuh - bf16 <-> fp32, packed bf16x2 max, and the fp64 sum of squares of
// bf16 pairs.

// @helper lg_bf16_lo
// The low bf16 of w as fp32 (exact: a shift).
static __device__ __forceinline__ float lg_bf16_lo(u32 w) { return lg_u2f(w << 16); }
// @helper lg_bf16_hi
// The high bf16 of w as fp32 (exact: a mask).
static __device__ __forceinline__ float lg_bf16_hi(u32 w) { return lg_u2f(w & 0xffff0000u); }

// @helper lg_pack_bf16x2
// Two floats to bf16x2 (lo in the low half, hi in the high half),
// round-to-nearest-even through cvt.rn.bf16x2.f32 (sm_80+).
static __device__ __forceinline__ u32 lg_pack_bf16x2(float lo, float hi)
{
	u32 d;
	asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
	return d;
}

// @helper lg_max_bf16x2
// Maximum of each half of two bf16x2 words (max.bf16x2, sm_80+): exact, so
// on |x| (sign bits cleared) it gives block amax two values an instruction;
// a NaN half loses to a number, as with fmaxf.
static __device__ __forceinline__ u32 lg_max_bf16x2(u32 a, u32 b)
{
	u32 d;
	asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
	return d;
}

// @helper lg_and_or
// (a & m) | c in one lop3 (ptxas splits the C expression into two).
static __device__ __forceinline__ u32 lg_and_or(u32 a, u32 m, u32 c)
{
	u32 d;
	asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(d) : "r"(a), "r"(m), "r"(c));
	return d;
}

// @helper lg_sumsq_bf16x2
// |x|^2 of the two bf16 in w, accumulated in fp64, SCALED BY 2^256 (lg_rrms
// takes the scale off). The fp64 operand, x 2^128, is built from the bf16
// bits by a shift and one lop3 (exponent field e + 1024, an OR since bit 10
// is clear in the 8-bit e, where e + 896 took an add as well): 3 SASS
// instructions a value with the DFMA, where the unscaled form took 5 (ptxas
// also re-zeroed the low word each time) and cvt.f64.f32 is a quarter-rate
// conversion. Every square and partial sum is exactly 2^256
// times that of the unscaled operands (no fp64 overflow: at most 2^526; no
// subnormal: at least 2^2), so the sum times 2^-256 is the same bits. Exact
// for normal values; a zero becomes 2^-127 (times 2^128), whose square,
// 2^-254, is far below any eps.
static __device__ __forceinline__ double lg_sumsq_bf16x2(double acc, u32 w)
{
	u32 lo = lg_and_or(w << 13, 0x0fffe000u, 0x40000000u);
	u32 hi = lg_and_or(w >> 3, 0x0fffe000u, 0x40000000u);
	double a = __hiloint2double((int)lo, 0);
	double b = __hiloint2double((int)hi, 0);
	acc = fma(a, a, acc);
	return fma(b, b, acc);
}

// @helper lg_sumsq_bf16x8
// |x|^2 of the eight bf16 in v, accumulated in fp64 in the order x, y, z, w,
// scaled by 2^256 (lg_sumsq_bf16x2).
static __device__ __forceinline__ double lg_sumsq_bf16x8(double acc, lg_u32x4 v)
{
	acc = lg_sumsq_bf16x2(acc, v.x);
	acc = lg_sumsq_bf16x2(acc, v.y);
	acc = lg_sumsq_bf16x2(acc, v.z);
	return lg_sumsq_bf16x2(acc, v.w);
}

// @helper lg_bf16_at
// Value i (0 to 7) of the eight bf16 in v, as fp32.
static __device__ __forceinline__ float lg_bf16_at(lg_u32x4 v, int i)
{
	const u32 w = i < 2 ? v.x : i < 4 ? v.y : i < 6 ? v.z : v.w;
	return i & 1 ? lg_bf16_hi(w) : lg_bf16_lo(w);
}

// @helper lg_pack_bf16x8
// Eight floats to eight bf16 (RNE), in order.
static __device__ __forceinline__ lg_u32x4 lg_pack_bf16x8(const float v[8])
{
	return lg_u32x4{lg_pack_bf16x2(v[0], v[1]), lg_pack_bf16x2(v[2], v[3]),
		lg_pack_bf16x2(v[4], v[5]), lg_pack_bf16x2(v[6], v[7])};
}
