"""Softmax cross entropy (K9): a drop-in for F.cross_entropy, fused and
vocab-parallel forms."""
import torch

from .. import ops
from ._ops import declared

__all__ = ["CrossEntropyFunction", "cross_entropy", "VocabParallelCrossEntropyFunction",
           "vocab_parallel_cross_entropy", "cross_entropy_forward", "cross_entropy_backward"]


# ------------------------------------------------ softmax cross entropy (K9)

def _ce_count(labels, ignore_index):
    """The rows that count for the mean (fp32, on the device: no sync)."""
    return (labels != ignore_index).sum().float()


def _ce_reduce(loss, count, reduction, dtype):
    """The per-row losses reduced as F.cross_entropy's reduction asks
    (count: the rows not ignored, for "mean")."""
    if reduction == "none":
        return loss.to(dtype)
    total = loss.sum()
    return (total / count if count is not None else total).to(dtype)


def _ce_dloss(dout, count, reduction, rows):
    """The per-row output gradient [rows] fp32 of a reduced loss's dout."""
    if reduction == "none":
        return dout.float().contiguous()
    g = dout.float() / count if reduction == "mean" else dout.float()
    return g.reshape(1).expand(rows).contiguous()


def _ce_dense(t, align):
    """t as the kernels take it: contiguous and `align`-byte aligned (a
    fresh copy of a strided view, or of a slice starting off the boundary,
    as F.cross_entropy takes any tensor)."""
    if t.is_contiguous() and t.data_ptr() % align == 0:
        return t
    return t.clone(memory_format=torch.contiguous_format)


class CrossEntropyFunction(torch.autograd.Function):
    """F.cross_entropy(logits, labels, ignore_index=, label_smoothing=,
    reduction=) for 2-D logits [tokens, vocab] (bf16 or fp32; labels int64
    or int32) with lingen's kernels (docs/kernels.md K9): loss in fp64-accurate
    fp32, returned in logits' dtype as torch does. The mean is over the rows
    whose label is not ignore_index (nan when there are none, as torch).
    Logits that are strided, or that start off a 16-byte boundary (a slice
    of rows at an odd vocab), are copied first, as are such labels.

    fused=True (reduction "mean" or "sum"): the forward also writes the
    gradient for the output gradient 1 (the usual loss.backward()), saving
    the backward's read of the logits; the backward scales it when the
    output gradient is not 1 (a check that synchronises the stream; while a
    CUDA graph is being captured it always scales instead).
    inplace=True writes the gradient over the logits (in the backward, or
    in the fused forward: the logits are then gone after the forward; over
    the copy when they had to be copied)."""

    @staticmethod
    @declared("cross_entropy")
    def forward(ctx, logits, labels, ignore_index=..., label_smoothing=..., reduction="mean",
                fused=False, inplace=...):
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"reduction: found {reduction!r}, expected 'mean', 'sum' or 'none'")
        if fused and reduction == "none":
            raise ValueError("fused=True needs a uniform output gradient: reduction 'mean' or 'sum'")
        logits, labels = _ce_dense(logits, 16), _ce_dense(labels, 4)
        kw = dict(ignore_index=int(ignore_index), label_smoothing=float(label_smoothing))
        count = _ce_count(labels, ignore_index) if reduction == "mean" else None
        if fused:
            g = (1.0 / count if count is not None else torch.ones((), device=logits.device)).reshape(1)
            loss, _, _, grad = ops.cross_entropy_fused(logits, labels, g.float().contiguous(),
                                                       inplace=inplace, skip=("sum_exp", "max_logit"),
                                                       **kw)
            ctx.save_for_backward(grad)
        else:
            loss, s, m = ops.cross_entropy_forward(logits, labels, **kw)
            ctx.save_for_backward(logits, labels, s, m, count if count is not None else s[:0])
        ctx.kw, ctx.reduction, ctx.fused, ctx.inplace = kw, reduction, fused, inplace
        return _ce_reduce(loss, count, reduction, logits.dtype)

    @staticmethod
    def backward(ctx, dout):
        if ctx.fused:
            (grad,) = ctx.saved_tensors
            if torch.cuda.is_current_stream_capturing() or \
                    not bool(torch.equal(dout.float(), torch.ones_like(dout, dtype=torch.float32))):
                grad = grad * dout.to(grad.dtype)
            return grad, None, None, None, None, None, None
        logits, labels, s, m, count = ctx.saved_tensors
        dloss = _ce_dloss(dout, count, ctx.reduction, logits.shape[0])
        grad = ops.cross_entropy_backward(logits, labels, s, m, dloss, inplace=ctx.inplace,
                                          **ctx.kw)
        return grad, None, None, None, None, None, None


@declared("cross_entropy")
def cross_entropy(logits, labels, weight=None, size_average=None, ignore_index=..., reduce=None,
                  reduction="mean", label_smoothing=..., *, fused=False, inplace=...):
    """A drop-in for torch.nn.functional.cross_entropy on 2-D logits
    [tokens, vocab] (bf16 or fp32) and labels [tokens] (int64 or int32),
    differentiable, with F.cross_entropy's parameters in its order (the
    deprecated size_average and reduce as torch reads them; class weights
    are not supported: weight must be None); see CrossEntropyFunction for
    fused and inplace."""
    if weight is not None:
        raise ValueError("lingen.torch.cross_entropy: weight: class weights are not supported "
                         "(expected None)")
    if size_average is not None or reduce is not None:
        reduction = torch.nn._reduction.legacy_get_string(size_average, reduce)
    return CrossEntropyFunction.apply(logits, labels, ignore_index, label_smoothing, reduction,
                                      fused, inplace)


def _gather_stats(stats, group, all_gather):
    """Every rank's stats [tokens, 6] as [shards, tokens, 6], in rank order:
    all_gather(stats) when given, else torch.distributed's
    all_gather_into_tensor over the group."""
    if all_gather is not None:
        return all_gather(stats)
    import torch.distributed as dist
    out = stats.new_empty((dist.get_world_size(group),) + tuple(stats.shape))
    dist.all_gather_into_tensor(out, stats, group=group)
    return out


class VocabParallelCrossEntropyFunction(torch.autograd.Function):
    """Cross entropy with the vocabulary split over tensor-parallel ranks
    (docs/kernels.md K9, vocab parallel): this rank holds the columns
    [vocab_start, vocab_start + logits.shape[1]) of `classes`. Forward: the
    shard's statistics, the all-gather (the group's, or all_gather(stats)),
    the merge; the loss is the whole rows' on every rank, reduced as
    CrossEntropyFunction. Backward: this shard's gradient from the merged S
    and m, with no communication. Everything the backward reads is saved by
    this forward (linghe's facade reads a ctx.tp_group its forward never
    sets)."""

    @staticmethod
    @declared("cross_entropy")
    def forward(ctx, logits, labels, vocab_start, classes, group=None, all_gather=None,
                ignore_index=..., label_smoothing=..., reduction="mean", inplace=...):
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"reduction: found {reduction!r}, expected 'mean', 'sum' or 'none'")
        logits, labels = _ce_dense(logits, 16), _ce_dense(labels, 4)
        kw = dict(ignore_index=int(ignore_index), label_smoothing=float(label_smoothing))
        stats = ops.cross_entropy_shard_stats(logits, labels, int(vocab_start), int(classes), **kw)
        loss, s, m = ops.cross_entropy_merge(_gather_stats(stats, group, all_gather), labels,
                                             int(classes), **kw)
        count = _ce_count(labels, ignore_index) if reduction == "mean" else None
        ctx.save_for_backward(logits, labels, s, m, count if count is not None else s[:0])
        ctx.kw, ctx.reduction, ctx.inplace = kw, reduction, inplace
        ctx.vocab_start, ctx.classes = int(vocab_start), int(classes)
        return _ce_reduce(loss, count, reduction, logits.dtype)

    @staticmethod
    def backward(ctx, dout):
        logits, labels, s, m, count = ctx.saved_tensors
        dloss = _ce_dloss(dout, count, ctx.reduction, logits.shape[0])
        grad = ops.cross_entropy_backward(logits, labels, s, m, dloss, inplace=ctx.inplace,
                                          vocab_start=ctx.vocab_start, classes=ctx.classes,
                                          **ctx.kw)
        return grad, None, None, None, None, None, None, None, None, None


@declared("cross_entropy")
def vocab_parallel_cross_entropy(logits, labels, vocab_start, classes, group=None, *,
                                 ignore_index=..., reduction="mean", label_smoothing=...,
                                 inplace=..., all_gather=None):
    """F.cross_entropy over logits split by columns across the ranks of a
    tensor-parallel group: logits [tokens, V_rank] are the columns
    [vocab_start, vocab_start + V_rank) of `classes`, labels [tokens] the
    global columns. The shards' statistics are all-gathered over `group`
    (torch.distributed), or by all_gather(stats [tokens, 6]) ->
    [shards, tokens, 6] in rank order when given. As linghe's
    softmax_cross_entropy(..., tp_group) facade; see
    VocabParallelCrossEntropyFunction."""
    return VocabParallelCrossEntropyFunction.apply(logits, labels, vocab_start, classes, group,
                                                   all_gather, ignore_index, label_smoothing,
                                                   reduction, inplace)


@declared("cross_entropy")
def cross_entropy_forward(logits, labels, ignore_index=..., label_smoothing=...):
    """(loss, sum_exp, max_logit) [tokens] fp32 without autograd, as linghe's
    triton_softmax_cross_entropy_forward."""
    return ops.cross_entropy_forward(logits, labels, ignore_index=ignore_index,
                                     label_smoothing=label_smoothing)


@declared("cross_entropy")
def cross_entropy_backward(logits, labels, sum_exp, max_logit, output_grad, ignore_index=...,
                           inplace=..., label_smoothing=...):
    """The logits' gradient, as linghe's triton_softmax_cross_entropy_backward
    (output_grad [tokens] fp32)."""
    return ops.cross_entropy_backward(logits, labels, sum_exp, max_logit,
                                      output_grad.float().contiguous(), ignore_index=ignore_index,
                                      label_smoothing=label_smoothing, inplace=inplace)


