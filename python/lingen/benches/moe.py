"""MoE dispatch and combine (KERNELS.md K4, K4b, K5): the padded row map,
the permute into padded expert rows (bf16 with probs), the fused permute +
pad + per-expert FP8 quantisation, and the unpermute (combine), at the README shape (8192 tokens, hidden 2048, 256 experts,
top-8, rows padded to 16) and, in the full run, hidden 7168 (DeepSeek-V3)
and 160 experts (not a power of two). The eager rows are the plain PyTorch
references below (also the GPU tests' autograd references)."""
from . import Case, Setup
from .quant_layouts import batched_quant, dequant_batched

# linghe on one H200 (shared/TARGETS.md, measured 2026-11-30): (kernel, shape) -> us
LINGHE_US = {
    ("moe row map", "8192x256 top8 m16"): 34.4,
    ("moe permute", "8192x2048 e256 top8"): 124.7,
    ("moe unpermute", "8192x2048 e256 top8"): 88.4,
    ("moe permute+quant", "8192x2048 e256 top8"): 281.0,
}


def routing(torch, gen, tokens, experts, top_k):
    """A random top-k routing: mask [tokens, experts] bool and probs fp32
    (softmax over the chosen experts, 0 elsewhere)."""
    logits = torch.randn(tokens, experts, generator=gen, device="cuda")
    top = logits.topk(top_k, dim=-1)
    mask = torch.zeros(tokens, experts, dtype=torch.bool, device="cuda")
    mask.scatter_(1, top.indices, True)
    probs = torch.zeros(tokens, experts, device="cuda")
    probs.scatter_(1, top.indices, top.values.softmax(-1))
    return mask, probs, top.indices


def row_map(torch, mask, top_k, multiple=16):
    """(row_id_map, counts, offsets, row_index, padded_counts) of KERNELS.md
    K4 in PyTorch."""
    tokens, experts = mask.shape
    m = mask.to(torch.int32)
    counts = m.sum(0, dtype=torch.int32)
    padded = (counts + multiple - 1) // multiple * multiple
    offsets = torch.zeros(experts + 1, dtype=torch.int32, device=mask.device)
    offsets[1:] = padded.cumsum(0)
    rank = m.cumsum(0, dtype=torch.int32) - m
    rmap = torch.where(mask, offsets[:-1][None, :] + rank, -1).to(torch.int32)
    rows = tokens * top_k + experts * (multiple - 1)
    row_index = torch.full((rows,), -1, dtype=torch.int32, device=mask.device)
    t, e = mask.nonzero(as_tuple=True)
    row_index[rmap[t, e].long()] = t.to(torch.int32)
    return rmap, counts, offsets, row_index, padded


def permute(torch, x, probs, rmap, rows):
    """(out [rows, hidden], out_probs [rows]): x[t] and probs[t, e] at row
    rmap[t, e], zeros elsewhere; differentiable in x and probs."""
    t, e = (rmap >= 0).nonzero(as_tuple=True)
    r = rmap[t, e].long()
    out = x.new_zeros(rows, x.shape[1]).index_copy(0, r, x[t])
    pp = probs.new_zeros(rows).index_copy(0, r, probs[t, e]) if probs is not None else None
    return out, pp


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


def _permute_quant(env, t, h, e, k):
    """K4b: lingen's one kernel against PyTorch's permute then the
    per-expert quantiser over the padded segments (counts on the host)."""
    torch, lt = env.torch, env.lt
    x = env.randn(t, h)
    mask, probs, _ = routing(torch, env.gen, t, e, k)
    rmap, counts, offsets, row_index, padded = row_map(torch, mask, k)
    rows = t * k + e * 15
    plist = [int(c) for c in padded.tolist()]

    def eager():
        out = permute(torch, x, probs, rmap, rows)[0]
        return batched_quant(torch, out, plist)
    return Setup({"lingen": lambda: lt.moe_permute_quant(x, row_index, padded, probs, top_k=k),
                  "eager": eager}, (x, probs, row_index),
                 lambda r: dequant_batched(torch, plist, *r[:4]))


def cases(quick):
    shapes = [(8192, 2048, 256, 8)]
    if not quick:
        shapes += [(8192, 7168, 256, 8), (8192, 2048, 160, 6)]
    out = []
    for t, h, e, k in shapes:
        if h == 2048:
            shape = f"{t}x{e} top{k} m16"
            out.append(Case("moe row map", shape, lambda env, t=t, e=e, k=k: _map(env, t, e, k),
                            LINGHE_US.get(("moe row map", shape)), rtol=0.0))
        shape = f"{t}x{h} e{e} top{k}"
        for kernel, make in (("moe permute", _permute), ("moe unpermute", _unpermute),
                             ("moe permute+quant", _permute_quant)):
            out.append(Case(kernel, shape,
                            lambda env, t=t, h=h, e=e, k=k, make=make: make(env, t, h, e, k),
                            LINGHE_US.get((kernel, shape))))
    return out
