"""bench/fp8-gemm/ahead_sweep.py (run from the repository root on the GPU machine,
LINGEN_LIBRARY set): ahead groups (dense fwd/dgrad), wgrad ahead / narrower tiles; each variant's output against the default's."""
import sys, torch
sys.path.insert(0, "tools")
import fp8_gemm_bench as fb

ROWS = [
    ("forward", 8192, 3072, 2048, [None, {"ahead": 8}, {"ahead": 16}, {"ahead": 0}]),
    ("dgrad", 8192, 3072, 2048, [None, {"ahead": 8}, {"ahead": 24}, {"ahead": 0}]),
    ("forward", 8192, 157184, 2048, [None, {"ahead": 8}, {"ahead": 16}]),
    ("forward", 4096, 7168, 16384, [None, {"m": 128, "cluster": 2}, {"m": 128, "cluster": 2, "ahead": 16},
                                    {"m": 128, "cluster": 2, "ahead": 32}]),
    ("wgrad", 8192, 157184, 2048, [None, {"ahead": 1}, {"ahead": 8}, {"n": 96, "ahead": 8}, {"n": 64, "ahead": 8}]),
    ("wgrad", 9984, 3584, 5120, [None, {"ahead": 8}, {"n": 96, "ahead": 8}]),
]
print("| form | MxNxK | tile | TFLOP/s | vs default | max|diff| to default |")
print("|---|---|---|---|---|---|")
for form, M, N, K, tiles in ROWS:
    ours, peer, mm, ref, rows = fb.case(form, M, N, K)
    fl = 2.0 * M * N * K
    base = None
    t0 = None
    for t in tiles:
        fb.TILE = t
        try:
            y = ours()
            torch.cuda.synchronize()
            tm = fb.timed(ours, 10)
            d = 0.0 if base is None else (y.float() - base).abs().max().item()
            if base is None:
                base, t0 = y.float(), tm
            print(f"| {form} | {M}x{N}x{K} | {t or 'default'} | {fl / tm / 1e9:.0f} | {t0 / tm:.3f} | {d:.3g} |", flush=True)
        except Exception as e:
            print(f"| {form} | {M}x{N}x{K} | {t} | x: {str(e)[:120]} | | |", flush=True)
    fb.TILE = None
    try:
        tp = fb.timed(peer, 10)
        print(f"| {form} | {M}x{N}x{K} | _scaled_mm | {fl / tp / 1e9:.0f} | {t0 / tp:.3f} | |", flush=True)
    except Exception as e:
        print(f"| {form} | {M}x{N}x{K} | _scaled_mm | x: {str(e)[:100]} | | |", flush=True)
    del base
    torch.cuda.empty_cache()
