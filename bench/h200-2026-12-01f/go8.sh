#!/usr/bin/env bash
# session 21, device call 8: ncu on the issue-9 kernels that miss at their goal shapes (8192 tokens)
set -u
cd "$(dirname "$0")/.."
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
timeout 330 tools/device_ncu.sh \
  "configs/kernels/ling-mini-2.0-norms.json:8192:rmsnorm_quant_fwd_bf16_h2048_both_pow2:2" \
  "configs/kernels/ling-mini-2.0-norms.json:8192:^lg_rmsnorm_fwd_bf16_h2048$" \
  "configs/kernels/ling-mini-2.0-norms.json:8192:^lg_rmsnorm_bwd_bf16_h2048:2" \
  "configs/kernels/rmsnorm-variants.json:8192:^lg_rmsnorm_fwd_bf16_h4096$" \
  "configs/kernels/swiglu-quant.json:8192:^lg_swiglu_quant_fwd_bf16_n512_both_pow2$" \
  "configs/kernels/swiglu-quant.json:8192:^lg_swiglu_quant_fwd_bf16_n2048_both_pow2$" \
  "configs/kernels/swiglu-quant.json:8192:^lg_swiglu_quant_bwd_bf16_n512_both_pow2$" > /dev/null 2>&1
true
