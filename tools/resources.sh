#!/usr/bin/env bash
# tools/resources.sh - registers, static shared memory and the resulting CTAs
# per SM of every kernel of the given spec files, from ptxas on this machine
# (no GPU needed): `lingen gen`, then nvcc -cubin -Xptxas -v per source;
# spill B: the bytes of spill stores ptxas reports for the entry.
#
#   tools/resources.sh [--arch sm_90a] SPEC...
#
# CTAs/SM is the Hopper limit from registers (65536 a SM, allocated per warp
# in units of 256), static shared memory (228 KiB a SM, 1 KiB reserved a
# CTA) and threads (2048 a SM, 32 CTAs). Dynamic shared memory is not seen
# by ptxas: such kernels are marked "+dyn" and may fit fewer CTAs.
# Persistent kernels size their grid by it on purpose. Run from the
# repository root after a build.
set -euo pipefail
cd "$(dirname "$0")/.."
arch=sm_90a
if [[ ${1:-} == --arch ]]; then arch=$2; shift 2; fi
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
build/lingen gen "$@" -o "$work" --arch "$arch" > /dev/null 2>&1
for f in "$work"/*.cu; do
	"$nvcc" -arch="$arch" -cubin -Xptxas -v -o "$work/k.cubin" "$f" 2> "${f%.cu}.log" ||
		echo "$f: nvcc failed" >&2
done
python3 - "$work" <<'PY'
import glob, re, sys
print(f"{'kernel':60} {'threads':>7} {'regs':>5} {'spill B':>7} {'smem':>10} {'CTA/SM':>6} {'warps/SM':>8}")
for f in sorted(glob.glob(sys.argv[1] + "/*.cu")):
    src, log = open(f).read(), open(f[:-3] + ".log").read()
    dyn = "extern __shared__" in src
    for m in re.finditer(r"__global__\s+void\s+(?:__cluster_dims__\([^)]*\)\s*)?__launch_bounds__\(\s*(\d+)[^)]*\)\s*(\w+)\s*\(", src):
        th, name = int(m.group(1)), m.group(2)
        u = re.search(r"Compiling entry function '" + name + r"'.*?(\d+) bytes spill stores.*?"
                      r"Used (\d+) registers(?:[^\n]*?(\d+) bytes smem)?", log, re.S)
        spill, regs, smem = (int(u.group(1)), int(u.group(2)), int(u.group(3) or 0)) if u else (0, 0, 0)
        warps = (th + 31) // 32
        per_warp = (regs * 32 + 255) // 256 * 256
        cta = min(65536 // (per_warp * warps) if per_warp else 32,
                  233472 // (smem + 1024), 2048 // (warps * 32), 32)
        print(f"{name:60} {th:>7} {regs:>5} {spill:>7} {str(smem) + ('+dyn' if dyn else ''):>10} {cta:>6} {cta * warps:>8}")
PY
