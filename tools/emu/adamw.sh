#!/bin/bash
# adamw.sh KEYS B1 B2 EPS WD GBF16 MBF16 CHUNK: generate family adamw with the
# spec keys KEYS (JSON members after "dtype", e.g. ', "moments": "bf16"') and
# run it on the CPU (driver_adamw.cpp) against the C reference, bit for bit;
# B1 B2 EPS WD GBF16 MBF16 repeat the spec for the reference (GBF16, MBF16:
# 1 for bf16 grads, moments), CHUNK: elements a table row. After a build:
#   tools/emu/adamw.sh ', "grad": "bf16", "moments": "bf16", "beta1": 0.8' \
#       0.8 0.999 1e-8 0.01 1 1 8192
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$root/tools/emu/driver_adamw.cpp" "$root/tools/emu/prelude_adamw.h" "$work/"
cd "$work"
echo "{\"kernels\": [{\"op\": \"adamw\", \"pass\": \"forward\", \"dtype\": \"fp32\"$1}]}" > spec.json
"$root/build/lingen" gen spec.json -o gen --arch sm_90a > /dev/null
f=$(ls gen/*.cu)
sed -n '/^\/\/ ----- the update of this spec/,$p' "$f" > kernel.inc
entry=$(basename "$f" .cu)
read -r ctas warps < <(sed -n 's|^// \([0-9]*\) CTAs of \([0-9]*\) warps.*|\1 \2|p' kernel.inc)
g++ -std=c++20 -O1 -ffp-contract=off -DENTRY="$entry" driver_adamw.cpp \
	"$root/build/liblingen_ref.a" "$root/build/liblingen.a" -lcjson -lm -lpthread -o drv
./drv "$2" "$3" "$4" "$5" "$6" "$7" "$8" "$ctas" $((warps * 32)) "$entry chunk $8"
