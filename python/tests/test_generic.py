"""The ops made from the declarations alone (lingen._generic): a family
pass that lingen.ops does not wrap by hand gets lingen.<op> /
lingen.<op>_<pass> (inputs in declared order, scalar keys as keyword
arguments with the declared defaults, outputs in declared order) and a
torch op, with no Python written. Checked on a fake family (a copy of
rmsnorm's declaration under another name) and, for the calls, on a real
family's pass made generic beside its hand-written op. No GPU."""
import dataclasses
import inspect

import pytest

import lingen
from lingen import _families, _generic
from conftest import CAI, reaches_the_device

pytestmark = pytest.mark.usefixtures("no_device")


@pytest.fixture
def fake_family(monkeypatch):
    """families() with "fake_norm", rmsnorm's declaration renamed."""
    fams = dict(_families.families())
    fams["fake_norm"] = dataclasses.replace(fams["rmsnorm"], op="fake_norm")
    monkeypatch.setattr(_families, "_families", fams)
    monkeypatch.setattr(_generic, "_made", {})
    monkeypatch.setattr(_generic, "_unused_cache", {})
    return fams["fake_norm"]


def expected_generated():
    """The ops the generic path must make, from the registry: the op name of
    every family pass (lingen.families()) less the hand-written ones
    (lingen.ops.BY_HAND), the passes served by launch forms
    (lingen.ops.FORMS) and the passes that take a tensor list."""
    out = set()
    for op, fam in lingen.families().items():
        for pass_, decl in fam.passes.items():
            name = _generic.op_name(op, pass_)
            if not any(a.role == "list" for a in decl.args):
                out.add(name)
    return sorted(out - set(lingen.ops.BY_HAND) - set(lingen.ops.FORMS))


def test_no_family_pass_is_left_without_an_op():
    """Every family pass exposed to Python is served by the generic op
    (generated()) or by a hand-written one (lingen.ops.BY_HAND, each with
    its reason in its docstring; cross_entropy's forward by its launch
    forms, lingen.ops.FORMS), never both; the list ops are BY_HAND's."""
    gen, hand, forms = set(lingen.ops.generated()), lingen.ops.BY_HAND, lingen.ops.FORMS
    want = expected_generated()
    assert want, "no family pass is served by the generic op"
    assert sorted(gen) == want, (sorted(set(gen) ^ set(want)))
    assert not gen & set(hand)
    for op, fam in lingen.families().items():
        for pass_ in fam.passes:
            name = _generic.op_name(op, pass_)
            assert name in gen or name in hand or name in forms, name
    assert all(set(names) <= set(hand) for names in forms.values())
    for name, why in hand.items():
        assert isinstance(why, str) and why.strip(), name
        assert why in " ".join(getattr(lingen, name).__doc__.split()), name
    assert set(lingen.ops.public()) == gen | set(hand) <= set(lingen.__all__)


def test_a_new_family_gets_its_ops(fake_family):
    made = lingen.ops.generated()
    assert made == expected_generated() and {"fake_norm", "fake_norm_backward"} <= set(made)
    assert {"fake_norm", "fake_norm_backward"} <= set(lingen.__all__)
    fwd, bwd = lingen.fake_norm, lingen.fake_norm_backward
    assert fwd is lingen.ops.fake_norm  # made once
    eps = fake_family.key("eps").default
    p = inspect.signature(fwd).parameters
    assert list(p) == ["x", "w", "eps", "tile", "out", "stream", "context", "alloc"]
    assert p["x"].default is inspect.Parameter.empty and p["eps"].kind == p["eps"].KEYWORD_ONLY
    assert p["eps"].default == pytest.approx(eps)
    p = inspect.signature(bwd).parameters
    assert list(p)[:5] == ["dy", "x", "w", "rms", "eps"]
    assert p["rms"].default is None  # rms optional, and last
    assert p["w"].default is inspect.Parameter.empty
    assert "(y, rms)" in fwd.__doc__ and "(dx, dw)" in bwd.__doc__
    missing = r"^lingen\.fake_norm: missing a required argument: 'w'"
    with pytest.raises(TypeError, match=missing):
        fwd(CAI((4, 64)))
    with pytest.raises(TypeError, match=r"^lingen\.fake_norm: got an unexpected keyword"):
        fwd(CAI((4, 64)), CAI((64,)), bogus=1)
    with pytest.raises(AttributeError):
        lingen.fake_norm_sideways  # noqa: B018


def test_a_generic_op_checks_as_the_hand_written_one(ctx):
    """rmsnorm's forward made generic: the same checks, the same errors (by
    the op's own name), and a good call reaches the device."""
    gen = _generic.make("rmsnorm", "forward")
    x, w = CAI((4, 64)), CAI((64,))
    assert reaches_the_device(lambda: gen(x, w, context=ctx))
    assert reaches_the_device(lambda: gen(x, w, eps=1e-5, out={"y": CAI((4, 64))}, context=ctx))
    bad = CAI((4, 64), typestr="<f4")
    with pytest.raises(TypeError) as hand:
        lingen.rmsnorm(bad, w, context=ctx)
    with pytest.raises(TypeError) as made:
        gen(bad, w, context=ctx)
    assert str(made.value) == str(hand.value)
    assert str(made.value).startswith("lingen.rmsnorm: x: ")
    with pytest.raises(ValueError, match=r"^lingen\.rmsnorm: eps"):
        gen(x, w, eps=-1.0, context=ctx)


def test_outputs_in_declared_order(ctx, monkeypatch):
    """The result is the declared outputs in order; one output: itself."""
    seen = {}

    def fake_call(fn, op, pass_, arrays, options, **kw):
        seen.update(fn=fn, arrays=arrays, options=options, names=kw["names"])
        decl = _families.families()[op].passes[pass_]
        return {a.name: a.name for a in decl.args if a.is_output}
    monkeypatch.setattr(lingen._core, "call", fake_call)
    assert _generic.make("rmsnorm_quant", "forward")(1, 2, round_scale=True) == \
        ("q", "s", "rms", "qt", "st")
    assert seen["arrays"] == {"x": 1, "w": 2}
    assert seen["options"]["quant.round_scale"] is True
    assert seen["names"]["quant.round_scale"] == "round_scale"
    assert _generic.make("router_gemm", "forward")(1, 2, tile={"tm": 64}) == "logits"
    assert seen["options"]["tile"] == {"tm": 64} and seen["fn"] == "lingen.router_gemm"


def test_a_new_family_gets_its_torch_op(request):
    torch = pytest.importorskip("torch")
    from lingen.torch import _ops  # registered with the real families
    fake_family = request.getfixturevalue("fake_family")
    decl = fake_family.passes["forward"]
    assert _ops.schema(fake_family, decl) == _ops.schema(_families.families()["rmsnorm"], decl)
    if not hasattr(torch.ops.lingen, "fake_norm_forward"):
        _ops._register("fake_norm", "forward", fake_family, decl)
    assert "fake_norm_forward" in _ops._eager
    assert hasattr(torch.ops.lingen, "fake_norm_forward")


def test_a_missing_name_without_the_library(monkeypatch):
    """An unknown attribute is an AttributeError even when the library
    cannot be loaded (hasattr stays False, naming why)."""
    from lingen import _lib

    def gone():
        raise _lib.LibraryError("no liblingen here")
    monkeypatch.setattr(_families, "families", gone)
    monkeypatch.setattr(_generic, "_made", {})
    assert not hasattr(lingen, "fake_norm")
    with pytest.raises(AttributeError, match="no liblingen here"):
        lingen.ops.fake_norm  # noqa: B018
