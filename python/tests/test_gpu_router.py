"""router_gemm (docs/kernels.md K3) on the GPU against float64 torch (x . w^T
and its gradients, independent of lingen's C reference): the forward and
the backward at each precision, at the target shape (8192 x 2048 -> 256)
and odd ones (M = 1, 127, 8191; K = 7168, 1000; N = 96, 160, 1), dw
bit-identical across calls, each precision's measured error beside
linghe's tf32, dx or dw alone, and the autograd function of
lingen.torch with x as [batch, seq, hidden]. Skipped without torch or a GPU."""
import pytest

import lingen
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
]

# the bf16 terms each backward precision splits dy into (docs/kernels.md K3:
# bf16 rounds dy, bf16x2 keeps 16 significant bits, bf16x3 all of fp32;
# tf32 rounds dy to tf32 first, which 2 terms hold exactly)
TERMS = {"bf16": 1, "bf16x2": 2, "bf16x3": 3, "tf32": 2}


def tf32(torch, v):
    """fp32 v rounded to tf32 as cvt.rna.tf32.f32 (nearest, ties away)."""
    return ((v.float().view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


def dy_terms(torch, dy, n, precision=None):
    """dy as the kernel multiplies it: the sum of its first n bf16 terms
    (each the rounding of what the terms before leave; of its tf32 rounding
    at precision "tf32"), in float64."""
    left = tf32(torch, dy) if precision == "tf32" else dy.float()
    total = torch.zeros_like(dy, dtype=torch.float64)
    for _ in range(n):
        t = left.bfloat16().float()
        total, left = total + t.double(), left - t
    return total


def inputs(torch, seed, m, k, n):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, generator=gen, device="cuda").bfloat16()
    w = (torch.randn(n, k, generator=gen, device="cuda") / n ** 0.5).bfloat16()
    dy = torch.randn(m, n, generator=gen, device="cuda")
    return x, w, dy


def check(torch, got, want, what, tol, rel=0.0):
    """Each value within tol of the reference's RMS (plus rel of itself)."""
    got = got.double()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    rms = want.square().mean().sqrt().clamp(min=1e-30) if want.numel() else 1.0
    err = (got - want).abs()
    bad = err > tol * rms + rel * want.abs()
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {want.numel()} values out of tolerance; "
                           f"max error {float(err.max()) / float(rms):.3g} of the RMS")


@pytest.mark.parametrize("case", CASES)
def test_forward(seed, case):
    torch = torch_cuda()
    m, k, n = case
    x, w, _ = inputs(torch, seed, m, k, n)
    y = lingen.router_gemm(x, w)
    assert y.dtype == torch.float32 and y.shape == (m, n)
    check(torch, y, x.double() @ w.double().T, "logits", 5e-5)


@pytest.mark.parametrize("precision", ["bf16", "bf16x2", "bf16x3", "tf32"])
@pytest.mark.parametrize("case", CASES)
def test_backward(seed, case, precision):
    torch = torch_cuda()
    m, k, n = case
    if precision != "bf16" and m * k * n > 1 << 31 and m != 8192:
        pytest.skip("the target shape covers the big ones")
    x, w, dy = inputs(torch, seed, m, k, n)
    dx, dw = lingen.router_gemm_backward(dy, x, w, precision=precision)
    assert dx.dtype == torch.bfloat16 and dx.shape == (m, k)
    assert dw.dtype == torch.float32 and dw.shape == (n, k)
    # only the fp32 sums (and dx's bf16 rounding) differ from float64 sums of
    # the declared products
    g = dy_terms(torch, dy, TERMS[precision], precision)
    check(torch, dx, g @ w.double(), "dx", 2e-5, rel=2.0 ** -8)
    # dw sums over the m tokens in fp32 (slices of them, then the slices):
    # rounding errors grow as a random walk, about sqrt(m)
    check(torch, dw, g.T @ x.double(), "dw", 2e-5 * max(1.0, (m / 1024) ** 0.5))
    _, dw2 = lingen.router_gemm_backward(dy, x, w, precision=precision)
    assert torch.equal(dw, dw2), "dw differs between two identical calls"


def test_precision_errors(seed):
    """What each backward precision loses against dx, dw of the fp32 dy
    (float64), measured on the GPU beside linghe's precision (tl.dot's
    default TF32: dy rounded to tf32; the upcast bf16 operands are exact),
    as the largest error over the rms, printed (pytest -s): dw orders bf16 >
    tf32 > bf16x2, and precision tf32 loses what linghe's does (the CPU
    reference's figures: bf16 7e-3, tf32 9e-4, bf16x2 1e-5, bf16x3 2e-7, in
    router_gemm.c's header; here the tensor cores' fp32 sums of 1024 tokens
    add up to ~5e-5 to the last two); dx is bf16, its rounding (~2^-9)
    dominates."""
    torch = torch_cuda()
    m, k, n = 1024, 2048, 256
    x, w, dy = inputs(torch, seed, m, k, n)
    d64 = dy.double()
    want_dx, want_dw = d64 @ w.double(), d64.T @ x.double()

    def err(got, want):
        return float((got.double() - want).abs().max() / want.square().mean().sqrt())

    # linghe's: dy rounded to tf32 (cvt.rna: nearest, ties away), float64 sums
    t32 = tf32(torch, dy).double()
    tf_dx, tf_dw = (t32 @ w.double()).bfloat16(), (t32.T @ x.double()).float()
    errs = {"linghe": (err(tf_dx, want_dx), err(tf_dw, want_dw))}
    for p in TERMS:
        dx, dw = lingen.router_gemm_backward(dy, x, w, precision=p)
        errs[p] = (err(dx, want_dx), err(dw, want_dw))
    for p, (ex, ew) in errs.items():
        print(f"precision {p:6}: dw {ew:.3g}, dx {ex:.3g} of the rms")
    dw_err = {p: e[1] for p, e in errs.items()}
    assert dw_err["bf16"] > 2 * dw_err["linghe"] > 8 * dw_err["bf16x2"], dw_err
    # precision tf32 is linghe's products: only the sums' order differs
    assert abs(dw_err["tf32"] - dw_err["linghe"]) < 0.1 * dw_err["linghe"], dw_err
    # bf16x2 and bf16x3: the tensor cores' fp32 sums (each k16 step may
    # truncate half an ulp) bound them, as the C reference's tolerance says
    assert max(dw_err["bf16x2"], dw_err["bf16x3"]) < 5e-5, dw_err
    assert all(e[0] < 4e-2 for e in errs.values()), errs


def test_one_output(seed):
    torch = torch_cuda()
    x, w, dy = inputs(torch, seed, 8192, 2048, 256)
    dx, dw = lingen.router_gemm_backward(dy, x, w)
    dx1, none = lingen.router_gemm_backward(dy, x, w, dw=False)
    assert none is None and torch.equal(dx, dx1)
    none, dw1 = lingen.router_gemm_backward(dy, x, w, dx=False)
    assert none is None and torch.equal(dw, dw1)


def test_autograd_function(seed):
    torch = torch_cuda()
    import lingen.torch as lt
    gen = torch.Generator(device="cuda").manual_seed(seed)
    b, s, k, n = 2, 777, 2048, 256
    x = torch.randn(b, s, k, generator=gen, device="cuda").bfloat16().requires_grad_()
    w = (torch.randn(n, k, generator=gen, device="cuda") / 16).bfloat16().requires_grad_()
    dy = torch.randn(b, s, n, generator=gen, device="cuda")
    y = lt.router_gemm(x, w, "bf16x3")
    assert y.shape == (b, s, n) and y.dtype == torch.float32
    y.backward(dy)
    x64, w64, d64 = x.detach().double(), w.detach().double(), dy.double()
    check(torch, y.detach(), x64 @ w64.T, "logits", 5e-5)
    check(torch, x.grad, d64 @ w64, "dx", 2e-5, rel=2.0 ** -8)
    check(torch, w.grad, (d64.reshape(-1, n).T @ x64.reshape(-1, k)), "dw (bf16)", 2e-5,
          rel=2.0 ** -8)
    assert x.grad.shape == x.shape and w.grad.dtype == torch.bfloat16
    # under torch.compile: the custom ops trace without graph breaks
    f = torch.compile(lambda a, b: lt.router_gemm(a, b).sum(), fullgraph=True)
    assert torch.allclose(f(x, w), y.detach().sum(), rtol=1e-4)
