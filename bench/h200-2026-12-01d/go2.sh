#!/usr/bin/env bash
# session 19, device call 2: the lop3 fix, new defaults; tune the router backward
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
CTESTS="gpu_test_k1 gpu_test_rmsnorm_router gpu_test_group_rmsnorm_gate gpu_test_bundle gpu_test_moe:test_deterministic gpu_test_moe:test_permute_quant gpu_test_moe:test_no_optional gpu_test_fp8_quant gpu_test_swiglu_quant" \
PYTESTS="python/tests/test_gpu.py python/tests/test_gpu_rmsnorm_router.py python/tests/test_gpu_gate.py python/tests/test_gpu_moe.py" \
  tools/device_tests.sh 170 > /dev/null 2>&1
timeout 120 build-device/lingen tune .carry/rbwd.json --tokens 8192 --reps 20 -o "$OUT/tune-rbwd.json" > "$OUT/tune-rbwd.txt" 2>&1
echo "tests + tune done at $(( $(date +%s) - T0 )) s" >> "$OUT/summary.txt"
b() { echo "== lingen bench $1 --tokens $2"; timeout 90 build-device/lingen bench "$1" --tokens "$2" 2>&1 | grep -E "^lg_|ceiling|rror|^kernel"; }
{
b bench/k1-rows.json 8192
b configs/kernels/ling-mini-2.0-norms.json 128,1024,8192
b bench/h200-2026-12-01c/attn4.json 4096
b configs/kernels/moe.json 8192
b configs/kernels/router-gemm.json 8192
b bench/k1-rows.json 128,1024,16384
} > "$OUT/bench.txt" 2>&1
echo "bench done at $(( $(date +%s) - T0 )) s" >> "$OUT/bench.txt"
l=$(( 570 - ($(date +%s) - T0) ))
[[ $l -gt 40 ]] && timeout $(( l - 5 )) tools/device_ncu.sh bench/k1-rows.json:8192:rmsnorm_quant_fwd_bf16_h2048_both_pow2\$:2 configs/kernels/ling-mini-2.0-norms.json:8192:rmsnorm_fwd configs/kernels/moe.json:8192:permute_quant > /dev/null 2>&1
true
