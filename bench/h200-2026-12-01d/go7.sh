#!/usr/bin/env bash
set -u
cd "$(dirname "$0")/.."
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
CTESTS="gpu_test_router_gemm gpu_test_moe:test_row_map gpu_test_moe:test_deterministic gpu_test_moe:test_permute_quant gpu_test_moe:test_no_optional" \
PYTESTS="python/tests/test_gpu_moe.py" tools/device_tests.sh 250 > /dev/null 2>&1
true
