"""SwiGLU + FP8 quantisation (docs/kernels.md K7, the shared expert) and the
per-expert prob-weighted form (K6, the routed experts), forward and
backward, at docs/performance.md's shapes. Peers: eager PyTorch (fp32 SwiGLU, then
the PyTorch quantiser of benches.quant; K6 a loop over the experts, as
linghe's own baseline), torch.compile of the same (K7), and Liger-Kernel's
SwiGLU (bf16, unquantised) where it is installed."""
from . import ODD_TOKENS, Case, Setup, linghe
from .quant import _ref, dequant

# linghe on one H200 (docs/performance.md, measured 2026-11-30): (kernel, shape) -> us
LINGHE_US = {
    ("swiglu_quant fwd", "8192x1024"): 17.4, ("swiglu_quant fwd", "8192x4096"): 66.0,
    ("swiglu_quant bwd", "8192x1024"): 29.4,
    ("batch_swiglu_quant fwd", "65536x1024 e256"): 176.0,
    ("batch_swiglu_quant bwd", "65536x1024 e256"): 306.5,
}


# the peers: lingen._torchref's forms as fn(torch, ...) (env.compiled's form)
def swiglu_fwd(torch, x):
    return _ref().swiglu_quant(x)


def swiglu_bwd(torch, g, x):
    return _ref().swiglu_quant_backward(g, x)


def per_expert(torch, y, counts):
    """The quantiser of each expert's rows, concatenated (docs/kernels.md 1.3)."""
    return _ref().experts_quant_loop(y, counts)


def _flat_norm(rows):
    """A per-expert result as comparable tensors: payloads as values,
    scales as they are, st's real rows only."""
    def norm(r):
        q, s, *rest = r
        qt, st = rest[-2], rest[-1]
        return (q.float(), s.reshape(-1), qt.reshape(-1).float(), st[:rows].reshape(-1))
    return norm


def _k7_fwd(env, t, w):
    torch, lt = env.torch, env.lt
    x = env.randn(t, w)
    fn = env.compiled(swiglu_fwd)
    impls = {"lingen": lambda: lt.swiglu_quant_forward(x),
             "eager": lambda: swiglu_fwd(torch, x),
             "compile": lambda: fn(x)}
    liger = getattr(env.liger, "liger_swiglu", None) if env.liger else None
    if liger:
        n = w // 2
        a, u = x[:, :n].contiguous(), x[:, n:].contiguous()
        impls["liger (bf16, no quant)"] = lambda: liger(a, u)
    lh = linghe(env, "triton_silu_and_block_quant_forward")
    if lh:
        impls["linghe"] = lambda: lh(x, round_scale=True, output_mode=2)

    def norm(r):
        if not isinstance(r, (tuple, list)):
            return (r.float(), r.float())
        return dequant(torch, *r)
    return Setup(impls, (x,), norm)


def _k7_bwd(env, t, w):
    torch, lt = env.torch, env.lt
    x, g = env.randn(t, w), env.randn(t, w // 2)
    fn = env.compiled(swiglu_bwd)
    impls = {"lingen": lambda: lt.swiglu_quant_backward(g, x),
             "eager": lambda: swiglu_bwd(torch, g, x),
             "compile": lambda: fn(g, x)}
    lh = linghe(env, "triton_silu_and_block_quant_backward")
    if lh:
        impls["linghe"] = lambda: lh(g, x, round_scale=True)
    return Setup(impls, (g, x), lambda r: dequant(torch, *r))


def _counts(torch, env, t, experts, aligned=False):
    """Expert counts summing to t: 0, 1, 127, 128, 129 first, the rest about
    even; aligned: each rounded to a multiple of 128 (t one too), the last
    taking what is left (the odd counts' aligned neighbour)."""
    head = [0, 1, 127, 128, 129]
    rest = torch.rand(experts - len(head), generator=env.gen, device="cuda").cpu() + 0.5
    share = (rest / rest.sum() * (t - sum(head))).floor().long().tolist()
    counts = head + share
    counts[-1] += t - sum(counts)
    if aligned:
        return round_counts(counts)
    return counts


def round_counts(counts):
    """Counts rounded to multiples of 128 with the same total (a multiple of
    128), the last expert taking the difference."""
    out = [(c + 64) // 128 * 128 for c in counts]
    while sum(out) > sum(counts):
        i = max(range(len(out)), key=lambda j: out[j])
        out[i] -= 128
    out[-1] += sum(counts) - sum(out)
    return out


def _k6(env, t, w, experts, bwd, aligned=False):
    torch, lt = env.torch, env.lt
    counts = _counts(torch, env, t, experts, aligned)
    cnt = torch.tensor(counts, dtype=torch.int32, device="cuda")
    x = env.randn(t, w)
    p = torch.rand(t, 1, generator=env.gen, device="cuda")
    rows = sum((c + 127) // 128 for c in counts)
    if not bwd:
        def eager():
            return per_expert(torch, _ref().swiglu(x, p), counts)
        return Setup({"lingen": lambda: lt.batch_swiglu_quant_forward(x, p, cnt),
                      "eager": eager}, (x, p, cnt), _flat_norm(rows))
    g = env.randn(t, w // 2)

    def eager_bwd():
        dx, dp = _ref().swiglu_backward(g, x, p)
        q, s, qt, st = per_expert(torch, dx, counts)
        return q, s, dp, qt, st

    def norm(r):
        return (*_flat_norm(rows)(r), r[2].reshape(-1).float())
    return Setup({"lingen": lambda: lt.batch_swiglu_quant_backward(g, x, p, cnt),
                  "eager": eager_bwd}, (g, x, p, cnt), norm)


def cases(quick):
    k7 = [(8192, 1024)] if quick else [(8192, 1024), (8192, 4096)]
    out = []
    for t, w in k7:
        shape = f"{t}x{w}"
        out.append(Case("swiglu_quant fwd", shape, lambda env, t=t, w=w: _k7_fwd(env, t, w),
                        LINGHE_US.get(("swiglu_quant fwd", shape)), rtol=0.07, family="swiglu_quant"))
    if not quick:  # odd token counts beside their counts rounded up to 128, n 1024 and 1408
        for w in (2048, 2816):
            for t in sorted({*ODD_TOKENS, 6144}):
                out.append(Case("swiglu_quant fwd", f"{t}x{w}",
                                lambda env, t=t, w=w: _k7_fwd(env, t, w), rtol=0.07, family="swiglu_quant"))
    for t in (8192,) if quick else (8192, *(t for t in ODD_TOKENS if t != 8192)):
        out.append(Case("swiglu_quant bwd", f"{t}x1024", lambda env, t=t: _k7_bwd(env, t, 1024),
                        LINGHE_US.get(("swiglu_quant bwd", f"{t}x1024")), rtol=0.07, family="swiglu_quant"))
    for kernel, bwd in (("batch_swiglu_quant fwd", False), ("batch_swiglu_quant bwd", True)):
        shape = "65536x1024 e256"
        out.append(Case(kernel, shape, lambda env, bwd=bwd: _k6(env, 65536, 1024, 256, bwd),
                        LINGHE_US[(kernel, shape)], rtol=0.07, family="batch_swiglu_quant"))
        if quick:
            continue
        # the same total, every expert's count a multiple of 128; and 32 experts at
        # 8192 tokens (random counts beside the same rounded), then the odd totals
        for t, e, aligned in ((65536, 256, True), (8192, 32, False), (8192, 32, True),
                              *((t, 32, False) for t in ODD_TOKENS if t != 8192)):
            out.append(Case(kernel, f"{t}x1024 e{e}" + (" counts%128" if aligned else ""),
                            lambda env, bwd=bwd, t=t, e=e, a=aligned: _k6(env, t, 1024, e, bwd, a),
                            rtol=0.07, family="batch_swiglu_quant"))
    return out
