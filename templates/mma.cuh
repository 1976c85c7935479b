// mma.cuh - warp-level tensor-core pieces (sm_80+): shared-memory swizzle,
// ldmatrix fragment loads, mma.sync bf16 with fp32 accumulation, and the
// split of fp32 values into bf16 terms (gen/engines/gemm_emit.c uses them).

// @helper lg_swz
// Byte offset of byte `byte` of row `row` in a swizzled shared tile of rows
// of rb bytes (rb 64, or a multiple of 128): the 16-byte chunk index is
// XORed with the row (rb >= 128), or with the 128-byte line (rb 64, two rows
// a line), mod 8. Eight rows at one logical chunk (an ldmatrix) then hit
// eight distinct chunks of a 128-byte line: no bank conflict.
static __device__ __forceinline__ u32 lg_swz(u32 row, u32 byte, u32 rb)
{
	const u32 o = row * rb + byte;
	const u32 line = rb >= 128u ? row : o >> 7;
	return o ^ ((line & 7u) << 4);
}

// @helper lg_ldsm4
// ldmatrix .x4: four 8x8 b16 matrices; lane l gives the address of row
// l % 8 of matrix l / 8 and gets, of each matrix j, row l / 4, elements
// 2 (l % 4) and 2 (l % 4) + 1 in r[j].
static __device__ __forceinline__ void lg_ldsm4(u32 r[4], const void *p)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"((u32)__cvta_generic_to_shared(p)));
}

// @helper lg_ldsm4t
// ldmatrix .x4 .trans: as lg_ldsm4 of the transposed matrices (lane l
// gets column l / 4, rows 2 (l % 4) and 2 (l % 4) + 1 of each).
static __device__ __forceinline__ void lg_ldsm4t(u32 r[4], const void *p)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"((u32)__cvta_generic_to_shared(p)));
}

// @helper lg_mma_bf16
// d += a . b on a 16x8x16 tile: bf16 operands, fp32 accumulators
// (mma.sync m16n8k16, A row-major, B column-major).
static __device__ __forceinline__ void lg_mma_bf16(float d[4], const u32 a[4], const u32 b[2])
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// @helper lg_split_bf16x2
// The two fp32 values (lo, hi) as n bf16x2 terms t[0..n): t[0] their
// rounding to bf16, each next term the rounding of what the terms before
// leave (exact fp32 differences). Their sum has 8 n significant bits: n = 3
// gives every fp32 value exactly (the last term may be a subnormal bf16).
static __device__ __forceinline__ void lg_split_bf16x2(u32 *t, int n, float lo, float hi)
{
	for (int i = 0; i < n; i++) {
		t[i] = lg_pack_bf16x2(lo, hi);
		lo -= lg_bf16_lo(t[i]);
		hi -= lg_bf16_hi(t[i]);
	}
}

// @helper lg_split_tf32
// lg_split_bf16x2 of (lo, hi) rounded to tf32 first (cvt.rna: to nearest,
// ties away from zero, 11 significant bits, as tf32 tensor-core operands):
// 2 terms hold a tf32 value exactly, so the products are tf32's. (The 13
// bits below tf32's are cleared: PTX leaves them to the implementation.)
static __device__ __forceinline__ void lg_split_tf32(u32 *t, int n, float lo, float hi)
{
	u32 a, b;
	asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(a) : "f"(lo));
	asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(b) : "f"(hi));
	lg_split_bf16x2(t, n, __uint_as_float(a & ~0x1fffu), __uint_as_float(b & ~0x1fffu));
}
