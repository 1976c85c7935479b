#!/usr/bin/env bash
# session 20, device call 6: K6 under count patterns, CUDA graphs
set -u
cd "$(dirname "$0")/.."
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
. tools/device_env.sh
device_env build-device
site=/tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" dist/lingen-*.whl .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=$site
timeout 240 python3 .carry/k6counts2.py > "$OUT/k6counts2.txt" 2>&1
true
