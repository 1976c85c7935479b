// common.cuh - fixed-width types and bit casts, without CUDA headers.
//
// Each fragment below starts at a `// @type NAME` or `// @helper NAME` line
// and runs to the next one; generated code gets only the fragments its
// kernels use (gen/core/templates.c says how they are picked).

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

// @helper lg_f32_at
// Value i (0 to 3) of the four fp32 in v.
static __device__ __forceinline__ float lg_f32_at(lg_u32x4 v, int i)
{
	return lg_u2f(i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w);
}

// @helper lg_pack_f32x4
// Four floats as a 16-byte piece, in order.
static __device__ __forceinline__ lg_u32x4 lg_pack_f32x4(const float v[4])
{
	return lg_u32x4{lg_f2u(v[0]), lg_f2u(v[1]), lg_f2u(v[2]), lg_f2u(v[3])};
}
