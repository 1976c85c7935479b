/*
 * gpu_test_k1.c - K1's software e4m3 conversion (for targets before sm_89)
 * on the GPU (label "gpu"): it equals the hardware cvt for every one of the
 * 2^32 fp32 bit patterns. K1's kernels (rmsnorm_quant, rmsnorm) against the
 * CPU reference are tests/cases/rmsnorm_quant.json and rmsnorm.json, run by
 * gpu_test_families. Exits with LG_TEST_SKIP (ctest: skipped), saying why,
 * when there is no CUDA device or driver.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "buf.h"
#include "cuda.h"
#include "gpu.h"
#include "harness.h"
#include "nvrtc.h"
#include "templates.h"
#include "testutil.h"

static lg_ctx *ctx;

/* Every fp32 bit pattern through both e4m3 conversions. */
static void test_e4m3_soft_equals_hardware(void **state)
{
	(void)state;
	lg_buf b;
	lg_buf_init(&b);
	/* lg_e4m3x2 as sm_90 (hardware) and sm_80 (software) have it, each
	 * with its helpers in a namespace of its own */
	lg_line(&b, "namespace hw {");
	size_t at = b.len;
	lg_line(&b, "static __device__ u32 e4m3x2(float lo, float hi) { return lg_e4m3x2(lo, hi); }");
	lg_emit_helpers(&b, at, 90);
	lg_line(&b, "}");
	lg_line(&b, "namespace sw {");
	at = b.len;
	lg_line(&b, "static __device__ u32 e4m3x2(float lo, float hi) { return lg_e4m3x2(lo, hi); }");
	lg_emit_helpers(&b, at, 80);
	lg_line(&b, "}");
	at = b.len;
	lg_line(&b, "extern \"C\" __global__ void e4m3_all(u64 out)");
	lg_open(&b, "{");
	lg_line(&b, "unsigned long long *res = (unsigned long long *)out;");
	lg_open(&b, "for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < (1ull << 32); i += (u64)gridDim.x * blockDim.x) {");
	lg_line(&b, "const float f = lg_u2f((u32)i);");
	lg_line(&b, "const u32 a = hw::e4m3x2(f, -f), c = sw::e4m3x2(f, -f);");
	lg_open(&b, "if (a != c) {");
	lg_line(&b, "if (atomicAdd(&res[0], 1ull) == 0) res[1] = i | ((u64)a << 32) | ((u64)c << 48);");
	lg_close(&b);
	lg_close(&b);
	lg_close(&b);
	lg_emit_helpers(&b, at, 80); /* u32, u64, lg_u2f for the kernel */
	char *src = lg_buf_finish(&b, NULL);
	assert_non_null(src);
	void *cubin;
	size_t size;
	if (lg_nvrtc_compile(src, "e4m3_all", lg_ctx_arch(ctx), &cubin, &size, NULL) != LG_OK)
		fail_msg("%s", lg_last_error());
	const struct lg_cu *cu;
	assert_int_equal(lg_cu_get(&cu), LG_OK);
	CUlibrary lib;
	CUkernel k;
	CUdeviceptr res;
	assert_int_equal(cu->cuLibraryLoadData(&lib, cubin, NULL, NULL, 0, NULL, NULL, 0), CUDA_SUCCESS);
	assert_int_equal(cu->cuLibraryGetKernel(&k, lib, "e4m3_all"), CUDA_SUCCESS);
	assert_int_equal(cu->cuMemAlloc(&res, 16), CUDA_SUCCESS);
	assert_int_equal(cu->cuMemsetD8(res, 0, 16), CUDA_SUCCESS);
	void *args[] = {&res};
	assert_int_equal(cu->cuLaunchKernel((CUfunction)k, 1024, 1, 1, 256, 1, 1, 0, NULL, args, NULL),
			 CUDA_SUCCESS);
	unsigned long long h[2] = {0, 0};
	assert_int_equal(cu->cuMemcpyDtoH(h, res, 16), CUDA_SUCCESS);
	printf("e4m3 software vs hardware over 2^32 inputs: %llu mismatches (first 0x%08llx: hw 0x%04llx sw 0x%04llx)\n",
	       h[0], h[1] & 0xffffffffu, (h[1] >> 32) & 0xffff, h[1] >> 48);
	assert_int_equal(h[0], 0);
	cu->cuMemFree(res);
	cu->cuLibraryUnload(lib);
	free(cubin);
	free(src);
}

int main(void)
{
	lg_test_require_gpu("gpu_test_k1");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_e4m3_soft_equals_hardware),
	};
	return LG_TEST_RUN_GPU(tests, &ctx);
}
