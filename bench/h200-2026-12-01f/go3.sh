#!/usr/bin/env bash
# session 21, device call 3: what the per-expert layout costs (K6 at E equal experts; ncu K6 / K7 forward)
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
. tools/device_env.sh; device_env build-device
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site dist/lingen-*.whl .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site
timeout 150 python3 .carry/k6scan.py > "$OUT/k6scan.txt" 2>&1
timeout 200 tools/device_ncu.sh "configs/kernels/swiglu-quant.json:65536:batch_swiglu_quant_fwd_bf16_n512_e256_both_pow2$" \
  "configs/kernels/swiglu-quant.json:65536:^lg_swiglu_quant_fwd_bf16_n512_both_pow2$" \
  "configs/kernels/swiglu-quant.json:65536:batch_swiglu_quant_bwd_bf16_n512_e256_both_pow2$" > /dev/null 2>&1
echo "done at $(( $(date +%s) - T0 )) s" >> "$OUT/k6scan.txt"
true
