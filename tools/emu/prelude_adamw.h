// prelude_adamw.h - what the adamw kernel takes from templates/ and CUDA, as plain C++
// (tools/emu/driver_adamw.cpp).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
typedef unsigned short u16; typedef unsigned int u32; typedef unsigned long long u64; typedef long long i64;
struct dim3e { unsigned x, y, z; };
static dim3e threadIdx, blockIdx;
#define __global__
#define __launch_bounds__(...)
#define __device__
#define __forceinline__ inline
struct __attribute__((aligned(16))) lg_u32x4 { u32 x, y, z, w; };
static inline float lg_u2f(u32 u) { float f; memcpy(&f, &u, 4); return f; }
static inline u32 lg_f2u(float f) { u32 u; memcpy(&u, &f, 4); return u; }
static inline float lg_f32_at(lg_u32x4 v, int i) { return lg_u2f(i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w); }
static inline lg_u32x4 lg_pack_f32x4(const float v[4]) { return lg_u32x4{lg_f2u(v[0]), lg_f2u(v[1]), lg_f2u(v[2]), lg_f2u(v[3])}; }
static inline lg_u32x4 lg_ld16(const void *p) { if ((uintptr_t)p % 16) abort(); lg_u32x4 v; memcpy(&v, p, 16); return v; }
static inline void lg_st16(void *p, lg_u32x4 v) { if ((uintptr_t)p % 16) abort(); memcpy(p, &v, 16); }
static inline u16 bf16_rne(float f) { u32 u = lg_f2u(f); if ((u & 0x7fffffff) > 0x7f800000) return 0x7fc0; u += 0x7fff + ((u >> 16) & 1); return (u16)(u >> 16); }
static inline u32 lg_pack_bf16x2(float lo, float hi) { return (u32)bf16_rne(lo) | ((u32)bf16_rne(hi) << 16); }
static inline float lg_bf16_lo(u32 w) { return lg_u2f(w << 16); }
static inline float lg_bf16_hi(u32 w) { return lg_u2f(w & 0xffff0000u); }
static inline float lg_bf16_at(lg_u32x4 v, int i) { const u32 w = i < 2 ? v.x : i < 4 ? v.y : i < 6 ? v.z : v.w; return i & 1 ? lg_bf16_hi(w) : lg_bf16_lo(w); }
static inline lg_u32x4 lg_pack_bf16x8(const float v[8]) { return lg_u32x4{lg_pack_bf16x2(v[0], v[1]), lg_pack_bf16x2(v[2], v[3]), lg_pack_bf16x2(v[4], v[5]), lg_pack_bf16x2(v[6], v[7])}; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
