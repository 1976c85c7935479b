"""SwiGLU + FP8 (K7, K6) and the tensor-list reductions (K10, K11)."""
import torch

from .. import lists as _lists
from ..lists import TensorList
from ._ops import _compiling, _flat, _grad_carrier, _none_unused, _run, _used, declared

__all__ = ["grad_norm", "count_zero", "SwiGLUQuantFunction", "swiglu_quant",
           "swiglu_quant_forward", "swiglu_quant_backward", "BatchSwiGLUQuantFunction",
           "batch_swiglu_quant", "batch_swiglu_quant_forward", "batch_swiglu_quant_backward",
           "TensorList"]


# ------------------------------------------------ tensor lists (K10, K11)


def grad_norm(tensors, ord=2, norm=True):
    """The norm of a list of gradients (a lingen.TensorList, or a list of
    bf16 / fp32 CUDA tensors): ord 2, 1 or inf (-1 too), a 0-d fp32 tensor;
    fp64 sums, deterministic. As linghe's triton_batch_norm(xs, ord, norm)
    with scalar=True and high_precision=True, with no host copy and no
    synchronisation per call (CUDA graphs capture it)."""
    if isinstance(tensors, TensorList) or not (_compiling and _compiling()):
        return _lists.grad_norm(tensors, ord, norm)
    return torch.ops.lingen.grad_norm_forward(list(tensors), ord=_lists._ord(ord), norm=bool(norm))


def count_zero(tensors):
    """The zeros (+0.0 and -0.0) of a list of bf16 / fp32 CUDA tensors, a 0-d
    int64 tensor. As linghe's triton_batch_count_zero (which reads bf16
    wrongly)."""
    if isinstance(tensors, TensorList) or not (_compiling and _compiling()):
        return _lists.count_zero(tensors)
    return torch.ops.lingen.count_zero_forward(list(tensors))


# ------------------------------------------------ SwiGLU + FP8 (K7, K6)

def _quant_copies(op, res, output, shape=None):
    """(q, s, qt, st) of a forward, the copies output leaves out None; q
    in `shape` (x's leading dimensions) when given."""
    q, s, qt, st = _none_unused(res, _used(op, "forward", (("quant.output", output),)))
    if q is not None and shape is not None:
        q = q.view(shape)
    return q, s, qt, st


class SwiGLUQuantFunction(torch.autograd.Function):
    """y = silu(gate) * up of x [..., 2n] = [gate | up] (bf16), quantised
    (docs/kernels.md K7), with lingen's backward. Returns (y, q, s, qt, st): y is
    a gradient carrier (bf16 [..., n], no memory, values not y) through
    which the consumer of the FP8 copies gives dL/dy; the copies are
    lingen.swiglu_quant's. The backward gives dx in bf16 and, to grad_sink
    (a callable, if given), the quantised dx copies (dxq, dxs, dxqt, dxst)
    the next GEMMs take."""

    @staticmethod
    @declared("swiglu_quant")
    def forward(ctx, x, round_scale=..., output=..., grad_sink=None):
        x2 = _flat(x)
        n = x2.shape[-1] // 2
        res = _run("swiglu_quant_forward", x2, intermediate=n, quant_round_scale=round_scale,
                   quant_output=output)
        copies = _quant_copies("swiglu_quant", res, output, (*x.shape[:-1], n))
        ctx.mark_non_differentiable(*(c for c in copies if c is not None))
        # the copies' gradients are never read: not made as zeros by autograd
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x2)
        ctx.opts = (round_scale, grad_sink, x.shape)
        return (_grad_carrier(x, n), *copies)

    @staticmethod
    def backward(ctx, gy, *_):
        (x2,) = ctx.saved_tensors
        round_scale, grad_sink, shape = ctx.opts
        if gy is None:  # y unused: its gradient zeros, as autograd would have made them
            gy = x2.new_zeros(*shape[:-1], x2.shape[-1] // 2)
        g = _flat(gy).contiguous()
        dxq, dxs, dxqt, dxst, dx = _run("swiglu_quant_backward", g, x2, quant_round_scale=round_scale,
                                        quant_output="both", dx_bf16=True)
        if grad_sink is not None:
            grad_sink(dxq, dxs, dxqt, dxst)
        return dx.view(shape), None, None, None


@declared("swiglu_quant")
def swiglu_quant(x, round_scale=..., output=..., grad_sink=None):
    """SwiGLU + blockwise FP8 of x [..., 2n], differentiable:
    (y, q, s, qt, st) as SwiGLUQuantFunction (y a gradient carrier)."""
    return SwiGLUQuantFunction.apply(x, round_scale, output, grad_sink)


@declared("swiglu_quant")
def swiglu_quant_forward(x, round_scale=..., output=...):
    """(q, s, qt, st) without autograd, as linghe's
    triton_silu_and_block_quant_forward; leading dimensions flattened into
    tokens (q keeps them)."""
    x2 = _flat(x)
    n = x2.shape[-1] // 2
    res = _run("swiglu_quant_forward", x2, intermediate=n, quant_round_scale=round_scale,
               quant_output=output)
    return _quant_copies("swiglu_quant", res, output, (*x.shape[:-1], n))


@declared("swiglu_quant")
def swiglu_quant_backward(g, x, round_scale=..., dx_bf16=...):
    """(dxq, dxs, dxqt, dxst), and dx bf16 with dx_bf16, as linghe's
    triton_silu_and_block_quant_backward (any token count)."""
    res = _run("swiglu_quant_backward", _flat(g), _flat(x), quant_round_scale=round_scale,
               quant_output="both", dx_bf16=bool(dx_bf16))
    return res if dx_bf16 else res[:4]


def _prob2(prob):
    """prob as the kernels take it: [tokens, 1] fp32, contiguous."""
    return prob.reshape(-1, 1).float().contiguous()


class BatchSwiGLUQuantFunction(torch.autograd.Function):
    """y = silu(gate) * up * prob of x [tokens, 2n] (bf16, rows grouped by
    expert; counts [experts] int32 on the device), quantised per expert
    (docs/kernels.md K6), with lingen's backward. Returns (y, q, s, qt, st) as
    SwiGLUQuantFunction; the backward gives dx in bf16, dprob (fp32
    deterministic, cast to prob's dtype) and, to grad_sink if given, the
    per-expert quantised dx copies (dxq, dxs, dxqt, dxst)."""

    @staticmethod
    @declared("batch_swiglu_quant")
    def forward(ctx, x, prob, counts, round_scale=..., output=..., grad_sink=None):
        n = x.shape[-1] // 2
        p2 = _prob2(prob)
        res = _run("batch_swiglu_quant_forward", x, p2, counts, intermediate=n,
                   quant_round_scale=round_scale, quant_output=output)
        copies = _quant_copies("batch_swiglu_quant", res, output)
        ctx.mark_non_differentiable(*(c for c in copies if c is not None))
        # the copies' gradients are never read: not made as zeros by autograd
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, p2, counts)
        ctx.opts = (round_scale, grad_sink, prob.shape, prob.dtype)
        return (_grad_carrier(x, n), *copies)

    @staticmethod
    def backward(ctx, gy, *_):
        x, p2, counts = ctx.saved_tensors
        round_scale, grad_sink, pshape, pdtype = ctx.opts
        if gy is None:  # y unused: its gradient zeros, as autograd would have made them
            gy = x.new_zeros(*x.shape[:-1], x.shape[-1] // 2)
        dxq, dxs, dp, dxqt, dxst, dx = _run("batch_swiglu_quant_backward", gy.contiguous(), x, p2,
                                            counts, quant_round_scale=round_scale,
                                            quant_output="both", dx_bf16=True)
        if grad_sink is not None:
            grad_sink(dxq, dxs, dxqt, dxst)
        dprob = dp.to(pdtype).view(pshape) if ctx.needs_input_grad[1] else None
        return dx, dprob, None, None, None, None


@declared("batch_swiglu_quant")
def batch_swiglu_quant(x, prob, counts, round_scale=..., output=..., grad_sink=None):
    """Per-expert weighted SwiGLU + FP8, differentiable in x and prob:
    (y, q, s, qt, st) as BatchSwiGLUQuantFunction."""
    return BatchSwiGLUQuantFunction.apply(x, prob, counts, round_scale, output, grad_sink)


@declared("batch_swiglu_quant")
def batch_swiglu_quant_forward(x, prob, counts, round_scale=..., output=...):
    """(q, s, qt, st) without autograd, as linghe's
    triton_batch_weighted_silu_and_block_quant_forward."""
    res = _run("batch_swiglu_quant_forward", x, _prob2(prob), counts,
               intermediate=x.shape[-1] // 2, quant_round_scale=round_scale, quant_output=output)
    return _quant_copies("batch_swiglu_quant", res, output)


@declared("batch_swiglu_quant")
def batch_swiglu_quant_backward(g, x, prob, counts, round_scale=..., dx_bf16=...):
    """(dxq, dxs, dprob, dxqt, dxst), and dx bf16 with dx_bf16, as linghe's
    triton_batch_weighted_silu_and_block_quant_backward (dprob fp32
    [tokens, 1])."""
    res = _run("batch_swiglu_quant_backward", g, x, _prob2(prob), counts,
               quant_round_scale=round_scale, quant_output="both", dx_bf16=bool(dx_bf16))
    return res if dx_bf16 else res[:5]


