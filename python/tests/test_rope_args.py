"""qk_norm_rope (K2) through the Python call layer without a GPU: sizes
and keys bound from the arrays (seq and batch from qkv in either order,
head_dim from the weights), q_heads and kv_heads from the options, errors
that name the argument or key, and the shape expressions (pick, a number
key) evaluated in Python as the library does."""
import pytest

import lingen
from lingen import _families

from conftest import CAI
from test_args import Reached, reaches_the_device  # noqa: F401  (the no_device fixture)
from test_args import no_device  # noqa: F401

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


@pytest.mark.parametrize("order", ["seq_batch", "batch_seq"])
@pytest.mark.parametrize("rotary", [0.5, 1.0, 0.25])
def test_python_shapes_agree_with_the_library(order, rotary):
    fam = lingen.families()["qk_norm_rope"]
    for pass_, decl in fam.passes.items():
        s = lingen.Spec({"op": "qk_norm_rope", "pass": pass_, "dtype": "bf16", "head_dim": 128,
                         "q_heads": 12, "kv_heads": 4, "qkv_order": order,
                         "rotary_fraction": rotary})
        for seq, batch in ((1, 1), (7, 3), (4096, 2)):
            env = {"seq": seq, "batch": batch, "head_dim": 128, "q_heads": 12, "kv_heads": 4,
                   "qkv_order": ["seq_batch", "batch_seq"].index(order),
                   "rotary_fraction": rotary}
            for a in decl.args:
                if a.role != "workspace":
                    assert _families.eval_shape(a, env) == s.arg_shape(a.index, [seq, batch]), \
                        (pass_, a.name, order, rotary)
