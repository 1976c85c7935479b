#!/usr/bin/env bash
# session 21, device call 6: token tiles a CTA of the per-expert quantisers (K6 forward default 2; fp8_quant_batched, K4b variants)
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
b() { echo "== lingen bench $1 --tokens $2"
  timeout 90 build-device/lingen bench "$1" --tokens "$2" 2>&1 | grep -E "^lg_|ceiling|rror|^kernel"; }
{
b configs/kernels/swiglu-quant.json 65536
b .carry/k6v6.json 65536
b .carry/k4v6.json 8192
b .carry/k4v6.json 65536
} > "$OUT/bench.txt" 2>&1
CTESTS="gpu_test_swiglu_quant gpu_test_quant_tiles:test_batch_swiglu_quant" \
PYTESTS="python/tests/test_gpu_swiglu.py" \
  tools/device_tests.sh 200 > /dev/null 2>&1
. tools/device_env.sh; device_env build-device
export PYTHONPATH=/tmp/site
timeout 120 python3 .carry/k6counts2.py > "$OUT/k6counts2.txt" 2>&1
echo "done at $(( $(date +%s) - T0 )) s" >> "$OUT/summary.txt"
true
