#!/usr/bin/env bash
# from the repository root (or a carry folder holding build-device/, python/, examples/,
# bench/, configs/): the adamw_fp8 GPU tests, then bench/fp8_memory.py
cd "$(dirname "$0")/.."
export LINGEN_LIBRARY=$PWD/build-device/liblingen.so PYTHONPATH=$PWD/python LD_LIBRARY_PATH=$PWD/build-device
nvidia-smi --query-gpu=name --format=csv,noheader
t0=$(date +%s)
timeout 60 build-device/tests/gpu_test_adamw_fp8 2>&1 | tail -6
echo "gpu_test rc ${PIPESTATUS[0]} $(( $(date +%s) - t0 ))s"
timeout 80 python3 -m pytest python/tests/test_gpu_optim_fp8.py python/tests/test_gpu_optim.py -q -x -p no:cacheprovider 2>&1 | tail -6
echo "pytest $(( $(date +%s) - t0 ))s"
left=$(( 225 - ($(date +%s) - t0) ))
timeout $left python3 -u bench/fp8_memory.py --steps 4 --modes fp8,bf16,fp8-keep 2>&1 | grep -v Warning | tail -30
echo "probe $(( $(date +%s) - t0 ))s"
