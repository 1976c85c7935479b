#!/usr/bin/env bash
# tools/sanitize.sh - compute-sanitizer over every GPU kernel at odd shapes,
# on the GPU machine, from the repository root, with the build-device/
# folder tools/device.sh makes:
#
#   tools/sanitize.sh [--build DIR] [--tokens N[,N...]] [SPEC...]
#
# Runs `lingen check SPEC --tokens N...` (every kernel of every spec checked
# against its CPU reference) under each of compute-sanitizer's memcheck,
# racecheck, initcheck and synccheck tools, and prints one line per tool and
# spec with its error count. SPEC defaults to configs/kernels/*.json, tokens
# to 1,127,1000,8191 (partial tiles and slices), DIR to build-device. Exit
# status 1 if any tool reported an error or a check failed.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=build-device
tokens=1,127,1000,8191
specs=()
while [[ $# -gt 0 ]]; do
	case $1 in
	--build) dir=$2; shift 2 ;;
	--tokens) tokens=$2; shift 2 ;;
	-h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) specs+=("$1"); shift ;;
	esac
done
[[ ${#specs[@]} -gt 0 ]] || specs=(configs/kernels/*.json)
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
export LINGEN_CACHE_DIR=${LINGEN_CACHE_DIR:-$(mktemp -d /tmp/lingen-sanitize.XXXXXX)}
# compile once into the cache, outside the sanitizer (the H200 is sm_90a)
"$dir/lingen" build "${specs[@]}" --arch sm_90a -o /tmp/lingen-sanitize-warm > /dev/null 2>&1
fail=0
for tool in memcheck racecheck initcheck synccheck; do
	for spec in "${specs[@]}"; do
		log=$(mktemp)
		extra=()
		[[ $tool == memcheck ]] && extra=(--leak-check no)
		"$cs" --tool "$tool" "${extra[@]}" --error-exitcode 99 --print-limit 20 \
			"$dir/lingen" check "$spec" --tokens "$tokens" > "$log" 2>&1
		rc=$?
		errors=$(grep -Eo 'ERROR SUMMARY: [0-9]+' "$log" | awk '{ s += $3 } END { print s + 0 }')
		hazards=$(grep -Eo 'RACECHECK SUMMARY: [0-9]+ hazard' "$log" | awk '{ s += $3 } END { print s + 0 }')
		status=ok
		if [[ $rc -ne 0 || $errors -ne 0 || $hazards -ne 0 ]]; then
			status="FAIL (exit $rc)"
			fail=1
			grep -E '=========  (Invalid|Race|Uninitialized|Barrier|Error)' "$log" | head -5
		fi
		printf '%-10s %-45s errors %d, hazards %d: %s\n' "$tool" "$spec" "$errors" "$hazards" "$status"
		rm -f "$log"
	done
done
exit $fail
