// common.cuh - fixed-width types and bit casts, without CUDA headers.
//
// Each fragment below starts at a `// @type NAME` or `// @helper NAME` line
// and runs to the next one; generated code gets only the fragments its
// kernels use (gen/templates.c says how they are picked).

// @type u8
typedef unsigned char u8;
// @type u16
typedef unsigned short u16;
// @type u32
typedef unsigned int u32;
// @type u64
typedef unsigned long long u64;
// @type i64
typedef long long i64;
// @type lg_u32x4
struct __attribute__((aligned(16))) lg_u32x4 { u32 x, y, z, w; };

// @helper lg_f2u
static __device__ __forceinline__ u32 lg_f2u(float f) { return __float_as_uint(f); }
// @helper lg_u2f
static __device__ __forceinline__ float lg_u2f(u32 u) { return __uint_as_float(u); }
