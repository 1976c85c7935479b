"""The per-expert and weight quantisers' declarations on the CPU: shapes
(the st capacity of the per-expert layout), Python shapes equal to the
library's at expert counts and token counts of every kind, spec errors,
generated sources, and the ops' exports. No GPU."""
import pytest

import lingen
from lingen import _families


def test_declarations():
    fams = lingen.families()
    b = fams["fp8_quant_batched"].passes["forward"]
    assert [a.name for a in b.args] == ["x", "counts", "q", "s", "qt", "st"]
    assert b.sizes == ("tokens", "experts") and b.arg("counts").elem == "int32"
    w = fams["fp8_quant_weight"].passes["forward"]
    assert [a.name for a in w.args] == ["w", "q", "s", "qt", "st"] and w.sizes == ("rows",)
    assert callable(lingen.fp8_quant_batched) and callable(lingen.fp8_quant_weight)


@pytest.mark.parametrize("hidden", [128, 384, 1024])
def test_batched_shapes_agree_with_the_library(hidden):
    decl = lingen.families()["fp8_quant_batched"].passes["forward"]
    s = lingen.Spec({"op": "fp8_quant_batched", "pass": "forward", "dtype": "bf16", "hidden": hidden,
                     "quant": {}})
    for tokens in (0, 1, 127, 128, 129, 65536):
        for experts in (1, 3, 96, 256, 1000):
            env = {"tokens": tokens, "experts": experts, "hidden": hidden}
            for a in decl.args:
                assert _families.eval_shape(a, env) == s.arg_shape(a.index, [tokens, experts]), \
                    (a.name, tokens, experts)
            assert s.arg_shape(5, [tokens, experts]) == ((tokens + 127) // 128 + experts, hidden)


def test_weight_shapes_and_errors():
    s = lingen.Spec({"op": "fp8_quant_weight", "pass": "forward", "dtype": "bf16", "hidden": 384,
                     "quant": {}})
    assert s.arg_shape(2, [129]) == (2, 3)
    with pytest.raises(lingen.SpecError, match="quant.output"):
        lingen.Spec({"op": "fp8_quant_weight", "pass": "forward", "dtype": "bf16", "hidden": 384,
                     "quant": {"output": "rowwise"}})
    with pytest.raises(lingen.SpecError, match="fblocks"):
        lingen.Spec({"op": "fp8_quant_batched", "pass": "forward", "dtype": "bf16", "hidden": 384,
                     "quant": {}, "tile": {"fblocks": 3}})


@pytest.mark.parametrize("op", ["fp8_quant_batched", "fp8_quant_weight"])
def test_sources(op):
    for arch in ("sm_90a", "sm_80"):
        s = lingen.Spec({"op": op, "pass": "forward", "dtype": "bf16", "hidden": 1024, "quant": {},
                         "tile": {"values": 32}})
        src = lingen.generate(s.canonical, arch)
        assert s.entry in src and "__global__" in src
        assert ("lg_expert_tiles(" in src) == (op == "fp8_quant_batched")
