#!/usr/bin/env bash
# tools/device_jitload.sh - docs/performance.md's JIT and load rows for the
# ling-mini-2.0 step (21 kernels), for one or more lingen builds side by side
# (e.g. before and after a change), in one call on the GPU machine:
#
#   tools/device_jitload.sh NAME=DIR...      (DIR/lingen with libcjson.so.1 beside it)
#
# For each build, with its own fresh disk cache ($LINGEN_CACHE_DIR):
#   1. lingen build -j $(nproc): the whole step compiled cold into a bundle (wall time);
#   then, once every build has done 1 (the page cache of NVRTC warm for all):
#   2. lingen bench --load, 5 new processes from the warm cache, 5 from the bundle (JSON lines);
#   3. the same from the bundle once with LINGEN_LOG=1 (each kernel's read and load times);
#   4. lingen bench --jit --reps 3 --json: compiles (first, median, p90), the
#      whole step serially and in threads where the build has that part,
#      cache read/load/get, launch host cost.
# Files under $OUT (default out/device): build-NAME.txt, load-NAME.jsonl,
# loadlog-NAME.txt, jit-NAME.json, machine.txt. Each step has a timeout.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/device}
mkdir -p "$out"
export LINGEN_TUNING=$PWD/configs/tuning
{
	date -u
	nproc
	grep -m1 'model name' /proc/cpuinfo
	nvidia-smi -L 2>&1
	cat /proc/loadavg
} > "$out/machine.txt"
cat "$out/machine.txt"
builds=("$@")
[[ ${#builds[@]} -gt 0 ]] || builds=(new=build-jit/new)
step=/tmp/jitload-step.json

for b in "${builds[@]}"; do
	name=${b%%=*} dir=${b#*=}
	export LINGEN_CACHE_DIR=/tmp/jitload-cache-$name
	rm -rf "$LINGEN_CACHE_DIR" "/tmp/jitload-bundle-$name"
	"$dir/lingen" expand configs/models/ling-mini-2.0.json > "$step" || exit 1
	start=$EPOCHREALTIME
	# a build named link* gets the linked module (lingen build --link)
	link=
	[[ $name == link* ]] && link=--link
	timeout 30 "$dir/lingen" build "$step" -o "/tmp/jitload-bundle-$name" --arch sm_90a -j "$(nproc)" $link \
		> "$out/build-$name.txt" 2>&1
	echo "rc $? wall $(awk "BEGIN { print $EPOCHREALTIME - $start }") s" >> "$out/build-$name.txt"
	echo "$name build: $(tail -2 "$out/build-$name.txt" | tr '\n' ' ')"
done
for b in "${builds[@]}"; do
	name=${b%%=*} dir=${b#*=}
	export LINGEN_CACHE_DIR=/tmp/jitload-cache-$name
	bundle=/tmp/jitload-bundle-$name
	: > "$out/load-$name.jsonl"
	for i in 1 2 3 4 5; do
		timeout 10 "$dir/lingen" bench --load "$step" --json >> "$out/load-$name.jsonl" 2>&1
		timeout 10 "$dir/lingen" bench --load "$step" --bundle "$bundle" --json >> "$out/load-$name.jsonl" 2>&1
	done
	LINGEN_LOG=1 timeout 10 "$dir/lingen" bench --load "$step" --bundle "$bundle" > "$out/loadlog-$name.txt" 2>&1
	LINGEN_LOG=1 timeout 10 "$dir/lingen" bench --load "$step" >> "$out/loadlog-$name.txt" 2>&1
	echo "$name load:"
	cat "$out/load-$name.jsonl"
done
for b in "${builds[@]}"; do
	name=${b%%=*} dir=${b#*=}
	export LINGEN_CACHE_DIR=/tmp/jitload-cache-$name
	timeout 45 "$dir/lingen" bench --jit "$step" --reps 3 --json > "$out/jit-$name.json" 2> "$out/jit-$name.err"
	echo "$name jit rc $?:"
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["compile"], d["cache"])' \
		"$out/jit-$name.json" 2>&1 | head -5
done
