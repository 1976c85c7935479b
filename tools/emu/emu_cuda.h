// emu_cuda.h - what both CPU emulations (emu.h: sm_80; emu90.h: the FP8
// GEMMs' sm_90a) define the same way: the integer names, the thread indices
// (one std::thread per CUDA thread), CUDA's keywords as nothing, and the
// float / bf16 bit helpers of templates/.
#include <cmath>
#include <cstdint>
#include <cstring>
typedef unsigned char u8; typedef unsigned short u16; typedef unsigned int u32;
typedef unsigned long long u64; typedef long long i64;
struct dim3e { unsigned x, y, z; };
thread_local dim3e threadIdx, blockIdx;
dim3e gridDim, blockDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __cluster_dims__(...)
#define __grid_constant__
#define __shared__
#define __align__(n)
#define __restrict__
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
static inline float2 make_float2(float a, float b) { return float2{a, b}; }
static inline float lg_u2f(u32 u) { float f; memcpy(&f, &u, 4); return f; }
static inline u32 lg_f2u(float f) { u32 u; memcpy(&u, &f, 4); return u; }
static inline u16 bf16_rne(float f) { u32 u = lg_f2u(f); if ((u & 0x7fffffff) > 0x7f800000) return 0x7fc0; u += 0x7fff + ((u >> 16) & 1); return (u16)(u >> 16); }
static inline u32 lg_pack_bf16x2(float lo, float hi) { return (u32)bf16_rne(lo) | ((u32)bf16_rne(hi) << 16); }
// Half a bf16 ulp at |r| (r finite): what rounding to nearest may move a
// value, half of what rounding toward zero may; the drivers' bf16 bound.
static inline double bf16_half_ulp(double r) {
	int e;
	std::frexp(r, &e); // |r| in [2^(e-1), 2^e): 8 significant bits, ulp 2^(e-8)
	return r == 0 ? 0.0 : std::ldexp(1.0, e - 9);
}
// bf16x2 rounded toward zero: only for a planted bug (EMU_MUTATE), which the
// drivers' half-ulp bound must catch.
static inline u32 emu_pack_bf16x2_rz(float lo, float hi) { return (lg_f2u(lo) >> 16) | (lg_f2u(hi) & 0xffff0000u); }
