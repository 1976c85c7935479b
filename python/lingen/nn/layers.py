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

from . import _k
from .linear import Fp8Linear
from .moe import MoE

__all__ = ["RMSNorm", "Attention", "CrossEntropyLoss", "cross_entropy", "DecoderBlock",
           "ModelConfig", "Model", "rope_freqs"]

MODES = ("fp8", "bf16", "torch")


class RMSNorm(torch.nn.Module):
    """RMSNorm over the last dimension (lingen's kernels on a GPU but in
    mode "torch"); weight bf16."""

    def __init__(self, hidden, eps=1e-6, mode="fp8", dtype=torch.bfloat16):
        super().__init__()
        self.eps, self.mode = eps, mode
        self.weight = torch.nn.Parameter(torch.ones(hidden, dtype=dtype))

    def forward(self, x):
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
        self.q_heads, self.kv_heads, self.head_dim = q_heads, kv_heads, head_dim
        self.rotary_fraction, self.eps, self.mode = rotary_fraction, eps, mode
        fp8 = mode == "fp8"
        self.qkv = Fp8Linear(hidden, (q_heads + 2 * kv_heads) * head_dim, fp8)
        self.q_norm = torch.nn.Parameter(torch.ones(head_dim, dtype=torch.bfloat16))
        self.k_norm = torch.nn.Parameter(torch.ones(head_dim, dtype=torch.bfloat16))
        self.o = Fp8Linear(q_heads * head_dim, hidden, fp8)

    def forward(self, x, freqs):
        b, s, _ = x.shape
        qkv = self.qkv(x)
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
    """Mean cross entropy over the rows not ignored; logits [T, V]."""
    if mode == "torch" or _k.on_cpu(logits):
        return F.cross_entropy(logits.float(), labels, ignore_index=ignore_index)
    return _CrossEntropy.apply(logits.contiguous(), labels.contiguous(), ignore_index)


class CrossEntropyLoss(torch.nn.Module):
    """torch.nn.CrossEntropyLoss (mean) with lingen's kernel (K9)."""

    def __init__(self, ignore_index=-100, mode="fp8"):
        super().__init__()
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

    @classmethod
    def from_json(cls, path, **overrides):
        with open(path) as f:
            d = json.load(f)
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw.update(overrides)
        return cls(**kw)


class DecoderBlock(torch.nn.Module):
    """x + attn(norm(x)), then + moe(norm(.)): a pre-norm MoE block."""

    def __init__(self, cfg, mode="fp8"):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.hidden, cfg.eps, mode)
        self.attn = Attention(cfg.hidden, cfg.q_heads, cfg.kv_heads, cfg.head_dim,
                              cfg.rotary_fraction, cfg.eps, mode)
        self.mlp_norm = RMSNorm(cfg.hidden, cfg.eps, mode)
        self.moe = MoE(cfg.hidden, cfg.experts, cfg.topk, cfg.expert_intermediate,
                       cfg.shared_experts * cfg.shared_intermediate, mode, score=cfg.score,
                       groups=cfg.groups, topk_groups=cfg.topk_groups,
                       expert_bias=cfg.expert_bias)

    def forward(self, x, freqs):
        x = x + self.attn(self.attn_norm(x), freqs)
        return x + self.moe(self.mlp_norm(x))


class Model(torch.nn.Module):
    """Embedding -> decoder blocks -> RMSNorm -> bf16 lm head; forward(ids
    [B, S], labels=None) gives the logits, or the mean loss with labels."""

    def __init__(self, cfg, mode="fp8"):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"lingen.nn.Model: mode {mode!r}: expected one of {MODES}")
        self.cfg, self.mode = cfg, mode
        self.embed = torch.nn.Embedding(cfg.vocab, cfg.hidden, dtype=torch.bfloat16)
        torch.nn.init.normal_(self.embed.weight, std=1.0)
        self.blocks = torch.nn.ModuleList(DecoderBlock(cfg, mode) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden, cfg.eps, mode)
        self.lm_head = torch.nn.Linear(cfg.hidden, cfg.vocab, bias=False, dtype=torch.bfloat16)
        torch.nn.init.normal_(self.lm_head.weight, std=cfg.hidden ** -0.5)
        self.loss = CrossEntropyLoss(mode=mode)
        for blk in self.blocks:  # residual branches scaled down with depth
            for lin in (blk.attn.o, ) + ((blk.moe.shared.down,) if blk.moe.shared else ()):
                lin.weight.data.mul_(1 / math.sqrt(2 * cfg.layers))
            blk.moe.w2.data.mul_(1 / math.sqrt(2 * cfg.layers))

    @classmethod
    def from_config(cls, path, layers=None, mode="fp8", **overrides):
        """The model of a lingen model config (configs/models/<name>.json),
        with `layers` layers (the config's when None) and any field
        overridden (experts=, hidden=, ...)."""
        if layers is not None:
            overrides["layers"] = layers
        return cls(ModelConfig.from_json(path, **overrides), mode)

    def forward(self, ids, labels=None):
        b, s = ids.shape
        c = self.cfg
        freqs = rope_freqs(s, int(c.rotary_fraction * c.head_dim), c.rope_theta, ids.device)
        x = self.embed(ids)
        for blk in self.blocks:
            x = blk(x, freqs)
        logits = self.lm_head(self.norm(x))
        if labels is None:
            return logits
        return self.loss(logits.reshape(b * s, -1), labels.reshape(-1))
