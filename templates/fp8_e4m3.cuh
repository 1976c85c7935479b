// fp8_e4m3.cuh - fp32 -> e4m3 (fn: max 448, no inf), round-to-nearest-even,
// saturating: the hardware conversion of sm_89+, and a bit-exact software
// version for the targets before it.

// @helper lg_e4m3x2 sm>=89
// Two floats to e4m3 by the hardware conversion; lo in the low byte.
static __device__ __forceinline__ u32 lg_e4m3x2(float lo, float hi)
{
	u16 d;
	asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
	return (u32)d;
}

// @helper lg_e4m3x2 sm<89
// Two floats to e4m3 in software (no fp8 cvt before sm_89); lo in the low
// byte.
static __device__ __forceinline__ u32 lg_e4m3x2(float lo, float hi)
{
	return lg_e4m3(lo) | (lg_e4m3(hi) << 8);
}

// @helper lg_e4m3x4
// Four floats to e4m3, a in the low byte, d in the high one.
static __device__ __forceinline__ u32 lg_e4m3x4(float a, float b, float c, float d)
{
	return lg_e4m3x2(a, b) | (lg_e4m3x2(c, d) << 16);
}

// @helper lg_e4m3
// fp32 -> e4m3 in software, bit-exact with cvt.rn.satfinite.e4m3x2.f32:
// round-to-nearest-even, magnitudes above 448 (infinities too) saturate to
// 448, NaN gives 0x7f whatever its sign.
static __device__ __forceinline__ u32 lg_e4m3(float f)
{
	u32 u = lg_f2u(f);
	u32 sign = (u >> 24) & 0x80u;
	u32 a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return 0x7fu;
	if (a >= 0x43e00000u) // >= 448
		return sign | 0x7eu;
	if (a < 0x3c800000u) { // < 2^-6: subnormal steps of 2^-9, RNE to 0..8
		float n = rintf(lg_u2f(a) * 512.0f);
		return sign | (u32)n;
	}
	u32 r = a + 0x7ffffu + ((a >> 20) & 1u); // RNE to 3 mantissa bits
	u32 e = (r >> 23) - 120u;                // biased e4m3 exponent (bias 7)
	u32 m = (r >> 20) & 7u;
	if (e > 15u || (e == 15u && m == 7u))
		return sign | 0x7eu;
	return sign | (e << 3) | m;
}
