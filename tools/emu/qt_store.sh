#!/bin/bash
# qt_store.sh [N [M...]]: the flat qt store on the CPU (issue 27): generate
# swiglu_quant forward for sm_80 at intermediate N (default 256) with each
# tile.qt_store: 2 (the default, whole 16-byte pieces of lines round_up(M, 128)
# bytes apart), 1 (the former store, each piece tested at run time) and 3
# (2's pieces as write-back stores); run 1 and 3 against 2 through emu.h
# at each token count M
# (default: 1 15 16 17 127 129 200 258 300 392 520, every residue of a qt
# row's start mod 16 among the lines of an odd M, short last tiles of many
# lengths) and compare every output byte (swiglu_diff.sh). Exit status 1
# when any byte differs. From the repository root after a build:
#   tools/emu/qt_store.sh 256 301 1100
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
n=${1:-256}
[ $# -gt 0 ] && shift
ms=${*:-1 15 16 17 127 129 200 258 300 392 520}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
q='"quant": {"format": "e4m3", "block": 128, "round_scale": true, "output": "both"}'
for v in 1 2 3; do
	echo "{\"kernels\": [{\"op\": \"swiglu_quant\", \"pass\": \"forward\", \"dtype\": \"bf16\", \"intermediate\": $n, $q, \"tile\": {\"qt_store\": $v}}]}" > "$work/s$v.json"
	"$root/build/lingen" gen "$work/s$v.json" -o "$work/g$v" --arch sm_80 > /dev/null 2>&1
	# one entry name for both (the driver calls ENTRY in each)
	for f in "$work/g$v"/*.cu; do sed -i "s/_tqs$v\b//g" "$f"; done
done
rc=0
for m in $ms; do
	for v in 1 3; do
		"$root/tools/emu/swiglu_diff.sh" 2 "$work"/g$v/*.cu "$work"/g2/*.cu "$m" "$n" 1 || rc=1
	done
done
exit $rc
