"""Argument checking without a GPU: every bad array is refused, naming the
argument, what was found and what was expected, before anything reaches
the device. Arrays are fakes (a __cuda_array_interface__, or a DLPack
capsule made here) with no memory behind them."""
import ctypes

import numpy as np
import pytest

import lingen
from lingen import _arrays

from conftest import CAI, reaches_the_device


pytestmark = pytest.mark.usefixtures("no_device")



def good(tokens=64, hidden=1024):
    return CAI((tokens, hidden)), CAI((hidden,), ptr=0x7F0000100000)


def test_valid_arguments_reach_the_device(ctx):
    x, w = good()
    assert reaches_the_device(lambda: lingen.rmsnorm_quant(x, w, context=ctx,
                                                           alloc=lambda s, e: None))


def test_spec_error_names_where_the_value_came_from(ctx):
    with pytest.raises(lingen.SpecError) as e:
        lingen.rmsnorm_quant(CAI((64, 1000)), CAI((1000,)), context=ctx)
    msg = str(e.value)
    assert "lingen.rmsnorm_quant" in msg and "hidden: found 1000" in msg
    assert "multiple of 128" in msg and "from x.shape[1]" in msg


@pytest.mark.parametrize("bad, words", [
    (dict(w=CAI((1000,))), ["w: found shape (1000,), expected (1024,)", "[hidden]"]),
    (dict(w=CAI((1024, 1))), ["w: found shape (1024, 1), expected 1 dimensions"]),
    (dict(x=CAI((64, 1024), "<f4")), ["x: found typestr '<f4', expected bf16"]),
    (dict(x=CAI((64, 1024), "<i2")), ["x: found typestr '<i2', expected bf16"]),
    (dict(x=CAI((64, 1024), strides=(4096, 2))), ["x: not contiguous"]),
    (dict(x=CAI((64, 1024), strides=(2, 128))), ["x: not contiguous"]),
    (dict(x=CAI((64, 1024), ptr=0x7F0000000008)), ["x: address 0x7f0000000008",
                                                   "16-byte aligned"]),
    (dict(x=[[1.0]]), ["x: found builtins.list, expected a CUDA array"]),
    (dict(x=np.zeros((64, 1024), np.float32)), ["x: found a DLPack array on the CPU",
                                                "expected a CUDA array"]),
])
def test_bad_inputs(ctx, bad, words):
    x, w = good()
    args = dict(x=x, w=w) | bad
    with pytest.raises((TypeError, ValueError)) as e:
        lingen.rmsnorm_quant(args["x"], args["w"], context=ctx)
    for word in words:
        assert word in str(e.value)
    assert str(e.value).startswith("lingen.rmsnorm_quant: ")


def test_dense_strides_are_contiguous(ctx):
    x, w = good()
    x = CAI((64, 1024), strides=(2048, 2))  # explicit C strides
    one = CAI((1, 1024), strides=(999, 2))  # a dimension of 1 may have any stride
    for xx in (x, one):
        assert reaches_the_device(lambda: lingen.rmsnorm(xx, w, context=ctx,
                                                         alloc=lambda s, e: None))


def test_outputs_are_checked(ctx):
    x, w = good(64, 1024)
    with pytest.raises(ValueError, match=r"q: found shape \(1024, 64\), expected \(64, 1024\)"):
        lingen.rmsnorm_quant(x, w, out={"q": CAI((1024, 64), "|u1")}, context=ctx)
    with pytest.raises(TypeError, match="s: found typestr '<V2', expected fp32"):
        lingen.rmsnorm_quant(x, w, out={"s": CAI((8, 64), "<V2")}, context=ctx)
    with pytest.raises(ValueError, match="rms: read-only, but it is an output"):
        lingen.rmsnorm_quant(x, w, out={"rms": CAI((64,), "<f4", readonly=True)}, context=ctx)
    with pytest.raises(ValueError, match="qt: given, but this call does not write it"):
        lingen.rmsnorm_quant(x, w, output="rowwise", out={"qt": CAI((1024, 64), "|u1")},
                             context=ctx)
    with pytest.raises(TypeError, match="no argument named zz"):
        lingen.rmsnorm_quant(x, w, out={"zz": CAI((1,), "<f4")}, context=ctx)
    # e4m3 outputs may be raw bytes
    assert reaches_the_device(lambda: lingen.rmsnorm_quant(
        x, w, out={"q": CAI((64, 1024), "|u1")}, context=ctx, alloc=lambda s, e: None))


def test_no_allocator_for_foreign_arrays(ctx, monkeypatch):
    from lingen import _cuda
    monkeypatch.setattr(_cuda, "pointer_device", lambda ptr: 0)
    monkeypatch.setattr(_cuda, "enter_device", lambda d: False)
    x, w = good()
    with pytest.raises(TypeError, match="y: cannot allocate outputs for these arrays"):
        lingen.rmsnorm(x, w, context=ctx)


def test_arrays_on_two_devices_are_refused(ctx, monkeypatch):
    from lingen import _cuda
    monkeypatch.setattr(_cuda, "pointer_device", lambda ptr: 1 if ptr == 0x7F0000100000 else 0)
    monkeypatch.setattr(_cuda, "enter_device", lambda d: False)
    x, w = good()
    with pytest.raises(ValueError, match="w: on device 1, the other arrays on device 0"):
        lingen.rmsnorm(x, w, context=ctx)


def test_options_are_validated_by_the_library(ctx):
    x, w = good()
    with pytest.raises(lingen.SpecError, match="eps: found 2"):
        lingen.rmsnorm_quant(x, w, eps=2.0, context=ctx)
    with pytest.raises(lingen.SpecError, match='quant.output: found "sideways"'):
        lingen.rmsnorm_quant(x, w, output="sideways", context=ctx)
    with pytest.raises(lingen.SpecError, match="tile.threads"):
        lingen.fp8_quant(x, tile={"threads": 100}, context=ctx)


def test_stream_argument(ctx):
    x, w = good()
    with pytest.raises(TypeError, match="stream: found str"):
        lingen.rmsnorm(x, w, stream="fast", context=ctx)

    class S:
        def __cuda_stream__(self):
            return (0, 1234)
    from lingen._core import stream_handle
    assert stream_handle(S()) == 1234 and stream_handle(None) == 0 and stream_handle(7) == 7


def test_zero_tokens_are_valid(ctx):
    x, w = CAI((0, 1024), ptr=0), CAI((1024,), ptr=0x7F0000100000)
    assert reaches_the_device(lambda: lingen.rmsnorm(x, w, context=ctx,
                                                     alloc=lambda s, e: None))


# ---------------------------------------------------------------- DLPack

class _DLManaged(ctypes.Structure):
    _fields_ = [("dl_tensor", _arrays._DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class DLFake:
    """A DLPack producer on a CUDA device with no memory behind it."""

    def __init__(self, shape, code, bits, ptr=0x7F0000000000, strides=None, device=(2, 0)):
        self.shape_ = (ctypes.c_int64 * len(shape))(*shape)
        self.strides_ = (ctypes.c_int64 * len(shape))(*strides) if strides else None
        self.m = _DLManaged()
        t = self.m.dl_tensor
        t.data, t.ndim = ptr, len(shape)
        t.device.device_type, t.device.device_id = device
        t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, 1
        t.shape = self.shape_
        t.strides = self.strides_
        self.device = device
        self.streams = []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p,
                                                        ctypes.c_void_p]
        return new(ctypes.addressof(self.m), b"dltensor", None)


def test_dlpack_views():
    v = _arrays.view(DLFake((64, 1024), 4, 16), stream=0)
    assert v.shape == (64, 1024) and v.elems == ("bf16",) and v.device == 0 and v.contiguous
    v = _arrays.view(DLFake((8, 16), 10, 8, device=(2, 3)), stream=77)
    assert v.elems == ("e4m3",) and v.device == 3
    assert _arrays.view(DLFake((8, 16), 2, 32, strides=(1, 8))).contiguous is False
    assert _arrays.view(DLFake((8, 16), 2, 32, strides=(16, 1))).contiguous is True


def test_dlpack_producer_is_told_the_stream(ctx):
    x = DLFake((64, 1024), 4, 16)
    w = DLFake((1024,), 4, 16, ptr=0x7F0000100000)
    reaches_the_device(lambda: lingen.rmsnorm(x, w, stream=0, context=ctx,
                                              alloc=lambda s, e: None))
    assert x.streams and x.streams[0] == 1  # the legacy default stream, as DLPack spells it
    with pytest.raises(TypeError, match="x: found DLPack float32, expected bf16"):
        lingen.rmsnorm(DLFake((64, 1024), 2, 32), w, context=ctx)


def test_wgrad_columnwise_copies_are_pitched(ctx):
    """fp8_gemm_wgrad reads the columnwise copies with rows round_up(tokens,
    128) apart (the quantisers' layout): any token count; an unpitched
    [k, tokens] copy is refused, the expected shape named."""
    n, k, t = 256, 384, 127
    dyts, xts = CAI((1, n), "<f4", ptr=0x7F0000200000), CAI((1, k), "<f4", ptr=0x7F0000300000)
    with pytest.raises(ValueError) as e:
        lingen.fp8_gemm_wgrad(CAI((n, t), "|u1"), dyts, CAI((k, t), "|u1", ptr=0x7F0000100000), xts,
                              tokens=t, context=ctx)
    assert "dyt: found shape (256, 127), expected (256, 128) [n, round_up(tokens, 128)]" in str(e.value)
    for tokens in (t, None):  # given, or the pitch (the same sum: the tail is zeros)
        assert reaches_the_device(lambda: lingen.fp8_gemm_wgrad(
            CAI((n, 128), "|u1"), dyts, CAI((k, 128), "|u1", ptr=0x7F0000100000), xts,
            tokens=tokens, context=ctx, alloc=lambda s, e: None))
    with pytest.raises(ValueError, match=r"xt: found shape \(384, 144\), expected \(384, 128\)"):
        lingen.fp8_gemm_wgrad(CAI((n, 128), "|u1"), dyts, CAI((k, 144), "|u1", ptr=0x7F0000100000),
                              xts, context=ctx)
