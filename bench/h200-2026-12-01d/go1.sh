#!/usr/bin/env bash
export CTESTS_EXTRA="gpu_test_rmsnorm_router gpu_test_cross_entropy gpu_test_bundle gpu_test_lists"
export BENCHES="configs/kernels/router-gemm.json@8192 bench/rmsnorm-stages.json@8192 bench/k1-rows.json@8192 bench/attn-qk-variants.json@4096 bench/h200-2026-12-01c/attn4.json@4096 configs/kernels/moe.json@8192 bench/moe-2026-12-01d/variants.json@8192 bench/k6-variants.json@65536 configs/kernels/swiglu-quant.json@65536 bench/rmsnorm-stages.json@128,1024 bench/k1-rows.json@128,1024"
export NCU="configs/kernels/router-gemm.json:8192:router_gemm_bwd:3"
exec .carry/run1.sh
