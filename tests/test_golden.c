/*
 * test_golden.c - golden tests of generated source (docs/style.md 7), no GPU.
 *
 * Each case of the table below is generated with lg_generate_for and
 * compared byte for byte with tests/golden/<family>_<case>.cu; a mismatch
 * names the first differing line and shows both versions of it. Every golden
 * file is also compiled by NVRTC for its arch and must give an ELF cubin with
 * no warning (NVRTC warns of unused variables and functions).
 *
 * The rules every generated file keeps (util/gencheck.h: line width, no
 * unused helper, no arithmetic on a literal 0, no dead code by NVRTC's
 * front end with its unused-variable and unused-parameter diagnostics on),
 * checked on the golden files and on every kernel of the spec files in
 * configs/kernels/ and of the expanded model configs in configs/models/,
 * for sm_90a and sm_80.
 *
 * When a generator change is meant to change the output, rewrite the golden
 * files and review the diff before committing it:
 *
 *     LINGEN_UPDATE_GOLDEN=1 ./build/tests/test_golden && git diff tests/golden
 *
 * With LINGEN_UPDATE_GOLDEN=1 the test writes every file whose text differs
 * (or is missing), prints which it wrote, and passes.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "gencheck.h"
#include "generate.h"
#include "nvrtc.h"
#include "spec.h"
#include "testutil.h"

#define GOLDEN_DIR LG_SOURCE_DIR "/tests/golden"

struct golden {
	const char *name; /* tests/golden/<name>.cu */
	const char *arch;
	const char *spec;
};

static const struct golden cases[] = {
	/* K2: the target shape (interleaved GQA, [S, B], half RoPE), its backward */
	{"qk_norm_rope_fwd_d128_hq16_hkv4", "sm_90a",
	 "{\"op\": \"qk_norm_rope\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"head_dim\": 128, "
	 "\"q_heads\": 16, \"kv_heads\": 4}"},
	{"qk_norm_rope_bwd_d128_hq16_hkv4", "sm_90a",
	 "{\"op\": \"qk_norm_rope\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"head_dim\": 128, "
	 "\"q_heads\": 16, \"kv_heads\": 4}"},
	/* plain heads, [B, S], full RoPE, SiLU, 3 q heads a group, sm_80 */
	{"qk_norm_rope_fwd_d64_plain_bs_full_silu_sm80", "sm_80",
	 "{\"op\": \"qk_norm_rope\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"head_dim\": 64, "
	 "\"q_heads\": 12, \"kv_heads\": 4, \"rotary_fraction\": 1, \"qkv_order\": \"batch_seq\", "
	 "\"head_layout\": \"plain\", \"silu\": true}"},
	/* K2b: packed sequences (positions from cu_seqlens), context parallel, mscale */
	{"qk_norm_rope_fwd_d128_hq12_hkv4_varlen_cp2", "sm_90a",
	 "{\"op\": \"qk_norm_rope\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"head_dim\": 128, "
	 "\"q_heads\": 12, \"kv_heads\": 4, \"varlen\": true, \"cp_size\": 2, \"cp_rank\": 1, "
	 "\"mscale\": 1.25}"},
	{"qk_norm_rope_bwd_d64_hq8_hkv8_varlen_sm80", "sm_80",
	 "{\"op\": \"qk_norm_rope\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"head_dim\": 64, "
	 "\"q_heads\": 8, \"kv_heads\": 8, \"varlen\": true, \"rotary_fraction\": 1}"},
	{"qk_norm_rope_bwd_d256_silu_sm80", "sm_80",
	 "{\"op\": \"qk_norm_rope\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"head_dim\": 256, "
	 "\"q_heads\": 40, \"kv_heads\": 8, \"silu\": true, \"tile\": {\"tokens\": 1, \"threads\": 128}}"},
	{"rmsnorm_quant_h2048_both_pow2", "sm_90a",
	 "{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"eps\": 1e-6, \"quant\": {\"format\": \"e4m3\", \"block\": 128, \"round_scale\": true, "
	 "\"output\": \"both\"}}"},
	{"rmsnorm_quant_h384_rowwise_exact", "sm_90a",
	 "{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 384, "
	 "\"eps\": 1e-6, \"quant\": {\"format\": \"e4m3\", \"block\": 128, \"round_scale\": false, "
	 "\"output\": \"rowwise\"}}"},
	/* sm_80 has no fp8 conversion instructions: the software path */
	{"rmsnorm_quant_h1152_colwise_sm80", "sm_80",
	 "{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 1152, "
	 "\"eps\": 1e-6, \"quant\": {\"format\": \"e4m3\", \"block\": 128, \"round_scale\": true, "
	 "\"output\": \"columnwise\"}}"},
	{"fp8_quant_h2048_both_pow2", "sm_90a",
	 "{\"op\": \"fp8_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"quant\": {\"format\": \"e4m3\", \"block\": 128, \"round_scale\": true, \"output\": \"both\"}}"},
	{"fp8_quant_h384_rowwise_exact", "sm_90a",
	 "{\"op\": \"fp8_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 384, "
	 "\"quant\": {\"format\": \"e4m3\", \"block\": 128, \"round_scale\": false, \"output\": \"rowwise\"}}"},
	/* sm_80: the software e4m3 conversion */
	{"fp8_quant_h1152_colwise_sm80", "sm_80",
	 "{\"op\": \"fp8_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 1152, "
	 "\"quant\": {\"format\": \"e4m3\", \"block\": 128, \"round_scale\": true, \"output\": \"columnwise\"}}"},
	/* the quant engine's fp32 path (values 32), exact scales, 512 threads */
	{"fp8_quant_h2048_both_exact_f32", "sm_90a",
	 "{\"op\": \"fp8_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"quant\": {\"round_scale\": false}, \"tile\": {\"values\": 32}}"},
	{"fp8_quant_h256_both_f32_t256_sm80", "sm_80",
	 "{\"op\": \"fp8_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 256, "
	 "\"quant\": {}, \"tile\": {\"values\": 32, \"threads\": 256}}"},
	/* per expert: the block scan of counts, feature blocks in turn */
	{"fp8_quant_batched_h1024_both_pow2", "sm_90a",
	 "{\"op\": \"fp8_quant_batched\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 1024, "
	 "\"quant\": {}}"},
	{"fp8_quant_batched_h384_rowwise_exact_f32", "sm_90a",
	 "{\"op\": \"fp8_quant_batched\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 384, "
	 "\"quant\": {\"round_scale\": false, \"output\": \"rowwise\"}, \"tile\": {\"values\": 32, "
	 "\"fblocks\": 2}}"},
	{"fp8_quant_batched_h512_colwise_sm80", "sm_80",
	 "{\"op\": \"fp8_quant_batched\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 512, "
	 "\"quant\": {\"output\": \"columnwise\"}, \"tile\": {\"fblocks\": 1}}"},
	/* weights: one scale a 128 x 128 tile */
	{"fp8_quant_weight_h2048_pow2", "sm_90a",
	 "{\"op\": \"fp8_quant_weight\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"quant\": {}}"},
	{"fp8_quant_weight_h2048_transposed", "sm_90a",
	 "{\"op\": \"fp8_quant_weight\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"quant\": {}, \"transposed\": true}"},
	{"fp8_quant_weight_h384_exact_f32_f2_sm80", "sm_80",
	 "{\"op\": \"fp8_quant_weight\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 384, "
	 "\"quant\": {\"round_scale\": false}, \"tile\": {\"values\": 32, \"fblocks\": 2}}"},
	{"rmsnorm_fwd_h2048", "sm_90a",
	 "{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"eps\": 1e-6}"},
	{"rmsnorm_bwd_h5120", "sm_90a",
	 "{\"op\": \"rmsnorm\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"hidden\": 5120, "
	 "\"eps\": 1e-6}"},
	/* 2 CTAs of 256 threads an SM: w from L1, zero past the row's 640 pieces */
	{"rmsnorm_bwd_h5120_s2", "sm_90a",
	 "{\"op\": \"rmsnorm\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"hidden\": 5120, "
	 "\"eps\": 1e-6, \"tile\": {\"per_sm\": 2}}"},
	/* two rows per CTA: the row slots' partial sums go through shared memory */
	{"rmsnorm_bwd_h2048", "sm_90a",
	 "{\"op\": \"rmsnorm\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"eps\": 1e-6}"},
	/* the backward without prefetch: each row loaded in its own iteration */
	{"rmsnorm_bwd_h2048_noprefetch_sm80", "sm_80",
	 "{\"op\": \"rmsnorm\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"eps\": 1e-6, \"tile\": {\"prefetch\": 0}}"},
	/* the forward's default on sm_80 (the cp.async ring), hidden no multiple of 128 */
	{"rmsnorm_fwd_h1000_sm80", "sm_80",
	 "{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 1000, "
	 "\"eps\": 1e-6}"},
	/* the forward without prefetch: a CTA per 8 rows, x loaded once */
	{"rmsnorm_fwd_h4096_noprefetch", "sm_90a",
	 "{\"op\": \"rmsnorm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 4096, "
	 "\"eps\": 1e-6, \"tile\": {\"prefetch\": 0}}"},
	/* the fused cluster kernel, two x tiles in flight */
	{"rmsnorm_quant_h2048_fused_both_pow2", "sm_90a",
	 "{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"eps\": 1e-6, \"quant\": {\"format\": \"e4m3\", \"block\": 128, \"round_scale\": true, "
	 "\"output\": \"both\"}, \"tile\": {\"cluster\": 16, \"stages\": 2}}"},
	/* the one-pass TMA form: a cluster of 8 CTAs of 256 features, two x stages */
	{"rmsnorm_quant_h2048_slab256_both_pow2", "sm_90a",
	 "{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"eps\": 1e-6, \"quant\": {\"format\": \"e4m3\", \"block\": 128, \"round_scale\": true, "
	 "\"output\": \"both\"}, \"tile\": {\"slab\": 256}}"},
	/* the one-pass TMA form at 512 features a CTA: two TMA boxes, one x stage */
	{"rmsnorm_quant_h4096_slab512_colwise_exact", "sm_90a",
	 "{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 4096, "
	 "\"eps\": 1e-6, \"quant\": {\"format\": \"e4m3\", \"block\": 128, \"round_scale\": false, "
	 "\"output\": \"columnwise\"}, \"tile\": {\"slab\": 512}}"},
	/* the fused kernel without a cluster (hidden 128), one x tile in flight */
	{"rmsnorm_quant_h128_fused_rowwise_exact", "sm_90a",
	 "{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 128, "
	 "\"eps\": 1e-6, \"quant\": {\"format\": \"e4m3\", \"block\": 128, \"round_scale\": false, "
	 "\"output\": \"rowwise\"}, \"tile\": {\"cluster\": 1, \"stages\": 1}}"},
	/* two token slices, one row per CTA in kernel 1 */
	{"rmsnorm_quant_h5120_slices_both_exact", "sm_90a",
	 "{\"op\": \"rmsnorm_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 5120, "
	 "\"eps\": 1e-6, \"quant\": {\"format\": \"e4m3\", \"block\": 128, \"round_scale\": false, "
	 "\"output\": \"both\"}, \"tile\": {\"threads\": 256, \"stages\": 2}}"},
	/* K8 at the target shape: 4 groups of 512, gate [seq, batch, dim] */
	{"swiglu_quant_fwd_n512_both_pow2", "sm_90a",
	 "{\"op\": \"swiglu_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"intermediate\": 512, "
	 "\"quant\": {}}"},
	{"swiglu_quant_bwd_n512_both_pow2", "sm_90a",
	 "{\"op\": \"swiglu_quant\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"intermediate\": 512, "
	 "\"quant\": {}}"},
	{"swiglu_quant_bwd_n384_dxbf16_exact_sm80", "sm_80",
	 "{\"op\": \"swiglu_quant\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"intermediate\": 384, "
	 "\"dx_bf16\": true, \"quant\": {\"round_scale\": false}}"},
	{"swiglu_quant_fwd_n2048_rowwise_sm80", "sm_80",
	 "{\"op\": \"swiglu_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"intermediate\": 2048, "
	 "\"quant\": {\"output\": \"rowwise\"}, \"tile\": {\"threads\": 256, \"fblocks\": 2}}"},
	{"batch_swiglu_quant_fwd_n512_e256_both_pow2", "sm_90a",
	 "{\"op\": \"batch_swiglu_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"intermediate\": 512, "
	 "\"experts\": 256, \"quant\": {}}"},
	{"batch_swiglu_quant_bwd_n512_e256_both_pow2", "sm_90a",
	 "{\"op\": \"batch_swiglu_quant\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"intermediate\": 512, "
	 "\"experts\": 256, \"quant\": {}}"},
	{"batch_swiglu_quant_bwd_n128_e5_dxbf16_exact_sm80", "sm_80",
	 "{\"op\": \"batch_swiglu_quant\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"intermediate\": 128, "
	 "\"experts\": 5, \"dx_bf16\": true, \"quant\": {\"round_scale\": false}}"},
	{"batch_swiglu_quant_fwd_n256_e160_colwise_sm80", "sm_80",
	 "{\"op\": \"batch_swiglu_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"intermediate\": 256, "
	 "\"experts\": 160, \"quant\": {\"output\": \"columnwise\"}}"},
	{"group_rmsnorm_gate_fwd_d2048_g4", "sm_90a",
	 "{\"op\": \"group_rmsnorm_gate\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"dim\": 2048, "
	 "\"groups\": 4}"},
	{"group_rmsnorm_gate_bwd_d2048_g4", "sm_90a",
	 "{\"op\": \"group_rmsnorm_gate\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"dim\": 2048, "
	 "\"groups\": 4}"},
	/* the forward's persistent, prefetching loop */
	{"group_rmsnorm_gate_fwd_d2048_g4_prefetch", "sm_90a",
	 "{\"op\": \"group_rmsnorm_gate\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"dim\": 2048, "
	 "\"groups\": 4, \"tile\": {\"prefetch\": 1}}"},
	/* the backward without prefetch: 4 pieces a lane, 2 tokens a CTA */
	{"group_rmsnorm_gate_bwd_d2048_g4_noprefetch", "sm_90a",
	 "{\"op\": \"group_rmsnorm_gate\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"dim\": 2048, "
	 "\"groups\": 4, \"tile\": {\"prefetch\": 0}}"},
	/* an odd group count (5 of 200: 80 lanes a token), shared weight, x's layout, no PDL */
	{"group_rmsnorm_gate_bwd_d1000_g5_wshared_bsd_sm80", "sm_80",
	 "{\"op\": \"group_rmsnorm_gate\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"dim\": 1000, "
	 "\"groups\": 5, \"shared_weight\": true, \"transpose\": false}"},
	/* a group over several warps (64 lanes), two groups a CTA */
	{"group_rmsnorm_gate_bwd_d4096_g2", "sm_90a",
	 "{\"op\": \"group_rmsnorm_gate\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"dim\": 4096, "
	 "\"groups\": 2}"},
	/* one unit per CTA (256 lanes) */
	{"group_rmsnorm_gate_fwd_d16384_g1_sm80", "sm_80",
	 "{\"op\": \"group_rmsnorm_gate\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"dim\": 16384, "
	 "\"groups\": 1}"},
	/* K10: the target (L2 of fp32), L1 of bf16 on sm_80, max over a mixed list */
	{"grad_norm_fp32_l2", "sm_90a", "{\"op\": \"grad_norm\", \"pass\": \"forward\", \"dtype\": \"fp32\"}"},
	{"grad_norm_bf16_l1_sm80", "sm_80",
	 "{\"op\": \"grad_norm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"ord\": \"1\"}"},
	{"grad_norm_mixed_linf_sumsq", "sm_90a",
	 "{\"op\": \"grad_norm\", \"pass\": \"forward\", \"dtype\": \"fp32\", \"ord\": \"inf\", "
	 "\"mixed\": true, \"tile\": {\"threads\": 512, \"per_sm\": 2, \"unroll\": 8}}"},
	{"grad_norm_fp32_sumsq_sm80", "sm_80",
	 "{\"op\": \"grad_norm\", \"pass\": \"forward\", \"dtype\": \"fp32\", \"norm\": false}"},
	/* K11: the target (fp32), bf16 on sm_80, a mixed list */
	{"count_zero_fp32", "sm_90a", "{\"op\": \"count_zero\", \"pass\": \"forward\", \"dtype\": \"fp32\"}"},
	{"count_zero_bf16_sm80", "sm_80", "{\"op\": \"count_zero\", \"pass\": \"forward\", \"dtype\": \"bf16\"}"},
	{"count_zero_mixed", "sm_90a",
	 "{\"op\": \"count_zero\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"mixed\": true}"},
	/* K9: the target shape, forward and backward */
	{"cross_entropy_fwd_v157184", "sm_90a",
	 "{\"op\": \"cross_entropy\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"vocab\": 157184}"},
	{"cross_entropy_bwd_v157184", "sm_90a",
	 "{\"op\": \"cross_entropy\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"vocab\": 157184}"},
	/* an odd vocab (rows not 16-byte aligned), fp32, int32 labels, label smoothing, sm_80 */
	{"cross_entropy_fwd_fp32_v50257_i32_ls_sm80", "sm_80",
	 "{\"op\": \"cross_entropy\", \"pass\": \"forward\", \"dtype\": \"fp32\", \"vocab\": 50257, "
	 "\"index\": \"int32\", \"ignore_index\": -1, \"label_smoothing\": 0.1}"},
	/* the fused forward + backward, in place, odd vocab */
	{"cross_entropy_fwd_v100003_fused_inplace", "sm_90a",
	 "{\"op\": \"cross_entropy\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"vocab\": 100003, "
	 "\"fused\": true, \"inplace\": true, \"label_smoothing\": 0.05}"},
	/* the fused forward at the target: a cluster of 4 CTAs a row (sm_90a); one CTA (sm_80) */
	{"cross_entropy_fwd_v157184_fused_ls", "sm_90a",
	 "{\"op\": \"cross_entropy\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"vocab\": 157184, "
	 "\"fused\": true, \"label_smoothing\": 0.1}"},
	{"cross_entropy_fwd_v157184_fused_sm80", "sm_80",
	 "{\"op\": \"cross_entropy\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"vocab\": 157184, "
	 "\"fused\": true}"},
	/* vocab parallel: a shard's statistics, the merge, a shard's backward (sm_80) */
	{"cross_entropy_fwd_v19648_shard_ls", "sm_90a",
	 "{\"op\": \"cross_entropy\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"vocab\": 19648, "
	 "\"part\": \"shard\", \"classes\": 157184, \"label_smoothing\": 0.1}"},
	{"cross_entropy_fwd_v157184_merge_ls", "sm_90a",
	 "{\"op\": \"cross_entropy\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"vocab\": 157184, "
	 "\"part\": \"merge\", \"label_smoothing\": 0.1}"},
	{"cross_entropy_bwd_v19648_shard_i32_sm80", "sm_80",
	 "{\"op\": \"cross_entropy\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"vocab\": 19648, "
	 "\"part\": \"shard\", \"classes\": 157184, \"index\": \"int32\", \"label_smoothing\": 0.1}"},
	/* K3 at the target shape: the forward (wgmma + TMA), the backward (bf16 dy, 4 dw slices);
	 * the wgmma forward at odd sizes with one consumer warpgroup, a 256-wide tile and a
	 * cluster of 2 CTAs sharing w's tile (TMA multicast); the
	 * target forward on sm_80 (mma.sync) */
	/* blockwise FP8 GEMMs: promotion every 128 of K, persistent producer / consumers */
	{"fp8_gemm_fwd_n7168_k16384", "sm_90a",
	 "{\"op\": \"fp8_gemm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"n\": 7168, \"k\": 16384}"},
	{"fp8_gemm_fwd_fp32_n3072_k2880_tn192", "sm_90a",
	 "{\"op\": \"fp8_gemm\", \"pass\": \"forward\", \"dtype\": \"fp32\", \"n\": 3072, \"k\": 2880, "
	 "\"tile\": {\"n\": 192}}"},
	{"fp8_gemm_dgrad_n2048_k2048_m64", "sm_90a",
	 "{\"op\": \"fp8_gemm\", \"pass\": \"dgrad\", \"dtype\": \"bf16\", \"n\": 2048, \"k\": 2048, "
	 "\"tile\": {\"m\": 64}}"},
	{"fp8_gemm_wgrad_acc_n2048_k2880", "sm_90a",
	 "{\"op\": \"fp8_gemm\", \"pass\": \"wgrad\", \"dtype\": \"fp32\", \"n\": 2048, \"k\": 2880, "
	 "\"accumulate\": true}"},
	/* grouped: the counts scanned once a CTA, a tile's expert by binary search */
	{"fp8_grouped_gemm_fwd_n1024_k2048_e256", "sm_90a",
	 "{\"op\": \"fp8_grouped_gemm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"n\": 1024, "
	 "\"k\": 2048, \"experts\": 256}"},
	{"fp8_grouped_gemm_dgrad_n2048_k512_e256", "sm_90a",
	 "{\"op\": \"fp8_grouped_gemm\", \"pass\": \"dgrad\", \"dtype\": \"bf16\", \"n\": 2048, "
	 "\"k\": 512, \"experts\": 256}"},
	/* grouped wgrad: a CTA's tokens of one expert, cp.async operands (rows at any byte) */
	{"fp8_grouped_gemm_wgrad_acc_n1024_k2048_e256", "sm_90a",
	 "{\"op\": \"fp8_grouped_gemm\", \"pass\": \"wgrad\", \"dtype\": \"fp32\", \"n\": 1024, "
	 "\"k\": 2048, \"experts\": 256, \"accumulate\": true}"},
	{"router_gemm_fwd_h1000_e97_m64_n256_cl2", "sm_90a",
	 "{\"op\": \"router_gemm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 1000, "
	 "\"experts\": 97, \"tile\": {\"m\": 64, \"n\": 256, \"stages\": 4, \"cluster\": 2}}"},
	{"router_gemm_fwd_h2048_e256_sm80", "sm_80",
	 "{\"op\": \"router_gemm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"experts\": 256}"},
	{"router_gemm_fwd_h2048_e256", "sm_90a",
	 "{\"op\": \"router_gemm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"experts\": 256}"},
	{"router_gemm_bwd_h2048_e256", "sm_90a",
	 "{\"op\": \"router_gemm\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"experts\": 256}"},
	/* sm_90a: dy rounded to tf32 (linghe's precision) in 2 planes, at odd sizes */
	{"router_gemm_bwd_h1000_e96_tf32", "sm_90a",
	 "{\"op\": \"router_gemm\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"hidden\": 1000, "
	 "\"experts\": 96, \"precision\": \"tf32\"}"},
	/* sm_80: odd experts (scalar stores, 4-byte dy copies), dy exact in 3 terms, dw's k 64 */
	{"router_gemm_fwd_h1000_e1_sm80", "sm_80",
	 "{\"op\": \"router_gemm\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 1000, "
	 "\"experts\": 1}"},
	{"router_gemm_bwd_h1000_e97_bf16x3_sm80", "sm_80",
	 "{\"op\": \"router_gemm\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"hidden\": 1000, "
	 "\"experts\": 97, \"precision\": \"bf16x3\", \"tile\": {\"k\": 64, \"m\": 64, \"warps_m\": 1, \"stages\": 3}}"},
	/* K3b at the target (rowwise, pow2; "both": the columnwise entry; sm_90a: wgmma), sm_90a
	 * and sm_80: odd experts, a partial last quant block, y as 3 terms, exact scales; sm_90a:
	 * hidden 8 (half a block, the second half skipped) */
	{"rmsnorm_router_h2048_e256_rowwise", "sm_90a",
	 "{\"op\": \"rmsnorm_router\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"experts\": 256, \"quant\": {\"output\": \"rowwise\"}}"},
	{"rmsnorm_router_h2048_e256_both_bf16x2", "sm_90a",
	 "{\"op\": \"rmsnorm_router\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"experts\": 256, \"precision\": \"bf16x2\", \"quant\": {\"output\": \"both\"}}"},
	{"rmsnorm_router_h1000_e97_bf16x3_exact", "sm_90a",
	 "{\"op\": \"rmsnorm_router\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 1000, "
	 "\"experts\": 97, \"precision\": \"bf16x3\", \"quant\": {\"output\": \"rowwise\", "
	 "\"round_scale\": false}}"},
	{"rmsnorm_router_h8_e3", "sm_90a",
	 "{\"op\": \"rmsnorm_router\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 8, "
	 "\"experts\": 3, \"quant\": {\"output\": \"rowwise\"}}"},
	{"rmsnorm_router_h1000_e97_bf16x3_exact_sm80", "sm_80",
	 "{\"op\": \"rmsnorm_router\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 1000, "
	 "\"experts\": 97, \"precision\": \"bf16x3\", \"quant\": {\"output\": \"rowwise\", "
	 "\"round_scale\": false}}"},
	/* K4: the padded row map at the target (mask, multiple 16), top-k int64 with 96 experts
	 * and multiple 128, top-k int32 with 5 experts unpadded (a byte mask path) */
	{"moe_row_map_e256_k8_m16_mask", "sm_90a",
	 "{\"op\": \"moe_row_map\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"experts\": 256, "
	 "\"top_k\": 8, \"multiple\": 16}"},
	{"moe_row_map_e96_k6_m128_topk_i64_sm80", "sm_80",
	 "{\"op\": \"moe_row_map\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"experts\": 96, "
	 "\"top_k\": 6, \"multiple\": 128, \"routing\": \"topk_i64\"}"},
	{"moe_row_map_e5_k2_m1_topk_i32", "sm_90a",
	 "{\"op\": \"moe_row_map\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"experts\": 5, "
	 "\"top_k\": 2, \"multiple\": 1, \"routing\": \"topk_i32\"}"},
	/* K4 permute at the target, bf16 and e4m3 with scales; an odd hidden (2-byte pieces) */
	{"moe_permute_fwd_h2048_e256_k8", "sm_90a",
	 "{\"op\": \"moe_permute\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"experts\": 256, \"top_k\": 8}"},
	{"moe_permute_fwd_e4m3_h2048_e256_k8_sm80", "sm_80",
	 "{\"op\": \"moe_permute\", \"pass\": \"forward\", \"dtype\": \"e4m3\", \"hidden\": 2048, "
	 "\"experts\": 256, \"top_k\": 8}"},
	/* the pipelined dispatch (tile.pipeline 2: persistent, a map warp), bf16 at the target and
	 * e4m3 on sm_80 */
	{"moe_permute_fwd_h2048_e256_k8_tp2", "sm_90a",
	 "{\"op\": \"moe_permute\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"experts\": 256, \"top_k\": 8, \"tile\": {\"pipeline\": 2}}"},
	{"moe_permute_fwd_e4m3_h2048_e256_k8_tp2_sm80", "sm_80",
	 "{\"op\": \"moe_permute\", \"pass\": \"forward\", \"dtype\": \"e4m3\", \"hidden\": 2048, "
	 "\"experts\": 256, \"top_k\": 8, \"tile\": {\"pipeline\": 2}}"},
	{"moe_permute_bwd_h1001_e160_k6", "sm_90a",
	 "{\"op\": \"moe_permute\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"hidden\": 1001, "
	 "\"experts\": 160, \"top_k\": 6}"},
	/* K5 unpermute at the target, and weighted (hidden 7168) with its backward (dot products) */
	{"moe_unpermute_fwd_h2048_e256_k8", "sm_90a",
	 "{\"op\": \"moe_unpermute\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"experts\": 256, \"top_k\": 8}"},
	{"moe_unpermute_fwd_h7168_e256_k8_weighted_sm80", "sm_80",
	 "{\"op\": \"moe_unpermute\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 7168, "
	 "\"experts\": 256, \"top_k\": 8, \"weighted\": true}"},
	{"moe_unpermute_bwd_h2048_e256_k8_weighted", "sm_90a",
	 "{\"op\": \"moe_unpermute\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"experts\": 256, \"top_k\": 8, \"weighted\": true}"},
	/* the combines above are pipelined (tile.pipeline 2, the default); the one-CTA-a-token form
	 * (tile.pipeline 1): weighted at the target; the permute's backward at an odd hidden size
	 * (2-byte pieces, 4 a thread) and expert count on sm_80 */
	{"moe_unpermute_fwd_h2048_e256_k8_weighted_tp1", "sm_90a",
	 "{\"op\": \"moe_unpermute\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"experts\": 256, \"top_k\": 8, \"weighted\": true, \"tile\": {\"pipeline\": 1}}"},
	{"moe_permute_bwd_h1001_e160_k6_tp1_sm80", "sm_80",
	 "{\"op\": \"moe_permute\", \"pass\": \"backward\", \"dtype\": \"bf16\", \"hidden\": 1001, "
	 "\"experts\": 160, \"top_k\": 6, \"tile\": {\"pipeline\": 1}}"},
	/* K4b: permute + pad + per-expert FP8 at the target (both copies, pow2); rowwise exact with
	 * 96 experts padded to 128 */
	{"moe_permute_quant_h2048_e256_k8_both_pow2", "sm_90a",
	 "{\"op\": \"moe_permute_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"experts\": 256, \"top_k\": 8, \"quant\": {\"output\": \"both\"}}"},
	{"moe_permute_quant_h384_e96_k6_m128_rowwise_exact_sm80", "sm_80",
	 "{\"op\": \"moe_permute_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 384, "
	 "\"experts\": 96, \"top_k\": 6, \"multiple\": 128, \"quant\": {\"output\": \"rowwise\", "
	 "\"round_scale\": false}}"},
	/* K4b without its default prefetch: each thread's rows gathered into registers */
	{"moe_permute_quant_h2048_e256_k8_both_pow2_ta0", "sm_90a",
	 "{\"op\": \"moe_permute_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 2048, "
	 "\"experts\": 256, \"top_k\": 8, \"quant\": {\"output\": \"both\"}, \"tile\": {\"prefetch\": 0}}"},
	{"moe_permute_quant_h384_e96_k6_m128_both_ta0_sm80", "sm_80",
	 "{\"op\": \"moe_permute_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"hidden\": 384, "
	 "\"experts\": 96, \"top_k\": 6, \"multiple\": 128, \"quant\": {\"output\": \"both\"}, "
	 "\"tile\": {\"prefetch\": 0}}"},
	/* issue 35: fused AdamW, fp32 state; bf16 grads and moments, other hyperparameters */
	{"adamw_fp32", "sm_90a", "{\"op\": \"adamw\", \"pass\": \"forward\", \"dtype\": \"fp32\"}"},
	{"adamw_gbf16_mbf16_sm80", "sm_80",
	 "{\"op\": \"adamw\", \"pass\": \"forward\", \"dtype\": \"fp32\", \"grad\": \"bf16\", "
	 "\"moments\": \"bf16\", \"beta1\": 0.8, \"beta2\": 0.95, \"weight_decay\": 0.1}"},
	{"adamw_pbf16_gbf16_b2_0p95", "sm_90a",
	 "{\"op\": \"adamw\", \"pass\": \"forward\", \"dtype\": \"fp32\", \"param\": \"bf16\", "
	 "\"grad\": \"bf16\", \"beta2\": 0.95}"},
	{"adamw_mbf16_b1_0p3", "sm_90a",
	 "{\"op\": \"adamw\", \"pass\": \"forward\", \"dtype\": \"fp32\", \"moments\": \"bf16\", "
	 "\"beta1\": 0.3, \"eps\": 1e-6, \"weight_decay\": 0}"},
};

#define NCASES (sizeof cases / sizeof cases[0])

static bool updating(void)
{
	const char *v = getenv("LINGEN_UPDATE_GOLDEN");
	return v && strcmp(v, "1") == 0;
}

static char *golden_path(const struct golden *g)
{
	char *name = NULL;
	assert_true(asprintf(&name, "%s.cu", g->name) > 0);
	char *path = lg_test_path(GOLDEN_DIR, name);
	free(name);
	return path;
}

static char *generate(const struct golden *g, size_t *len)
{
	struct lg_target t;
	assert_true(lg_target_parse(g->arch, &t));
	lg_spec *s = NULL;
	if (lg_spec_parse(g->spec, &s) != LG_OK)
		fail_msg("%s: %s", g->name, lg_last_error());
	struct lg_plan p;
	char *src = NULL;
	if (lg_generate_for(s, &t, &p, &src, len) != LG_OK)
		fail_msg("%s: generate for %s: %s", g->name, g->arch, lg_last_error());
	lg_spec_free(s);
	return src;
}

/* The line of text starting at s, without its newline, for messages. */
static int line_len(const char *s)
{
	return (int)strcspn(s, "\n");
}

/* Fail naming the first line where want and got differ (they do differ). */
static void fail_at_first_diff(const char *path, const char *want, const char *got)
{
	const char *w = want, *g = got;
	int line = 1;
	for (size_t i = 0; want[i] == got[i] && want[i]; i++) {
		if (want[i] == '\n') {
			line++;
			w = want + i + 1;
			g = got + i + 1;
		}
	}
	fail_msg("%s:%d differs from the generated source\n  golden:    %.*s\n"
		 "  generated: %.*s\n(LINGEN_UPDATE_GOLDEN=1 rewrites the golden files)",
		 path, line, line_len(w), w, line_len(g), g);
}

static void test_matches(void **state)
{
	const struct golden *g = *state;
	size_t len = 0, glen = 0;
	char *src = generate(g, &len);
	char *path = golden_path(g);
	lg_test_check_source(g->name, src, g->arch);
	char *want = lg_test_read_file(path, &glen);
	bool same = want && glen == len && memcmp(want, src, len) == 0;
	if (!same && updating()) {
		if (mkdir(GOLDEN_DIR, 0755) != 0 && errno != EEXIST)
			fail_msg("mkdir %s: %s", GOLDEN_DIR, strerror(errno));
		lg_test_write_file(path, src, len);
		print_message("wrote %s\n", path);
	} else if (!want) {
		fail_msg("%s: missing (LINGEN_UPDATE_GOLDEN=1 writes it)", path);
	} else if (!same) {
		fail_at_first_diff(path, want, src);
	}
	free(want);
	free(path);
	free(src);
}

/* Families planned to hold their working set in registers: their goldens
 * must not spill (adamw's first plan spilled 464 bytes a thread and ran at
 * a third of its speed). Goldens of other families that spill today, for
 * issue 27: router_gemm_bwd_h1000_e97_bf16x3_sm80 (228 bytes),
 * batch_swiglu_quant_fwd_n256_e160_colwise_sm80 (48),
 * group_rmsnorm_gate_bwd_d4096_g2 (12), qk_norm_rope_fwd_..._varlen_cp2 (8). */
static bool no_spill_family(const char *name)
{
	static const char *const fams[] = {"adamw_", "fp8_gemm_", "fp8_grouped_gemm_"};
	for (size_t i = 0; i < sizeof fams / sizeof fams[0]; i++)
		if (!strncmp(name, fams[i], strlen(fams[i])))
			return true;
	return false;
}

static void test_compiles(void **state)
{
	const struct golden *g = *state;
	char *path = golden_path(g);
	char *src = lg_test_read_file(path, NULL);
	if (!src)
		fail_msg("%s: missing (LINGEN_UPDATE_GOLDEN=1 writes it)", path);
	void *cubin = NULL;
	char *log = NULL;
	size_t size = 0;
	if (lg_nvrtc_compile(src, g->name, g->arch, &cubin, &size, &log) != LG_OK)
		fail_msg("%s for %s: %s", path, g->arch, lg_last_error());
	if (log)
		fail_msg("%s for %s: NVRTC warns:\n%s", path, g->arch, log);
	lg_test_assert_cubin(cubin, size);
	if (no_spill_family(g->name))
		lg_test_check_no_spill(path, src, g->arch);
	free(cubin);
	free(src);
	free(path);
}

/* The rules of gencheck.h for every kernel of the spec file f, for sm_90a
 * and sm_80; how many kernels it has. */
static size_t check_spec_file(const char *file, lg_spec_file *f)
{
	static const char *const archs[] = {"sm_90a", "sm_80"};
	size_t k = 0;
	for (; k < lg_spec_file_count(f); k++) {
		for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
			struct lg_target t;
			struct lg_plan p;
			char *src = NULL, what[256];
			assert_true(lg_target_parse(archs[a], &t));
			const lg_spec *s = lg_spec_file_get(f, k);
			if (s->fam->target_only && strcmp(s->fam->target_only, archs[a]) != 0)
				continue; /* refused there (test_family checks how) */
			if (lg_generate_for(s, &t, &p, &src, NULL) != LG_OK)
				fail_msg("%s: %s", file, lg_last_error());
			snprintf(what, sizeof what, "%s (%s, %s)", file, lg_spec_entry(s), archs[a]);
			lg_test_check_source(what, src, archs[a]);
			free(src);
		}
	}
	return k;
}

/* The rules for every kernel of the shipped spec files. */
static void test_shipped_specs_rules(void **state)
{
	(void)state;
	size_t n = 0, kernels = 0;
	char **files = lg_test_list_dir(LG_SOURCE_DIR "/configs/kernels", ".json", &n);
	assert_non_null(files);
	for (size_t i = 0; i < n; i++) {
		lg_spec_file *f = NULL;
		if (lg_spec_file_load(files[i], &f) != LG_OK)
			fail_msg("%s", lg_last_error());
		kernels += check_spec_file(files[i], f);
		lg_spec_file_free(f);
	}
	assert_true(kernels >= 3);
	lg_test_free_list(files);
}

/* The rules for every kernel of a training step of each shipped model. */
static void test_model_steps_rules(void **state)
{
	(void)state;
	size_t n = 0, kernels = 0;
	char **files = lg_test_list_dir(LG_SOURCE_DIR "/configs/models", ".json", &n);
	assert_non_null(files);
	for (size_t i = 0; i < n; i++) {
		char *json = NULL;
		lg_spec_file *f = NULL;
		if (lg_model_expand_file(files[i], &json) != LG_OK ||
		    lg_spec_file_parse(json, strlen(json), files[i], &f) != LG_OK)
			fail_msg("%s", lg_last_error());
		kernels += check_spec_file(files[i], f);
		lg_spec_file_free(f);
		free(json);
	}
	assert_true(kernels >= 3 * n);
	lg_test_free_list(files);
}

int main(void)
{
	/* per case: the text matches (or is rewritten), then NVRTC compiles it */
	struct CMUnitTest tests[2 * NCASES + 2];
	char names[2 * NCASES][96];
	for (size_t i = 0; i < NCASES; i++) {
		snprintf(names[2 * i], sizeof names[0], "%s", cases[i].name);
		snprintf(names[2 * i + 1], sizeof names[0], "%s nvrtc %s", cases[i].name,
			 cases[i].arch);
		tests[2 * i] = (struct CMUnitTest){.name = names[2 * i],
						   .test_func = test_matches,
						   .initial_state = (void *)&cases[i]};
		tests[2 * i + 1] = (struct CMUnitTest){.name = names[2 * i + 1],
						       .test_func = test_compiles,
						       .initial_state = (void *)&cases[i]};
	}
	tests[2 * NCASES] = (struct CMUnitTest){.name = "shipped specs: the rules of generated code",
						.test_func = test_shipped_specs_rules};
	tests[2 * NCASES + 1] = (struct CMUnitTest){.name = "model steps: the rules of generated code",
						    .test_func = test_model_steps_rules};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
