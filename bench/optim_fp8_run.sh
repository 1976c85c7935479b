#!/usr/bin/env bash
# bench/optim_fp8_run.sh - on the GPU machine, from the repository root with
# build-device/ carried (tools/device.sh): the adamw_fp8 GPU tests (C and
# Python), the adamw ones beside them, and bench/optim_fp8.py's table
# (saved to $OUT/optim_fp8.txt when OUT is set).
set -u
export LINGEN_LIBRARY=$PWD/build-device/liblingen.so PYTHONPATH=$PWD/python
export LD_LIBRARY_PATH=$PWD/build-device${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
out=${OUT:-/tmp}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 90 build-device/tests/gpu_test_adamw_fp8 2>&1 | tail -12
timeout 40 build-device/tests/gpu_test_adamw 2>&1 | tail -3
timeout 90 python3 -m pytest python/tests/test_gpu_optim_fp8.py python/tests/test_gpu_optim.py -q \
	2>&1 | tail -15
timeout 75 python3 bench/optim_fp8.py --reps 15 2>&1 | tee "$out/optim_fp8.txt"
