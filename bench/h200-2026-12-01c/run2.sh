#!/usr/bin/env bash
# session 18, device call 2: the merged ce, k6, attn branches
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s); left() { echo $(( 575 - ($(date +%s) - T0) )); }
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
CTESTS="gpu_test_swiglu_quant gpu_test_fp8_quant gpu_test_k1 gpu_test_cross_entropy gpu_test_qk_norm_rope
 gpu_test_group_rmsnorm_gate gpu_test_moe:test_permute_quant gpu_test_rmsnorm_router gpu_test_router_gemm:test_tiles90" \
PYTESTS="python/tests/test_gpu_cross_entropy.py python/tests/test_gpu_gate.py python/tests/test_gpu_rope.py
 python/tests/test_gpu_swiglu.py python/tests/test_gpu_rmsnorm_router.py python/tests/test_gpu_quant.py" \
  tools/device_tests.sh 170 > /dev/null 2>&1
echo "tests done at $(( $(date +%s) - T0 )) s" >> "$OUT/summary.txt"
b() { # SPEC TOKENS
  local l; l=$(left); [[ $l -lt 20 ]] && { echo "skip $1"; return; }
  echo "== lingen bench $1 --tokens $2"
  timeout $(( l < 100 ? l : 100 )) build-device/lingen bench "$1" --tokens "$2" 2>&1 | grep -E "^lg_|ceiling|rror|^kernel"
}
{
b .carry/attn4.json 4096
b .carry/ce3.json 8192
b configs/kernels/swiglu-quant.json 65536
b configs/kernels/swiglu-quant.json 8192
b .carry/gn.json 144000
b .carry/cz.json 262144
b configs/kernels/swiglu-quant-variants.json 65536
b bench/ce-tiles.json 8192
b configs/kernels/ling-mini-2.0-norms.json 8192
} > "$OUT/bench.txt" 2>&1
echo "bench done at $(( $(date +%s) - T0 )) s" >> "$OUT/bench.txt"
l=$(left)
if [[ $l -gt 60 ]]; then
  timeout $(( l > 150 ? 140 : l - 10 )) tools/device_ncu.sh \
   .carry/ce3.json:8192:lg_cross_entropy_fwd_bf16_v157184 \
   configs/kernels/swiglu-quant.json:65536:lg_batch_swiglu_quant_fwd \
   configs/kernels/swiglu-quant.json:65536:lg_batch_swiglu_quant_bwd \
   .carry/attn4.json:4096:lg_qk_norm_rope:3 \
   .carry/attn4.json:4096:lg_group_rmsnorm_gate:3 > /dev/null 2>&1
fi
l=$(left)
if [[ $l -gt 40 ]]; then
  cp configs/tuning/sm_90a.json "$OUT/sm_90a.json"
  timeout $(( l - 5 )) build-device/lingen tune .carry/attn4.json --tokens 4096 --reps 20 -o "$OUT/sm_90a.json" > "$OUT/tune.txt" 2>&1
fi
echo "all done at $(( $(date +%s) - T0 )) s" >> "$OUT/bench.txt"
