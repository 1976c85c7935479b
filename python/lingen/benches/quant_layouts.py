"""The per-expert (batched) activation quantiser and the weight quantiser
(docs/kernels.md 1.3, families fp8_quant_batched and fp8_quant_weight). Eager
and compiled PyTorch peers: the per-expert quantiser as a loop over the
experts (what linghe's tests compare with), counts copied to the host once
at setup (lingen reads them on the device); the weight quantiser in
128 x 128 tiles. linghe has no H200 figure for these in docs/performance.md."""
from . import ODD_TOKENS, Case, Setup
from .quant import _ref


def _counts(torch, gen, tokens, experts):
    """Random counts summing to tokens (a multinomial draw: some 0s)."""
    p = torch.ones(experts, device="cuda")
    idx = torch.multinomial(p, tokens, replacement=True, generator=gen)
    return torch.bincount(idx, minlength=experts).int()


def batched_quant(torch, x, counts):
    """Per expert: the quantiser of its rows, concatenated as docs/kernels.md 1.3."""
    return _ref().experts_quant_loop(x, counts)


def dequant_batched(torch, counts, q, s, qt, st):
    """Both per-expert copies back to [tokens, hidden] fp32 (x's row order)."""
    return _ref().deq_experts(counts, q, s, qt, st)


def _batched(env, t, h, e, aligned=False):
    """aligned: the random counts rounded to multiples of 128 (same total)."""
    from .swiglu import round_counts
    torch, lt = env.torch, env.lt
    x = env.randn(t, h)
    cdev = _counts(torch, env.gen, t, e)
    counts = [int(c) for c in cdev.tolist()]
    if aligned:
        counts = round_counts(counts)
        cdev = torch.tensor(counts, dtype=torch.int32, device="cuda")
    return Setup({"lingen": lambda: lt.fp8_quant_batched(x, cdev),
                  "eager": lambda: batched_quant(torch, x, counts)}, (x, cdev),
                 lambda r: dequant_batched(torch, counts, *r))


def weight_quant(torch, w):
    return _ref().weight(w, round_scale=True, transposed=False)


def _weight(env, n, k):
    torch, lt = env.torch, env.lt
    w = env.randn(n, k) * 0.02
    fn = env.compiled(weight_quant)

    def norm(r):  # (q, s), and lingen's (q, s, qt, st) with the transposed copy declared
        return (_ref().deq_weight(r[0], r[1]),)
    return Setup({"lingen": lambda: lt.fp8_quant_weight(w),
                  "eager": lambda: weight_quant(torch, w),
                  "compile": lambda: fn(w)}, (w,), norm)


def cases(quick):
    out = [Case("fp8_quant_batched", "65536x1024 E256",
                lambda env: _batched(env, 65536, 1024, 256), family="fp8_quant_batched")]
    if not quick:  # random counts beside the same rounded to multiples of 128; odd totals
        for t, h, e, aligned in ((65536, 1024, 256, True), (8192, 2048, 32, False),
                                 (8192, 2048, 32, True),
                                 *((t, 2048, 32, False) for t in ODD_TOKENS if t != 8192)):
            out.append(Case("fp8_quant_batched",
                            f"{t}x{h} E{e}" + (" counts%128" if aligned else ""),
                            lambda env, t=t, h=h, e=e, a=aligned: _batched(env, t, h, e, a),
                            family="fp8_quant_batched"))
    for n, k in ((2048, 2048),) if quick else ((2048, 2048), (7168, 2048), (4096, 7168)):
        out.append(Case("fp8_quant_weight", f"{n}x{k}", lambda env, n=n, k=k: _weight(env, n, k),
                            family="fp8_quant_weight"))
    return out
