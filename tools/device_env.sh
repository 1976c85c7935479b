# tools/device_env.sh - sourced by the scripts that run on the GPU machine
# (device_run.sh, device_tests.sh, device_ncu.sh, bench/run.sh) from the
# repository root: `device_env BUILD_DIR` links the source folder the tests
# were built in (BUILD_DIR/lingen-source-dir, written by tools/device.sh) to
# this checkout, since the test binaries and the CLI name configs/ by the
# build machine's paths, and sets LINGEN_CACHE_DIR (a fresh folder unless
# one is set).
device_env() {
	local dir=${1:-build-device} src
	if [[ -f $dir/lingen-source-dir ]]; then
		src=$(cat "$dir/lingen-source-dir")
		if [[ ! -e $src && $src != "$PWD" ]]; then
			mkdir -p "$(dirname "$src")" 2>/dev/null && ln -s "$PWD" "$src" 2>/dev/null ||
				echo "tools/device_env.sh: warning: cannot link $src to $PWD; tests reading configs/ may fail" >&2
		fi
	fi
	export LINGEN_CACHE_DIR=${LINGEN_CACHE_DIR:-$(mktemp -d /tmp/lingen-device-cache.XXXXXX)}
}
