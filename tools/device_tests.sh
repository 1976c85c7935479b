#!/usr/bin/env bash
# tools/device_tests.sh - on the GPU machine, from the repository root, with
# build-device/ (tools/device.sh), dist/ and .whl/ (tools/device_python.sh)
# carried along: every GPU test at once, C and Python, each under a time
# limit (their float64 CPU references, not the GPU, take the time: running
# them side by side uses the machine's cores), then a summary with the
# failures' excerpts; then `lingen bench` of each SPEC:TOKENS, one at a time.
#
#   CTESTS="gpu_test_k1 ..." PYTESTS="python/tests/test_gpu_x.py ..." \
#       tools/device_tests.sh [SECONDS] [SPEC:TOKENS ...]
#
# CTESTS defaults to every build-device/tests/gpu_test_*, PYTESTS to every
# python/tests/test_gpu_*.py and test_torch.py; SECONDS (each) to 300. A C
# test named TEST:PATTERN runs only its cmocka tests matching PATTERN
# (LINGEN_TEST_FILTER), so one long test can be spread over several
# processes (e.g. gpu_test_moe:test_row_map gpu_test_moe:test_unpermute).
# Logs go to $LOGS (default out/device-logs), one file a test, and are
# packed into $OUT/logs.tar.gz (OUT default out/device) with the summary
# in $OUT/summary.txt: two files come back from a device call.
set -u
cd "$(dirname "$0")/.."
lim=${1:-300}
[[ $# -gt 0 ]] && shift
res=${OUT:-out/device}
out=${LOGS:-out/device-logs}
mkdir -p "$out" "$res"
. tools/device_env.sh
device_env build-device
site=${SITE:-/tmp/site}
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" dist/lingen-*.whl .whl/*.whl \
	>/dev/null 2>&1 || echo "tools/device_tests.sh: the wheels did not install; Python tests will fail"
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
ctests=${CTESTS:-$(cd build-device/tests && ls gpu_test_* 2>/dev/null | tr '\n' ' ')}
pytests=${PYTESTS:-$(ls python/tests/test_gpu_*.py python/tests/test_torch.py | tr '\n' ' ')}
log() { echo "${1//:/-}"; } # the log's name of a C test entry
for t in $ctests; do
	(LINGEN_TEST_FILTER=$([[ $t == *:* ]] && echo "${t#*:}") \
		timeout "$lim" "build-device/tests/${t%%:*}" > "$out/$(log "$t").txt" 2>&1
	 echo "rc=$?" >> "$out/$(log "$t").txt") &
done
for f in $pytests; do
	n=$(basename "$f" .py)
	(timeout "$lim" python3 -m pytest -q -rs -p no:cacheprovider "$f" > "$out/$n.txt" 2>&1
	 echo "rc=$?" >> "$out/$n.txt") &
done
wait
summary() {
for t in $ctests; do
	f="$out/$(log "$t").txt"
	echo "C  $t: $(tail -n 1 "$f") $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$f" | tr '\n' ' ')"
	grep -E ": FAIL|^\[  FAILED  \] [a-z]|ERROR \]|LINE" "$f" | head -n 6
done
for f in $pytests; do
	n=$(basename "$f" .py)
	echo "PY $n: $(tail -n 1 "$out/$n.txt") $(grep -E 'passed|failed' "$out/$n.txt" | tail -n 1)"
	grep -E "^FAILED|^E  " "$out/$n.txt" | head -n 8
done
for b in "$@"; do
	spec=${b%%:*} tok=${b#*:}
	echo "== lingen bench $spec --tokens $tok"
	build-device/lingen bench "$spec" --tokens "$tok" 2>&1 | grep -E "^lg_|ceiling|rror"
done
}
summary 2>&1 | tee "$res/summary.txt"
tar -czf "$res/logs.tar.gz" -C "$out" .
