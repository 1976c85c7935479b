#!/usr/bin/env bash
# session 18, device call 1: every GPU test, then benches, then ncu on the misses
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s); left() { echo $(( 570 - ($(date +%s) - T0) )); }
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
CTESTS="gpu_test_k1 gpu_test_lists gpu_test_bundle gpu_test_qk_norm_rope gpu_test_group_rmsnorm_gate
 gpu_test_rmsnorm_router gpu_test_router_gemm gpu_test_fp8_quant gpu_test_swiglu_quant gpu_test_cross_entropy
 gpu_test_moe:test_row_map gpu_test_moe:test_permute gpu_test_moe:test_permute_backward
 gpu_test_moe:test_unpermute gpu_test_moe:test_permute_quant gpu_test_moe:test_no_optional
 gpu_test_moe:test_deterministic gpu_test_moe:test_pipelined" \
  tools/device_tests.sh 190 > /dev/null 2>&1
echo "tests done at $(( $(date +%s) - T0 )) s" >> "$OUT/summary.txt"
b() { # SPEC TOKENS
  local l; l=$(left); [[ $l -lt 20 ]] && { echo "skip $1"; return; }
  echo "== lingen bench $1 --tokens $2"
  timeout $(( l < 130 ? l : 130 )) build-device/lingen bench "$1" --tokens "$2" 2>&1 | grep -E "^lg_|ceiling|rror|^kernel"
}
{
b .carry/ce3.json 8192
b configs/kernels/moe.json 8192
b configs/kernels/moe-variants.json 8192
b bench/h200-2026-12-01b/min-ctas-variants.json 8192
b configs/kernels/swiglu-quant.json 8192
b configs/kernels/rmsnorm-router.json 8192
b configs/kernels/router-gemm.json 8192
} > "$OUT/bench.txt" 2>&1
echo "bench done at $(( $(date +%s) - T0 )) s" >> "$OUT/bench.txt"
l=$(left)
if [[ $l -gt 60 ]]; then
  timeout $(( l - 10 )) tools/device_ncu.sh \
   configs/kernels/swiglu-quant.json:8192:lg_batch_swiglu_quant_fwd \
   configs/kernels/moe.json:8192:lg_moe_permute_quant_fwd \
   configs/kernels/moe.json:8192:lg_moe_unpermute_fwd_bf16_h2048_e256_k8_m16\$ \
   configs/kernels/qk-norm-rope.json:4096:lg_qk_norm_rope_fwd_bf16_d128_hq16_hkv4\$ \
   configs/kernels/group-rmsnorm-gate.json:4096:lg_group_rmsnorm_gate_fwd_bf16_d2048_g4\$ \
   configs/kernels/ling-mini-2.0-norms.json:8192:lg_rmsnorm_quant_fwd_bf16_h2048_both_pow2:2 \
   configs/kernels/moe.json:8192:lg_moe_row_map:2 \
   configs/kernels/router-gemm.json:8192:lg_router_gemm_bwd:2 > /dev/null 2>&1
fi
echo "all done at $(( $(date +%s) - T0 )) s" >> "$OUT/bench.txt"
