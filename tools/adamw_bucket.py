"""tools/adamw_bucket.py - where lingen.optim.AdamW's time goes in the FP8 training
step of examples/train_moe.py (on the GPU machine, from the repository root,
LINGEN_LIBRARY and PYTHONPATH set):

  python3 tools/adamw_bucket.py [train_moe.py's model flags, e.g. --fp8-head --head fused]

Builds the example's FP8 model and optimiser, runs three steps on its corpus,
then prints: each of the optimiser's launches of a fourth step (kernel, device
time, GB/s by the bytes it must move), what the non-FP8 bucket holds (tensors,
elements, their dtypes, the 16-byte alignment of p, g, m and v, the largest
tensors), and the same adamw kernel timed on one tensor of the bucket's size
(CUDA events, median of 5) for the ceiling it could reach.
"""
import collections
import sys

import torch

sys.path.insert(0, "examples")
import train_moe as tm  # noqa: E402

import lingen.optim  # noqa: E402
from lingen.bench import median_ms  # noqa: E402


def main():
    tm.ln, tm._gemm = tm.import_lingen()
    args = tm.parser().parse_args(["--modes", "fp8", "--steps", "4"] + sys.argv[1:])
    corpus = tm.Corpus(tm.model_config(args).vocab, args.active, args.seq, args.tokens // args.seq, args.seed,
                       "cuda")
    model, fwd, opt = tm.build(args, "fp8", "cuda")

    def fwd_bwd(i):
        ids, labels = corpus.batch_at(i)
        fwd(ids, labels).backward()

    for i in range(3):
        fwd_bwd(i)
        opt.step()
        opt.zero_grad(set_to_none=True)
    fwd_bwd(3)
    torch.cuda.synchronize()
    # the bucket the step gives the plain adamw kernel: every parameter with a gradient
    # that is not an FP8 weight adamw_fp8 takes (optim.py's rule, read back from its state)
    fp8 = [p for p in model.parameters() if p.grad is not None and lingen.nn._k.is_fp8(p)]
    plain = [p for p in model.parameters() if p.grad is not None and not lingen.nn._k.is_fp8(p)]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        opt.step()
        torch.cuda.synchronize()
    print("| kernel | launches | device ms |")
    print("|---|---|---|")
    agg = collections.defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            agg[e.name][0] += 1
            agg[e.name][1] += e.device_time_total / 1e3
    for name, (n, ms) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"| `{name[:90]}` | {n} | {ms:.3f} |")
    numel = sum(p.numel() for p in plain)
    print(f"\nFP8 weights: {len(fp8)} tensors, {sum(p.numel() for p in fp8) / 1e6:.1f} M elements")
    print(f"the plain bucket: {len(plain)} tensors, {numel / 1e6:.2f} M elements, dtypes "
          f"{sorted({str(p.dtype) for p in plain})}, grads {sorted({str(p.grad.dtype) for p in plain if p.grad is not None})}")
    mis = collections.Counter()
    for p in plain:
        st = opt.state[p]
        for k, t in (("p", p), ("g", p.grad), ("m", st.get("exp_avg")), ("v", st.get("exp_avg_sq"))):
            if t is not None and t.data_ptr() % 16:
                mis[k] += 1
            if t is not None and not t.is_contiguous():
                mis[k + " not contiguous"] += 1
    print(f"16-byte misaligned or strided among them: {dict(mis) or 'none'}")
    sizes = sorted(((p.numel(), tuple(p.shape)) for p in plain), reverse=True)
    print(f"largest: {sizes[:4]}; smallest: {sizes[-4:]}; under 8192 elements: "
          f"{sum(1 for n, _ in sizes if n < 8192)}")
    # the same kernel on one tensor of the bucket's size
    one = torch.nn.Parameter(torch.randn(numel, device="cuda", dtype=torch.bfloat16))
    one.grad = torch.randn_like(one)
    o1 = lingen.optim.AdamW([one], lr=1e-4, betas=(0.9, 0.95), weight_decay=0.0, eps=1e-8, moments="bf16")
    o1.step()
    ms = median_ms(torch, o1.step, 5)
    print(f"\none bf16 tensor of {numel / 1e6:.2f} M elements, bf16 grads and moments: {ms:.3f} ms, "
          f"{numel * 14 / ms / 1e6:.0f} GB/s (14 bytes an element)")
    # the bucket alone, again, timed by events (its table as the step made it)
    for p in fp8:
        p.grad = None
    ms = median_ms(torch, opt.step, 5)
    print(f"the step with only the plain bucket's gradients: {ms:.3f} ms, {numel * 14 / ms / 1e6:.0f} GB/s")


if __name__ == "__main__":
    main()
