"""The router GEMM (KERNELS.md K3), forward and backward, and a square
8192^3 bf16 GEMM with fp32 output on the same emitter, each beside
cuBLAS (torch.mm, bf16 output) in the same run; rows report TFLOP/s."""
from . import Case, Setup

# linghe on one H200 (shared/TARGETS.md): (kernel, shape) -> us
LINGHE_US = {("router fwd", "8192x2048x256"): 37.0, ("router bwd", "8192x2048x256"): 178.4}


def fwd_fp32(torch, x, w):
    """The README baseline: upcast copies and an fp32 GEMM."""
    return x.float() @ w.float().T


def bwd_fp32(torch, dy, x, w):
    return (dy @ w.float()).to(x.dtype), dy.T @ x.float()


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


def cases(quick):
    out = []
    shapes = [(8192, 2048, 256)] if quick else [(8192, 2048, 256), (8192, 7168, 256),
                                                (4096, 2048, 160)]
    for m, k, n in shapes:
        shape = f"{m}x{k}x{n}"
        flops = 2.0 * m * k * n
        out.append(Case("router fwd", shape, lambda env, m=m, k=k, n=n: _fwd(env, m, k, n),
                        LINGHE_US.get(("router fwd", shape)), extra={"flops": flops}))
        for p in ("bf16",) if quick else ("bf16", "bf16x2", "bf16x3"):
            kernel = "router bwd" if p == "bf16" else f"router bwd {p}"
            out.append(Case(kernel, shape, lambda env, m=m, k=k, n=n, p=p: _bwd(env, m, k, n, p),
                            LINGHE_US.get((kernel, shape)), extra={"flops": 2 * flops}))
    if not quick:
        out.append(Case("gemm bf16->fp32", "8192x8192x8192",
                        lambda env: _fwd(env, 8192, 8192, 8192),
                        extra={"flops": 2.0 * 8192 ** 3}))
    return out
