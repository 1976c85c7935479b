#!/usr/bin/env bash
# session 19, device call 3: the Python side-by-side bench (quick)
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
site=/tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" dist/lingen-*.whl .whl/*.whl > /dev/null 2>&1
. tools/device_env.sh; device_env build-device
export PYTHONPATH=$site PYTHONUNBUFFERED=1
timeout 360 python3 -m lingen.bench --quick --json "$OUT/pybench.json" --markdown "$OUT/pybench.md" > /dev/null 2> "$OUT/pybench-rows.txt"
echo "pybench rc=$? at $(( $(date +%s) - T0 )) s" >> "$OUT/pybench-rows.txt"
