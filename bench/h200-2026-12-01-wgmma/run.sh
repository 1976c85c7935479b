#!/usr/bin/env bash
# The wgmma session's GPU run (H200). The device tool copies the lead's
# checkout, so the helper's build travels as an ignored folder of it:
# B (default build-wgmma: lingen, its libraries, lingen-source-dir, tests/
# gpu_test_router_gemm and test_sass_wgmma from tools/device.sh of branch
# wgmma) and B/dist (the branch's wheel). Then, from the repository root:
#   B=build-wgmma build-wgmma/run.sh [SECONDS for the GPU test]
# 1. lingen bench of the router GEMM (forward on wgmma + TMA, backward) and
#    of the 8192^3 square GEMM; 2. bench --jit (launch host cost: tensor
#    maps encoded at every launch vs the raw cuLaunchKernel with maps made
#    once); 3. the SASS test; 4. the Python side-by-side rows against
#    torch.mm; 5. gpu_test_router_gemm.
set -u
B=${B:-build-wgmma}
R=$PWD
O=${OUT:-/tmp/o}
mkdir -p "$O"
src=$(cat $B/lingen-source-dir)
[[ -e $src/configs ]] || { mkdir -p "$src"; for f in configs tests templates python tools; do ln -sfn "$R/$f" "$src/$f"; done; }
export LINGEN_CACHE_DIR=/tmp/lcw PATH=$PATH:/usr/local/cuda/bin
L=$B/lingen
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 60 $L bench configs/kernels/router-gemm.json --tokens 8192 2>&1 | tee $O/bench-router.txt | grep -E "lg_|rror"
timeout 60 $L bench configs/kernels/gemm-square.json --tokens 8192 2>&1 | tee $O/bench-square.txt | grep -E "lg_|rror"
timeout 60 $L bench --jit configs/kernels/router-gemm.json --tokens 8192 > $O/bench-jit.txt 2>&1
grep -iE -A5 "^launch|raw" $O/bench-jit.txt | head -16
timeout 60 $B/tests/test_sass_wgmma 2>&1 | tail -2
timeout "${1:-120}" $B/tests/gpu_test_router_gemm > $O/gpu_test_router_gemm.txt 2>&1
echo "gpu_test_router_gemm rc=$?"
grep -E "FAIL|ERROR|LINE|PASSED|differ|seed" $O/gpu_test_router_gemm.txt | head -24
if ls $B/dist/*.whl > /dev/null 2>&1; then
	python3 -m pip install -q --no-index --no-deps --target /tmp/sitew $B/dist/*.whl > /dev/null 2>&1
	PYTHONPATH=/tmp/sitew timeout 100 python3 -m lingen.bench --only "router fwd" --only "gemm bf16" \
		--json $O/bench-py.json > $O/bench-py.txt 2>&1
	echo "python bench rc=$?"; tail -20 $O/bench-py.txt
fi
