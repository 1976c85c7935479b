"""The few CUDA driver calls the bindings make themselves (through ctypes,
from libcuda.so.1, opened on first use): which device a pointer lives on,
making that device's primary context current for a launch, stream-ordered
workspace, and the cross-stream wait the CUDA Array Interface asks of a
consumer. Torch tensors need none of it but the context check.
"""
import ctypes
import threading

from ._lib import LingenError

CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
CU_EVENT_DISABLE_TIMING = 2

_lock = threading.Lock()
_cu = None
_primary = {}  # device ordinal -> CUcontext (retained for the process)


def _driver():
    global _cu
    if _cu is not None:
        return _cu
    with _lock:
        if _cu is None:
            try:
                cu = ctypes.CDLL("libcuda.so.1")
            except OSError as e:
                raise LingenError(f"cannot load the CUDA driver (libcuda.so.1): {e}",
                                  "LG_ERR_DRIVER") from None
            vp = ctypes.c_void_p
            for name, args in {
                "cuInit": [ctypes.c_uint],
                "cuGetErrorString": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
                "cuPointerGetAttribute": [vp, ctypes.c_int, ctypes.c_uint64],
                "cuCtxGetCurrent": [ctypes.POINTER(vp)],
                "cuCtxSetCurrent": [vp],
                "cuCtxGetDevice": [ctypes.POINTER(ctypes.c_int)],
                "cuDeviceGet": [ctypes.POINTER(ctypes.c_int), ctypes.c_int],
                "cuDeviceGetCount": [ctypes.POINTER(ctypes.c_int)],
                "cuDevicePrimaryCtxRetain": [ctypes.POINTER(vp), ctypes.c_int],
                "cuMemAllocAsync": [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t, vp],
                "cuMemFreeAsync": [ctypes.c_uint64, vp],
                "cuEventCreate": [ctypes.POINTER(vp), ctypes.c_uint],
                "cuEventRecord": [vp, vp],
                "cuEventDestroy_v2": [vp],
                "cuStreamWaitEvent": [vp, vp, ctypes.c_uint],
            }.items():
                fn = getattr(cu, name)
                fn.restype, fn.argtypes = ctypes.c_int, args
            _check(cu, cu.cuInit(0), "cuInit")
            _cu = cu
    return _cu


def _check(cu, r, what):
    if r != 0:
        s = ctypes.c_char_p()
        cu.cuGetErrorString(r, ctypes.byref(s))
        raise LingenError(f"{what}: {s.value.decode() if s.value else 'CUDA error'} ({r})",
                          "LG_ERR_CUDA")


def device_count():
    """CUDA devices of this machine; 0 without a driver or a device."""
    try:
        cu = _driver()
    except LingenError:
        return 0
    n = ctypes.c_int(0)
    return n.value if cu.cuDeviceGetCount(ctypes.byref(n)) == 0 else 0


def pointer_device(ptr):
    """The device ordinal of a device (or managed) pointer; None when the
    driver does not know it as device memory."""
    cu = _driver()
    dev = ctypes.c_int(-1)
    r = cu.cuPointerGetAttribute(ctypes.byref(dev), CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 ctypes.c_uint64(ptr))
    return dev.value if r == 0 else None


def _primary_ctx(device):
    ctx = _primary.get(device)
    if ctx is None:
        cu = _driver()
        d = ctypes.c_int()
        _check(cu, cu.cuDeviceGet(ctypes.byref(d), device), f"cuDeviceGet({device})")
        c = ctypes.c_void_p()
        _check(cu, cu.cuDevicePrimaryCtxRetain(ctypes.byref(c), d), "cuDevicePrimaryCtxRetain")
        ctx = _primary.setdefault(device, c.value)
    return ctx


def current_context():
    cu = _driver()
    c = ctypes.c_void_p()
    _check(cu, cu.cuCtxGetCurrent(ctypes.byref(c)), "cuCtxGetCurrent")
    return c.value


def enter_device(device):
    """Make device's primary context current on this thread. Returns the
    context to restore afterwards (leave_device), or False when the current
    context already is that device's primary one."""
    ctx = _primary.get(device) or _primary_ctx(device)
    cu = _cu or _driver()
    c = ctypes.c_void_p()
    r = cu.cuCtxGetCurrent(ctypes.byref(c))
    if r:
        _check(cu, r, "cuCtxGetCurrent")
    cur = c.value
    if cur == ctx:  # the common case: one driver call
        return False
    _check(_driver(), _driver().cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return cur


def leave_device(prev):
    if prev is not False:
        _driver().cuCtxSetCurrent(prev)


def wait_stream(consumer, producer):
    """Make work queued next on `consumer` wait for what `producer` has
    queued so far (CUDA Array Interface v3 'stream')."""
    cu = _driver()
    ev = ctypes.c_void_p()
    _check(cu, cu.cuEventCreate(ctypes.byref(ev), CU_EVENT_DISABLE_TIMING), "cuEventCreate")
    try:
        _check(cu, cu.cuEventRecord(ev, ctypes.c_void_p(producer)), "cuEventRecord")
        _check(cu, cu.cuStreamWaitEvent(ctypes.c_void_p(consumer), ev, 0), "cuStreamWaitEvent")
    finally:
        cu.cuEventDestroy_v2(ev)


def alloc_async(nbytes, stream):
    cu = _driver()
    p = ctypes.c_uint64()
    _check(cu, cu.cuMemAllocAsync(ctypes.byref(p), nbytes, ctypes.c_void_p(stream)),
           f"cuMemAllocAsync({nbytes})")
    return p.value


def free_async(ptr, stream):
    _check(_driver(), _driver().cuMemFreeAsync(ptr, ctypes.c_void_p(stream)), "cuMemFreeAsync")
