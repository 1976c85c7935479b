#!/usr/bin/env bash
# session 20, device call 10: the review's mends (lg_gpu_case_check, _ce_reduce / _ce_dloss)
set -u
cd "$(dirname "$0")/.."
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
CTESTS="gpu_test_cross_entropy:test_labels_offset gpu_test_fp8_quant:test_batched_counts" \
PYTESTS="python/tests/test_gpu_cross_entropy.py" tools/device_tests.sh 200 > /dev/null 2>&1
. tools/device_env.sh; device_env build-device
timeout 60 build-device/lingen check configs/kernels/fp8-quant.json --tokens 1,333 > "$OUT/check.txt" 2>&1; echo "rc=$?" >> "$OUT/check.txt"
true
