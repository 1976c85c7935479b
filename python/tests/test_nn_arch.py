"""lingen.nn's FP8 layers on a CUDA device without sm_90a (lingen's FP8
GEMMs are sm_90a code): they fall back to the emulation (bf16 GEMMs of the
dequantised operands) with one warning a device, and the labels say so.
The capability query is mocked: runs on the CPU."""
import warnings

import pytest

torch = pytest.importorskip("torch")
from lingen.nn import _gemm  # noqa: E402


class CudaLike:
    """Only what the GEMM seam asks of an operand."""
    is_cuda = True

    def __init__(self, index=0):
        self.device = torch.device("cuda", index)


@pytest.fixture
def gpu(monkeypatch):
    """A machine whose CUDA devices have the capabilities in caps, and
    lingen with every FP8 GEMM op."""
    caps = {0: (8, 9), 1: (9, 0), 2: (10, 0)}
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: caps[i or 0])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(_gemm, "_has", lambda names: True)
    monkeypatch.setattr(_gemm, "_force_emulation", False)
    _gemm._arch_ok.cache_clear()
    yield caps
    _gemm._arch_ok.cache_clear()


def test_without_sm90a_the_gemms_fall_back_warned_once(gpu):
    with pytest.warns(RuntimeWarning, match="cuda:0 is sm_89.*emulation"):
        assert not _gemm.native_dense(CudaLike(0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second ask: no warning
        assert not _gemm.native_dense(CudaLike(0))
        assert not _gemm.native_grouped(CudaLike(0))
    assert _gemm.native_dense(CudaLike(1)) and _gemm.native_grouped(CudaLike(1))
    with pytest.warns(RuntimeWarning, match="cuda:2 is sm_100"):
        assert not _gemm.native_grouped(CudaLike(2))


def test_backend_label_names_the_fallback(gpu):
    with pytest.warns(RuntimeWarning):
        label = _gemm.backend("cuda")
    assert "lingen fp8_gemm" not in label and "EMULATED" in label
    gpu[0] = (9, 0)
    _gemm._arch_ok.cache_clear()
    assert "dense: lingen fp8_gemm" in _gemm.backend("cuda")
