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
from ._gemm_ops import (fp8_gemm, fp8_gemm_dgrad, fp8_gemm_wgrad, fp8_grouped_gemm,
                        fp8_grouped_gemm_dgrad, fp8_grouped_gemm_wgrad)
from .lists import TensorList, count_zero, grad_norm
from .ops import (batch_swiglu_quant, batch_swiglu_quant_backward, cross_entropy_backward,
                  cross_entropy_forward, cross_entropy_fused, cross_entropy_merge,
                  cross_entropy_shard_stats, fp8_quant, fp8_quant_batched, fp8_quant_weight,
                  group_rmsnorm_gate, group_rmsnorm_gate_backward, moe_permute,
                  moe_permute_backward, moe_permute_quant, moe_row_map, moe_unpermute,
                  moe_unpermute_backward, qk_norm_rope, qk_norm_rope_backward, rmsnorm,
                  rmsnorm_backward, rmsnorm_quant, rmsnorm_router, router_gemm, router_gemm_backward,
                  swiglu_quant, swiglu_quant_backward)

__all__ = [
    "__version__", "LingenError", "LibraryError", "SpecError", "Context", "Kernel", "Spec",
    "call", "default_context", "set_default_context", "families", "generate", "library_version",
    "rmsnorm_quant", "rmsnorm", "rmsnorm_backward", "fp8_quant", "fp8_quant_batched",
    "fp8_quant_weight", "qk_norm_rope",
    "qk_norm_rope_backward", "group_rmsnorm_gate", "group_rmsnorm_gate_backward",
    "cross_entropy_forward", "cross_entropy_fused", "cross_entropy_backward",
    "cross_entropy_shard_stats", "cross_entropy_merge",
    "TensorList", "grad_norm", "count_zero",
    "swiglu_quant", "swiglu_quant_backward", "batch_swiglu_quant", "batch_swiglu_quant_backward",
    "router_gemm", "router_gemm_backward", "rmsnorm_router",
    "moe_row_map", "moe_permute", "moe_permute_backward", "moe_unpermute", "moe_unpermute_backward",
    "moe_permute_quant", "fp8_gemm", "fp8_gemm_dgrad", "fp8_gemm_wgrad",
    "fp8_grouped_gemm", "fp8_grouped_gemm_dgrad", "fp8_grouped_gemm_wgrad",
]


def generate(spec, arch="sm_90a"):
    """The CUDA source lingen generates for a spec (dict or JSON) and arch."""
    return Spec(spec).generate(arch)


def library_version():
    """The version of the loaded liblingen (equal to __version__)."""
    from . import _lib
    return _lib.load().lg_version().decode()


def __getattr__(name):
    """lingen.<op> of a family pass that lingen.ops does not wrap by hand:
    made from its declaration (lingen._generic) on first use."""
    if not name.startswith("_"):
        from . import ops
        try:
            return getattr(ops, name)
        except AttributeError:
            pass
    raise AttributeError(f"module 'lingen' has no attribute {name!r}")
