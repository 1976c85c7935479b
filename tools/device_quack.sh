#!/usr/bin/env bash
# tools/device_quack.sh - QuACK (quack-kernels and its CuTe DSL wheels) on the
# GPU machine, for python -m lingen.bench's QuACK rows (python/lingen/benches/quack.py).
#
# The nvidia-cutlass-dsl-libs-cu13 wheel (about 92 MB, 227 MB unpacked) is
# over one device call's 64 MiB carry. pack unpacks it and recompresses the
# tree with xz (about 64 MB), split in two: 40 MB ride with call 1 beside the
# builds of tools/device_carry.sh, the rest and the small wheels with call 2,
# which must come while the machine is still warm (it is a fresh one after
# about 30 s idle): make it at once, and do the bench in it.
#
# 1. build machine, from the repository root (PyPI reachable; the device's
#    python3 is 3.12):
#      pip download --no-deps -d .whl/quack --python-version 3.12 --only-binary=:all: \
#        --platform manylinux_2_28_x86_64 quack-kernels==0.6.5 nvidia-cutlass-dsl==4.8.1 \
#        nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1 \
#        nvidia-cutlass-dsl-libs-core==4.8.1 'cuda-bindings>=13,<14' cuda-pathfinder \
#        protobuf einops apache-tvm-ffi torch-c-dlpack-ext
#    (what quack-kernels and the DSL require beyond torch and typing_extensions)
#      tools/device_quack.sh pack    # -> .whl/quack-1 (first part, 40 MB),
#                                    #    .whl/quack-2 (second part, small wheels)
#    (.whl/ is git-ignored; pip wheel . -w dist --no-deps for the lingen wheel)
# 2. GPU machine, call 1, carry [".whl/quack-1", ...]:
#      tools/device_quack.sh stage1  # first part kept in /tmp/quack-parts
# 3. GPU machine, call 2 right after, carry [".whl/quack-2", "dist"]:
#      tools/device_quack.sh stage2 [BENCH_ARGS...]
#    joins the parts (checked against the sha256 recorded by pack), unpacks
#    the tree into $SITE (the wheel's files and its .dist-info, as pip would
#    lay them), installs the small wheels, checks `import quack`, then runs
#    tools/device_bench.sh BENCH_ARGS (e.g. --only rmsnorm,cross_entropy) with
#    QuACK on PYTHONPATH. Without QuACK the bench still runs: its rows say
#    "not installed".
# SITE defaults to /tmp/site (tools/device_bench.sh's), OUT to out/device.
set -uo pipefail
cd "$(dirname "$0")/.."
site=${SITE:-/tmp/site}
parts=/tmp/quack-parts
big=nvidia_cutlass_dsl_libs_cu13-

pip_target() {
	python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
		--target "$site" "$@"
}

case ${1:-} in
pack)
	src=.whl/quack
	wheel=$(ls "$src"/$big*.whl 2>/dev/null | head -1)
	[[ -f $wheel ]] || { echo "device_quack.sh: no $src/$big*.whl (step 1)" >&2; exit 1; }
	rm -rf .whl/quack-1 .whl/quack-2
	mkdir -p .whl/quack-1 .whl/quack-2
	for w in "$src"/*.whl; do
		[[ $w == "$wheel" ]] || cp "$w" .whl/quack-2/
	done
	tree=$(mktemp -d)
	(cd "$tree" && unzip -q "$OLDPWD/$wheel") || exit 1
	name=$(basename "$wheel" .whl).tar.xz
	tar -C "$tree" -cf - . | xz -9 -T0 > "$tree.xz" || exit 1
	rm -rf "$tree"
	(cd "$(dirname "$tree")" && sha256sum "$(basename "$tree").xz" | sed "s| .*|  $name|") > .whl/quack-2/SHA256SUMS
	split -b 40M "$tree.xz" ".whl/quack-1/$name.part-"
	rm -f "$tree.xz"
	mv ".whl/quack-1/$name.part-ab" .whl/quack-2/
	[[ ! -e .whl/quack-1/$name.part-ac ]] || { echo "device_quack.sh: more than two parts" >&2; exit 1; }
	du -sh .whl/quack-1 .whl/quack-2
	;;
stage1)
	mkdir -p "$parts"
	cp .whl/quack-1/*.part-aa "$parts"/ || exit 1
	echo "device_quack.sh: stage1: first part in $parts; run stage2 now (the machine is fresh after ~30 s idle)"
	;;
stage2)
	shift
	mkdir -p "$site"
	half=$(ls "$parts"/*.part-aa 2>/dev/null | head -1)
	if [[ -f $half ]]; then
		name=$(basename "$half" .part-aa)
		cat "$half" .whl/quack-2/"$name".part-ab > "/tmp/$name"
		if (cd /tmp && sha256sum -c --quiet "$OLDPWD/.whl/quack-2/SHA256SUMS"); then
			# the small wheels first: pip --target --upgrade replaces a top-level
			# folder it installs into (libs-base's nvidia_cutlass_dsl/), which
			# would drop the big tree's _cutlass_ir.cu13 library unpacked there
			small=(.whl/quack-2/*.whl)
			pip_target "${small[@]}"
			xz -dc "/tmp/$name" | tar -C "$site" -xf - && rm -f "/tmp/$name" "$half"
			ls "$site"/nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu*.so \
				> /dev/null || echo "device_quack.sh: the CuTe DSL's cu13 library is missing" >&2
		else
			echo "device_quack.sh: the joined archive's sha256 differs: not installed" >&2
		fi
	else
		echo "device_quack.sh: no first part in $parts (stage1 not run on this machine," \
			"or the machine was handed back between the calls): QuACK not installed" >&2
	fi
	# the DSL's cutlass package sits under dsl_packages, put on sys.path by a
	# .pth file that a --target install (or PYTHONPATH) never runs
	export PYTHONPATH=$site:$site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}
	python3 -c 'import quack; print("device_quack.sh: quack", quack.__version__, "imports")' \
		|| echo "device_quack.sh: quack does not import: its rows will say not installed" >&2
	exec tools/device_bench.sh "$@"
	;;
*)
	echo "usage: tools/device_quack.sh pack | stage1 | stage2 [BENCH_ARGS...]" >&2
	exit 2
	;;
esac
