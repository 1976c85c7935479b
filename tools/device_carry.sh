#!/usr/bin/env bash
# tools/device_carry.sh - the builds tools/device_pending.sh needs, small
# enough for one device call: tools/device_rz.sh build (build-device and the
# round-toward-zero mutant build-rz), then of each only what the GPU cases,
# the rounding proof, the sweeps and the step use (the CLI, the library,
# libcjson and libcmocka, the source-dir stamp, gpu_test_families,
# gpu_test_cross_entropy and the FP8 GEMMs' gpu_test_fp8_*) copied into
# carry/ (ignored), about 11 MB against
# 2 x 56. On the GPU machine, with carry named in the call's carry list:
#   cp -a carry/build-device carry/build-rz . && bash tools/device_pending.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tools/device_rz.sh build
rm -rf carry/build-device carry/build-rz
for b in build-device build-rz; do
	mkdir -p "carry/$b/tests"
	cp -a "$b"/lingen "$b"/liblingen.so* "$b"/libcjson.so.1 "$b"/libcmocka.so.0 "$b"/lingen-source-dir "carry/$b/"
	cp -a "$b"/tests/gpu_test_families "$b"/tests/gpu_test_cross_entropy "$b"/tests/gpu_test_fp8_gemm \
		"$b"/tests/gpu_test_fp8_grouped_gemm "carry/$b/tests/"
done
grep -q 'cvt.rz.bf16x2' carry/build-rz/liblingen.so.0.* || { echo "tools/device_carry.sh: build-rz is not the mutant" >&2; exit 1; }
du -sh carry
