"""swiglu_quant (K7) and batch_swiglu_quant (K6) on the GPU against a torch
reference independent of lingen's C one (float64 SwiGLU, rounded to fp32,
then the PyTorch quantiser of lingen.benches.quant per tensor or per
expert): payloads and power-of-two scales equal but for a rare rounding
boundary (the GPU's exp is approximate), every payload within one e4m3
step; dprob and bf16 dx close; the autograd Functions of lingen.torch
(dx, dprob from the gradient carrier; the quantised dx copies to
grad_sink). Target shapes and odd ones (1, 129, 333 tokens; counts 0, 1,
127, 128, 129). Skipped without torch or a GPU."""
import pytest

import lingen
from conftest import torch_cuda


def swiglu64(torch, x, g=None, p=None):
    """The forward's y (g None) or the backward's (dx, dp) in float64."""
    n = x.shape[-1] // 2
    a, u = x[:, :n].double(), x[:, n:].double()
    pp = p.double().view(-1, 1) if p is not None else 1.0
    s = torch.sigmoid(a)
    if g is None:
        return a * s * u * pp
    gd = g.double()
    dx = torch.cat([gd * u * pp * s * (1 + a * (1 - s)), gd * a * s * pp], dim=1)
    return dx, (a * s * u * gd).sum(1, keepdim=True)


def quant_experts(torch, y, counts):
    """The torch quantiser of each expert's rows (power-of-two scales), laid
    out per expert (docs/kernels.md 1.3): (q, s flat, qt flat, st rows)."""
    from lingen import _torchref
    return _torchref.experts_quant_loop(y, counts)


def same_payloads(torch, got, want, what, scales=None):
    """e4m3 bytes: at most 1e-4 differ (a value on a rounding boundary), each
    by one step, but for the 128 payloads of a block whose scale itself fell
    on the other side of a power-of-two boundary (scales: (got, want) of this
    copy; same_scales bounds how many may differ)."""
    g, w = got.reshape(-1).view(torch.uint8).long(), want.reshape(-1).view(torch.uint8).long()
    diff = g != w
    assert diff.float().mean() <= 1e-4, f"{what}: {int(diff.sum())} of {g.numel()} payloads differ"

    def ordinal(c):  # sign-magnitude code -> a line of consecutive e4m3 values
        return torch.where(c >= 128, -(c & 127), c & 127)
    steps = (ordinal(g) - ordinal(w)).abs()
    moved = 128 * int((scales[0].reshape(-1) != scales[1].reshape(-1)).sum()) if scales else 0
    assert int((steps > 1).sum()) <= moved, \
        f"{what}: {int((steps > 1).sum())} payloads more than one e4m3 step off ({moved // 128} scales differ)"


def same_scales(torch, got, want, what):
    bad = got != want
    assert bad.float().mean() <= 1e-3, f"{what}: {int(bad.sum())} of {got.numel()} scales differ"


K7_CASES = [(8192, 512), (8192, 2048), (1, 512), (129, 128), (333, 384)]


@pytest.mark.parametrize("m,n", K7_CASES)
def test_k7_forward_backward(m, n):
    torch = torch_cuda()
    from lingen._torchref import quant
    gen = torch.Generator(device="cuda").manual_seed(m * 31 + n)
    x = (torch.randn(m, 2 * n, generator=gen, device="cuda") * 2).bfloat16()
    g = torch.randn(m, n, generator=gen, device="cuda").bfloat16()
    q, s, qt, st = lingen.swiglu_quant(x)
    rq, rs, rqt, rst = quant(swiglu64(torch, x).float())
    same_payloads(torch, q, rq, "q", (s, rs)), same_payloads(torch, qt, rqt, "qt", (st, rst))
    same_scales(torch, s, rs, "s"), same_scales(torch, st, rst, "st")
    dxq, dxs, dxqt, dxst, dx = lingen.swiglu_quant_backward(g, x, dx_bf16=True)
    rdx, _ = swiglu64(torch, x, g)
    rq, rs, rqt, rst = quant(rdx.float())
    same_payloads(torch, dxq, rq, "dxq", (dxs, rs))
    same_payloads(torch, dxqt, rqt, "dxqt", (dxst, rst))
    same_scales(torch, dxs, rs, "dxs"), same_scales(torch, dxst, rst, "dxst")
    torch.testing.assert_close(dx.float(), rdx.float(), rtol=2 ** -7, atol=1e-6)


@pytest.mark.parametrize("output", ["rowwise", "columnwise"])
def test_k7_outputs(output):
    torch = torch_cuda()
    x = torch.randn(333, 1024, device="cuda").bfloat16()
    q, s, qt, st = lingen.swiglu_quant(x, output=output)
    assert (q is None) == (output == "columnwise") and (qt is None) == (output == "rowwise")


def k6_counts(m, experts, gen, torch):
    special = [0, 1, 127, 128, 129]
    counts = [c for c in special[:experts]]
    left = m - sum(counts)
    assert left >= 0
    rest = torch.rand(experts - len(counts), generator=gen, device="cuda").cpu()
    share = (rest / rest.sum() * left).floor().long().tolist() if len(rest) else []
    counts += share
    counts[-1] += m - sum(counts)
    return counts


@pytest.mark.parametrize("m,n,experts", [(65536, 512, 256), (1000, 256, 96), (385, 128, 5),
                                         (20000, 512, 160), (1, 128, 1)])
def test_k6_forward_backward(m, n, experts):
    torch = torch_cuda()
    gen = torch.Generator(device="cuda").manual_seed(m + n + experts)
    counts = k6_counts(m, experts, gen, torch) if m >= 385 else [m] + [0] * (experts - 1)
    cnt = torch.tensor(counts, dtype=torch.int32, device="cuda")
    x = (torch.randn(m, 2 * n, generator=gen, device="cuda") * 2).bfloat16()
    p = torch.rand(m, 1, generator=gen, device="cuda")
    g = torch.randn(m, n, generator=gen, device="cuda").bfloat16()
    q, s, qt, st = lingen.batch_swiglu_quant(x, p, cnt)
    rq, rs, rqt, rst = quant_experts(torch, swiglu64(torch, x, p=p).float(), counts)
    rows = rst.shape[0]
    same_payloads(torch, q, rq, "q", (s, rs))
    same_payloads(torch, qt.view(-1), rqt, "qt", (st[:rows], rst))
    same_scales(torch, s.view(-1), rs, "s"), same_scales(torch, st[:rows], rst, "st")
    dxq, dxs, dp, dxqt, dxst = lingen.batch_swiglu_quant_backward(g, x, p, cnt)
    rdx, rdp = swiglu64(torch, x, g, p)
    rq, rs, rqt, rst = quant_experts(torch, rdx.float(), counts)
    same_payloads(torch, dxq, rq, "dxq", (dxs, rs))
    same_payloads(torch, dxqt.view(-1), rqt, "dxqt", (dxst[:rows], rst))
    same_scales(torch, dxs.view(-1), rs, "dxs"), same_scales(torch, dxst[:rows], rst, "dxst")
    torch.testing.assert_close(dp.double(), rdp, rtol=1e-4, atol=1e-4 * float(rdp.abs().mean() + 1))
    again = lingen.batch_swiglu_quant_backward(g, x, p, cnt)[2]
    assert torch.equal(again, dp)  # deterministic


def test_autograd():
    torch = torch_cuda()
    import lingen.torch as lt
    x = (torch.randn(2, 333, 1024, device="cuda") * 2).bfloat16().requires_grad_()
    g = torch.randn(2, 333, 512, device="cuda").bfloat16()
    sunk = []
    y, q, s, qt, st = lt.swiglu_quant(x, grad_sink=lambda *c: sunk.append(c))
    assert y.shape == (2, 333, 512) and q.shape == (2, 333, 512) and qt.shape == (512, 768)
    y.backward(g)
    rdx, _ = swiglu64(torch, x.detach().view(-1, 1024), g.view(-1, 512))
    torch.testing.assert_close(x.grad.view(-1, 1024).float(), rdx.float(), rtol=2 ** -7, atol=1e-6)
    assert len(sunk) == 1 and sunk[0][0].shape == (666, 1024)

    counts = [0, 1, 127, 128, 129, 0, 281]
    cnt = torch.tensor(counts, dtype=torch.int32, device="cuda")
    x = (torch.randn(666, 1024, device="cuda") * 2).bfloat16().requires_grad_()
    p = torch.rand(666, device="cuda", requires_grad=True)
    g = torch.randn(666, 512, device="cuda").bfloat16()
    y, q, s, qt, st = lt.batch_swiglu_quant(x, p, cnt)
    y.backward(g)
    rdx, rdp = swiglu64(torch, x.detach(), g, p.detach())
    torch.testing.assert_close(x.grad.float(), rdx.float(), rtol=2 ** -7, atol=1e-6)
    assert p.grad.shape == (666,)
    torch.testing.assert_close(p.grad.double(), rdp.view(-1), rtol=1e-4, atol=1e-3)
