#!/usr/bin/env bash
# session 19, device call 1: round-1 branches: tests, benches, ncu
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s); left() { echo $(( 560 - ($(date +%s) - T0) )); }
export OUT=${OUT:-out/device}; mkdir -p "$OUT"
CTESTS="${CTESTS_EXTRA:-} gpu_test_moe:test_permute_pipelined gpu_test_moe:test_permute_quant gpu_test_moe:test_deterministic
 gpu_test_moe:test_arg_needs gpu_test_moe:test_permute gpu_test_moe:test_unpermute gpu_test_moe:test_row_map gpu_test_moe:test_no_optional
 gpu_test_swiglu_quant gpu_test_fp8_quant gpu_test_qk_norm_rope gpu_test_group_rmsnorm_gate gpu_test_k1 gpu_test_router_gemm" \
PYTESTS="python/tests/test_gpu_moe.py python/tests/test_gpu_quant.py python/tests/test_gpu_router.py" \
  tools/device_tests.sh 150 > /dev/null 2>&1
echo "tests done at $(( $(date +%s) - T0 )) s" >> "$OUT/summary.txt"
b() { # SPEC TOKENS
  local l; l=$(left); [[ $l -lt 20 ]] && { echo "skip $1"; return; }
  echo "== lingen bench $1 --tokens $2"
  timeout $(( l < 90 ? l : 90 )) build-device/lingen bench "$1" --tokens "$2" 2>&1 | grep -E "^lg_|ceiling|rror|^kernel"
}
{
for s in $BENCHES; do b "${s%%@*}" "${s##*@}"; done
} > "$OUT/bench.txt" 2>&1
echo "bench done at $(( $(date +%s) - T0 )) s" >> "$OUT/bench.txt"
l=$(left)
[[ $l -gt 40 && -n "${NCU:-}" ]] && timeout $(( l - 5 )) tools/device_ncu.sh $NCU > "$OUT/ncu.txt" 2>&1
tar czf "$OUT/ncu-reports.tgz" out/ncu* 2>/dev/null
true
