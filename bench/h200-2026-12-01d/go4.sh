#!/usr/bin/env bash
# session 19, device call 4: round-2 branches (router backward, group gate, row map, K4b, K1 fused)
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s); left() { echo $(( 540 - ($(date +%s) - T0) )); }
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
CTESTS="gpu_test_router_gemm gpu_test_group_rmsnorm_gate gpu_test_rmsnorm_router gpu_test_k1
 gpu_test_moe:test_row_map gpu_test_moe:test_deterministic gpu_test_moe:test_permute_quant gpu_test_moe:test_no_optional
 gpu_test_moe:test_permute gpu_test_moe:test_unpermute gpu_test_fp8_quant gpu_test_swiglu_quant gpu_test_bundle" \
PYTESTS="python/tests/test_gpu_router.py python/tests/test_gpu_gate.py python/tests/test_gpu_moe.py python/tests/test_torch.py" \
  tools/device_tests.sh 230 > /dev/null 2>&1
echo "tests done at $(( $(date +%s) - T0 )) s" >> "$OUT/summary.txt"
b() { local l; l=$(left); [[ $l -lt 20 ]] && { echo "skip $1"; return; }
  echo "== lingen bench $1 --tokens $2"
  timeout $(( l < 80 ? l : 80 )) build-device/lingen bench "$1" --tokens "$2" 2>&1 | grep -E "^lg_|ceiling|rror|^kernel"; }
{
for s in $BENCHES; do b "${s%%@*}" "${s##*@}"; done
} > "$OUT/bench.txt" 2>&1
echo "bench done at $(( $(date +%s) - T0 )) s" >> "$OUT/bench.txt"
l=$(left)
if [[ $l -gt 30 ]]; then
  export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
  timeout $(( l - 5 )) python3 -m lingen.bench --quick --only qk_norm_rope --only group_rmsnorm_gate --only router \
    > /dev/null 2> "$OUT/pybench-rows.txt"
  grep -v "^W1201\|^  " "$OUT/pybench-rows.txt" > "$OUT/pybench-short.txt"; rm -f "$OUT/pybench-rows.txt"
fi
true
