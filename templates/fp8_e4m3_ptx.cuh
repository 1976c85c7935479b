// fp32 -> e4m3 (fn: max 448, no inf), round-to-nearest-even, saturating,
// by the hardware conversion of sm_89+. Returns lo in the low byte.
static __device__ __forceinline__ u32 lg_e4m3x2(float lo, float hi)
{
	u16 d;
	asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
	return (u32)d;
}
