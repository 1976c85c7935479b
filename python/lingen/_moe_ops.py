"""The MoE ops (docs/kernels.md K4, K5, K4b): the padded row map, dispatch and
combine, and the fused permute + FP8; re-exported by lingen.ops (see its
docstring for the arguments every op takes)."""
from . import _core, _families, _generic
from ._core import call
from ._core import quant_options as _quant


# ------------------------------------- MoE dispatch and combine (K4, K5)

def _routing_kind(routing, fn="lingen.moe_row_map"):
    """The moe_row_map routing of an array: "mask" (bool / uint8), else the
    top-k indices' "topk_i32" / "topk_i64"; a torch bool mask is read as
    uint8 (the same bytes)."""
    import sys
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(routing, torch.Tensor):
        if routing.dtype == torch.bool:
            return "mask", routing.view(torch.uint8)
        kinds = {torch.int32: "topk_i32", torch.int64: "topk_i64", torch.uint8: "mask"}
        if routing.dtype not in kinds:
            raise TypeError(f"{fn}: routing: found {routing.dtype}, expected bool / uint8 (a "
                            "mask) or int32 / int64 (top-k indices)")
        return kinds[routing.dtype], routing
    from ._arrays import view
    try:
        elems = view(routing).elems
    except TypeError as e:
        raise TypeError(f"{fn}: routing: {e}") from None
    if "int32" in elems:
        return "topk_i32", routing
    if "int64" in elems:
        return "topk_i64", routing
    return "mask", routing


_uses_cache = {}


def _uses(op, pass_, options):
    """arg_used of every argument of a pass for options ((path, value),
    ...): 0 left out, 1 used, 2 required. A family's uses() reads its
    options, never its shape keys, so this is evaluated at the smallest
    shape the family declares (cached)."""
    key = (op, pass_, options)
    used = _uses_cache.get(key)
    if used is None:
        fam = _families.families()[op]
        spec = {"op": op, "pass": pass_, "dtype": fam.dtypes[0]}
        for k in fam.keys:
            if k.shape:
                _core._set_path(spec, k.path, k.min)
        for path, value in options:
            _core._set_path(spec, path, value)
        s = _core.Spec(spec)
        used = _uses_cache.setdefault(key, tuple(s.arg_used(a.index)
                                                 for a in fam.passes[pass_].args))
    return used


def _routing_arg(kind):
    """The moe_row_map input that takes routing of this kind: the one input
    its declaration (uses()) keeps for routing = kind."""
    args = _families.families()["moe_row_map"].passes["forward"].args
    used = _uses("moe_row_map", "forward", (("routing", kind),))
    return next(a for a, u in zip(args, used) if a.is_input and u)


def _multiple(multiple):
    """The `multiple` key as given, or nothing: the family's declared default
    (moe_row_map's, which the dispatch and combine kernels must match)."""
    return {} if multiple is None else {"multiple": multiple}


def _moe(top_k, multiple, tile, **more):
    """The MoE families' keys; multiple None: the declared default."""
    return {"top_k": top_k, **_multiple(multiple), "tile": tile, **more}


def moe_row_map(routing, *, top_k, experts=None, multiple=None, row_index=True, tile=None,
                out=None, stream=None, context=None, alloc=None):
    """The padded MoE row map (docs/kernels.md K4): routing is a mask [tokens,
    experts] bool / uint8 (experts from its shape), or top-k indices [tokens,
    top_k] int32 / int64 (experts= required; an index outside [0, experts)
    is a dropped slot, a repeat counts once) -> (row_id_map [tokens, experts]
    int32 (padded row, -1 where not routed), counts [experts] int32,
    offsets [experts + 1] int32 (padded, offsets[experts] = P, the padded
    total), row_index [rows] int32 (source token of each row, -1 for
    padding and rows >= P; None with row_index=False), padded_counts
    [experts] int32 (counts rounded up to the multiple: each expert's rows,
    the segments of moe_permute_quant)). rows = tokens *
    top_k + experts * (multiple - 1) bounds P: the dispatch buffers have
    that many rows, since P stays on the device (offsets[-1].item() reads
    it, one 4-byte copy). As linghe's triton_make_row_id_map(routing_map,
    multiple_of) and triton_make_row_id_map_and_index, in one call."""
    fn = "lingen.moe_row_map"
    kind, arr = _routing_kind(routing, fn)
    row_index = _core.check_flag(fn, "row_index", row_index)
    arg = _routing_arg(kind).name
    opts = _moe(top_k, multiple, tile, routing=kind)
    if experts is not None:
        opts["experts"] = experts
    elif kind != "mask":
        raise ValueError("lingen.moe_row_map: top-k routing: pass experts=")
    r = call(fn, "moe_row_map", "forward", {arg: arr}, opts, names={arg: "routing"}, out=out,
             skip=() if row_index else ("row_index",), stream=stream, context=context, alloc=alloc)
    return r["row_id_map"], r["counts"], r["offsets"], r["row_index"], r["padded_counts"]


def moe_permute(x, row_id_map, offsets, counts, probs=None, x_scale=None, *, top_k, multiple=None,
                round_scale=None, tile=None, out=None, stream=None, context=None, alloc=None):
    """MoE permute into expert-major padded rows (docs/kernels.md K4): x [tokens,
    hidden] bf16, or e4m3 with x_scale [tokens, hidden / 128] fp32; the row
    map of moe_row_map; probs [tokens, experts] fp32 or None -> (out [rows,
    hidden] in x's type, out_scale [rows, hidden / 128] fp32 (e4m3, else
    None), out_probs [rows] fp32 (None without probs)). Row
    row_id_map[t, e] is x[t] with probs[t, e]; every other row (padding,
    rows >= P) zeros with probability 0 and the zero block's scale (2^-99
    with round_scale, else 1e-30). As linghe's
    triton_permute_with_mask_map(..., contiguous=False) for any hidden size
    and expert count."""
    r = call("lingen.moe_permute", "moe_permute", "forward",
             {"x": x, "x_scale": x_scale, "probs": probs, "row_id_map": row_id_map,
              "offsets": offsets, "counts": counts},
             _moe(top_k, multiple, tile, round_scale=round_scale), out=out,
             skip=() if probs is not None else ("out_probs",), stream=stream, context=context,
             alloc=alloc)
    return _generic.outputs("moe_permute", "forward", r)


def moe_permute_backward(dout, row_id_map, dout_probs=None, *, top_k, multiple=None, tile=None,
                         out=None, stream=None, context=None, alloc=None):
    """The backward of moe_permute: dout [rows, hidden] bf16, dout_probs
    [rows] fp32 or None -> (dx [tokens, hidden] bf16, the fp32 sum of each
    token's rows in ascending expert order; dprobs [tokens, experts] fp32,
    dout_probs at each routed pair, else 0; None without dout_probs)."""
    r = call("lingen.moe_permute_backward", "moe_permute", "backward",
             {"dout": dout, "dout_probs": dout_probs, "row_id_map": row_id_map},
             _moe(top_k, multiple, tile), out=out,
             skip=() if dout_probs is not None else ("dprobs",), stream=stream, context=context,
             alloc=alloc)
    return _generic.outputs("moe_permute", "backward", r)


def moe_unpermute(g, row_id_map, probs=None, *, top_k, multiple=None, weighted=None, tile=None,
                  out=None, stream=None, context=None, alloc=None):
    """MoE unpermute (combine, docs/kernels.md K5): g [rows, hidden] bf16 (any
    hidden), probs [rows] fp32 (required with weighted=True) -> (out
    [tokens, hidden] bf16 = fp32 sum in ascending expert order of each
    token's rows, each times probs[r] when weighted; restore_probs [tokens,
    experts] fp32, probs[r] where routed else 0, None without probs).
    Padding rows are never read. As linghe's
    triton_unpermute_with_mask_map(grad, row_id_map, probs), which has no
    weighting."""
    r = call("lingen.moe_unpermute", "moe_unpermute", "forward",
             {"g": g, "probs": probs, "row_id_map": row_id_map},
             _moe(top_k, multiple, tile, weighted=weighted), out=out,
             skip=() if probs is not None else ("restore_probs",), stream=stream, context=context,
             alloc=alloc)
    return _generic.outputs("moe_unpermute", "forward", r)


def moe_unpermute_backward(dout, row_id_map, offsets, counts, drestore=None, g=None, probs=None, *,
                           top_k, multiple=None, weighted=None, tile=None, out=None, stream=None,
                           context=None, alloc=None):
    """The backward of moe_unpermute: dout [tokens, hidden] bf16, drestore
    [tokens, experts] fp32 or None; weighted: g and probs of the forward ->
    (dg [rows, hidden] bf16: dout[t] in each of t's rows (weighted: times
    probs[r], rounded once), zeros elsewhere; dprobs [rows] fp32:
    drestore[t, e] (weighted: plus the fp32 dot product of dout[t] and
    g[r]); None when nothing asks for it)."""
    weighted = (_core.declared("moe_unpermute", "weighted") if weighted is None else
                _core.check_flag("lingen.moe_unpermute_backward", "weighted", weighted))
    want = drestore is not None or (weighted and g is not None)
    r = call("lingen.moe_unpermute_backward", "moe_unpermute", "backward",
             {"dout": dout, "drestore": drestore, "row_id_map": row_id_map, "offsets": offsets,
              "counts": counts, "g": g if weighted else None, "probs": probs if weighted else None},
             _moe(top_k, multiple, tile, weighted=weighted), out=out,
             skip=() if want else ("dprobs",), stream=stream, context=context, alloc=alloc)
    return _generic.outputs("moe_unpermute", "backward", r)


def moe_permute_quant(x, row_index, padded_counts, probs=None, *, top_k, multiple=None,
                      round_scale=None, output=None, tile=None, out=None, stream=None,
                      context=None, alloc=None):
    """MoE permute + pad + per-expert blockwise FP8 quantisation in one
    kernel (docs/kernels.md K4b): x [tokens, hidden] bf16 (hidden a multiple of
    128), moe_row_map's row_index [rows] and padded_counts [experts], probs
    [tokens, experts] fp32 or None -> (q [rows, hidden] e4m3, s (a
    [hidden/128, P_e] block an expert), qt (a [hidden, P_e] block an
    expert), st [cdiv(rows, 128) + experts, hidden] (cdiv(P_e, 128) rows an
    expert), out_probs [rows] fp32 or None): each expert's padded segment
    (padding rows zeros) quantised as its own tensor (docs/kernels.md 1.3); the
    copies output= does not ask for are None; rows past the padded total
    are not written. As linghe's triton_batch_block_pad_permute_with_indices."""
    r = call("lingen.moe_permute_quant", "moe_permute_quant", "forward",
             {"x": x, "probs": probs, "row_index": row_index, "padded_counts": padded_counts},
             _quant(round_scale, output, **_moe(top_k, multiple, tile)),
             out=out, skip=() if probs is not None else ("out_probs",), stream=stream,
             context=context, alloc=alloc)
    return _generic.outputs("moe_permute_quant", "forward", r)
