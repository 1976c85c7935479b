"""RMSNorm, FP8 quantisation, the router GEMM and the fused RMSNorm + router
(docs/kernels.md K1, 1.3, K3, K3b): autograd Functions, modules, functions."""
import torch

from ._ops import _flat, _grad_carrier, _none_unused, _run, _used, declared

__all__ = ["RMSNormFunction", "rms_norm", "RMSNorm", "rms_norm_quant", "RMSNormQuantFunction",
           "rms_norm_quant_autograd", "rms_norm_forward", "rms_norm_backward", "fp8_quant",
           "fp8_quant_batched", "fp8_quant_weight", "RouterGemmFunction", "router_gemm",
           "fp32_gemm", "router_gemm_forward", "router_gemm_backward", "RMSNormRouterFunction",
           "rms_norm_router", "rms_norm_router_forward"]


# ------------------------------------------------------------ RMSNorm

class RMSNormFunction(torch.autograd.Function):
    """y = x * rsqrt(mean(x^2) + eps) * w over the last dimension, with
    lingen's forward and backward (dw in fp32, deterministic, cast to w's
    dtype for autograd). As linghe's facade RMSNormFunction."""

    @staticmethod
    @declared("rmsnorm")
    def forward(ctx, x, weight, eps=...):
        x2 = _flat(x)
        y, rms = _run("rmsnorm_forward", x2, weight, eps=eps)
        ctx.save_for_backward(x2, weight, rms)
        ctx.eps = eps
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        x2, weight, rms = ctx.saved_tensors
        dx, dw = _run("rmsnorm_backward", _flat(dy), x2, weight, rms, eps=ctx.eps)
        dw = dw.to(weight.dtype) if ctx.needs_input_grad[1] else None
        return dx.view(dy.shape), dw, None


@declared("rmsnorm")
def rms_norm(x, weight, eps=...):
    """RMSNorm over the last dimension of x (bf16), differentiable."""
    return RMSNormFunction.apply(x, weight, eps)


class RMSNorm(torch.nn.Module):
    """torch.nn.RMSNorm over the last dimension with lingen's kernels; the
    weight is bf16 (the kernels' dtype)."""

    @declared("rmsnorm")
    def __init__(self, hidden_size, eps=..., device=None, dtype=torch.bfloat16):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self):
        return f"{self.weight.shape[0]}, eps={self.eps}"


# --------------------------------------------------- FP8 quantisation

@declared("rmsnorm_quant")
def rms_norm_quant(x, weight, eps=..., round_scale=..., output=...):
    """RMSNorm + blockwise FP8 quantisation of x [..., hidden] (bf16), as
    lingen.rmsnorm_quant: (q, s, rms, qt, st), the copies output does not
    ask for None. Leading dimensions are flattened into tokens; q keeps x's
    shape, qt is [hidden, round_up(tokens, 128)] (zeros past the tokens). Not differentiable (its backward is the
    RMSNorm backward: lingen.torch.rms_norm_backward; rms_norm_quant_autograd
    is the differentiable form)."""
    res = _run("rmsnorm_quant_forward", _flat(x), weight, eps=eps,
                                                 quant_round_scale=round_scale,
                                                 quant_output=output)
    q, s, rms, qt, st = _none_unused(res, _used("rmsnorm_quant", "forward", (("quant.output", output),)))
    return (q.view(x.shape) if q is not None else None), s, rms, qt, st


class RMSNormQuantFunction(torch.autograd.Function):
    """RMSNorm + blockwise FP8 of x [..., hidden] (bf16), K1's forward and
    backward pair: the forward is lingen.rmsnorm_quant, the backward the
    RMSNorm backward (lingen.rmsnorm_backward with the forward's rms; dw in
    fp32, deterministic, cast to the weight's dtype). Returns (y, q, s, qt,
    st): y is a gradient carrier (bf16 [..., hidden], no memory, values not
    the normalised x) through which the consumer of the FP8 copies gives
    dL/dy, as SwiGLUQuantFunction's; the copies output does not ask for
    None."""

    @staticmethod
    @declared("rmsnorm_quant")
    def forward(ctx, x, weight, eps=..., round_scale=..., output=...):
        x2 = _flat(x)
        res = _run("rmsnorm_quant_forward", x2, weight, eps=eps, quant_round_scale=round_scale,
                   quant_output=output)
        q, s, rms, qt, st = _none_unused(res, _used("rmsnorm_quant", "forward",
                                                    (("quant.output", output),)))
        copies = (q.view(x.shape) if q is not None else None, s, qt, st)
        ctx.mark_non_differentiable(*(c for c in copies if c is not None))
        # the copies' gradients are never read: not made as zeros by autograd
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x2, weight, rms)
        ctx.opts = (eps, x.shape)
        return (_grad_carrier(x, x.shape[-1]), *copies)

    @staticmethod
    def backward(ctx, gy, *_):
        x2, weight, rms = ctx.saved_tensors
        eps, shape = ctx.opts
        if gy is None:  # y unused: its gradient zeros, as autograd would have made them
            gy = x2.new_zeros(shape)
        dx, dw = _run("rmsnorm_backward", _flat(gy).contiguous(), x2, weight, rms, eps=eps)
        dw = dw.to(weight.dtype) if ctx.needs_input_grad[1] else None
        return dx.view(shape), dw, None, None, None


@declared("rmsnorm_quant")
def rms_norm_quant_autograd(x, weight, eps=..., round_scale=..., output=...):
    """RMSNorm + blockwise FP8 of x [..., hidden], differentiable in x and
    weight: (y, q, s, qt, st) as RMSNormQuantFunction (y a gradient
    carrier; rms_norm_quant is the same forward without autograd)."""
    return RMSNormQuantFunction.apply(x, weight, eps, round_scale, output)


@declared("rmsnorm")
def rms_norm_forward(x, weight, eps=...):
    """(y, rms): RMSNorm forward of x [..., hidden] without autograd."""
    y, rms = _run("rmsnorm_forward", _flat(x), weight, eps=eps)
    return y.view(x.shape), rms


@declared("rmsnorm")
def rms_norm_backward(dy, x, weight, eps=..., rms=None):
    """(dx, dw fp32): RMSNorm backward, as linghe's triton_rms_norm_backward."""
    dx, dw = _run("rmsnorm_backward", _flat(dy), _flat(x), weight, rms, eps=eps)
    return dx.view(dy.shape), dw


@declared("fp8_quant")
def fp8_quant(x, round_scale=..., output=...):
    """Blockwise FP8 quantisation of x [..., hidden] (bf16): (q, s, qt, st)
    as lingen.fp8_quant, the copies output does not ask for None."""
    res = _run("fp8_quant_forward", _flat(x), quant_round_scale=round_scale,
                                             quant_output=output)
    q, s, qt, st = _none_unused(res, _used("fp8_quant", "forward", (("quant.output", output),)))
    return (q.view(x.shape) if q is not None else None), s, qt, st


@declared("fp8_quant_batched")
def fp8_quant_batched(x, counts, round_scale=..., output=...):
    """Per-expert blockwise FP8 quantisation of x [tokens, hidden] (bf16,
    tokens grouped by expert) with counts [experts] int32 on the device:
    (q, s, qt, st) as lingen.fp8_quant_batched, the copies output does not
    ask for None."""
    res = _run("fp8_quant_batched_forward", x, counts, quant_round_scale=round_scale,
               quant_output=output)
    return _none_unused(res, _used("fp8_quant_batched", "forward", (("quant.output", output),)))


@declared("fp8_quant_weight")
def fp8_quant_weight(w, round_scale=..., transposed=...):
    """(q, s): w [rows, hidden] (bf16) in 128 x 128 tiles, as
    lingen.fp8_quant_weight; transposed=True: (q, s, qt, st), the
    transposed copy written by the same kernel."""
    q, s, qt, st = _run("fp8_quant_weight_forward", w, quant_round_scale=round_scale,
                        transposed=bool(transposed))
    return (q, s, qt, st) if transposed else (q, s)


# ------------------------------------------------------ router GEMM (K3)

class RouterGemmFunction(torch.autograd.Function):
    """logits fp32 = x . weight^T over the last dimension of x (bf16), with
    lingen's forward and backward: dx (bf16) and dw (fp32, deterministic,
    cast to weight's dtype for autograd) from the fp32 dy, as `precision`
    bf16 terms (lingen.router_gemm_backward). As linghe's facade
    fp32_gemm(input, weight)."""

    @staticmethod
    @declared("router_gemm")
    def forward(ctx, x, weight, precision=...):
        x2 = _flat(x)
        logits = _run("router_gemm_forward", x2, weight)
        ctx.save_for_backward(x2, weight)
        ctx.precision = precision
        ctx.shape = x.shape
        return logits.view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, dy):
        x2, weight = ctx.saved_tensors
        dx, dw = _run("router_gemm_backward", _flat(dy).float(), x2, weight,
                      precision=ctx.precision)
        dx = dx.view(ctx.shape) if ctx.needs_input_grad[0] else None
        dw = dw.to(weight.dtype) if ctx.needs_input_grad[1] else None
        return dx, dw, None


@declared("router_gemm")
def router_gemm(x, weight, precision=...):
    """Router logits (fp32) of x [..., hidden] (bf16) and weight [experts,
    hidden] (bf16), differentiable."""
    return RouterGemmFunction.apply(x, weight, precision)


fp32_gemm = router_gemm  # linghe's name for it


def router_gemm_forward(x, weight):
    """logits fp32 [..., experts] without autograd, as linghe's triton_fp32_gemm."""
    return _run("router_gemm_forward", _flat(x), weight).view(*x.shape[:-1], weight.shape[0])


@declared("router_gemm")
def router_gemm_backward(dy, x, weight, precision=...):
    """(dx bf16 in x's shape, dw fp32 [experts, hidden]) from dy fp32
    [..., experts]: linghe's triton_fp32_gemm_for_backward and
    triton_fp32_gemm_for_update in one call."""
    dx, dw = _run("router_gemm_backward", _flat(dy).float(), _flat(x), weight, precision=precision)
    return dx.view(x.shape), dw


# ------------------------------ RMSNorm + router GEMM + FP8, fused (K3b)

def _rms_norm_router_run(x2, weight, route_weight, eps, precision, round_scale, output):
    res = _run("rmsnorm_router_forward", x2, weight, route_weight, eps=eps, precision=precision,
               quant_round_scale=round_scale, quant_output=output)
    # (hidden 128: the smallest shape, 8, takes no columnwise copy)
    used = _used("rmsnorm_router", "forward", (("hidden", 128), ("quant.output", output)))
    return _none_unused(res, used)


class RMSNormRouterFunction(torch.autograd.Function):
    """y = rmsnorm(x) * weight, the router logits y . route_weight^T (fp32)
    and y's FP8 copies in one lingen kernel (docs/kernels.md K3b); y and the
    logits are differentiable. The backward composes the existing ones:
    router_gemm's (dy from the logits, as `precision` bf16 terms of the fp32
    dlogits, and d route_weight = dlogits^T . y), added to y's own
    gradient, then the RMSNorm backward (dx, d weight) from the saved rms.
    Returns (y, rms, logits, q, s, qt, st); rms and the copies carry no
    gradient."""

    @staticmethod
    @declared("rmsnorm_router")
    def forward(ctx, x, weight, route_weight, eps=..., precision=..., round_scale=...,
                output=...):
        x2 = _flat(x)
        y, rms, logits, q, s, qt, st = _rms_norm_router_run(x2, weight, route_weight, eps, precision,
                                                            round_scale, output)
        ctx.save_for_backward(x2, weight, route_weight, y, rms)
        ctx.opts = (eps, precision, x.shape)
        q = q.view(x.shape) if q is not None else None
        ctx.mark_non_differentiable(*(t for t in (rms, q, s, qt, st) if t is not None))
        return (y.view(x.shape), rms, logits.view(*x.shape[:-1], route_weight.shape[0]), q, s, qt,
                st)

    @staticmethod
    def backward(ctx, gy, grms, glogits, *_):
        x2, weight, route_weight, y, rms = ctx.saved_tensors
        eps, precision, shape = ctx.opts
        g = None if gy is None else _flat(gy).float()
        dr = None
        if glogits is not None:
            want = ctx.needs_input_grad
            dyr, dr = _run("router_gemm_backward", _flat(glogits).float().contiguous(), y,
                           route_weight, precision=precision)
            g = dyr.float() if g is None else g + dyr.float()
            dr = dr.to(route_weight.dtype) if want[2] else None
        if g is None:
            return None, None, dr, None, None, None, None
        dx, dw = _run("rmsnorm_backward", g.to(torch.bfloat16).contiguous(), x2, weight, rms, eps=eps)
        dw = dw.to(weight.dtype) if ctx.needs_input_grad[1] else None
        return dx.view(shape), dw, dr, None, None, None, None


@declared("rmsnorm_router")
def rms_norm_router(x, weight, route_weight, eps=..., precision=..., round_scale=...,
                    output=...):
    """RMSNorm + router logits + FP8 copies of x [..., hidden] (bf16),
    differentiable in y and the logits: (y, rms, logits, q, s, qt, st) as
    RMSNormRouterFunction (the copies output leaves out None)."""
    return RMSNormRouterFunction.apply(x, weight, route_weight, eps, precision, round_scale, output)


@declared("rmsnorm_router")
def rms_norm_router_forward(x, weight, route_weight, eps=..., precision=..., round_scale=...,
                            output=...):
    """(y, rms, logits, q, s, qt, st) without autograd, as linghe's
    triton_rms_norm_fp32_gemm_block_quant_forward (output "rowwise": its
    output_mode 0); leading dimensions flattened into tokens (y, q and the
    logits keep them)."""
    y, rms, logits, q, s, qt, st = _rms_norm_router_run(_flat(x), weight, route_weight, eps,
                                                        precision, round_scale, output)
    return (y.view(x.shape), rms, logits.view(*x.shape[:-1], route_weight.shape[0]),
            q.view(x.shape) if q is not None else None, s, qt, st)


