#!/usr/bin/env bash
# tools/device.sh - package a build for the GPU machine.
#
#   tools/device.sh [BUILD_DIR]        (default: build-device)
#
# The GPU machine has CUDA 13 and the driver but neither cJSON nor cmocka.
# This builds lingen (Release) into BUILD_DIR, copies libcjson.so.1 and
# libcmocka.so.0 (symlinks dereferenced) beside the CLI, checks that the CLI
# finds them through RPATH $ORIGIN and the tests through $ORIGIN/.., and
# records the source folder the tests were built for. Then carry BUILD_DIR to
# the GPU machine and run tools/device_run.sh there from the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-device}

# warnings stay warnings here: packaging must not fail on a compiler we do
# not test with (CI builds with LINGEN_WERROR=ON)
cmake -B "$dir" -DCMAKE_BUILD_TYPE=Release -DLINGEN_WERROR=OFF
cmake --build "$dir" -j "$(nproc)"

# The file a library soname resolves to on this machine.
resolve() {
	local so=$1 path
	path=$(ldconfig -p | awk -v so="$so" '$1 == so && /x86-64/ { print $NF; exit }')
	if [[ -z $path ]]; then
		path=/usr/lib/x86_64-linux-gnu/$so
	fi
	if [[ ! -e $path ]]; then
		echo "tools/device.sh: $so not found (install libcjson-dev / libcmocka-dev)" >&2
		exit 1
	fi
	echo "$path"
}

for so in libcjson.so.1 libcmocka.so.0; do
	cp -L "$(resolve "$so")" "$dir/$so"
done

# Every binary must look for its libraries beside itself ($ORIGIN) or, for
# the tests in $dir/tests, one folder up ($ORIGIN/..).
check_rpath() {
	local bin=$1 want=$2
	if ! readelf -d "$bin" | grep -E '\((RUNPATH|RPATH)\)' | grep -qF "$want"; then
		echo "tools/device.sh: $bin lacks RPATH $want" >&2
		exit 1
	fi
}
check_rpath "$dir/lingen" '$ORIGIN'
tests=()
for t in "$dir"/tests/test_* "$dir"/tests/gpu_test_*; do
	[[ -f $t && -x $t ]] || continue
	check_rpath "$t" '$ORIGIN/..'
	tests+=("$t")
done

# Tests find configs/ through the absolute source path baked in at build
# time; device_run.sh links it to the repository root on the GPU machine.
pwd > "$dir/lingen-source-dir"

echo "tools/device.sh: packaged $dir for the GPU machine:"
ls -l "$dir/lingen" "$dir/libcjson.so.1" "$dir/libcmocka.so.0" "${tests[@]}" | awk '{ print "  " $5 "\t" $NF }'
echo "run there (from the repository root): tools/device_run.sh [--tokens N[,N...]] SPEC..."
