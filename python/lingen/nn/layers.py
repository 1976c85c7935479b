"""RMSNorm, the attention block, the loss, the decoder block and the model
of a lingen model config (configs/models/*.json), each in one of three
modes: "fp8" (lingen kernels, FP8 GEMMs), "bf16" (lingen kernels, bf16
GEMMs), "torch" (plain PyTorch, the baseline); the same parameters and
state dict in every mode."""
import dataclasses
import json
import math

import torch
import torch.nn.functional as F

from . import _args as A, _k
from .head import LinearCrossEntropyLoss, _fp8_chunk_arg, fp8_linear_cross_entropy
from .linear import QUANT_WIDTH_MAX, Fp8Linear, Fp8LinearCrossEntropy
from .moe import MoE

__all__ = ["RMSNorm", "Attention", "CrossEntropyLoss", "cross_entropy", "DecoderBlock",
           "ModelConfig", "Model", "rope_freqs"]

MODES = A.MODES


class RMSNorm(torch.nn.Module):
    """RMSNorm over the last dimension (lingen's kernels on a GPU but in
    mode "torch"); weight bf16."""

    def __init__(self, hidden, eps=1e-6, mode="fp8", dtype=torch.bfloat16):
        super().__init__()
        fn = "lingen.nn.RMSNorm"
        A.integer(fn, "hidden", hidden)
        A.number(fn, "eps", eps, lo=0, lo_open=True)
        A.choice(fn, "mode", mode, MODES)
        A.float_dtype(fn, "dtype", dtype)
        self.hidden, self.eps, self.mode = hidden, eps, mode
        self.weight = torch.nn.Parameter(torch.ones(hidden, dtype=dtype))

    def forward(self, x):
        A.last_dim("lingen.nn.RMSNorm", x, self.hidden)
        return _k.rms_norm(x, self.weight, self.eps, self.mode == "torch")


def rope_freqs(seq, rotary_dim, theta=10000.0, device=None):
    """freqs [seq, rotary_dim] fp32 in the cat(f, f) layout."""
    inv = 1.0 / theta ** (torch.arange(0, rotary_dim, 2, device=device).float() / rotary_dim)
    f = torch.arange(seq, device=device).float()[:, None] * inv[None, :]
    return torch.cat((f, f), -1)


class Attention(torch.nn.Module):
    """The attention block: fused qkv projection -> q/k RMSNorm + RoPE
    (lingen's qk_norm_rope) -> torch's scaled_dot_product_attention
    (causal, grouped-query) -> output projection."""

    def __init__(self, hidden, q_heads, kv_heads, head_dim, rotary_fraction=0.5, eps=1e-6,
                 mode="fp8"):
        super().__init__()
        fn = "lingen.nn.Attention"
        A.choice(fn, "mode", mode, MODES)
        A.integer(fn, "hidden", hidden)
        A.integer(fn, "kv_heads", kv_heads)
        A.integer(fn, "q_heads", q_heads)
        if q_heads % kv_heads:
            A.fail(fn, "q_heads", q_heads, f"a multiple of kv_heads ({kv_heads})")
        A.integer(fn, "head_dim", head_dim)
        if head_dim % 2:
            A.fail(fn, "head_dim", head_dim, "an even int")
        A.number(fn, "rotary_fraction", rotary_fraction, lo=0, hi=1, lo_open=True)
        if int(rotary_fraction * head_dim) % 2 or not int(rotary_fraction * head_dim):
            A.fail(fn, "rotary_fraction", rotary_fraction, f"a fraction of head_dim "
                   f"({head_dim}) that is a positive even number of dimensions")
        A.number(fn, "eps", eps, lo=0, lo_open=True)
        self.q_heads, self.kv_heads, self.head_dim = q_heads, kv_heads, head_dim
        self.rotary_fraction, self.eps, self.mode = rotary_fraction, eps, mode
        fp8 = mode == "fp8"
        self.qkv = Fp8Linear(hidden, (q_heads + 2 * kv_heads) * head_dim, fp8)
        self.q_norm = torch.nn.Parameter(torch.ones(head_dim, dtype=torch.bfloat16))
        self.k_norm = torch.nn.Parameter(torch.ones(head_dim, dtype=torch.bfloat16))
        self.o = Fp8Linear(q_heads * head_dim, hidden, fp8)

    def forward(self, x, freqs, x_copies=None):
        """x [B, S, hidden]; x_copies: x's quantised copies (FP8, from the
        RMSNorm + quant before it: Fp8Linear's x_copies)."""
        b, s, _ = x.shape
        qkv = self.qkv(x, x_copies)
        q, k, v = _k.qk_norm_rope(qkv, self.q_norm, self.k_norm, freqs, self.q_heads,
                                  self.kv_heads, self.eps, self.rotary_fraction,
                                  self.mode == "torch")
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True, enable_gqa=True)
        return self.o(y.transpose(1, 2).reshape(b, s, -1))


class _CrossEntropy(torch.autograd.Function):
    """Mean softmax cross entropy of logits [T, V] (bf16) with lingen's K9
    forward and backward as torch ops (traceable, no host sync)."""

    @staticmethod
    def forward(ctx, logits, labels, ignore_index):
        kw = dict(vocab=logits.shape[1], ignore_index=int(ignore_index),
                  index="int32" if labels.dtype == torch.int32 else "int64")
        loss, s, m = _k._run("cross_entropy_forward", logits, labels, **kw)[:3]
        count = (labels != ignore_index).sum().float()
        ctx.save_for_backward(logits, labels, s, m, count)
        ctx.kw = kw
        return loss.sum() / count

    @staticmethod
    def backward(ctx, dout):
        logits, labels, s, m, count = ctx.saved_tensors
        kw = dict(ctx.kw)
        kw.pop("vocab")
        dloss = (dout.float() / count).reshape(1).expand(logits.shape[0]).contiguous()
        return _k._run("cross_entropy_backward", logits, labels, s, m, dloss, **kw), None, None


def cross_entropy(logits, labels, ignore_index=-100, mode="fp8"):
    """Mean cross entropy over the rows not ignored; logits [T, V], labels
    [T] int32 or int64."""
    fn = "lingen.nn.cross_entropy"
    A.choice(fn, "mode", mode, MODES)
    if not torch.is_tensor(logits) or not logits.is_floating_point() or logits.dim() != 2:
        A.fail(fn, "logits", getattr(logits, "shape", logits), "a 2-D floating tensor [T, V]",
               TypeError)
    if not torch.is_tensor(labels) or labels.dtype not in (torch.int32, torch.int64):
        A.fail(fn, "labels.dtype", getattr(labels, "dtype", labels), "torch.int32, torch.int64",
               TypeError)
    if tuple(labels.shape) != tuple(logits.shape[:1]):
        A.fail(fn, "labels.shape", tuple(labels.shape), f"({logits.shape[0]},): a label a row")
    if mode == "torch" or _k.on_cpu(logits):
        return F.cross_entropy(logits.float(), labels.long(), ignore_index=ignore_index)
    return _CrossEntropy.apply(logits.contiguous(), labels.contiguous(), ignore_index)


class CrossEntropyLoss(torch.nn.Module):
    """torch.nn.CrossEntropyLoss (mean) with lingen's kernel (K9)."""

    def __init__(self, ignore_index=-100, mode="fp8"):
        super().__init__()
        A.integer("lingen.nn.CrossEntropyLoss", "ignore_index", ignore_index, lo=-2 ** 63)
        A.choice("lingen.nn.CrossEntropyLoss", "mode", mode, MODES)
        self.ignore_index, self.mode = ignore_index, mode

    def forward(self, logits, labels):
        return cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                             self.ignore_index, self.mode)


@dataclasses.dataclass
class ModelConfig:
    hidden: int = 2048
    layers: int = 4
    q_heads: int = 16
    kv_heads: int = 4
    head_dim: int = 128
    experts: int = 256
    topk: int = 8
    expert_intermediate: int = 512
    shared_experts: int = 1
    shared_intermediate: int = 512
    vocab: int = 157184
    eps: float = 1e-6
    rotary_fraction: float = 0.5
    score: str = "sigmoid"
    groups: int = 1
    topk_groups: int = 1
    expert_bias: bool = False
    rope_theta: float = 10000.0

    def __post_init__(self):
        fn = "lingen.nn.ModelConfig"
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.type in (int, "int"):
                A.integer(fn, f.name, v, lo=0 if f.name.startswith("shared_") else 1)
            elif f.type in (float, "float"):
                A.number(fn, f.name, v, lo=0, hi=1 if f.name == "rotary_fraction" else None,
                         lo_open=True)
            elif f.type in (bool, "bool"):
                A.flag(fn, f.name, v)
        A.choice(fn, "score", self.score, A.SCORES)
        A.integer(fn, "topk", self.topk, 1, self.experts)
        A.integer(fn, "groups", self.groups, 1, self.experts)
        if self.experts % self.groups:
            A.fail(fn, "groups", self.groups, f"a divisor of experts ({self.experts})")
        A.integer(fn, "topk_groups", self.topk_groups, 1, self.groups)
        if self.shared_experts:
            A.integer(fn, "shared_intermediate", self.shared_intermediate)

    @classmethod
    def from_json(cls, path, **overrides):
        """The config of a lingen model config file (configs/models/*.json),
        any field overridden. Every key is either a field or one the C side's
        model configs have and this model does not use (_C_KEYS); the sizes
        (_REQUIRED) must be given, in the file or as overrides: no default
        model's sizes stand in for a missing one."""
        fn = "lingen.nn.ModelConfig.from_json"
        with open(path) as f:
            d = json.load(f)
        if not isinstance(d, dict):
            A.fail(fn, path, type(d).__name__, "a JSON object")
        names = [f.name for f in dataclasses.fields(cls)]
        for k in d:
            if k not in names and k not in _C_KEYS:
                A.fail(fn, f"{path}: key", k, ", ".join(names + list(_C_KEYS)))
        for k in overrides:
            if k not in names:
                A.fail(fn, "override", k, ", ".join(names), TypeError)
        kw = {k: v for k, v in d.items() if k in names}
        kw.update(overrides)
        missing = [k for k in _REQUIRED if k not in kw]
        if missing:
            raise ValueError(f"{fn}: {path}: missing {', '.join(missing)} (required: "
                             f"{', '.join(_REQUIRED)})")
        return cls(**kw)


# keys of the C side's model configs that lingen.nn's model does not use
_C_KEYS = ("name", "source", "notes", "head_layout", "fp8", "fused_router")
_REQUIRED = ("hidden", "layers", "q_heads", "kv_heads", "head_dim", "experts", "topk",
             "expert_intermediate", "shared_experts", "shared_intermediate", "vocab")


class DecoderBlock(torch.nn.Module):
    """x + attn(norm(x)), then + moe(norm(.)): a pre-norm MoE block."""

    def __init__(self, cfg, mode="fp8"):
        super().__init__()
        self.mode = mode
        self.attn_norm = RMSNorm(cfg.hidden, cfg.eps, mode)
        self.attn = Attention(cfg.hidden, cfg.q_heads, cfg.kv_heads, cfg.head_dim,
                              cfg.rotary_fraction, cfg.eps, mode)
        self.mlp_norm = RMSNorm(cfg.hidden, cfg.eps, mode)
        self.moe = MoE(cfg.hidden, cfg.experts, cfg.topk, cfg.expert_intermediate,
                       cfg.shared_experts * cfg.shared_intermediate, mode, score=cfg.score,
                       groups=cfg.groups, topk_groups=cfg.topk_groups,
                       expert_bias=cfg.expert_bias)

    def forward(self, x, freqs):
        if self.mode == "fp8":  # the norm writes the qkv GEMM's FP8 input (no bf16 y, no quant)
            y, copies = _k.rms_norm_quant(x, self.attn_norm.weight, self.attn_norm.eps)
            x = x + self.attn(y, freqs, copies)
        else:
            x = x + self.attn(self.attn_norm(x), freqs)
        return x + self.moe(self.mlp_norm(x))


class Model(torch.nn.Module):
    """Embedding -> decoder blocks -> RMSNorm -> bf16 lm head; forward(ids
    [B, S], labels=None) gives the logits, or the mean loss with labels.

    fused_head (default False; not in mode "torch", the plain-PyTorch
    baseline): the loss by LinearCrossEntropyLoss, the head's GEMMs and
    lingen's cross entropy in chunks of tokens, so the [tokens, vocab]
    logits never exist (at Ling-mini's head 2.4 GiB of bf16 a step, and
    their gradient: peak 1.83 GiB instead of 4.80), at 29.2 ms instead of
    23.9 (H100, T 8192, tools/head_bench.py: each chunk's dW GEMM writes
    the whole [vocab, hidden] sum again); False: lm_head's logits, then
    CrossEntropyLoss. The parameters and state dict are the same either
    way; head_chunk: tokens a chunk (None: about 512 MiB of logits).

    fp8_head (default False; mode "fp8" only): lm_head is an
    Fp8Linear (the blockwise FP8 recipe's forward, dgrad and wgrad GEMMs,
    its weight marked for lingen.optim.AdamW(fp8_weights=True)'s FP8
    copies), fed by the final RMSNorm's quantised copies (rms_norm_quant:
    the head's input quantised once); the logits are still bf16 [tokens,
    vocab], and with labels the head and the loss are one Function whose
    backward writes the logits gradient's FP8 copies straight from the
    logits (lingen's cross_entropy_quant: the bf16 gradient never exists;
    the same copies as quantising it); a vocab above QUANT_WIDTH_MAX,
    262144 columns, has its gradient quantised in slices. The parameter
    is still `lm_head.weight`, the state dict the same as fp8_head=False's. An
    accuracy trade: DeepSeek-V3 keeps its head in bf16; measure the loss
    against the bf16 head before relying on it (docs/python.md).

    fp8_head with fused_head: the FP8 head's loss without the logits
    (fp8_linear_cross_entropy): chunks of head_chunk tokens (a multiple of
    128), each chunk's logits, gradient copies (cross_entropy_quant) and
    dgrad in the forward, one wgrad over all the tokens in the backward;
    held from forward to backward the gradient's columnwise FP8 copy (vocab
    bytes a token) and dx, not the [tokens, vocab] bf16 logits; the numbers
    the unfused FP8 head's (dout = 1: bit for bit). The vocab at most
    QUANT_WIDTH_MAX."""

    def __init__(self, cfg, mode="fp8", fused_head=None, head_chunk=None, fp8_head=False):
        super().__init__()
        fn = "lingen.nn.Model"
        A.choice(fn, "mode", mode, MODES)
        if not isinstance(cfg, ModelConfig):
            A.fail(fn, "cfg", type(cfg).__name__, "a lingen.nn.ModelConfig", TypeError)
        self.fused_head = False if fused_head is None else A.flag(fn, "fused_head", fused_head)
        self.fp8_head = A.flag(fn, "fp8_head", fp8_head)
        if fp8_head:
            _fp8_head_args(fn, cfg, mode, self.fused_head, head_chunk)
        self.cfg, self.mode = cfg, mode
        self.embed = torch.nn.Embedding(cfg.vocab, cfg.hidden, dtype=torch.bfloat16)
        torch.nn.init.normal_(self.embed.weight, std=1.0)
        self.blocks = torch.nn.ModuleList(DecoderBlock(cfg, mode) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden, cfg.eps, mode)
        self.lm_head = torch.nn.Linear(cfg.hidden, cfg.vocab, bias=False, dtype=torch.bfloat16)
        torch.nn.init.normal_(self.lm_head.weight, std=cfg.hidden ** -0.5)
        if self.fp8_head:  # the same weight (the same draws at a seed), in an Fp8Linear
            head = Fp8Linear(cfg.hidden, cfg.vocab, fp8=True, device="meta")
            head.weight = _k.mark_fp8(self.lm_head.weight)
            self.lm_head = head
        self.loss = (LinearCrossEntropyLoss(mode=mode, chunk=head_chunk) if self.fused_head
                     else CrossEntropyLoss(mode=mode))
        for blk in self.blocks:  # residual branches scaled down with depth
            for lin in (blk.attn.o, ) + ((blk.moe.shared.down,) if blk.moe.shared else ()):
                lin.weight.data.mul_(1 / math.sqrt(2 * cfg.layers))
            blk.moe.w2.data.mul_(1 / math.sqrt(2 * cfg.layers))

    @classmethod
    def from_config(cls, path, layers=None, mode="fp8", fused_head=None, head_chunk=None,
                    fp8_head=False, **overrides):
        """The model of a lingen model config (configs/models/<name>.json),
        with `layers` layers (the config's when None) and any field
        overridden (experts=, hidden=, ...)."""
        if layers is not None:
            overrides["layers"] = layers
        return cls(ModelConfig.from_json(path, **overrides), mode, fused_head, head_chunk,
                   fp8_head)

    def _freqs(self, s, device):
        """rope_freqs for s positions on device, made once (kept, not a
        buffer: the state dict is unchanged); made anew under torch.compile
        and inference mode (whose tensors autograd could not save later)."""
        c = self.cfg
        key = (s, int(c.rotary_fraction * c.head_dim), c.rope_theta, device)
        if torch.compiler.is_compiling() or torch.is_inference_mode_enabled():
            return rope_freqs(*key)
        cache = self.__dict__.setdefault("_freqs_cache", {})
        f = cache.get(key)
        if f is None:
            f = cache[key] = rope_freqs(*key)
        return f

    def forward(self, ids, labels=None):
        b, s = ids.shape
        c = self.cfg
        freqs = self._freqs(s, ids.device)
        x = self.embed(ids)
        for blk in self.blocks:
            x = blk(x, freqs)
        if self.fp8_head:  # the norm writes the FP8 head's input copies (no quant of its own)
            h, copies = _k.rms_norm_quant(x, self.norm.weight, self.norm.eps)
            if labels is not None and self.fused_head:  # chunks: the logits never whole
                return fp8_linear_cross_entropy(h, self.lm_head.weight, labels,
                                                self.loss.ignore_index, self.loss.chunk, copies)
            if _fp8_head_loss(labels, b * s, c.vocab):  # the logits gradient as FP8 copies only
                return Fp8LinearCrossEntropy.apply(h, self.lm_head.weight, copies,
                                                   labels.reshape(-1).contiguous(),
                                                   self.loss.ignore_index)
            logits = self.lm_head(h, copies)
            return logits if labels is None else self.loss(logits.reshape(b * s, -1),
                                                           labels.reshape(-1))
        h = self.norm(x)
        if labels is None:
            return self.lm_head(h)
        if self.fused_head:
            return self.loss(h.reshape(b * s, -1), self.lm_head.weight, labels.reshape(-1))
        return self.loss(self.lm_head(h).reshape(b * s, -1), labels.reshape(-1))


# the widest output the FP8 GEMMs write (fp8_gemm's n: gen/families/fp8_gemm.c)
FP8_GEMM_N_MAX = 1 << 20


def _fp8_head_loss(labels, tokens, vocab):
    """Whether the FP8 head's loss runs as one Function whose backward
    quantises the logits gradient as it computes it (Fp8LinearCrossEntropy:
    cross_entropy_quant, the bf16 gradient never written): labels a label a
    token, int32 or int64 (else CrossEntropyLoss's checks refuse them), a
    vocab within the quantiser's row (wider: the sliced backward)."""
    return (labels is not None and labels.dtype in (torch.int32, torch.int64)
            and labels.numel() == tokens and vocab <= QUANT_WIDTH_MAX)


def _fp8_head_args(fn, cfg, mode, fused_head, head_chunk=None):
    """What fp8_head=True cannot run with, refused: another mode than "fp8",
    a vocab or hidden the FP8 head's kernels refuse; with fused_head, a
    vocab wider than the quantiser's row or a head_chunk not a multiple of
    128."""
    if mode != "fp8":
        A.fail(fn, "fp8_head", True, f"False in mode {mode!r} (the FP8 head is mode "
               "'fp8''s: lingen's FP8 GEMMs)")
    if fused_head:
        if head_chunk is not None:
            _fp8_chunk_arg(fn, "head_chunk (fp8_head=True, fused_head=True)", head_chunk)
        if cfg.vocab > QUANT_WIDTH_MAX:
            A.fail(fn, "cfg.vocab (fp8_head=True, fused_head=True)", cfg.vocab,
                   f"at most {QUANT_WIDTH_MAX} (the fused FP8 head quantises the logits' "
                   "gradient a row a launch: cross_entropy_quant; fused_head=False takes "
                   "wider vocabs, in slices of columns)")
    # the head's input width: Fp8Linear's in_features check (whole 128-blocks)
    A.width(fn, "cfg.hidden (fp8_head=True)", cfg.hidden, "fp8")
    # the vocab: the width of the logits' gradient the quantiser takes (whole 128-blocks)
    # and the GEMMs' output features (at most FP8_GEMM_N_MAX)
    if cfg.vocab % A.FP8_BLOCK or cfg.vocab > FP8_GEMM_N_MAX:
        A.fail(fn, "cfg.vocab (fp8_head=True)", cfg.vocab, f"a multiple of {A.FP8_BLOCK} up "
               f"to {FP8_GEMM_N_MAX} (the logits' gradient quantised in 1 x 128 blocks; the "
               "FP8 GEMMs' widest output)")
