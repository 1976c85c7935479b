/*
 * read_ceiling.c - the device's DRAM read ceiling, measured in the run that
 * times the kernels (`lingen bench`): a plain read-only stream over 1 GiB,
 * the L2 flushed before each repetition, the median of 20. Kernels that only
 * read (grad norm, count-zero, the cross-entropy forward) are bounded by this,
 * not by the copy ceiling, which a read-only stream can pass by a few %.
 *
 * The stream is a small kernel of its own (not one of lingen's families, so
 * it measures the machine, not the generator): 4 CTAs of 512 an SM, every
 * thread keeping UNROLL 16-byte non-coherent loads in flight, folded into a
 * value stored only if it is impossible (so the loads stay). Two ways of
 * spreading the loads over the buffer at two depths are timed and the
 * fastest is reported. (H200: the grid-strided form read at 4.20 TB/s,
 * contiguous slabs a CTA at 3.80, both forms here 4.21-4.22, while
 * count-zero and grad norm read at 4.29-4.36: this is a guide, printed as
 * "plain read stream", not a bound.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "gpu.h"
#include "harness.h"
#include "nvrtc.h"

/* Two ways to spread the stream: WARP_ITEMS 1, each warp reads 16 KiB items
 * round-robin (as the list kernels do), else each thread strides over the
 * whole buffer, one grid-wide window per load. */
static const char src[] =
	"#define LD(v, a) asm volatile(\"ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\" \\\n"
	"\t: \"=r\"(v[0]), \"=r\"(v[1]), \"=r\"(v[2]), \"=r\"(v[3]) : \"l\"(a))\n"
	"extern \"C\" __global__ void __launch_bounds__(512)\n"
	"lg_read_ceiling(const unsigned *p, unsigned long long n16, unsigned *out)\n"
	"{\n"
	"\tunsigned acc = 0, v[UNROLL][4];\n"
	"#if WARP_ITEMS\n"
	"\tunsigned long long warps = (unsigned long long)gridDim.x * 16, items = n16 / 1024;\n"
	"\tunsigned lane = threadIdx.x & 31;\n"
	"\tfor (unsigned long long it = blockIdx.x * 16ull + (threadIdx.x >> 5); it < items; it += warps)\n"
	"\t\tfor (unsigned s = 0; s < 1024; s += 32 * UNROLL) {\n"
	"#pragma unroll\n"
	"\t\t\tfor (int u = 0; u < UNROLL; u++)\n"
	"\t\t\t\tLD(v[u], p + 4 * (it * 1024 + s + 32 * u + lane));\n"
	"#pragma unroll\n"
	"\t\t\tfor (int u = 0; u < UNROLL; u++)\n"
	"\t\t\t\tacc ^= v[u][0] ^ v[u][1] ^ v[u][2] ^ v[u][3];\n"
	"\t\t}\n"
	"#else\n"
	"\tunsigned long long step = (unsigned long long)gridDim.x * 512;\n"
	"\tunsigned long long i = (unsigned long long)blockIdx.x * 512 + threadIdx.x;\n"
	"\tfor (; i + (UNROLL - 1) * step < n16; i += UNROLL * step) {\n"
	"#pragma unroll\n"
	"\t\tfor (int u = 0; u < UNROLL; u++)\n"
	"\t\t\tLD(v[u], p + 4 * (i + u * step));\n"
	"#pragma unroll\n"
	"\t\tfor (int u = 0; u < UNROLL; u++)\n"
	"\t\t\tacc ^= v[u][0] ^ v[u][1] ^ v[u][2] ^ v[u][3];\n"
	"\t}\n"
	"#endif\n"
	"\tif (acc == 0x9e3779b9u)\n"
	"\t\t*out = acc;\n"
	"}\n";

struct read_arg {
	const struct lg_cu *cu;
	CUfunction f;
	CUdeviceptr p, out;
	unsigned long long n16;
	unsigned grid;
};

static lg_status run_read(void *v)
{
	struct read_arg *a = v;
	void *args[] = {&a->p, &a->n16, &a->out};
	CUresult r = a->cu->cuLaunchKernel(a->f, a->grid, 1, 1, 512, 1, 1, 0, NULL, args, NULL);
	return r == CUDA_SUCCESS ? LG_OK : lg_cu_fail(r, "the read-ceiling kernel");
}

/* Compile the stream at one depth and time it: its GB/s into *gbps. */
static lg_status time_depth(struct read_arg *a, const char *arch, int items, int unroll, double *gbps)
{
	char text[sizeof src + 64];
	snprintf(text, sizeof text, "#define WARP_ITEMS %d\n#define UNROLL %d\n%s", items, unroll, src);
	void *cubin = NULL;
	size_t size = 0;
	char *log = NULL;
	lg_status st = lg_nvrtc_compile(text, "read_ceiling.cu", arch, &cubin, &size, &log);
	free(log);
	CUlibrary lib = NULL;
	CUkernel k = NULL;
	if (st == LG_OK && a->cu->cuLibraryLoadData(&lib, cubin, NULL, NULL, 0, NULL, NULL, 0) != CUDA_SUCCESS)
		st = lg_fail(LG_ERR_CUDA, "cannot load the read-ceiling kernel");
	free(cubin);
	if (st == LG_OK && (a->cu->cuLibraryGetKernel(&k, lib, "lg_read_ceiling") != CUDA_SUCCESS ||
			    a->cu->cuKernelGetFunction(&a->f, k) != CUDA_SUCCESS))
		st = lg_fail(LG_ERR_CUDA, "cannot find the read-ceiling kernel");
	double med = 0;
	if (st == LG_OK)
		st = run_read(a);
	if (st == LG_OK)
		st = lg_bench_time_median(20, run_read, a, &med, NULL);
	if (st == LG_OK)
		*gbps = (double)a->n16 * 16.0 / (med * 1e-6) / 1e9;
	if (lib)
		a->cu->cuLibraryUnload(lib);
	return st;
}

lg_status lg_bench_read_ceiling(double *gbps)
{
	struct read_arg a = {.n16 = (1ull << 30) / 16};
	char arch[16];
	int sms = 0;
	CUdevice dev;
	lg_status st = lg_cu_get(&a.cu);
	if (st == LG_OK)
		st = lg_cu_ensure_context(0);
	if (st == LG_OK)
		st = lg_cu_device_arch(arch);
	if (st == LG_OK && (a.cu->cuCtxGetDevice(&dev) != CUDA_SUCCESS ||
			    a.cu->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) !=
				    CUDA_SUCCESS))
		st = lg_fail(LG_ERR_CUDA, "cannot query the device's SMs");
	a.grid = (unsigned)(sms > 0 ? sms : 1) * 4;
	if (st == LG_OK && a.cu->cuMemAlloc(&a.p, a.n16 * 16 + 64) != CUDA_SUCCESS)
		st = lg_fail(LG_ERR_CUDA, "cannot allocate 1 GiB for the read ceiling");
	if (st == LG_OK && a.cu->cuMemsetD8(a.p, 0x3c, a.n16 * 16 + 64) != CUDA_SUCCESS)
		st = lg_fail(LG_ERR_CUDA, "cuMemsetD8 failed");
	a.out = a.p + a.n16 * 16;
	*gbps = 0;
	static const int form[][2] = {{1, 4}, {1, 8}, {0, 4}, {0, 8}}; /* {WARP_ITEMS, UNROLL} */
	for (size_t i = 0; i < sizeof form / sizeof *form && st == LG_OK; i++) {
		double g = 0;
		st = time_depth(&a, arch, form[i][0], form[i][1], &g);
		if (g > *gbps)
			*gbps = g;
	}
	if (a.p)
		a.cu->cuMemFree(a.p);
	return st;
}
