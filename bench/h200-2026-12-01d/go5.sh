#!/usr/bin/env bash
set -u
cd "$(dirname "$0")/.."
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
. tools/device_env.sh; device_env build-device
{
echo "== check, seed 1"; timeout 150 build-device/lingen check .carry/chk.json --tokens 8192 --seed 1 2>&1 | grep -E "PASS|FAIL|dw |dx |seed"
echo "== tune row map"; timeout 150 build-device/lingen tune .carry/rowmap.json --tokens 8192 --reps 20 2>&1 | tail -20
} > "$OUT/final.txt" 2>&1
true
