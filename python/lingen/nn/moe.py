"""The MoE layer: router GEMM in fp32 (lingen's router_gemm) -> sigmoid or
softmax top-k (Ling's group-limited top-k and the expert bias as options)
-> moe_row_map -> the experts -> plus the shared expert.

The experts, mode "fp8": GroupedMLPFunction, one autograd Function over
moe_permute_quant (K4b) -> grouped FP8 gate/up GEMM -> batch_swiglu_quant
(K6, the routing weight applied there) -> grouped FP8 down GEMM ->
moe_unpermute (K5); its backward: the unpermute's backward ->
fp8_quant_batched -> down dgrad and wgrad -> the SwiGLU backward (dprob
and the quantised dx copies) -> gate/up dgrad and wgrad -> the permute's
backward (the tokens' sum and their routing weights' gradients, one
kernel). Counts stay on the device throughout (no host synchronisation).
Mode "bf16": lingen's moe_permute / moe_unpermute with torch._grouped_mm.
Mode "torch": plain PyTorch (index, torch._grouped_mm, index_add)."""
import torch
import torch.nn.functional as F

from . import _args as A, _gemm, _k
from .linear import Fp8Linear

__all__ = ["GroupedMLPFunction", "route", "routed_experts", "MoE", "SharedExpert"]

# Every expert's rows padded to a multiple of 16 in both modes. FP8: the
# quantisers (moe_permute_quant, batch_swiglu_quant, fp8_quant_batched) and
# the grouped forward and dgrad take any counts (each segment quantised as a
# tensor of its own, its last 128-row block partial); the grouped wgrad
# reads the per-expert columnwise copies, whose rows are count_e bytes
# apart: 16-byte aligned (cp.async) at counts that are multiples of 16, byte
# loads otherwise. 16 is the least padding that keeps every kernel on its
# fast path (128 added ~25% rows at 8192 tokens x top-8 over 256 experts).
# bf16: torch._grouped_mm's segments, 16-byte aligned rows.
MULTIPLE_FP8 = 16
MULTIPLE_BF16 = 16


class GroupedMLPFunction(torch.autograd.Function):
    """The routed experts in FP8: out [T, H] bf16 = sum over each token's k
    experts of probs[t, e] * down_e(silu(gate_e x) * up_e x). x [T, H] bf16,
    probs [T, E] fp32 (zeros where not routed), w1 [E, 2I, H] (gate | up),
    w2 [E, H, I]; the row map of moe_row_map (multiple MULTIPLE_FP8)."""

    @staticmethod
    def forward(ctx, x, probs, w1, w2, rid, counts, offsets, row_index, padded, top_k):
        m = MULTIPLE_FP8
        q, s, qt, st, p_rows = _k.permute_quant(x, probs, row_index, padded, top_k, m)
        w1q, w1s, w1tq, w1ts = _k.quant_weight(w1)
        w2q, w2s, w2tq, w2ts = _k.quant_weight(w2)
        h = _gemm.grouped(q, s, w1q, w1s, padded)
        hq, hs, hqt, hst = _k.swiglu_quant(h, p_rows, padded)
        o = _gemm.grouped(hq, hs, w2q, w2s, padded)
        out = _k.unpermute(o, row_index, rid, offsets, counts, padded, top_k, m)
        # (a weight handed over without its transposed copy: the weight, to
        # quantise it again in the backward)
        ctx.save_for_backward(qt, st, h, p_rows, hqt, hst, w1tq, w1ts, w2tq, w2ts, rid, counts,
                              offsets, row_index, padded, w1 if w1tq is None else None,
                              w2 if w2tq is None else None)
        ctx.top_k = top_k
        ctx.dtypes = (w1.dtype, w2.dtype)
        return out

    @staticmethod
    def backward(ctx, dout):
        (qt, st, h, p_rows, hqt, hst, w1tq, w1ts, w2tq, w2ts, rid, counts, offsets, row_index,
         padded, w1, w2) = ctx.saved_tensors
        k, m = ctx.top_k, MULTIPLE_FP8
        dg = _k.unpermute_backward(dout, row_index, rid, offsets, counts, padded, k, m)
        gq, gs, gqt, gst = _k.experts_quant(dg, padded)
        if w2tq is None:
            w2tq, w2ts = _k.quant_weight(w2)[2:]
        dy = _gemm.grouped_dgrad(gq, gs, w2tq, w2ts, padded)
        dw2 = _gemm.grouped_wgrad(gqt, gst, hqt, hst, padded, ctx.dtypes[1])
        del w2tq, w2ts  # (one weight's transposed copy at a time)
        if w1tq is None:
            w1tq, w1ts = _k.quant_weight(w1)[2:]
        dxq, dxs, dxqt, dxst, dprob = _k.swiglu_quant_backward(dy, h, p_rows, padded)
        dxr = _gemm.grouped_dgrad(dxq, dxs, w1tq, w1ts, padded)
        dw1 = _gemm.grouped_wgrad(dxqt, dxst, qt, st, padded, ctx.dtypes[0])
        dx, dprobs = _k.permute_backward(dxr, dprob, row_index, rid, padded, k, m)
        return (dx, dprobs, dw1, dw2) + (None,) * 6


def route(logits, top_k, score="sigmoid", bias=None, groups=1, topk_groups=1, norm=True,
          scale=1.0):
    """(topk [T, k] int32, probs [T, E] fp32, zeros where not routed) of the
    router's fp32 logits: scores = sigmoid or softmax; the experts chosen by
    scores + bias (the bias only chooses), within the topk_groups best of
    `groups` expert groups (a group's score: the sum of its best two);
    weights = the chosen scores, normalised to sum 1 when norm, times scale."""
    A.choice("lingen.nn.route", "score", score, A.SCORES)
    scores = torch.sigmoid(logits) if score == "sigmoid" else torch.softmax(logits, -1)
    # (no bias, no scale: no pass over the scores or weights that changes nothing)
    choice = scores.detach() if bias is None else scores.detach() + bias.float()
    if groups > 1:
        t, e = choice.shape
        g = choice.view(t, groups, e // groups)
        best = g.topk(min(2, e // groups), -1).values.sum(-1)
        keep = torch.zeros_like(best).scatter(1, best.topk(topk_groups, -1).indices, 1.0)
        choice = torch.where(keep[:, :, None] > 0, g, float("-inf")).view(t, e)
    idx = choice.topk(top_k, -1).indices
    w = scores.gather(1, idx)
    if norm:
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    if scale != 1.0:
        w = w * scale
    probs = torch.zeros_like(scores).scatter(1, idx, w)
    return idx.int(), probs


class SharedExpert(torch.nn.Module):
    """The shared expert: down(silu(gate x) * up x), Fp8Linear layers; in
    FP8 the SwiGLU writes down's quantised input in the same pass
    (swiglu_quant: no bf16 product, no torch kernels between the GEMMs)."""

    def __init__(self, hidden, intermediate, fp8=True, dtype=torch.bfloat16):
        super().__init__()
        self.fp8 = fp8
        self.gate_up = Fp8Linear(hidden, 2 * intermediate, fp8, dtype=dtype)
        self.down = Fp8Linear(intermediate, hidden, fp8, dtype=dtype)

    def forward(self, x):
        h = self.gate_up(x)
        if self.fp8:
            return self.down(*_k.swiglu_quant_dense(h))
        g, u = h.chunk(2, -1)
        return self.down(F.silu(g) * u)


class MoE(torch.nn.Module):
    """Routed experts plus shared experts over x [..., hidden] bf16.
    mode: "fp8" (lingen kernels + FP8 GEMMs), "bf16" (lingen dispatch and
    combine, torch._grouped_mm), "torch" (plain PyTorch)."""

    def __init__(self, hidden, experts, top_k, intermediate, shared_intermediate=0, mode="fp8",
                 score="sigmoid", groups=1, topk_groups=1, expert_bias=False, norm=True,
                 scale=1.0, dtype=torch.bfloat16):
        super().__init__()
        _check_moe(hidden, experts, top_k, intermediate, shared_intermediate, mode, score, groups,
                   topk_groups, norm, scale, dtype)
        self.hidden, self.experts, self.top_k, self.mode = hidden, experts, top_k, mode
        self.route_kw = dict(score=score, groups=groups, topk_groups=topk_groups, norm=norm,
                             scale=scale)
        self.router = torch.nn.Parameter(torch.randn(experts, hidden, dtype=dtype) * hidden ** -0.5)
        self.w1 = torch.nn.Parameter(torch.randn(experts, 2 * intermediate, hidden, dtype=dtype)
                                     * hidden ** -0.5)
        self.w2 = torch.nn.Parameter(torch.randn(experts, hidden, intermediate, dtype=dtype)
                                     * intermediate ** -0.5)
        if mode == "fp8":  # lingen.optim.AdamW(fp8_weights=True) writes their FP8 copies
            _k.mark_fp8(self.w1)
            _k.mark_fp8(self.w2)
        if expert_bias:
            self.register_buffer("expert_bias", torch.zeros(experts, dtype=torch.float32))
        else:
            self.expert_bias = None
        self.shared = (SharedExpert(hidden, shared_intermediate, mode == "fp8", dtype)
                       if shared_intermediate else None)

    def forward(self, x):
        A.last_dim("lingen.nn.MoE", x, self.hidden)
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        if x2.shape[0] == 0:  # no tokens: an empty result, as torch's layers give
            return empty_result(x2, self.parameters()).view(shape)
        plain = self.mode == "torch"
        logits = _k.router_gemm(x2, self.router, plain)
        topk, probs = route(logits, self.top_k, bias=self.expert_bias, **self.route_kw)
        if plain:
            out = self._torch_experts(x2, topk, probs)
        else:
            out = self._lingen_experts(x2, topk, probs)
        if self.shared is not None:
            out = out + self.shared(x2)
        return out.view(shape)

    def _lingen_experts(self, x, topk, probs):
        return routed_experts(x, topk, probs, self.w1, self.w2, self.experts, self.top_k,
                              self.mode == "fp8")

    def _torch_experts(self, x, topk, probs):
        return routed_experts(x, topk, probs, self.w1, self.w2, self.experts, self.top_k, False,
                              plain=True)


def _check_moe(hidden, experts, top_k, intermediate, shared_intermediate, mode, score, groups,
                topk_groups, norm, scale, dtype):
    fn = "lingen.nn.MoE"
    A.choice(fn, "mode", mode, A.MODES)
    A.choice(fn, "score", score, A.SCORES)
    A.width(fn, "hidden", hidden, mode)
    A.width(fn, "intermediate", intermediate, mode)
    if shared_intermediate:
        A.width(fn, "shared_intermediate", shared_intermediate, mode)
    else:
        A.integer(fn, "shared_intermediate", shared_intermediate, lo=0)
    A.integer(fn, "experts", experts)
    A.integer(fn, "top_k", top_k, 1, experts)
    A.integer(fn, "groups", groups, 1, experts)
    if experts % groups:
        A.fail(fn, "groups", groups, f"a divisor of experts ({experts})")
    A.integer(fn, "topk_groups", topk_groups, 1, groups)
    if top_k > topk_groups * (experts // groups):
        A.fail(fn, "top_k", top_k, f"at most topk_groups x experts / groups = "
               f"{topk_groups * (experts // groups)}")
    A.flag(fn, "norm", norm)
    A.number(fn, "scale", scale, lo=0, lo_open=True)
    A.float_dtype(fn, "dtype", dtype)


def empty_result(x, params):
    """[0, H] zeros for x [0, H], in autograd's graph of x and params (their
    gradients zeros), for a layer given no tokens."""
    z = x.sum() * 0
    for p in params:
        z = z + p.sum() * 0
    return x.new_zeros(x.shape) + z.to(x.dtype)


def routed_experts(x, topk, probs, w1, w2, experts, top_k, fp8=True, plain=False):
    """The routed experts with lingen's kernels: out [T, H] = sum over each
    token's chosen experts e of probs[t, e] * down_e(silu(gate_e x) * up_e x);
    x [T, H] bf16, topk [T, k] int32, probs [T, E] fp32, w1 [E, 2I, H] (gate
    | up), w2 [E, H, I]. FP8 (GroupedMLPFunction) or bf16 (lingen's
    dispatch and combine around torch._grouped_mm); plain: the dispatch and
    combine in plain torch (index, index_add), expert segments padded to 16
    rows as torch._grouped_mm wants them (torchtitan pads them so too)."""
    if x.shape[0] == 0:
        return empty_result(x, (probs, w1, w2))
    m = MULTIPLE_FP8 if fp8 else MULTIPLE_BF16
    rid, counts, offsets, row_index, padded = _k.row_map(topk, experts, m, plain)
    if fp8:
        return GroupedMLPFunction.apply(x, probs, w1, w2, rid, counts, offsets, row_index, padded,
                                        top_k)
    rows, p = _k.permute_bf16(x, probs, rid, row_index, offsets, counts, padded, top_k, m, plain)
    offs = torch.cumsum(padded, 0, dtype=torch.int32)
    y = _swiglu_experts(rows, p, w1, w2, offs)
    return _k.unpermute_bf16(y, rid, row_index, offsets, counts, padded, top_k, m, plain)


def _swiglu_experts(rows, p, w1, w2, offs):
    """down_e(silu(gate_e r) * up_e r * p) over per-expert row segments."""
    h = torch._grouped_mm(rows, w1.transpose(1, 2), offs=offs)
    g, u = h.chunk(2, -1)
    y = (F.silu(g.float()) * u.float() * p[:, None]).to(rows.dtype)
    return torch._grouped_mm(y, w2.transpose(1, 2), offs=offs)
