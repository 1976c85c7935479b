"""MoE dispatch and combine (K4, K5, K4b)."""
import torch

from ..ops import _multiple, _routing_arg, _routing_kind
from ._ops import _flat, _none_unused, _run, _used, declared

__all__ = ["moe_row_map", "MoePermuteFunction", "MoeUnpermuteFunction", "moe_permute",
           "moe_permute_fp8", "moe_unpermute", "moe_permute_quant"]


# ------------------------------------- MoE dispatch and combine (K4, K5)

def moe_row_map(routing, top_k, experts=None, multiple=None):
    """(row_id_map, counts, offsets, row_index, padded_counts) of a routing mask [tokens,
    experts] (bool / uint8) or top-k indices [tokens, top_k] (int32 / int64;
    experts= required), as lingen.moe_row_map; not differentiable. The
    padded total is offsets[-1] (on the device; .item() copies 4 bytes)."""
    kind, routing = _routing_kind(routing, "lingen.torch.moe_row_map")
    if experts is None:
        if kind != "mask":
            raise ValueError("lingen.torch.moe_row_map: top-k routing: pass experts=")
        experts = routing.shape[1]
    arrays = [None, None, None]  # the routing inputs, in declared order
    arrays[_routing_arg(kind).index] = routing
    return _run("moe_row_map_forward", *arrays, experts=int(experts), top_k=int(top_k),
                **_multiple(multiple), routing=kind)


class MoePermuteFunction(torch.autograd.Function):
    """MoE dispatch (docs/kernels.md K4): tokens x [tokens, hidden] bf16 and
    probs [tokens, experts] fp32 into expert-major padded rows [rows,
    hidden] and their probabilities [rows] (zeros on padding rows). Its
    backward is the combine of the gradients (dx: the fp32 sum of each
    token's row gradients; dprobs: each routed pair's row gradient)."""

    @staticmethod
    def forward(ctx, x, probs, row_id_map, offsets, counts, top_k, multiple=None):
        out, _, out_probs = _run("moe_permute_forward", x, None, probs, row_id_map, offsets, counts,
                                 top_k=int(top_k), **_multiple(multiple))
        ctx.save_for_backward(row_id_map)
        ctx.kw = dict(top_k=int(top_k), **_multiple(multiple))
        ctx.has_probs = probs is not None
        return out, out_probs

    @staticmethod
    def backward(ctx, dout, dout_probs):
        (row_id_map,) = ctx.saved_tensors
        dx, dprobs = _run("moe_permute_backward", dout.contiguous(),
                          dout_probs.contiguous() if ctx.has_probs else None, row_id_map, **ctx.kw)
        return dx, (dprobs if ctx.has_probs else None), None, None, None, None, None


class MoeUnpermuteFunction(torch.autograd.Function):
    """MoE combine (docs/kernels.md K5): rows g [rows, hidden] bf16 back into
    tokens, out[t] = the fp32 sum of t's rows in ascending expert order
    (weighted: each times probs[r]), and probs [rows] restored to [tokens,
    experts]. Its backward dispatches the gradient into the rows (weighted:
    times probs[r], and dprobs[r] = <dout[t], g[r]>)."""

    @staticmethod
    @declared("moe_unpermute")
    def forward(ctx, g, probs, row_id_map, offsets, counts, top_k, multiple=None, weighted=...):
        out, restore = _run("moe_unpermute_forward", g, probs, row_id_map, top_k=int(top_k),
                            **_multiple(multiple), weighted=bool(weighted))
        ctx.save_for_backward(g if weighted else None, probs if weighted else None, row_id_map,
                              offsets, counts)
        ctx.kw = dict(top_k=int(top_k), **_multiple(multiple), weighted=bool(weighted))
        ctx.has_probs = probs is not None
        return out, restore

    @staticmethod
    def backward(ctx, dout, drestore):
        g, probs, row_id_map, offsets, counts = ctx.saved_tensors
        dg, dprobs = _run("moe_unpermute_backward", dout.contiguous(),
                          drestore.contiguous() if ctx.has_probs else None, row_id_map, offsets,
                          counts, g, probs, **ctx.kw)
        return dg, (dprobs if ctx.has_probs else None), None, None, None, None, None, None


def moe_permute(x, row_id_map, offsets, counts, probs=None, top_k=None, multiple=None):
    """(rows [rows, hidden], rows_probs [rows]) of x [..., hidden] bf16 (leading
    dimensions flattened into tokens) and probs [tokens, experts] fp32 or
    None, differentiable; rows = tokens * top_k + experts * (multiple - 1),
    the rows past the padded total offsets[-1] zeros. As linghe's facade
    padded_permute, without its host-side expert counts."""
    if top_k is None:
        raise ValueError("lingen.torch.moe_permute: pass top_k= (it sizes the padded rows)")
    return MoePermuteFunction.apply(_flat(x), probs, row_id_map, offsets, counts, top_k, multiple)


@declared("moe_permute")
def moe_permute_fp8(xq, x_scale, row_id_map, offsets, counts, probs=None, top_k=None, multiple=None,
                    round_scale=...):
    """(rows e4m3, rows_scale [rows, hidden / 128] fp32, rows_probs or None):
    the permute of FP8 tokens xq [tokens, hidden] float8_e4m3fn with their
    scales [tokens, hidden / 128]; padding rows take the zero block's scale
    (2^-99 with round_scale, else 1e-30). Not differentiable."""
    if top_k is None:
        raise ValueError("lingen.torch.moe_permute_fp8: pass top_k=")
    out, scale, out_probs = _run("moe_permute_forward", xq, x_scale, probs, row_id_map, offsets,
                                 counts, top_k=int(top_k), **_multiple(multiple),
                                 round_scale=bool(round_scale))
    return out, scale, (out_probs if probs is not None else None)


@declared("moe_unpermute")
def moe_unpermute(rows, row_id_map, offsets, counts, probs=None, top_k=None, multiple=None,
                  weighted=...):
    """(out [tokens, hidden] bf16, restore_probs [tokens, experts] fp32) of
    rows [rows, hidden] bf16 and their probs [rows] fp32 (None: no
    restore; required with weighted=True), differentiable. As linghe's
    facade padded_unpermute, plus the weighting."""
    if top_k is None:
        raise ValueError("lingen.torch.moe_unpermute: pass top_k= (it sizes the padded rows)")
    if weighted and probs is None:
        raise ValueError("lingen.torch.moe_unpermute: weighted=True needs probs")
    return MoeUnpermuteFunction.apply(rows, probs, row_id_map, offsets, counts, top_k, multiple,
                                      weighted)


@declared("moe_permute_quant")
def moe_permute_quant(x, row_index, padded_counts, probs=None, top_k=None, multiple=None,
                      round_scale=..., output=...):
    """(q, s, qt, st, out_probs) of lingen.moe_permute_quant for x [..., hidden]
    bf16 (K4b: permute + pad + per-expert blockwise FP8 in one kernel); the
    copies output does not ask for, and out_probs without probs, None. Not
    differentiable (its backward is the unpermute of the gradient)."""
    if top_k is None:
        raise ValueError("lingen.torch.moe_permute_quant: pass top_k= (it sizes the padded rows)")
    res = _run("moe_permute_quant_forward", _flat(x), probs, row_index, padded_counts,
               top_k=int(top_k), **_multiple(multiple), quant_round_scale=bool(round_scale),
               quant_output=output)
    q, s, qt, st, op = _none_unused(res, _used("moe_permute_quant", "forward",
                                               (("quant.output", output),)))
    return q, s, qt, st, (op if probs is not None else None)
