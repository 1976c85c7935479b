"""The tensor-list families on the CPU: their declarations as the
package reads them (the list argument, the run-time size "items"), spec
keys and errors, generated source, and lingen.torch's schemas (with
torch). The GPU tests are in test_gpu_lists.py."""
import pytest

import lingen


def test_declarations():
    fams = lingen.families()
    for op, elem in (("grad_norm", "fp32"), ("count_zero", "int64")):
        f = fams[op]
        assert set(f.passes) == {"forward"} and set(f.dtypes) == {"bf16", "fp32"}
        d = f.passes["forward"]
        assert [a.name for a in d.args] == ["list", "out", "workspace"]
        assert [a.role for a in d.args] == ["list", "out", "workspace"]
        assert d.arg("out").elem == elem and d.sizes == ("items",)
        assert f.key("mixed").default is False
    assert fams["grad_norm"].key("ord").values == ("2", "1", "inf")


def test_specs_and_errors():
    s = lingen.Spec({"op": "grad_norm", "pass": "forward", "dtype": "bf16", "ord": "inf",
                     "mixed": True})
    assert s.entry == "lg_grad_norm_fwd_bf16_linf_mixed"
    assert s.arg_shape(0, [7]) == (7, 16) and s.arg_shape(1, [7]) == (1,)
    with pytest.raises(lingen.SpecError, match="only with ord"):
        lingen.Spec({"op": "grad_norm", "pass": "forward", "dtype": "fp32", "ord": "1",
                     "norm": False})
    with pytest.raises(lingen.SpecError, match="per_sm"):
        lingen.Spec({"op": "count_zero", "pass": "forward", "dtype": "fp32",
                     "tile": {"threads": 1024, "per_sm": 4}})


def test_generated_source():
    for arch in ("sm_90a", "sm_80"):
        src = lingen.generate({"op": "count_zero", "pass": "forward", "dtype": "bf16"}, arch)
        assert "lg_count_zero_fwd_bf16_final" in src and "0x7fffu" in src
        assert ("griddepcontrol.wait" in src) == (arch == "sm_90a")
    src = lingen.generate({"op": "grad_norm", "pass": "forward", "dtype": "fp32"})
    assert "typedef double lg_acc;" in src and "sqrt(a)" in src


def test_ord_spellings():
    from lingen.lists import _ord
    assert _ord(2) == "2" and _ord(1) == "1" and _ord("inf") == "inf"
    assert _ord(float("inf")) == "inf" and _ord(-1) == "inf"
    with pytest.raises(ValueError):
        _ord(3)


def test_torch_schemas():
    pytest.importorskip("torch")
    import lingen.torch as lt
    assert "grad_norm_forward" in lt.ops and "count_zero_forward" in lt.ops
    fams = lingen.families()
    assert lt.schema(fams["rmsnorm"], fams["rmsnorm"].passes["forward"])  # others unchanged
