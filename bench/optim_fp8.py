"""The fused optimiser's FP8 re-quantisation (issue 35 item 2) timed on a
GPU: at Ling-mini's weights (bf16 weights, gradients and moments, as
examples/train_moe.py keeps them), per step,
  before: lingen.optim.AdamW's step (the adamw kernel) + the next forward's
          lingen.nn quant_weight of each weight (fp8_quant_weight, and the
          experts' transposed copies);
  after:  lingen.optim.AdamW(fp8_weights=True)'s step (adamw_fp8: the update
          and the copies in one pass; the experts' transposed copies).
Median of torch.cuda.Event timings. Prints a markdown table.

    python bench/optim_fp8.py [--experts 256] [--reps 20]
"""
import argparse

import torch

import lingen.optim
from lingen.bench import event_times
from lingen.nn import _k


def timed(fn, reps):
    """The upper median (ms) of reps timed calls after 3 untimed ones."""
    ts = sorted(event_times(torch, fn, reps, warmup=3))
    return ts[len(ts) // 2]


def weights(shapes, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    ws = []
    for s in shapes:
        w = torch.nn.Parameter(torch.randn(s, device="cuda", generator=g).mul_(0.02)
                               .to(torch.bfloat16))
        w.grad = torch.randn(s, device="cuda", generator=g).mul_(1e-3).to(torch.bfloat16)
        ws.append(_k.mark_fp8(w))
    return ws


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--experts", type=int, default=256)
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    e = a.experts
    cases = [(f"experts w1 [{e}, 1024, 2048]", [(e, 1024, 2048)]),
             (f"experts w2 [{e}, 2048, 512]", [(e, 2048, 512)]),
             ("qkv [3072, 2048] + o [2048, 2048]", [(3072, 2048), (2048, 2048)])]
    kw = dict(lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, moments="bf16")
    print(f"{torch.cuda.get_device_name()}, torch {torch.version.__version__}")
    print("| weights | params | adamw ms | quant_weight ms | before ms | adamw_fp8 step ms "
          "| after / before | after GB/s (16 B a param) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, shapes in cases:
        ws = weights(shapes)
        n = sum(w.numel() for w in ws)
        plain = lingen.optim.AdamW(ws, **kw)
        t_adamw = timed(plain.step, a.reps)
        for w in ws:
            w.__dict__.pop("_lingen_fp8_copies", None)
        t_quant = timed(lambda: [_k.quant_weight(w) for w in ws], a.reps)
        del plain
        fused = lingen.optim.AdamW(ws, fp8_weights=True, **kw)
        t_fused = timed(fused.step, a.reps)
        before = t_adamw + t_quant
        print(f"| {name} | {n / 1e6:.0f} M | {t_adamw:.3f} | {t_quant:.3f} | {before:.3f} | "
              f"{t_fused:.3f} | {t_fused / before:.2f} | {16 * n / t_fused / 1e6:.0f} |",
              flush=True)
        del fused, ws
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
