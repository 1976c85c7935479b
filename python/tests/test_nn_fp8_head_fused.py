"""The FP8 head without the logits (issue 35 item 3: fp8_linear_cross_entropy,
Model(fp8_head=True, fused_head=True)) on the CPU: the chunked head against
the unfused FP8 head (Fp8LinearCrossEntropy) through lingen.nn's CPU path
(the _k torch forms, the emulated GEMMs): the same quantised copies, the same
GEMMs, so with dout = 1 the loss, dx and dW are equal bit for bit at any
token count and chunk (odd counts, ignored labels, every label ignored);
dout folded in within rounding; the model's fused FP8 head the unfused one's;
its refusals. Tiny shapes: fast."""
import math

import pytest

torch = pytest.importorskip("torch")
import lingen.nn as ln  # noqa: E402
from lingen.nn import head, linear  # noqa: E402
from reference import TINY, rel  # noqa: E402

H, V = 256, 512


def _data(t, seed, ignored):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, H, generator=g).bfloat16()
    w = (0.1 * torch.randn(V, H, generator=g)).bfloat16()
    lab = torch.randint(0, V, (t,), generator=g)
    if ignored == "all":
        lab[:] = -100
    elif ignored:
        lab[torch.rand(t, generator=g) < 0.3] = -100
    return x, w, lab


def _run(f, x, w, lab, scale=1.0):
    xa, wa = x.clone().requires_grad_(), w.clone().requires_grad_()
    loss = f(xa, wa, lab)
    (loss * scale).backward()
    return loss.detach(), xa.grad, wa.grad


def _unfused(x, w, lab):
    return linear.Fp8LinearCrossEntropy.apply(x, w, None, lab, -100)


@pytest.mark.parametrize("t", [1, 127, 300, 1000])
@pytest.mark.parametrize("chunk", [128, 256, 384, 1024, None])
@pytest.mark.parametrize("ignored", [False, True, "all"])
def test_chunked_head_is_the_unfused_fp8_head(t, chunk, ignored):
    x, w, lab = _data(t, t + 7, ignored)
    ref = _run(_unfused, x, w, lab)
    got = _run(lambda a, b, c: ln.fp8_linear_cross_entropy(a, b, c, chunk=chunk), x, w, lab)
    for name, a, b in zip(("loss", "dx", "dW"), got, ref):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert torch.equal(a, b) or (name == "loss" and math.isnan(a) and math.isnan(b)), name
    if ignored == "all":  # nan loss (0 / 0), zero gradients
        assert math.isnan(got[0]) and not got[1].any() and not got[2].any()


@pytest.mark.parametrize("t,chunk", [(1000, 384), (777, 256), (127, 128), (300, 128)])
def test_chunks_fill_the_whole_columnwise_copy(t, chunk):
    """cross_entropy_quant's `into` (the chunks' columns of one copy, as the
    kernel's qt_pitch writes them on a GPU), chunk by chunk: the copy and
    scales of all T tokens at once, bit for bit (the zero tails of the
    chunks but the last are whole blocks of tokens)."""
    from lingen import _torchref as Q
    from lingen.nn import _k
    g = torch.Generator().manual_seed(t)
    x = (2 * torch.randn(t, V, generator=g)).bfloat16()
    lab = torch.randint(0, V, (t,), generator=g)
    lab[torch.rand(t, generator=g) < 0.2] = -100
    gs = torch.full((1,), 1.0 / t)
    _, s, m = _k.cross_entropy_stats(x, lab, -100)
    want = _k.cross_entropy_quant(x, lab, s, m, gs, -100)
    gqt = _k.qt_buffer(V, t, x.device)
    assert gqt.shape == (V, Q.pitch(t)) and gqt.untyped_storage().nbytes() == (V + 1) * Q.pitch(t)
    gst = torch.empty(-(-t // 128), V)
    for a in range(0, t, chunk):
        e = min(a + chunk, t)
        _, sc, mc = _k.cross_entropy_stats(x[a:e], lab[a:e], -100)
        got = _k.cross_entropy_quant(x[a:e], lab[a:e], sc, mc, gs, -100, into=(gqt, gst, a))
        assert torch.equal(got[0].view(torch.uint8), want[0][a:e].view(torch.uint8))
        assert got[2].data_ptr() == gqt[:, a:].data_ptr() and got[3].shape[0] == -(-(e - a) // 128)
    assert torch.equal(gqt.view(torch.uint8), want[2].view(torch.uint8))
    assert torch.equal(gst, want[3])


def test_qt_pitch_is_bound_from_qt():
    """cross_entropy_quant's qt [vocab, pick(qt_pitch, round_up(tokens,
    128), qt_pitch)]: a qt given binds qt_pitch (a chunk's columns of a
    wider copy), none leaves it 0 (qt [vocab, round_up(tokens, 128)])."""
    from lingen import _core, _families
    fam = _families.families()["cross_entropy_quant"]
    decl = fam.passes["forward"]
    assert decl.sizes == ("tokens", "qt_pitch")
    env = _families.bind(fam, decl, {"logits": (300, V), "qt": (V, 8320)}, {})[0]
    assert env["tokens"] == 300 and env["qt_pitch"] == 8320
    e4m3, fp32 = ("e4m3",), ("fp32",)
    ins = {"logits": ((300, V), ("bf16",), None), "labels": ((300,), ("int64",), None),
           "sum_exp": ((300,), fp32, None), "max_logit": ((300,), fp32, None),
           "g": ((1,), fp32, None)}
    plan = _core.check("t", "cross_entropy_quant", "forward",
                       dict(ins, qt=((V, 8320), e4m3, None), st=((3, V), fp32, None)), {})
    assert plan.sizes == (300, 8320)
    assert [a[2] for a in plan.args if a[0] == "qt"] == [(V, 8320)]
    plan = _core.check("t", "cross_entropy_quant", "forward", ins, {})
    assert plan.sizes == (300, 0)
    assert [a[2] for a in plan.args if a[0] == "qt"] == [(V, 384)]


@pytest.mark.parametrize("scale", [2.0, 0.3])
def test_dout_folded_in(scale):
    """dx * dout and dout in the gradient's scales: dout times the dout = 1
    gradients, exact for a power of two (the unfused head's too), within
    one bf16 rounding otherwise (the unfused head quantises dout / count's
    gradient instead: another rounding, within FP8's)."""
    x, w, lab = _data(300, 3, True)
    one = _run(_unfused, x, w, lab)
    ref = _run(_unfused, x, w, lab, scale)
    got = _run(lambda a, b, c: ln.fp8_linear_cross_entropy(a, b, c, chunk=128), x, w, lab, scale)
    for a, b, c in zip(got[1:], ref[1:], one[1:]):
        if scale == 2.0:
            assert torch.equal(a, b)
        else:
            assert rel(a, c.double() * scale) < 2 ** -8 and rel(a, b) < 0.1


def test_given_copies_and_no_grad():
    """x's copies from a producer (here _k.quant) are used as given; under
    no_grad only the loss (no gradient work)."""
    from lingen.nn import _k
    x, w, lab = _data(200, 5, True)
    copies = _k.quant(x, "both")
    ref = _run(_unfused, x, w, lab)
    got = _run(lambda a, b, c: ln.fp8_linear_cross_entropy(a, b, c, chunk=128, x_copies=copies),
               x, w, lab)
    assert all(torch.equal(a, b) for a, b in zip(got, ref))
    with torch.no_grad():
        assert torch.equal(ln.fp8_linear_cross_entropy(x, w, lab, chunk=128), ref[0])


def test_retain_graph_refused():
    x, w, lab = _data(130, 1, False)
    xa = x.clone().requires_grad_()
    loss = ln.fp8_linear_cross_entropy(xa, w, lab, chunk=128)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="a second time"):
        loss.backward()


def _models(seed, chunk):
    c = ln.ModelConfig(**TINY)
    out = []
    for fused in (True, False):
        torch.manual_seed(seed)
        out.append(ln.Model(c, "fp8", fused_head=fused, head_chunk=chunk if fused else None,
                            fp8_head=True))
    return out


@pytest.mark.parametrize("chunk", [128, None])
def test_model_fused_fp8_head_is_the_unfused(seed, chunk):
    """Model(fp8_head=True, fused_head=True): the same loss and gradients as
    fp8_head=True unfused (the same model before the head), the same state
    dict; labels None: the logits."""
    a, b = _models(seed, chunk)
    assert list(a.state_dict()) == list(b.state_dict())
    ids = torch.randint(0, TINY["vocab"], (2, 75))
    labels = ids.clone()
    labels[0, :10] = -100
    la, lb = a(ids, labels), b(ids, labels)
    la.backward()
    lb.backward()
    assert torch.equal(la, lb)
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(p.grad, q.grad), n
    with torch.no_grad():
        assert torch.equal(a(ids), b(ids))


def test_model_fused_fp8_head_traces_on_meta():
    """The GPU path (lingen's torch ops, fake kernels): every parameter gets
    its gradient."""
    with torch.device("meta"):
        m = ln.Model(ln.ModelConfig(**TINY), "fp8", fused_head=True, head_chunk=128,
                     fp8_head=True)
        ids = torch.randint(0, TINY["vocab"], (2, 100))
    m(ids, ids).backward()
    for n, p in m.named_parameters():
        assert p.grad is not None and p.grad.shape == p.shape, n


BAD = [
    ("chunk 100", dict(chunk=100), ValueError, "chunk", "a positive multiple of 128"),
    ("chunk 0", dict(chunk=0), ValueError, "chunk", "at least 1"),
    ("chunk float", dict(chunk=128.0), TypeError, "chunk", "an int"),
    ("weight fp32", dict(w=torch.zeros(V, H)), TypeError, "weight", "torch.bfloat16"),
    ("vocab 500", dict(w=torch.zeros(500, H, dtype=torch.bfloat16)), ValueError,
     "weight.shape[0]", "a multiple of 128 up to 262144"),
    ("hidden 200", dict(w=torch.zeros(V, 200, dtype=torch.bfloat16)), ValueError,
     "weight.shape[1]", "multiple of 128"),
    ("x fp32", dict(x=torch.zeros(4, H)), TypeError, "x.dtype", "torch.bfloat16"),
    ("x width", dict(x=torch.zeros(4, 128, dtype=torch.bfloat16)), ValueError, "x.shape",
     "a last dimension of 256"),
    ("labels float", dict(lab=torch.zeros(4)), TypeError, "labels.dtype", "torch.int32"),
    ("labels count", dict(lab=torch.zeros(5, dtype=torch.long)), ValueError, "labels.shape",
     "a label a token"),
    ("no tokens", dict(x=torch.zeros(0, H, dtype=torch.bfloat16),
                       lab=torch.zeros(0, dtype=torch.long)), ValueError, "x.shape",
     "at least one token"),
    ("copies", dict(x_copies=(1, 2)), TypeError, "x_copies", "quantised copies"),
]


@pytest.mark.parametrize("kw,exc,name,allowed", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_refusals(kw, exc, name, allowed):
    kw = dict(kw)
    x = kw.pop("x", torch.zeros(4, H, dtype=torch.bfloat16))
    w = kw.pop("w", torch.zeros(V, H, dtype=torch.bfloat16))
    lab = kw.pop("lab", torch.zeros(4, dtype=torch.long))
    with pytest.raises(exc) as e:
        head.fp8_linear_cross_entropy(x, w, lab, **kw)
    assert f" {name}: found " in str(e.value) and allowed in str(e.value), str(e.value)
