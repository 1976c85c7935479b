"""Reductions over tensor lists: the global grad norm (K10) and the zero
count (K11). lingen's rows time a call over a lingen.TensorList (the
device table built once, as a training loop keeps it); eager PyTorch is
torch._foreach_norm then the norm of the norms (what
torch.nn.utils.clip_grad_norm_ does), and (t == 0).sum() a tensor."""
import dataclasses

from . import Case, Setup

# linghe on one H200 (docs/performance.md): (kernel, shape) -> us
LINGHE_US = {("grad_norm l2", "512 fp32, 2.36 GB"): 537.7,
             ("count_zero", "32x[4096,8192] fp32"): 952.3}

# 512 tensors of a model's parameter shapes, 2.36 GB of fp32 in all
SHAPES = [(2048, 2048), (512, 2048), (2048,), (1024, 2048), (2048, 256), (128,), (1,)]
SMALL = [(256, 1024), (1024,), (77,)]
TINY = [(1000,)]


def eager_norm(torch, tensors, ord=2.0):
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(tensors, ord)), ord)


def eager_count_zero(torch, tensors):
    return torch.stack([(t == 0).sum() for t in tensors]).sum()


def _grads(env, n, total, dtype, shapes):
    ts = [env.randn(*shapes[i % len(shapes)], dtype=dtype) for i in range(n - 1)]
    rest = total - sum(t.numel() for t in ts)
    ts.append(env.randn(max(rest, 1), dtype=dtype))
    for t in ts[::3]:
        t.clamp_(min=0)  # zeros to count
    return ts


def _norm_case(n, total, dtype, ord=2.0, shapes=SHAPES, compile=True):
    def make(env):
        torch, lt = env.torch, env.lt
        ts = _grads(env, n, total, getattr(torch, dtype), shapes)
        tl = lt.TensorList(ts)
        impls = {"lingen": lambda: lt.grad_norm(tl, ord),
                 "eager": lambda: eager_norm(torch, ts, ord)}
        if compile:  # torch.compile over 10 000 inputs takes longer than the bench
            fn = env.compiled(eager_norm)
            impls["compile"] = lambda: fn(ts, ord)
        return Setup(impls, tuple(ts), lambda r: (r.float(),))
    return make


def _count_case(n, shape, dtype):
    def make(env):
        torch, lt = env.torch, env.lt
        ts = [env.randn(*shape, dtype=getattr(torch, dtype)).clamp_(min=0) for _ in range(n)]
        tl = lt.TensorList(ts)
        fn = env.compiled(eager_count_zero)
        return Setup({"lingen": lambda: lt.count_zero(tl),
                      "eager": lambda: eager_count_zero(torch, ts),
                      "compile": lambda: fn(ts)}, tuple(ts), lambda r: (r.double(),))
    return make


def cases(quick):
    # each row's family is its first word (grad_norm, count_zero)
    return [dataclasses.replace(c, family=c.kernel.split()[0]) for c in _cases(quick)]


def _cases(quick):
    total = 590_000_000  # 2.36 GB of fp32
    rows = [
        Case("grad_norm l2", "512 fp32, 2.36 GB", _norm_case(512, total, "float32"),
             LINGHE_US[("grad_norm l2", "512 fp32, 2.36 GB")]),
        Case("count_zero", "32x[4096,8192] fp32", _count_case(32, (4096, 8192), "float32"),
             LINGHE_US[("count_zero", "32x[4096,8192] fp32")]),
    ]
    if quick:
        return [Case("grad_norm l2", "64 fp32, 64 MB", _norm_case(64, 16_000_000, "float32", shapes=SMALL)),
                Case("count_zero", "4x[1024,4096] bf16", _count_case(4, (1024, 4096), "bfloat16"))]
    return rows + [
        Case("grad_norm l2", "512 bf16, 1.18 GB", _norm_case(512, total, "bfloat16")),
        Case("grad_norm inf", "512 fp32, 2.36 GB", _norm_case(512, total, "float32", float("inf"))),
        Case("grad_norm l2", "10000 x 1000 fp32", _norm_case(10000, 10_000_000, "float32", shapes=TINY, compile=False)),
        Case("count_zero", "32x[4096,8192] bf16", _count_case(32, (4096, 8192), "bfloat16")),
    ]
