#!/usr/bin/env bash
# tools/device_perf.sh - issue 27 (items 1, 2, 4) on the GPU machine in one
# call of at most ~230 s, from the repository root with build-device/
# (tools/device.sh) carried along:
#
#   tools/device_perf.sh [SECONDS]          (default 225: the whole call's budget)
#
# 1. the GPU tests of the quantisers whose qt store changed (fp8_quant,
#    K1, K7, K6, K4b, rmsnorm_router, the tile sweep), each cmocka test
#    group in a process of its own, side by side, under one time limit
#    -> $OUT/tests.txt (PASS / FAIL / cut by the limit, and the failures)
# 2. lingen bench --odd: the flat quantisers (configs/kernels/odd-counts.json:
#    K1 hidden 2048 and 4096, fp8_quant, K7 n 1024 and 1408, K3b, each with
#    the default store, tile.qt_store 1 (the former) and 3 (the default's
#    pieces as write-back stores)) at 6000 / 6001 / 6144 /
#    8191 tokens, each odd count beside its count rounded up to 128; the
#    per-expert ones (odd-counts-experts.json) at 8191 / 8192
#    -> $OUT/odd.json, odd-experts.json, odd.txt
# 3. python -m lingen.bench, lingen only, the per-expert kernels at random
#    counts and at counts rounded to 128 -> $OUT/experts.json
# 4. the step benchmark: python -m lingen.bench --step
#    configs/models/ling-mini-2.0.json -> $OUT/step.json, step.md
# Every step runs under `timeout`, so the call ends within its budget.
set -uo pipefail
cd "$(dirname "$0")/.."
budget=${1:-225}
out=${OUT:-out/device}
mkdir -p "$out" /tmp/perf-logs
. tools/device_env.sh
device_env build-device
B=build-device
left() { echo $((budget - SECONDS)); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$out/gpu.txt" 2>&1

# 1. tests (their float64 CPU references take the time: side by side)
tests="gpu_test_families:fp8_quant gpu_test_families:fp8_quant_batched gpu_test_families:rmsnorm_quant
gpu_test_families:swiglu_quant gpu_test_families:batch_swiglu_quant gpu_test_families:rmsnorm_router
gpu_test_families:moe_permute_quant"
for t in $tests; do
	log=/tmp/perf-logs/${t//[:*]/-}.txt
	(LINGEN_TEST_FILTER=$([[ $t == *:* ]] && echo "${t#*:}") timeout 60 "$B/tests/${t%%:*}" > "$log" 2>&1
	 echo "rc=$?" >> "$log") &
done
wait
{
	for f in /tmp/perf-logs/*.txt; do
		rc=$(tail -1 "$f")
		case $rc in rc=0) r=PASS ;; rc=124) r="CUT (60 s limit)" ;; *) r="FAIL ($rc)" ;; esac
		echo "$(basename "$f" .txt): $r, $(grep -c '^\[       OK' "$f") ok, $(grep -c '^\[  FAILED  \] test' "$f") failed"
		[[ $r == FAIL* ]] && grep -B3 -A12 -m3 'FAIL\|ERROR' "$f" | head -40
	done
} > "$out/tests.txt"
cat "$out/tests.txt"

# 2. lingen bench, odd counts beside aligned ones
timeout $(( $(left) > 110 ? 70 : $(left) / 2 )) "$B/lingen" bench configs/kernels/odd-counts.json --odd \
	--tokens 6001,8191,6000,6144 --reps 30 --json > "$out/odd.json" 2> /tmp/perf-logs/odd.err
timeout $(( $(left) > 90 ? 35 : $(left) / 3 )) "$B/lingen" bench configs/kernels/odd-counts-experts.json --odd \
	--tokens 8191 --reps 30 --json > "$out/odd-experts.json" 2>> /tmp/perf-logs/odd.err
python3 - "$out/odd.json" "$out/odd-experts.json" > "$out/odd.txt" <<'PY'
import json, sys
for p in sys.argv[1:]:
    try:
        rows = json.load(open(p))
    except Exception as e:
        print(f"{p}: {e}"); continue
    for r in rows:
        x = f"{r['vs_aligned']:.3f}" if "vs_aligned" in r else ""
        print(f"{r['kernel']:52} {r['tokens']:7} {r['median_us']:9.2f} us {r['pct_copy']:6.1f}% {x}")
PY
cat "$out/odd.txt" /tmp/perf-logs/odd.err | head -120

# 3. and 4. Python (the machine's python3 has torch)
# liblingen finds libcjson beside it only through the loader's path (its RPATH lacks $ORIGIN)
export PYTHONPATH=$PWD/python LINGEN_LIBRARY=$PWD/$B/liblingen.so LINGEN_CLI=$PWD/$B/lingen PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/$B${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if (( $(left) > 60 )); then
	timeout $(( $(left) - 45 )) python3 -m lingen.bench --only batch_swiglu_quant \
		--only fp8_quant_batched --only "moe permute+quant" --shape 65536x1024 \
		--shape "8192x2048 e256" --impl lingen --budget 30 \
		--json "$out/experts.json" > /dev/null 2> /tmp/perf-logs/experts.err
	tail -20 /tmp/perf-logs/experts.err
fi
if (( $(left) > 15 )); then
	timeout $(( $(left) - 5 )) python3 -m lingen.bench --step configs/models/ling-mini-2.0.json \
		--json "$out/step.json" --markdown "$out/step.md" 2>&1 | tail -40
fi
tar czf "$out/logs.tar.gz" -C /tmp perf-logs 2>/dev/null
echo "tools/device_perf.sh: done in $SECONDS s"
