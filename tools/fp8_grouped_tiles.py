"""tools/fp8_grouped_tiles.py - the grouped FP8 GEMMs at the training step's
shapes (256 experts, ~64k rows routed top-8 from 8192 tokens, Ling-mini's
expert GEMMs) with several tiles in one process, on the GPU machine:

  wgrad    bf16 dW (the step's), counts % 16 == 0 (the TMA path) at w1
           (N 1024, K 2048) and w2 (N 2048, K 512), each tile's dW compared
           with the default tile's (max |difference|: 0 expected)
  forward  N x K of the step's four grouped GEMMs (w1 / w2 forward, their dgrads)
  random   the wgrad at random counts (rows not 16-byte aligned: the copy path)

  python3 tools/fp8_grouped_tiles.py [--fwd-tiles JSON] [--wgrad-tiles JSON] [--no-random]

(JSON: a list of tiles, {} the default; each replaces that pass's list below.) The
forward rows end with torch._grouped_mm in bf16 on the same rows (the issue's peer).

Timing: tools/fp8_gemm_bench.py's (CUDA events after an L2 flush, median of 10).
"""
import json
import sys

import torch

import lingen

sys.path.insert(0, "tools")
import fp8_gemm_bench as fb  # noqa: E402

E, ROWS = 256, 65536
WGRAD_TILES = ({}, {"epilogue": 2}, {"epilogue": 0}, {"stages": 3}, {"epilogue": 2, "stages": 3},
               {"m": 64}, {"n": 64})
FWD_TILES = ({}, {"epilogue": 0}, {"epilogue": 2}, {"cluster": 2}, {"ahead": 0})


def cd(a, b):
    return (a + b - 1) // b


def wgrad(counts, tiles, label):
    T = int(counts.sum())
    for n, k in ((1024, 2048), (2048, 512)):
        dyt, xt = fb.rand_fp8(n, T), fb.rand_fp8(k, T)
        sa, sb = fb.rand_scale(cd(T, 128) + E, n), fb.rand_scale(cd(T, 128) + E, k)
        ref = None
        for tile in tiles:
            def call(out=None):
                return lingen.fp8_grouped_gemm_wgrad(dyt, sa, xt, sb, counts, out_dtype="bf16",
                                                     out=out, tile=tile or None)
            try:
                dw = call()
                ref = dw.float() if ref is None else ref
                diff = (dw.float() - ref).abs().max().item()
                out = {"dw": dw}
                t = fb.timed(lambda: call(out), 10)
                print(f"wgrad {label} N{n} K{k} {json.dumps(tile)}: {t * 1e3:.1f} us, "
                      f"{2.0 * T * n * k / (t * 1e-3) / 1e12:.0f} TFLOP/s, dW "
                      f"{E * n * k * 2 / (t * 1e-3) / 1e9:.0f} GB/s, max diff {diff:.3g}", flush=True)
            except Exception as e:  # noqa: BLE001
                print(f"wgrad {label} N{n} K{k} {tile}: failed {str(e)[:200]}", flush=True)


def forward(counts):
    T = int(counts.sum())
    for N, K in ((1024, 2048), (2048, 512), (512, 2048), (2048, 1024)):
        x, xs = fb.rand_fp8(T, K), fb.rand_scale(cd(K, 128), T)
        w, ws = fb.rand_fp8(E * N, K).view(E, N, K), fb.rand_scale(E, cd(N, 128), cd(K, 128))
        xb, wb = x.to(torch.bfloat16), w.to(torch.bfloat16).transpose(1, 2)
        offs = counts.cumsum(0).int()
        try:
            t = fb.timed(lambda: torch._grouped_mm(xb, wb, offs=offs), 10)
            print(f"forward N{N} K{K} torch._grouped_mm bf16: {t * 1e3:.1f} us, "
                  f"{2.0 * T * N * K / (t * 1e-3) / 1e12:.0f} TFLOP/s", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"forward N{N} K{K} torch._grouped_mm: failed {str(e)[:200]}", flush=True)
        del xb, wb
        for tile in FWD_TILES:
            try:
                t = fb.timed(lambda: lingen.fp8_grouped_gemm(x, xs, w, ws, counts, tile=tile or None), 10)
                print(f"forward N{N} K{K} {json.dumps(tile)}: {t * 1e3:.1f} us, "
                      f"{2.0 * T * N * K / (t * 1e-3) / 1e12:.0f} TFLOP/s", flush=True)
            except Exception as e:  # noqa: BLE001
                print(f"forward N{N} K{K} {tile}: failed {str(e)[:200]}", flush=True)


def main():
    global FWD_TILES, WGRAD_TILES
    args = sys.argv[1:]
    if "--fwd-tiles" in args:
        FWD_TILES = tuple(json.loads(args[args.index("--fwd-tiles") + 1]))
    if "--wgrad-tiles" in args:
        WGRAD_TILES = tuple(json.loads(args[args.index("--wgrad-tiles") + 1]))
    g = torch.Generator().manual_seed(0)
    raw = torch.multinomial(torch.ones(E), ROWS, replacement=True, generator=g).bincount(minlength=E)
    padded = (raw // 16 * 16).int().cuda()
    print(f"device: {torch.cuda.get_device_name()}; rows {int(padded.sum())} (counts % 16 == 0), "
          f"{int(raw.sum())} (random)", flush=True)
    wgrad(padded, WGRAD_TILES, "counts%16")
    forward(padded)
    if "--no-random" not in args:
        wgrad(raw.int().cuda(), ({}, {"epilogue": 2}), "random counts")


if __name__ == "__main__":
    main()
