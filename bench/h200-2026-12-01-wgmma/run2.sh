#!/usr/bin/env bash
# The wgmma session's second GPU run (H200; NOT RUN: the device time ran out, run3.sh was
# cut from it), staged as run.sh says (B, default
# build-wgmma, also holding this folder's *.json): the tile and cluster
# variants of the sm_90a forward (lingen bench), the square GEMM with
# clusters, the launch host cost with the tensor map cache, the SASS test,
# then lingen check of the cluster path at odd sizes and of the variants at
# the target, beside gpu_test_router_gemm.
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
timeout 100 $L bench configs/kernels/router-gemm.json $B/variants.json configs/kernels/gemm-square.json \
	$B/square-variants.json --tokens 8192 2>&1 | tee $O/bench2.txt | grep -E "lg_|rror"
timeout 60 $L bench --jit configs/kernels/router-gemm.json --tokens 8192 > $O/bench2-jit.txt 2>&1
grep -E "batched|back to back" $O/bench2-jit.txt
timeout 60 $B/tests/test_sass_wgmma 2>&1 | tail -1
timeout 170 $B/tests/gpu_test_router_gemm > $O/gpu_test_router_gemm2.txt 2>&1 &
(timeout 150 $L check $B/cluster-check.json --tokens 1,127,8191 > $O/check-cluster.txt 2>&1
 timeout 60 $L check $B/variants.json --tokens 8192 >> $O/check-cluster.txt 2>&1
 echo "check rc=$?" >> $O/check-cluster.txt)
grep -E "PASS|FAIL|rc=|rror" $O/check-cluster.txt | grep -vE "^\s+\S+\s+(fp32|bf16)" | head -40
wait
echo "gpu_test_router_gemm: $(tail -3 $O/gpu_test_router_gemm2.txt | tr '\n' ' ')"
grep -E "FAIL|ERROR|LINE|OK \]" $O/gpu_test_router_gemm2.txt | head -20
