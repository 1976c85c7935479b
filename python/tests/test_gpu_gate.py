"""group_rmsnorm_gate (docs/kernels.md K8) on the GPU against a float64 torch
reference (autograd of the plain formula, independent of lingen's C
reference): forward and backward at the target shape (x [2, 4096, 2048],
4 groups) and odd ones (B = 1 L = 1, B = 3 L = 7, dim 1000 in 5 groups),
the shared weight, gate in x's layout; dw bit-identical across calls; the
autograd function of lingen.torch with x as [batch, seq, heads, head_dim]
(gate transposed or not, the weight per dim or shared, one token).
Skipped without torch or a GPU."""
import pytest

import lingen
import reference as ref
from conftest import torch_cuda

CASES = [  # batch, seq, dim, groups
    (2, 4096, 2048, 4),
    (1, 1, 2048, 4),
    (3, 7, 1000, 5),
    (5, 333, 1024, 4),
    (1, 4097, 120, 3),
]


def reference(torch, x, gate, w, dy, eps, groups, transpose):
    """(y, dx, dgate, dw) in float64 by autograd of the K8 formula."""
    x64 = x.double().requires_grad_()
    g64 = gate.double().requires_grad_()
    w64 = w.double().requires_grad_()
    b, l, dim = x.shape
    d = dim // groups
    g = g64.transpose(0, 1) if transpose else g64
    xg = x64.view(b, l, groups, d)
    r = (xg.square().mean(-1, keepdim=True) + eps).rsqrt()
    wv = w64.view(groups, d) if w.shape[0] == dim else w64.view(1, d)
    y = (xg * r * wv).view(b, l, dim) * torch.sigmoid(g)
    if transpose:
        y = y.transpose(0, 1)
    y.backward(dy.double())
    return y.detach(), x64.grad, g64.grad, w64.grad


def check(torch, got, want, what, rel=2.0 ** -7):
    """Each value within a bf16 rounding of fp32 arithmetic (rel) plus a
    floor of 1% of the RMS (cancellation in dx); and 0.5% in the L2 norm."""
    got = got.double()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    rms = want.square().mean().sqrt().clamp(min=1e-30)
    bad = (got - want).abs() > want.abs() * rel + 1e-2 * rms
    assert not bad.any(), f"{what}: {int(bad.sum())} of {want.numel()} values out of tolerance"
    err = (got - want).norm() / want.norm().clamp(min=1e-30)
    assert err <= 5e-3, f"{what}: relative L2 error {float(err):.3e}"


def inputs(torch, seed, b, l, dim, groups, transpose, shared):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(b, l, dim, generator=gen, device="cuda").bfloat16()
    gshape = (l, b, dim) if transpose else (b, l, dim)
    gate = (torch.randn(gshape, generator=gen, device="cuda") * 2).bfloat16()
    dy = torch.randn(gshape, generator=gen, device="cuda").bfloat16()
    n = dim // groups if shared else dim
    w = (torch.rand(n, generator=gen, device="cuda") + 0.5).bfloat16()
    return x, gate, w, dy


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("transpose", [True, False])
@pytest.mark.parametrize("case", CASES)
def test_group_rmsnorm_gate(seed, case, transpose, shared):
    torch = torch_cuda()
    b, l, dim, groups = case
    x, gate, w, dy = inputs(torch, seed, b, l, dim, groups, transpose, shared)
    y_ref, dx_ref, dg_ref, dw_ref = reference(torch, x, gate, w, dy, 1e-6, groups, transpose)
    y = lingen.group_rmsnorm_gate(x, gate, w, 1e-6, groups=groups, transpose=transpose)
    check(torch, y, y_ref, "y")
    # y = x r w s, a product: the fp32 bound of gen/ref/group_rmsnorm_gate_ref.c (REL = 2^-16)
    ref.check_bf16_rounded(y, y_ref, y_ref.abs() * 2.0 ** -16, "y (bf16, rounded once)")
    dx, dgate, dw = lingen.group_rmsnorm_gate_backward(dy, x, gate, w, 1e-6, groups=groups,
                                                       transpose=transpose)
    check(torch, dx, dx_ref, "dx")
    check(torch, dgate, dg_ref, "dgate")
    assert dw.dtype == torch.float32 and dw.shape == w.shape
    check(torch, dw, dw_ref, "dw", rel=1e-3)
    _, _, dw2 = lingen.group_rmsnorm_gate_backward(dy, x, gate, w, 1e-6, groups=groups,
                                                   transpose=transpose)
    assert torch.equal(dw, dw2), "dw differs between two identical calls"


@pytest.mark.parametrize("b, l, heads, hd, groups, transpose, shared", [
    (2, 77, 16, 128, 4, True, False),
    (3, 7, 5, 40, 5, False, True),   # gate in x's layout, one weight shared by the groups, dim 200
    (1, 1, 16, 128, 4, False, False),
])
def test_autograd_function(seed, b, l, heads, hd, groups, transpose, shared):
    torch = torch_cuda()
    import lingen.torch as lt
    gen = torch.Generator(device="cuda").manual_seed(seed)
    dim = heads * hd
    gshape = (l, b, dim) if transpose else (b, l, dim)
    x = torch.randn(b, l, heads, hd, generator=gen, device="cuda").bfloat16().requires_grad_()
    gate = torch.randn(gshape, generator=gen, device="cuda").bfloat16().requires_grad_()
    n = dim // groups if shared else dim
    w = (torch.rand(n, generator=gen, device="cuda") + 0.5).bfloat16().requires_grad_()
    dy = torch.randn(gshape, generator=gen, device="cuda").bfloat16()
    y = lt.group_rms_norm_gate(x, gate, w, 1e-6, groups, transpose)
    assert y.shape == gshape and y.dtype == torch.bfloat16
    y.backward(dy)
    y_ref, dx_ref, dg_ref, dw_ref = reference(torch, x.detach().reshape(b, l, -1), gate.detach(),
                                              w.detach(), dy, 1e-6, groups, transpose)
    check(torch, y.detach(), y_ref, "y")
    check(torch, x.grad.reshape(b, l, -1), dx_ref, "dx")
    check(torch, gate.grad, dg_ref, "dgate")
    check(torch, w.grad, dw_ref, "dw (bf16)", rel=2.0 ** -7)
    assert x.grad.shape == x.shape and w.grad.dtype == torch.bfloat16
