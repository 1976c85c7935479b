#!/usr/bin/env bash
# session 18, device call 4: the second round (permute pipelined, K6, plain norms), then the Python bench
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s); left() { echo $(( 530 - ($(date +%s) - T0) )); }
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
CTESTS="gpu_test_moe:test_permute gpu_test_moe:test_permute_pipelined gpu_test_moe:test_unpermute
 gpu_test_moe:test_no_optional gpu_test_moe:test_deterministic gpu_test_moe:test_permute_quant
 gpu_test_swiglu_quant gpu_test_fp8_quant gpu_test_k1 gpu_test_rmsnorm_router:test_tiles gpu_test_lists" \
PYTESTS="python/tests/test_gpu_moe.py python/tests/test_gpu_quant.py" \
  tools/device_tests.sh 130 > /dev/null 2>&1
echo "tests done at $(( $(date +%s) - T0 )) s" >> "$OUT/summary.txt"
b() { # SPEC TOKENS
  local l; l=$(left); [[ $l -lt 20 ]] && { echo "skip $1"; return; }
  echo "== lingen bench $1 --tokens $2"
  timeout $(( l < 90 ? l : 90 )) build-device/lingen bench "$1" --tokens "$2" 2>&1 | grep -E "^lg_|ceiling|rror|^kernel"
}
{
b configs/kernels/moe.json 8192
b configs/kernels/swiglu-quant.json 65536
b configs/kernels/ling-mini-2.0-norms.json 128,1024,8192
b configs/kernels/rmsnorm-variants.json 8192
b configs/kernels/fp8-quant-layouts.json 65536
b .carry/gn.json 144000
} > "$OUT/bench.txt" 2>&1
echo "bench done at $(( $(date +%s) - T0 )) s" >> "$OUT/bench.txt"
site=/tmp/site
l=$(left)
if [[ $l -gt 60 ]]; then
  export PYTHONPATH=$site PYTHONUNBUFFERED=1
  timeout $(( l - 10 )) python3 -m lingen.bench --quick --json "$OUT/pybench.json" --markdown "$OUT/pybench.md" \
    > /dev/null 2> "$OUT/pybench-rows.txt"
  echo "pybench rc=$? at $(( $(date +%s) - T0 )) s" >> "$OUT/bench.txt"
fi
