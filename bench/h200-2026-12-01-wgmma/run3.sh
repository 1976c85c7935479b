#!/usr/bin/env bash
# run2.sh cut to what little device time was left: the variants' speed,
# the launch host cost, lingen check of the cluster path at odd sizes.
set -u
B=${B:-build-wgmma}
R=$PWD
O=${OUT:-/tmp/o}
mkdir -p "$O"
src=$(cat $B/lingen-source-dir)
[[ -e $src/configs ]] || { mkdir -p "$src"; for f in configs tests templates python tools; do ln -sfn "$R/$f" "$src/$f"; done; }
export LINGEN_CACHE_DIR=/tmp/lcw
L=$B/lingen
(timeout ${T:-70} $L check $B/cluster-check.json --tokens 1,127,8191 > $O/check-cluster.txt 2>&1; echo "check rc=$?" >> $O/check-cluster.txt) &
timeout 40 $L bench $B/variants.json $B/square-variants.json --tokens 8192 2>&1 | tee $O/bench3.txt | grep -E "lg_|rror"
timeout 20 $L bench --jit configs/kernels/router-gemm.json --tokens 8192 > $O/bench3-jit.txt 2>&1
grep -E "batched|back to back" $O/bench3-jit.txt
wait
grep -E "PASS|FAIL|rc=|rror" $O/check-cluster.txt | head -40
