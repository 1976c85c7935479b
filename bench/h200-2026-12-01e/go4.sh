#!/usr/bin/env bash
# session 20, device call 4: K6 with prefetch by default in the backward; K6 under count patterns
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
{
echo "== lingen bench configs/kernels/swiglu-quant.json --tokens 65536"
build-device/lingen bench configs/kernels/swiglu-quant.json --tokens 65536 2>&1 | grep -E "^lg_|ceiling|rror|^kernel"
echo "== lingen bench configs/kernels/swiglu-quant.json --tokens 8192"
build-device/lingen bench configs/kernels/swiglu-quant.json --tokens 8192 2>&1 | grep -E "^lg_|ceiling|rror|^kernel"
} > "$OUT/bench.txt" 2>&1
CTESTS="gpu_test_swiglu_quant" PYTESTS="python/tests/test_gpu_swiglu.py" tools/device_tests.sh 200 > /dev/null 2>&1
export PYTHONPATH=/tmp/site
timeout 200 python3 .carry/k6counts.py > "$OUT/k6counts.txt" 2>&1
echo "done at $(( $(date +%s) - T0 )) s" >> "$OUT/summary.txt"
true
