#!/bin/bash
# permute_quant.sh KEYS TILE1 TILE2 T G...: generate moe_permute_quant forward
# for sm_80 with the spec keys KEYS (JSON members: hidden, experts, top_k,
# multiple, quant) in two forms, tile objects TILE1 and TILE2 (say the
# per-tile prefetch and tile.persist 1), run them on the CPU through emu.h
# at T tokens (the second at each grid size G given; 0: the full grid) and
# compare every output byte (driver_permute_quant.cpp). Example, from the
# repository root after a build:
#   tools/emu/permute_quant.sh '"hidden": 384, "experts": 13, "top_k": 3, "multiple": 16,
#     "quant": {"output": "both"}' '{"prefetch": 1}' '{"persist": 1}' 300 1 5 0
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$root/tools/emu/emu.h" "$root/tools/emu/emu_io.h" "$root/tools/emu/driver_permute_quant.cpp" "$work/"
cd "$work"
keys=$1 T=$4
tile=(x "$2" "$3")
for p in 1 2; do
	echo "{\"kernels\": [{\"op\": \"moe_permute_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", $keys," \
		"\"tile\": ${tile[$p]}}]}" > spec$p.json
	"$root/build/lingen" gen spec$p.json -o gen$p --arch sm_80 >/dev/null
	f=$(ls gen$p/*.cu)
	e=$(basename "$f" .cu)
	# each kernel in a namespace of its own (their helpers share names), its entry renamed; the
	# dynamic shared memory is the emulator's
	{ echo "namespace k$p {"; python3 "$root/tools/emu/cut.py" "$f" | grep -v '^typedef' |
		sed -e "s/$e/${e}_k$p/g" -e 's/extern __shared__ __align__(16) u8 gx\[\];/u8 *const gx = smem;/'
	  echo "}"; } > k$p.inc
	entry[$p]=${e}_k$p
	threads[$p]=$(sed -n 's/.*__launch_bounds__(\([0-9]*\).*/\1/p' "$f")
done
get() { python3 -c "import json; k=json.load(open('spec1.json'))['kernels'][0]; print(k.get('$1', $2))"; }
H=$(get hidden 0) E=$(get experts 0) K=$(get top_k 0) M=$(get multiple 16)
# k1's feature groups a tile: cdiv(hidden / 128, fblocks) (its plan, as `lingen gen` names it)
FB=$(python3 -c "import json; k=json.load(open('spec1.json'))['kernels'][0]; print(min(k.get('tile', {}).get('fblocks', 4), $H // 128))")
G1=$(( (H / 128 + FB - 1) / FB ))
g++ -std=c++20 -O1 -pthread -w -DHH=$H -DEE=$E -DKK=$K -DMM=$M -DTOK=$T -DG1=$G1 \
	-DENTRY1=k1::${entry[1]} -DENTRY2=k2::${entry[2]} -DTH1=${threads[1]} -DTH2=${threads[2]} \
	driver_permute_quant.cpp -o drv
shift 4
for G in "$@"; do ./drv "$G"; done
