// Warp-level butterfly reductions over lane groups (xor masks from `from`
// up to `to`, both powers of two): every lane of the group gets the result.
static __device__ __forceinline__ float lg_max_xor(float v, int from, int to)
{
	for (int m = from; m <= to; m <<= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
	return v;
}
static __device__ __forceinline__ float lg_sum_xor(float v, int from, int to)
{
	for (int m = from; m <= to; m <<= 1)
		v += __shfl_xor_sync(0xffffffffu, v, m);
	return v;
}
static __device__ __forceinline__ double lg_dsum_xor(double v, int from, int to)
{
	for (int m = from; m <= to; m <<= 1)
		v += __shfl_xor_sync(0xffffffffu, v, m);
	return v;
}
