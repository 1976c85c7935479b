// driver_adamw.cpp - family "adamw" on the CPU (tools/emu/adamw.sh): the generated kernel
// (kernel.inc: its source from "the update of this spec" on) with the CUDA intrinsics it
// uses as plain C++ (compiled with -ffp-contract=off: each operation rounded once), every
// thread of the grid run in turn (the kernel has no barrier and no shuffle), four steps over
// odd tensors (1, 8191, 8193, 0 elements, a tail, unaligned starts) against the C reference
// (gen/ref/adamw_ref.c), bit for bit. It checks the index math, the vector, tail and
// element paths and the bf16 packing, not the device (gpu_test_adamw is the judge).
#include "prelude_adamw.h"
#include "kernel.inc"
extern "C" {
struct hp { double beta1, beta2, eps, weight_decay; bool grad_bf16, moments_bf16, param_bf16; };
void lg_ref_adamw_step(const hp *h, void *p, const void *g, void *m, void *v, size_t n, float step, float lr);
uint16_t lg_ref_f32_to_bf16(float f);
}
#define NT 8
static const int64_t counts[NT] = {1, 8191, 8193, 0, 3 * 8192 + 77, 4096, 513, 20000};
static const int mis[NT] = {0, 0, 0, 0, 0, 1, 3, 0};
struct arr { int eb; size_t off[NT], bytes; unsigned char *a, *r; };
static u64 st = 12345;
static u64 rnd() { u64 z = (st += 0x9e3779b97f4a7c15ull); z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull; z = (z ^ (z >> 27)) * 0x94d049bb133111ebull; return z ^ (z >> 31); }
static void mk(arr *x, int eb) { x->eb = eb; size_t at = 0; for (int i = 0; i < NT; i++) { at = (at + 15) / 16 * 16 + mis[i] * eb; x->off[i] = at; at += counts[i] * eb; } x->bytes = at + 16; x->a = (unsigned char *)aligned_alloc(16, (x->bytes + 15) / 16 * 16); x->r = (unsigned char *)malloc(x->bytes); }
static void fill(arr *x, double sc, bool pos) { for (int i = 0; i < NT; i++) for (int64_t j = 0; j < counts[i]; j++) { double u = (rnd() >> 11) * 0x1p-53; float v = (float)((pos ? u : 2 * u - 1) * sc); unsigned char *p = x->a + x->off[i] + j * x->eb; if (x->eb == 4) memcpy(p, &v, 4); else { u16 h = lg_ref_f32_to_bf16(v); memcpy(p, &h, 2); } } memcpy(x->r, x->a, x->bytes); }
int main(int argc, char **argv) {
	hp h = {atof(argv[1]), atof(argv[2]), atof(argv[3]), atof(argv[4]), argv[5][0] == '1', argv[6][0] == '1', argc > 7 && argv[7][0] == '1'};
	int64_t chunk = atoll(argv[7]); int ctas = atoi(argv[8]), threads = atoi(argv[9]);
	arr a[4]; mk(&a[0], 4); mk(&a[1], h.grad_bf16 ? 2 : 4); mk(&a[2], h.moments_bf16 ? 2 : 4); mk(&a[3], h.moments_bf16 ? 2 : 4);
	fill(&a[0], 1, false); fill(&a[2], 0.01, false); fill(&a[3], 1e-4, true);
	int64_t rows = 0; for (int i = 0; i < NT; i++) rows += (counts[i] + chunk - 1) / chunk;
	int64_t *t = (int64_t *)aligned_alloc(16, (rows * 6 + 6) * 8), r = 0; memset(t, 0, (rows * 6 + 6) * 8);
	for (int i = 0; i < NT; i++) for (int64_t e = 0; e < counts[i]; e += chunk, r++) { for (int k = 0; k < 4; k++) t[r * 6 + k] = (int64_t)(uintptr_t)(a[k].a + a[k].off[i] + e * a[k].eb); t[r * 6 + 4] = counts[i] - e < chunk ? counts[i] - e : chunk; }
	int bad = 0;
	for (int s = 1; s <= 4; s++) {
		fill(&a[1], s == 2 ? 1e-3 : 1.0, false);
		float sc[2] = {(float)s, s == 3 ? 3e-4f : 1e-3f};
		for (unsigned b = 0; b < (unsigned)ctas; b++) for (unsigned th = 0; th < (unsigned)threads; th++) { blockIdx = {b, 0, 0}; threadIdx = {th, 0, 0}; ENTRY((u64)(uintptr_t)t, (u64)(uintptr_t)&sc[0], (u64)(uintptr_t)&sc[1], rows, 0); }
		for (int i = 0; i < NT; i++) lg_ref_adamw_step(&h, a[0].r + a[0].off[i], a[1].r + a[1].off[i], a[2].r + a[2].off[i], a[3].r + a[3].off[i], counts[i], sc[0], sc[1]);
		for (int k : {0, 2, 3}) if (memcmp(a[k].a, a[k].r, a[k].bytes)) { bad++; for (size_t j = 0; j < a[k].bytes; j++) if (a[k].a[j] != a[k].r[j]) { printf("step %d array %d differs at byte %zu\n", s, k, j); break; } }
	}
	printf("%s: %s (rows %lld)\n", argv[10], bad ? "MISMATCH" : "bit-equal", (long long)rows);
	return bad != 0;
}
