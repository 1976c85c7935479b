"""Softmax cross entropy (docs/kernels.md K9): forward (loss, S, m per row),
backward (the logits' gradient for a per-row output gradient), and the
fused forward + backward (one kernel; the gradient for output gradient 1,
as loss.sum().backward() would give). Labels are all valid (no ignored
row); logits bf16 as in training. Liger-Kernel's cross entropy computes
the gradient in its forward, so it stands beside the fused row. The FP8
LM head's backward, cross_entropy_quant (the gradient straight into its
FP8 copies), stands beside what it replaces: lingen's backward, then
fp8_quant of the bf16 gradient (the same copies)."""
from . import ODD_TOKENS, Case, Setup, linghe
from .quant import _ref, dequant

# linghe on one H200 (docs/performance.md): (kernel, shape) -> us
LINGHE_US = {
    ("cross_entropy fwd", "8192x157184"): 627.2,
    ("cross_entropy bwd", "8192x157184"): 1313.2,
}


# the peers: lingen._torchref's forms as fn(torch, ...) (env.compiled's form)
def ce_fwd(torch, x, y):
    """(loss, S, m) per row in fp32."""
    return _ref().cross_entropy_forward(x, y)


def ce_bwd(torch, x, y, s, m, g):
    """(softmax - onehot) * g per row, in x's dtype."""
    return _ref().cross_entropy_backward(x, y, s, m, g)


def ce_fused(torch, x, y):
    return _ref().cross_entropy_fused(x, y)


def _inputs(env, t, v):
    torch = env.torch
    x = env.randn(t, v) * 2
    y = torch.randint(0, v, (t,), generator=env.gen, device="cuda")
    return x, y


def _fwd(env, t, v):
    torch, lt = env.torch, env.lt
    x, y = _inputs(env, t, v)
    fn = env.compiled(ce_fwd)
    impls = {"lingen": lambda: lt.cross_entropy_forward(x, y),
             "eager": lambda: ce_fwd(torch, x, y),
             "compile": lambda: fn(x, y)}
    lh = linghe(env, "triton_softmax_cross_entropy_forward")
    if lh:
        impls["linghe"] = lambda: lh(x, y)
    return Setup(impls, (x, y))


def _bwd(env, t, v):
    torch, lt = env.torch, env.lt
    x, y = _inputs(env, t, v)
    _, s, m = ce_fwd(torch, x, y)
    g = torch.rand(t, generator=env.gen, device="cuda") + 0.5
    fn = env.compiled(ce_bwd)
    impls = {"lingen": lambda: lt.cross_entropy_backward(x, y, s, m, g),
             "eager": lambda: ce_bwd(torch, x, y, s, m, g),
             "compile": lambda: fn(x, y, s, m, g)}
    lh = linghe(env, "triton_softmax_cross_entropy_backward")
    if lh:
        impls["linghe"] = lambda: lh(x, y, s, m, g)
    return Setup(impls, (x, y, s, m, g))


def _fused(env, t, v):
    import lingen
    torch = env.torch
    x, y = _inputs(env, t, v)
    one = torch.ones(1, device="cuda")
    fn = env.compiled(ce_fused)
    impls = {"lingen": lambda: lingen.cross_entropy_fused(x, y, one, skip=("sum_exp", "max_logit")),
             "eager": lambda: ce_fused(torch, x, y),
             "compile": lambda: fn(x, y)}
    if env.liger:
        # Liger writes the gradient over its input in the forward: its own copy
        xl = x.clone().requires_grad_()

        def liger():
            env.liger.liger_cross_entropy(xl, y, reduction="sum")
            return None, xl.detach()
        impls["liger"] = liger
    return Setup(impls, (x, y), lambda r: (r[0], r[-1]))


def _quant(env, t, v):
    import lingen
    torch, lt = env.torch, env.lt
    x, y = _inputs(env, t, v)
    _, s, m = ce_fwd(torch, x, y)
    g = torch.full((1,), 1.0 / t, device="cuda")
    rows = g.expand(t).contiguous()
    def two_kernels():  # the bf16 gradient written, then read by the quantiser
        return lt.fp8_quant(lt.cross_entropy_backward(x, y, s, m, rows))
    def eager():  # the torch forms: the bf16 gradient, then the quantiser
        return _ref().quant(ce_bwd(torch, x, y, s, m, rows).float(), round_scale=True)
    return Setup({"lingen": lambda: lingen.cross_entropy_quant(x, y, s, m, g), "eager": eager,
                  "bwd + fp8_quant": two_kernels},
                 (x, y, s, m, g), lambda r: dequant(torch, *r))


def cases(quick):
    shapes = [(8192, 157184)] if quick else [(8192, 157184), (8192, 129280), (4096, 50257),
                                             (4096, 100003)]
    shapes += [] if quick else [(t, 157184) for t in ODD_TOKENS if t != 8192]  # odd-shape rule
    out = []
    for kernel, make in (("cross_entropy fwd", _fwd), ("cross_entropy bwd", _bwd),
                         ("cross_entropy fused", _fused), ("cross_entropy_quant", _quant)):
        for t, v in shapes:
            if make is _quant and v % 128:  # the FP8 copies: whole 1 x 128 blocks
                continue
            shape = f"{t}x{v}"
            out.append(Case(kernel, shape, lambda env, t=t, v=v, make=make: make(env, t, v),
                            LINGHE_US.get((kernel, shape)), family=kernel.split()[0]))
    return out
