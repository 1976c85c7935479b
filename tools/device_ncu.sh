#!/usr/bin/env bash
# tools/device_ncu.sh - on the GPU machine, from the repository root, with
# build-device/ (tools/device.sh) carried along: Nsight Compute on chosen
# kernels of `lingen bench`, one process each, then a table of what bounds
# them (duration, DRAM and L2 throughput, issue slots, the top warp stall).
#
#   tools/device_ncu.sh SPEC:TOKENS:REGEX[:COUNT] ...
#
# REGEX picks kernel names (ncu -k regex:REGEX); COUNT launches are
# profiled (default 1: e.g. 2 for a family's two kernels). Clocks are left
# alone (--clock-control none, METHOD.md). Reports go to $LOGS (default
# out/ncu-logs) and are packed into $OUT/ncu.tar.gz with the table in
# $OUT/ncu.txt (OUT default out/device). SASS=1 profiles with --set full and
# the source imported (set LINGEN_NVRTC_OPTIONS=-lineinfo for CUDA lines
# too) and adds, a kernel each, the warp-state samples, the tensor pipe and
# the SASS lines with the most stall samples to $OUT/ncu-sass.txt.
set -u
cd "$(dirname "$0")/.."
res=${OUT:-out/device}
out=${LOGS:-out/ncu-logs}
mkdir -p "$out" "$res"
. tools/device_env.sh
device_env build-device
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
sections="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats
	--section SchedulerStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis"
for e in "$@"; do
	IFS=: read -r spec tok re cnt <<< "$e"
	n=$(echo "$re" | tr -c 'A-Za-z0-9_\n' '_')
	if [[ ${SASS:-0} == 1 ]]; then
		timeout 240 "$ncu" --clock-control none --set full --import-source yes -k "regex:$re" -c "${cnt:-1}" \
			-f -o "$out/$n" build-device/lingen bench "$spec" --tokens "$tok" --reps 3 > "$out/$n.log" 2>&1
		"$ncu" -i "$out/$n.ncu-rep" --page details > "$out/$n.txt" 2>&1
		"$ncu" -i "$out/$n.ncu-rep" --page raw --csv > "$out/$n.raw" 2>&1
		"$ncu" -i "$out/$n.ncu-rep" --page source --csv --print-source sass > "$out/$n.sass" 2>&1
		python3 tools/ncu_sass_top.py "$n" "$out/$n.raw" "$out/$n.sass" >> "$res/ncu-sass.txt"
		rm -f "$out/$n.ncu-rep"
		continue
	fi
	# shellcheck disable=SC2086
	timeout 120 "$ncu" --clock-control none $sections -k "regex:$re" -c "${cnt:-1}" \
		build-device/lingen bench "$spec" --tokens "$tok" --reps 3 > "$out/$n.txt" 2>&1
done
metric() { # FILE NAME: the values of one metric line, in launch order
	awk -v m="$2" 'index($0, m) == 5 || index($0, " " m " ") { print $NF }' "$1" | tr '\n' ' '
}
{
	printf "%-44s %-14s %-10s %-10s %-9s %-9s %-8s %s\n" kernel "duration us" "DRAM %" "L2 %" "issue %" \
		"occup %" "regs" "stall ncu names first"
	for f in "$out"/*.txt; do
		[[ $f == */ncu-sass.txt ]] && continue
		k=$(grep -oE '^  lg_[a-z0-9_]+' "$f" | head -n 1 | tr -d ' ')
		printf "%-44s %-14s %-10s %-10s %-9s %-9s %-8s %s\n" "${k:-$(basename "$f")}" \
			"$(metric "$f" Duration)" "$(metric "$f" "DRAM Throughput")" \
			"$(metric "$f" "L2 Cache Throughput")" "$(metric "$f" "Issue Slots Busy")" \
			"$(metric "$f" "Achieved Occupancy")" "$(metric "$f" "Registers Per Thread")" \
			"$(grep -oE 'spends [0-9.]+ cycles being stalled [a-zA-Z ]+' "$f" | head -n 1 | sed 's/ *$//')"
	done
} > "$res/ncu.txt"
cat "$res/ncu.txt"
tar -czf "$res/ncu.tar.gz" -C "$out" .
