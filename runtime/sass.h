/*
 * sass.h - rewrites of an sm_90 cubin's machine code after NVRTC, bits the
 * PTX cannot ask for.
 *
 * The one rewrite: the FP8 GEMMs' promotion (the partial sums times the two
 * scales after each 128-deep wgmma group) is a run of FFMAs that read one
 * scale register. NVRTC 13 marks every other one of them to keep the warp
 * on the issue slot and reuse that register from the operand cache, the
 * others to let the warp yield. DeepGEMM (its jit/interleave_ffma.py, on
 * NVCC's output) found the FP8 GEMM faster with more of them yielding, so
 * the math warpgroups' FFMAs and wgmma issues interleave. The modes, each on
 * every run of 8 or more FFMAs:
 *   LG_SASS_FFMA_DEEPGEMM (1): DeepGEMM's rule: in the first 9/16 of the run,
 *     an FFMA that reuses operand B is made to yield without the reuse where
 *     B's register is read for the first time in the run or the previous
 *     FFMA reused the same register;
 *   LG_SASS_FFMA_HALF (2): every FFMA in the first 9/16 yields, none reuses;
 *   LG_SASS_FFMA_ALL (3): every FFMA of the run yields, none reuses.
 * Only scheduling hints change: the operand cache is an optimisation (the
 * register file is read instead), and yielding changes when, not what, a
 * warp issues.
 *
 * Encoding (sm_70 on, 16 bytes an instruction, two little-endian 64-bit
 * words): the low word's bits 0-11 are the opcode and its form, 0x223 FFMA
 * on four registers, bits 32-39 operand B's register; the high word's bit
 * 45 is clear where the warp may yield, bits 58-61 are the operands' reuse
 * flags (bit 59 B's). Found without a disassembler; tests/test_sass_ffma.c
 * checks every rewritten instruction against cuobjdump where it is.
 */
#ifndef LG_RUNTIME_SASS_H
#define LG_RUNTIME_SASS_H

#include <stddef.h>

#include "lingen.h"

enum { LG_SASS_FFMA_DEEPGEMM = 1, LG_SASS_FFMA_HALF, LG_SASS_FFMA_ALL };

/* What lg_sass_ffma_yield found and changed. */
struct lg_sass_stats {
	unsigned sections; /* executable sections (.text.<kernel>) */
	unsigned runs;     /* runs of 8 FFMAs or more */
	unsigned ffma;     /* FFMAs in those runs */
	unsigned changed;  /* instructions rewritten */
};

/* Rewrite the FFMA runs of every kernel in the ELF cubin (in place; size
 * bytes) by mode (LG_SASS_FFMA_*). LG_ERR_INVALID_ARG, naming what is wrong, when it is not a 64-bit
 * little-endian ELF whose sections lie within size (nothing changed then).
 * stats may be NULL. */
lg_status lg_sass_ffma_yield(void *cubin, size_t size, int mode, struct lg_sass_stats *stats);

#endif
