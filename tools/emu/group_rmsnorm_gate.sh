#!/bin/bash
# group_rmsnorm_gate.sh PASS KEYS B L [CTAS]: generate group_rmsnorm_gate for
# sm_80 with the spec keys KEYS (JSON members: dim, groups, transpose,
# shared_weight, tile), run it on the CPU through emu.h at batch B, seq L and
# compare with a float64 reference (driver_group_rmsnorm_gate.cpp), with the
# tolerances of gen/ref/group_rmsnorm_gate_ref.c. CTAS: the forward's grid (its
# kernels stride by gridDim; default 3, so the token loop turns); the
# backward's is lg_ctas(B L) as the kernel computes it. Example, from the
# repository root after a build:
#   tools/emu/group_rmsnorm_gate.sh backward '"dim": 192, "groups": 3' 2 37
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$root/tools/emu/emu.h" "$root/tools/emu/emu_cuda.h" "$root/tools/emu/emu_io.h" "$root/tools/emu/driver_group_rmsnorm_gate.cpp" "$work/"
cd "$work"
pass=$1 keys=$2 B=$3 L=$4 CTAS=${5:-3}
echo "{\"kernels\": [{\"op\": \"group_rmsnorm_gate\", \"pass\": \"$pass\", \"dtype\": \"bf16\", $keys}]}" > spec.json
"$root/build/lingen" gen spec.json -o gen --arch sm_80 >/dev/null
f=$(ls gen/*.cu)
# shared arrays: one per block (blocks run one after another), the dynamic one in emu.h's smem
python3 "$root/tools/emu/cut.py" $f |
	sed -e 's/extern __shared__ __align__(16) float dwp\[\];/float *const dwp = (float *)smem;/' \
	    -e 's/^\(\s*\)__shared__ /\1static /' > kernel.inc
threads=$(grep -o '__launch_bounds__([0-9]*' kernel.inc | head -1 | tr -dc 0-9)
get() { echo "$keys" | grep -o "\"$1\": *[a-z0-9]*" | sed 's/.*: *//'; }
DIM=$(get dim); G=$(get groups); T=$(get transpose); S=$(get shared_weight)
G=${G:-4}; T=${T:-true}; S=${S:-false}
[ "$T" = true ] && T=1 || T=0; [ "$S" = true ] && S=1 || S=0
D="-DBWD=0 -DENTRY=$(basename $f .cu)"
[ $pass = backward ] && D="-DBWD=1 -DENTRY=$(basename $f .cu) -DDW_ENTRY=$(basename $f .cu)_dw"
g++ -std=c++20 -O1 -pthread -w -DDIM=$DIM -DG=$G -DTR=$T -DSH=$S -DBB=$B -DLL=$L -DCTAS=$CTAS \
	-DTHREADS=$threads $D driver_group_rmsnorm_gate.cpp -o drv
./drv
