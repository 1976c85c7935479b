// reduce.cuh - warp-level butterfly reductions over lane groups.

// @helper lg_max_xor
// Butterfly max of v over the lanes whose ids differ only in the bits from
// `from` to `to` (powers of two); every lane of the group gets it.
static __device__ __forceinline__ float lg_max_xor(float v, int from, int to)
{
	for (int m = from; m <= to; m <<= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
	return v;
}

// @helper lg_sum_xor
// Butterfly sum of v over the lanes whose ids differ only in the bits from
// `from` to `to` (powers of two); every lane of the group gets it.
static __device__ __forceinline__ float lg_sum_xor(float v, int from, int to)
{
	for (int m = from; m <= to; m <<= 1)
		v += __shfl_xor_sync(0xffffffffu, v, m);
	return v;
}

// @helper lg_dsum_xor
// Butterfly fp64 sum of v over the lanes whose ids differ only in the bits
// from `from` to `to` (powers of two); every lane of the group gets it.
static __device__ __forceinline__ double lg_dsum_xor(double v, int from, int to)
{
	for (int m = from; m <= to; m <<= 1)
		v += __shfl_xor_sync(0xffffffffu, v, m);
	return v;
}
