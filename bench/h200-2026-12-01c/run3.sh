#!/usr/bin/env bash
# session 18, device call 3: router_gemm backward (dx/dw kernels), rmsnorm_router on wgmma, MoE (row map, pipelined default)
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - T0) )); }
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
CTESTS="gpu_test_router_gemm gpu_test_rmsnorm_router gpu_test_moe:test_row_map gpu_test_moe:test_permute
 gpu_test_moe:test_permute_backward gpu_test_moe:test_unpermute gpu_test_moe:test_permute_quant
 gpu_test_moe:test_no_optional gpu_test_moe:test_deterministic gpu_test_moe:test_pipelined gpu_test_bundle" \
PYTESTS="python/tests/test_gpu_router.py python/tests/test_gpu_rmsnorm_router.py python/tests/test_gpu_moe.py
 python/tests/test_torch.py" \
  tools/device_tests.sh 170 > /dev/null 2>&1
(export LINGEN_PDL=0; timeout 60 build-device/tests/gpu_test_moe > /dev/null 2>&1; echo "PDL=0 gpu_test_moe rc=$?") >> "$OUT/summary.txt" 2>&1 &
b() { # SPEC TOKENS
  local l; l=$(left); [[ $l -lt 20 ]] && { echo "skip $1"; return; }
  echo "== lingen bench $1 --tokens $2"
  timeout $(( l < 100 ? l : 100 )) build-device/lingen bench "$1" --tokens "$2" 2>&1 | grep -E "^lg_|ceiling|rror|^kernel"
}
wait
echo "tests done at $(( $(date +%s) - T0 )) s" >> "$OUT/summary.txt"
{
b configs/kernels/router-gemm.json 8192
b configs/kernels/rmsnorm-router.json 8192
b configs/kernels/moe.json 8192
b configs/kernels/moe-variants.json 8192
b configs/kernels/moe.json 128
b .carry/cz.json 262144
} > "$OUT/bench.txt" 2>&1
echo "bench done at $(( $(date +%s) - T0 )) s" >> "$OUT/bench.txt"
l=$(left)
if [[ $l -gt 60 ]]; then
  timeout $(( l > 130 ? 120 : l - 10 )) tools/device_ncu.sh \
   configs/kernels/router-gemm.json:8192:lg_router_gemm_bwd_bf16_h2048_e256_d:2 \
   configs/kernels/rmsnorm-router.json:8192:lg_rmsnorm_router_fwd_bf16_h2048_e256_rowwise_pow2 \
   configs/kernels/moe.json:8192:lg_moe_row_map_fwd_bf16_e256_k8_m16_mask:2 > /dev/null 2>&1
fi
l=$(left)
if [[ $l -gt 40 ]]; then
  timeout $(( l - 5 )) build-device/lingen tune .carry/rbwd.json --tokens 8192 --reps 20 -o "$OUT/sm_90a.json" > "$OUT/tune.txt" 2>&1
fi
echo "all done at $(( $(date +%s) - T0 )) s" >> "$OUT/bench.txt"
