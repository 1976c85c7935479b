"""tools/head_bench.py - the LM head + loss, forward and backward, at
Ling-mini's head (8192 tokens, hidden 2048, vocab 157184, bf16) on the GPU,
one process, run by carry/head_check.sh:

  unfused   F.linear -> [T, V] bf16 logits -> lingen.nn.cross_entropy (K9),
            what lingen.nn.Model(fused_head=False) runs
  fused     lingen.nn.linear_cross_entropy at several chunks (dW summed in
            fp32; one row with Liger's bf16 accumulation, "weight")
  torch     F.linear + F.cross_entropy(logits.float()) (PyTorch eager)
  liger     LigerFusedLinearCrossEntropyLoss, when liger_kernel imports

Per variant: the median and min of 10 timed reps (CUDA events around
forward + backward, after 2 untimed ones), the peak memory above the
inputs (torch.cuda.max_memory_allocated), the loss and dx / dW against
the unfused head's (relative norm of the difference).

  python3 tools/head_bench.py OUT_MD [--tokens T] [--hidden H] [--vocab V]
"""
import argparse
import statistics

import torch
import torch.nn.functional as F

import lingen.nn as ln
from lingen.bench import event_times


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def run(fn, x, w, y, reps):
    """(times ms, peak bytes above the inputs, loss, dx, dw) of fn's forward
    and backward."""
    xa, wa = x.clone().requires_grad_(), w.clone().requires_grad_()

    def step():
        xa.grad = wa.grad = None
        loss = fn(xa, wa, y)
        loss.backward()
        return loss

    for _ in range(2):  # kernels compiled, cuBLAS workspaces made
        step()
    torch.cuda.synchronize()
    xa.grad = wa.grad = None
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    loss = step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    times = event_times(torch, step, reps)
    return times, peak, loss.item(), xa.grad, wa.grad


def variants(t, v):
    out = [("unfused (linear + lingen CE)", "-",
            lambda x, w, y: ln.cross_entropy(F.linear(x, w), y, mode="bf16"))]
    auto = ln.chunk_tokens(t, v)
    for c in sorted({1024, 2048, auto, 4096, t}):
        out.append((f"fused{' (default chunk)' if c == auto else ''}", c,
                    lambda x, w, y, c=c: ln.linear_cross_entropy(x, w, y, mode="bf16", chunk=c)))
    out.append(("fused, dW summed in bf16", auto, lambda x, w, y: ln.linear_cross_entropy(
        x, w, y, mode="bf16", chunk=auto, accumulate="weight")))
    out.append(("torch (linear + F.cross_entropy fp32)", "-",
                lambda x, w, y: F.cross_entropy(F.linear(x, w).float(), y)))
    try:
        from liger_kernel.transformers.fused_linear_cross_entropy import (
            LigerFusedLinearCrossEntropyLoss)
        liger = LigerFusedLinearCrossEntropyLoss()
        out.append(("liger FusedLinearCrossEntropy", "its own", lambda x, w, y: liger(w, x, y)))
    except Exception as e:  # not installed, or its Triton not this one
        print(f"liger_kernel: not importable ({type(e).__name__}: {e}): skipped", flush=True)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out_md")
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=157184)
    p.add_argument("--reps", type=int, default=10)
    a = p.parse_args()
    t, h, v = a.tokens, a.hidden, a.vocab
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(t, h, generator=g, device="cuda").bfloat16()
    w = (torch.randn(v, h, generator=g, device="cuda") * h ** -0.5).bfloat16()
    y = torch.randint(0, v, (t,), generator=g, device="cuda")
    y[::17] = -100  # some ignored tokens, as padding gives
    logits_gib = t * v * 2 / 2 ** 30
    flop = 3 * 2 * t * h * v
    lines = [f"LM head + loss, forward + backward, T {t}, H {h}, V {v}, bf16, on "
             f"{torch.cuda.get_device_name()} (torch {torch.__version__}); the [T, V] bf16 "
             f"logits are {logits_gib:.2f} GiB; median / min of {a.reps} reps (CUDA events); "
             "peak: torch.cuda.max_memory_allocated above the inputs; dx, dW: relative to "
             "the unfused head's.", "",
             "| variant | chunk (tokens) | median ms | min ms | TFLOP/s | peak GiB | loss | "
             "dx rel | dW rel |", "|---|---|---|---|---|---|---|---|---|"]
    ref = None
    for name, chunk, fn in variants(t, v):
        try:
            times, peak, loss, dx, dw = run(fn, x, w, y, a.reps)
        except Exception as e:  # a variant that fails is a row, not the end of the table
            lines.append(f"| {name} | {chunk} | failed: {' '.join(str(e).split())[:120]} "
                         "| | | | | | |")
            print(lines[-1], flush=True)
            torch.cuda.empty_cache()
            continue
        if ref is None:
            ref = dx, dw
        med = statistics.median(times)
        lines.append(f"| {name} | {chunk} | {med:.2f} | {min(times):.2f} | "
                     f"{flop / med / 1e9:.0f} | {peak / 2 ** 30:.2f} | {loss:.5f} | "
                     f"{rel(dx, ref[0]):.1e} | {rel(dw, ref[1]):.1e} |")
        print(lines[-1], flush=True)
        del dx, dw
        torch.cuda.empty_cache()
    with open(a.out_md, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
