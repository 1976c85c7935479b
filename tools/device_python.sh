#!/usr/bin/env bash
# tools/device_python.sh - on the GPU machine, from the repository root, with
# dist/ (the wheel: `pip wheel . -w dist --no-deps`) and .whl/ (other wheels
# the machine lacks, e.g. Liger-Kernel: `pip download --no-deps -d .whl
# liger-kernel`) carried along:
#
#   tools/device_python.sh [--no-tests] [--no-bench] [BENCH_ARGS...]
#
# 1. a venv that sees the system's torch and triton, the wheels installed;
# 2. the pytest suite (python/tests) against the installed package -> $OUT/pytest.txt
# 3. python -m lingen.bench BENCH_ARGS --json $OUT/bench.json --markdown $OUT/bench.md
# OUT defaults to out/device. Exit status 1 if a step failed.
set -uo pipefail
cd "$(dirname "$0")/.."
tests=1 bench=1 args=()
for a in "$@"; do
	case $a in
	--no-tests) tests=0 ;;
	--no-bench) bench=0 ;;
	*) args+=("$a") ;;
	esac
done
out=${OUT:-out/device}
mkdir -p "$out"
venv=${VENV:-/tmp/lingen-venv}
python3 -m venv --system-site-packages "$venv" || exit 1
"$venv/bin/pip" install -q --no-deps --no-index dist/lingen-*.whl .whl/*.whl || exit 1
rc=0
if [[ $tests == 1 ]]; then
	"$venv/bin/python" -m pytest python/tests -q -rs -p no:cacheprovider 2>&1 | tee "$out/pytest.txt"
	[[ ${PIPESTATUS[0]} == 0 ]] || rc=1
fi
if [[ $bench == 1 ]]; then
	"$venv/bin/python" -m lingen.bench "${args[@]}" --json "$out/bench.json" \
		--markdown "$out/bench.md" || rc=1
fi
exit $rc
