#!/usr/bin/env bash
# tools/device_python.sh - on the GPU machine, from the repository root, with
# dist/ (the wheel: `pip wheel . -w dist --no-deps`) and .whl/ (other wheels
# the machine lacks, e.g. Liger-Kernel: `pip download --no-deps -d .whl
# liger-kernel`) carried along:
#
#   tools/device_python.sh [--no-tests] [--no-bench] [BENCH_ARGS...]
#
# 1. the wheels installed into $SITE (default /tmp/site) for the machine's
#    python3 (the one with torch and triton), put on PYTHONPATH;
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
site=${SITE:-/tmp/site}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
	--target "$site" dist/lingen-*.whl .whl/*.whl || exit 1
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
rc=0
if [[ $tests == 1 ]]; then
	python3 -m pytest python/tests -q -rs -p no:cacheprovider 2>&1 | tee "$out/pytest.txt"
	[[ ${PIPESTATUS[0]} == 0 ]] || rc=1
fi
if [[ $bench == 1 ]]; then
	python3 -m lingen.bench "${args[@]}" --json "$out/bench.json" \
		--markdown "$out/bench.md" || rc=1
fi
exit $rc
