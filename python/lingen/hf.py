"""lingen for Hugging Face Transformers: lingen.hf.apply(model, fp8=True)
patches a Qwen3-MoE model (transformers' Qwen3MoeForCausalLM /
Qwen3MoeModel) in place, in the spirit of Liger-Kernel's
apply_liger_kernel_to_*: every RMSNorm runs lingen's RMSNorm, every sparse
MoE block lingen's router GEMM (fp32), top-k and experts (FP8 with
fp8=True: moe_permute_quant, grouped FP8 GEMMs, batch_swiglu_quant,
moe_unpermute; bf16 GEMMs with fp8=False), and the loss lingen's cross
entropy. The modules, their parameters and the state dict are the model's
own: only the forwards change (the experts' weights are transformers'
gate_up_proj [E, 2I, H] and down_proj [E, H, I], as lingen.nn.MoE's w1, w2).

    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    lingen.hf.apply(model, fp8=True)

apply_to_qwen3_moe(fp8=...) patches the classes instead, before a model
is made (as Liger's functions do); apply() on a model is the safer form."""
import types

import torch
import torch.nn.functional as F

from .nn import _k
from .nn.layers import cross_entropy
from .nn.moe import route, routed_experts

__all__ = ["apply", "apply_to_qwen3_moe", "causal_lm_loss"]

_RMSNORM = ("Qwen3MoeRMSNorm",)
_MOE = ("Qwen3MoeSparseMoeBlock",)
_ROUTER = ("Qwen3MoeTopKRouter",)


def _lingen_ok(*ts):
    """lingen's GPU kernels take bf16; the CPU forms anything."""
    return all(t.dtype == torch.bfloat16 for t in ts) or all(_k.on_cpu(t) for t in ts)


def _rms_forward(self, hidden_states):
    w = self.weight
    plain = not _lingen_ok(hidden_states, w)
    return _k.rms_norm(hidden_states, w, self.variance_epsilon, plain).to(hidden_states.dtype)


def _router_forward(self, hidden_states):
    """The top-k router with lingen's router GEMM (fp32 logits): (logits [T,
    E], the chosen experts' weights [T, k], their indices [T, k]) as
    transformers' router returns them, so that what records its outputs
    (output_router_logits, the load-balancing loss) still sees them."""
    x = hidden_states.reshape(-1, self.hidden_dim)
    plain = not _lingen_ok(x, self.weight) or x.shape[0] == 0
    logits = _k.router_gemm(x, self.weight, plain)
    topk, probs = route(logits, self.top_k, score="softmax", norm=self.norm_topk_prob)
    idx = topk.long()
    return logits, probs.gather(1, idx), idx


def _moe_forward(self, hidden_states):
    b, s, h = hidden_states.shape
    x = hidden_states.reshape(-1, h)
    gate, ex = self.gate, self.experts
    logits, weights, idx = gate(x)  # the module call: its hooks record the router's outputs
    probs = torch.zeros_like(logits, dtype=torch.float32).scatter(1, idx, weights.float())
    out = routed_experts(x.to(torch.bfloat16) if not _k.on_cpu(x) else x, idx.int(), probs,
                         ex.gate_up_proj, ex.down_proj, gate.num_experts, gate.top_k,
                         self._lingen_fp8)
    return out.to(hidden_states.dtype).reshape(b, s, h)


def causal_lm_loss(logits, labels, vocab_size, num_items_in_batch=None, ignore_index=-100,
                   shift_labels=None, **kwargs):
    """transformers' ForCausalLMLoss with lingen's cross entropy (K9): the
    labels shifted left, the mean over the positions not ignored (or the
    sum over num_items_in_batch when given)."""
    if shift_labels is None:
        labels = F.pad(labels, (0, 1), value=ignore_index)
        shift_labels = labels[..., 1:]
    logits = logits.reshape(-1, vocab_size)
    target = shift_labels.reshape(-1).to(logits.device)
    loss = cross_entropy(logits, target, ignore_index, "bf16")
    if num_items_in_batch is not None:
        count = (target != ignore_index).sum()
        if torch.is_tensor(num_items_in_batch):
            num_items_in_batch = num_items_in_batch.to(loss.device)
        loss = loss * count / num_items_in_batch
    return loss


def apply(model, fp8=True, rms_norm=True, moe=True, loss=True):
    """Patch a transformers Qwen3-MoE model in place (see the module's
    docstring); returns the model. Counts what it patched in
    model._lingen_patched."""
    n = {"rms_norm": 0, "moe": 0, "loss": 0}
    for mod in model.modules():
        name = type(mod).__name__
        if rms_norm and name in _RMSNORM:
            mod.forward = types.MethodType(_rms_forward, mod)
            n["rms_norm"] += 1
        elif moe and name in _MOE:
            mod._lingen_fp8 = bool(fp8)
            mod.forward = types.MethodType(_moe_forward, mod)
            if type(mod.gate).__name__ in _ROUTER:
                mod.gate.forward = types.MethodType(_router_forward, mod.gate)
            n["moe"] += 1
    if loss and hasattr(type(model), "loss_function"):
        model.loss_function = causal_lm_loss
        n["loss"] = 1
    if not n["moe"] and not n["rms_norm"]:
        raise TypeError(f"lingen.hf.apply: {type(model).__name__} has no Qwen3-MoE RMSNorm or "
                        "MoE block to patch")
    model._lingen_patched = n
    return model


def apply_to_qwen3_moe(fp8=True, rms_norm=True, moe=True, loss=True):
    """Patch transformers' Qwen3-MoE classes, so that every model made
    afterwards runs lingen's kernels (as Liger's apply_liger_kernel_to_*)."""
    from transformers.models.qwen3_moe import modeling_qwen3_moe as m
    if rms_norm:
        m.Qwen3MoeRMSNorm.forward = _rms_forward
    if moe:
        m.Qwen3MoeSparseMoeBlock._lingen_fp8 = bool(fp8)
        m.Qwen3MoeSparseMoeBlock.forward = _moe_forward
        m.Qwen3MoeTopKRouter.forward = _router_forward
    if loss:
        m.Qwen3MoeForCausalLM.loss_function = property(lambda self: causal_lm_loss,
                                                       lambda self, v: None)
