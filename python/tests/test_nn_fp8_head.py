"""Model(fp8_head=True) on the CPU (issue 35 item 3): the LM head as an
FP8 linear fed by the final RMSNorm's quantised copies, against plain
torch and against the bf16 head (loss and gradients within the FP8 layer
tests' tolerances), the same parameters and state dict as fp8_head=False
(a round trip each way), its refusals, and the backward of an output
wider than the quantiser's widest row (an LM head's vocab) in slices of
columns. Tiny shapes: fast."""
import pytest

torch = pytest.importorskip("torch")
import lingen.nn as ln  # noqa: E402
from lingen.nn import _k, linear  # noqa: E402
from lingen import _torchref as Q  # noqa: E402
from reference import TINY, rel  # noqa: E402


def _pair(seed, **cfg):
    """(fp8 head, bf16 head) models of one seed: the same parameters."""
    c = ln.ModelConfig(**dict(TINY, **cfg))
    torch.manual_seed(seed)
    a = ln.Model(c, "fp8", fp8_head=True)
    torch.manual_seed(seed)
    b = ln.Model(c, "fp8")
    return a, b


def test_fp8_head_is_an_fp8_linear_of_the_same_weight(seed):
    a, b = _pair(seed)
    assert isinstance(a.lm_head, ln.Fp8Linear) and a.lm_head.fp8 and a.fp8_head
    assert _k.is_fp8(a.lm_head.weight)  # the optimiser writes its FP8 copies
    assert isinstance(b.lm_head, torch.nn.Linear) and not _k.is_fp8(b.lm_head.weight)
    assert not b.fp8_head
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb) and "lm_head.weight" in sa
    # the same draws at a seed: the same initial weights, the head's included
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert a.lm_head.weight.dtype == torch.bfloat16 and a.lm_head.weight.device.type == "cpu"


def test_state_dict_round_trip_between_heads(seed):
    a, b = _pair(seed)
    with torch.no_grad():
        for p in b.parameters():
            p.add_(0.01 * torch.randn_like(p))
    a.load_state_dict(b.state_dict())  # bf16 head -> fp8 head
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(),
                                                 b.state_dict().values()))
    assert _k.is_fp8(a.lm_head.weight)  # loading keeps the FP8 parameter
    torch.manual_seed(seed + 1)
    c = ln.Model(ln.ModelConfig(**TINY), "fp8")
    c.load_state_dict(a.state_dict())  # fp8 head -> bf16 head
    assert all(torch.equal(x, y) for x, y in zip(c.state_dict().values(),
                                                 a.state_dict().values()))
    ids = torch.randint(0, TINY["vocab"], (1, 32))
    with torch.no_grad():
        assert torch.equal(c(ids), b(ids))


def test_fp8_head_matches_plain_torch_and_the_bf16_head(seed):
    """The loss within 1% of plain torch's and every gradient within the
    model test's FP8 tolerance (test_nn.py: test_model_modes_agree_on_cpu);
    against the same model with the bf16 head, the head's own gradient and
    the final norm's within Fp8Linear's (test_fp8_linear_matches_bf16:
    0.06), the FP8 head the only difference."""
    a, b = _pair(seed)
    torch.manual_seed(seed)
    ref = ln.Model(ln.ModelConfig(**TINY), "torch")
    ref.load_state_dict(a.state_dict())
    ids = torch.randint(0, TINY["vocab"], (2, 64))
    losses = [m(ids, ids) for m in (a, b, ref)]
    for loss in losses:
        loss.backward()
    la, lb, lr = (x.item() for x in losses)
    assert abs(la - lr) < 0.01 * lr and abs(la - lb) < 0.01 * lb
    tol = 0.3
    for (n, p), (_, q) in zip(a.named_parameters(), ref.named_parameters()):
        assert rel(p.grad, q.grad) < (2 * tol if n.endswith("router") else tol), n
    for n in ("lm_head.weight", "norm.weight"):
        ga, gb = a.get_parameter(n).grad, b.get_parameter(n).grad
        assert ga.dtype == torch.bfloat16 and rel(ga, gb) < 0.06, n
    # the logits (labels None): the FP8 head's, close to the bf16 head's
    with torch.no_grad():
        ya, yb = a(ids), b(ids)
    assert ya.shape == (2, 64, TINY["vocab"]) and ya.dtype == torch.bfloat16
    assert rel(ya, yb) < 0.06


def test_fp8_head_takes_the_norms_copies(seed, monkeypatch):
    """The final RMSNorm hands the head its quantised copies
    (rms_norm_quant): the head's input is quantised once, by the norm,
    never by the head (its forward quantises no activation: as many
    _k.quant calls as the bf16 head's model makes)."""
    a, b = _pair(seed)
    calls = {}
    for name in ("rms_norm_quant", "quant"):
        def counted(*args, _real=getattr(_k, name), _name=name, **kw):
            calls[_name] = calls.get(_name, 0) + 1
            return _real(*args, **kw)
        monkeypatch.setattr(_k, name, counted)
    ids = torch.randint(0, TINY["vocab"], (1, 32))
    counts = []
    for m in (a, b):
        calls.clear()
        with torch.no_grad():
            m(ids, ids)
        counts.append(dict(calls))
    assert counts[0]["rms_norm_quant"] == counts[1]["rms_norm_quant"] + 1 == TINY["layers"] + 1
    # (on the CPU rms_norm_quant's copies come from _k.quant: one call each)
    own = [c.get("quant", 0) - c["rms_norm_quant"] for c in counts]
    assert own[0] == own[1]


def test_fp8_head_from_config_on_meta():
    with torch.device("meta"):
        m = ln.Model.from_config("configs/models/ling-mini-2.0.json", layers=1, mode="fp8",
                                 fp8_head=True)
    assert isinstance(m.lm_head, ln.Fp8Linear) and m.lm_head.weight.shape == (157184, 2048)
    assert m.lm_head.weight.device.type == "meta" and _k.is_fp8(m.lm_head.weight)


def test_fp8_head_traces_on_meta():
    """The GPU path (lingen's torch ops, fake kernels) with the FP8 head,
    gradients of every parameter; a vocab wider than the quantiser's row
    (QUANT_WIDTH_MAX) takes the sliced backward."""
    cfg = ln.ModelConfig(**dict(TINY, vocab=linear.QUANT_WIDTH_MAX + 384))
    with torch.device("meta"):
        m = ln.Model(cfg, "fp8", fp8_head=True)
        ids = torch.randint(0, cfg.vocab, (2, 64))
    loss = m(ids, ids)
    loss.backward()
    for n, p in m.named_parameters():
        assert p.grad is not None and p.grad.shape == p.shape, n


BAD = [
    ("mode bf16", dict(mode="bf16"), "fp8_head", "in mode 'bf16'"),
    ("mode torch", dict(mode="torch"), "fp8_head", "in mode 'torch'"),
    ("fused, chunk 200", dict(fused_head=True, head_chunk=200),
     "head_chunk (fp8_head=True, fused_head=True)", "a positive multiple of 128"),
    ("fused, chunk 0", dict(fused_head=True, head_chunk=0),
     "head_chunk (fp8_head=True, fused_head=True)", "at least 1"),
    ("fused, vocab 2^18 + 128", dict(fused_head=True, vocab=(1 << 18) + 128),
     "cfg.vocab (fp8_head=True, fused_head=True)", "at most 262144"),
    ("vocab 500", dict(vocab=500), "cfg.vocab (fp8_head=True)", "a multiple of 128"),
    ("vocab 2^20 + 128", dict(vocab=(1 << 20) + 128), "cfg.vocab (fp8_head=True)",
     "up to 1048576"),
    ("hidden 200", dict(hidden=200), "cfg.hidden (fp8_head=True)", "multiple of 128"),
    ("not a bool", dict(fp8_head=1), "fp8_head", "True or False"),
]


@pytest.mark.parametrize("kw,name,allowed", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_fp8_head_refusals(kw, name, allowed):
    kw = dict(kw)
    mode = kw.pop("mode", "fp8")
    fused = kw.pop("fused_head", None)
    chunk = kw.pop("head_chunk", None)
    flag = kw.pop("fp8_head", True)
    with pytest.raises((ValueError, TypeError)) as e, torch.device("meta"):
        ln.Model(ln.ModelConfig(**dict(TINY, **kw)), mode, fused_head=fused, head_chunk=chunk,
                 fp8_head=flag)
    assert f" {name}: found " in str(e.value) and allowed in str(e.value), str(e.value)


def test_from_config_passes_fp8_head():
    with pytest.raises(ValueError, match="fp8_head"), torch.device("meta"):
        ln.Model.from_config("configs/models/ling-mini-2.0.json", layers=1, mode="bf16",
                             fp8_head=True)


@pytest.mark.parametrize("n", [640, 512])
def test_column_slices(n):
    s = linear.column_slices(n, 256)
    assert s[0][0] == 0 and s[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(s, s[1:]))
    assert all(e - b <= 256 and b % 128 == 0 for b, e in s)
    assert linear.column_slices(157184) == [(0, 157184)]  # one launch: within QUANT_WIDTH_MAX
    assert linear.column_slices(157184, 65536) == [(0, 52480), (52480, 104960), (104960, 157184)]


@pytest.mark.parametrize("need", ["both", "dx", "dw"])
def test_sliced_backward_matches_whole(seed, monkeypatch, need):
    """An output wider than the quantiser's row: dy quantised in slices of
    columns (whole 1 x 128 blocks, so the same copies): dw bit for bit the
    whole backward's, dx within its bf16 rounding (slices summed in fp32)."""
    torch.manual_seed(seed)
    lin = ln.Fp8Linear(256, 640)
    x = torch.randn(3, 50, 256).bfloat16()
    dy = torch.randn(3, 50, 640).bfloat16()

    def grads():
        lin.weight.grad = None
        xi = x.clone().requires_grad_(need != "dw")
        lin.weight.requires_grad_(need != "dx")
        lin(xi).backward(dy)
        return xi.grad, lin.weight.grad
    whole = grads()
    monkeypatch.setattr(linear, "QUANT_WIDTH_MAX", 256)  # slices of 256, 256, 128
    sliced = grads()
    lin.weight.requires_grad_(True)
    if need != "dw":
        assert sliced[0].shape == x.shape and sliced[0].dtype == torch.bfloat16
        assert rel(sliced[0], whole[0]) < 1e-2
    if need != "dx":
        assert torch.equal(sliced[1], whole[1])


def _counting(monkeypatch, name):
    calls = []

    def counted(*args, _real=getattr(_k, name), **kw):
        calls.append(args)
        return _real(*args, **kw)
    monkeypatch.setattr(_k, name, counted)
    return calls


def test_fp8_head_loss_traces_cross_entropy_quant_on_meta(monkeypatch):
    """The GPU path (fake kernels) of the FP8 head with labels at a vocab
    within the quantiser's row: the head and the loss one Function whose
    backward takes the logits gradient's copies from cross_entropy_quant
    (lingen's op, a generated one), never quantising a bf16 gradient
    (no _k.quant of a [tokens, vocab] tensor)."""
    import lingen.ops
    assert "cross_entropy_quant" in lingen.ops.generated()
    ce = _counting(monkeypatch, "cross_entropy_quant")
    quant = _counting(monkeypatch, "quant")
    cfg = ln.ModelConfig(**dict(TINY, vocab=640))  # no other layer's width
    with torch.device("meta"):
        m = ln.Model(cfg, "fp8", fp8_head=True)
        ids = torch.randint(0, cfg.vocab, (2, 64))
    loss = m(ids, ids)
    assert loss.shape == () and loss.device.type == "meta"
    loss.backward()
    assert len(ce) == 1 and ce[0][0].shape == (128, cfg.vocab)
    assert not any(a[0].shape[-1] == cfg.vocab for a in quant)
    for n, p in m.named_parameters():
        assert p.grad is not None and p.grad.shape == p.shape, n


@pytest.mark.parametrize("labels", ["int64", "int32"])
def test_fp8_linear_cross_entropy_matches_ce_grad_then_quant(seed, labels):
    """Fp8LinearCrossEntropy on the CPU (the torch reference of
    cross_entropy_quant): dx and dw bit for bit those of Fp8Linear fed the
    bf16 cross entropy gradient (the torch reference's backward, g = 1 /
    rows kept), the loss the mean over the rows not ignored."""
    torch.manual_seed(seed)
    lin = ln.Fp8Linear(256, 384)
    x = torch.randn(2, 40, 256).bfloat16()
    y = torch.randint(0, 384, (80,), dtype=getattr(torch, labels))
    y[::7] = -100
    xa = x.clone().requires_grad_()
    loss = linear.Fp8LinearCrossEntropy.apply(xa, lin.weight, None, y, -100)
    loss.backward()
    dx, dw = xa.grad, lin.weight.grad
    lin.weight.grad = None
    xb = x.clone().requires_grad_()
    logits = lin(xb).reshape(-1, 384)
    ref_loss, s, m = Q.cross_entropy_forward(logits.detach(), y, -100)
    count = (y != -100).sum().float()
    g = (1 / count).reshape(1)
    logits.backward(Q.cross_entropy_backward(logits.detach(), y, s, m, g, -100))
    assert torch.equal(loss, ref_loss.sum() / count)
    assert torch.equal(dx, xb.grad) and torch.equal(dw, lin.weight.grad)


def test_quant_width_max_is_the_declared_widest_row():
    """QUANT_WIDTH_MAX is the quantisers' declared row-width limit, written
    once (gen/families): fp8_quant's hidden and cross_entropy_quant's vocab
    each declare it, and the library's parser takes a spec at it and
    refuses one block past it."""
    import lingen
    fams = lingen.families()
    assert linear.QUANT_WIDTH_KEYS == (("fp8_quant", "hidden"), ("cross_entropy_quant", "vocab"))
    for op, path in linear.QUANT_WIDTH_KEYS:
        assert fams[op].key(path).max == linear.QUANT_WIDTH_MAX, (op, path)
        pass_ = next(iter(fams[op].passes))
        spec = {"op": op, "pass": pass_, "dtype": "bf16", "quant": {"format": "e4m3", "block": 128}}
        lingen.Spec(dict(spec, **{path: linear.QUANT_WIDTH_MAX}))
        with pytest.raises(lingen.SpecError):
            lingen.Spec(dict(spec, **{path: linear.QUANT_WIDTH_MAX + 128}))
