#!/bin/bash
# permute.sh DTYPE KEYS T G...: generate moe_permute forward for sm_80 with
# the spec keys KEYS (JSON members: hidden, experts, top_k, multiple, ...) in
# both forms, tile.pipeline 1 (one CTA a token) and 2 (persistent, the map
# warp), run them on the CPU through emu.h at T tokens (the pipelined one at
# each grid size G given, e.g. 1, a few, more than T + 256) and compare
# every output byte (out, out_scale, out_probs; all first filled with
# garbage) between the two forms (driver_permute.cpp). Example, from the
# repository root after a build:
#   tools/emu/permute.sh e4m3 '"hidden": 384, "experts": 96, "top_k": 6' 50 1 7 400
# OLD=path/to/lingen generates the first form with another build (say main's),
# P2=1 makes the second form the one-CTA form too: this build's against that one.
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$root/tools/emu/emu.h" "$root/tools/emu/emu_cuda.h" "$root/tools/emu/driver_permute.cpp" "$work/"
cd "$work"
dtype=$1 keys=$2 T=$3
shift 3
lingen=(x "${OLD:-$root/build/lingen}" "$root/build/lingen") pipe=(x 1 "${P2:-2}")
for p in 1 2; do
	echo "{\"kernels\": [{\"op\": \"moe_permute\", \"pass\": \"forward\", \"dtype\": \"$dtype\", $keys," \
		"\"tile\": {\"pipeline\": ${pipe[$p]}}}]}" > spec$p.json
	"${lingen[$p]}" gen spec$p.json -o gen$p --arch sm_80 >/dev/null
	f=$(ls gen$p/*.cu)
	# each kernel in a namespace of its own (their helpers share names), its entry renamed (the
	# same entry from two builds)
	e=$(basename "$f" .cu)
	{ echo "namespace k$p {"; sed -n '/^\/\/ ----- helpers for this spec/,$p' "$f" | sed "s/$e/${e}_k$p/g"; echo "}"; } \
		> k$p.inc
	entry[$p]=${e}_k$p
	threads[$p]=$(sed -n 's/.*__launch_bounds__(\([0-9]*\).*/\1/p' "$f")
done
get() { python3 -c "import json; k=json.load(open('spec1.json'))['kernels'][0]; print(k.get('$1', $2))"; }
H=$(get hidden 0) E=$(get experts 0) K=$(get top_k 0) M=$(get multiple 16)
FP8=0; [ "$dtype" = e4m3 ] && FP8=1
g++ -std=c++20 -O1 -pthread -w -DHH=$H -DEE=$E -DKK=$K -DMM=$M -DTOK=$T -DFP8=$FP8 \
	-DENTRY1=k1::${entry[1]} -DENTRY2=k2::${entry[2]} -DTH1=${threads[1]} -DTH2=${threads[2]} -DPIPED=$(( ${pipe[2]} == 2 )) \
	driver_permute.cpp -o drv
for G in "$@"; do ./drv "$G"; done
