#!/usr/bin/env bash
# tools/device_bench.sh - the run behind bench/README.md's table, on the GPU
# machine, in one call of at most ~6 minutes.
#
# On the build machine, from the repository root (no GPU needed):
#   pip wheel . -w dist --no-deps                  # the lingen wheel
#   pip download --no-deps -d .whl liger-kernel    # optional peers (wheels)
# then on the GPU machine, from the repository root, with dist/ and .whl/
# carried along:
#   tools/device_bench.sh [BENCH_ARGS...]
# and back on the build machine:
#   python3 bench/table.py OUT/bench.json --write  # bench/README.md and README.md
#
# 1. the wheels installed into $SITE (default /tmp/site) for the machine's
#    python3 (the one with torch and triton), put on PYTHONPATH;
# 2. python -m lingen.bench --budget $BUDGET (default 270 s: the target
#    shape of every kernel first, then the other shapes, odd token counts
#    among them, while the budget lasts) -> $OUT/bench.json (rewritten after
#    every case, so a cut run keeps what it measured), $OUT/bench.md,
#    $OUT/log.txt (each row as it is timed, and any error), $OUT/gpu.txt.
# Peers: eager PyTorch and torch.compile always; Liger-Kernel and linghe when
# importable. OUT defaults to out/device. Exit status 1 if a step failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/device}
site=${SITE:-/tmp/site}
budget=${BUDGET:-270}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader \
	> "$out/gpu.txt" 2>&1
wheels=(dist/lingen-*.whl)
if [[ ! -f ${wheels[0]} ]]; then
	echo "tools/device_bench.sh: no dist/lingen-*.whl: run 'pip wheel . -w dist --no-deps'" \
		"on the build machine and carry dist/ along" >&2
	exit 1
fi
shopt -s nullglob
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
	--target "$site" "${wheels[@]}" .whl/*.whl 2>&1 | tee "$out/log.txt"
[[ ${PIPESTATUS[0]} == 0 ]] || exit 1
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# the cross entropy rows' 5 GB temporaries and the timer's graphs left 44 GiB
# reserved but unallocated on an 80 GB H100 (thirteenth session): grow
# segments instead of splitting fixed ones
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
start=$SECONDS
# the hard limit leaves the host-overhead pass and the JSON time to finish
timeout $((budget + 60)) python3 -m lingen.bench --budget "$budget" "$@" \
	--json "$out/bench.json" --markdown "$out/bench.md" 2>&1 | tee -a "$out/log.txt"
rc=${PIPESTATUS[0]}
echo "tools/device_bench.sh: python -m lingen.bench exit $rc in $((SECONDS - start)) s" \
	| tee -a "$out/log.txt"
[[ -s $out/bench.json ]] || exit 1
exit $((rc != 0))
