#!/usr/bin/env bash
# tools/device_rz.sh - the rounding-mode proof on the GPU: the GPU tests of
# every family with a bf16 output, run once on the normal build and once on
# a build whose lg_pack_bf16x2 rounds toward zero (templates/bf16.cuh's
# cvt.rn.bf16x2.f32 made cvt.rz.bf16x2.f32). Each must pass on the first
# and fail on the second. (tests/test_compare.c's test_rz_every_family
# proves the same on the CPU against the references; the emulator in
# tools/emu replaces lg_pack_bf16x2 by C, so it cannot run the mutant.)
#
#   tools/device_rz.sh build           here: build-device (tools/device.sh) and
#                                      build-rz, the mutant (templates restored after)
#   tools/device_rz.sh run [SECONDS]   on the GPU machine, build-device and
#                                      build-rz carried: writes $OUT/rz.txt
#
# CTESTS (default below) picks the tests; a test TEST:PATTERN runs only its
# cmocka tests matching PATTERN. JOBS (default 1) tests run side by side
# (they time nothing; their float64 references share the cores). The table in $OUT/rz.txt, one line a test:
# "normal rc, mutant rc, verdict"; the verdict is "caught" when the normal
# build passes (0) and the mutant fails (not 0 and not 77).
set -u
cd "$(dirname "$0")/.."
case ${1:-} in
build)
	tools/device.sh build-device
	trap 'git checkout -- templates/bf16.cuh' EXIT
	sed -i 's/cvt\.rn\.bf16x2\.f32/cvt.rz.bf16x2.f32/' templates/bf16.cuh
	grep -q 'cvt.rz.bf16x2.f32' templates/bf16.cuh || { echo "tools/device_rz.sh: no cvt.rn.bf16x2 to mutate" >&2; exit 1; }
	tools/device.sh build-rz
	;;
run)
	lim=${2:-300}
	res=${OUT:-out/device}
	mkdir -p "$res"
	. tools/device_env.sh
	tests=${CTESTS:-gpu_test_families:group_rmsnorm_gate gpu_test_families:qk_norm_rope \
		gpu_test_families:cross_entropy gpu_test_cross_entropy gpu_test_families:rmsnorm_quant \
		gpu_test_families:rmsnorm gpu_test_families:rmsnorm_router gpu_test_families:swiglu_quant \
		gpu_test_families:batch_swiglu_quant gpu_test_families:moe_unpermute gpu_test_families:moe_permute \
		gpu_test_fp8_gemm:test_bf16_exact gpu_test_fp8_grouped_gemm:test_bf16_exact}
	one() { # TEST: its line of the table
		local t=$1 b rc=() verdict=caught
		for b in build-device build-rz; do
			(device_env "$b"
			 LINGEN_CACHE_DIR=$(mktemp -d /tmp/lingen-rz-cache.XXXXXX) \
				LINGEN_TEST_FILTER=$([[ $t == *:* ]] && echo "${t#*:}") \
				timeout "$lim" "$b/tests/${t%%:*}" > "$res/rz-${t//:/-}-$b.log" 2>&1)
			rc+=($?)
		done
		if [[ ${rc[0]} -ne 0 ]]; then
			verdict="NORMAL BUILD FAILS"
		elif [[ ${rc[1]} -eq 0 || ${rc[1]} -eq 77 ]]; then
			verdict="NOT CAUGHT"
		fi
		printf '%-40s %-7s %-7s %s\n' "$t" "${rc[0]}" "${rc[1]}" "$verdict"
	}
	printf '%-40s %-7s %-7s %s\n' test normal mutant verdict > "$res/rz.txt"
	n=0
	for t in $tests; do
		one "$t" > "$res/rz-line-$n.txt" &
		n=$((n + 1))
		while (($(jobs -rp | wc -l) >= ${JOBS:-1})); do wait -n; done
	done
	wait
	for ((i = 0; i < n; i++)); do cat "$res/rz-line-$i.txt" >> "$res/rz.txt"; done
	rm -f "$res"/rz-line-*.txt
	status=0
	grep -qE 'NORMAL BUILD FAILS|NOT CAUGHT' "$res/rz.txt" && status=1
	cat "$res/rz.txt"
	exit $status
	;;
*)
	echo "usage: tools/device_rz.sh build | run [SECONDS]" >&2
	exit 2
	;;
esac
