#!/usr/bin/env bash
# tools/device_run.sh - run on the GPU machine, from the repository root, with
# the build-device/ folder made by tools/device.sh carried along:
#
#   tools/device_run.sh [--build DIR] [--tokens N[,N...]] [SPEC...]
#
# 1. every GPU test executable DIR/tests/gpu_test_* (run directly: the
#    CTestTestfile.cmake files hold the build machine's absolute paths);
# 2. lingen check SPEC... --tokens N...            -> $OUT/check.txt
# 3. lingen bench SPEC... --tokens N... --json     -> $OUT/bench.json
# then a summary table. SPEC defaults to configs/kernels/ling-mini-2.0-norms.json,
# tokens to 8192, DIR to build-device, OUT to out/device when unset.
# Exit status 1 if any step failed.
set -uo pipefail
cd "$(dirname "$0")/.."

dir=build-device
tokens=8192
specs=()
while [[ $# -gt 0 ]]; do
	case $1 in
	--build) dir=$2; shift 2 ;;
	--tokens) tokens=$2; shift 2 ;;
	-h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) specs+=("$1"); shift ;;
	esac
done
[[ ${#specs[@]} -gt 0 ]] || specs=(configs/kernels/ling-mini-2.0-norms.json)
out=${OUT:-out/device}
mkdir -p "$out"
if [[ ! -x $dir/lingen ]]; then
	echo "tools/device_run.sh: $dir/lingen missing: run tools/device.sh on the build machine and carry $dir" >&2
	exit 1
fi

# The tests look for configs/ under the source path they were built in.
. tools/device_env.sh
device_env "$dir"
nvidia-smi -L 2>/dev/null || echo "tools/device_run.sh: nvidia-smi not found"

names=()
results=()
record() { names+=("$1"); results+=("$2"); }

for t in "$dir"/tests/gpu_test_*; do
	[[ -x $t ]] || continue
	name=$(basename "$t")
	echo "== $name"
	start=$SECONDS
	if "$t"; then r=PASS; else r="FAIL (exit $?)"; fi
	record "$name" "$r in $((SECONDS - start)) s"
done

echo "== lingen check ${specs[*]} --tokens $tokens"
"$dir/lingen" check "${specs[@]}" --tokens "$tokens" 2>&1 | tee "$out/check.txt"
rc=${PIPESTATUS[0]}
if [[ $rc -eq 0 ]]; then r=PASS; else r="FAIL (exit $rc)"; fi
record "lingen check" "$r, $(grep -c '^PASS' "$out/check.txt") kernel runs passed"

echo "== lingen bench ${specs[*]} --tokens $tokens --json"
if "$dir/lingen" bench "${specs[@]}" --tokens "$tokens" --json > "$out/bench.json"; then
	record "lingen bench" "PASS -> $out/bench.json"
	if command -v python3 >/dev/null; then
		python3 - "$out/bench.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
print(f"{'kernel':<44} {'tokens':>7} {'median us':>10} {'GB/s':>8} {'% copy':>7}")
for r in rows:
    print(f"{r['kernel']:<44} {r['tokens']:>7.0f} {r['median_us']:>10.2f} {r['gbps']:>8.1f} {r['pct_copy']:>6.1f}%")
PY
	else
		cat "$out/bench.json"
	fi
else
	record "lingen bench" "FAIL (exit $?)"
fi

echo
echo "== summary ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1))"
failed=0
for i in "${!names[@]}"; do
	printf '  %-28s %s\n' "${names[$i]}" "${results[$i]}"
	[[ ${results[$i]} == PASS* ]] || failed=1
done
exit $failed
