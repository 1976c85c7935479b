"""The attention-side fused kernels: split + q/k RMSNorm + half RoPE +
transpose (K2, forward and backward) and group RMSNorm x sigmoid gate (K8,
forward and backward), at docs/performance.md's shapes. Peers: the same math in
eager PyTorch and through torch.compile (Liger-Kernel has neither op)."""
from . import ODD_TOKENS, Case, Setup
from .quant import _ref

# linghe on one H200 (docs/performance.md, measured 2026-11-30): (kernel, shape) -> us
LINGHE_US = {
    ("qk_norm_rope fwd", "4096x2 H16 h4 D128"): 34.6, ("qk_norm_rope bwd", "4096x2 H16 h4 D128"): 75.7,
    ("group_rmsnorm_gate fwd", "2x4096x2048 G4"): 29.0,
    ("group_rmsnorm_gate bwd", "2x4096x2048 G4"): 60.8,
}


def rope_fwd(torch, qkv, qw, kw, freqs, H, h, eps=1e-6):
    """(q, k, v) [B, S, heads, D] from qkv [S, B, (H + 2h) D], interleaved
    GQA groups, rotate-half RoPE over the first half of D."""
    return _ref().qk_norm_rope(qkv, qw, kw, freqs, H, h, eps, interleaved=True, transposed=True)


def gate_fwd(torch, x, gate, w, groups, eps=1e-6):
    """y [L, B, dim] = group RMSNorm(x [B, L, dim]) * w * sigmoid(gate [L, B, dim])."""
    return _ref().group_rms_norm_gate(x, gate, w, groups, eps)


def _rope_inputs(env, S, B, H, h, D):
    torch = env.torch
    qkv = env.randn(S, B, (H + 2 * h) * D)
    qw, kw = env.weight(D), env.weight(D)
    i = torch.arange(D // 2, device="cuda") % (D // 4)
    freqs = (torch.arange(S, device="cuda")[:, None] * 10000.0 ** (-4.0 * i / D)[None, :]).float()
    return qkv, qw, kw, freqs.contiguous()


def _rope_fwd(env, S, B, H, h, D):
    torch, lt = env.torch, env.lt
    qkv, qw, kw, freqs = _rope_inputs(env, S, B, H, h, D)
    fn = env.compiled(rope_fwd)
    return Setup({"lingen": lambda: lt.qk_norm_rope(qkv, qw, kw, freqs, H, h),
                  "eager": lambda: rope_fwd(torch, qkv, qw, kw, freqs, H, h),
                  "compile": lambda: fn(qkv, qw, kw, freqs, H, h)}, (qkv, qw, kw, freqs))


def _rope_bwd(env, S, B, H, h, D):
    torch, lingen = env.torch, env.lingen
    qkv, qw, kw, freqs = _rope_inputs(env, S, B, H, h, D)
    gq, gk, gv = env.randn(B, S, H, D), env.randn(B, S, h, D), env.randn(B, S, h, D)

    def autograd(f):
        xs = [t.detach().clone().requires_grad_() for t in (qkv, qw, kw)]
        outs = f(*xs)

        def run():
            return torch.autograd.grad(outs, xs, (gq, gk, gv), retain_graph=True)
        return run
    fn = env.compiled(rope_fwd)
    return Setup({"lingen": lambda: lingen.qk_norm_rope_backward(gq, gk, gv, qkv, qw, kw, freqs),
                  "eager": autograd(lambda x, a, b: rope_fwd(torch, x, a, b, freqs, H, h)),
                  "compile": autograd(lambda x, a, b: fn(x, a, b, freqs, H, h))},
                 (gq, gk, gv, qkv, qw, kw, freqs))


def _gate_inputs(env, B, L, dim):
    return env.randn(B, L, dim), env.randn(L, B, dim), env.weight(dim)


def _gate_fwd(env, B, L, dim, G):
    torch, lt = env.torch, env.lt
    x, gate, w = _gate_inputs(env, B, L, dim)
    fn = env.compiled(gate_fwd)
    return Setup({"lingen": lambda: lt.group_rms_norm_gate_forward(x, gate, w, groups=G),
                  "eager": lambda: gate_fwd(torch, x, gate, w, G),
                  "compile": lambda: fn(x, gate, w, G)}, (x, gate, w))


def _gate_bwd(env, B, L, dim, G):
    torch, lt = env.torch, env.lt
    x, gate, w = _gate_inputs(env, B, L, dim)
    dy = env.randn(L, B, dim)

    def autograd(f):
        xs = [t.detach().clone().requires_grad_() for t in (x, gate, w)]
        y = f(*xs)

        def run():
            return torch.autograd.grad(y, xs, dy, retain_graph=True)
        return run
    fn = env.compiled(gate_fwd)
    return Setup({"lingen": lambda: lt.group_rms_norm_gate_backward(dy, x, gate, w, groups=G),
                  "eager": autograd(lambda a, g, b: gate_fwd(torch, a, g, b, G)),
                  "compile": autograd(lambda a, g, b: fn(a, g, b, G))}, (dy, x, gate, w))


def cases(quick):
    out = []
    rope = [(4096, 2, 16, 4, 128)] if quick else [(4096, 2, 16, 4, 128), (4096, 1, 32, 4, 128)]
    rope += [] if quick else [(t, 1, 16, 4, 128) for t in ODD_TOKENS]  # the odd-shape rule
    for S, B, H, h, D in rope:
        shape = f"{S}x{B} H{H} h{h} D{D}"
        for kernel, make in (("qk_norm_rope fwd", _rope_fwd), ("qk_norm_rope bwd", _rope_bwd)):
            out.append(Case(kernel, shape,
                            lambda env, a=(S, B, H, h, D), m=make: m(env, *a),
                            LINGHE_US.get((kernel, shape)), family="qk_norm_rope"))
    gate = [(2, 4096, 2048, 4)] if quick else [(2, 4096, 2048, 4), (1, 8192, 4096, 8)]
    gate += [] if quick else [(1, t, 2048, 4) for t in ODD_TOKENS]
    for B, L, dim, G in gate:
        shape = f"{B}x{L}x{dim} G{G}"
        for kernel, make in (("group_rmsnorm_gate fwd", _gate_fwd),
                             ("group_rmsnorm_gate bwd", _gate_bwd)):
            out.append(Case(kernel, shape, lambda env, a=(B, L, dim, G), m=make: m(env, *a),
                            LINGHE_US.get((kernel, shape)), family="group_rmsnorm_gate"))
    return out
