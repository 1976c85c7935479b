"""Reductions over lists of tensors (docs/kernels.md K10, K11): the global
grad norm (L2, L1, max) and the number of zeros of a list of bf16 and fp32
CUDA tensors, each one kernel pair over the whole list.

    tl = lingen.TensorList([p.grad for p in model.parameters()])  # once
    norm = lingen.grad_norm(tl)          # 0-d fp32 on the device
    zeros = lingen.count_zero(tl)        # 0-d int64 on the device

A TensorList uploads its table of pointers and sizes once (lingen.h,
lg_tensor_list_create) and keeps the tensors alive; a call then copies
nothing from the host and never synchronises, so it can be captured in a
CUDA graph. grad_norm and count_zero also take a plain list: its table is
built on first use and kept (the last few lists, by their tensors'
addresses, types and sizes), so a training loop that passes the same
gradient buffers every step pays the upload once.

Sums are fp64 in a fixed order (the same bits on every call); the max is
exact, NaN when any element is NaN; the count counts +0.0 and -0.0.
"""
import ctypes
import math
import sys
import threading
from collections import OrderedDict

from . import _arrays, _cuda, _lib
from ._core import Spec, _default_stream, _torch_alloc, default_context, stream_handle

_ELEM_CODE = {"bf16": 0, "fp32": 1}  # lg_list_elem of lingen.h


class TensorList:
    """A list of contiguous bf16 / fp32 CUDA tensors on one device, with its
    device table (built once; freed by close() or when collected). The
    tensors are kept alive as long as the list."""

    def __init__(self, tensors, *, device=None, _fn="lingen.TensorList"):
        views = _views(_fn, tensors)
        tensors = [v.obj for v, _ in views]
        for i, (v, _) in enumerate(views):
            if v.device is None and v.ptr:
                v.device = _cuda.pointer_device(v.ptr)
            if v.device is None and v.ptr:
                raise ValueError(f"{_fn}: tensors[{i}]: 0x{v.ptr:x} is not device memory")
            if v.device is not None:
                if device is not None and v.device != device:
                    raise ValueError(f"{_fn}: tensors[{i}]: on device {v.device}, the others on "
                                     f"device {device}")
                device = v.device
        self.tensors = tensors
        self.device = 0 if device is None else device
        self.elems = frozenset(e for (v, e) in views if math.prod(v.shape))
        self.dtype = ("mixed" if len(self.elems) > 1 else
                      next(iter(self.elems)) if self.elems else "fp32")
        self.torch = any(v.kind == "torch" for v, _ in views)
        n = len(views)
        ptrs = (ctypes.c_uint64 * max(n, 1))(*[v.ptr for v, _ in views])
        elems = (ctypes.c_int * max(n, 1))(*[_ELEM_CODE[e] for _, e in views])
        counts = (ctypes.c_int64 * max(n, 1))(*[math.prod(v.shape) for v, _ in views])
        self._lib = _lib.load()
        p = ctypes.c_void_p()
        prev = _cuda.enter_device(self.device)
        try:
            _lib.check(self._lib.lg_tensor_list_create(ptrs, elems, counts, n, ctypes.byref(p)),
                       self._lib)
        finally:
            _cuda.leave_device(prev)
        self._p = p.value
        self.items = self._lib.lg_tensor_list_items(self._p)
        self.numel = self._lib.lg_tensor_list_numel(self._p)

    def __len__(self):
        return len(self.tensors)

    def __repr__(self):
        return (f"lingen.TensorList({len(self)} tensors, {self.numel} elements, {self.dtype}, "
                f"device {self.device})")

    def close(self):
        """Free the device table (no launch over the list may be in flight)."""
        p, self._p = getattr(self, "_p", None), None
        if p:
            prev = _cuda.enter_device(self.device)
            try:
                self._lib.lg_tensor_list_destroy(p)
            finally:
                _cuda.leave_device(prev)

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the driver may be gone
            pass


def _views(fn, tensors):
    """(View, elem) of each tensor, checked: a CUDA array (its device named
    first), bf16 or fp32, contiguous. TypeError / ValueError "fn:
    tensors[i]: found ..., expected ..."."""
    if isinstance(tensors, (str, bytes)) or not hasattr(tensors, "__iter__"):
        raise TypeError(f"{fn}: tensors: found {tensors!r} ({type(tensors).__qualname__}), "
                        "expected a lingen.TensorList or a list of bf16 / fp32 CUDA tensors")
    views = []
    for i, t in enumerate(tensors):
        try:
            v = _arrays.view(t)
        except TypeError as e:
            raise TypeError(f"{fn}: tensors[{i}]: {e}") from None
        if v.device is None and v.kind != "cai":
            raise ValueError(f"{fn}: tensors[{i}]: found {v.dtype}, expected a CUDA array (bf16 "
                             "or fp32)")
        elem = next((e for e in v.elems if e in _ELEM_CODE), None)
        if elem is None:
            raise TypeError(f"{fn}: tensors[{i}]: found {v.dtype}, expected bf16 or fp32")
        if not v.contiguous:
            raise ValueError(f"{fn}: tensors[{i}]: not contiguous; expected a C-contiguous array")
        views.append((v, elem))
    return views


_cache = OrderedDict()  # (ptr, elem, numel, device)... -> TensorList
_cache_lock = threading.Lock()
CACHED_LISTS = 4


def _as_list(fn, tensors):
    if isinstance(tensors, TensorList):
        return tensors
    views = _views(fn, tensors)  # every argument error before the driver is asked
    key = [(v.ptr, v.elems, v.shape, v.device) for v, _ in views]
    key = tuple(key)
    with _cache_lock:
        tl = _cache.get(key)
        if tl is not None:
            _cache.move_to_end(key)
            return tl
    tl = TensorList([v.obj for v, _ in views], _fn=fn)
    with _cache_lock:
        _cache[key] = tl
        while len(_cache) > CACHED_LISTS:
            _cache.popitem(last=False)
    return tl


def _ord(ord, fn="lingen.grad_norm"):
    if isinstance(ord, bool):
        raise ValueError(f"{fn}: ord: found {ord!r}, expected 2, 1 or inf")
    if ord in (2, "2"):
        return "2"
    if ord in (1, "1"):
        return "1"
    if ord in ("inf", -1) or (isinstance(ord, float) and math.isinf(ord) and ord > 0):
        return "inf"  # -1 is linghe's spelling of the max norm
    raise ValueError(f"{fn}: ord: found {ord!r}, expected 2, 1 or inf")


_specs = {}


def _kernel(ctx, op, tl, options):
    key = (op, tl.dtype, tuple(sorted(options.items())))
    s = _specs.get(key)
    if s is None:
        spec = {"op": op, "pass": "forward", "dtype": "fp32" if tl.dtype == "mixed" else tl.dtype,
                "mixed": tl.dtype == "mixed"}
        spec.update({k: v for k, v in options.items() if v is not None})
        s = _specs.setdefault(key, Spec(spec))
    return ctx.kernel(s)


def _check(fn, op, options, out, stream, context):
    """The arguments but the tensors, before anything asks the driver."""
    from ._core import Context, check_option
    from ._families import families
    fam = families()[op]
    for path, value in options.items():
        if value is not None:
            check_option(fn, fam.key(path), value)
    if context is not None and not isinstance(context, Context):
        raise TypeError(f"{fn}: context: found {context!r} ({type(context).__qualname__}), "
                        "expected a lingen.Context or None")
    if out is not None:
        try:
            _arrays.view(out)
        except TypeError as e:
            raise TypeError(f"{fn}: out: {e}") from None
    try:
        return stream_handle(stream) if stream is not None else None
    except TypeError as e:
        raise TypeError(f"{fn}: {e}") from None


def _launch(fn, op, tensors, options, elem, out, stream, context):
    hstream = _check(fn, op, options, out, stream, context)
    tl = _as_list(fn, tensors)
    ctx = context or default_context()
    prev = _cuda.enter_device(tl.device)
    try:
        k = _kernel(ctx, op, tl, options)
        if hstream is None:
            hstream = _default_stream([_arrays.view(tl.tensors[0])], tl.device) if tl.tensors else 0
        keep = ws_async = None
        use_torch = tl.torch or (out is not None and _arrays.is_torch(out)) or \
            (out is None and not tl.tensors and "torch" in sys.modules)
        if use_torch:
            allocate = _torch_alloc(tl.device)
            if out is None:
                out = allocate((), elem)
            if k.workspace_size:
                keep = allocate((k.workspace_size,), "uint8")
        elif out is None:
            raise TypeError(f"{fn}: cannot allocate the result for these arrays; pass out=")
        o = _arrays.view(out)
        if elem not in o.elems or math.prod(o.shape) != 1:
            raise ValueError(f"{fn}: out: found {o.dtype} of shape {o.shape}, expected one {elem}")
        if keep is not None:
            ws = _arrays.view(keep).ptr
        elif k.workspace_size:
            ws = ws_async = _cuda.alloc_async(k.workspace_size, hstream)
        else:
            ws = 0
        launcher = ctx._lib.lg_grad_norm if op == "grad_norm" else ctx._lib.lg_count_zero
        st = launcher(k._p, ctypes.c_void_p(hstream or None), tl._p, o.ptr, ws)
        if ws_async is not None:
            _cuda.free_async(ws_async, hstream)
        if st:
            raise _lib.fail(st, ctx._lib)
    finally:
        _cuda.leave_device(prev)
    return out


def grad_norm(tensors, ord=2, norm=True, *, tile=None, out=None, stream=None, context=None):
    """The norm of every element of a list of tensors (a TensorList, or a
    list of bf16 / fp32 CUDA tensors, mixed allowed): ord 2 (sqrt of the
    sum of squares; the sum itself with norm=False), 1 (sum of |x|) or inf
    (max |x|; -1 also means inf, as in linghe's triton_batch_norm). Returns
    a 0-d fp32 tensor on the device (or writes out=); fp64 sums in a fixed
    order, so the same list gives the same bits every call."""
    ordv = _ord(ord)
    if not isinstance(norm, bool):
        raise TypeError(f"lingen.grad_norm: norm: found {norm!r} ({type(norm).__qualname__}), "
                        "expected a bool (True or False)")
    if not norm and ordv != "2":
        raise ValueError("lingen.grad_norm: norm=False only with ord=2")
    return _launch("lingen.grad_norm", "grad_norm", tensors,
                   {"ord": ordv, "norm": bool(norm), "tile": tile}, "fp32", out, stream, context)


def count_zero(tensors, *, tile=None, out=None, stream=None, context=None):
    """The number of elements equal to zero (+0.0 and -0.0) in a list of
    tensors (a TensorList, or a list of bf16 / fp32 CUDA tensors, mixed
    allowed), as a 0-d int64 tensor on the device (or written to out=). As
    linghe's triton_batch_count_zero, which reads only fp32 correctly."""
    return _launch("lingen.count_zero", "count_zero", tensors, {"tile": tile}, "int64", out,
                   stream, context)
