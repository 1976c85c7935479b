#!/bin/bash
# run.sh PASS KEYS M BM BN THREADS SPLIT TERMS [XBM XBN XTHREADS]: generate router_gemm for
# sm_80 with the spec keys KEYS (JSON members), run it on the CPU through
# emu.h at M tokens and compare with a float64 reference (driver.cpp). BM,
# BN, THREADS, SPLIT, TERMS: the plan's tile, threads, dw slices and dy
# terms (as `lingen gen` shows them); in the backward BM BN THREADS are dw's
# and XBM XBN XTHREADS dx's (default 128 256 512); TF32=1 in the
# environment for "precision": "tf32" (TERMS 2). ARCH=sm_90a: its wgmma and
# TMA form through emu90.h instead, the tile, threads and tensor maps from
# the plan (`lingen build`'s manifest: BM..XTHREADS not needed; TERMS still
# the spec's dy terms). Examples, from the repository root after a build:
#   tools/emu/run.sh backward '"hidden": 96, "experts": 40' 37 128 128 256 16 1 128 128 256
#   ARCH=sm_90a tools/emu/run.sh backward '"hidden": 2048, "experts": 256, "precision": "bf16x2"' 301 "" "" "" "" 2
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
lingen=${LINGEN:-$root/build/lingen}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$root/tools/emu/emu.h" "$root/tools/emu/emu90.h" "$root/tools/emu/emu_cuda.h" "$root/tools/emu/driver.cpp" "$work/"
cd "$work"
pass=$1 keys=$2 M=$3 BM=${4:-} BN=${5:-} TH=${6:-} SPLIT=${7:-} TERMS=${8:-1} XBM=${9:-128} XBN=${10:-256} XTH=${11:-512}
arch=${ARCH:-sm_80}
echo "{\"kernels\": [{\"op\": \"router_gemm\", \"pass\": \"$pass\", \"dtype\": \"bf16\", $keys}]}" > spec.json
rm -rf gen && "$lingen" gen spec.json -o gen --arch "$arch" >/dev/null
f=$(ls gen/*.cu)
base=$(basename $f .cu)
E90=0
if [ "$arch" = sm_90a ]; then
	# the tiles, threads and tensor maps from the plan (`lingen build`'s manifest)
	LINGEN_CACHE_DIR=$work/cache "$lingen" build spec.json --arch sm_90a -o bundle >/dev/null
	if ! grep -q '"tmaps"' bundle/manifest.json; then
		echo "run.sh: at this shape the sm_90a plan takes the sm_80 code (no TMA): run it with ARCH=sm_80" >&2
		exit 2
	fi
	python3 "$root/tools/emu/cut90.py" $f > kernel.inc
	read -r BM BN TH SPLIT XBM XBN XTH < <(python3 - bundle/manifest.json > plan.h <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))["kernels"][0]["plan"]
t, tms, ents = plan["tile"], plan.get("tmaps", []), {e["name"].rsplit("_", 1)[-1]: e for e in plan["entries"]}
print(f"#define NTM {len(tms)}")
for key, f in (("TM_BOX0", lambda m: m["box"][0]), ("TM_BOX1", lambda m: m["box"][1]), ("TM_SWZ", lambda m: m["swizzle"])):
    print(f"static const unsigned {key}[] = {{{', '.join(str(f(m)) for m in tms)}}};")
print(f"static const char TM_ARG[] = {{{', '.join(repr(m['arg'][0]) for m in tms)}}};")
print("#define TMAPS" + "".join(f", t[{i}]" for i in range(len(tms))))
dw, dx = ents.get("dw", next(iter(ents.values()))), ents.get("dx", {"block": [512]})
sys.stderr.write(f"tile {json.dumps(t)}\n")
with open("dims", "w") as f:  # the -D values, for the shell
    print(t["m"], t["n"], dw["block"][0], t["split"], t["dx_m"] or 128, t["dx_n"] or 256, dx["block"][0], file=f)
PY
cat dims)
	E90=1
else
	awk '/^\/\/ ----- helpers from templates/{skip=1} /^\/\/ ----- helpers for this spec/{skip=0} !skip' $f > kernel.inc
fi
HID=$(echo "$keys" | sed 's/.*"hidden": \([0-9]*\).*/\1/'); EXP=$(echo "$keys" | sed 's/.*"experts": \([0-9]*\).*/\1/')
if [ $pass = forward ]; then D="-DBWD=0 -DFWD_ENTRY=$base"; else D="-DBWD=1 -DDX_ENTRY=${base}_dx -DDW_ENTRY=${base}_dw -DSUM_ENTRY=${base}_dwsum"; fi
g++ -std=c++20 -O1 -pthread -w -DEMU90=$E90 -DTF32=${TF32:-0} -DHID=$HID -DEXP=$EXP -DMTOK=$M -DBM=$BM -DBN=$BN -DTHREADS=$TH -DSPLIT=$SPLIT -DTERMS=$TERMS -DXBM=$XBM -DXBN=$XBN -DXTHREADS=$XTH $D driver.cpp -o drv
./drv
