"""MoE dispatch and combine (docs/kernels.md K4, K4b, K5): the padded row map
(from a mask, and from top-k indices), the permute into padded expert rows
(bf16 with probs; e4m3 with its scales), the fused permute + pad +
per-expert FP8 quantisation, the unpermute (combine), and the backward of
the permute and of the weighted unpermute (eager and compile rows: torch
autograd of the references), at the README shape (8192 tokens, hidden 2048,
256 experts, top-8, rows padded to 16) and, in the full run, hidden 7168
(DeepSeek-V3) and 160 experts (not a power of two). The eager rows are the
plain PyTorch references below (also the GPU tests' autograd references)."""
from . import ODD_TOKENS, Case, Setup
from .quant import _ref
from .quant_layouts import batched_quant, dequant_batched

# linghe on one H200 (docs/performance.md, measured 2026-11-30): (kernel, shape) -> us
LINGHE_US = {
    ("moe row map", "8192x256 top8 m16"): 34.4,
    ("moe permute", "8192x2048 e256 top8"): 124.7,
    ("moe unpermute", "8192x2048 e256 top8"): 88.4,
    ("moe permute+quant", "8192x2048 e256 top8"): 281.0,
}


def routing(torch, gen, tokens, experts, top_k):
    """A random top-k routing: mask [tokens, experts] bool and probs fp32
    (softmax over the chosen experts, 0 elsewhere), on gen's device (the
    bench's: CUDA)."""
    dev = gen.device
    logits = torch.randn(tokens, experts, generator=gen, device=dev)
    top = logits.topk(top_k, dim=-1)
    mask = torch.zeros(tokens, experts, dtype=torch.bool, device=dev)
    mask.scatter_(1, top.indices, True)
    probs = torch.zeros(tokens, experts, device=dev)
    probs.scatter_(1, top.indices, top.values.softmax(-1))
    return mask, probs, top.indices


def row_map(torch, mask, top_k, multiple=16):
    """(row_id_map, counts, offsets, row_index, padded_counts) of docs/kernels.md
    K4 in PyTorch (lingen._torchref.row_map)."""
    return _ref().row_map(mask, top_k, multiple)


def permute(torch, x, probs, rmap, rows):
    """(out [rows, hidden], out_probs [rows]): x[t] and probs[t, e] at row
    rmap[t, e], zeros elsewhere; differentiable in x and probs."""
    t, e = (rmap >= 0).nonzero(as_tuple=True)
    r = rmap[t, e].long()
    out = x.new_zeros(rows, x.shape[1]).index_copy(0, r, x[t])
    pp = probs.new_zeros(rows).index_copy(0, r, probs[t, e]) if probs is not None else None
    return out, pp


def row_map_topk(torch, idx, experts, top_k, multiple=16):
    """row_map of top-k indices [tokens, top_k] (scattered into a mask)."""
    return _ref().row_map_topk(idx, experts, multiple)


def permute_fp8(torch, xq, xs, probs, rmap, rows):
    """(out e4m3, out_scale [rows, hidden / 128], out_probs): the payload
    bytes and the scales permuted; the other rows zeros with the zero
    block's scale 2^-99 (power-of-two scales)."""
    q, pp = permute(torch, xq.view(torch.uint8), probs, rmap, rows)
    t, e = (rmap >= 0).nonzero(as_tuple=True)
    s = xs.new_full((rows, xs.shape[1]), 2.0 ** -99).index_copy(0, rmap[t, e].long(), xs[t])
    return q.view(torch.float8_e4m3fn), s, pp


def unpermute(torch, g, rmap, probs=None, weighted=False):
    """(out [tokens, hidden], restore_probs [tokens, experts]): each token's
    rows added in fp32 (float64 for float64 rows; times probs[r] when
    weighted); differentiable."""
    t, e = (rmap >= 0).nonzero(as_tuple=True)
    r = rmap[t, e].long()
    acc = torch.float64 if g.dtype == torch.float64 else torch.float32
    rows = g[r].to(acc)
    if weighted:
        rows = rows * probs[r][:, None].to(acc)
    out = torch.zeros(rmap.shape[0], g.shape[1], dtype=acc, device=g.device).index_add(0, t, rows)
    restore = None
    if probs is not None:
        restore = probs.new_zeros(rmap.shape).index_put((t, e), probs[r])
    return out.to(g.dtype), restore


def _map(env, t, e, k):
    torch, lt = env.torch, env.lt
    mask = routing(torch, env.gen, t, e, k)[0]
    fn = env.compiled(row_map)
    return Setup({"lingen": lambda: lt.moe_row_map(mask, k),
                  "eager": lambda: row_map(torch, mask, k),
                  "compile": lambda: fn(mask, k)}, (mask,),
                 lambda r: tuple(v.float() for v in r))


def _map_topk(env, t, e, k):
    """The row map from top-k indices (int64, as routers emit them): lingen
    reads them as they are; PyTorch scatters them into a mask first."""
    torch, lt = env.torch, env.lt
    idx = routing(torch, env.gen, t, e, k)[2]
    fn = env.compiled(row_map_topk)
    return Setup({"lingen": lambda: lt.moe_row_map(idx, k, experts=e),
                  "eager": lambda: row_map_topk(torch, idx, e, k),
                  "compile": lambda: fn(idx, e, k)}, (idx,),
                 lambda r: tuple(v.float() for v in r))


def _autograd(torch, f, inputs, grads):
    """Torch autograd of f(*inputs) (fresh leaves), grads its output
    gradients: a callable giving the inputs' gradients (graph kept)."""
    xs = [x.detach().clone().requires_grad_() for x in inputs]
    outs = f(*xs)

    def run():
        return torch.autograd.grad(outs, xs, grads, retain_graph=True)
    return run


def _permute(env, t, h, e, k):
    torch, lt = env.torch, env.lt
    x = env.randn(t, h)
    mask, probs, _ = routing(torch, env.gen, t, e, k)
    rmap, counts, offsets = row_map(torch, mask, k)[:3]
    rows = t * k + e * 15
    fn = env.compiled(permute)
    return Setup({"lingen": lambda: lt.moe_permute(x, rmap, offsets, counts, probs, top_k=k),
                  "eager": lambda: permute(torch, x, probs, rmap, rows),
                  "compile": lambda: fn(x, probs, rmap, rows)}, (x, probs, rmap),
                 lambda r: (r[0].float(), r[1]))


def _permute_fp8(env, t, h, e, k):
    torch, lt = env.torch, env.lt
    xq = env.randn(t, h).to(torch.float8_e4m3fn)
    xs = torch.rand(t, h // 128, generator=env.gen, device="cuda")
    mask, probs, _ = routing(torch, env.gen, t, e, k)
    rmap, counts, offsets = row_map(torch, mask, k)[:3]
    rows = t * k + e * 15
    fn = env.compiled(permute_fp8)
    return Setup({"lingen": lambda: lt.moe_permute_fp8(xq, xs, rmap, offsets, counts, probs,
                                                       top_k=k),
                  "eager": lambda: permute_fp8(torch, xq, xs, probs, rmap, rows),
                  "compile": lambda: fn(xq, xs, probs, rmap, rows)}, (xq, xs, probs, rmap),
                 lambda r: (r[0].float(), r[1], r[2]))


def _permute_bwd(env, t, h, e, k):
    """The permute's backward: dx (each token's row gradients added) and
    dprobs [tokens, experts]."""
    torch, lingen = env.torch, env.lingen
    x = env.randn(t, h)
    mask, probs, _ = routing(torch, env.gen, t, e, k)
    rmap = row_map(torch, mask, k)[0]
    rows = t * k + e * 15
    dout, dpp = env.randn(rows, h), torch.randn(rows, generator=env.gen, device="cuda")
    fn = env.compiled(permute)
    return Setup({"lingen": lambda: lingen.moe_permute_backward(dout, rmap, dpp, top_k=k),
                  "eager": _autograd(torch, lambda a, p: permute(torch, a, p, rmap, rows),
                                     (x, probs), (dout, dpp)),
                  "compile": _autograd(torch, lambda a, p: fn(a, p, rmap, rows), (x, probs),
                                       (dout, dpp))},
                 (dout, dpp, rmap), lambda r: (r[0].float(), r[1]))


def _unpermute_bwd(env, t, h, e, k):
    """The weighted unpermute's backward: dg (the gradient times each row's
    probability) and dprobs (its dot product with the row)."""
    torch, lingen = env.torch, env.lingen
    mask = routing(torch, env.gen, t, e, k)[0]
    rmap, counts, offsets = row_map(torch, mask, k)[:3]
    rows = t * k + e * 15
    g, dout = env.randn(rows, h), env.randn(t, h)
    pp = torch.rand(rows, generator=env.gen, device="cuda")
    fn = env.compiled(unpermute)
    return Setup({"lingen": lambda: lingen.moe_unpermute_backward(
                      dout, rmap, offsets, counts, None, g, pp, top_k=k, weighted=True),
                  "eager": _autograd(torch, lambda a, p: unpermute(torch, a, rmap, p, True)[0],
                                     (g, pp), (dout,)),
                  "compile": _autograd(torch, lambda a, p: fn(a, rmap, p, True)[0], (g, pp),
                                       (dout,))},
                 (dout, g, pp, rmap), lambda r: (r[0].float(), r[1]))


def _unpermute(env, t, h, e, k):
    torch, lt = env.torch, env.lt
    mask, probs, _ = routing(torch, env.gen, t, e, k)
    rmap, counts, offsets = row_map(torch, mask, k)[:3]
    rows = t * k + e * 15
    g = env.randn(rows, h)
    fn = env.compiled(unpermute)
    return Setup({"lingen": lambda: lt.moe_unpermute(g, rmap, offsets, counts, top_k=k)[0],
                  "eager": lambda: unpermute(torch, g, rmap)[0],
                  "compile": lambda: fn(g, rmap)[0]}, (g, rmap),
                 lambda r: (r.float(),))


def _permute_quant(env, t, h, e, k, multiple=16):
    """K4b: lingen's one kernel against PyTorch's permute then the
    per-expert quantiser over the padded segments (counts on the host);
    multiple 128: every expert's padded count a multiple of 128 (the
    aligned neighbour of the random counts). The kernel's outputs have the
    rows' bound R = tokens * top_k + experts * (multiple - 1) rows (P, the
    padded total, stays on the device) and leave the rows past P unwritten;
    the per-expert quantiser gives the P rows alone. Compared: the first P
    rows (every expert's segment, its padding rows' zeros included) of both
    copies, dequantised, and out_probs."""
    torch, lt = env.torch, env.lt
    x = env.randn(t, h)
    mask, probs, _ = routing(torch, env.gen, t, e, k)
    rmap, counts, offsets, row_index, padded = row_map(torch, mask, k, multiple)
    rows = _ref().rows_bound(t, k, e, multiple)
    plist = [int(c) for c in padded.tolist()]
    P = sum(plist)

    def eager():
        out, pp = permute(torch, x, probs, rmap, rows)
        return (*batched_quant(torch, out, plist), pp)

    def norm(r):  # (rows, cols, out_probs) of the first P rows; s, qt: flat per-expert blocks
        q, s, qt, st, pp = r
        return (*dequant_batched(torch, plist, q[:P], s.reshape(-1)[:P * h // 128],
                                 qt.reshape(-1)[:P * h], st), pp[:P])
    return Setup({"lingen": lambda: lt.moe_permute_quant(x, row_index, padded, probs, top_k=k,
                                                         multiple=multiple),
                  "eager": eager}, (x, probs, row_index), norm)


def cases(quick):
    shapes = [(8192, 2048, 256, 8)]
    if not quick:
        shapes += [(8192, 7168, 256, 8), (8192, 2048, 160, 6)]
        shapes += [(t, 2048, 256, 8) for t in ODD_TOKENS if t != 8192]  # the odd-shape rule
    out = []
    for t, h, e, k in shapes:
        if h == 2048:
            shape = f"{t}x{e} top{k} m16"
            for kernel, make in (("moe row map", _map), ("moe row map top-k", _map_topk)):
                out.append(Case(kernel, shape,
                                lambda env, t=t, e=e, k=k, make=make: make(env, t, e, k),
                                LINGHE_US.get((kernel, shape)), rtol=0.0,
                                family="moe_row_map"))
        shape = f"{t}x{h} e{e} top{k}"
        for kernel, make, rtol, fam in (
                ("moe permute", _permute, 2e-2, "moe_permute"),
                ("moe permute fp8", _permute_fp8, 0.0, "moe_permute"),
                ("moe unpermute", _unpermute, 2e-2, "moe_unpermute"),
                ("moe permute+quant", _permute_quant, 2e-2, "moe_permute_quant"),
                ("moe permute bwd", _permute_bwd, 2e-2, "moe_permute"),
                ("moe unpermute bwd weighted", _unpermute_bwd, 2e-2, "moe_unpermute")):
            out.append(Case(kernel, shape,
                            lambda env, t=t, h=h, e=e, k=k, make=make: make(env, t, h, e, k),
                            LINGHE_US.get((kernel, shape)), rtol=rtol, family=fam))
    if not quick:  # K4b's random expert counts beside counts padded to multiples of 128
        out.append(Case("moe permute+quant", "8192x2048 e256 top8 m128",
                        lambda env: _permute_quant(env, 8192, 2048, 256, 8, 128), rtol=2e-2,
                        family="moe_permute_quant"))
    return out
