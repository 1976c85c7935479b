"""rmsnorm_router (docs/kernels.md K3b) on the GPU against float64 torch,
independent of lingen's C reference: y, rms, the logits (of the y written
with precision bf16; of fp32 y within each precision's bound otherwise),
the rowwise copy (and the columnwise one with output="both"), at the target
shape (8192 x 2048 -> 256) and odd ones (M = 1, 127, 8191; hidden 7168,
1000 (a partial last quant block), 8; experts 96, 160, 1, 300); the fused
pass against the composition it replaces (rmsnorm_quant + router_gemm, bit
for bit); and the autograd function of lingen.torch against torch's
autograd of the float64 composition. Skipped without torch or a GPU."""
import pytest

import lingen
import reference as ref
from conftest import torch_cuda

CASES = [  # tokens, hidden, experts
    (8192, 2048, 256),
    (1, 2048, 256),
    (127, 2048, 256),
    (8191, 2048, 256),
    (127, 7168, 256),
    (1000, 1000, 256),
    (127, 2048, 96),
    (1000, 2048, 160),
    (127, 2048, 1),
    (1, 1000, 1),
    (127, 8, 3),
    (1000, 2048, 300),
]

# largest logit error of each precision against fp32 y, of the logits' RMS
# (bf16 y: 2^-9 an element; measured 9e-3 at 2048 -> 256 on the CPU; two
# terms 2^-17), plus the tensor cores' fp32 sums of every term's products
# (all that is left with three terms): each add's rounding is at most
# 2^-23 of a partial sum, and the errors of the terms * hidden adds grow as a
# random walk; 8 covers 4 sigma of partial sums up to twice the RMS (H200:
# 9.99e-5 at hidden 7168, where this gives 1.4e-4)
TOL = {"bf16": 2e-2, "bf16x2": 1e-4, "bf16x3": 0.0}


def tol(precision, hidden):
    terms = {"bf16": 1, "bf16x2": 2, "bf16x3": 3}[precision]
    return TOL[precision] + 8 * 2.0 ** -23 * (terms * hidden) ** 0.5


def inputs(torch, seed, m, k, n):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
    w = (torch.rand(k, generator=g, device="cuda") * 2 - 0.5).bfloat16()
    rw = (torch.randn(n, k, generator=g, device="cuda") / k ** 0.5).bfloat16()
    return x, w, rw


def check_abs(got, want, tol, what, rel=0.0):
    """|got - want| <= tol RMS(want) + rel |want| elementwise (rel: a bf16
    output's rounding, up to 2^-8 of the value itself)."""
    got = got.double()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    rms = want.square().mean().sqrt().clamp(min=1e-30) if want.numel() else 1.0
    err = (got - want).abs()
    bad = err > tol * rms + rel * want.abs()
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {want.numel()} values out of tolerance; "
                           f"max error {float(err.max()) / float(rms):.3g} of the RMS")


def padded(y64):
    """y [tokens, hidden] padded with zero features to whole 1x128 blocks."""
    import torch
    t, h = y64.shape
    hp = (h + 127) // 128 * 128
    out = torch.zeros(t, hp, dtype=y64.dtype, device=y64.device)
    out[:, :h] = y64
    return out


@pytest.mark.parametrize("precision", ["bf16", "bf16x2", "bf16x3"])
@pytest.mark.parametrize("case", CASES)
def test_forward(seed, case, precision):
    torch = torch_cuda()
    from lingen import _torchref as R
    m, k, n = case
    if precision != "bf16" and m * k * n > 1 << 31 and m != 8192:
        pytest.skip("the target shape covers the big ones")
    x, w, rw = inputs(torch, seed, m, k, n)
    y, rms, logits, q, s, qt, st = lingen.rmsnorm_router(x, w, rw, precision=precision)
    assert qt is None and st is None
    assert y.dtype == torch.bfloat16 and y.shape == (m, k) and rms.shape == (m,)
    assert logits.dtype == torch.float32 and logits.shape == (m, n)
    assert q.dtype == torch.float8_e4m3fn and q.shape == (m, k)
    assert s.shape == ((k + 127) // 128, m)
    y64, r64 = ref.rmsnorm(x, w)
    ref.check_rel(rms, r64, 1e-6, "rms")
    ref.check_bf16(y, y64, "y")
    check_abs(logits, y64 @ rw.double().T, tol(precision, k), f"logits ({precision}) vs fp32 y")
    if precision == "bf16":  # exactly router_gemm's of the y written, but for fp32 sums
        check_abs(logits, y.double() @ rw.double().T, 5e-5, "logits vs the y written")
    yp = padded(y64)
    s_ref = R.row_scales(yp, True)
    ref.check_scales(s, s_ref, "s")
    per = s.double().T.repeat_interleave(128, dim=1)[:, :k]
    ref.check_q(q, y64, per, "q")


@pytest.mark.parametrize("case", [(8192, 2048, 256), (127, 7168, 256), (1000, 2048, 160)])
def test_both_copies(seed, case):
    torch = torch_cuda()
    from lingen import _torchref as R
    m, k, n = case
    x, w, rw = inputs(torch, seed, m, k, n)
    for round_scale in (True, False):
        y, rms, logits, q, s, qt, st = lingen.rmsnorm_router(x, w, rw, output="both",
                                                             round_scale=round_scale)
        y64, _ = ref.rmsnorm(x, w)
        ref.check_scales(s, R.row_scales(y64, round_scale), "s")
        ref.check_scales(st, R.col_scales(y64, round_scale), "st")
        per = st.double().repeat_interleave(128, dim=0)[:m]
        assert qt.shape == (k, R.pitch(m))  # rows round_up(m, 128) apart, zeros past m
        ref.check_q(qt[:, :m].T, y64, per, "qt")
        assert not qt[:, m:].view(torch.uint8).any(), "qt: the tail past the tokens not 0"


@pytest.mark.parametrize("case", [(8192, 2048, 256), (127, 1024, 96)])
def test_is_the_composition(seed, case):
    """The fused pass gives the bits of rmsnorm_quant's rms and copies and
    of the plain RMSNorm's y; its logits are router_gemm's of that y."""
    torch = torch_cuda()
    m, k, n = case
    x, w, rw = inputs(torch, seed, m, k, n)
    y, rms, logits, q, s, qt, st = lingen.rmsnorm_router(x, w, rw, output="both")
    q1, s1, rms1, qt1, st1 = lingen.rmsnorm_quant(x, w)
    y1, rms2 = lingen.rmsnorm(x, w)
    # the fp64 sums of squares run in another order: r may differ in its last
    # bit for a rare row (about 2^-18 of them); compare the others bit for bit
    same = rms == rms1
    assert int((~same).sum()) <= max(1, m // 1000), "rms differs from rmsnorm_quant's"
    u8 = lambda t: t.view(torch.uint8)  # noqa: E731
    same2 = rms == rms2
    assert int((~same2).sum()) <= max(1, m // 1000), "rms differs from rmsnorm's"
    assert torch.equal(y[same2], y1[same2]), "y differs from rmsnorm's"
    assert torch.equal(u8(q)[same], u8(q1)[same]), "q differs from rmsnorm_quant's"
    assert torch.equal(s[:, same], s1[:, same]), "s differs from rmsnorm_quant's"
    blocks = same[:(m // 128) * 128].view(-1, 128).all(1)  # whole 128-token blocks alike
    if blocks.any():
        nb = int(blocks.numel())
        assert torch.equal(st[:nb][blocks], st1[:nb][blocks]), "st differs from rmsnorm_quant's"
        cols = blocks.repeat_interleave(128)
        assert torch.equal(u8(qt)[:, :nb * 128][:, cols], u8(qt1)[:, :nb * 128][:, cols]), \
            "qt differs from rmsnorm_quant's"
    check_abs(logits, lingen.router_gemm(y, rw).double(), 5e-5, "logits vs router_gemm(y)")


def test_autograd_function(seed):
    torch = torch_cuda()
    import lingen.torch as lt
    g = torch.Generator(device="cuda").manual_seed(seed)
    b, t, k, n = 2, 777, 2048, 256
    x = torch.randn(b, t, k, generator=g, device="cuda").bfloat16().requires_grad_()
    w = (torch.rand(k, generator=g, device="cuda") + 0.5).bfloat16().requires_grad_()
    rw = (torch.randn(n, k, generator=g, device="cuda") / k ** 0.5).bfloat16().requires_grad_()
    gy = torch.randn(b, t, k, generator=g, device="cuda").bfloat16()
    gl = torch.randn(b, t, n, generator=g, device="cuda")
    y, rms, logits, q, s, qt, st = lt.rms_norm_router(x, w, rw, precision="bf16x3")
    assert y.shape == x.shape and logits.shape == (b, t, n) and q.shape == x.shape
    torch.autograd.backward((y, logits), (gy, gl))
    # float64 autograd of the composition, on the y lingen wrote for the router's dw
    x64 = x.detach().double().requires_grad_()
    w64 = w.detach().double().requires_grad_()
    rw64 = rw.detach().double().requires_grad_()
    r = (x64.square().mean(-1, keepdim=True) + 1e-6).rsqrt()
    y64 = x64 * r * w64
    y64.retain_grad()
    l64 = y64 @ rw64.T
    torch.autograd.backward((y64, l64), (gy.double(), gl.double()))
    check_abs(logits.detach(), l64.detach(), tol("bf16x3", k), "logits")
    # dx: y's gradient is rounded to bf16 twice (the router's dx, then its sum
    # with gy), each 2^-9 of itself, and reaches dx_i times r w_i; dx itself is
    # rounded to bf16 (2^-9): where the RMSNorm's two terms cancel, these
    # dominate any bound of dx's own RMS
    dyr64 = gl.double() @ rw64.detach()
    bound = 2.0 ** -8 * ((r * w64).detach().abs() * (dyr64.abs() + y64.grad.abs())
                         + x64.grad.abs()) + 1e-3 * x64.grad.square().mean().sqrt()
    err = (x.grad.double() - x64.grad).abs()
    bad = err > bound
    assert not bad.any(), (f"dx: {int(bad.sum())} of {err.numel()} values outside their bound; "
                           f"max error/bound {float((err / bound).max()):.3g}")
    # bf16 gradients: their own rounding (2^-8 of a value at most) beside the
    # sums of bf16-rounded terms (a 5-sigma element of d route_w reached 2.3e-2
    # of the RMS at LINGEN_SEED=1590072848 under a 2e-2 RMS-only bound)
    check_abs(w.grad, w64.grad, 2e-2, "dw", rel=2.0 ** -8)
    check_abs(rw.grad, rw64.grad, 2e-2, "d route_w", rel=2.0 ** -8)
    # only the logits used: y's gradient is None
    x.grad = None
    _, _, logits2, *_ = lt.rms_norm_router(x, w, rw)
    logits2.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape
    # under torch.compile: the custom op traces without graph breaks
    # (rms_norm_router_forward has no autograd: inputs that need none)
    f = torch.compile(lambda a, b, c: lt.rms_norm_router_forward(a, b, c)[2].sum(), fullgraph=True)
    assert torch.allclose(f(x.detach(), w.detach(), rw.detach()), logits2.detach().sum(), rtol=1e-4)
