#!/usr/bin/env bash
# bench/run.sh - the benchmark run behind bench/*.json, on the GPU machine,
# from the repository root, with the build-device/ folder that
# tools/device.sh makes (carried along):
#
#   bench/run.sh [OUT_DIR]        (default: $OUT, else out/bench)
#
# 1. the GPU tests (every K1 and fp8_quant case against the CPU reference)
#                                                              -> gpu_test*.txt
# 2. lingen bench: every shipped spec and the K1 tile variants -> kernels.json
#    (median GPU time, L2 flushed before each repetition, % of the copy
#    ceiling measured in the same run; docs/performance.md's method)
# 3. lingen bench --jit: NVRTC compile, disk-cache hit, launch cost -> jit.json
# 4. the bundle GPU test; lingen tune of the shipped norms -> sm_90a.json
#    (configs/tuning/sm_90a.json); new-process load times of the
#    ling-mini-2.0 model's kernels, warm cache and bundle -> load.txt
# (bench/README.md's table comes from tools/device_bench.sh and bench/table.py;
# this run is the C-side record: kernels.json, jit.json, the GPU tests.)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-out/bench}}
mkdir -p "$out"
bin=build-device
# The test binaries name configs/ and the CLI by the build machine's paths.
. tools/device_env.sh
device_env "$bin"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$out/gpu.txt" 2>&1
"$bin/tests/gpu_test_k1" > "$out/gpu_test.txt" 2>&1
echo "gpu_test_k1: exit $?"
grep -E "FAIL|PASSED|SKIPPED|seed" "$out/gpu_test.txt"
"$bin/tests/gpu_test_fp8_quant" > "$out/gpu_test_fp8_quant.txt" 2>&1
echo "gpu_test_fp8_quant: exit $?"
grep -E "FAIL|PASSED|SKIPPED|seed" "$out/gpu_test_fp8_quant.txt"
"$bin/lingen" bench configs/kernels/ling-mini-2.0-norms.json configs/kernels/fp8-quant.json \
	configs/kernels/k1-variants.json --tokens 8192 --json > "$out/kernels.json"
echo "lingen bench: exit $?"
"$bin/lingen" bench --jit configs/kernels/ling-mini-2.0-norms.json configs/kernels/k1-variants.json \
	--json > "$out/jit.json"
echo "lingen bench --jit: exit $?"
"$bin/tests/gpu_test_bundle" > "$out/gpu_test_bundle.txt" 2>&1
echo "gpu_test_bundle: exit $?"
grep -E "FAIL|PASSED|SKIPPED" "$out/gpu_test_bundle.txt"
"$bin/lingen" tune configs/kernels/ling-mini-2.0-norms.json configs/kernels/fp8-quant.json --tokens 8192 --reps 30 \
	-o "$out/sm_90a.json" \
	> "$out/tune.txt" 2>&1
echo "lingen tune: exit $?"
tail -n 30 "$out/tune.txt"
model=configs/models/ling-mini-2.0.json
"$bin/lingen" bench --load "$model" > /dev/null 2>&1 # the warm cache for the model
"$bin/lingen" build "$model" --arch sm_90a -o /tmp/lingen-bundle > /dev/null 2>&1
{
	for i in 1 2 3; do
		s=$(date +%s%N); "$bin/lingen" bench --load "$model"; e=$(date +%s%N)
		echo "  whole process (warm cache): $(( (e - s) / 1000000 )) ms"
		s=$(date +%s%N); "$bin/lingen" bench --load "$model" --bundle /tmp/lingen-bundle; e=$(date +%s%N)
		echo "  whole process (bundle): $(( (e - s) / 1000000 )) ms"
	done
} > "$out/load.txt" 2>&1
cat "$out/load.txt"
