"""qk_norm_rope (K2) on the GPU against a float64 torch reference: forward
and backward at the target shape (S 4096, B 2, H 16, h 4, D 128) and odd
ones, both qkv orders, both head layouts, rotary fraction 0.5 and 1, SiLU;
autograd through lingen.torch against torch autograd of the reference.
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


def reference(torch, qkv, qw, kw, freqs, H, h, eps, rotary, interleaved, transposed, silu):
    """(q, k, v) [B, S, heads, D] in float64, differentiable in qkv, qw, kw."""
    x = qkv if not transposed else qkv.transpose(0, 1)  # [B, S, W]
    B, S, W = x.shape
    D = W // (H + 2 * h)
    x = x.reshape(B, S, H + 2 * h, D)
    if silu:
        x = torch.nn.functional.silu(x)
    qs, ks, vs = slots(H, h, interleaved)
    R = int(rotary * D)
    ang = freqs[:, :R // 2].double()  # [S, R/2]
    c, s = torch.cos(ang)[None, :, None, :], torch.sin(ang)[None, :, None, :]

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


def test_autograd(seed):
    torch = torch_cuda()
    import lingen.torch as lt
    S, B, H, h, D = 64, 2, 16, 4, 128
    qkv, qw, kw, fr = inputs(torch, seed, S, B, H, h, D, 0.5, True)
    qkv.requires_grad_()
    qw.requires_grad_()
    kw.requires_grad_()
    q, k, v = lt.qk_norm_rope(qkv, qw, kw, fr, H, h)
    (q.float().square().sum() + k.float().sum() + v.float().sum()).backward()
    x64 = qkv.detach().double().requires_grad_()
    qw64, kw64 = qw.detach().double().requires_grad_(), kw.detach().double().requires_grad_()
    rq, rk, rv = reference(torch, x64, qw64, kw64, fr, H, h, 1e-6, 0.5, True, True, False)
    (rq.square().sum() + rk.sum() + rv.sum()).backward()
    ref.check_rel(qkv.grad, x64.grad, 2 ** -5, "dqkv")
    ref.check_rel(qw.grad, qw64.grad, 2 ** -6, "dq_weight")
    ref.check_rel(kw.grad, kw64.grad, 2 ** -6, "dk_weight")
