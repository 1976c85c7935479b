"""The router GEMM (docs/kernels.md K3), forward and backward, and a square
8192^3 bf16 GEMM with fp32 output on the same emitter, each beside
cuBLAS (torch.mm, bf16 output) in the same run; rows report TFLOP/s. And
the fused RMSNorm + router GEMM + rowwise FP8 (K3b) beside its eager
composition (RMSNorm, an fp32 mm, the rowwise quantiser) and the same
with cuBLAS's bf16 GEMM (torch.mm)."""
from . import ODD_TOKENS, Case, Setup
from .quant import _ref, dequant

# linghe on one H200 (docs/performance.md): (kernel, shape) -> us
LINGHE_US = {("router fwd", "8192x2048x256"): 37.0, ("router bwd", "8192x2048x256"): 178.4}


def fwd_fp32(torch, x, w):
    """The README baseline: upcast copies and an fp32 GEMM."""
    return _ref().router_gemm(x, w)


def bwd_fp32(torch, dy, x, w):
    return _ref().router_gemm_backward(dy, x, w)


def _fwd(env, m, k, n):
    torch, lt = env.torch, env.lt
    x, w = env.randn(m, k), env.randn(n, k) / n ** 0.5
    fn = env.compiled(fwd_fp32)
    return Setup({"lingen": lambda: lt.router_gemm_forward(x, w),
                  "eager": lambda: fwd_fp32(torch, x, w),
                  "compile": lambda: fn(x, w),
                  "torch.mm": lambda: torch.mm(x, w.T)},
                 (x, w), lambda r: (r.float(),))


def _bwd(env, m, k, n, precision):
    torch, lt = env.torch, env.lt
    x, w = env.randn(m, k), env.randn(n, k) / n ** 0.5
    dy = env.randn(m, n, dtype=torch.float32)
    fn = env.compiled(bwd_fp32)

    def mm():
        d = dy.bfloat16()
        return torch.mm(d, w), torch.mm(d.T, x)
    return Setup({"lingen": lambda: lt.router_gemm_backward(dy, x, w, precision),
                  "eager": lambda: bwd_fp32(torch, dy, x, w),
                  "compile": lambda: fn(dy, x, w),
                  "torch.mm": mm},
                 (dy, x, w), lambda r: tuple(t.float() for t in r))


def rmsnorm_router(torch, x, w, rw, eps=1e-6, bf16_mm=False):
    """Eager K3b: y = RMSNorm in fp32 (written as bf16), rms, logits of
    the bf16 y in fp32 (bf16_mm: cuBLAS's bf16 GEMM, bf16 logits), and the
    rowwise copy of fp32 y (pow2 scales)."""
    y32, rms = _ref().rms_norm_fp32(x, w, eps)
    y = y32.to(x.dtype)
    logits = torch.mm(y, rw.T) if bf16_mm else torch.mm(y.float(), rw.float().T)
    q, s = _ref().rowwise(y32)
    return y, rms, logits, q, s


def _fused(env, m, k, n):
    torch, lt = env.torch, env.lt
    x, w, rw = env.randn(m, k), env.weight(k), env.randn(n, k) / k ** 0.5
    fn = env.compiled(rmsnorm_router)

    def norm(r):
        y, rms, logits, q, s = r[:5]
        return y.float(), rms, logits, dequant(torch, q, s, None, None)[0]
    return Setup({"lingen": lambda: lt.rms_norm_router_forward(x, w, rw),
                  "eager": lambda: rmsnorm_router(torch, x, w, rw),
                  "compile": lambda: fn(x, w, rw),
                  "torch.mm": lambda: rmsnorm_router(torch, x, w, rw, bf16_mm=True)},
                 (x, w, rw), norm)


def cases(quick):
    out = []
    shapes = [(8192, 2048, 256)] if quick else [(8192, 2048, 256), (8192, 7168, 256),
                                                (4096, 2048, 160)]
    if not quick:  # the odd-shape rule's token counts
        shapes += [(t, 2048, 256) for t in ODD_TOKENS if t != 8192]
    for m, k, n in shapes:
        shape = f"{m}x{k}x{n}"
        flops = 2.0 * m * k * n
        out.append(Case("router fwd", shape, lambda env, m=m, k=k, n=n: _fwd(env, m, k, n),
                        LINGHE_US.get(("router fwd", shape)), extra={"flops": flops},
                        family="router_gemm"))
        # the precision variants at the first shape only
        for p in ("bf16",) if quick or (m, k, n) != shapes[0] else ("bf16", "bf16x2", "bf16x3",
                                                                       "tf32"):
            kernel = "router bwd" if p == "bf16" else f"router bwd {p}"
            out.append(Case(kernel, shape, lambda env, m=m, k=k, n=n, p=p: _bwd(env, m, k, n, p),
                            LINGHE_US.get((kernel, shape)), extra={"flops": 2 * flops},
                            family="router_gemm"))
    for m, k, n in [s for s in shapes if s != (4096, 2048, 160)]:
        out.append(Case("rmsnorm_router", f"{m}x{k}x{n}",
                        lambda env, m=m, k=k, n=n: _fused(env, m, k, n),
                        extra={"flops": 2.0 * m * k * n}, family="rmsnorm_router"))
    if not quick:
        out.append(Case("gemm bf16->fp32", "8192x8192x8192",
                        lambda env: _fwd(env, 8192, 8192, 8192),
                        extra={"flops": 2.0 * 8192 ** 3}, family="router_gemm"))
    return out
