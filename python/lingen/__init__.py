"""lingen: fused FP8-MoE training kernels, generated, JIT-compiled with
NVRTC and cached; from any CUDA array library through ctypes.

    import lingen
    q, s, rms, qt, st = lingen.rmsnorm_quant(x, w)      # x, w: CUDA arrays

Arrays: torch tensors, or anything with __cuda_array_interface__ or
__dlpack__ (CuPy, JAX, Numba...). `import lingen` imports no framework;
`import lingen.torch` adds torch.library ops, autograd and nn.Modules.

Kernels come from the process-wide context (lingen.default_context(): JIT
for the current GPU, with lingen's memory and disk caches) or the one passed
as context= (lingen.Context(bundle=...) for pre-built cubins).
"""
from ._version import __version__
from ._lib import LingenError, LibraryError, SpecError
from ._core import Context, Kernel, Spec, call, default_context, set_default_context
from ._families import families
from . import ops
from .lists import TensorList, count_zero, grad_norm  # noqa: F401 (ops.BY_HAND)

_BASE = ["__version__", "LingenError", "LibraryError", "SpecError", "Context", "Kernel", "Spec",
         "call", "default_context", "set_default_context", "families", "generate",
         "library_version", "TensorList"]


def generate(spec, arch="sm_90a"):
    """The CUDA source lingen generates for a spec (dict or JSON) and arch."""
    return Spec(spec).generate(arch)


def library_version():
    """The version of the loaded liblingen (equal to __version__)."""
    from . import _lib
    return _lib.load().lg_version().decode()


def __getattr__(name):
    """lingen.<op>: lingen.ops's (by hand, or made from its family's
    declaration by lingen._generic on first use), kept once found;
    __all__: the names above and every op, built from the registry
    (lingen.ops.public())."""
    if name == "__all__":
        return _BASE + ops.public()
    if not name.startswith("_"):
        try:
            return getattr(ops, name)
        except AttributeError:
            pass
    raise AttributeError(f"module 'lingen' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__getattr__("__all__")))
