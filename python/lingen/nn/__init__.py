"""lingen.nn: model layers from lingen's kernels, FP8 (the blockwise recipe,
docs/kernels.md 1.3) or BF16 by a switch, and a plain-PyTorch mode with the
same parameters (the baseline): RMSNorm, Fp8Linear, Attention (qkv ->
qk_norm_rope -> SDPA -> o), MoE (router -> top-k -> moe_row_map ->
moe_permute_quant -> grouped FP8 GEMMs with batch_swiglu_quant ->
moe_unpermute, plus the shared expert), CrossEntropyLoss,
LinearCrossEntropyLoss (the LM head + loss in chunks of tokens, the logits
never whole; fp8_linear_cross_entropy: the same for the FP8 head),
DecoderBlock and Model
(Model.from_config("configs/models/ling-mini-2.0.json", layers=N)).

On a GPU the layers run lingen's torch ops (fake kernels for torch.compile,
launches on the current stream for CUDA graphs); on the CPU the same
operations in plain torch (lingen.nn._k). The FP8 GEMMs all go through
lingen.nn._gemm: lingen's FP8 GEMM ops when they exist, else an exact
emulation (_gemm.backend() names which)."""
import torch  # noqa: F401  (lingen.nn needs torch)

from ..torch import _ops as _  # noqa: F401  (registers torch.ops.lingen)
from . import _gemm, _k
from .head import *  # noqa: F401,F403
from .layers import *  # noqa: F401,F403
from .linear import *  # noqa: F401,F403
from .moe import *  # noqa: F401,F403

gemm_backend = _gemm.backend
_k._topk_routing()  # a constant before any trace
