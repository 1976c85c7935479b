#!/usr/bin/env bash
# session 20, device call 9: the Python bench's K6 / K7 / fp8 rows beside their peers
set -u
cd "$(dirname "$0")/.."
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
. tools/device_env.sh; device_env build-device
site=/tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" dist/lingen-*.whl .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$site PYTHONUNBUFFERED=1
timeout 280 python3 -m lingen.bench --quick --only swiglu_quant --only batch_swiglu_quant --only fp8_quant_batched \
  --json "$OUT/pybench-k6.json" --markdown "$OUT/pybench-k6.md" > "$OUT/pybench-k6.txt" 2> "$OUT/pybench-k6.err"
tail -5 "$OUT/pybench-k6.err" >> "$OUT/pybench-k6.txt"
true
