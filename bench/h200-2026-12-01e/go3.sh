#!/usr/bin/env bash
# session 20, device call 3: lg_st16_part straight-line (per-expert qt lines): K6, fp8_quant_batched, K4b
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s); left() { echo $(( 420 - ($(date +%s) - T0) )); }
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
b() { local l; l=$(left); [[ $l -lt 20 ]] && { echo "skip $1"; return; }
  echo "== lingen bench $1 --tokens $2"
  timeout $(( l < 90 ? l : 90 )) build-device/lingen bench "$1" --tokens "$2" 2>&1 | grep -E "^lg_|ceiling|rror|^kernel"; }
{
b configs/kernels/swiglu-quant.json 65536
b .carry/c3.json 65536
b configs/kernels/swiglu-quant.json 8192
b configs/kernels/moe.json 8192
} > "$OUT/bench.txt" 2>&1
echo "bench done at $(( $(date +%s) - T0 )) s" >> "$OUT/bench.txt"
CTESTS="gpu_test_swiglu_quant gpu_test_fp8_quant gpu_test_moe:test_permute_quant gpu_test_moe:test_deterministic" PYTESTS="python/tests/test_gpu_swiglu.py python/tests/test_gpu_quant.py" \
  tools/device_tests.sh 200 > /dev/null 2>&1
echo "tests done at $(( $(date +%s) - T0 )) s" >> "$OUT/summary.txt"
. tools/device_env.sh; device_env build-device
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
M=lts__t_sectors_op_write.sum,lts__t_requests_srcunit_tex_op_write.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,smsp__inst_executed.sum
l=$(left); [[ $l -gt 40 ]] && timeout $(( l - 5 )) "$ncu" --clock-control none --section SpeedOfLight --metrics $M -k "regex:batch_swiglu_quant_(fwd|bwd)_bf16_n512_e256_both_pow2$" -c 2 \
    build-device/lingen bench configs/kernels/swiglu-quant.json --tokens 65536 --reps 1 > "$OUT/ncu.txt" 2>&1
true
