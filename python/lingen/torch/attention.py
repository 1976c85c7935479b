"""q/k norm + RoPE (K2) and group RMSNorm x sigmoid gate (K8): autograd
Functions and functions."""
import torch

from ._ops import _run, declared

__all__ = ["QKNormRopeFunction", "qk_norm_rope", "GroupRMSNormGateFunction", "group_rms_norm_gate",
           "group_rms_norm_gate_forward", "group_rms_norm_gate_backward"]


# ------------------------------------------------- q/k norm + RoPE (K2)

@declared("qk_norm_rope")
def _rope_kw(eps, rotary_fraction, interleaved, transposed, silu, varlen=False, mscale=...,
             cp_size=..., cp_rank=...):
    return {"eps": eps, "rotary_fraction": rotary_fraction,
            "qkv_order": "seq_batch" if transposed or varlen else "batch_seq",
            "head_layout": "interleaved" if interleaved else "plain", "silu": bool(silu),
            "varlen": bool(varlen), "mscale": float(mscale), "cp_size": int(cp_size),
            "cp_rank": int(cp_rank)}


class QKNormRopeFunction(torch.autograd.Function):
    """Split qkv + q/k RMSNorm + rotate-half RoPE + [B, S, heads, D]
    (lingen.qk_norm_rope; packed sequences with cu_seqlens: qkv [T, .] ->
    [T, heads, D]), with lingen's backward (dq_weight, dk_weight in fp32,
    deterministic, cast to the weights' dtype for autograd)."""

    @staticmethod
    @declared("qk_norm_rope")
    def forward(ctx, qkv, q_weight, k_weight, freqs, q_heads, kv_heads, eps=...,
                rotary_fraction=..., interleaved=True, transposed=True, silu=...,
                cu_seqlens=None, mscale=..., cp_size=..., cp_rank=...):
        varlen = cu_seqlens is not None
        kw = _rope_kw(eps, rotary_fraction, interleaved, transposed, silu, varlen, mscale,
                      cp_size, cp_rank)
        x = qkv.view(qkv.shape[0], 1, qkv.shape[1]) if varlen and qkv.dim() == 2 else qkv
        q, k, v = _run("qk_norm_rope_forward", x, q_weight, k_weight, freqs, cu_seqlens,
                       q_heads=q_heads, kv_heads=kv_heads, **kw)
        if varlen:
            q, k, v = q[0], k[0], v[0]
        ctx.save_for_backward(qkv, q_weight, k_weight, freqs, cu_seqlens)
        ctx.kw = kw
        return q, k, v

    @staticmethod
    def backward(ctx, gq, gk, gv):
        qkv, q_weight, k_weight, freqs, cu_seqlens = ctx.saved_tensors
        x = qkv
        if cu_seqlens is not None:
            gq, gk, gv = gq.unsqueeze(0), gk.unsqueeze(0), gv.unsqueeze(0)
            if qkv.dim() == 2:
                x = qkv.view(qkv.shape[0], 1, qkv.shape[1])
        dqkv, dqw, dkw = _run("qk_norm_rope_backward", gq, gk, gv, x, q_weight, k_weight,
                              freqs, cu_seqlens, **ctx.kw)
        dqkv = dqkv.view(qkv.shape)
        dqw = dqw.to(q_weight.dtype) if ctx.needs_input_grad[1] else None
        dkw = dkw.to(k_weight.dtype) if ctx.needs_input_grad[2] else None
        return (dqkv, dqw, dkw) + (None,) * 12


@declared("qk_norm_rope")
def qk_norm_rope(qkv, q_weight, k_weight, freqs, q_heads, kv_heads, eps=..., rotary_fraction=...,
                 interleaved=True, transposed=True, silu=..., cu_seqlens=None, mscale=...,
                 cp_size=..., cp_rank=...):
    """(q, k, v) [B, S, heads, D] from qkv [S, B, (H + 2h) D] (transposed;
    else [B, S, .]), differentiable; as linghe's qk_norm_half_rope with
    H=q_heads, h=kv_heads (rotary_fraction 0.5 there). With cu_seqlens
    (int32 [n + 1], cumulative global lengths): qkv [T, .] packed sequences
    -> [T, heads, D], positions restarting at each sequence (linghe's varlen
    form; cp_size, cp_rank: context parallelism's zig-zag halves)."""
    return QKNormRopeFunction.apply(qkv, q_weight, k_weight, freqs, q_heads, kv_heads, eps,
                                    rotary_fraction, interleaved, transposed, silu, cu_seqlens,
                                    mscale, cp_size, cp_rank)


# ------------------------------------- group RMSNorm x sigmoid gate (K8)

def _bsd(t):
    """t [a, b, ...] as [a, b, rest] (the attention output's heads x head_dim
    flattened into dim)."""
    return t.reshape(t.shape[0], t.shape[1], -1)


class GroupRMSNormGateFunction(torch.autograd.Function):
    """y = x * rsqrt(mean_group(x^2) + eps) * w * sigmoid(gate) with
    lingen's forward and backward (docs/kernels.md K8): x [batch, seq, ...],
    gate [seq, batch, ...] with transpose ([batch, seq, ...] otherwise),
    weight [dim] or [dim / groups] (shared by the groups); y [seq, batch,
    dim] with transpose, else [batch, seq, dim]. dw is fp32 and
    deterministic, cast to the weight's dtype for autograd."""

    @staticmethod
    @declared("group_rmsnorm_gate")
    def forward(ctx, x, gate, weight, eps=..., groups=..., transpose=...):
        x3, g3 = _bsd(x), _bsd(gate)
        shared = weight.shape[0] != x3.shape[-1]
        y = _run("group_rmsnorm_gate_forward", x3, g3, weight, eps=eps, groups=groups,
                 transpose=bool(transpose), shared_weight=shared)
        ctx.save_for_backward(x3, g3, weight)
        ctx.opts = dict(eps=eps, groups=groups, transpose=bool(transpose), shared_weight=shared)
        ctx.shapes = (x.shape, gate.shape)
        return y

    @staticmethod
    def backward(ctx, dy):
        x3, g3, weight = ctx.saved_tensors
        dx, dgate, dw = _run("group_rmsnorm_gate_backward", _bsd(dy), x3, g3, weight, **ctx.opts)
        dw = dw.to(weight.dtype) if ctx.needs_input_grad[2] else None
        return dx.view(ctx.shapes[0]), dgate.view(ctx.shapes[1]), dw, None, None, None


@declared("group_rmsnorm_gate")
def group_rms_norm_gate(x, gate, weight, eps=..., groups=..., transpose=...):
    """Group RMSNorm x sigmoid gate, differentiable (linghe's facade
    group_rms_norm_gate(attn_output, gate, weight, eps, group_size); its
    group_size is groups here)."""
    return GroupRMSNormGateFunction.apply(x, gate, weight, eps, groups, transpose)


@declared("group_rmsnorm_gate")
def group_rms_norm_gate_forward(x, gate, weight, eps=..., groups=..., transpose=...):
    """y without autograd, as linghe's triton_group_rms_norm_gate_forward."""
    x3 = _bsd(x)
    return _run("group_rmsnorm_gate_forward", x3, _bsd(gate), weight, eps=eps, groups=groups,
                transpose=bool(transpose), shared_weight=weight.shape[0] != x3.shape[-1])


@declared("group_rmsnorm_gate")
def group_rms_norm_gate_backward(dy, x, gate, weight, eps=..., groups=..., transpose=...):
    """(dx, dgate, dw fp32) as linghe's triton_group_rms_norm_gate_backward."""
    x3 = _bsd(x)
    dx, dgate, dw = _run("group_rmsnorm_gate_backward", _bsd(dy), x3, _bsd(gate), weight, eps=eps,
                         groups=groups, transpose=bool(transpose),
                         shared_weight=weight.shape[0] != x3.shape[-1])
    return dx.view(x.shape), dgate.view(gate.shape), dw


