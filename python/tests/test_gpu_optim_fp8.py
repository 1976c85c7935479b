"""lingen.optim.AdamW(fp8_weights=True) on the GPU (the generated adamw_fp8
kernel): weights marked as lingen.nn marks its FP8 weights ([N, K] with N
not a multiple of 128, expert weights [E, N, K]; bf16 and fp32 weights,
fp32 and bf16 moments, bf16 gradients) stepped alike by the option and
without it (the adamw kernel), bit for bit, the state too; the copies the
step records equal fp8_quant_weight's of the new weight (lingen.nn's
quant_weight with no copies); the forward of Fp8Linear and of the FP8 MoE
takes them (no fp8_quant_weight launch) and quantises again a weight
changed in place. Skipped without torch or a GPU."""
import pytest

from conftest import torch_cuda


def _weights(torch, dtype, seed=0):
    from lingen.nn import _k
    g = torch.Generator().manual_seed(seed)
    shapes = [(1000, 384), (4, 256, 512), (130, 128)]
    out = [torch.nn.Parameter((torch.randn(s, generator=g) * 0.05).to("cuda", dtype))
           for s in shapes]
    for w in out:
        _k.mark_fp8(w)
    out.append(torch.nn.Parameter(torch.randn(300, generator=g).to("cuda", dtype)))  # not FP8
    return out


def _steps(torch, opt, params, n, gdt):
    for s in range(n):
        g = torch.Generator().manual_seed(100 + s)
        for p in params:
            if gdt != p.dtype and hasattr(p, "grad_dtype"):
                p.grad_dtype = None
            p.grad = torch.randn(p.shape, generator=g).to("cuda", gdt)
        opt.step()


def _bytes(torch, t):
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


@pytest.mark.parametrize("dtype,gdt,moments", [("bfloat16", "bfloat16", "bf16"),
                                               ("bfloat16", "bfloat16", "fp32"),
                                               ("float32", "float32", "fp32"),
                                               ("float32", "bfloat16", "bf16")])
def test_against_adamw(dtype, gdt, moments):
    torch = torch_cuda()
    import lingen.optim
    from lingen import _torchref as Q
    from lingen.nn import _k
    dt, gt = getattr(torch, dtype), getattr(torch, gdt)
    a, b = _weights(torch, dt), _weights(torch, dt)
    kw = dict(lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1, moments=moments)
    oa = lingen.optim.AdamW(a, fp8_weights=True, **kw)
    ob = lingen.optim.AdamW(b, **kw)
    _steps(torch, oa, a, 3, gt)
    _steps(torch, ob, b, 3, gt)
    for x, y in zip(a, b):
        assert torch.equal(x, y)
        for k in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(oa.state[x][k], ob.state[y][k])
    for x in a[:3]:
        c = _k.weight_copies(x)
        assert c is not None
        x.__dict__.pop("_lingen_fp8_copies")
        if dt == torch.bfloat16:  # fp8_quant_weight's kernel on the new weight
            want = _k.quant_weight(x)
        else:  # an fp32 weight's copies are of its fp32 values: lingen.nn's CPU quantiser
            want = Q.weight(x.cpu()) if x.dim() == 2 else Q.weight_experts(x.cpu())
        for got, ref in zip(c, want):
            assert got.shape == ref.shape
            assert torch.equal(_bytes(torch, got).cpu(), _bytes(torch, ref).cpu())
    assert _k.weight_copies(a[3]) is None


def test_forward_uses_copies(monkeypatch):
    torch = torch_cuda()
    import lingen.optim
    import lingen.torch as lt
    from lingen.nn import Fp8Linear, MoE
    torch.manual_seed(0)
    lin = Fp8Linear(512, 384, device="cuda")
    moe = MoE(512, 8, 2, 256).cuda()
    params = list(lin.parameters()) + list(moe.parameters())
    opt = lingen.optim.AdamW(params, lr=1e-3, moments="bf16", fp8_weights=True)
    x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)

    def step():
        (lin(x).float().square().mean() + moe(x).float().square().mean()).backward()
        opt.step()
        opt.zero_grad()

    step()
    calls = []
    real = lt.fp8_quant_weight
    monkeypatch.setattr(lt, "fp8_quant_weight", lambda *a, **k: calls.append(1) or real(*a, **k))
    step()
    y_copies = lin(x)  # the second step's copies
    assert not calls
    with torch.no_grad():
        lin.weight.mul_(0.5)
    lin(x)
    assert len(calls) == 1
    with torch.no_grad():
        lin.weight.mul_(2.0)  # back (exact): the copies' weight, but quantised again
    torch.testing.assert_close(lin(x), y_copies, rtol=0, atol=0)
    assert len(calls) == 2


def test_refresh_fp8_copies():
    """Weights copied back outside the optimiser: refresh_fp8_copies writes
    their copies into the step's own buffers (same addresses: what a
    captured graph reads), equal to the forward's own quantisation."""
    torch = torch_cuda()
    import lingen.optim
    from lingen.nn import _k
    params = _weights(torch, torch.bfloat16)
    saved = [p.detach().clone() for p in params]
    opt = lingen.optim.AdamW(params, lr=1e-2, moments="bf16", fp8_weights=True)
    _steps(torch, opt, params, 2, torch.bfloat16)
    fp8 = [p for p in params if _k.weight_copies(p) is not None]
    assert fp8
    before = {p: [c.data_ptr() for c in _k.weight_copies(p)] for p in fp8}
    with torch.no_grad():
        for p, p0 in zip(params, saved):
            p.copy_(p0)
    opt.refresh_fp8_copies()
    for p in fp8:
        got = _k.weight_copies(p)
        assert [c.data_ptr() for c in got] == before[p]
        p.__dict__.pop("_lingen_fp8_copies")
        for g, want in zip(got, _k.quant_weight(p)):
            assert torch.equal(_bytes(torch, g), _bytes(torch, want))


def test_release_grads():
    """release_grads: the same weights, state and copies as the default
    (persistent buffers); the FP8 weights' gradients None after the step,
    the copies taken by the forward (none left on the weight)."""
    torch = torch_cuda()
    import lingen.optim
    from lingen.nn import _k
    a, b = _weights(torch, torch.bfloat16), _weights(torch, torch.bfloat16)
    kw = dict(lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1, moments="bf16", fp8_weights=True)
    oa = lingen.optim.AdamW(a, release_grads=True, **kw)
    ob = lingen.optim.AdamW(b, **kw)
    _steps(torch, oa, a, 3, torch.bfloat16)
    _steps(torch, ob, b, 3, torch.bfloat16)
    for i, (x, y) in enumerate(zip(a, b)):
        assert torch.equal(x, y)
        assert (x.grad is None) == (i < 3)
        if i < 3:
            for got, ref in zip(_k.weight_copies(x), _k.weight_copies(y)):
                assert got.shape == ref.shape and got.data_ptr() != ref.data_ptr()
                assert torch.equal(_bytes(torch, got), _bytes(torch, ref))
            _k.quant_weight(x)
            assert _k.weight_copies(x) is None and "_lingen_fp8_buffers" not in x.__dict__


def test_transposed_in_backward():
    """transposed_in_backward: the forward gets q and s only, the backward
    quantises the transposed copies again (fp8_quant_weight): the same
    loss, input gradient and weight gradients as with the copies kept."""
    torch = torch_cuda()
    import lingen.optim
    from lingen.nn import Fp8Linear, MoE, _k

    def model():
        torch.manual_seed(0)
        return torch.nn.ModuleList([Fp8Linear(512, 384, device="cuda"),
                                    MoE(512, 8, 2, 256).cuda()])

    a, b = model(), model()
    kw = dict(lr=1e-3, moments="bf16", fp8_weights=True, release_grads=True)
    oa = lingen.optim.AdamW(a.parameters(), transposed_in_backward=True, **kw)
    ob = lingen.optim.AdamW(b.parameters(), **kw)
    x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    out = []
    for m, opt in ((a, oa), (b, ob)):
        for _ in range(2):
            (m[0](x).float().square().mean() + m[1](x).float().square().mean()).backward()
            opt.step()
            opt.zero_grad()
        assert all(_k.weight_copies(w)[2] is None for w in (m[0].weight, m[1].w1, m[1].w2)) \
            == (m is a)
        xi = x.clone().requires_grad_()
        loss = m[0](xi).float().square().mean() + m[1](xi).float().square().mean()
        loss.backward()
        out.append((loss, xi.grad, [p.grad for p in m.parameters()]))
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])
    for ga, gb in zip(out[0][2], out[1][2]):
        assert (ga is None and gb is None) or torch.equal(ga, gb)
