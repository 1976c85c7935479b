#!/bin/bash
# rmsnorm_router.sh KEYS M BM BN THREADS TERMS: generate rmsnorm_router
# (quant.output rowwise) for sm_80 with the spec keys KEYS (JSON members),
# run it on the CPU through emu.h at M tokens and compare with a float64
# reference (driver_rmsnorm_router.cpp). BM, BN, THREADS: the plan's tile
# (`lingen gen` shows it); TERMS: 1 + precision. Example, from the
# repository root after a build:
#   tools/emu/rmsnorm_router.sh '"hidden": 1000, "experts": 97' 37 64 128 256 1
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$root/tools/emu/emu.h" "$root/tools/emu/emu_cuda.h" "$root/tools/emu/emu_io.h" "$root/tools/emu/driver_rmsnorm_router.cpp" "$work/"
cd "$work"
keys=$1 M=$2 BM=$3 BN=$4 TH=$5 TERMS=$6
echo "{\"kernels\": [{\"op\": \"rmsnorm_router\", \"pass\": \"forward\", \"dtype\": \"bf16\", $keys, \"quant\": {\"output\": \"rowwise\"}}]}" > spec.json
"$root/build/lingen" gen spec.json -o gen --arch sm_80 >/dev/null
f=$(ls gen/*.cu)
python3 "$root/tools/emu/cut.py" $f > kernel.inc
HID=$(echo "$keys" | sed 's/.*"hidden": \([0-9]*\).*/\1/'); EXP=$(echo "$keys" | sed 's/.*"experts": \([0-9]*\).*/\1/')
g++ -std=c++20 -O1 -pthread -w -DHID=$HID -DEXP=$EXP -DMTOK=$M -DBM=$BM -DBN=$BN -DTHREADS=$TH -DTERMS=$TERMS \
	-DENTRY=$(basename $f .cu) driver_rmsnorm_router.cpp -o drv
./drv
