#!/usr/bin/env bash
# session 20, device call 7: per-expert qt heads and tails a byte a lane; the issue-9 audit's GPU tests
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
b() { echo "== lingen bench $1 --tokens $2"
  timeout 90 build-device/lingen bench "$1" --tokens "$2" 2>&1 | grep -E "^lg_|ceiling|rror|^kernel"; }
{
b configs/kernels/swiglu-quant.json 65536
b .carry/c3.json 65536
b configs/kernels/swiglu-quant.json 8192
b configs/kernels/moe.json 8192
} > "$OUT/bench.txt" 2>&1
echo "bench done at $(( $(date +%s) - T0 )) s" >> "$OUT/bench.txt"
CTESTS="gpu_test_swiglu_quant gpu_test_fp8_quant gpu_test_moe:test_permute_quant gpu_test_moe:test_deterministic
 gpu_test_quant_typed gpu_test_quant_tiles:test_rmsnorm_quant gpu_test_quant_tiles:test_rmsnorm gpu_test_quant_tiles:test_fp8_quant
 gpu_test_quant_tiles:test_swiglu_quant gpu_test_quant_tiles:test_batch_swiglu_quant gpu_test_k1 gpu_test_bundle" \
PYTESTS="python/tests/test_torch.py python/tests/test_gpu_swiglu.py python/tests/test_gpu_quant.py python/tests/test_gpu_moe.py" \
  tools/device_tests.sh 280 > /dev/null 2>&1
echo "tests done at $(( $(date +%s) - T0 )) s" >> "$OUT/summary.txt"
. tools/device_env.sh; device_env build-device
export PYTHONPATH=/tmp/site
timeout 150 python3 .carry/k6counts2.py > "$OUT/k6counts2.txt" 2>&1
echo "done at $(( $(date +%s) - T0 )) s" >> "$OUT/summary.txt"
true
