/*
 * families.h - the list of kernel families: one line per family.
 *
 * X(name, NAME): gen/families/<name>.c defines `const struct lg_family
 * lg_family_<name>` and gen/ref/<name>_ref.c `const struct lg_ref_family
 * lg_ref_<name>`. The op enum (LG_OP_<NAME>), the op names and both
 * registries are made from this list, so a family cannot be half
 * registered: a missing definition does not link.
 */
#ifndef LG_FAMILIES_H
#define LG_FAMILIES_H

#define LG_FAMILIES(X)                                                                   \
	X(rmsnorm_quant, RMSNORM_QUANT) /* K1: RMSNorm + 1x128/128x1 FP8 quantisation */ \
	X(rmsnorm, RMSNORM)             /* K1: plain RMSNorm forward / backward */       \
	X(fp8_quant, FP8_QUANT)         /* 1.3: blockwise FP8 quantisation of x */       \
	X(fp8_quant_batched, FP8_QUANT_BATCHED) /* 1.3: per-expert FP8 quantisation */   \
	X(fp8_quant_weight, FP8_QUANT_WEIGHT) /* 1.3: weights, 128x128 tiles */          \
	X(group_rmsnorm_gate, GROUP_RMSNORM_GATE) /* K8: group RMSNorm x sigmoid gate */ \
	X(qk_norm_rope, QK_NORM_ROPE)   /* K2: split qkv + q/k RMSNorm + half RoPE */    \
	X(cross_entropy, CROSS_ENTROPY) /* K9: softmax cross entropy, vocab-parallel */  \
	X(cross_entropy_quant, CROSS_ENTROPY_QUANT) /* K9 + 1.3: CE gradient as FP8 copies */ \
	X(grad_norm, GRAD_NORM)         /* K10: L2 / L1 / max norm of a tensor list */   \
	X(count_zero, COUNT_ZERO)       /* K11: zeros in a tensor list */                \
	X(swiglu_quant, SWIGLU_QUANT)   /* K7: SwiGLU + 1x128/128x1 FP8 quantisation */  \
	X(batch_swiglu_quant, BATCH_SWIGLU_QUANT) /* K6: per-expert weighted SwiGLU + FP8 */  \
	X(router_gemm, ROUTER_GEMM)     /* K3: router GEMM, fp32 logits, fwd / bwd */  \
	X(moe_row_map, MOE_ROW_MAP)     /* K4: padded MoE row map from a mask or top-k */ \
	X(moe_permute, MOE_PERMUTE)     /* K4: MoE dispatch into padded expert rows */    \
	X(moe_unpermute, MOE_UNPERMUTE) /* K5: MoE combine of expert rows into tokens */  \
	X(moe_permute_quant, MOE_PERMUTE_QUANT) /* K4b: MoE permute + pad + per-expert FP8 quant */ \
	X(rmsnorm_router, RMSNORM_ROUTER) /* K3b: RMSNorm + router GEMM + 1x128 FP8 quant */ \
	X(fp8_gemm, FP8_GEMM)           /* 16: blockwise FP8 GEMM fwd / dgrad / wgrad */ \
	X(fp8_grouped_gemm, FP8_GROUPED_GEMM) /* 16: per-expert FP8 GEMM fwd / dgrad */ \
	X(adamw, ADAMW)                 /* issue 35: fused AdamW over a parameter list */ \
	X(adamw_fp8, ADAMW_FP8)         /* issue 35: AdamW of a weight + its FP8 copies */

#endif
