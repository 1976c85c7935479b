#!/bin/bash
# fp8_gemm.sh PASS N K M [TILE] [DTYPE] [CTAS] [SEED]: generate fp8_gemm's
# PASS (forward, dgrad or wgrad) for sm_90a at n N, k K (TILE: a JSON
# object of tile keys, default none: the heuristic's), run it on the CPU
# through emu90.h at M tokens on CTAS CTAs (default two clusters: each CTA
# walks many tiles) and compare with a float64 reference
# (driver_fp8_gemm.cpp). The launch and the tensor maps come from the
# kernel's plan (`lingen build`'s manifest: needs NVRTC, not a GPU).
# Environment: ACCUMULATE=1 the wgrad's accumulate; EXPERTS=E
# fp8_grouped_gemm's PASS over E experts; EMU_MUTATE a Python expression
# over the kernel's text k (a planted bug, to see the check fail);
# EMU_TIMEOUT (seconds, default 120) how long a wait runs before it is
# reported as a deadlock. From the repository root after a build:
#   tools/emu/fp8_gemm.sh forward 640 2176 301 '{"overlap": 1}'
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
lingen=${LINGEN:-$root/build/lingen}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$root/tools/emu/emu90.h" "$root/tools/emu/emu_cuda.h" "$root/tools/emu/driver_fp8_gemm.cpp" "$work/"
cd "$work"
pass=$1 n=$2 k=$3 M=$4 tile=${5:-} dtype=${6:-bf16} ctas=${7:-} seed=${8:-1}
t=""; [[ -n $tile ]] && t=", \"tile\": $tile"
[[ ${ACCUMULATE:-0} == 1 ]] && t="$t, \"accumulate\": true"
op=fp8_gemm
[[ ${EXPERTS:-0} -gt 0 ]] && op=fp8_grouped_gemm && t="$t, \"experts\": $EXPERTS"
echo "{\"kernels\": [{\"op\": \"$op\", \"pass\": \"$pass\", \"dtype\": \"$dtype\", \"n\": $n, \"k\": $k$t}]}" > spec.json
"$lingen" gen spec.json -o gen --arch sm_90a >/dev/null
LINGEN_CACHE_DIR=$work/cache "$lingen" build spec.json --arch sm_90a -o bundle >/dev/null
f=$(ls gen/*.cu)
python3 "$root/tools/emu/cut90.py" "$f" > kernel.inc
# EMU_MUTATE: a python expression over the kernel's text `k` (a deliberate bug, to see the check fail)
[[ -n ${EMU_MUTATE:-} ]] && python3 -c "import sys; k = open('kernel.inc').read(); m = $EMU_MUTATE; assert m != k, 'the mutation changed nothing'; open('kernel.inc', 'w').write(m)"
python3 - "$pass" "$n" "$k" "$dtype" bundle/manifest.json "${ACCUMULATE:-0}" "${EXPERTS:-0}" > plan.h <<'PY'
import json, sys
pass_, n, k, dtype, man, acc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
experts = int(sys.argv[7])
kern = json.load(open(man))["kernels"][0]
plan, ents = kern["plan"], kern["plan"]["entries"]
if len(ents) > 2:
    sys.exit(f"fp8_gemm.sh: {len(ents)} entry points; the driver runs one or two")
e = ents[-1]  # the GEMM; a first entry (the grouped wgrad's maps) is CALL0
args = {"forward": {"x": 0, "w": 2, "y": 4}, "dgrad": {"dy": 0, "wt": 2, "dx": 4},  # 4: the output
        "wgrad": {"dyt": 0, "xt": 2, "dw": 4}}[pass_]
tms = plan["tmaps"]
kr, no = (k, n) if pass_ == "forward" else (n, k)
print(f"#define WGRAD {int(pass_ == 'wgrad')}\n#define ROWS {n}\n#define ACCUMULATE {acc}\n#define EXPERTS {experts}")
print(f"#define KRED {kr}\n#define NO {no if pass_ != 'wgrad' else k}\n#define OUT_F32 {int(dtype == 'fp32')}")
print(f"#define NTM {len(tms)}")
print(f"#define ENTRY_NAME \"{e['name']}\"  // tile {json.dumps(plan['tile'])}")
for key, f in (("TM_ARG", lambda m: args[m["arg"]]), ("TM_BOX0", lambda m: m["box"][0]),
               ("TM_BOX1", lambda m: m["box"][1]), ("TM_SWZ", lambda m: m["swizzle"])):
    print(f"static const unsigned {key}[] = {{{', '.join(str(f(m)) for m in tms)}}};")
maps = ", ".join(f"t[{i}]" for i in range(len(tms)))
cnt = "cnt, " if experts else ""
ws = "ws, " if experts and pass_ == "wgrad" else ""
for i, x in enumerate(ents):
    tag = "" if x is e else "0"
    print(f"#define THREADS{tag} {x['block'][0]}\n#define CSIZE{tag} {max(1, x['cluster'])}")
    print(f"#define CALL{tag}(a, as, b, bs, cnt, o, ws, M, t) {x['name']}(a, as, b, bs, {cnt}o, {ws}M, {x['part']}, {maps})")
PY
grep -h "ENTRY_NAME" plan.h
g++ -std=c++20 -O2 -pthread -w -DEMU_TIMEOUT=${EMU_TIMEOUT:-120} driver_fp8_gemm.cpp -o drv
./drv "$M" ${ctas:-} ${ctas:+$seed}
