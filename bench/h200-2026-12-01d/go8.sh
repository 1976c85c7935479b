#!/usr/bin/env bash
set -u
cd "$(dirname "$0")/.."
CTESTS="gpu_test_k1:test_k1_fused gpu_test_k1:test_k1_slab gpu_test_router_gemm" \
PYTESTS="python/tests/test_gpu_moe.py python/tests/test_gpu_quant.py python/tests/test_torch.py" tools/device_tests.sh 250 > /dev/null 2>&1
true
