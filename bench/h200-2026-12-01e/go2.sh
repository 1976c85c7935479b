#!/usr/bin/env bash
# session 20, device call 2: K6 backward cluster variants; the four audit branches' GPU tests
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s); left() { echo $(( 570 - ($(date +%s) - T0) )); }
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
b() { local l; l=$(left); [[ $l -lt 20 ]] && { echo "skip $1"; return; }
  echo "== lingen bench $1 --tokens $2"
  timeout $(( l < 90 ? l : 90 )) build-device/lingen bench "$1" --tokens "$2" 2>&1 | grep -E "^lg_|ceiling|rror|^kernel"; }
{
b .carry/cl.json 65536
b configs/kernels/swiglu-quant.json 65536
b .carry/cl.json 8192
b configs/kernels/router-gemm.json 8192
} > "$OUT/bench.txt" 2>&1
echo "bench done at $(( $(date +%s) - T0 )) s" >> "$OUT/bench.txt"
CTESTS="gpu_test_swiglu_quant gpu_test_qk_norm_rope gpu_test_group_rmsnorm_gate gpu_test_moe:test_typed_launchers
 gpu_test_moe:test_int32_rows gpu_test_moe:test_no_optional gpu_test_moe:test_permute_quant gpu_test_cross_entropy
 gpu_test_lists gpu_test_router_gemm test_sass_wgmma gpu_test_fp8_quant" \
PYTESTS="python/tests/test_gpu_rope.py python/tests/test_gpu_gate.py python/tests/test_gpu_moe.py python/tests/test_gpu_cross_entropy.py python/tests/test_gpu_lists.py python/tests/test_gpu_router.py python/tests/test_torch.py python/tests/test_gpu_swiglu.py" \
  tools/device_tests.sh 330 > /dev/null 2>&1
echo "tests done at $(( $(date +%s) - T0 )) s" >> "$OUT/summary.txt"
l=$(left)
if [[ $l -gt 40 ]]; then
  timeout $(( l - 10 )) build-device/lingen check configs/kernels/router-gemm.json --tokens 127 > "$OUT/check.txt" 2>&1
  echo "check rc=$? at $(( $(date +%s) - T0 )) s" >> "$OUT/check.txt"
fi
true
