"""The blockwise FP8 GEMMs' Python ops without a GPU (lingen.fp8_gemm,
_dgrad, _wgrad, fp8_grouped_gemm, _dgrad): the declarations they read and
their argument checks, each failing before any device is touched."""
import pytest

import lingen
from conftest import CAI


def e4m3(*shape):
    return CAI(shape, "|V1")


def f32(*shape):
    return CAI(shape, "<f4")


def test_declarations():
    f = lingen.families()["fp8_gemm"]
    assert set(f.passes) == {"forward", "dgrad", "wgrad"}
    assert [a.name for a in f.passes["forward"].args] == ["x", "x_scale", "w", "w_scale", "y"]
    assert [a.name for a in f.passes["wgrad"].args] == ["dyt", "dyt_scale", "xt", "xt_scale", "dw"]
    g = lingen.families()["fp8_grouped_gemm"]
    assert set(g.passes) == {"forward", "dgrad", "wgrad"}
    # the wgrad's workspace: the per-expert tensor maps it patches on the device
    assert [a.name for a in g.passes["wgrad"].args] == ["dyt", "dyt_scale", "xt", "xt_scale",
                                                        "counts", "dw", "workspace"]
    assert g.passes["wgrad"].arg("workspace").role == "workspace"
    assert g.passes["forward"].arg("counts").elem == "int32"


def test_out_dtype_checked():
    with pytest.raises(ValueError, match="lingen.fp8_gemm: out_dtype: found 'fp16'"):
        lingen.fp8_gemm(e4m3(64, 256), f32(2, 64), e4m3(256, 256), f32(2, 2), out_dtype="fp16")
    with pytest.raises(ValueError, match="lingen.fp8_grouped_gemm_dgrad: out_dtype"):
        lingen.fp8_grouped_gemm_dgrad(e4m3(64, 256), f32(2, 64), e4m3(4, 256, 256), f32(4, 2, 2),
                                      CAI((4,), "<i4"), out_dtype="int8")


def test_accumulate_needs_main_grad():
    with pytest.raises(TypeError, match="accumulate=True needs out_dtype=.fp32. and out="):
        lingen.fp8_gemm_wgrad(e4m3(256, 64), f32(1, 256), e4m3(512, 64), f32(1, 512),
                              accumulate=True)
    with pytest.raises(TypeError, match="accumulate=True needs out_dtype='fp32'"):
        lingen.fp8_grouped_gemm_wgrad(e4m3(256, 64), f32(5, 256), e4m3(512, 64), f32(5, 512),
                                      CAI((4,), "<i4"), out_dtype="bf16", accumulate=True,
                                      out={"dw": f32(4, 256, 512)})
    with pytest.raises(TypeError, match="accumulate: found 1"):
        lingen.fp8_gemm_wgrad(e4m3(256, 64), f32(1, 256), e4m3(512, 64), f32(1, 512), accumulate=1)


def test_scale_shapes_checked():
    # w_scale must be [cdiv(n, 128), cdiv(k, 128)]
    with pytest.raises(ValueError, match="w_scale"):
        lingen.fp8_gemm(e4m3(64, 256), f32(2, 64), e4m3(512, 256), f32(3, 2))
    # x_scale must be [cdiv(k, 128), tokens]
    with pytest.raises(ValueError, match="x_scale"):
        lingen.fp8_gemm(e4m3(64, 256), f32(2, 63), e4m3(512, 256), f32(4, 2))
