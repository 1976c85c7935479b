"""Shared fixtures. GPU tests are marked `gpu` and skip (reported as
skipped) without a CUDA device; torch tests skip without torch. Random
inputs come from a seeded generator; the seed is printed and
LINGEN_SEED=N replays it."""
import os
import random

import pytest

import lingen
from lingen import _cuda


def _has_gpu():
    try:
        return _cuda.device_count() > 0
    except Exception:
        return False


HAS_GPU = _has_gpu()
gpu = pytest.mark.skipif(not HAS_GPU, reason="no CUDA device on this machine")


def torch_cuda():
    """torch, when it is installed and sees a GPU; else the test skips."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch


@pytest.fixture
def seed():
    s = int(os.environ.get("LINGEN_SEED", random.randrange(1 << 31)))
    print(f"seed {s} (LINGEN_SEED={s} replays it)")
    return s


@pytest.fixture
def ctx(tmp_path):
    """A context that needs no GPU: compiles for sm_90a into a private cache."""
    c = lingen.Context(arch="sm_90a", cache_dir=str(tmp_path / "cache"))
    yield c
    c.close()


class CAI:
    """A fake CUDA array: only __cuda_array_interface__ (no memory behind)."""

    def __init__(self, shape, typestr="<V2", ptr=0x7F0000000000, strides=None, readonly=False,
                 stream=None):
        self.__cuda_array_interface__ = dict(shape=tuple(shape), typestr=typestr,
                                             data=(ptr, readonly), strides=strides, version=3,
                                             stream=stream)


class Reached(Exception):
    """The call got past every check and asked the driver about a pointer."""


@pytest.fixture
def no_device(monkeypatch):
    """The fake pointers must never reach a driver, on machines with a GPU
    too: asking where a pointer lives is where the checks end. A CPU test
    module takes it for all its tests with
    pytestmark = pytest.mark.usefixtures("no_device")."""
    from lingen import _cuda

    def stop(*a):
        raise Reached()
    monkeypatch.setattr(_cuda, "pointer_device", stop)
    monkeypatch.setattr(_cuda, "enter_device", stop)


def reaches_the_device(fn):
    """fn() passes every check and stops where the driver would be asked."""
    with pytest.raises(Reached):
        fn()
    return True
