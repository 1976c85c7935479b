#!/usr/bin/env bash
# tools/fuzz.sh - run the libFuzzer harnesses of tests/fuzz (spec files, model
# configs, tuning files, bundle manifests, bundle indexes) under ASan + UBSan.
#
#   tools/fuzz.sh [SECONDS_EACH] [BUILD_DIR] [JOBS]
#                 (defaults: 15 s each, build-fuzz, 1 job per harness)
#
# Builds BUILD_DIR with clang and -DLINGEN_FUZZ=ON when needed, seeds each
# harness with the shipped files (configs/, a manifest lingen build writes)
# plus the corpus earlier runs kept in BUILD_DIR/corpus/<harness>, runs each
# for SECONDS_EACH, and prints one line per harness: executions, corpus size,
# and "0 crashes" or the crashing input (left in BUILD_DIR/crash-*). Exit
# status 1 if any harness found a crash, a leak or a timeout. The manifest
# harness also makes large and duplicated kernels lists (an input starting
# with a 0 byte) and fails an input that takes longer than
# LINGEN_FUZZ_MANIFEST_SECONDS (default 10) to load or be refused. The index
# harness reads its inputs as index.lgb beside a real bundle's cubin files
# (BUILD_DIR/seed-bundle, $LINGEN_FUZZ_BUNDLE), seeded with that bundle's
# index (format 2) and the same index in format 1.
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-15}
dir=${2:-build-fuzz}
jobs=${3:-1}

if [[ ! -x $dir/fuzz_spec ]]; then
	CC=clang cmake -B "$dir" -DLINGEN_FUZZ=ON -DLINGEN_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null &&
		cmake --build "$dir" -j "$(nproc)" > "$dir.log" 2>&1 || {
		echo "tools/fuzz.sh: building $dir failed (clang and libclang-rt-dev needed); see $dir.log" >&2
		exit 1
	}
fi

seeds=$dir/seeds
rm -rf "$seeds"
mkdir -p "$seeds"/{spec,model,tuning,manifest,index}
cp configs/kernels/*.json "$seeds/spec/"
cp configs/models/*.json "$seeds/model/"
cp configs/tuning/*.json "$seeds/tuning/"
for m in configs/models/*.json; do
	"$dir/lingen" expand "$m" -o "$seeds/spec/expanded-$(basename "$m")" 2> /dev/null
done
tmp=$(mktemp -d)
if LINGEN_CACHE_DIR=off "$dir/lingen" build configs/kernels/ling-mini-2.0-norms.json --arch sm_90a \
	-o "$tmp/bundle" --link > /dev/null 2>&1; then
	cp "$tmp/bundle/manifest.json" "$seeds/manifest/"
	# amplified seeds (fuzz_manifest.c): the kernels list made large, repeated
	# (2^16 records), each record repeated (2^10 records), one duplicate at the end
	for b in 10 2c 40; do
		{ printf "\\x00\\x$b"; cat "$tmp/bundle/manifest.json"; } > "$seeds/manifest/amplified-$b.json"
	done
	cp "$tmp/bundle/index.lgb" "$seeds/index/format-3.lgb"
	# format 2: no linked lines, no last (linked) field (bundles built before linked modules)
	awk -F '\t' -v OFS='\t' 'NR == 1 { $2 = 2 } $1 == "linked" { next }
		$1 == "kernel" { NF-- } { print }' \
		"$tmp/bundle/index.lgb" > "$seeds/index/format-2.lgb"
	# format 1: no cubins line, no offset field either (bundles built before cubins.lgc)
	awk -F '\t' -v OFS='\t' 'NR == 1 { $2 = 1 } $1 == "cubins" { next }
		$1 == "kernel" { $5 = ""; sub(/\t\t/, "\t") } { print }' \
		"$seeds/index/format-2.lgb" > "$seeds/index/format-1.lgb"
	rm -rf "$dir/seed-bundle"
	mv "$tmp/bundle" "$dir/seed-bundle"
else
	echo "tools/fuzz.sh: no NVRTC: the manifest and index harnesses start from an empty corpus" >&2
fi
export LINGEN_FUZZ_BUNDLE="$(cd "$dir" && pwd)/seed-bundle"
rm -rf "$tmp"

fail=0
for h in spec model tuning manifest index; do
	corpus=$dir/corpus/$h
	mkdir -p "$corpus"
	log=$dir/fuzz_$h.log
	(cd "$dir" && ASAN_OPTIONS=detect_leaks=1 ./fuzz_$h -max_total_time="$secs" -timeout=10 \
		-rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -jobs="$jobs" -workers="$jobs" \
		"corpus/$h" "seeds/$h") > "$log" 2>&1
	rc=$?
	execs=$(grep -h 'stat::number_of_executed_units' "$log" "$dir"/fuzz-*.log 2>/dev/null |
		awk '{ s += $2 } END { print s + 0 }')
	n=$(find "$corpus" -type f | wc -l)
	if [[ $rc -eq 0 ]]; then
		echo "fuzz_$h: $execs executions in ${secs} s, corpus $n inputs, 0 crashes"
	else
		echo "fuzz_$h: FAILED (exit $rc) after $execs executions; see $log"
		grep -E 'ERROR|SUMMARY|check failed|Test unit written' "$log" | head -5
		fail=1
	fi
	rm -f "$dir"/fuzz-*.log
done
exit $fail
