"""Fp8Linear: y = x . w^T with the blockwise FP8 recipe (docs/kernels.md
1.3): the forward quantises x (lingen's fp8_quant, both copies: the
rowwise one for this GEMM, the columnwise one kept for the weight
gradient) and the weight (fp8_quant_weight with its transposed copy, once
a forward, kept for the backward); the backward quantises dy and runs the
dgrad (dy . w) and wgrad (dy^T . x, fp32) GEMMs. All GEMMs go through
lingen.nn._gemm. fp8=False: a plain bf16 torch linear."""
import torch
import torch.nn.functional as F

from .. import _families
from . import _args as A, _gemm, _k

__all__ = ["Fp8LinearFunction", "Fp8LinearCrossEntropy", "fp8_linear", "Fp8Linear"]

# the FP8 quantisers' row-width keys: fp8_quant's hidden (dy's columns) and
# cross_entropy_quant's vocab (the fused FP8 head's logits gradient)
QUANT_WIDTH_KEYS = (("fp8_quant", "hidden"), ("cross_entropy_quant", "vocab"))


def _quant_width_max():
    """The widest row both quantisers take: the keys' declared maximum
    (gen/families/fp8_quant.c, cross_entropy_quant.c), read from the
    library's declarations."""
    fams = _families.families()
    return min(fams[op].key(path).max for op, path in QUANT_WIDTH_KEYS)


# the widest row lingen's activation quantisers take: an LM head's vocab up to it
# has its gradient quantised in one launch; a wider output in slices of columns
# (_backward_sliced)
QUANT_WIDTH_MAX = _quant_width_max()


class Fp8LinearFunction(torch.autograd.Function):
    """y [..., N] bf16 = x [..., K] . weight [N, K]^T in FP8. x_copies, when
    given, are x's quantised copies (q [tokens, K], s, qt, st) from the
    producer (an RMSNorm or SwiGLU + quant kernel: lingen.nn._k's
    rms_norm_quant, swiglu_quant_dense): then x only carries the gradient."""

    @staticmethod
    def forward(ctx, x, weight, x_copies=None):
        y, saved = _forward(ctx, x, weight, x_copies)
        ctx.save_for_backward(*saved)
        return y

    @staticmethod
    def backward(ctx, dy):
        qt, st, wtq, wts, weight = ctx.saved_tensors
        dy2 = dy.reshape(-1, dy.shape[-1]).contiguous()
        if ctx.needs_input_grad[0] and wtq is None:
            wtq, wts = _k.quant_weight(weight)[2:]
        n = dy2.shape[1]
        if n > QUANT_WIDTH_MAX:  # an LM head's vocab: dy quantised in slices of columns
            return _backward_sliced(ctx, dy2, qt, st, wtq, wts) + (None,)
        return _grads(ctx, _k.quant(dy2, "both"), qt, st, wtq, wts) + (None,)


def _forward(ctx, x, weight, x_copies):
    """(y, the tensors the backward needs) of Fp8LinearFunction's forward;
    ctx gets the shapes."""
    if x_copies is None:
        x_copies = _k.quant(x.reshape(-1, x.shape[-1]), "both")
    q, s, qt, st = x_copies
    wq, ws, wtq, wts = _k.quant_weight(weight)
    y = _gemm.linear(q, s, wq, ws)
    ctx.shape = x.shape
    ctx.wdtype = weight.dtype
    # (handed over without its transposed copy: the weight, quantised
    # again in the backward)
    return y.view(*x.shape[:-1], weight.shape[0]), (qt, st, wtq, wts,
                                                     weight if wtq is None else None)


def _grads(ctx, dy_copies, qt, st, wtq, wts):
    """(dx, dw) from dy's quantised copies (q, s, qt, st): the dgrad and
    wgrad GEMMs of the inputs (x, weight first) that need a gradient."""
    dyq, dys, dytq, dyts = dy_copies
    dx = dw = None
    if ctx.needs_input_grad[0]:
        dx = _gemm.linear_dgrad(dyq, dys, wtq, wts).view(ctx.shape)
    if ctx.needs_input_grad[1]:
        dw = _gemm.linear_wgrad(dytq, dyts, qt, st, ctx.wdtype)
    return dx, dw


class Fp8LinearCrossEntropy(torch.autograd.Function):
    """The mean cross entropy (over the rows whose label is not
    ignore_index) of the logits y = x . weight^T [tokens, V] (bf16, an
    Fp8Linear's forward) with labels [tokens]: the FP8 LM head and its loss
    in one Function, so that the backward takes the logits gradient's FP8
    copies from lingen's cross_entropy_quant (from the logits and the
    forward's S and m) and the bf16 gradient [tokens, V] is never written
    nor quantised again; the copies are those fp8_quant gives of that bf16
    gradient, so the numbers are Fp8Linear + cross entropy's. V at most
    QUANT_WIDTH_MAX (wider: Fp8Linear then the cross entropy)."""

    @staticmethod
    def forward(ctx, x, weight, x_copies, labels, ignore_index):
        y, saved = _forward(ctx, x, weight, x_copies)
        logits = y.reshape(-1, weight.shape[0])
        loss, s, m = _k.cross_entropy_stats(logits, labels, ignore_index)
        count = (labels != ignore_index).sum().float()
        ctx.save_for_backward(*saved, logits, labels, s, m, count)
        ctx.ignore_index = ignore_index
        return loss.sum() / count

    @staticmethod
    def backward(ctx, dout):
        qt, st, wtq, wts, weight, logits, labels, s, m, count = ctx.saved_tensors
        if ctx.needs_input_grad[0] and wtq is None:
            wtq, wts = _k.quant_weight(weight)[2:]
        g = (dout.float() / count).reshape(1)  # the mean's gradient, every row's
        copies = _k.cross_entropy_quant(logits, labels, s, m, g, ctx.ignore_index)
        return _grads(ctx, copies, qt, st, wtq, wts) + (None, None, None)


def column_slices(n, width=None):
    """[(start, end)] of n output features in slices of at most `width`
    (default QUANT_WIDTH_MAX) columns, each but the last a multiple of 128
    (whole 1 x 128 blocks: a slice's copies are the whole dy's), as even as
    that allows."""
    width = QUANT_WIDTH_MAX if width is None else width
    blocks = -(-n // A.FP8_BLOCK)
    parts = -(-n // width)
    per = -(-blocks // parts) * A.FP8_BLOCK
    return [(s, min(s + per, n)) for s in range(0, n, per)]


def _backward_sliced(ctx, dy2, qt, st, wtq, wts):
    """The backward of an output wider than the quantiser's widest row
    (fp8_quant: QUANT_WIDTH_MAX columns): dy's columns in slices (column_slices),
    each copied out, quantised (its 1 x 128 and 128 x 1 blocks those of the
    whole dy: the slices start on a block), its dgrad summed into dx in
    fp32 and its wgrad written as dw's rows. Costs a copy of dy and the
    weight's transposed copy's columns, slice by slice."""
    need_dx, need_dw = ctx.needs_input_grad[:2]
    dx = dws = None
    if need_dw:
        dws = []
    for s, e in column_slices(dy2.shape[1]):
        dyq, dys, dytq, dyts = _k.quant(dy2[:, s:e].contiguous(),
                                        "both" if need_dx and need_dw
                                        else "rowwise" if need_dx else "columnwise")
        if need_dx:
            b0, b1 = s // A.FP8_BLOCK, -(-e // A.FP8_BLOCK)
            part = _gemm.linear_dgrad(dyq, dys, wtq[:, s:e].contiguous(),
                                      wts[:, b0:b1].contiguous()).float()
            dx = part if dx is None else dx.add_(part)
        if need_dw:
            dws.append(_gemm.linear_wgrad(dytq, dyts, qt, st, ctx.wdtype))
    if need_dx:
        dx = dx.to(torch.bfloat16).view(ctx.shape)
    return dx, (torch.cat(dws) if need_dw else None)


def fp8_linear(x, weight, x_copies=None):
    """x . weight^T in the blockwise FP8 recipe, differentiable."""
    return Fp8LinearFunction.apply(x, weight, x_copies)


class Fp8Linear(torch.nn.Module):
    """A bias-free torch.nn.Linear whose GEMMs are FP8 (fp8=True) or bf16
    torch (fp8=False); bf16 weight [out, in]. forward(x, x_copies=None)."""

    def __init__(self, in_features, out_features, fp8=True, device=None, dtype=torch.bfloat16):
        super().__init__()
        fn = "lingen.nn.Fp8Linear"
        fp8 = bool(fp8)
        A.width(fn, "in_features", in_features, "fp8" if fp8 else "bf16")
        A.integer(fn, "out_features", out_features)
        A.float_dtype(fn, "dtype", dtype)
        self.in_features, self.out_features, self.fp8 = in_features, out_features, fp8
        self.weight = torch.nn.Parameter(torch.empty(out_features, in_features, device=device,
                                                     dtype=dtype))
        torch.nn.init.normal_(self.weight, std=in_features ** -0.5)
        if fp8:  # lingen.optim.AdamW(fp8_weights=True) writes its FP8 copies
            _k.mark_fp8(self.weight)

    def forward(self, x, x_copies=None):
        A.last_dim("lingen.nn.Fp8Linear", x, self.in_features)
        if self.fp8:
            return fp8_linear(x, self.weight, x_copies)
        return F.linear(x, self.weight)

    def extra_repr(self):
        return f"{self.in_features}, {self.out_features}, fp8={self.fp8}"
