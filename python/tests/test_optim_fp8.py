"""lingen.optim.AdamW(fp8_weights=True) on the CPU (CI): the step records the
FP8 copies of the weights lingen.nn quantises (Fp8Linear, the FP8 MoE's
experts), the forward takes them while they are current and quantises
again once the weight changed; no copies before the first step, none for
other parameters or without the option; the update and the state_dict are
torch's. The CUDA path (the generated adamw_fp8 kernel) is
python/tests/test_gpu_optim_fp8.py."""
import pytest

torch = pytest.importorskip("torch")
import lingen.optim  # noqa: E402
from lingen.nn import Fp8Linear, MoE  # noqa: E402
from lingen import _torchref as Q  # noqa: E402
from lingen.nn import _k  # noqa: E402


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.ModuleDict({
        "lin": Fp8Linear(256, 384),
        "plain": Fp8Linear(256, 128, fp8=False),
        "moe": MoE(256, 4, 2, 128, mode="fp8"),
    })


def _step(model, opt, seed):
    torch.manual_seed(100 + seed)
    x = torch.randn(64, 256, dtype=torch.bfloat16)
    loss = (model["lin"](x).float().square().mean() + model["plain"](x).float().square().mean()
            + model["moe"](x).float().square().mean())
    loss.backward()
    opt.step()
    opt.zero_grad()


def _same(a, b):
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert torch.equal(x.view(torch.uint8) if x.dtype == Q.E4M3 else x,
                           y.view(torch.uint8) if y.dtype == Q.E4M3 else y)


def _backward_without_quantising(monkeypatch, m):
    """A forward and backward of m's FP8 layers that fails the test if any
    weight is quantised (each must take the copies an optimiser wrote)."""
    with monkeypatch.context() as mp:
        mp.setattr(Q, "weight", lambda *a, **k: pytest.fail("quantised"))
        mp.setattr(Q, "weight_experts", lambda *a, **k: pytest.fail("quantised"))
        x = torch.randn(64, 256, dtype=torch.bfloat16)
        (m["lin"](x).float().sum() + m["moe"](x).float().sum()).backward()


def test_copies_written_and_used(monkeypatch):
    m = _model()
    opt = lingen.optim.AdamW(m.parameters(), lr=1e-2, fp8_weights=True)
    fp8 = [m["lin"].weight, m["moe"].w1, m["moe"].w2]
    for w in fp8:
        assert _k.is_fp8(w) and _k.weight_copies(w) is None  # the first step has none
    assert not _k.is_fp8(m["plain"].weight) and not _k.is_fp8(m["moe"].router)
    _step(m, opt, 0)
    for w in fp8:
        c = _k.weight_copies(w)
        assert c is not None
        want = Q.weight(w) if w.dim() == 2 else Q.weight_experts(w)
        _same(c, want)
    for p in (m["plain"].weight, m["moe"].router):
        assert _k.weight_copies(p) is None
    _backward_without_quantising(monkeypatch, m)  # the forward takes the copies
    opt.step()


def test_refresh_fp8_copies_of_restored_weights(monkeypatch):
    """Weights copied back outside the optimiser (as train_moe.py does before
    capturing its graph): refresh_fp8_copies hands the next forward the copies
    of the restored weights, and that forward quantises nothing."""
    m = _model()
    fp8 = [m["lin"].weight, m["moe"].w1, m["moe"].w2]
    saved = [w.detach().clone() for w in fp8]
    for release in (False, True):
        opt = lingen.optim.AdamW(m.parameters(), lr=1e-2, fp8_weights=True, release_grads=release)
        _step(m, opt, 0)
        with torch.no_grad():
            for w, w0 in zip(fp8, saved):
                w.copy_(w0)
        assert all(_k.weight_copies(w) is None for w in fp8)  # stale: the weights changed
        opt.refresh_fp8_copies()
        for w, w0 in zip(fp8, saved):
            _same(_k.weight_copies(w), Q.weight(w0) if w0.dim() == 2 else Q.weight_experts(w0))
        assert _k.weight_copies(m["plain"].weight) is None
        _backward_without_quantising(monkeypatch, m)
        opt.zero_grad()
    lingen.optim.AdamW(m.parameters()).refresh_fp8_copies()  # without fp8_weights: nothing


def test_changed_weight_requantised():
    m = _model()
    opt = lingen.optim.AdamW(m.parameters(), lr=1e-2, fp8_weights=True)
    _step(m, opt, 0)
    w = m["lin"].weight
    old = _k.weight_copies(w)
    with torch.no_grad():
        w.mul_(3.0)
    assert _k.weight_copies(w) is None
    got = _k.quant_weight(w)
    _same(got, Q.weight(w))
    assert not torch.equal(got[1], old[1])  # the scales of the new weight
    # a new tensor in its place (load_state_dict copies in place: also a new version)
    m["lin"].load_state_dict({"weight": torch.randn(384, 256, dtype=torch.bfloat16)})
    assert _k.weight_copies(w) is None


def test_without_option():
    m = _model()
    opt = lingen.optim.AdamW(m.parameters(), lr=1e-2)
    _step(m, opt, 0)
    assert _k.weight_copies(m["lin"].weight) is None
    assert _k.weight_copies(m["moe"].w1) is None


def test_same_update_and_state_dict():
    a, b = _model(), _model()
    oa = lingen.optim.AdamW(a.parameters(), lr=1e-2, weight_decay=0.1, fp8_weights=True)
    ob = torch.optim.AdamW(b.parameters(), lr=1e-2, weight_decay=0.1)
    for s in range(3):
        _step(a, oa, s)
        _step(b, ob, s)
    for (n, x), y in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(x, y, rtol=0, atol=0, msg=n)
    sd = oa.state_dict()
    assert set(sd["state"][0]) == {"step", "exp_avg", "exp_avg_sq"}
    ob.load_state_dict(sd)
    oa.load_state_dict(ob.state_dict())


def test_bad_option():
    with pytest.raises(TypeError):
        lingen.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], fp8_weight=True)
    with pytest.raises(ValueError, match="release_grads"):
        lingen.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], release_grads=True)


def test_release_grads(monkeypatch):
    """release_grads: the FP8 weights' gradients None after the step (the
    others kept), the copies as without it; the forward takes them off the
    weight (held by nothing else: freed as its own would be); a second
    forward quantises; the update is the same."""
    a, b = _model(), _model()
    oa = lingen.optim.AdamW(a.parameters(), lr=1e-2, fp8_weights=True, release_grads=True)
    ob = lingen.optim.AdamW(b.parameters(), lr=1e-2, fp8_weights=True)
    for s in range(2):
        _step(a, oa, s)
        _step(b, ob, s)
    for x, y in zip(a.parameters(), b.parameters()):
        assert torch.equal(x, y)
    fp8 = [a["lin"].weight, a["moe"].w1, a["moe"].w2]
    torch.manual_seed(7)
    x = torch.randn(64, 256, dtype=torch.bfloat16)
    loss = a["lin"](x).float().square().mean() + a["moe"](x).float().square().mean()
    loss.backward()
    oa.step()
    for w in fp8:
        assert w.grad is None
        _same(_k.weight_copies(w), Q.weight(w) if w.dim() == 2 else Q.weight_experts(w))
    assert a["moe"].router.grad is not None
    with monkeypatch.context() as mp:
        mp.setattr(Q, "weight", lambda *a, **k: pytest.fail("quantised"))
        mp.setattr(Q, "weight_experts", lambda *a, **k: pytest.fail("quantised"))
        a["lin"](x), a["moe"](x)
    for w in fp8:  # taken by that forward
        assert "_lingen_fp8_copies" not in w.__dict__ and _k.weight_copies(w) is None
        assert "_lingen_fp8_buffers" not in w.__dict__
    _same(_k.quant_weight(a["lin"].weight), Q.weight(a["lin"].weight))


def _held(p):
    """Bytes of the distinct storages p's FP8 copies and buffers hold."""
    seen = {}
    for key in ("_lingen_fp8_copies", "_lingen_fp8_buffers"):
        for v in p.__dict__.get(key, ()):
            for t in (v if isinstance(v, tuple) else ()):
                if isinstance(t, torch.Tensor):
                    st = t.untyped_storage()
                    seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


@pytest.mark.parametrize("shape", [(384, 256), (4, 256, 512), (8, 1024, 256)])
def test_bytes_held(shape):
    """The optimiser's copies of a weight: 1 B of q and 1 B of qt an element
    and two fp32 scales a 128 x 128 tile (no flat transposed copy of
    expert weights besides the per-expert one)."""
    from lingen.optim import _fp8_alloc, _fp8_buffers
    p = _k.mark_fp8(torch.nn.Parameter(torch.zeros(shape, dtype=torch.bfloat16)))
    n = p.numel()
    tiles = -(-(n // shape[-1]) // 128) * (shape[-1] // 128)
    want = 2 * n + 2 * 4 * tiles
    c = _fp8_alloc(p)
    assert sum(t.untyped_storage().nbytes() for t in c) == want
    if p.dim() == 3:
        e, r, k = shape
        assert [tuple(t.shape) for t in c] == [(e, r, k), (e, r // 128, k // 128), (e, k, r),
                                              (e, k // 128, r // 128)]
    _fp8_buffers(p)
    _k.set_weight_copies(p, _fp8_buffers(p))
    assert _held(p) == want  # the copies are the buffers: held once


def test_transposed_in_backward(monkeypatch):
    """transposed_in_backward: the forward is handed q and s only (nothing
    held for the backward but the weight), the backward quantises each
    weight once more: the same gradients and steps as without it."""
    a, b = _model(), _model()
    oa = lingen.optim.AdamW(a.parameters(), lr=1e-2, fp8_weights=True, release_grads=True,
                            transposed_in_backward=True)
    ob = lingen.optim.AdamW(b.parameters(), lr=1e-2, fp8_weights=True, release_grads=True)
    for s in range(2):
        _step(a, oa, s)
        _step(b, ob, s)
    fp8 = [a["lin"].weight, a["moe"].w1, a["moe"].w2]
    for w in fp8:
        c = _k.weight_copies(w)
        assert c[2] is None and c[3] is None
    calls = []
    real_w, real_e = Q.weight, Q.weight_experts
    monkeypatch.setattr(Q, "weight", lambda *x, **k: calls.append(2) or real_w(*x, **k))
    monkeypatch.setattr(Q, "weight_experts", lambda *x, **k: calls.append(3) or real_e(*x, **k))
    torch.manual_seed(9)
    x = torch.randn(64, 256, dtype=torch.bfloat16, requires_grad=True)
    xb = x.detach().clone().requires_grad_()
    la = a["lin"](x).float().square().mean() + a["moe"](x).float().square().mean()
    assert not calls  # the forward took the copies
    la.backward()
    # each weight quantised again in the backward (weight_experts calls weight)
    assert calls.count(3) == 2 and calls.count(2) == 3
    lb = b["lin"](xb).float().square().mean() + b["moe"](xb).float().square().mean()
    lb.backward()
    assert torch.equal(la, lb) and torch.equal(x.grad, xb.grad)
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        assert (p.grad is None) == (q.grad is None), n
        if p.grad is not None:
            assert torch.equal(p.grad, q.grad), n
    with pytest.raises(ValueError, match="transposed_in_backward"):
        lingen.optim.AdamW(a.parameters(), fp8_weights=True, transposed_in_backward=True)
