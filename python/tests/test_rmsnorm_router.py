"""rmsnorm_router (docs/kernels.md K3b) without a GPU: the declaration as Python
reads it, its shapes agreeing with the library's, the spec checks'
messages, the generated source, the ops binding fake arrays (no memory
behind them) up to the device (hidden and experts from x and route_w, the
columnwise copy only with output="both"), bad shapes refused by name, and
the torch op's schema."""
import pytest

import lingen
from lingen import _families

from conftest import CAI, reaches_the_device

OP = "rmsnorm_router"


pytestmark = pytest.mark.usefixtures("no_device")


def spec(**keys):
    return {"op": OP, "pass": "forward", "dtype": "bf16", "quant": {}, **keys}


def test_declaration():
    f = lingen.families()[OP]
    assert set(f.passes) == {"forward"}
    fwd = f.passes["forward"]
    assert fwd.sizes == ("tokens",)
    assert [a.name for a in fwd.args] == ["x", "w", "route_w", "y", "rms", "logits", "q", "s", "qt",
                                          "st"]
    assert fwd.arg("logits").elem == "fp32" and fwd.arg("y").elem == "bf16"
    assert fwd.arg("q").elem == "e4m3" and fwd.arg("rms").elem == "fp32"
    assert f.key("precision").default == "bf16" and f.key("quant.output").default == "rowwise"
    assert f.key("hidden").shape and f.key("experts").shape


def test_python_shapes_agree_with_the_library():
    for hidden, experts in ((2048, 256), (1000, 1), (8, 97)):
        decl = lingen.families()[OP].passes["forward"]
        s = lingen.Spec(spec(hidden=hidden, experts=experts))
        for tokens in (0, 1, 127, 8192):
            env = {"tokens": tokens, "hidden": hidden, "experts": experts}
            for a in decl.args:
                assert _families.eval_shape(a, env) == s.arg_shape(a.index, [tokens]), \
                    (a.name, hidden, experts, tokens)


def test_spec_errors_say_what_is_allowed():
    with pytest.raises(lingen.SpecError, match="multiple of 8"):
        lingen.Spec(spec(hidden=1001, experts=8))
    with pytest.raises(lingen.SpecError, match="bf16x3"):
        lingen.Spec(spec(hidden=1024, experts=8, precision="tf32"))
    with pytest.raises(lingen.SpecError, match="rmsnorm_quant"):
        lingen.Spec(spec(hidden=1024, experts=8, quant={"output": "columnwise"}))
    with pytest.raises(lingen.SpecError, match="multiple of 128"):
        lingen.Spec(spec(hidden=1000, experts=8, quant={"output": "both"}))


def test_generated_source():
    src = lingen.generate(spec(hidden=1000, experts=160, precision="bf16x3"), "sm_80")
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in src
    assert "lg_split_bf16x2(t, 3, v0, v1)" in src
    assert "lg_make_a(" in src and "_cols(" not in src
    both = lingen.generate(spec(hidden=2048, experts=256, quant={"output": "both"}), "sm_90a")
    assert "_cols(" in both


def _arrays(tokens=127, hidden=1000, experts=160):
    return (CAI((tokens, hidden)), CAI((hidden,), ptr=0x7F0000100000),
            CAI((experts, hidden), ptr=0x7F0000200000))


def test_ops_bind_sizes(ctx):
    none = dict(context=ctx, alloc=lambda s, e: None)
    x, w, rw = _arrays()
    for precision in ("bf16", "bf16x2", "bf16x3"):
        assert reaches_the_device(
            lambda: lingen.rmsnorm_router(x, w, rw, precision=precision, **none))
    assert reaches_the_device(lambda: lingen.rmsnorm_router(x, w, rw, round_scale=False, **none))
    x, w, rw = _arrays(1, 2048, 1)
    assert reaches_the_device(lambda: lingen.rmsnorm_router(x, w, rw, output="both", **none))


def test_ops_refuse_bad_shapes(ctx):
    x, w, rw = _arrays()
    with pytest.raises(ValueError, match="w"):
        lingen.rmsnorm_router(x, CAI((999,), ptr=0x7F0000100000), rw, context=ctx)
    with pytest.raises(ValueError, match="route_w"):
        lingen.rmsnorm_router(x, w, CAI((160, 999), ptr=0x7F0000200000), context=ctx)
    with pytest.raises(lingen.SpecError, match="multiple of 128"):
        lingen.rmsnorm_router(x, w, rw, output="both", context=ctx)


def test_torch_schema():
    torch = pytest.importorskip("torch")
    import lingen.torch as lt
    fam = lingen.families()[OP]
    sch = lt.schema(fam, fam.passes["forward"])
    assert sch.startswith("(Tensor x, Tensor w, Tensor route_w, *")
    assert 'str precision="bf16"' in sch and 'str quant_output="rowwise"' in sch
    assert sch.endswith("-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")
    assert callable(lt.rms_norm_router) and issubclass(lt.RMSNormRouterFunction,
                                                       torch.autograd.Function)
