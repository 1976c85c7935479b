"""MoE dispatch and combine (docs/kernels.md K4, K5) on the GPU against plain
PyTorch (lingen.benches.moe: cumsum row map, index_copy permute, index_add
combine; independent of lingen's C references): the row map from a mask
and from top-k indices (int32, int64, with dropped slots), exactly; the
permute (bf16 with probs, e4m3 with scales), the unpermute (plain and
weighted) and the autograd of lingen.torch's permute and unpermute against
torch autograd of the references; each one's backward the other's forward
of the gradients, byte for byte; round trips; at the target shape (8192
tokens, hidden 2048, 256 experts, top-8) and odd ones (hidden 1001 and 7,
96 / 160 / 5 experts, 1 token, every token on one expert, experts with no
tokens); the same bytes on a second call. Skipped without torch or a GPU."""
import pytest

from conftest import torch_cuda
from lingen.benches import moe as ref

CASES = [  # tokens, hidden, experts, top_k, multiple
    (8192, 2048, 256, 8, 16),
    (1, 2048, 256, 8, 16),
    (333, 1001, 160, 6, 16),
    (77, 7, 96, 4, 128),
    (100, 64, 5, 2, 1),
    (513, 2050, 7, 3, 3),
]


def routing(torch, seed, tokens, experts, top_k, kind):
    """(mask, probs, topk indices): "even" a random top-k; "one" every token
    on expert experts // 2 only; "few" experts drawn from the first top_k + 1
    (most experts get no token); "drop" top-k with a third of the slots
    dropped (index -1: tokens with fewer than top_k experts)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    mask, probs, idx = ref.routing(torch, gen, tokens, experts, top_k)
    if kind == "one":
        idx = torch.full_like(idx, -1)
        idx[:, 0] = experts // 2
    elif kind == "few":
        idx = torch.stack([torch.randperm(min(experts, top_k + 1), generator=gen, device="cuda")[:top_k]
                           for _ in range(tokens)]) if tokens else idx
    elif kind == "drop":
        drop = torch.rand(idx.shape, generator=gen, device="cuda") < 1 / 3
        idx = torch.where(drop, -1, idx)
    if kind != "even":
        mask = torch.zeros(tokens, experts, dtype=torch.bool, device="cuda")
        ok = idx >= 0
        mask[torch.arange(tokens, device="cuda")[:, None].expand_as(idx)[ok], idx[ok]] = True
        probs = torch.rand(tokens, experts, generator=gen, device="cuda") * mask
    return mask, probs, idx


KINDS = ["even", "one", "few", "drop"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kind", KINDS)
def test_row_map(case, kind, seed):
    torch = torch_cuda()
    import lingen.torch as lt
    t, h, e, k, m = case
    mask, _, idx = routing(torch, seed, t, e, k, kind)
    want = ref.row_map(torch, mask, k, m)
    for routing_in, kw in ((mask, {}), (idx.int(), {"experts": e}), (idx, {"experts": e})):
        got = lt.moe_row_map(routing_in, k, multiple=m, **kw)
        for name, g, w in zip(("row_id_map", "counts", "offsets", "row_index", "padded_counts"),
                              got, want):
            assert torch.equal(g, w), f"{name} ({routing_in.dtype}, {kind}, {case})"
    # the padded total on the host: one 4-byte copy
    assert int(got[2][-1].item()) == int(want[4].sum().item())


def _map(torch, seed, case, kind):
    t, h, e, k, m = case
    mask, probs, _ = routing(torch, seed, t, e, k, kind)
    rmap, counts, offsets, _, _ = ref.row_map(torch, mask, k, m)
    return probs, rmap, counts, offsets, t * k + e * (m - 1)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kind", KINDS)
def test_permute_and_its_autograd(case, kind, seed):
    torch = torch_cuda()
    import lingen.torch as lt
    t, h, e, k, m = case
    probs, rmap, counts, offsets, rows = _map(torch, seed, case, kind)
    gen = torch.Generator(device="cuda").manual_seed(seed + 1)
    x = torch.randn(t, h, generator=gen, device="cuda").bfloat16().requires_grad_()
    p = probs.clone().requires_grad_()
    out, pp = lt.moe_permute(x, rmap, offsets, counts, p, top_k=k, multiple=m)
    xr, pr = x.detach().clone().requires_grad_(), probs.clone().requires_grad_()
    want, wpp = ref.permute(torch, xr, pr, rmap, rows)
    assert torch.equal(out, want) and torch.equal(pp, wpp), f"permute {kind} {case}"
    dout = torch.randn(rows, h, generator=gen, device="cuda").bfloat16()
    dpp = torch.randn(rows, generator=gen, device="cuda")
    torch.autograd.backward((out, pp), (dout, dpp))
    torch.autograd.backward((want, wpp), (dout, dpp))
    # dx: the fp32 sum of a token's row gradients in expert order, rounded once
    gx = ref.unpermute(torch, dout.double(), rmap)[0]
    assert ((x.grad.double() - gx).abs() <= 2 ** -8 * gx.abs() + 1e-5).all(), f"dx {kind} {case}"
    assert (x.grad.float() - xr.grad.float()).abs().max() <= 2 ** -6 * xr.grad.float().abs().max() + 1e-6
    assert torch.equal(p.grad, pr.grad), f"dprobs {kind} {case}"
    # the same bytes on a second call
    again = lt.moe_permute(x.detach(), rmap, offsets, counts, probs, top_k=k, multiple=m)
    assert torch.equal(again[0], out) and torch.equal(again[1], pp)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("weighted", [False, True])
def test_unpermute_and_its_autograd(case, weighted, seed):
    torch = torch_cuda()
    import lingen.torch as lt
    t, h, e, k, m = case
    for kind in ("even", "drop"):
        probs, rmap, counts, offsets, rows = _map(torch, seed, case, kind)
        gen = torch.Generator(device="cuda").manual_seed(seed + 2)
        g = torch.randn(rows, h, generator=gen, device="cuda").bfloat16().requires_grad_()
        pp = torch.rand(rows, generator=gen, device="cuda").requires_grad_()
        out, restore = lt.moe_unpermute(g, rmap, offsets, counts, pp, top_k=k, multiple=m,
                                        weighted=weighted)
        g64, p64 = g.detach().double().requires_grad_(), pp.detach().double().requires_grad_()
        want, wrestore = ref.unpermute(torch, g64, rmap, p64, weighted)
        tol = 2 ** -7 * want.abs() + 1e-4 * (1 + want.abs().max())
        assert ((out.double() - want).abs() <= tol).all(), f"out {weighted} {kind} {case}"
        assert torch.equal(restore.double(), wrestore), f"restore {kind} {case}"
        dout = torch.randn(t, h, generator=gen, device="cuda").bfloat16()
        drest = torch.randn(t, e, generator=gen, device="cuda")
        torch.autograd.backward((out, restore), (dout, drest))
        torch.autograd.backward((want, wrestore), (dout.double(), drest.double()))
        real = torch.zeros(rows, dtype=torch.bool, device="cuda")
        real[rmap[rmap >= 0].long()] = True
        dg = g.grad.double()
        assert (dg[~real] == 0).all(), "padding rows of dg are zeros"
        assert ((dg - g64.grad).abs() <= 2 ** -7 * g64.grad.abs() + 1e-30).all(), f"dg {kind} {case}"
        dp, wdp = pp.grad.double(), p64.grad
        assert (dp[~real] == 0).all()
        scale = 1 + wdp.abs().max()
        assert ((dp - wdp).abs() <= 1e-4 * wdp.abs() + 1e-5 * scale * (h ** 0.5)).all(), \
            f"dprobs {weighted} {kind} {case}"


@pytest.mark.parametrize("case", CASES)
def test_backward_pairs(case, seed):
    """The pairs of docs/kernels.md K4 and K5, byte for byte: the autograd
    backward of lingen.torch's permute is the unpermute of its gradients
    (dx the combine of dout, dprobs the restore of dout_probs), and the
    backward of the unpermute is the permute of its gradients (dg the
    dispatch of dout with zero padding, dprobs drestore at each row)."""
    torch = torch_cuda()
    import lingen.torch as lt
    t, h, e, k, m = case
    for kind in ("even", "drop"):
        probs, rmap, counts, offsets, rows = _map(torch, seed, case, kind)
        gen = torch.Generator(device="cuda").manual_seed(seed + 6)
        kw = dict(top_k=k, multiple=m)
        x = torch.randn(t, h, generator=gen, device="cuda").bfloat16().requires_grad_()
        p = probs.clone().requires_grad_()
        out, pp = lt.moe_permute(x, rmap, offsets, counts, p, **kw)
        dout = torch.randn(rows, h, generator=gen, device="cuda").bfloat16()
        dpp = torch.randn(rows, generator=gen, device="cuda")
        torch.autograd.backward((out, pp), (dout, dpp))
        back, restore = lt.moe_unpermute(dout, rmap, offsets, counts, dpp, **kw)
        assert torch.equal(x.grad, back) and torch.equal(p.grad, restore), f"permute {kind} {case}"
        g = torch.randn(rows, h, generator=gen, device="cuda").bfloat16().requires_grad_()
        gp = torch.rand(rows, generator=gen, device="cuda").requires_grad_()
        o, r = lt.moe_unpermute(g, rmap, offsets, counts, gp, **kw)
        do = torch.randn(t, h, generator=gen, device="cuda").bfloat16()
        dr = torch.randn(t, e, generator=gen, device="cuda")
        torch.autograd.backward((o, r), (do, dr))
        fwd, fp = lt.moe_permute(do, rmap, offsets, counts, dr, **kw)
        assert torch.equal(g.grad, fwd) and torch.equal(gp.grad, fp), f"unpermute {kind} {case}"


def test_fp8_permute(seed):
    torch = torch_cuda()
    import lingen.torch as lt
    for t, h, e, k, m in ((8192, 2048, 256, 8, 16), (7, 384, 96, 6, 128), (1, 128, 5, 2, 1)):
        probs, rmap, counts, offsets, rows = _map(torch, seed, (t, h, e, k, m), "drop")
        gen = torch.Generator(device="cuda").manual_seed(seed + 3)
        xq = torch.randn(t, h, generator=gen, device="cuda").to(torch.float8_e4m3fn)
        xs = torch.rand(t, h // 128, generator=gen, device="cuda")
        for pow2 in (True, False):
            q, s, pp = lt.moe_permute_fp8(xq, xs, rmap, offsets, counts, probs, top_k=k, multiple=m,
                                          round_scale=pow2)
            wq, wpp = ref.permute(torch, xq.view(torch.uint8), probs, rmap, rows)
            assert torch.equal(q.view(torch.uint8), wq) and torch.equal(pp, wpp)
            zero = 2.0 ** -99 if pow2 else 1e-30
            ws = torch.full((rows, h // 128), zero, device="cuda")
            real = rmap >= 0
            ws[rmap[real].long()] = xs[real.nonzero()[:, 0]]
            assert torch.equal(s, ws)


def test_round_trip(seed):
    """permute then the permute's backward: each token times its expert
    count; unpermute of a permute: the same (small integers, exact)."""
    torch = torch_cuda()
    import lingen.torch as lt
    t, h, e, k, m = 8192, 2048, 256, 8, 16
    probs, rmap, counts, offsets, rows = _map(torch, seed, (t, h, e, k, m), "drop")
    gen = torch.Generator(device="cuda").manual_seed(seed + 4)
    x = torch.randint(-8, 8, (t, h), generator=gen, device="cuda").bfloat16()
    out, _ = lt.moe_permute(x, rmap, offsets, counts, None, top_k=k, multiple=m)
    back, _ = lt.moe_unpermute(out, rmap, offsets, counts, None, top_k=k, multiple=m)
    n = (rmap >= 0).sum(1, keepdim=True)
    assert torch.equal(back, (x.float() * n).bfloat16())


@pytest.mark.parametrize("case", [(8192, 2048, 256, 8, 16), (333, 384, 96, 6, 128), (1, 128, 5, 2, 1)])
def test_permute_quant(case, seed):
    """K4b bit-equal to PyTorch's permute then per-expert quantisation of
    the padded segments (power-of-two scales), out_probs the permute's."""
    torch = torch_cuda()
    import lingen.torch as lt
    from lingen._torchref import experts_quant_loop
    t, h, e, k, m = case
    for kind in ("even", "drop"):
        mask, probs, _ = routing(torch, seed, t, e, k, kind)
        rmap, counts, offsets, row_index, padded = ref.row_map(torch, mask, k, m)
        rows = t * k + e * (m - 1)
        gen = torch.Generator(device="cuda").manual_seed(seed + 5)
        x = torch.randn(t, h, generator=gen, device="cuda").bfloat16()
        q, s, qt, st, op = lt.moe_permute_quant(x, row_index, padded, probs, top_k=k, multiple=m)
        out, pp = ref.permute(torch, x, probs, rmap, rows)
        plist = [int(c) for c in padded.tolist()]
        P = sum(plist)
        assert torch.equal(op[:P], pp[:P])
        if P == 0:  # every token dropped: nothing to quantise
            continue
        wq, ws, wqt, wst = experts_quant_loop(out, plist)
        assert torch.equal(q[:P].view(torch.uint8), wq.view(torch.uint8)), f"q {kind} {case}"
        assert torch.equal(s.reshape(-1)[:P * h // 128], ws), f"s {kind} {case}"
        assert torch.equal(qt.reshape(-1)[:P * h].view(torch.uint8), wqt.view(torch.uint8))
        assert torch.equal(st[:wst.shape[0]], wst), f"st {kind} {case}"
