#!/usr/bin/env bash
# session 21, device call 4: experiment builds of liblingen (what the heads / tails, the grid's surplus and the scan cost)
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
. tools/device_env.sh; device_env build-device
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site dist/lingen-*.whl .whl/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site
r() { echo "== $1: $2 $3"; LINGEN_CACHE_DIR=/tmp/cache-$1 LD_LIBRARY_PATH=$(dirname "$4") LINGEN_LIBRARY=$4 timeout 100 python3 .carry/k6exp.py $2 $3 2>&1 | tail -8; }
{
r base counts "" "$PWD/build-device/liblingen.so"
r A counts "" "$PWD/.carry/libA/liblingen.so"
r base experts 1,128,256,512 "$PWD/build-device/liblingen.so"
r B experts 1,128,256,512 "$PWD/.carry/libB/liblingen.so"
r C experts 1 "$PWD/.carry/libC/liblingen.so"
echo "done at $(( $(date +%s) - T0 )) s"
} > "$OUT/k6exp.txt" 2>&1
true
