#!/usr/bin/env bash
# tools/device_pending.sh - on the GPU machine, from the repository root, with
# build-device/ (tools/device.sh) carried: in one call of under 10 minutes,
# what main holds that no GPU has run yet (bench/gpu-tests.md, "Not run
# yet"), then its timings:
#   1. GPU cases in groups, TESTS (NAME:SHARDS:FAMILY,...; by default every case of
#      the FP8 GEMMs, whose producer and wgrad registers the fifteenth session
#      changed, and of cross_entropy_quant, which took a row pitch for qt;
#      the group named wgrad runs fp8_gemm's wgrad specs alone, e3 those of
#      tile.epilogue 3, by LINGEN_TEST_MATCH), each over several processes
#      (LINGEN_TEST_SHARD; their float64 references take the CPU time), and
#      the special checks (SPECIAL: gpu_test_fp8_gemm and
#      gpu_test_fp8_grouped_gemm, bf16 = fp32 rounded to nearest bit for
#      bit; gpu_test_cross_entropy; test_sass_wgmma and test_sass_ffma, which
#      need the GPU machine's cuobjdump), and the FP8 head's GPU pytest
#      (PYTESTS) -> $OUT/t_<group>.<shard>.txt;
#   2. bench/fp8-gemm/tile_sweep.py $SWEEP, TFLOP/s beside _scaled_mm (by
#      default defaults15: the wgrad's shapes and two forwards, each twice, with
#      the library carried as carry/old/liblingen.so first when there is one,
#      the code before the fifteenth session's register change, made here by
#      `git worktree add /tmp/old 5eef2cb && cmake -S /tmp/old -B /tmp/old/b
#      -DCMAKE_BUILD_TYPE=Release && cmake --build /tmp/old/b --target lingen_shared`
#      and copied, links followed, to carry/old/liblingen.so) -> $OUT/sweep.txt;
#   3. lingen bench of configs/kernels/odd-counts.json at odd token counts
#      (6001, 8191, and 6025, 8169 whose former qt pitch, round_up(tokens, 16),
#      was an odd multiple of 16; now round_up(tokens, 128)),
#      each beside its count rounded up to 128 -> $OUT/odd.txt;
#   4. examples/train_moe.py, FP8 against BF16, both heads chunked, each
#      step one CUDA graph (STEP_ARGS, default --graph: the faster form of
#      both modes since the fourteenth session) -> $OUT/step.{json,md,png};
#   5. (not by default) tools/device_ncu.sh with SASS=1 on $NCU (default the
#      K 2048 forward) -> $OUT/ncu-sass.txt, ncu.tar.gz;
#   6. (not by default) lingen bench --jit of the K 2048 GEMMs, plain and
#      with -Ofc=max, and the qkv sweep with -Ofc=max -> $OUT/jit*.txt,
#      sweep-ofc.txt;
#   7. (not by default) tools/fp8_gemm_bench.py --dense-only: accuracy and
#      TFLOP/s of the dense forms beside _scaled_mm and bf16 -> $OUT/table.md;
#   8. tile.pingpong (the sixteenth session's, never timed): tile_sweep.py
#      pingpong (dense, the wgrad with waves too) and tools/fp8_grouped_tiles.py
#      with the pingpong forward and wgrad tiles (grouped; the wgrad's at random
#      counts too) -> $OUT/pingpong.txt.
# With build-rz/ carried too (tools/device_rz.sh build), tools/device_rz.sh
# runs beside step 1 (its GPU tests time nothing; CTESTS as there, by
# default the FP8 GEMMs' bf16-exactness tests, the families' last ones not yet
# run against the mutant on a GPU; RZ_SHARD, default
# 0/3, the share of each family's runs it takes). The test logs come back
# packed in $OUT/tests.tgz. Each step under its own timeout; 6 files come
# back. OUT defaults to out/device. For a shorter call: STEPS (default
# "1 8 4") picks the steps, TEST_TIMEOUT (200 s) bounds step 1, TESTS
# its groups (NAME:SHARDS:FAMILY,FAMILY...), RZ_JOBS the rounding proof's
# tests side by side (4),
# SWEEP ("defaults15") is step 2's sets of bench/fp8-gemm/tile_sweep.py, and
# STEP_SECONDS (30) step 4's timed part, STEP_ARGS its last arguments
# (default --graph; --profile: each mode's kernels by kind). At most 560 s in all.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/device}
mkdir -p "$out"
. tools/device_env.sh
device_env build-device
export LINGEN_LIBRARY=$PWD/build-device/liblingen.so PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/build-device${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
start=$SECONDS
steps=" ${STEPS:-1 8 4} "
on() { [[ $steps == *" $1 "* ]]; }
fam() { # NAME SHARDS FAMILY...: SHARDS processes side by side (LINGEN_TEST_SHARD)
	local name=$1 n=$2 i
	shift 2
	for ((i = 0; i < n; i++)); do
		(LINGEN_TEST_SHARD=$i/$n LINGEN_TEST_MATCH=${match:-} timeout "${TEST_TIMEOUT:-200}" build-device/tests/gpu_test_families "$@" \
			> "$out/t_$name.$i.txt" 2>&1
		 echo "rc=$?" >> "$out/t_$name.$i.txt") &
	done
}
if on 1; then
	for g in ${TESTS:-gemm:6:fp8_gemm grouped:3:fp8_grouped_gemm ce:1:cross_entropy_quant}; do
		IFS=: read -r name n fams <<< "$g"
		match= # the groups named e3 and wgrad run only their specs (LINGEN_TEST_MATCH)
		[[ $name == e3 ]] && match='"epilogue": 3'
		[[ $name == wgrad ]] && match='"pass": "wgrad"'
		# shellcheck disable=SC2086
		fam "$name" "$n" ${fams//,/ }
	done
	for t in ${SPECIAL:-gpu_test_fp8_gemm gpu_test_fp8_grouped_gemm gpu_test_cross_entropy test_sass_wgmma test_sass_ffma}; do
		[[ -x build-device/tests/$t ]] || continue
		(timeout "${TEST_TIMEOUT:-200}" "build-device/tests/$t" > "$out/t_$t.txt" 2>&1
		 echo "rc=$?" >> "$out/t_$t.txt") &
	done
	# shellcheck disable=SC2086
	(timeout "${TEST_TIMEOUT:-200}" python3 -m pytest -q ${PYTESTS:-python/tests/test_gpu_nn.py python/tests/test_gpu_head.py} \
		> "$out/t_pytest.txt" 2>&1
	 echo "rc=$?" >> "$out/t_pytest.txt") &
fi
if on 1 && [[ -d build-rz ]]; then
	(OUT=$out/rz LINGEN_CACHE_DIR= JOBS=${RZ_JOBS:-4} LINGEN_TEST_SHARD=${RZ_SHARD:-0/3} CTESTS=${CTESTS:-"gpu_test_fp8_gemm:test_bf16_exact \
		gpu_test_fp8_grouped_gemm:test_bf16_exact"} timeout "${TEST_TIMEOUT:-200}" bash tools/device_rz.sh run \
		$((${TEST_TIMEOUT:-200} - 10)) > "$out/t_rz.txt" 2>&1
	 echo "rc=$?" >> "$out/t_rz.txt") &
fi
wait
if on 1; then
	echo "== 1. GPU cases ($((SECONDS - start)) s)"
	for f in "$out"/t_*.txt; do
		echo "-- $(basename "$f"): $(grep -c '^\[       OK \]' "$f") tests passed, $(grep -c '^\[  FAILED  \]' "$f") failed, $(tail -n 1 "$f")"
		grep -E "FAIL|mismatch|NOT CAUGHT|NORMAL BUILD|runs failed" "$f" | head -n 5
	done
	[[ -f $out/t_rz.txt ]] && cat "$out/t_rz.txt"
	tar -czf "$out/tests.tgz" -C "$out" $(cd "$out" && ls -d t_*.txt rz 2>/dev/null) && rm -rf "$out"/t_*.txt "$out/rz"
fi
if on 2; then
	echo "== 2. tile_sweep.py defaults ($((SECONDS - start)) s)"
	for lib in carry/old/liblingen.so "$LINGEN_LIBRARY"; do
		[[ -f $lib ]] || continue
		echo "-- $lib"
		LINGEN_LIBRARY=$PWD/${lib#"$PWD"/} timeout 100 python3 bench/fp8-gemm/tile_sweep.py ${SWEEP:-defaults15} 2>&1
	done | tee "$out/sweep.txt" | tail -n 30
fi
if on 3; then
	echo "== 3. odd token counts ($((SECONDS - start)) s)"
	timeout 60 build-device/lingen bench configs/kernels/odd-counts.json --odd --tokens 6001,8191,6025,8169 --reps 30 \
		2>&1 | tee "$out/odd.txt" | tail -n 30
fi
if on 4; then
	echo "== 4. the step ($((SECONDS - start)) s)"
	sec=${STEP_SECONDS:-30}
	timeout $((sec * 4 + 30)) python3 examples/train_moe.py --steps 30 --eval-every 0 --no-bar --time-limit "$sec" \
		--modes fp8,bf16 --fp8-head --head fused --out "$out/step" ${STEP_ARGS---graph} 2>&1 | tail -n 12
fi
if on 5; then
	echo "== 5. Nsight Compute, SASS lines ($((SECONDS - start)) s)"
	# shellcheck disable=SC2086
	SASS=1 LINGEN_NVRTC_OPTIONS=-lineinfo OUT=$out timeout 200 bash tools/device_ncu.sh \
		${NCU:-bench/fp8-gemm/k2048.json:8192:fp8_gemm_fwd} > /dev/null 2>&1
	head -n 40 "$out/ncu-sass.txt"
fi
if on 6; then
	echo "== 6. NVRTC of the FP8 GEMMs, and -Ofc=max ($((SECONDS - start)) s)"
	timeout 60 build-device/lingen bench --jit bench/fp8-gemm/k2048.json 2>&1 | tee "$out/jit.txt" | sed -n 1,8p
	LINGEN_NVRTC_OPTIONS=-Ofc=max timeout 60 build-device/lingen bench --jit bench/fp8-gemm/k2048.json 2>&1 \
		| tee "$out/jit-ofc.txt" | sed -n 1,8p
	LINGEN_NVRTC_OPTIONS=-Ofc=max timeout 100 python3 bench/fp8-gemm/tile_sweep.py qkv 2>&1 | tee "$out/sweep-ofc.txt"
fi
if on 7; then
	echo "== 7. the dense FP8 GEMM table, every peer ($((SECONDS - start)) s)"
	timeout 240 python3 tools/fp8_gemm_bench.py "$out/table.md" --dense-only --reps 10 2>&1 | tail -n 30
fi
if on 8; then
	echo "== 8. tile.pingpong ($((SECONDS - start)) s)"
	{
		timeout 150 python3 bench/fp8-gemm/tile_sweep.py pingpong 2>&1
		timeout 150 python3 tools/fp8_grouped_tiles.py --fwd-tiles '[{}, {"pingpong": 1}, {"pingpong": 1, "epilogue": 2}]' \
			--wgrad-tiles '[{}, {"pingpong": 1, "m": 64}, {"pingpong": 1, "m": 64, "epilogue": 2}]' 2>&1
	} | tee "$out/pingpong.txt" | grep -v '^|---'
fi
echo "== done in $((SECONDS - start)) s"
