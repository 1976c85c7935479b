"""group_rmsnorm_gate (docs/kernels.md K8) without a GPU: the declaration as
Python reads it, its shapes (booleans in the expressions) agreeing with the
library's, the spec checks' messages, and the ops binding fake arrays
(no memory behind them) up to the device: sizes batch and seq from x, the
shared weight told by its length, bad shapes refused by name."""
import pytest

import lingen
from lingen import _families

from conftest import CAI, reaches_the_device

OP = "group_rmsnorm_gate"


pytestmark = pytest.mark.usefixtures("no_device")


def test_declaration():
    f = lingen.families()[OP]
    assert set(f.passes) == {"forward", "backward"}
    fwd, bwd = f.passes["forward"], f.passes["backward"]
    assert fwd.sizes == ("batch", "seq") and bwd.sizes == ("batch", "seq")
    assert [a.name for a in fwd.args] == ["x", "gate", "w", "y"]
    assert [a.name for a in bwd.args] == ["dy", "x", "gate", "w", "dx", "dgate", "dw", "workspace"]
    assert bwd.arg("dw").elem == "fp32" and bwd.arg("workspace").role == "workspace"
    assert f.key("groups").default == 4 and f.key("transpose").default is True
    assert f.key("shared_weight").default is False and f.key("dim").shape


@pytest.mark.parametrize("transpose", [True, False])
@pytest.mark.parametrize("shared", [True, False])
def test_python_shapes_agree_with_the_library(transpose, shared):
    for dim, groups in ((2048, 4), (1000, 5), (32, 1)):
        for pass_, decl in lingen.families()[OP].passes.items():
            s = lingen.Spec({"op": OP, "pass": pass_, "dtype": "bf16", "dim": dim,
                             "groups": groups, "transpose": transpose, "shared_weight": shared})
            for batch, seq in ((0, 5), (1, 1), (2, 4096), (3, 7)):
                env = {"batch": batch, "seq": seq, "dim": dim, "groups": groups,
                       "transpose": int(transpose), "shared_weight": int(shared)}
                for a in decl.args:
                    if a.role == "workspace":
                        continue
                    assert _families.eval_shape(a, env) == s.arg_shape(a.index, [batch, seq]), \
                        (pass_, a.name, dim, groups, batch, seq)
            gate = s.arg_shape(decl.arg("gate").index, [2, 7])
            assert gate == ((7, 2, dim) if transpose else (2, 7, dim))
            w = s.arg_shape(decl.arg("w").index, [2, 7])
            assert w == ((dim // groups,) if shared else (dim,))


def test_spec_errors_say_what_is_allowed():
    with pytest.raises(lingen.SpecError) as e:
        lingen.Spec({"op": OP, "pass": "forward", "dtype": "bf16", "dim": 1000, "groups": 4})
    assert "d = dim / groups = 250" in str(e.value) and "multiple of 8" in str(e.value)
    with pytest.raises(lingen.SpecError, match="multiple of groups = 3"):
        lingen.Spec({"op": OP, "pass": "forward", "dtype": "bf16", "dim": 1000, "groups": 3})



def test_ops_bind_sizes_and_the_shared_weight(ctx):
    x, gate = CAI((2, 7, 2048)), CAI((7, 2, 2048), ptr=0x7F0000100000)
    none = dict(context=ctx, alloc=lambda s, e: None)
    for w in (CAI((2048,), ptr=0x7F0000200000), CAI((512,), ptr=0x7F0000200000)):
        assert reaches_the_device(lambda: lingen.group_rmsnorm_gate(x, gate, w, **none))
        dy = CAI((7, 2, 2048), ptr=0x7F0000300000)
        assert reaches_the_device(
            lambda: lingen.group_rmsnorm_gate_backward(dy, x, gate, w, **none))
    flat = CAI((2, 7, 2048), ptr=0x7F0000100000)
    w = CAI((2048,), ptr=0x7F0000200000)
    assert reaches_the_device(
        lambda: lingen.group_rmsnorm_gate(x, flat, w, transpose=False, **none))


def test_ops_refuse_bad_shapes(ctx):
    x, w = CAI((2, 7, 2048)), CAI((2048,), ptr=0x7F0000200000)
    want = r"gate: found shape \(2, 7, 2048\), expected \(7, 2, 2048\)"
    with pytest.raises(ValueError, match=want):
        lingen.group_rmsnorm_gate(x, CAI((2, 7, 2048), ptr=0x7F0000100000), w, context=ctx)
    with pytest.raises(ValueError, match=r"w: found shape \(1000,\), expected \(512,\)"):
        lingen.group_rmsnorm_gate(x, CAI((7, 2, 2048), ptr=0x7F0000100000),
                                  CAI((1000,), ptr=0x7F0000200000), context=ctx)
