#!/bin/bash
# emu_sm90.sh - ctest's test_emu_sm90: the sm_90a GEMMs (wgmma, TMA,
# mbarriers) run on the CPU: fp8_gemm's and fp8_grouped_gemm's kernels run
# on the CPU through tools/emu/emu90.h (tools/emu/fp8_gemm.sh) against a
# float64 reference, no GPU: the defaults of the forward, dgrad and wgrad
# (the overlapped epilogue with its first group out of the loop, clusters of
# two, the TMA epilogue, two buffers of it from a reduction of 3072) and the main tile options (tile.pingpong too), at token counts that
# leave partial tiles (1, 127, 301) and on few CTAs, so each walks many
# tiles and the ring's phases wrap. Then planted bugs (the last tile's store
# dropped; with two epilogue buffers, the wait for the other one's stores
# dropped; with one half-width buffer, the wait between its halves dropped)
# must fail, so the check is seen to bite. Then router_gemm's
# sm_90a forward and backward (bf16 wgmma, K- and MN-major operands, dy in
# 2 bf16 terms and tf32) through tools/emu/run.sh. Needs LINGEN (the CLI),
# g++ and python3; exits 77 (skipped) without g++.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
command -v g++ >/dev/null || { echo "emu_sm90.sh: no g++: skipped"; exit 77; }
export LINGEN=${LINGEN:-$root/build/lingen}
fails=0 runs=0
run() {
	runs=$((runs + 1))
	local out
	out=$("$root/tools/emu/fp8_gemm.sh" "$@" 2>&1)
	local rc=$?
	echo "$* -> $(echo "$out" | tail -n 1)"
	if [[ $rc -ne 0 ]]; then
		fails=$((fails + 1))
		echo "$out" | tail -n 12
	fi
}
# PASS N K M [TILE] [DTYPE]
run forward 640 2176 301
run forward 3072 2048 127
run forward 256 384 1
run forward 256 3200 200
run forward 256 4224 129 "" fp32
run dgrad 3200 256 301
run dgrad 208 2048 127
run dgrad 384 256 301 "" fp32
run wgrad 640 2176 301 "" fp32
run wgrad 208 384 127 "" bf16
ACCUMULATE=1 run wgrad 208 384 1000 "" fp32
run forward 640 2176 301 '{"m": 64}'
run forward 640 2176 301 '{"m": 256, "epilogue": 1}'
run forward 640 2176 301 '{"overlap": 1, "ahead": 0, "epilogue": 0}'
run forward 640 2176 301 '{"epilogue": 2}' bf16 2
run forward 640 2176 301 '{"epilogue": 3}'
run wgrad 640 2176 301 '{"epilogue": 3}' fp32
run forward 320 640 301 '{"n": 160, "ahead": 0}'
run forward 208 4096 333 '{"m": 256, "cluster": 2, "epilogue": 1}'
run dgrad 208 2048 301 '{"overlap": 1, "ahead": 16, "stages": 3, "cluster": 1}'
run wgrad 640 2176 301 '{"ahead": 8}' fp32
run forward 640 2176 301 '{"pingpong": 1}'
run dgrad 384 256 1000 '{"pingpong": 1, "epilogue": 2}' fp32
run forward 208 128 301 '{"pingpong": 1, "cluster": 1, "epilogue": 0}'
run wgrad 640 2176 301 '{"pingpong": 1}' fp32
ACCUMULATE=1 run wgrad 208 384 1000 '{"m": 256, "epilogue": 1}' fp32
run wgrad 208 384 127 '{"m": 256}' bf16
EXPERTS=7 run forward 640 2176 1000
EXPERTS=5 run dgrad 208 2048 301 '{"pingpong": 1}'
EXPERTS=5 run forward 256 4224 301
EXPERTS=5 run dgrad 208 2048 301 '{"overlap": 1}'
EXPERTS=7 run wgrad 640 2176 1000 "" fp32
ACCUMULATE=1 EXPERTS=6 run wgrad 208 384 700 "" fp32
EXPERTS=6 run wgrad 208 384 700 '{"ahead": 8}' bf16
EXPERTS=7 run wgrad 640 2176 1000 '{"pingpong": 1, "m": 64}' fp32
ACCUMULATE=1 EXPERTS=6 run wgrad 208 384 700 '{"pingpong": 1, "m": 64}' fp32
planted() { # WHAT MUTATION ARGS...: the mutant must fail
	local what=$1 mut=$2
	shift 2
	if EMU_MUTATE=$mut "$root/tools/emu/fp8_gemm.sh" "$@" >/dev/null 2>&1; then
		echo "emu_sm90.sh: the planted bug ($what) was not caught"
		fails=$((fails + 1))
	else
		echo "the planted bug ($what) -> caught"
	fi
}
planted "the last tile's store dropped" \
	'k.replace("if (pta >= 0) store_before(); // the last tile", "// dropped")' forward 640 2176 301
# two epilogue buffers, one barrier a tile: without the wait for the other
# buffer's stores before it, the next tile overwrites what they read
planted "epilogue 2's wait dropped" \
	'__import__("re").sub(r"(the next tile: its stores have read it\n\s*)if \(\(threadIdx.x & 127\) == 0\) lg_bulk_wait_read\(0\);", r"\1", k)' \
	forward 640 2176 301 '{"epilogue": 2}' bf16 2
# one half-width buffer: without the wait for the first half's stores, the
# second half overwrites what they read
planted "epilogue 3's wait between the halves dropped" \
	'__import__("re").sub(r"(once the first half.s stores have read it\n\s*)if \(\(threadIdx.x & 127\) == 0\) lg_bulk_wait_read\(0\);", r"\1", k)' \
	forward 640 2176 301 '{"epilogue": 3}'
# pingpong: a warpgroup that reads its pair's stages as if the other tile had
# none (the ring's count off) must deadlock or fail
EMU_TIMEOUT=30 planted "pingpong's stage count" \
	'k.replace("(kt + wg < no ? kt + wg : no)", "(kt < no ? kt : no)")' forward 640 2176 301 '{"pingpong": 1}'
# and the grouped wgrad's (experts of different lengths) with the other tile's
# stages taken as this one's
EMU_TIMEOUT=30 EXPERTS=7 planted "pingpong's other tile's count" \
	'k.replace("wg || two ? otn : 0", "two ? nkt : 0")' wgrad 640 2176 1000 '{"pingpong": 1, "m": 64}' fp32
# and a bf16 output rounded toward zero must fail the half-ulp bound
planted "bf16 rounded toward zero" 'k.replace("lg_pack_bf16x2(", "emu_pack_bf16x2_rz(")' forward 640 2176 301
router() { # PASS KEYS M TERMS: router_gemm's sm_90a form
	runs=$((runs + 1))
	local out
	out=$(ARCH=sm_90a "$root/tools/emu/run.sh" "$1" "$2" "$3" "" "" "" "" "$4" 2>&1)
	local rc=$?
	echo "router_gemm $1 $2 at $3 -> $(echo "$out" | tail -n 1)"
	if [[ $rc -ne 0 ]]; then
		fails=$((fails + 1))
		echo "$out" | tail -n 12
	fi
}
router forward '"hidden": 2048, "experts": 256' 301 1
router backward '"hidden": 2048, "experts": 256, "precision": "bf16x2"' 127 2
TF32=1 router backward '"hidden": 384, "experts": 40, "precision": "tf32"' 301 2
echo "emu_sm90.sh: $runs runs, $fails failed"
[[ $fails -eq 0 ]]
