"""RMSNorm + FP8 quant (K1), plain RMSNorm forward and backward, and the
standalone blockwise quantiser (docs/kernels.md 1.3)."""
from . import ODD_TOKENS, Case, Setup, linghe
from .quant import _ref, dequant, torch_quant

# linghe on one H200 (docs/performance.md, measured 2026-11-30): (kernel, shape) -> us
LINGHE_US = {
    ("rmsnorm_quant", "8192x2048"): 41.2, ("rmsnorm_quant", "128x2048"): 11.0,
    ("rmsnorm_quant", "1024x2048"): 13.7, ("rmsnorm fwd", "8192x2048"): 21.2,
    ("rmsnorm fwd", "8192x4096"): 37.9, ("rmsnorm bwd", "8192x2048"): 46.8,
}


# the peers: lingen._torchref's forms as fn(torch, ...) (env.compiled's form)
def rmsnorm_fwd(torch, x, w, eps=1e-6):
    return _ref().rms_norm(x, w, eps)


def rmsnorm_bwd(torch, dy, x, w, rms):
    return _ref().rms_norm_backward(dy, x, w, rms)


def rmsnorm_quant(torch, x, w, eps=1e-6):
    return _ref().rms_norm_quant(x, w, eps)


def _k1(env, t, h):
    torch, lt = env.torch, env.lt
    x, w = env.randn(t, h), env.weight(h)
    fn = env.compiled(rmsnorm_quant)

    def norm(r):
        q, s, rms, qt, st = r
        return (*dequant(torch, q, s, qt, st), rms)
    impls = {"lingen": lambda: lt.rms_norm_quant(x, w),
             "eager": lambda: rmsnorm_quant(torch, x, w),
             "compile": lambda: fn(x, w)}
    lh = linghe(env, "triton_rms_norm_and_block_quant_forward")
    if lh:
        impls["linghe"] = lambda: lh(x, w, 1e-6, round_scale=True, output_mode=2)
    return Setup(impls, (x, w), norm)


def _fwd(env, t, h):
    torch, lt = env.torch, env.lt
    x, w = env.randn(t, h), env.weight(h)
    fn = env.compiled(rmsnorm_fwd)
    impls = {"lingen": lambda: lt.rms_norm_forward(x, w),
             "eager": lambda: rmsnorm_fwd(torch, x, w),
             "compile": lambda: fn(x, w)}
    if env.liger:
        impls["liger"] = lambda: (env.liger.liger_rms_norm(x, w, 1e-6, in_place=False), None)
    lh = linghe(env, "triton_rms_norm_forward")
    if lh:
        impls["linghe"] = lambda: lh(x, w, 1e-6)
    return Setup(impls, (x, w))


def _bwd(env, t, h):
    torch, lt = env.torch, env.lt
    x, w, dy = env.randn(t, h), env.weight(h), env.randn(t, h)
    rms = rmsnorm_fwd(torch, x, w)[1]
    fn = env.compiled(rmsnorm_bwd)
    impls = {"lingen": lambda: lt.rms_norm_backward(dy, x, w, 1e-6, rms),
             "eager": lambda: rmsnorm_bwd(torch, dy, x, w, rms),
             "compile": lambda: fn(dy, x, w, rms)}
    if env.liger:
        xl, wl = x.clone().requires_grad_(), w.clone().requires_grad_()
        yl = env.liger.liger_rms_norm(xl, wl, 1e-6, in_place=False)
        impls["liger"] = lambda: torch.autograd.grad(yl, (xl, wl), dy, retain_graph=True)
    lh = linghe(env, "triton_rms_norm_backward")
    if lh:
        impls["linghe"] = lambda: lh(dy, x, w, 1e-6, rms)
    return Setup(impls, (dy, x, w, rms))


def _quant(env, t, h):
    torch, lt = env.torch, env.lt
    x = env.randn(t, h)
    fn = env.compiled(torch_quant)
    return Setup({"lingen": lambda: lt.fp8_quant(x),
                  "eager": lambda: torch_quant(torch, x.float()),
                  "compile": lambda: fn(x.float())}, (x,),
                 lambda r: dequant(torch, *r))


def cases(quick):
    big = [(8192, 2048)] if quick else [(8192, 2048), (8192, 4096), (8192, 7168)]
    small = [(128, 2048), (1024, 2048)]
    if not quick:  # odd token counts, each beside its count rounded up to 128 (the odd-shape rule)
        small += [(t, h) for h in (2048, 4096) for t in ODD_TOKENS
                  if (t, h) not in big]
    out = []
    for kernel, make in (("rmsnorm_quant", _k1), ("rmsnorm fwd", _fwd), ("rmsnorm bwd", _bwd),
                         ("fp8_quant", _quant)):
        for t, h in big + small:
            shape = f"{t}x{h}"
            out.append(Case(kernel, shape, lambda env, t=t, h=h, make=make: make(env, t, h),
                            LINGHE_US.get((kernel, shape)), family=kernel.split()[0]))
    return out
