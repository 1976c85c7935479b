#!/usr/bin/env bash
# tools/device_fp8_gemm.sh - the FP8 GEMMs on the GPU machine, in one call
# that builds nothing there. On the build machine: tools/device.sh
# build-device; then run this from the repository root with
# carry ["build-device"] (the package is python/ itself, on PYTHONPATH):
#
#   tools/device_fp8_gemm.sh [--quick] [--no-tests]
#
# 1. build-device/tests/gpu_test_fp8_gemm (and gpu_test_fp8_grouped_gemm,
#    gpu_test_fp8_quant when built) -> $OUT/gpu_test_*.txt
# 2. NVRTC compile time of one FP8 GEMM kernel: lingen bench --jit
#    -> $OUT/jit.txt
# 3. tools/fp8_gemm_bench.py: accuracy per form, lingen vs
#    torch._scaled_mm blockwise vs torch.mm bf16 (vs torch._grouped_mm
#    bf16) -> $OUT/fp8-gemm.md
# Each step has its own timeout. OUT defaults to out/device.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/device}
mkdir -p "$out"
quick="" tests=1
for a in "$@"; do
	case $a in
	--quick) quick=--quick ;;
	--no-tests) tests=0 ;;
	esac
done
export LINGEN_LIBRARY=$PWD/build-device/liblingen.so PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
# liblingen.so finds libcjson beside it only through the loader's path
export LD_LIBRARY_PATH=$PWD/build-device${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LINGEN_CACHE_DIR=/tmp/lingen-cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$out/gpu.txt" 2>&1
rc=0
if [[ $tests == 1 ]]; then
	for t in gpu_test_fp8_gemm gpu_test_fp8_grouped_gemm gpu_test_fp8_quant; do
		[[ -x build-device/tests/$t ]] || continue
		# fp8_quant: the weights' transposed copy only (the rest is the quantisers')
		filter=""
		[[ $t == gpu_test_fp8_quant ]] && filter=test_weight_transposed
		LINGEN_TEST_FILTER=$filter timeout "${TEST_TIMEOUT:-120}" "build-device/tests/$t" \
			> "$out/$t.txt" 2>&1
		r=$?
		echo "$t: exit $r" | tee -a "$out/summary.txt"
		[[ $r == 0 ]] || rc=1
		tail -5 "$out/$t.txt"
	done
fi
cat > /tmp/fp8_jit.json <<'JSON'
{"kernels": [{"op": "fp8_gemm", "pass": "forward", "dtype": "bf16", "n": 7168, "k": 16384},
 {"op": "fp8_gemm", "pass": "wgrad", "dtype": "fp32", "n": 7168, "k": 16384},
 {"op": "fp8_grouped_gemm", "pass": "forward", "dtype": "bf16", "n": 1024, "k": 2048, "experts": 256}]}
JSON
# NVRTC compile time: lingen build (generation + NVRTC, no cache), each kernel
# alone in a fresh process (the first includes NVRTC's start-up), then all three
for i in 1 2 3; do
	s=$(date +%s%N)
	timeout 30 build-device/lingen build /tmp/fp8_jit.json -o /tmp/fp8_jit_out --arch sm_90a > /dev/null 2>&1
	echo "lingen build of 3 FP8 GEMM kernels (one process, exit $?): $(( ($(date +%s%N) - s) / 1000000 )) ms" \
		| tee -a "$out/jit.txt"
	rm -rf /tmp/fp8_jit_out
done
timeout "${JIT_TIMEOUT:-20}" build-device/lingen bench --jit /tmp/fp8_jit.json --reps 2 --tokens 4096 \
	>> "$out/jit.txt" 2>&1 || echo "lingen bench --jit: exit $?" >> "$out/jit.txt"
timeout "${BENCH_TIMEOUT:-200}" python3 tools/fp8_gemm_bench.py "$out/fp8-gemm.md" $quick \
	2>&1 | tee "$out/bench-log.txt"
[[ ${PIPESTATUS[0]} == 0 ]] || rc=1
exit $rc
