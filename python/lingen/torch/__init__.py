"""lingen for PyTorch: torch.library custom ops for every family pass,
autograd for forward/backward pairs, and nn.Modules. Import it explicitly
(`import lingen.torch`); `import lingen` alone never imports torch.

Ops (torch.ops.lingen.<op>_<pass>) are registered from the family
declarations: the declared inputs are the op's tensors, the spec's scalar
keys (eps, quant.round_scale -> quant_round_scale, ...) its keyword
arguments with the declared defaults, the declared outputs its results. An
output the options leave out (the columnwise copy with
quant_output="rowwise") comes back as an empty tensor from the op and as
None from the Python functions below. The ops have fake (meta) kernels from
the same declarations, so torch.compile traces them without graph breaks,
and they launch on torch's current stream, so CUDA graphs capture them
(after a first eager call has compiled the kernel).

    import lingen.torch as lt
    y = lt.rms_norm(x, w)                 # autograd: dx and dw from lingen
    norm = lt.RMSNorm(2048).cuda()         # nn.Module
    q, s, rms, qt, st = lt.rms_norm_quant(x, w)
"""
from ._ops import NAMESPACE, ops, schema  # noqa: F401
from .attention import *  # noqa: F401,F403
from .cross_entropy import *  # noqa: F401,F403
from .moe import *  # noqa: F401,F403
from .norm import *  # noqa: F401,F403
from .swiglu import *  # noqa: F401,F403


def __getattr__(name):  # lingen.torch.Fp8Linear: lingen.nn's, imported on first use
    if name in ("Fp8Linear", "fp8_linear", "Fp8LinearFunction"):
        from .. import nn
        return getattr(nn, name)
    raise AttributeError(f"module 'lingen.torch' has no attribute {name!r}")
