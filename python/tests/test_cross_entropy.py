"""cross_entropy (docs/kernels.md K9) without a GPU: the declaration as Python
reads it (labels of the "index" element type), shapes agreeing with the
library's, the spec checks' messages, generated source, and the ops binding
fake arrays (no memory behind them) up to the device: tokens and vocab from
the logits, int32 labels choosing the int32 kernel, vocab_start and shards
defaulting where no argument shows them, bad shapes and types refused by
name."""
import pytest

import lingen
from lingen import _core, _families

from conftest import CAI, Reached

OP = "cross_entropy"


PLANS = []


@pytest.fixture(autouse=True)
def keep_plans(no_device, monkeypatch):
    """No driver (conftest's no_device), and every plan a call prepares kept."""
    prepare = _core._prepare

    def keep(*a):
        PLANS.append(prepare(*a))
        return PLANS[-1]
    monkeypatch.setattr(_core, "_prepare", keep)


def test_declaration():
    f = lingen.families()[OP]
    assert set(f.passes) == {"forward", "backward"}
    assert set(f.dtypes) == {"bf16", "fp32"}
    fwd, bwd = f.passes["forward"], f.passes["backward"]
    assert fwd.sizes == ("tokens", "vocab_start", "shards")
    assert bwd.sizes == ("tokens", "vocab_start")
    assert [a.name for a in fwd.args] == ["logits", "labels", "stats_in", "g", "loss", "sum_exp",
                                          "max_logit", "stats", "grad"]
    assert [a.name for a in bwd.args] == ["logits", "labels", "sum_exp", "max_logit", "dloss",
                                          "grad"]
    assert fwd.arg("labels").elem == "index" and fwd.arg("logits").elem == "dtype"
    assert f.key("ignore_index").default == -100 and f.key("label_smoothing").default == 0
    assert f.key("part").values == ("full", "shard", "merge") and f.key("vocab").shape


def test_python_shapes_agree_with_the_library():
    for part, vocab in (("full", 50257), ("shard", 19648), ("merge", 157184)):
        for pass_, decl in lingen.families()[OP].passes.items():
            if part == "merge" and pass_ == "backward":
                continue
            s = lingen.Spec({"op": OP, "pass": pass_, "dtype": "bf16", "vocab": vocab, "part": part})
            for sizes in ((0, 0, 1), (1, 0, 2), (7, 3, 8)):
                sz = list(sizes[:len(decl.sizes)])
                env = dict(zip(decl.sizes, sz), vocab=vocab)
                for a in decl.args:
                    assert _families.eval_shape(a, env) == s.arg_shape(a.index, sz), \
                        (part, pass_, a.name, sizes)


def test_spec_errors():
    with pytest.raises(lingen.SpecError, match=r"label_smoothing: found -0.1.*0 <= e <= 1"):
        lingen.Spec({"op": OP, "pass": "forward", "dtype": "bf16", "vocab": 10,
                     "label_smoothing": -0.1})
    with pytest.raises(lingen.SpecError, match=r"fused: found true"):
        lingen.Spec({"op": OP, "pass": "backward", "dtype": "bf16", "vocab": 10, "fused": True})
    with pytest.raises(lingen.SpecError, match=r"index"):
        lingen.Spec({"op": OP, "pass": "forward", "dtype": "bf16", "vocab": 10, "index": "int8"})


def test_label_smoothing_one_is_allowed():
    """torch takes label_smoothing in [0, 1]: 1 (the uniform target) too."""
    s = lingen.Spec({"op": OP, "pass": "forward", "dtype": "bf16", "vocab": 10,
                     "label_smoothing": 1.0})
    assert "_ls1" in s.entry
    with pytest.raises(lingen.SpecError, match=r"label_smoothing: found 1.5.*0 <= e <= 1"):
        lingen.Spec({"op": OP, "pass": "forward", "dtype": "bf16", "vocab": 10,
                     "label_smoothing": 1.5})


def test_generate_has_one_entry():
    src = lingen.generate({"op": OP, "pass": "forward", "dtype": "bf16", "vocab": 50257,
                           "label_smoothing": 0.1, "ignore_index": -1})
    assert "lg_cross_entropy_fwd_bf16_v50257_iim1_ls0p1(" in src
    assert "ex2.approx" in src


def _last_plan(ctx):
    return PLANS[-1]


@pytest.mark.parametrize("typestr,index", [("<i8", "int64"), ("<i4", "int32")])
def test_forward_binds_tokens_vocab_and_index(ctx, typestr, index):
    logits, labels = CAI((5, 50257)), CAI((5,), typestr)
    with pytest.raises(Reached):
        lingen.cross_entropy_forward(logits, labels, context=ctx, alloc=lambda s, e: None)
    plan = _last_plan(ctx)
    assert plan.sizes == (5, 0, 1)  # vocab_start, shards: not read by the full forward
    assert '"vocab": 50257' in plan.spec.canonical and f'"index": "{index}"' in plan.spec.canonical
    assert dict((n, e) for n, _, _, e, _ in plan.args)["labels"] == index


def test_merge_takes_shards_from_stats(ctx):
    stats, labels = CAI((4, 9, 6), "<f4"), CAI((9,), "<i8")
    with pytest.raises(Reached):
        lingen.cross_entropy_merge(stats, labels, 157184, context=ctx, alloc=lambda s, e: None)
    plan = _last_plan(ctx)
    assert plan.sizes == (9, 0, 4)
    assert '"part": "merge"' in plan.spec.canonical and '"vocab": 157184' in plan.spec.canonical


def test_shard_backward_takes_vocab_start(ctx):
    x, y, v = CAI((3, 100)), CAI((3,), "<i8"), CAI((3,), "<f4")
    with pytest.raises(Reached):
        lingen.cross_entropy_backward(x, y, v, v, v, vocab_start=200, classes=400, context=ctx,
                                      alloc=lambda s, e: None)
    plan = _last_plan(ctx)
    assert plan.sizes == (3, 200)
    assert '"part": "shard"' in plan.spec.canonical and '"classes": 400' in plan.spec.canonical


def test_bad_arguments_named(ctx):
    with pytest.raises(TypeError, match="labels: found .* expected int64 or int32"):
        lingen.cross_entropy_forward(CAI((5, 10)), CAI((5,), "<f4"), context=ctx)
    with pytest.raises(ValueError, match="labels: found shape"):
        lingen.cross_entropy_forward(CAI((5, 10)), CAI((4,), "<i8"), context=ctx)
    with pytest.raises(TypeError, match="logits"):
        lingen.cross_entropy_forward(CAI((5, 10), "<i8"), CAI((5,), "<i8"), context=ctx)


def test_sizes_default_only_where_no_argument_shows_them():
    decl = lingen.families()[OP].passes["forward"]
    assert "shards" in _core._names(decl.arg("stats_in"))
    assert not any("vocab_start" in _core._names(a) for a in decl.args)
