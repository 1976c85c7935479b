#!/usr/bin/env bash
# session 20, device call 5: K6's qt by TMA (tile.tma)
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s); left() { echo $(( 400 - ($(date +%s) - T0) )); }
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
CTESTS="gpu_test_swiglu_quant:test_k6_tma gpu_test_bundle" PYTESTS="" tools/device_tests.sh 150 > /dev/null 2>&1
echo "tests done at $(( $(date +%s) - T0 )) s" >> "$OUT/summary.txt"
b() { echo "== lingen bench $1 --tokens $2"
  timeout 90 build-device/lingen bench "$1" --tokens "$2" 2>&1 | grep -E "^lg_|ceiling|rror|^kernel"; }
{
b .carry/tma.json 65536
b configs/kernels/swiglu-quant.json 65536
b .carry/tma.json 8192
b .carry/tma.json 65536
} > "$OUT/bench.txt" 2>&1
. tools/device_env.sh; device_env build-device
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
M=lts__t_sectors_op_write.sum,lts__t_requests_srcunit_tex_op_write.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,smsp__inst_executed.sum
l=$(left); [[ $l -gt 40 ]] && timeout $(( l - 5 )) "$ncu" --clock-control none --section SpeedOfLight --section Occupancy --metrics $M -k "regex:batch_swiglu_quant_(fwd|bwd)_bf16_n512_e256_both_pow2_tm1$" -c 2 \
    build-device/lingen bench .carry/tma.json --tokens 65536 --reps 1 > "$OUT/ncu.txt" 2>&1
true
