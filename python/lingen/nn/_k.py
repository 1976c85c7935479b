"""The lingen kernels lingen.nn's layers use, one function each: lingen's
torch ops for CUDA tensors (and meta / fake ones: their fake kernels), and
the same operation in plain torch on the CPU (so that the layers, their
tests and a model on the CPU run without a GPU). The CPU forms compute the
same values in the same layouts; where lingen's kernels round or sum in an
order of their own, they agree within the kernels' tolerances.

Not differentiable here but for rms_norm, qk_norm_rope, router_gemm and
permute / unpermute (bf16), which are lingen.torch's autograd Functions on
a GPU and torch autograd on the CPU."""
import torch

from .. import _torchref as Q


def on_cpu(t):
    return t.device.type == "cpu"


def _lt():
    import lingen.torch as lt
    return lt


def _run(name, *a, **k):
    from ..torch._ops import _run as run
    return run(name, *a, **k)


# ---------------------------------------------------------- dense steps

def rms_norm(x, w, eps, plain=False):
    if plain or on_cpu(x):
        return Q.rms_norm(x, w, eps)[0]
    return _lt().rms_norm(x, w, eps)


def quant(x, output="both"):
    """(q, s, qt, st) of x [M, K] bf16 (the copies output leaves out None)."""
    if on_cpu(x):
        return Q.quant(x, output=output)
    return _lt().fp8_quant(x, output=output)


def rms_norm_quant(x, w, eps):
    """(y, (q, s, qt, st)): RMSNorm of x [..., H] bf16 and the quantised
    copies of y [tokens, H] (rmsnorm_quant: one pass, y never written), y
    differentiable (on the GPU a gradient carrier of no memory: the copies
    are its values; the backward is the RMSNorm's)."""
    if on_cpu(x):  # the copies of the fp32 y, as the kernel's
        y = Q.rms_norm_fp32(x, w, eps)[0]
        return y.to(x.dtype), quant(y.detach().reshape(-1, x.shape[-1]))
    y, q, s, qt, st = _lt().rms_norm_quant_autograd(x, w, eps, output="both")
    return y, (q.view(-1, x.shape[-1]), s, qt, st)


def swiglu_quant_dense(x):
    """(y, (q, s, qt, st)): y = silu(gate) * up of x [..., 2n] bf16 = [gate
    | up] and the quantised copies of y [tokens, n] (swiglu_quant: one pass
    each way, y never written), y differentiable as rms_norm_quant's."""
    n = x.shape[-1] // 2
    if on_cpu(x):  # the copies of the fp32 y, as the kernel's
        y = Q.swiglu(x)
        return y.to(x.dtype), quant(y.detach().reshape(-1, n))
    y, q, s, qt, st = _lt().swiglu_quant(x, output="both")
    return y, (q.view(-1, n), s, qt, st)


def mark_fp8(w):
    """Mark parameter w as a weight lingen.nn quantises at each forward
    (quant_weight): lingen.optim.AdamW(fp8_weights=True) then writes its FP8
    copies in its step."""
    w._lingen_fp8 = True
    return w


def is_fp8(w):
    return getattr(w, "_lingen_fp8", False)


def set_weight_copies(w, copies, take=False):
    """Record copies (q, s, qt, st, as quant_weight gives them) as w's FP8
    copies for w as it is now: quant_weight returns them until w changes;
    take: the first quant_weight that returns them also drops them from w
    (they then live as long as that forward's own copies would: q to the
    end of its forward, qt to the end of its backward)."""
    w._lingen_fp8_copies = (w._version, w.data_ptr(), copies, take)


def weight_copies(w):
    """w's FP8 copies written by an optimiser step (set_weight_copies) when
    they are current: w neither changed by torch in place since (its
    _version counts every in-place write but those through .data) nor
    given other storage; else None."""
    c = getattr(w, "_lingen_fp8_copies", None)
    if c is None or c[0] != w._version or c[1] != w.data_ptr():
        return None
    return c[2]


def quant_weight(w):
    """(q, s, qt, st) of a weight [N, K], or of expert weights [E, N, K]:
    the copies the optimiser's step wrote when they are current
    (weight_copies; qt and st None when the step handed over q and s only:
    the backward then calls quant_weight again), else quantised now."""
    if not torch.compiler.is_compiling():
        c = weight_copies(w)
        if c is not None:
            if w._lingen_fp8_copies[3]:  # handed over: this forward holds them alone
                del w._lingen_fp8_copies
            return c
    if on_cpu(w):
        return Q.weight(w) if w.dim() == 2 else Q.weight_experts(w)
    # one kernel writes both copies; expert weights as one [E N, K] weight
    q, s, qt, st = _lt().fp8_quant_weight(w.reshape(-1, w.shape[-1]), transposed=True)
    if w.dim() == 2:
        return q, s, qt, st
    e, n, k = w.shape
    return (q.view(e, n, k), s.view(e, n // Q.BLOCK, -1)) + Q.experts_transposed(qt, st, e)


def router_gemm(x, w, plain=False):
    """fp32 logits x . w^T (x [T, H] bf16), differentiable."""
    if plain or on_cpu(x):
        return Q.router_gemm(x, w)
    return _lt().router_gemm(x, w)


def qk_norm_rope(qkv, qw, kw, freqs, q_heads, kv_heads, eps, rotary_fraction, plain=False):
    """(q [B, S, H, D], k, v [B, S, h, D]) of qkv [B, S, (H + 2h) D] (q | k |
    v), q / k RMSNorm over D and rotate-half RoPE on the first
    rotary_fraction * D of each head, freqs [S, R] in the cat(f, f) layout."""
    if plain or on_cpu(qkv):
        return Q.qk_norm_rope(qkv, qw, kw, freqs, q_heads, kv_heads, eps, rotary_fraction)
    return _lt().qk_norm_rope(qkv, qw, kw, freqs, q_heads, kv_heads, eps=eps,
                              rotary_fraction=rotary_fraction, interleaved=False,
                              transposed=False)


def cross_entropy_grad(logits, labels, g, ignore_index, plain=False):
    """(loss [rows] fp32, grad) of logits [rows, V] and labels [rows]: the
    rows' cross entropy and its gradient (softmax - onehot(label)) * g[0]
    (g [1] fp32 on the device, the same on every row; ignored rows: loss 0,
    gradient 0), written over the logits and returned as them (on a GPU
    lingen's fused K9 forward, in place; under torch.compile, whose tracing
    would not see the kernel's in-place write, into a new tensor)."""
    if plain or on_cpu(logits):
        loss, grad = Q.cross_entropy_fused(logits, labels, g, ignore_index)
        return loss, logits.copy_(grad)
    inplace = not torch.compiler.is_compiling()
    loss, _, _, _, grad = _run("cross_entropy_forward", logits, labels, None, g,
                               vocab=logits.shape[1], ignore_index=int(ignore_index),
                               index="int32" if labels.dtype == torch.int32 else "int64",
                               fused=True, inplace=inplace)
    return loss, logits if inplace else grad


def cross_entropy_stats(logits, labels, ignore_index):
    """(loss, S, m) [rows] fp32 of logits [rows, V] (K9's forward, part
    full: loss 0, S = m = 0 on ignored rows)."""
    if on_cpu(logits):
        return Q.cross_entropy_forward(logits, labels, ignore_index)
    return _run("cross_entropy_forward", logits, labels, vocab=logits.shape[1],
                ignore_index=int(ignore_index),
                index="int32" if labels.dtype == torch.int32 else "int64")[:3]


def cross_entropy_quant(logits, labels, s, m, g, ignore_index, into=None):
    """(q, s, qt, st): both blockwise FP8 copies of the cross entropy
    gradient (softmax - onehot(label)) * g[0] of logits [rows, V] bf16 from
    the forward's S and m (cross_entropy_stats), as fp8_quant quantises the
    bf16 gradient (lingen's cross_entropy_quant: the gradient never
    written); on the CPU the torch reference, the same math.

    into: (gqt, gst, a): the columnwise copy goes to columns a .. a +
    qt_pitch(rows) of gqt [V, P] (qt_buffer's, a a multiple of 128, P at
    least a + qt_pitch(rows); _torchref.qt_pitch: the library's) and to
    rows a / 128 .. of gst, and qt, st are those slices: on a GPU (eager)
    the kernel writes them there itself (its qt_pitch P: no copy); on the
    CPU, meta tensors and under torch.compile (the kernel's write into its
    output arguments is not traced) copied there."""
    idx = "int32" if labels.dtype == torch.int32 else "int64"
    if into is not None and not torch.compiler.is_compiling() and _real_cuda(logits):
        gqt, gst, a = into
        v, p = gqt.shape
        b0, pc = a // Q.BLOCK, Q.qt_pitch(logits.shape[0])
        st = gst[b0:b0 + -(-logits.shape[0] // Q.BLOCK)]
        # qt [V, P] from column a: past gqt's end by a bytes, which qt_buffer has
        qt = gqt.as_strided((v, p), (p, 1), gqt.storage_offset() + a)
        # (outputs among the arrays: the call's fast launch, as the torch op's)
        from .. import _core
        r = _core.call("lingen.nn.cross_entropy_quant", "cross_entropy_quant", "forward",
                       {"logits": logits, "labels": labels, "sum_exp": s, "max_logit": m, "g": g,
                        "qt": qt, "st": st},
                       {"ignore_index": int(ignore_index), "index": idx, "quant.output": "both"})
        return r["q"], r["s"], gqt[:, a:a + pc], st
    if on_cpu(logits):
        r = Q.cross_entropy_quant(logits, labels, s, m, g, ignore_index)
    else:
        r = _run("cross_entropy_quant_forward", logits, labels, s, m, g,
                 ignore_index=int(ignore_index), index=idx, quant_output="both")
    if into is None:
        return r
    gqt, gst, a = into
    q, sc, qt, st = r
    b0 = a // Q.BLOCK
    # 8 bytes an element: torch copies e4m3 one byte a thread into a strided
    # destination (a and the pitches are multiples of 128)
    gqt.view(torch.int64)[:, a // 8:(a + qt.shape[1]) // 8] = qt.view(torch.int64)
    gst[b0:b0 + st.shape[0]] = st
    return q, sc, gqt[:, a:a + qt.shape[1]], gst[b0:b0 + st.shape[0]]


def qt_buffer(v, t, device):
    """gqt [v, qt_pitch(t)] e4m3, the columnwise copy of t tokens that
    cross_entropy_quant's `into` fills a chunk at a time (qt_pitch: as the
    library declares cross_entropy_quant's qt): its storage holds
    qt_pitch(t) bytes more than gqt, so that each chunk's qt argument, [v,
    qt_pitch(t)] from the chunk's first column, lies within it (the kernel
    writes none of them)."""
    p = Q.qt_pitch(t)
    return torch.empty(v * p + p, dtype=Q.E4M3, device=device)[:v * p].view(v, p)


def _real_cuda(t):
    """Whether t is a real CUDA tensor (not meta, not a tracer's fake)."""
    from ..torch._ops import _on_cuda
    return _on_cuda((t,))


# --------------------------------------------------------------- MoE

_routing = []


def _topk_routing():
    """(routing kind, input index) of moe_row_map for int32 top-k indices,
    found once (outside any trace: torch.compile reads the constant)."""
    if not _routing:
        from .._moe_ops import _routing_arg, _routing_kind
        kind, _ = _routing_kind(torch.zeros(1, 1, dtype=torch.int32), "lingen.nn")
        _routing.append((kind, _routing_arg(kind).index))
    return _routing[0]


rows_bound = Q.rows_bound


def row_map(topk, experts, multiple, plain=False):
    """(row_id_map [T, E], counts [E], offsets [E + 1], row_index [R],
    padded_counts [E]) of top-k indices [T, k] int32 (moe_row_map)."""
    k = topk.shape[1]
    if not (plain or on_cpu(topk)):
        kind, index = _topk_routing()
        arrays = [None, None, None]
        arrays[index] = topk.int()
        return _run("moe_row_map_forward", *arrays, experts=int(experts), top_k=int(k),
                    multiple=int(multiple), routing=kind)
    return Q.row_map_topk(topk, experts, multiple)


def permute_quant(x, probs, row_index, padded, top_k, multiple):
    """(q, s, qt, st, out_probs [R]) of tokens x [T, H] bf16 into the padded
    rows, quantised per expert (moe_permute_quant, both copies)."""
    if not on_cpu(x):
        return _lt().moe_permute_quant(x, row_index, padded, probs, top_k=top_k,
                                       multiple=multiple, output="both")
    return Q.permute_quant(x, probs, row_index, padded)


def experts_quant(x, padded):
    """(q, s, qt, st) of rows x [R, K] per expert (fp8_quant_batched)."""
    if on_cpu(x):
        return Q.experts_quant(x, padded)
    return _lt().fp8_quant_batched(x, padded, output="both")


def swiglu_quant(h, prob, padded):
    """(q, s, qt, st) of silu(gate) * up * prob of h [R, 2n], per expert."""
    if on_cpu(h):  # the fp32 y quantised, as the kernel's
        return Q.batch_swiglu_quant(h, prob, padded)
    return _lt().batch_swiglu_quant_forward(h, prob, padded, output="both")


def swiglu_quant_backward(g, h, prob, padded):
    """(dxq, dxs, dxqt, dxst, dprob [R] fp32) of dy = g [R, n] bf16."""
    if on_cpu(g):  # the fp32 dx quantised, as the kernel's
        return Q.batch_swiglu_quant_backward(g, h, prob, padded)
    dxq, dxs, dp, dxqt, dxst = _lt().batch_swiglu_quant_backward(g, h, prob, padded, dx_bf16=False)
    return dxq, dxs, dxqt, dxst, dp.view(-1)


def rows_of_tokens(dout, row_index, padded):
    """dg [R, H]: dout[t] in each of t's rows, zeros elsewhere (the
    unweighted unpermute's backward)."""
    if on_cpu(dout):
        return Q.tokens_to_rows(dout, row_index, padded)
    return None  # the GPU form takes the row map: unpermute_backward


def unpermute(rows, row_index, row_id_map, offsets, counts, padded, top_k, multiple):
    """out [T, H] bf16: each token's rows summed in fp32 (unweighted), not
    differentiable."""
    if on_cpu(rows):
        return Q.unpermute(rows, row_index, padded, row_id_map.shape[0], torch.bfloat16)
    out, _ = _run("moe_unpermute_forward", rows, None, row_id_map, top_k=top_k,
                  multiple=multiple, weighted=False)
    return out


def unpermute_backward(dout, row_index, row_id_map, offsets, counts, padded, top_k, multiple):
    if on_cpu(dout):
        return rows_of_tokens(dout, row_index, padded)
    dg, _ = _run("moe_unpermute_backward", dout.contiguous(), None, row_id_map, offsets, counts,
                 top_k=top_k, multiple=multiple, weighted=False)
    return dg


def permute_backward(rows, rows_probs, row_index, row_id_map, padded, top_k, multiple):
    """(dx [T, H] bf16: each token's rows summed in fp32 (ascending expert
    order), dprobs [T, E] fp32: rows_probs [R] at each routed pair, else 0):
    the backward of permute_quant's rows and probabilities, in one kernel
    (moe_permute's backward), not differentiable."""
    if on_cpu(rows):
        m = row_id_map.long()
        dprobs = torch.where(m >= 0, rows_probs[m.clamp(min=0)], 0.0)
        return unpermute(rows, row_index, row_id_map, None, None, padded, top_k, multiple), dprobs
    return _run("moe_permute_backward", rows, rows_probs, row_id_map, top_k=top_k,
                multiple=multiple)


def permute_bf16(x, probs, row_id_map, row_index, offsets, counts, padded, top_k, multiple,
                 plain=False):
    """(rows [R, H], rows_probs [R]) differentiable (moe_permute)."""
    if not (plain or on_cpu(x)):
        return _lt().moe_permute(x, row_id_map, offsets, counts, probs, top_k=top_k,
                                 multiple=multiple)
    return Q.permute(x, probs, row_index, padded)


def unpermute_bf16(rows, row_id_map, row_index, offsets, counts, padded, top_k, multiple,
                   plain=False):
    """out [T, H] differentiable (moe_unpermute, unweighted)."""
    if not (plain or on_cpu(rows)):
        return _lt().moe_unpermute(rows, row_id_map, offsets, counts, top_k=top_k,
                                   multiple=multiple)[0]
    return Q.unpermute(rows, row_index, padded, row_id_map.shape[0])
