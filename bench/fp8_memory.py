"""Where the training step's memory peaks: examples/train_moe.py's model and
optimiser (its build()), a few steps a mode, the peak allocated memory of
each phase (forward, backward, optimiser step) and the memory held after
it, in GiB, and the median step time of the steps after the first.

Modes: fp8 (lingen.optim.AdamW(fp8_weights=True, release_grads=True), as
train_moe now builds it), fp8-keep (fp8_weights with the copies kept on
the parameters as buffers: release_grads off), fp8-tbwd (release_grads
and transposed_in_backward: the backward quantises the transposed copies
again), fp8-none (no fp8_weights: the forward quantises), bf16.

    python3 bench/fp8_memory.py [--steps 4] [--modes fp8,fp8-keep,bf16] [train_moe args]
"""
import os
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import train_moe as T  # noqa: E402

GIB = 2 ** 30


def run(args, mode, corpus, steps):
    base = "fp8" if mode.startswith("fp8") else mode
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model, fwd, opt = T.build(args, base, "cuda")
    if mode == "fp8-keep":
        opt.release_grads = False
    if mode == "fp8-tbwd":
        opt.transposed_in_backward = True
    if mode == "fp8-none":
        opt.fp8_weights = opt.release_grads = False
    rows, times = [], []
    for i in range(steps):
        ids, labels = corpus.batch_at(i)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        row = []
        for phase in ("fwd", "bwd", "step"):
            torch.cuda.reset_peak_memory_stats()
            if phase == "fwd":
                loss = fwd(ids, labels)
            elif phase == "bwd":
                loss.backward()
            else:
                opt.step()
                opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            row.append((torch.cuda.max_memory_allocated() / GIB, torch.cuda.memory_allocated() / GIB))
        times.append(time.perf_counter() - t0)
        rows.append(row)
        loss = None
    peak = max(p for r in rows for p, _ in r)
    ms = sorted(times[1:])[len(times[1:]) // 2] * 1e3 if steps > 1 else float("nan")
    print(f"{mode}: peak {peak:.2f} GiB, median step {ms:.1f} ms ({torch.cuda.get_device_name()})")
    for i, r in enumerate(rows):
        print(f"  step {i}: " + "; ".join(f"{ph} peak {p:.2f} after {a:.2f}"
                                           for ph, (p, a) in zip(("fwd", "bwd", "step"), r)))
    del model, fwd, opt
    return peak


def main():
    argv = sys.argv[1:]
    steps, modes = 4, "fp8,fp8-keep,bf16"
    if "--steps" in argv:
        i = argv.index("--steps")
        steps = int(argv[i + 1])
        del argv[i:i + 2]
    if "--modes" in argv:
        i = argv.index("--modes")
        modes = argv[i + 1]
        del argv[i:i + 2]
    T.ln, T._gemm = T.import_lingen()
    args = T.parser().parse_args(["--out", "/tmp/fp8_memory/x"] + argv + ["--modes", "fp8", "--no-bar"])
    _, seq = T.check_args(T.parser(), args, "cuda")
    vocab = T.model_config(args).vocab
    corpus = T.Corpus(vocab, min(args.active, vocab), seq, args.tokens // seq, args.seed, "cuda")
    for mode in modes.split(","):
        run(args, mode, corpus, steps)


if __name__ == "__main__":
    main()
