#!/usr/bin/env bash
# session 21, device call 9: every GPU test (C and Python) on the final commit
set -u
cd "$(dirname "$0")/.."
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
timeout 250 tools/device_tests.sh 190 > /dev/null 2>&1
true
