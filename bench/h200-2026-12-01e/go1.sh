#!/usr/bin/env bash
# session 20, device call 1: the quant engine's register prefetch (tile.prefetch) on K6 / K7 / fp8_quant_batched
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s); left() { echo $(( 560 - ($(date +%s) - T0) )); }
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
b() { local l; l=$(left); [[ $l -lt 20 ]] && { echo "skip $1"; return; }
  echo "== lingen bench $1 --tokens $2"
  timeout $(( l < 90 ? l : 90 )) build-device/lingen bench "$1" --tokens "$2" 2>&1 | grep -E "^lg_|ceiling|rror|^kernel"; }
{
b configs/kernels/swiglu-quant.json 65536
b .carry/pf.json 65536
b configs/kernels/swiglu-quant.json 8192
b .carry/pf.json 8192
b .carry/pfq.json 65536
} > "$OUT/bench.txt" 2>&1 &
BP=$!
wait $BP
echo "bench done at $(( $(date +%s) - T0 )) s" >> "$OUT/bench.txt"
CTESTS="gpu_test_swiglu_quant gpu_test_fp8_quant" PYTESTS="" tools/device_tests.sh 200 > /dev/null 2>&1
echo "tests done at $(( $(date +%s) - T0 )) s" >> "$OUT/summary.txt"
. tools/device_env.sh; device_env build-device
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
M=lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,lts__t_requests_srcunit_tex_op_read.sum,lts__t_requests_srcunit_tex_op_write.sum,dram__bytes_read.sum,dram__bytes_write.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,smsp__inst_executed.sum
mkdir -p out/ncu
for re in 'batch_swiglu_quant_fwd_bf16_n512_e256_both_pow2$' 'batch_swiglu_quant_fwd_bf16_n512_e256_both_pow2_tf4a1' 'swiglu_quant_fwd_bf16_n512_both_pow2$' 'batch_swiglu_quant_bwd_bf16_n512_e256_both_pow2_ta1'; do
  l=$(left); [[ $l -lt 40 ]] && break
  n=$(echo "$re" | tr -c 'A-Za-z0-9_\n' '_')
  spec=.carry/pf.json; [[ $re == *'$' ]] && spec=configs/kernels/swiglu-quant.json
  timeout 100 "$ncu" --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats --print-details all --metrics $M -k "regex:$re" -c 1 \
    build-device/lingen bench "$spec" --tokens 65536 --reps 3 > "out/ncu/$n.txt" 2>&1
done
tar czf "$OUT/ncu.tar.gz" -C out ncu
true
