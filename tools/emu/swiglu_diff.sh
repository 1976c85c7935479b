#!/bin/bash
# swiglu_diff.sh KIND OLD.cu NEW.cu M N E [DXBF16 [SEED]]: run two generated
# sm_80 swiglu kernels of the same spec (KIND 0: batch_swiglu_quant forward,
# 1: its backward, 2: swiglu_quant forward, 3: its backward), e.g. from the
# generator before and after a change, on the CPU through emu.h with the
# same inputs (M tokens, intermediate N, E experts, counts of 0, 1, 127,
# 128, 129, ... then random) and compare every output byte
# (driver_swiglu.cpp). Each file's own tile (fblocks, threads) sets its
# grid. Exit status 1 when any byte differs. Example, from the repository
# root after a build, with an older lingen at OLD/build/lingen:
#   echo '{"kernels": [{"op": "batch_swiglu_quant", "pass": "backward", "dtype": "bf16",
#         "intermediate": 256, "experts": 7}]}' > /tmp/s.json
#   OLD/build/lingen gen /tmp/s.json -o /tmp/old --arch sm_80
#   build/lingen gen /tmp/s.json -o /tmp/new --arch sm_80
#   tools/emu/swiglu_diff.sh 1 /tmp/old/*.cu /tmp/new/*.cu 1100 256 7
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
K=$1 OLD=$(realpath "$2") NEW=$(realpath "$3") M=$4 N=$5 E=$6 DXB=${7:-0} SEED=${8:-7}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$root/tools/emu/emu.h" "$root/tools/emu/emu_cuda.h" "$root/tools/emu/emu_io.h" "$root/tools/emu/driver_swiglu.cpp" "$work/"
for v in old new; do
	f=$OLD; [ $v = new ] && f=$NEW
	# C++ linkage (both in one program, in namespaces)
	python3 "$root/tools/emu/cut.py" "$f" | sed 's/^extern "C" //' > "$work/$v.inc"
done
fb() { grep -o "x [0-9]* feature blocks\|x [0-9]* block" "$1" | head -1 | grep -o "[0-9]*"; }
th() { grep -o "__launch_bounds__([0-9]*" "$1" | grep -o "[0-9]*$"; }
# token tiles a CTA (per-expert layout; 1 in sources from before tile.tiles)
ti() { local t; t=$(grep -o "qe_seg\[[0-9]*\]" "$1" | head -1 | grep -o "[0-9]*"); echo "${t:-1}"; }
entry=$(grep -o "^lg_[a-z0-9_]*(" "$NEW" | head -1 | tr -d '(')
cd "$work"
g++ -std=c++20 -O1 -pthread -w -DKIND=$K -DMTOK=$M -DNI=$N -DEXPERTS=$E -DDXBF16=$DXB -DSEED=$SEED \
	-DFB_OLD=$(fb "$OLD") -DFB_NEW=$(fb "$NEW") -DTH_OLD=$(th "$OLD") -DTH_NEW=$(th "$NEW") \
	-DTILES_OLD=$(ti "$OLD") -DTILES_NEW=$(ti "$NEW") -DENTRY=$entry \
	driver_swiglu.cpp -o drv
./drv
