#!/usr/bin/env bash
# session 21, device call 7: the final state: GPU tests of the changed families, bench, CUDA-graph counts, Python bench
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s); left() { echo $(( 560 - ($(date +%s) - T0) )); }
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
b() { echo "== lingen bench $1 --tokens $2"
  timeout 90 build-device/lingen bench "$1" --tokens "$2" 2>&1 | grep -E "^lg_|ceiling|rror|^kernel"; }
{
b configs/kernels/swiglu-quant.json 65536
b configs/kernels/swiglu-quant.json 8192
b configs/kernels/fp8-quant-layouts.json 65536
b configs/kernels/moe.json 8192
} > "$OUT/bench.txt" 2>&1
CTESTS="gpu_test_swiglu_quant gpu_test_fp8_quant gpu_test_moe:test_permute_quant gpu_test_moe:test_deterministic
 gpu_test_quant_tiles gpu_test_quant_typed gpu_test_k1 gpu_test_rmsnorm_router" \
PYTESTS="python/tests/test_gpu_swiglu.py python/tests/test_gpu_quant.py" \
  tools/device_tests.sh 220 > /dev/null 2>&1
echo "tests done at $(( $(date +%s) - T0 )) s" >> "$OUT/summary.txt"
. tools/device_env.sh; device_env build-device
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
timeout 100 python3 .carry/k6counts2.py > "$OUT/k6counts2.txt" 2>&1
l=$(left); [[ $l -gt 60 ]] && timeout $(( l - 10 )) python3 -m lingen.bench --quick --only batch_swiglu_quant --only fp8_quant_batched \
  --json "$OUT/pybench-k6.json" --markdown "$OUT/pybench-k6.md" > "$OUT/pybench-k6.txt" 2> "$OUT/pybench-k6.err"
echo "done at $(( $(date +%s) - T0 )) s" >> "$OUT/summary.txt"
true
