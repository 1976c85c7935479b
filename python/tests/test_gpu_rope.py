"""qk_norm_rope (K2) on the GPU against a float64 torch reference: forward
and backward at the target shape (S 4096, B 2, H 16, h 4, D 128) and odd
ones, both qkv orders, both head layouts, rotary fraction 0.5 and 1, SiLU;
autograd through lingen.torch against torch autograd of the reference (both
orders, both head layouts, rotary fraction 1, SiLU, one token).
Skipped without torch or a GPU."""
import math

import pytest

import lingen
import reference as ref
from conftest import torch_cuda

CASES = [  # S, B, H, h, D
    (4096, 2, 16, 4, 128),
    (1, 1, 16, 4, 128),
    (7, 3, 12, 4, 64),
    (33, 2, 40, 8, 256),
    (129, 1, 28, 4, 128),
]


def slots(H, h, interleaved):
    """qkv head slot of each q, k, v head."""
    w = H // h
    if interleaved:
        q = [j // w * (w + 2) + j % w for j in range(H)]
        k = [g * (w + 2) + w for g in range(h)]
        v = [g * (w + 2) + w + 1 for g in range(h)]
    else:
        q, k, v = list(range(H)), list(range(H, H + h)), list(range(H + h, H + 2 * h))
    return q, k, v


def reference(torch, qkv, qw, kw, freqs, H, h, eps, rotary, interleaved, transposed, silu,
              mscale=1.0):
    """(q, k, v) [B, S, heads, D] in float64, differentiable in qkv, qw, kw;
    position s takes the angles of freqs row s."""
    x = qkv if not transposed else qkv.transpose(0, 1)  # [B, S, W]
    B, S, W = x.shape
    D = W // (H + 2 * h)
    x = x.reshape(B, S, H + 2 * h, D)
    if silu:
        x = torch.nn.functional.silu(x)
    qs, ks, vs = slots(H, h, interleaved)
    R = int(rotary * D)
    ang = freqs[:, :R // 2].double()  # [S, R/2]
    c, s = torch.cos(ang)[None, :, None, :] * mscale, torch.sin(ang)[None, :, None, :] * mscale

    def norm_rope(u, w):
        r = torch.rsqrt((u * u).mean(-1, keepdim=True) + eps)
        y = u * r * w
        a, b, rest = y[..., :R // 2], y[..., R // 2:R], y[..., R:]
        return torch.cat([a * c - b * s, b * c + a * s, rest], -1)
    return norm_rope(x[:, :, qs], qw), norm_rope(x[:, :, ks], kw), x[:, :, vs]


def inputs(torch, seed, S, B, H, h, D, rotary, transposed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    W = (H + 2 * h) * D
    qkv = torch.randn((S, B, W) if transposed else (B, S, W), generator=g, device="cuda").bfloat16()
    qw = (1 + 0.25 * torch.randn(D, generator=g, device="cuda")).bfloat16()
    kw = (1 + 0.25 * torch.randn(D, generator=g, device="cuda")).bfloat16()
    R = int(rotary * D)
    i = torch.arange(R, device="cuda") % (R // 2)
    f = torch.arange(S, device="cuda")[:, None] * 10000.0 ** (-2.0 * i / R)[None, :]
    return qkv, qw, kw, f.float().contiguous()


@pytest.mark.parametrize("S, B, H, h, D", CASES)
@pytest.mark.parametrize("transposed, interleaved", [(True, True), (False, True), (True, False)])
@pytest.mark.parametrize("rotary, silu", [(0.5, False), (1.0, False), (0.5, True)])
def test_forward_backward(seed, S, B, H, h, D, transposed, interleaved, rotary, silu):
    torch = torch_cuda()
    if S * B > 1024 and (not transposed or not interleaved or silu or rotary != 0.5):
        pytest.skip("variants at the small shapes only")
    qkv, qw, kw, fr = inputs(torch, seed, S, B, H, h, D, rotary, transposed)
    kw_ = dict(rotary_fraction=rotary, interleaved=interleaved, transposed=transposed, silu=silu)
    q, k, v = lingen.qk_norm_rope(qkv, qw, kw, fr, q_heads=H, kv_heads=h, **kw_)
    x64 = qkv.double().requires_grad_()
    qw64, kw64 = qw.double().requires_grad_(), kw.double().requires_grad_()
    rq, rk, rv = reference(torch, x64, qw64, kw64, fr, H, h, 1e-6, rotary, interleaved,
                           transposed, silu)
    for got, want, name in ((q, rq, "q"), (k, rk, "k"), (v, rv, "v")):
        assert got.shape == want.shape, name
        ref.check_rel(got, want.detach(), 2 ** -7, name)
    g = torch.Generator(device="cuda").manual_seed(seed + 1)
    gq, gk, gv = (torch.randn(t.shape, generator=g, device="cuda").bfloat16() for t in (q, k, v))
    dqkv, dqw, dkw = lingen.qk_norm_rope_backward(gq, gk, gv, qkv, qw, kw, fr, **kw_)
    torch.autograd.backward((rq, rk, rv), (gq.double(), gk.double(), gv.double()))
    assert dqkv.shape == qkv.shape and dqw.dtype == torch.float32
    ref.check_rel(dqkv, x64.grad, 2 ** -6, "dqkv")
    ref.check_rel(dqw, qw64.grad, 1e-3 + 2 ** -8 / math.sqrt(S * B), "dq_weight")
    ref.check_rel(dkw, kw64.grad, 1e-3 + 2 ** -8 / math.sqrt(S * B), "dk_weight")
    again = lingen.qk_norm_rope_backward(gq, gk, gv, qkv, qw, kw, fr, **kw_)
    assert torch.equal(again[1], dqw) and torch.equal(again[2], dkw), "weight grads deterministic"


@pytest.mark.parametrize("S, B, H, h, D, rotary, interleaved, transposed, silu", [
    (64, 2, 16, 4, 128, 0.5, True, True, False),   # linghe's facade
    (7, 3, 12, 4, 64, 1.0, False, False, True),    # Qwen3's full rotation, plain heads, [B, S, .], SiLU
    (1, 1, 15, 5, 256, 0.5, True, False, False),   # one token, kv heads not a power of two
])
def test_autograd(seed, S, B, H, h, D, rotary, interleaved, transposed, silu):
    torch = torch_cuda()
    import lingen.torch as lt
    qkv, qw, kw, fr = inputs(torch, seed, S, B, H, h, D, rotary, transposed)
    qkv.requires_grad_()
    qw.requires_grad_()
    kw.requires_grad_()
    q, k, v = lt.qk_norm_rope(qkv, qw, kw, fr, H, h, rotary_fraction=rotary, interleaved=interleaved,
                              transposed=transposed, silu=silu)
    assert q.shape == (B, S, H, D) and k.shape == (B, S, h, D) and v.shape == (B, S, h, D)
    (q.float().square().sum() + k.float().sum() + v.float().sum()).backward()
    x64 = qkv.detach().double().requires_grad_()
    qw64, kw64 = qw.detach().double().requires_grad_(), kw.detach().double().requires_grad_()
    rq, rk, rv = reference(torch, x64, qw64, kw64, fr, H, h, 1e-6, rotary, interleaved, transposed,
                           silu)
    (rq.square().sum() + rk.sum() + rv.sum()).backward()
    ref.check_rel(qkv.grad, x64.grad, 2 ** -5, "dqkv")
    ref.check_rel(qw.grad, qw64.grad, 2 ** -6, "dq_weight")
    ref.check_rel(kw.grad, kw64.grad, 2 ** -6, "dk_weight")


def positions(cu, cp, rank, T):
    """Each packed token's position, as docs/kernels.md K2b defines it: its index
    in its sequence (this rank's rows cu[i] / cp .. cu[i + 1] / cp - 1), the
    zig-zag halves of context parallelism remapped."""
    out = []
    for i in range(len(cu) - 1):
        start, end = cu[i] // cp, cu[i + 1] // cp
        n, h = end - start, (end - start) // 2
        for j in range(n):
            out.append(rank * h + j if j < h or cp == 1 else (2 * cp - 1 - rank) * h + j - h)
    assert len(out) == T
    return out


@pytest.mark.parametrize("lens, cp, rank, mscale", [
    ([4096, 4096], 1, 0, 1.0),        # the target's tokens as two packed sequences
    ([1], 1, 0, 1.0),
    ([5, 0, 300, 1, 77], 1, 0, 0.75),  # an empty one, odd lengths
    ([64, 200, 36], 2, 1, 1.0),        # context parallel: global lengths, this rank's halves
    ([128, 512], 4, 2, 1.25),
    ([3, 0, 2] * 200, 1, 0, 1.0),     # 600 sequences (more than the old bound of 511)
])
def test_varlen(seed, lens, cp, rank, mscale):
    torch = torch_cuda()
    import lingen.torch as lt
    H, h, D = 16, 4, 128
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n * cp)
    T = cu[-1] // cp
    qkv, qw, kw, fr = inputs(torch, seed, T * cp, 1, H, h, D, 0.5, True)
    qkv = qkv[:T, 0].contiguous()  # [T, W]
    cu_t = torch.tensor(cu, dtype=torch.int32, device="cuda")
    kw_ = dict(cu_seqlens=cu_t, cp_size=cp, cp_rank=rank, mscale=mscale)
    q, k, v = lingen.qk_norm_rope(qkv, qw, kw, fr, q_heads=H, kv_heads=h, **kw_)
    assert q.shape == (T, H, D) and k.shape == (T, h, D) and v.shape == (T, h, D)
    pos = torch.tensor(positions(cu, cp, rank, T), device="cuda")
    x64 = qkv.double().requires_grad_()
    qw64, kw64 = qw.double().requires_grad_(), kw.double().requires_grad_()
    rq, rk, rv = reference(torch, x64[:, None], qw64, kw64, fr[pos], H, h, 1e-6, 0.5, True, True,
                           False, mscale)
    for got, want, name in ((q, rq[0], "q"), (k, rk[0], "k"), (v, rv[0], "v")):
        ref.check_rel(got, want.detach(), 2 ** -7, name)
    # the backward through lingen.torch's autograd function
    xt, qwt, kwt = (t.detach().clone().requires_grad_() for t in (qkv, qw, kw))
    lq, lk, lv = lt.qk_norm_rope(xt, qwt, kwt, fr, H, h, cu_seqlens=cu_t, cp_size=cp,
                                 cp_rank=rank, mscale=mscale)
    g = torch.Generator(device="cuda").manual_seed(seed + 1)
    gq, gk, gv = (torch.randn(t.shape, generator=g, device="cuda").bfloat16() for t in (lq, lk, lv))
    torch.autograd.backward((lq, lk, lv), (gq, gk, gv))
    torch.autograd.backward((rq[0], rk[0], rv[0]), (gq.double(), gk.double(), gv.double()))
    assert xt.grad.shape == qkv.shape
    ref.check_rel(xt.grad, x64.grad, 2 ** -6, "dqkv")
    ref.check_rel(qwt.grad, qw64.grad, 2 ** -6, "dq_weight")
    ref.check_rel(kwt.grad, kw64.grad, 2 ** -6, "dk_weight")
