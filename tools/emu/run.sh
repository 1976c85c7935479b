#!/bin/bash
# run.sh PASS KEYS M BM BN THREADS SPLIT TERMS [XBM XBN XTHREADS]: generate router_gemm for
# sm_80 with the spec keys KEYS (JSON members), run it on the CPU through
# emu.h at M tokens and compare with a float64 reference (driver.cpp). BM,
# BN, THREADS, SPLIT, TERMS: the plan's tile, threads, dw slices and dy
# terms (as `lingen gen` shows them); in the backward BM BN THREADS are dw's
# and XBM XBN XTHREADS dx's (default 128 256 512); TF32=1 in the
# environment for "precision": "tf32" (TERMS 2). Example, from the
# repository root after a build:
#   tools/emu/run.sh backward '"hidden": 96, "experts": 40' 37 128 128 256 16 1 128 128 256
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$root/tools/emu/emu.h" "$root/tools/emu/emu_cuda.h" "$root/tools/emu/driver.cpp" "$work/"
cd "$work"
pass=$1 keys=$2 M=$3 BM=$4 BN=$5 TH=$6 SPLIT=$7 TERMS=$8 XBM=${9:-128} XBN=${10:-256} XTH=${11:-512}
echo "{\"kernels\": [{\"op\": \"router_gemm\", \"pass\": \"$pass\", \"dtype\": \"bf16\", $keys}]}" > spec.json
rm -rf gen && "$root/build/lingen" gen spec.json -o gen --arch sm_80 >/dev/null
f=$(ls gen/*.cu)
awk '/^\/\/ ----- helpers from templates/{skip=1} /^\/\/ ----- helpers for this spec/{skip=0} !skip' $f > kernel.inc
base=$(basename $f .cu)
HID=$(echo "$keys" | sed 's/.*"hidden": \([0-9]*\).*/\1/'); EXP=$(echo "$keys" | sed 's/.*"experts": \([0-9]*\).*/\1/')
if [ $pass = forward ]; then D="-DBWD=0 -DFWD_ENTRY=$base"; else D="-DBWD=1 -DDX_ENTRY=${base}_dx -DDW_ENTRY=${base}_dw -DSUM_ENTRY=${base}_dwsum"; fi
g++ -std=c++20 -O1 -pthread -w -DTF32=${TF32:-0} -DHID=$HID -DEXP=$EXP -DMTOK=$M -DBM=$BM -DBN=$BN -DTHREADS=$TH -DSPLIT=$SPLIT -DTERMS=$TERMS -DXBM=$XBM -DXBN=$XBN -DXTHREADS=$XTH $D driver.cpp -o drv
./drv
