#!/usr/bin/env bash
set -u
cd "$(dirname "$0")/.."
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
. tools/device_env.sh; device_env build-device
{
echo "== check, seed 1"; timeout 150 build-device/lingen check .carry/chk.json --tokens 8192 --seed 1 2>&1 | grep -E "PASS|FAIL|seed"
echo "== gpu_test_router_gemm:test_dx_persistent"; LINGEN_TEST_FILTER=test_dx_persistent timeout 200 build-device/tests/gpu_test_router_gemm 2>&1 | grep -E "FAIL|PASSED|FAILED" | head
} > "$OUT/final.txt" 2>&1
true
