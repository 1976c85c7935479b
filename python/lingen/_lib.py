"""Loading liblingen with ctypes, its prototypes, and its errors.

The library is found, in order, at ``$LINGEN_LIBRARY`` (an explicit path:
never falls back), beside this package (the wheel puts ``liblingen.so``
there), then in the build folders of a source checkout (``build*/``). It is
loaded on first use, once per process; a missing or broken library, or one
of another version than the package, raises :class:`LibraryError` naming
what was tried.
"""
import ctypes
import glob
import os
import sys
import threading

from ._version import __version__

LG_OK = 0
STATUS_NAMES = (
    "LG_OK", "LG_ERR_INVALID_ARG", "LG_ERR_SPEC", "LG_ERR_NO_MEMORY", "LG_ERR_IO",
    "LG_ERR_DRIVER", "LG_ERR_NVRTC", "LG_ERR_COMPILE", "LG_ERR_CUDA", "LG_ERR_NO_DEVICE",
    "LG_ERR_UNSUPPORTED", "LG_ERR_MISSING",
)


class LingenError(RuntimeError):
    """A lingen call failed. ``status`` is the C status name ("LG_ERR_CUDA"...)."""

    def __init__(self, message, status="LG_ERR_INVALID_ARG"):
        super().__init__(message)
        self.status = status


class SpecError(LingenError, ValueError):
    """A spec (built from your arguments, or read from a file) is invalid:
    the message names the JSON path, what was found and what is allowed."""


class LibraryError(LingenError, ImportError):
    """liblingen could not be found or loaded, or is not the one this
    package was built with."""

    def __init__(self, message):
        super().__init__(message, "LG_ERR_IO")


_c_p = ctypes.c_void_p
_i64p = ctypes.POINTER(ctypes.c_int64)
_u64p = ctypes.POINTER(ctypes.c_uint64)

# name -> (restype, argtypes): every C function the package calls
PROTOTYPES = {
    "lg_version": (ctypes.c_char_p, []),
    "lg_status_str": (ctypes.c_char_p, [ctypes.c_int]),
    "lg_last_error": (ctypes.c_char_p, []),
    "lg_families_json": (ctypes.c_int, [ctypes.POINTER(_c_p)]),
    "lg_spec_parse": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_c_p)]),
    "lg_spec_free": (None, [_c_p]),
    "lg_spec_canonical": (_c_p, [_c_p]),
    "lg_spec_entry": (ctypes.c_char_p, [_c_p]),
    "lg_spec_arg_shape": (ctypes.c_int, [_c_p, ctypes.c_int, _i64p, ctypes.c_int, _i64p,
                                         ctypes.c_int, ctypes.POINTER(ctypes.c_int)]),
    "lg_spec_arg_used": (ctypes.c_int, [_c_p, ctypes.c_int]),
    "lg_generate": (ctypes.c_int, [_c_p, ctypes.c_char_p, ctypes.POINTER(_c_p)]),
    "lg_model_expand_file": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_c_p)]),
    "lg_ctx_create": (ctypes.c_int, [_c_p, ctypes.POINTER(_c_p)]),
    "lg_ctx_destroy": (None, [_c_p]),
    "lg_ctx_arch": (ctypes.c_char_p, [_c_p]),
    "lg_ctx_cubin": (ctypes.c_int, [_c_p, _c_p, ctypes.POINTER(_c_p),
                                    ctypes.POINTER(ctypes.c_size_t)]),
    "lg_kernel_get": (ctypes.c_int, [_c_p, _c_p, ctypes.POINTER(_c_p)]),
    "lg_ctx_cubins": (ctypes.c_int, [_c_p, _c_p, ctypes.c_size_t, ctypes.c_int]),
    "lg_kernel_workspace_size": (ctypes.c_size_t, [_c_p]),
    "lg_kernel_run": (ctypes.c_int, [_c_p, _c_p, _i64p, ctypes.c_int, _u64p, ctypes.c_int]),
    "lg_tensor_list_create": (ctypes.c_int, [_u64p, ctypes.POINTER(ctypes.c_int), _i64p,
                                             ctypes.c_size_t, ctypes.POINTER(_c_p)]),
    "lg_tensor_list_destroy": (None, [_c_p]),
    "lg_tensor_list_items": (ctypes.c_int64, [_c_p]),
    "lg_tensor_list_numel": (ctypes.c_int64, [_c_p]),
    "lg_grad_norm": (ctypes.c_int, [_c_p, _c_p, _c_p, ctypes.c_uint64, ctypes.c_uint64]),
    "lg_count_zero": (ctypes.c_int, [_c_p, _c_p, _c_p, ctypes.c_uint64, ctypes.c_uint64]),
}


class CtxOpts(ctypes.Structure):
    """struct lg_ctx_opts of lingen.h."""
    _fields_ = [("arch", ctypes.c_char_p), ("cache_dir", ctypes.c_char_p),
                ("bundle", ctypes.c_char_p), ("aot", ctypes.c_void_p),
                ("tuning", ctypes.c_char_p)]


_lock = threading.Lock()
_lib = None
_libc = None


def package_dirs():
    """The folders of the package: one when installed, two for an editable
    install (the installed files first, then the sources)."""
    pkg = sys.modules.get(__package__)
    dirs = list(getattr(pkg, "__path__", None) or [])
    here = os.path.dirname(os.path.abspath(__file__))
    return dirs + ([here] if here not in dirs else [])


def candidates():
    """The paths tried, in order (see the module docstring)."""
    env = os.environ.get("LINGEN_LIBRARY")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [os.path.join(d, "liblingen.so") for d in package_dirs()]
    root = os.path.dirname(os.path.dirname(here))  # python/lingen -> the checkout
    if os.path.isfile(os.path.join(root, "include", "lingen.h")):
        # the most recently built first
        paths += sorted(glob.glob(os.path.join(root, "build*", "liblingen.so")),
                        key=os.path.getmtime, reverse=True)
    return paths


def _open(p):
    """One candidate: loaded and its prototypes set, or LibraryError why not."""
    if not os.path.exists(p):
        raise LibraryError(f"{p}: not found")
    try:
        lib = ctypes.CDLL(p)
    except OSError as e:
        raise LibraryError(f"{p}: {e}") from None
    missing = [n for n in PROTOTYPES if not hasattr(lib, n)]
    if missing:
        raise LibraryError(f"{p}: not a lingen library of this version (it lacks "
                           f"{', '.join(missing)})")
    for name, (res, args) in PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    have = lib.lg_version().decode()
    if have != __version__:
        raise LibraryError(f"{p}: lingen {have}, this package is {__version__}")
    return lib


def load(path=None):
    """Load (once) and return the library; ``path`` forces one file."""
    global _lib, _libc
    if _lib is not None and path is None:
        return _lib
    with _lock:
        if _lib is not None and path is None:
            return _lib
        tried = []
        lib = None
        for p in ([path] if path else candidates()):
            try:
                lib = _open(p)
                break
            except LibraryError as e:
                tried.append(str(e))
        if lib is None:
            raise LibraryError("cannot load liblingen: " + "; ".join(tried) +
                               ". Install the package with `pip install .` at the lingen "
                               "checkout, or set LINGEN_LIBRARY to the path of liblingen.so")
        libc = ctypes.CDLL(None)
        libc.free.restype, libc.free.argtypes = None, [_c_p]
        if path is None:
            _lib, _libc = lib, libc
        else:
            _libc = _libc or libc
        return lib


def take_string(ptr):
    """A malloc'd C string as str; frees it."""
    if not ptr:
        raise LingenError("out of memory", "LG_ERR_NO_MEMORY")
    try:
        return ctypes.string_at(ptr).decode()
    finally:
        _libc.free(ptr)


def fail(status, lib=None):
    """The exception for a failed call: the C status and lg_last_error()."""
    lib = lib or _lib
    name = STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES) else f"status {status}"
    msg = lib.lg_last_error().decode(errors="replace") if lib else ""
    cls = SpecError if name in ("LG_ERR_SPEC", "LG_ERR_INVALID_ARG") else LingenError
    return cls(msg or name, name)


def check(status, lib=None):
    if status != LG_OK:
        raise fail(status, lib)
