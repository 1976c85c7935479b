"""swiglu_quant (docs/kernels.md K7) and batch_swiglu_quant (K6) without a GPU:
the declarations as Python reads them, their shapes agreeing with the
library's (K6's st rows cdiv(tokens, 128) + experts), the spec checks'
messages, and the ops binding fake arrays (no memory behind them) up to
the device: n from x's last dimension (2n), experts from counts, bad
shapes refused by name; the torch ops' schemas."""
import pytest

import lingen
from lingen import _families

from conftest import CAI, reaches_the_device

K7, K6 = "swiglu_quant", "batch_swiglu_quant"


pytestmark = pytest.mark.usefixtures("no_device")


def test_declarations():
    f = lingen.families()[K7]
    fwd, bwd = f.passes["forward"], f.passes["backward"]
    assert fwd.sizes == ("tokens",) and bwd.sizes == ("tokens",)
    assert [a.name for a in fwd.args] == ["x", "q", "s", "qt", "st"]
    assert [a.name for a in bwd.args] == ["g", "x", "dxq", "dxs", "dxqt", "dxst", "dx"]
    assert bwd.arg("dx").role == "optional_out" and bwd.arg("dx").elem == "bf16"
    assert f.key("dx_bf16").default is False and f.key("intermediate").shape
    f = lingen.families()[K6]
    fwd, bwd = f.passes["forward"], f.passes["backward"]
    assert [a.name for a in fwd.args] == ["x", "prob", "counts", "q", "s", "qt", "st"]
    assert [a.name for a in bwd.args] == ["g", "x", "prob", "counts", "dxq", "dxs", "dprob",
                                           "dxqt", "dxst", "dx"]
    assert fwd.arg("counts").elem == "int32" and fwd.arg("prob").elem == "fp32"
    assert bwd.arg("dprob").elem == "fp32"


def test_python_shapes_agree_with_the_library():
    for op, extra in ((K7, {}), (K6, {"experts": 96}), (K6, {"experts": 1})):
        for n in (128, 512, 384):
            for pass_, decl in lingen.families()[op].passes.items():
                s = lingen.Spec({"op": op, "pass": pass_, "dtype": "bf16", "intermediate": n,
                                 "quant": {}, **extra})
                for m in (0, 1, 129, 8192):
                    env = {"tokens": m, "intermediate": n, **extra}
                    for a in decl.args:
                        assert _families.eval_shape(a, env) == s.arg_shape(a.index, [m]), \
                            (op, pass_, a.name, n, m)
    s = lingen.Spec({"op": K6, "pass": "forward", "dtype": "bf16", "intermediate": 512,
                     "experts": 256, "quant": {}})
    st = lingen.families()[K6].passes["forward"].arg("st")
    assert s.arg_shape(st.index, [65536]) == (512 + 256, 512)


def test_spec_errors_say_what_is_allowed():
    with pytest.raises(lingen.SpecError, match="only the backward"):
        lingen.Spec({"op": K7, "pass": "forward", "dtype": "bf16", "intermediate": 512,
                     "dx_bf16": True, "quant": {}})
    with pytest.raises(lingen.SpecError, match="multiple of 128"):
        lingen.Spec({"op": K7, "pass": "forward", "dtype": "bf16", "intermediate": 500,
                     "quant": {}})
    with pytest.raises(lingen.SpecError, match='found "rowwise".*both'):
        lingen.Spec({"op": K6, "pass": "backward", "dtype": "bf16", "intermediate": 512,
                     "experts": 8, "quant": {"output": "rowwise"}})



def test_ops_bind_sizes(ctx):
    none = dict(context=ctx, alloc=lambda s, e: None)
    x = CAI((333, 1024))
    g = CAI((333, 512), ptr=0x7F0000100000)
    assert reaches_the_device(lambda: lingen.swiglu_quant(x, **none))
    assert reaches_the_device(lambda: lingen.swiglu_quant(x, output="rowwise", **none))
    assert reaches_the_device(lambda: lingen.swiglu_quant_backward(g, x, **none))
    assert reaches_the_device(lambda: lingen.swiglu_quant_backward(g, x, dx_bf16=True, **none))
    p = CAI((333, 1), typestr="<f4", ptr=0x7F0000200000)
    counts = CAI((96,), typestr="<i4", ptr=0x7F0000300000)
    assert reaches_the_device(lambda: lingen.batch_swiglu_quant(x, p, counts, **none))
    assert reaches_the_device(lambda: lingen.batch_swiglu_quant_backward(g, x, p, counts, **none))


def test_ops_refuse_bad_shapes(ctx):
    x = CAI((333, 1024))
    with pytest.raises(ValueError, match=r"x: found shape \(333, 1024\), expected \(333, 2048\)"):
        lingen.swiglu_quant_backward(CAI((333, 1024), ptr=0x7F0000100000), x, context=ctx)
    with pytest.raises(ValueError, match=r"prob: found shape \(333,\), expected 2 dimensions \[tokens, 1\]"):
        lingen.batch_swiglu_quant(x, CAI((333,), typestr="<f4", ptr=0x7F0000200000),
                                  CAI((8,), typestr="<i4", ptr=0x7F0000300000), context=ctx)
    with pytest.raises(ValueError, match="multiple of 128"):
        lingen.swiglu_quant(CAI((333, 1000)), context=ctx)
