#!/bin/bash
# row_map.sh KEYS T: generate moe_row_map for sm_80 with the spec keys KEYS
# (JSON members: experts, top_k, multiple, routing, tile), run it on the CPU
# through emu.h at T tokens (the count kernel, then the map kernel, blocks
# one after another) and compare every
# output with a plain reference (driver_row_map.cpp). Example, from the
# repository root after a build:
#   tools/emu/row_map.sh '"experts": 96, "top_k": 6, "multiple": 128, "routing": "topk_i64"' 1000
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$root/tools/emu/emu.h" "$root/tools/emu/emu_cuda.h" "$root/tools/emu/driver_row_map.cpp" "$work/"
cd "$work"
keys=$1 T=$2
echo "{\"kernels\": [{\"op\": \"moe_row_map\", \"pass\": \"forward\", \"dtype\": \"bf16\", $keys}]}" > spec.json
"$root/build/lingen" gen spec.json -o gen --arch sm_80 >/dev/null
f=$(ls gen/*.cu)
# the spec's own helpers with PTX (L2 loads) are the driver's
python3 - "$f" > kernel.inc <<'PY'
import re, sys
src = open(sys.argv[1]).read()
head, rest = src.split("// ----- helpers for this spec", 1)
head = "\n".join(l for l in head.splitlines() if l.startswith("typedef"))
rest = re.sub(r"static __device__ __forceinline__ (int|uint4) (lg_ld_l2|lg_ld4_l2)\(.*?\n}\n", "", rest,
              flags=re.S)
print(head + "\n// ----- helpers for this spec" + rest)
PY
get() { python3 -c "import json,sys; k=json.load(open('spec.json'))['kernels'][0]; print(k.get('$1', '$2') if '$1' != 'slices' else k.get('tile', {}).get('slices', 128))"; }
E=$(get experts) K=$(get top_k) M=$(get multiple 16) R=$(get routing mask) SL=$(get slices)
case $R in mask) RI=0 ;; topk_i32) RI=1 ;; *) RI=2 ;; esac
base=$(basename "$f" .cu)
g++ -std=c++20 -O1 -pthread -w -DEE=$E -DKK=$K -DMM=$M -DTOK=$T -DROUTING=$RI -DSLICES=$SL -DTHREADS=512 \
	-DENTRY=$base -DCOUNT=${base}_count driver_row_map.cpp -o drv
./drv
