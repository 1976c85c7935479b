/*
 * numeric_ref.c - number formats for the CPU references (numeric_ref.h).
 * The e4m3 encoder is the same algorithm as templates/fp8_e4m3_soft.cuh,
 * which the GPU tests check against the hardware cvt instruction.
 */
#include "numeric_ref.h"

#include <math.h>
#include <string.h>

static uint32_t f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static float u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

float lg_ref_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t lg_ref_f32_to_bf16(float f)
{
	uint32_t u = f2u(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

uint8_t lg_ref_f32_to_e4m3(float f)
{
	uint32_t u = f2u(f), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
	if (a > 0x7f800000u) /* NaN: 0x7f whatever its sign, as the hardware cvt */
		return 0x7fu;
	if (a >= 0x43e00000u) /* >= 448 */
		return (uint8_t)(sign | 0x7eu);
	if (a < 0x3c800000u) /* < 2^-6: subnormal steps of 2^-9 */
		return (uint8_t)(sign | (uint32_t)rintf(u2f(a) * 512.0f));
	uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
	uint32_t e = (r >> 23) - 120u, m = (r >> 20) & 7u;
	if (e > 15u || (e == 15u && m == 7u))
		return (uint8_t)(sign | 0x7eu);
	return (uint8_t)(sign | (e << 3) | m);
}

float lg_ref_e4m3_to_f32(uint8_t b)
{
	int e = (b >> 3) & 15, m = b & 7;
	float v;
	if ((b & 0x7f) == 0x7f)
		v = NAN;
	else if (e == 0)
		v = ldexpf((float)m, -9);
	else
		v = ldexpf(1.0f + (float)m / 8.0f, e - 7);
	return (b & 0x80) ? -v : v;
}

float lg_ref_scale(float amax, bool pow2)
{
	float s = amax / 448.0f;
	if (!(s >= 1e-30f))
		s = 1e-30f;
	if (pow2)
		s = u2f((f2u(s) + 0x7fffffu) & 0xff800000u);
	return s;
}

uint8_t lg_ref_quant(float v, float s, bool pow2)
{
	if (pow2)
		return lg_ref_f32_to_e4m3(v * u2f(0x7f000000u - (f2u(s) & 0x7f800000u)));
	return lg_ref_f32_to_e4m3(v / s);
}

float lg_ref_rrms(double sumsq, int64_t n, double eps)
{
	return (float)(1.0 / sqrt(sumsq / (double)n + eps));
}
