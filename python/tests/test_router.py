"""router_gemm (docs/kernels.md K3) without a GPU: the declaration as Python
reads it, its shapes agreeing with the library's, the spec checks'
messages, the generated source, and the ops binding fake arrays (no memory
behind them) up to the device: hidden and experts from x and w, dx or dw
skipped, bad shapes refused by name."""
import pytest

import lingen
from lingen import _families

from conftest import CAI, reaches_the_device

OP = "router_gemm"


pytestmark = pytest.mark.usefixtures("no_device")


def test_declaration():
    f = lingen.families()[OP]
    assert set(f.passes) == {"forward", "backward"}
    fwd, bwd = f.passes["forward"], f.passes["backward"]
    assert fwd.sizes == ("tokens",) and bwd.sizes == ("tokens",)
    assert [a.name for a in fwd.args] == ["x", "w", "logits"]
    assert [a.name for a in bwd.args] == ["dy", "x", "w", "dx", "dw", "workspace"]
    assert fwd.arg("logits").elem == "fp32" and bwd.arg("dy").elem == "fp32"
    assert bwd.arg("dx").elem == "bf16" and bwd.arg("dw").elem == "fp32"
    assert f.key("precision").default == "bf16" and f.key("hidden").shape and f.key("experts").shape


def test_python_shapes_agree_with_the_library():
    for hidden, experts in ((2048, 256), (1000, 1), (8, 97)):
        for pass_, decl in lingen.families()[OP].passes.items():
            s = lingen.Spec({"op": OP, "pass": pass_, "dtype": "bf16", "hidden": hidden,
                             "experts": experts})
            for tokens in (0, 1, 127, 8192):
                env = {"tokens": tokens, "hidden": hidden, "experts": experts}
                for a in decl.args:
                    if a.role == "workspace":
                        continue
                    assert _families.eval_shape(a, env) == s.arg_shape(a.index, [tokens]), \
                        (pass_, a.name, hidden, experts, tokens)


def test_spec_errors_say_what_is_allowed():
    with pytest.raises(lingen.SpecError, match="multiple of 8"):
        lingen.Spec({"op": OP, "pass": "forward", "dtype": "bf16", "hidden": 1001, "experts": 8})
    with pytest.raises(lingen.SpecError, match="tf32"):
        lingen.Spec({"op": OP, "pass": "backward", "dtype": "bf16", "hidden": 1000, "experts": 8,
                     "precision": "fp32"})
    with pytest.raises(lingen.SpecError, match="tile.split"):
        lingen.Spec({"op": OP, "pass": "forward", "dtype": "bf16", "hidden": 1000, "experts": 8,
                     "tile": {"split": 2}})


def test_generated_source():
    src = lingen.generate({"op": OP, "pass": "backward", "dtype": "bf16", "hidden": 1000,
                           "experts": 160, "precision": "bf16x3"}, "sm_80")
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in src
    assert "ldmatrix.sync.aligned.m8n8.x4.trans" in src
    assert "lg_split_bf16x2(t[j], 3, v[2 * j], v[2 * j + 1])" in src  # dy into 3 bf16 planes



def test_ops_bind_sizes(ctx):
    x, w = CAI((127, 1000)), CAI((160, 1000), ptr=0x7F0000200000)
    none = dict(context=ctx, alloc=lambda s, e: None)
    assert reaches_the_device(lambda: lingen.router_gemm(x, w, **none))
    dy = CAI((127, 160), typestr="<f4", ptr=0x7F0000300000)
    for precision in ("bf16", "bf16x2", "bf16x3", "tf32"):
        assert reaches_the_device(
            lambda: lingen.router_gemm_backward(dy, x, w, precision=precision, **none))
    assert reaches_the_device(lambda: lingen.router_gemm_backward(dy, x, w, dx=False, **none))
    assert reaches_the_device(lambda: lingen.router_gemm_backward(dy, x, w, dw=False, **none))


def test_ops_refuse_bad_shapes(ctx):
    x, w = CAI((127, 1000)), CAI((160, 1000), ptr=0x7F0000200000)
    with pytest.raises(ValueError, match=r"w: found shape \(160, 1000\), expected \(96, 1000\)"):
        lingen.router_gemm_backward(CAI((127, 96), typestr="<f4", ptr=0x7F0000300000), x, w,
                                    context=ctx)
    with pytest.raises(ValueError, match="w"):
        lingen.router_gemm(x, CAI((160, 999), ptr=0x7F0000200000), context=ctx)
