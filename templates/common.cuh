// Fixed-width types and bit casts, without CUDA headers.
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

static __device__ __forceinline__ u32 lg_f2u(float f) { return __float_as_uint(f); }
static __device__ __forceinline__ float lg_u2f(u32 u) { return __uint_as_float(u); }
