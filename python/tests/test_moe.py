"""The MoE families (moe_row_map, moe_permute, moe_unpermute; docs/kernels.md K4,
K5) without a GPU: the declarations as Python reads them, their shapes
(the padded row capacity) agreeing with the library's, the spec checks'
messages, and the ops binding fake arrays (no memory behind them) up to
the device: tokens, hidden and experts from the arrays, the routing kind
from the element type, top_k and multiple as options, bad shapes refused
by name."""
import pytest

import lingen
from lingen import _families

from conftest import CAI, reaches_the_device

I32, I64, U8, F32 = "<i4", "<i8", "|u1", "<f4"


pytestmark = pytest.mark.usefixtures("no_device")



def test_declarations():
    fams = lingen.families()
    rm = fams["moe_row_map"]
    assert set(rm.passes) == {"forward"}
    assert [a.name for a in rm.passes["forward"].args] == [
        "mask", "topk", "topk64", "row_id_map", "counts", "offsets", "row_index", "padded_counts",
        "workspace"]
    assert rm.key("routing").values == ("mask", "topk_i32", "topk_i64")
    assert rm.key("multiple").default == 16 and rm.key("top_k").shape
    perm = fams["moe_permute"]
    assert set(perm.dtypes) == {"bf16", "e4m3"}
    fwd = perm.passes["forward"]
    assert fwd.arg("out").elem == "dtype" and fwd.arg("out_probs").role == "optional_out"
    assert fwd.arg("out").shape == "tokens * top_k + experts * (multiple - 1), hidden"
    un = fams["moe_unpermute"]
    assert un.key("weighted").default is False
    assert [a.name for a in un.passes["backward"].args] == [
        "dout", "drestore", "row_id_map", "offsets", "counts", "g", "probs", "dg", "dprobs"]


@pytest.mark.parametrize("op,dtype,keys", [
    ("moe_row_map", "bf16", {"experts": 256, "top_k": 8, "multiple": 16}),
    ("moe_row_map", "bf16", {"experts": 96, "top_k": 6, "multiple": 128, "routing": "topk_i64"}),
    ("moe_permute", "bf16", {"hidden": 2048, "experts": 256, "top_k": 8}),
    ("moe_permute", "e4m3", {"hidden": 384, "experts": 160, "top_k": 6, "multiple": 1}),
    ("moe_unpermute", "bf16", {"hidden": 1001, "experts": 7, "top_k": 3, "weighted": True}),
])
def test_python_shapes_agree_with_the_library(op, dtype, keys):
    fam = lingen.families()[op]
    for pass_, decl in fam.passes.items():
        if dtype == "e4m3" and pass_ == "backward":
            continue
        s = lingen.Spec({"op": op, "pass": pass_, "dtype": dtype, **keys})
        env0 = {k.path: keys.get(k.path, k.default) for k in fam.keys
                if k.type in ("int", "bool") and not k.tile}
        env0 = {k: int(v) for k, v in env0.items() if v is not None}
        for tokens in (0, 1, 7, 8192):
            env = dict(env0, tokens=tokens)
            for a in decl.args:
                if a.role == "workspace":
                    continue
                assert _families.eval_shape(a, env) == s.arg_shape(a.index, [tokens]), \
                    (op, pass_, a.name, tokens)
    if op == "moe_permute":
        s = lingen.Spec({"op": op, "pass": "forward", "dtype": dtype, **keys})
        rows = s.arg_shape(fam.passes["forward"].arg("out").index, [8192])[0]
        assert rows == 8192 * keys["top_k"] + keys["experts"] * (keys.get("multiple", 16) - 1)


def test_spec_errors_say_what_is_allowed():
    with pytest.raises(lingen.SpecError, match="top_k: found 9.*experts = 8"):
        lingen.Spec({"op": "moe_row_map", "pass": "forward", "dtype": "bf16", "experts": 8,
                     "top_k": 9})
    with pytest.raises(lingen.SpecError, match="multiple of 128"):
        lingen.Spec({"op": "moe_permute", "pass": "forward", "dtype": "e4m3", "hidden": 1000,
                     "experts": 8, "top_k": 2})
    with pytest.raises(lingen.SpecError, match="bf16"):
        lingen.Spec({"op": "moe_permute", "pass": "backward", "dtype": "e4m3", "hidden": 1024,
                     "experts": 8, "top_k": 2})


def test_used_arguments_follow_the_options():
    s = lingen.Spec({"op": "moe_row_map", "pass": "forward", "dtype": "bf16", "experts": 8,
                     "top_k": 2, "routing": "topk_i32"})
    decl = lingen.families()["moe_row_map"].passes["forward"]
    assert [s.arg_used(a.index) for a in decl.args[:3]] == [False, True, False]
    s = lingen.Spec({"op": "moe_permute", "pass": "forward", "dtype": "bf16", "hidden": 64,
                     "experts": 8, "top_k": 2})
    fwd = lingen.families()["moe_permute"].passes["forward"]
    assert not s.arg_used(fwd.arg("x_scale").index) and not s.arg_used(fwd.arg("out_scale").index)


def test_ops_bind_the_row_map(ctx):
    none = dict(context=ctx, alloc=lambda s, e: None)
    mask = CAI((8192, 256), typestr=U8)
    assert reaches_the_device(lambda: lingen.moe_row_map(mask, top_k=8, **none))
    topk = CAI((8192, 8), typestr=I32)
    assert reaches_the_device(lambda: lingen.moe_row_map(topk, top_k=8, experts=160, **none))
    topk = CAI((7, 6), typestr=I64)
    assert reaches_the_device(lambda: lingen.moe_row_map(topk, top_k=6, experts=96, multiple=128,
                                                         **none))
    with pytest.raises(ValueError, match="experts="):
        lingen.moe_row_map(CAI((5, 2), typestr=I32), top_k=2, **none)


def test_ops_bind_permute_and_unpermute(ctx):
    none = dict(context=ctx, alloc=lambda s, e: None)
    T, H, E, K = 333, 1001, 96, 6
    rows = T * K + E * 15
    x = CAI((T, H))
    m = CAI((T, E), typestr=I32, ptr=0x7F0000100000)
    off = CAI((E + 1,), typestr=I32, ptr=0x7F0000200000)
    cnt = CAI((E,), typestr=I32, ptr=0x7F0000300000)
    probs = CAI((T, E), typestr=F32, ptr=0x7F0000400000)
    assert reaches_the_device(lambda: lingen.moe_permute(x, m, off, cnt, probs, top_k=K, **none))
    g = CAI((rows, H), ptr=0x7F0000500000)
    pp = CAI((rows,), typestr=F32, ptr=0x7F0000600000)
    assert reaches_the_device(lambda: lingen.moe_permute_backward(g, m, pp, top_k=K, **none))
    assert reaches_the_device(lambda: lingen.moe_unpermute(g, m, pp, top_k=K, weighted=True,
                                                           **none))
    dout = CAI((T, H), ptr=0x7F0000700000)
    assert reaches_the_device(lambda: lingen.moe_unpermute_backward(
        dout, m, off, cnt, probs, g, pp, top_k=K, weighted=True, **none))
    xq = CAI((T, 1024), typestr="|V1")
    xs = CAI((T, 8), typestr=F32, ptr=0x7F0000800000)
    assert reaches_the_device(lambda: lingen.moe_permute(xq, m, off, cnt, None, xs, top_k=K,
                                                         **none))


def test_ops_refuse_bad_shapes(ctx):
    T, H, E, K = 333, 1001, 96, 6
    m = CAI((T, E), typestr=I32, ptr=0x7F0000100000)
    bad = CAI((T * K, H), ptr=0x7F0000500000)  # no room for the padding rows
    want = r"g: found shape \(1998, 1001\), expected \(3438, 1001\)"
    with pytest.raises(ValueError, match=want):
        lingen.moe_unpermute(bad, m, top_k=K, context=ctx)
    # the spec's declaration makes the optional probs required when weighted
    good = CAI((T * K + E * 15, H), ptr=0x7F0000500000)
    with pytest.raises(TypeError, match="moe_unpermute: probs is required"):
        lingen.moe_unpermute(good, m, top_k=K, weighted=True, context=ctx)
    with pytest.raises(TypeError, match="moe_unpermute_backward: probs is required"):
        lingen.moe_unpermute_backward(CAI((T, H)), m, CAI((E + 1,), typestr=I32, ptr=0x7F0000200000),
                                      CAI((E,), typestr=I32, ptr=0x7F0000300000), g=good, top_k=K,
                                      weighted=True, context=ctx)


def test_ops_bind_permute_quant(ctx):
    none = dict(context=ctx, alloc=lambda s, e: None)
    T, H, E, K = 333, 1024, 96, 6
    rows = T * K + E * 15
    x = CAI((T, H))
    ri = CAI((rows,), typestr=I32, ptr=0x7F0000100000)
    pc = CAI((E,), typestr=I32, ptr=0x7F0000200000)
    probs = CAI((T, E), typestr=F32, ptr=0x7F0000300000)
    for output in ("both", "rowwise", "columnwise"):
        assert reaches_the_device(lambda: lingen.moe_permute_quant(x, ri, pc, probs, top_k=K,
                                                                   output=output, **none))
    s = lingen.Spec({"op": "moe_permute_quant", "pass": "forward", "dtype": "bf16", "hidden": H,
                     "experts": E, "top_k": K, "quant": {}})
    decl = lingen.families()["moe_permute_quant"].passes["forward"]
    assert s.arg_shape(decl.arg("st").index, [T]) == ((rows + 127) // 128 + E, H)
    assert s.arg_shape(decl.arg("s").index, [T]) == (H // 128, rows)
