"""The ops, one thin wrapper per family pass: argument order, defaults, and
the return order of the linghe function each replaces. Shapes, element
types and the spec's keys are the family's declaration (lingen.families());
every check and allocation happens in lingen._core.call.

Every op takes, after its own arguments:
  out=     {name: array}: outputs to write in place instead of allocating;
  stream=  the CUDA stream (int handle, torch/CuPy stream); default: torch's
           current stream for torch tensors, CuPy's for CuPy arrays, else
           the legacy default stream;
  context= a lingen.Context (default: lingen.default_context());
  alloc=   alloc(shape, elem) -> array, for outputs of non-torch arrays;
  tile=    a tile for the family (default: the tuning file, else the
           heuristic; see `lingen help OP`).
Inputs are C-contiguous CUDA arrays: x is [tokens, hidden] (2-D; flatten
leading dimensions first -- lingen.torch does it for you).

A spec option whose default is None (eps, round_scale, output, ...) takes
the family's declared default (lingen.families()[op].key(path).default,
listed by `lingen help OP`): no default is written here.
"""
from . import _core, _families, _generic
from ._core import call
from ._core import quant_options as _quant
from ._gemm_ops import (fp8_gemm, fp8_gemm_dgrad, fp8_gemm_wgrad, fp8_grouped_gemm,
                        fp8_grouped_gemm_dgrad, fp8_grouped_gemm_wgrad)  # noqa: F401
from ._moe_ops import (_multiple, _routing_arg, _routing_kind, _uses, moe_permute,  # noqa: F401
                       moe_permute_backward, moe_permute_quant, moe_row_map, moe_unpermute,
                       moe_unpermute_backward)


def rmsnorm_quant(x, w, eps=None, *, round_scale=None, output=None, tile=None, out=None,
                  stream=None, context=None, alloc=None):
    """RMSNorm + blockwise FP8 quantisation (docs/kernels.md K1).

    x [tokens, hidden] bf16, w [hidden] bf16 -> (q, s, rms, qt, st):
    q [tokens, hidden] e4m3 and s [hidden/128, tokens] fp32 (rowwise 1x128
    blocks), rms [tokens] fp32 (reciprocal RMS), qt [hidden, round_up(tokens,
    128)] e4m3 (rows 128-byte aligned for fp8_gemm_wgrad's TMA, zeros past the
    tokens) and st [cdiv(tokens, 128), hidden] fp32 (columnwise 128x1 blocks,
    transposed). output: "rowwise", "columnwise" or "both"; the copies not
    asked for are None. As linghe's triton_rms_norm_and_block_quant_forward
    (whose round_scale defaults to False, and whose output_mode 0/1/2 is
    "rowwise"/"columnwise"/"both")."""
    r = call("lingen.rmsnorm_quant", "rmsnorm_quant", "forward", {"x": x, "w": w},
             _quant(round_scale, output, eps=eps, tile=tile),
             out=out, stream=stream, context=context, alloc=alloc)
    return _generic.outputs("rmsnorm_quant", "forward", r)


def rmsnorm(x, w, eps=None, *, rms=True, tile=None, out=None, stream=None, context=None,
            alloc=None):
    """RMSNorm forward: x [tokens, hidden] bf16, w [hidden] bf16 ->
    (y [tokens, hidden] bf16, rms [tokens] fp32, the reciprocal RMS; None
    with rms=False). As linghe's triton_rms_norm_forward."""
    r = call("lingen.rmsnorm", "rmsnorm", "forward", {"x": x, "w": w},
             {"eps": eps, "tile": tile}, out=out,
             skip=() if _core.check_flag("lingen.rmsnorm", "rms", rms) else ("rms",),
             stream=stream, context=context, alloc=alloc)
    return _generic.outputs("rmsnorm", "forward", r)


def rmsnorm_backward(dy, x, w, eps=None, rms=None, *, tile=None, out=None, stream=None,
                     context=None, alloc=None):
    """RMSNorm backward: dy, x [tokens, hidden] bf16, w [hidden] bf16, rms
    [tokens] fp32 from the forward (None: recomputed) -> (dx [tokens,
    hidden] bf16, dw [hidden] fp32, deterministic). As linghe's
    triton_rms_norm_backward (same argument order)."""
    r = call("lingen.rmsnorm_backward", "rmsnorm", "backward",
             {"dy": dy, "x": x, "w": w, "rms": rms}, {"eps": eps, "tile": tile},
             out=out, stream=stream, context=context, alloc=alloc)
    return _generic.outputs("rmsnorm", "backward", r)


def fp8_quant_weight(w, *, round_scale=None, transposed=None, tile=None, out=None, stream=None,
                     context=None, alloc=None):
    """FP8 quantisation of a weight in 128 x 128 tiles (docs/kernels.md 1.3): w
    [rows, hidden] bf16 -> (q [rows, hidden] e4m3, s [cdiv(rows, 128),
    hidden/128] fp32, one dequantisation scale a tile). As linghe's
    triton_block_quant. transposed=True also returns the transposed copy
    the FP8 GEMM's dgrad reads: (q, s, qt [hidden, rows], st [hidden/128,
    cdiv(rows, 128)])."""
    fn = "lingen.fp8_quant_weight"
    r = call(fn, "fp8_quant_weight", "forward", {"w": w},
             {"quant.round_scale": round_scale, "tile": tile,
              "transposed": None if transposed is None else _core.check_flag(fn, "transposed",
                                                                             transposed)},
             out=out, stream=stream, context=context, alloc=alloc)
    return (r["q"], r["s"], r["qt"], r["st"]) if transposed else (r["q"], r["s"])


# ------------------------------------------------- q/k norm + RoPE (K2)

def _rope(fn, eps, rotary_fraction, interleaved, transposed, silu, tile, cu_seqlens, mscale,
          cp_size, cp_rank, **heads):
    """Options of qk_norm_rope (heads: q_heads, kv_heads where the arrays
    cannot tell them: qkv's last dimension is (H + 2h) D)."""
    order = layout = None  # None: the declared qkv_order and head_layout
    if cu_seqlens is not None:
        order = "seq_batch"
    elif transposed is not None:
        order = "seq_batch" if _core.check_flag(fn, "transposed", transposed) else "batch_seq"
    if interleaved is not None:
        layout = "interleaved" if _core.check_flag(fn, "interleaved", interleaved) else "plain"
    return {"eps": eps, "rotary_fraction": rotary_fraction, "qkv_order": order,
            "head_layout": layout, "silu": silu,
            "varlen": cu_seqlens is not None, "mscale": mscale, "cp_size": cp_size,
            "cp_rank": cp_rank, "tile": tile, **heads}


def _reshape(a, *shape):
    """a viewed as shape (packed sequences: [T, .] <-> [T, 1, .])."""
    if a is None or not hasattr(a, "reshape"):
        return a
    return a.reshape(*shape)


def qk_norm_rope(qkv, q_weight, k_weight, freqs, eps=None, *, q_heads, kv_heads,
                 rotary_fraction=None, interleaved=None, transposed=None, silu=None,
                 cu_seqlens=None, mscale=None, cp_size=None, cp_rank=None, tile=None, out=None,
                 stream=None, context=None, alloc=None):
    """Split + q/k RMSNorm + rotate-half RoPE + transpose (docs/kernels.md K2).

    qkv [S, B, (H + 2h) D] bf16 (transposed, as declared: Megatron; else [B, S, .]),
    heads per kv group [H/h q, k, v] (interleaved, as declared) or q | k | v;
    q_weight, k_weight [D] bf16; freqs [S * cp_size, R] fp32 in the cat(f, f)
    layout with R = rotary_fraction * D (only [:, :R/2] is read) -> (q [B,
    S, H, D], k [B, S, h, D], v [B, S, h, D]) bf16. silu: SiLU on qkv first;
    mscale multiplies cos and sin.

    Packed sequences (K2b): cu_seqlens [n + 1] int32 on the device, the
    cumulative global lengths of the n sequences from 0; qkv [T, (H + 2h) D]
    -> q [T, H, D], k, v [T, h, D]; each sequence's positions start at 0.
    With context parallelism (cp_size ranks), this rank holds T = cu[n] /
    cp_size tokens, two zig-zag halves of each sequence (halves cp_rank and
    2 cp_size - 1 - cp_rank), and freqs covers T * cp_size positions.

    As linghe's triton_qk_norm_and_half_rope_forward and
    triton_varlen_qk_norm_and_half_rope_forward (H=q_heads, h=kv_heads; its
    rotary fraction is 0.5; one cu_seqlens for q and k, its reuse=True)."""
    varlen = cu_seqlens is not None
    if varlen and out:
        raise ValueError("lingen.qk_norm_rope: out= is not supported with cu_seqlens")
    shape = _shape(qkv)
    if varlen and shape is not None and len(shape) == 2:
        qkv = _reshape(qkv, shape[0], 1, shape[1])
    r = call("lingen.qk_norm_rope", "qk_norm_rope", "forward",
             {"qkv": qkv, "q_weight": q_weight, "k_weight": k_weight, "freqs": freqs,
              "cu_seqlens": cu_seqlens},
             _rope("lingen.qk_norm_rope", eps, rotary_fraction, interleaved, transposed, silu,
                   tile, cu_seqlens, mscale, cp_size, cp_rank, q_heads=q_heads, kv_heads=kv_heads),
             out=out, stream=stream, context=context, alloc=alloc)
    q, k, v = r["q"], r["k"], r["v"]
    if varlen:
        q, k, v = (_reshape(t, *_shape(t)[1:]) for t in (q, k, v))
    return q, k, v


def qk_norm_rope_backward(gq, gk, gv, qkv, q_weight, k_weight, freqs, eps=None, *,
                          rotary_fraction=None, interleaved=None, transposed=None, silu=None,
                          cu_seqlens=None, mscale=None, cp_size=None, cp_rank=None, tile=None,
                          out=None, stream=None, context=None, alloc=None):
    """The backward of qk_norm_rope: gq [B, S, H, D], gk, gv [B, S, h, D]
    bf16 (packed: [T, heads, D]), the forward's qkv, weights, freqs and
    cu_seqlens -> (dqkv in qkv's layout bf16, dq_weight [D] fp32, dk_weight
    [D] fp32; deterministic). As linghe's triton_qk_norm_and_half_rope_backward
    and its varlen form (same argument and return order)."""
    varlen = cu_seqlens is not None
    if varlen and out:
        raise ValueError("lingen.qk_norm_rope_backward: out= is not supported with cu_seqlens")
    shape = _shape(qkv)
    if varlen:
        if shape is not None and len(shape) == 2:
            qkv = _reshape(qkv, shape[0], 1, shape[1])
        gq, gk, gv = (_reshape(t, 1, *_shape(t)) if _shape(t) is not None and len(_shape(t)) == 3
                      else t for t in (gq, gk, gv))
    r = call("lingen.qk_norm_rope_backward", "qk_norm_rope", "backward",
             {"gq": gq, "gk": gk, "gv": gv, "qkv": qkv, "q_weight": q_weight,
              "k_weight": k_weight, "freqs": freqs, "cu_seqlens": cu_seqlens},
             _rope("lingen.qk_norm_rope_backward", eps, rotary_fraction, interleaved, transposed,
                   silu, tile, cu_seqlens, mscale, cp_size, cp_rank),
             out=out, stream=stream, context=context, alloc=alloc)
    dqkv = r["dqkv"]
    if varlen and shape is not None and len(shape) == 2:
        dqkv = _reshape(dqkv, *shape)
    return dqkv, r["dq_weight"], r["dk_weight"]


# ------------------------------------- group RMSNorm x sigmoid gate (K8)

def _shape(a):
    shape = getattr(a, "shape", None)
    if shape is None:
        shape = getattr(a, "__cuda_array_interface__", {}).get("shape")
    return shape


def _gate_options(x, w, eps, groups, transpose, shared_weight, tile):
    """The weight is shared by the groups when its length is not dim (as
    linghe decides it), unless shared_weight says."""
    if shared_weight is None:
        # (no array, or of another rank: not shared, and the call names the bad one)
        xs, ws = _shape(x) or (), _shape(w) or ()
        shared_weight = len(ws) == 1 and len(xs) >= 1 and ws[0] != xs[-1]
    return {"eps": eps, "groups": groups, "transpose": transpose,
            "shared_weight": shared_weight, "tile": tile}


def group_rmsnorm_gate(x, gate, w, eps=None, *, groups=None, transpose=None, shared_weight=None,
                       tile=None, out=None, stream=None, context=None, alloc=None):
    """Group RMSNorm x sigmoid gate forward (docs/kernels.md K8): x [batch, seq,
    dim] bf16 (flatten heads x head_dim into dim first), gate [seq, batch,
    dim] with transpose=True ([batch, seq, dim] otherwise), w [dim] bf16, or
    [dim / groups] shared by every group -> y in gate's layout:
    y = x * rsqrt(mean_group(x^2) + eps) * w * sigmoid(gate), each row of
    dim split into `groups` contiguous groups; shared_weight=None tells
    the shared weight by its length. As linghe's
    triton_group_rms_norm_gate_forward(x, gate, weight, eps, group_size,
    transpose) (group_size there is this groups); any batch and seq."""
    r = call("lingen.group_rmsnorm_gate", "group_rmsnorm_gate", "forward",
             {"x": x, "gate": gate, "w": w},
             _gate_options(x, w, eps, groups, transpose, shared_weight, tile),
             out=out, stream=stream, context=context, alloc=alloc)
    return _generic.outputs("group_rmsnorm_gate", "forward", r)


def group_rmsnorm_gate_backward(dy, x, gate, w, eps=None, *, groups=None, transpose=None,
                                shared_weight=None, tile=None, out=None, stream=None, context=None,
                                alloc=None):
    """Group RMSNorm x sigmoid gate backward: dy in gate's layout, x, gate,
    w as in group_rmsnorm_gate -> (dx [batch, seq, dim] bf16, dgate in
    gate's layout bf16, dw fp32 in w's shape, deterministic). As linghe's
    triton_group_rms_norm_gate_backward (same argument and return order)."""
    r = call("lingen.group_rmsnorm_gate_backward", "group_rmsnorm_gate", "backward",
             {"dy": dy, "x": x, "gate": gate, "w": w},
             _gate_options(x, w, eps, groups, transpose, shared_weight, tile),
             out=out, stream=stream, context=context, alloc=alloc)
    return _generic.outputs("group_rmsnorm_gate", "backward", r)


# ------------------------------------------------ SwiGLU + FP8 (K7, K6)

def swiglu_quant_backward(g, x, *, round_scale=None, output=None, dx_bf16=None, tile=None,
                          out=None, stream=None, context=None, alloc=None):
    """The backward of swiglu_quant: g [tokens, n] bf16 (dL/dy) and the
    forward's x [tokens, 2n] -> dx = [dx_gate | dx_up] quantised with K =
    2n: (dxq [tokens, 2n], dxs [2n/128, tokens], dxqt [2n, round_up(tokens,
    128)] (zeros past the tokens), dxst [cdiv(tokens, 128), 2n]), as linghe's triton_silu_and_block_quant_backward
    (any token count here, not only multiples of 128). With dx_bf16=True a
    fifth value, dx [tokens, 2n] in bf16."""
    r = call("lingen.swiglu_quant_backward", "swiglu_quant", "backward", {"g": g, "x": x},
             _quant(round_scale, output, dx_bf16=dx_bf16, tile=tile),
             out=out, stream=stream, context=context, alloc=alloc)
    res = (r["dxq"], r["dxs"], r["dxqt"], r["dxst"])
    return res + (r["dx"],) if r["dx"] is not None else res


def batch_swiglu_quant_backward(g, x, prob, counts, *, round_scale=None, dx_bf16=None, tile=None,
                                out=None, stream=None, context=None, alloc=None):
    """The backward of batch_swiglu_quant: g [tokens, n] bf16, the forward's
    x, prob and counts -> (dxq [tokens, 2n], dxs, dprob [tokens, 1] fp32,
    dxqt, dxst): dx quantised per expert with K = 2n (both copies, laid out
    as the forward's), dprob = sum_j silu(gate) * up * g (fp32,
    deterministic). As linghe's
    triton_batch_weighted_silu_and_block_quant_backward (same return
    order). With dx_bf16=True a sixth value, dx [tokens, 2n] in bf16."""
    r = call("lingen.batch_swiglu_quant_backward", "batch_swiglu_quant", "backward",
             {"g": g, "x": x, "prob": prob, "counts": counts},
             _quant(round_scale, "both", dx_bf16=dx_bf16, tile=tile),
             out=out, stream=stream, context=context, alloc=alloc)
    res = (r["dxq"], r["dxs"], r["dprob"], r["dxqt"], r["dxst"])
    return res + (r["dx"],) if r["dx"] is not None else res


# ------------------------------------------------ softmax cross entropy (K9)

def _ce_options(ignore_index, label_smoothing, tile, **more):
    return {"ignore_index": ignore_index, "label_smoothing": label_smoothing, "tile": tile,
            **more}


def cross_entropy_forward(logits, labels, *, ignore_index=None, label_smoothing=None, tile=None,
                          out=None, skip=(), stream=None, context=None, alloc=None):
    """Softmax cross entropy forward (docs/kernels.md K9): logits [tokens, vocab]
    bf16 or fp32 (any vocab), labels [tokens] int64 or int32 -> (loss,
    sum_exp, max_logit) [tokens] fp32: loss = (1 - e)(lse - x_y) + e (lse -
    mean x) (torch's label smoothing e), S = sum exp(x - m), m = max x;
    rows whose label is ignore_index give 0, 0, 0. One streaming pass with
    an online max, fp64 sums. As linghe's
    triton_softmax_cross_entropy_forward (skip=("sum_exp", "max_logit")
    leaves those unwritten)."""
    r = call("lingen.cross_entropy_forward", "cross_entropy", "forward",
             {"logits": logits, "labels": labels},
             _ce_options(ignore_index, label_smoothing, tile), out=out, skip=skip,
             stream=stream, context=context, alloc=alloc)
    return r["loss"], r["sum_exp"], r["max_logit"]


def cross_entropy_fused(logits, labels, g, *, ignore_index=None, label_smoothing=None,
                        inplace=None, tile=None, out=None, skip=(), stream=None, context=None,
                        alloc=None):
    """The forward and the gradient in one kernel, for an output gradient
    that is the same on every row: g [1] fp32 on the device (1 / count for
    the mean, 1 for the sum). -> (loss, sum_exp, max_logit, grad), grad in
    logits' type; with inplace=True grad is the logits, overwritten. The
    row is read twice, the second time from L2 (see gen/families/cross_entropy.c)."""
    r = call("lingen.cross_entropy_fused", "cross_entropy", "forward",
             {"logits": logits, "labels": labels, "g": g},
             _ce_options(ignore_index, label_smoothing, tile, fused=True, inplace=inplace),
             out=out, skip=skip, stream=stream, context=context, alloc=alloc)
    inplace = _core.declared("cross_entropy", "inplace") if inplace is None else inplace
    return r["loss"], r["sum_exp"], r["max_logit"], logits if inplace else r["grad"]


def cross_entropy_backward(logits, labels, sum_exp, max_logit, dloss, *, ignore_index=None,
                           label_smoothing=None, inplace=None, vocab_start=None, classes=None,
                           tile=None, out=None, stream=None, context=None, alloc=None):
    """Softmax cross entropy backward: grad = (exp(x - m) / S - (1 - e)
    onehot(y) - e / C) * dloss[row] in logits' type, zero on ignored rows;
    dloss [tokens] fp32. inplace=True writes it over the logits (returns
    them). A vocab shard (vocab_start given): logits are the shard's
    columns [vocab_start, vocab_start + vocab) of C = classes, S and m the
    merged ones (cross_entropy_merge). As linghe's
    triton_softmax_cross_entropy_backward."""
    opts = _ce_options(ignore_index, label_smoothing, tile, inplace=inplace)
    sizes = None
    if vocab_start is None and classes is not None:
        fn = "lingen.cross_entropy_backward"
        _core.check_option(fn, _families.families()["cross_entropy"].key("classes"), classes,
                           "classes")
        raise ValueError(f"lingen.cross_entropy_backward: classes: found {classes!r}, expected "
                         "None without vocab_start (the columns of a vocab shard)")
    if vocab_start is not None:
        opts["part"] = "shard"
        opts["classes"] = classes if classes is not None else 0
        sizes = {"vocab_start": vocab_start}
    r = call("lingen.cross_entropy_backward", "cross_entropy", "backward",
             {"logits": logits, "labels": labels, "sum_exp": sum_exp, "max_logit": max_logit,
              "dloss": dloss}, opts, sizes=sizes, out=out, stream=stream, context=context,
             alloc=alloc)
    inplace = _core.declared("cross_entropy", "inplace") if inplace is None else inplace
    return logits if inplace else r["grad"]


def cross_entropy_shard_stats(logits, labels, vocab_start, classes, *, ignore_index=None,
                              label_smoothing=None, tile=None, out=None, stream=None, context=None,
                              alloc=None):
    """Vocab parallel, per shard: this rank's logits [tokens, vocab] (the
    columns [vocab_start, vocab_start + vocab) of classes), labels (global
    column indices) -> stats [tokens, 6] fp32 (m, S hi, S lo, target logit
    or -inf, sum x hi, lo). All-gather them into [shards, tokens, 6] for
    cross_entropy_merge."""
    r = call("lingen.cross_entropy_shard_stats", "cross_entropy", "forward",
             {"logits": logits, "labels": labels},
             _ce_options(ignore_index, label_smoothing, tile, part="shard", classes=classes),
             sizes={"vocab_start": vocab_start}, out=out, stream=stream, context=context,
             alloc=alloc)
    return r["stats"]


def cross_entropy_merge(stats, labels, classes, *, ignore_index=None, label_smoothing=None,
                        tile=None, out=None, skip=(), stream=None, context=None, alloc=None):
    """Vocab parallel: the gathered stats [shards, tokens, 6] -> (loss,
    sum_exp, max_logit) of the whole rows (classes columns), for
    cross_entropy_backward of each shard."""
    r = call("lingen.cross_entropy_merge", "cross_entropy", "forward",
             {"stats_in": stats, "labels": labels},
             _ce_options(ignore_index, label_smoothing, tile, part="merge", vocab=classes),
             names={"stats_in": "stats", "vocab": "classes"}, out=out, skip=skip, stream=stream,
             context=context, alloc=alloc)
    return r["loss"], r["sum_exp"], r["max_logit"]


# ------------------------------------------------ router GEMM (K3)

def router_gemm_backward(dy, x, w, *, precision=None, dx=True, dw=True, tile=None, out=None,
                         stream=None, context=None, alloc=None):
    """Router GEMM backward: dy [tokens, experts] fp32, x and w as in
    router_gemm -> (dx [tokens, hidden] bf16 = dy . w, dw [experts, hidden]
    fp32 = dy^T . x, deterministic); dx=False or dw=False skips that one
    (None). precision: dy on the tensor cores as "bf16" (rounded, 2^-9),
    "bf16x2" (two bf16 terms, 2^-17: more accurate than linghe's tf32),
    "bf16x3" (exact dy: fp32 sums only) or "tf32" (dy rounded to tf32, 2^-11:
    linghe's products, at bf16x2's cost). As linghe's
    triton_fp32_gemm_for_backward and triton_fp32_gemm_for_update."""
    fn = "lingen.router_gemm_backward"
    skip = tuple(n for n, want in (("dx", dx), ("dw", dw)) if not _core.check_flag(fn, n, want))
    r = call("lingen.router_gemm_backward", "router_gemm", "backward",
             {"dy": dy, "x": x, "w": w}, {"precision": precision, "tile": tile}, out=out, skip=skip,
             stream=stream, context=context, alloc=alloc)
    return _generic.outputs("router_gemm", "backward", r)


def rmsnorm_router(x, w, route_w, eps=None, *, precision=None, round_scale=None, output=None,
                   tile=None, out=None, stream=None, context=None, alloc=None):
    """RMSNorm + router GEMM + rowwise FP8 in one pass (docs/kernels.md K3b): x
    [tokens, hidden] bf16, w [hidden] bf16 (the norm's weight), route_w
    [experts, hidden] bf16 -> (y, rms, logits, q, s, qt, st): y [tokens,
    hidden] bf16 = (x r) w, rms [tokens] fp32 (r, the reciprocal RMS),
    logits [tokens, experts] fp32 = y . route_w^T, q, s the rowwise copy of
    fp32 y (s [cdiv(hidden, 128), tokens]; a partial last block for hidden
    not a multiple of 128), qt, st the columnwise copy with output="both"
    (else None). precision: y on the tensor cores as "bf16" (the y
    returned: the logits are router_gemm's of y), "bf16x2" (2^-17 of y, more
    accurate than linghe's tf32) or "bf16x3" (fp32 y exactly). As linghe's
    triton_rms_norm_fp32_gemm_block_quant_forward (same return order; its
    output_mode 0 is "rowwise"; its mode 1, the columnwise copy alone from
    a saved rms, is rmsnorm_quant(..., output="columnwise"), which remakes
    the same rms)."""
    r = call("lingen.rmsnorm_router", "rmsnorm_router", "forward",
             {"x": x, "w": w, "route_w": route_w},
             _quant(round_scale, output, eps=eps, precision=precision, tile=tile),
             out=out, stream=stream, context=context, alloc=alloc)
    return _generic.outputs("rmsnorm_router", "forward", r)


# ------------------------------------------ every other family pass, generated

# The ops wrapped by hand, and why: what each does that the op made from its
# family's declaration (lingen._generic) would not. Every other family pass
# is served by the generic op (generated()); cross_entropy's forward by its
# launch forms (FORMS).
_LINGHE_EPS = "eps positional after the arrays, in linghe's argument order"
_QUANT_OUT = "returns the outputs the flags ask for, not the declared tuple with Nones"
_MOE_ORDER = ("the arrays in linghe's order (optional ones last, not the declared order), "
              "top_k required")
_GEMM_DTYPE = ("out_dtype picks the spec's dtype (the output's element type, not a key; "
               "bf16 or fp32 by pass)")
BY_HAND = {
    "rmsnorm_quant": _LINGHE_EPS,
    "rmsnorm": _LINGHE_EPS + "; rms=False leaves rms unwritten",
    "rmsnorm_backward": _LINGHE_EPS + ", before the optional rms",
    "fp8_quant_weight": "transposed=False returns (q, s), not the declared four outputs",
    "qk_norm_rope": _LINGHE_EPS + "; linghe's interleaved / transposed flags for the "
                    "head_layout and qkv_order enums; cu_seqlens sets varlen and takes "
                    "qkv [T, dim] (viewed as [T, 1, dim])",
    "qk_norm_rope_backward": "as qk_norm_rope",
    "group_rmsnorm_gate": _LINGHE_EPS + "; shared_weight told by w's length, as linghe",
    "group_rmsnorm_gate_backward": "as group_rmsnorm_gate",
    "swiglu_quant_backward": "dx_bf16=True adds dx as a fifth value; " + _QUANT_OUT,
    "batch_swiglu_quant_backward": "output is always both; dx_bf16=True adds dx as a sixth "
                                   "value; " + _QUANT_OUT,
    "router_gemm_backward": "dx=False / dw=False leave that output unwritten",
    "rmsnorm_router": _LINGHE_EPS,
    "cross_entropy_forward": "a launch form of cross_entropy's forward: "
                             "(loss, sum_exp, max_logit) of the full rows",
    "cross_entropy_fused": "a launch form of cross_entropy's forward (fused=True): the "
                           "gradient too, the logits themselves with inplace=True",
    "cross_entropy_shard_stats": "a launch form of cross_entropy's forward (part=shard): "
                                 "vocab_start is a run-time size",
    "cross_entropy_merge": "a launch form of cross_entropy's forward (part=merge): "
                           "classes names the declared vocab",
    "cross_entropy_backward": "inplace returns the logits; vocab_start sets part=shard",
    "moe_row_map": "routing: one array whose element type picks the routing enum and "
                   "the declared input it binds; row_index=False",
    "moe_permute": _MOE_ORDER,
    "moe_permute_backward": _MOE_ORDER,
    "moe_unpermute": _MOE_ORDER,
    "moe_unpermute_backward": _MOE_ORDER + "; g and probs read only when weighted",
    "moe_permute_quant": _MOE_ORDER,
    "fp8_gemm": _GEMM_DTYPE,
    "fp8_gemm_dgrad": _GEMM_DTYPE,
    "fp8_gemm_wgrad": _GEMM_DTYPE + "; tokens= a run-time size; accumulate checked "
                      "against out=",
    "fp8_grouped_gemm": _GEMM_DTYPE,
    "fp8_grouped_gemm_dgrad": _GEMM_DTYPE,
    "fp8_grouped_gemm_wgrad": _GEMM_DTYPE + "; accumulate checked against out=",
    "grad_norm": "a tensor list (lingen.lists): its device table built once",
    "count_zero": "a tensor list (lingen.lists): its device table built once",
}
# family passes served by ops of other names: {op name of the pass: those ops}
FORMS = {"cross_entropy": ("cross_entropy_forward", "cross_entropy_fused",
                           "cross_entropy_shard_stats", "cross_entropy_merge")}


def _by_hand(name):
    from . import lists
    return globals().get(name) or getattr(lists, name)


for _n, _why in BY_HAND.items():
    _f = _by_hand(_n)
    _f.__doc__ = (_f.__doc__ or "").rstrip() + f"\n\nWrapped by hand (lingen.ops.BY_HAND): {_why}."


def generated():
    """The names of the ops made from the declarations alone
    (lingen._generic): the family passes no op in BY_HAND wraps."""
    return sorted(_generic.generated(_TAKEN))


def public():
    """Every op the package gives, built from the registry: BY_HAND's and
    generated()'s (lingen.__all__)."""
    return sorted(set(BY_HAND) | set(generated()))


_TAKEN = frozenset(BY_HAND) | frozenset(FORMS)


def __getattr__(name):
    from . import _lib
    try:
        f = _generic.lookup(name, _TAKEN) if not name.startswith("_") else None
    except _lib.LibraryError as e:  # no library: no declarations to make ops from
        raise AttributeError(f"module 'lingen.ops' has no attribute {name!r} ({e})") from None
    if f is None:
        raise AttributeError(f"module 'lingen.ops' has no attribute {name!r}")
    return f


def generated_target(name):
    """(op, pass) of the generated op called name."""
    return _generic.generated(_TAKEN)[name]
