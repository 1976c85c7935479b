#!/usr/bin/env bash
# tools/device_train.sh - on the GPU machine, from the repository root, with
# liblingen built there (build-device/, or LINGEN_LIBRARY):
#
#   BUDGET=230 tools/device_train.sh [TRAIN_ARGS...]
#
# 1. the GPU tests of lingen.nn and lingen.hf -> $OUT/pytest-nn.txt (first
#    lingen's FP8 GEMMs against the emulation: if they fail, the example
#    runs with LINGEN_NN_EMULATE=1)
# 2. examples/train_moe.py in the four modes (fp8, torch, bf16, compile) at a
#    small step count, each mode cut by a time limit, with the profiler's
#    breakdown -> $OUT/train-moe.{json,md,png} (the example writes them after
#    every mode, so a cut run keeps what it finished).
# Everything under `timeout`, within BUDGET seconds (default 230).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/device}
mkdir -p "$out"
export LINGEN_LIBRARY=${LINGEN_LIBRARY:-$PWD/build-device/liblingen.so}
export LD_LIBRARY_PATH=$(dirname "$LINGEN_LIBRARY")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
budget=${BUDGET:-230}
start=$SECONDS
left() { echo $((budget - (SECONDS - start))); }
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])"

echo "== lingen's FP8 GEMMs against the seam's emulation (skipped where the library has none)"
timeout 40 python3 -m pytest python/tests/test_gpu_nn.py -k native -q -rs -p no:cacheprovider \
	2>&1 | tee "$out/pytest-nn.txt"
rc=${PIPESTATUS[0]}
if [[ $rc != 0 && $rc != 5 ]]; then  # 5: nothing collected
	echo "lingen's FP8 GEMMs failed the check: the example runs the emulation (LINGEN_NN_EMULATE=1)"
	export LINGEN_NN_EMULATE=1
fi

echo "== GPU tests of lingen.nn / lingen.hf"
timeout $(( $(left) < 70 ? $(left) : 70 )) python3 -m pytest python/tests/test_gpu_nn.py \
	python/tests/test_hf.py -k "not native and not on_cpu" -q -rs -p no:cacheprovider 2>&1 | tee -a "$out/pytest-nn.txt"

echo "== examples/train_moe.py ($(left) s left)"
timeout $(( $(left) - 5 )) python3 examples/train_moe.py --modes fp8,torch,bf16,compile \
	--steps 40 --time-limit 12 --profile --no-bar --out "$out/train-moe" "$@"
echo "rc $? after $((SECONDS - start)) s"
