"""Arrays from any framework: torch tensors (read directly, the fast path),
objects with ``__cuda_array_interface__`` (CuPy, Numba, JAX, ...) and DLPack
producers (``__dlpack__``). Each becomes a :class:`View`: device pointer,
shape, the lingen element types it can stand for, device ordinal, and the
stream its producer last wrote it on (CAI v3).

lingen element types and what stands for them:
  bf16  torch.bfloat16; CAI typestr "<V2" (ml_dtypes' bfloat16); DLPack bfloat16
  fp32  torch.float32; "<f4"; DLPack float32
  e4m3  torch.float8_e4m3fn; "|V1" or "|u1" (raw bytes); DLPack float8_e4m3fn or uint8
  int32, int64, uint8 as usual.
Only C-contiguous (row-major, dense) arrays on a CUDA device are accepted.
"""
import ctypes
import sys

ELEM_BYTES = {"bf16": 2, "fp32": 4, "e4m3": 1, "int32": 4, "int64": 8, "uint8": 1}

_CAI_TYPES = {
    "<f4": ("fp32",), "<i4": ("int32",), "<i8": ("int64",), "|u1": ("uint8", "e4m3"),
    "<u1": ("uint8", "e4m3"), "|V1": ("e4m3",), "<V2": ("bf16",), "|V2": ("bf16",),
}
# DLPack (code, bits) -> elems; codes: 0 int, 1 uint, 2 float, 4 bfloat, 10 float8_e4m3fn
_DL_TYPES = {(2, 32): ("fp32",), (0, 32): ("int32",), (0, 64): ("int64",),
             (1, 8): ("uint8", "e4m3"), (4, 16): ("bf16",), (10, 8): ("e4m3",)}
_DL_NAMES = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 5: "complex", 6: "bool",
             10: "float8_e4m3fn"}
KDL_CUDA, KDL_CUDA_MANAGED = 2, 13

_torch_elems = None


def torch_elems():
    """torch dtype -> lingen elem, and back (torch imported by the caller)."""
    global _torch_elems
    if _torch_elems is None:
        torch = sys.modules["torch"]
        pairs = [(torch.bfloat16, "bf16"), (torch.float32, "fp32"), (torch.int32, "int32"),
                 (torch.int64, "int64"), (torch.uint8, "uint8")]
        if hasattr(torch, "float8_e4m3fn"):
            pairs.append((torch.float8_e4m3fn, "e4m3"))
        _torch_elems = (dict(pairs), {e: d for d, e in pairs})
    return _torch_elems


class View:
    """One array as lingen sees it."""
    __slots__ = ("obj", "ptr", "shape", "elems", "dtype", "device", "stream", "kind",
                 "readonly", "contiguous")

    def __init__(self, obj, ptr, shape, elems, dtype, device, stream, kind, readonly, contiguous):
        self.obj, self.ptr, self.shape, self.elems, self.dtype = obj, ptr, shape, elems, dtype
        self.device, self.stream, self.kind = device, stream, kind
        self.readonly, self.contiguous = readonly, contiguous


def is_torch(obj):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _c_contiguous(shape, strides, itemsize):
    if strides is None:
        return True
    if any(n == 0 for n in shape):
        return True
    want = itemsize
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != want:
            return False
        want *= n
    return True


def _from_torch(t):
    dev = t.get_device()  # -1 off the GPU; an int, no torch.device object
    if dev < 0 or not t.is_cuda:
        return View(t, 0, tuple(t.shape), (), f"a {t.dtype} tensor on {t.device}", None, None,
                    "torch", False, True)
    elems = (_torch_elems or torch_elems())[0].get(t.dtype)
    return View(t, t.data_ptr(), tuple(t.shape), (elems,) if elems else (), t.dtype, dev, None,
                "torch", False, t.is_contiguous())


def _from_cai(obj, d):
    shape = tuple(int(n) for n in d["shape"])
    typestr = d["typestr"]
    ptr, readonly = d["data"]
    ptr = int(ptr or 0)
    if d.get("mask") is not None:
        raise TypeError("masked arrays are not supported")
    elems = _CAI_TYPES.get(typestr, ())
    if typestr in ("<V2", "|V2") and d.get("descr"):
        names = " ".join(str(f[0]) for f in d["descr"])
        if names and "bfloat16" not in names and names.strip() not in ("", "''"):
            elems = ()
    itemsize = int(typestr[2:]) if typestr[2:].isdigit() else 0
    strides = d.get("strides")
    contiguous = _c_contiguous(shape, tuple(strides) if strides else None, itemsize)
    stream = d.get("stream") if int(d.get("version", 0)) >= 3 else None
    return View(obj, ptr, shape, elems, f"typestr {typestr!r}", None, stream, "cai",
                bool(readonly), contiguous)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_capsule_ptr = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_ptr.restype, _capsule_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


def _from_dlpack(obj, stream):
    dev_type, dev_id = obj.__dlpack_device__()
    if dev_type not in (KDL_CUDA, KDL_CUDA_MANAGED):
        kind = {1: "CPU", 3: "CUDA host"}.get(dev_type, f"device type {dev_type}")
        return View(obj, 0, (), (), f"a DLPack array on the {kind}", None, None, "dlpack",
                    False, True)
    # the producer orders its pending writes before `stream` (1: legacy default)
    cap = obj.__dlpack__(stream=stream if stream else 1)
    p = _capsule_ptr(cap, b"dltensor")  # a DLManagedTensor starts with its DLTensor
    t = _DLTensor.from_address(p)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else None
    code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
    elems = _DL_TYPES.get((code, bits), ()) if lanes == 1 else ()
    itemsize = max(bits // 8, 1)
    contiguous = _c_contiguous(shape, tuple(s * itemsize for s in strides) if strides else None,
                               itemsize)
    ptr = (t.data or 0) + t.byte_offset
    name = f"DLPack {_DL_NAMES.get(code, f'code {code}')}{bits}"
    # the capsule (unconsumed) frees its view when collected; obj keeps the memory
    return View(obj, ptr, shape, elems, name, t.device.device_id, None, "dlpack", False,
                contiguous)


def view(obj, stream=0):
    """A View of obj, or TypeError when obj is no CUDA array lingen reads."""
    if is_torch(obj):
        return _from_torch(obj)
    d = getattr(obj, "__cuda_array_interface__", None)
    if d is not None:
        return _from_cai(obj, d)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _from_dlpack(obj, stream)
    raise TypeError(f"found {type(obj).__module__}.{type(obj).__qualname__}, expected a CUDA "
                    "array (a torch tensor, or an object with __cuda_array_interface__ or "
                    "__dlpack__)")
