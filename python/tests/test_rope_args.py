"""qk_norm_rope (K2) through the Python call layer without a GPU: sizes
and keys bound from the arrays (seq and batch from qkv in either order,
head_dim from the weights), q_heads and kv_heads from the options, errors
that name the argument or key, and the shape expressions (pick, a number
key) evaluated in Python as the library does."""
import pytest

import lingen
from lingen import _families

from conftest import CAI, reaches_the_device

pytestmark = pytest.mark.usefixtures("no_device")

BF16, F32 = "<V2", "<f4"


def arrays(S, B, H, h, D, transposed=True, rotary=0.5):
    W = (H + 2 * h) * D
    qkv = CAI((S, B, W) if transposed else (B, S, W), BF16)
    qw = CAI((D,), BF16, ptr=0x7F0000100000)
    kw = CAI((D,), BF16, ptr=0x7F0000200000)
    freqs = CAI((S, int(D * rotary)), F32, ptr=0x7F0000300000)
    return qkv, qw, kw, freqs


@pytest.mark.parametrize("transposed", [True, False])
def test_forward_reaches_the_device(ctx, transposed):
    qkv, qw, kw, fr = arrays(7, 3, 12, 4, 64, transposed)
    assert reaches_the_device(lambda: lingen.qk_norm_rope(
        qkv, qw, kw, fr, q_heads=12, kv_heads=4, transposed=transposed, context=ctx,
        alloc=lambda s, e: None))


def test_backward_reaches_the_device(ctx):
    S, B, H, h, D = 5, 2, 16, 4, 128
    qkv, qw, kw, fr = arrays(S, B, H, h, D)
    gq, gk, gv = CAI((B, S, H, D), BF16), CAI((B, S, h, D), BF16), CAI((B, S, h, D), BF16)
    assert reaches_the_device(lambda: lingen.qk_norm_rope_backward(
        gq, gk, gv, qkv, qw, kw, fr, context=ctx, alloc=lambda s, e: None))


def test_qkv_width_must_match_the_heads(ctx):
    qkv, qw, kw, fr = arrays(7, 3, 12, 4, 64)
    with pytest.raises(ValueError) as e:
        lingen.qk_norm_rope(qkv, qw, kw, fr, q_heads=16, kv_heads=4, context=ctx)
    assert "qkv: found shape (7, 3, 1280), expected (7, 3, 1536)" in str(e.value)


def test_freqs_width_is_the_rotated_width(ctx):
    qkv, qw, kw, _ = arrays(7, 3, 12, 4, 64)
    with pytest.raises(ValueError) as e:
        lingen.qk_norm_rope(qkv, qw, kw, CAI((7, 32), F32), q_heads=12, kv_heads=4,
                            rotary_fraction=1.0, context=ctx)
    assert "freqs: found shape (7, 32), expected (7, 64)" in str(e.value)


def test_heads_must_divide(ctx):
    qkv, qw, kw, fr = arrays(7, 3, 12, 5, 64)
    with pytest.raises(lingen.SpecError) as e:
        lingen.qk_norm_rope(qkv, qw, kw, fr, q_heads=12, kv_heads=5, context=ctx)
    assert "q_heads: found 12" in str(e.value) and "multiple of kv_heads (5)" in str(e.value)


def test_bare_name_follows_pick():
    fam = lingen.families()["qk_norm_rope"]
    qkv = fam.passes["forward"].arg("qkv")
    assert _families.bare_name(qkv.dims[0]) is None
    assert _families.bare_name(qkv.dims[0], fam, {}) == "seq"  # default: seq_batch
    assert _families.bare_name(qkv.dims[0], fam, {"qkv_order": "batch_seq"}) == "batch"
    assert _families.bare_name(qkv.dims[1], fam, {"qkv_order": "batch_seq"}) == "seq"


@pytest.mark.parametrize("order,varlen,cp", [("seq_batch", False, 1), ("batch_seq", False, 1),
                                             ("seq_batch", True, 1), ("seq_batch", True, 4),
                                             ("batch_seq", False, 2)])
@pytest.mark.parametrize("rotary", [0.5, 1.0, 0.25])
def test_python_shapes_agree_with_the_library(order, varlen, cp, rotary):
    fam = lingen.families()["qk_norm_rope"]
    for pass_, decl in fam.passes.items():
        s = lingen.Spec({"op": "qk_norm_rope", "pass": pass_, "dtype": "bf16", "head_dim": 128,
                         "q_heads": 12, "kv_heads": 4, "qkv_order": order,
                         "rotary_fraction": rotary, "varlen": varlen, "cp_size": cp})
        for seq, batch in ((1, 1), (7, 3), (4096, 2), (5, 0)):
            env = {"seq": seq, "batch": batch, "head_dim": 128, "q_heads": 12, "kv_heads": 4,
                   "qkv_order": ["seq_batch", "batch_seq"].index(order),
                   "rotary_fraction": rotary, "varlen": int(varlen), "cp_size": cp}
            for a in decl.args:
                if a.role != "workspace":
                    assert _families.eval_shape(a, env) == s.arg_shape(a.index, [seq, batch]), \
                        (pass_, a.name, order, varlen, cp, rotary)


def test_varlen_binds_the_sequences_from_cu_seqlens():
    """Packed sequences: seq from qkv [T, 1, .], batch from cu_seqlens [n + 1]."""
    fam = lingen.families()["qk_norm_rope"]
    decl = fam.passes["forward"]
    env, origin, bad = _families.bind(fam, decl, {"qkv": (300, 1, 3072), "cu_seqlens": (8,)},
                                      {"varlen": True})
    assert bad is None
    assert env["seq"] == 300 and origin["seq"] == "qkv.shape[0]"
    assert env["batch"] == 7 and origin["batch"] == "cu_seqlens.shape[0] - 1"


def test_varlen_call_reaches_the_device_with_packed_shapes(ctx):
    """qkv [T, 1, dim] (arrays without reshape; torch tensors may be [T,
    dim]) and cu_seqlens [n + 1]: the call layer binds n sequences and gets
    as far as the device; freqs must cover T * cp_size positions."""
    qkv = CAI((300, 1, 3072), BF16)
    qw, kw = CAI((128,), BF16, ptr=0x7F0000100000), CAI((128,), BF16, ptr=0x7F0000200000)
    cu = CAI((8,), "<i4", ptr=0x7F0000400000)
    fr = CAI((600, 64), F32, ptr=0x7F0000300000)
    assert reaches_the_device(lambda: lingen.qk_norm_rope(
        qkv, qw, kw, fr, q_heads=16, kv_heads=4, cu_seqlens=cu, cp_size=2, context=ctx,
        alloc=lambda s, e: None))
    with pytest.raises(ValueError) as e:
        lingen.qk_norm_rope(qkv, qw, kw, CAI((300, 64), F32), q_heads=16, kv_heads=4,
                            cu_seqlens=cu, cp_size=2, context=ctx)
    assert "freqs" in str(e.value) and "(600, 64)" in str(e.value)
