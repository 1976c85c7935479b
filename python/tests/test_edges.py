"""Edge cases of lingen.nn and lingen.hf on the CPU: no tokens at all
(an empty result, as torch's layers and transformers' block give, with a
backward), and a patched Hugging Face model still giving every output the
unpatched one gives (router logits, the load-balancing loss, hidden
states). Skips the transformers parts without transformers."""
import copy

import pytest

torch = pytest.importorskip("torch")
import lingen.nn as ln  # noqa: E402

MOE = dict(hidden=256, experts=8, top_k=2, intermediate=128, shared_intermediate=128)


@pytest.mark.parametrize("mode", ["fp8", "bf16", "torch"])
@pytest.mark.parametrize("shape", [(0, 256), (2, 0, 256), (0, 3, 256)])
def test_moe_no_tokens_gives_empty_result(mode, shape):
    moe = ln.MoE(**MOE, mode=mode)
    x = torch.zeros(shape, dtype=torch.bfloat16, requires_grad=True)
    y = moe(x)
    assert y.shape == shape and y.dtype == torch.bfloat16
    y.float().sum().backward()
    assert x.grad.shape == shape
    assert all(p.grad is None or not p.grad.any() for p in moe.parameters())


@pytest.mark.parametrize("fp8", [True, False])
def test_routed_experts_no_tokens(fp8):
    w1, w2 = torch.randn(4, 256, 128).bfloat16(), torch.randn(4, 128, 128).bfloat16()
    out = ln.routed_experts(torch.zeros(0, 128).bfloat16(), torch.zeros(0, 2, dtype=torch.int32),
                            torch.zeros(0, 4), w1, w2, 4, 2, fp8)
    assert out.shape == (0, 128)


def _hf():
    pytest.importorskip("transformers", reason="transformers is not installed (pip install "
                        "'.[hf]')")
    qwen3 = pytest.importorskip("transformers.models.qwen3_moe")
    import lingen.hf
    return qwen3, lingen.hf


def tiny(qwen3, seed):
    cfg = qwen3.Qwen3MoeConfig(vocab_size=512, hidden_size=256, intermediate_size=256,
                               moe_intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=2, num_key_value_heads=1, head_dim=128,
                               num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
                               max_position_embeddings=256, decoder_sparse_step=1,
                               mlp_only_layers=[], router_aux_loss_coef=0.01)
    torch.manual_seed(seed)
    m = qwen3.Qwen3MoeForCausalLM(cfg).to(dtype=torch.bfloat16)
    for p in m.parameters():
        if p.dim() >= 2:
            torch.nn.init.normal_(p, std=0.05)
    return m


@pytest.mark.parametrize("fp8", [True, False])
def test_patched_block_no_tokens(fp8):
    qwen3, hf = _hf()
    ref = tiny(qwen3, 0)
    block = ref.model.layers[0].mlp
    x = torch.zeros(1, 0, 256, dtype=torch.bfloat16)
    assert block(x).shape == (1, 0, 256)
    pat = hf.apply(copy.deepcopy(ref), fp8=fp8)
    y = pat.model.layers[0].mlp(x)
    assert y.shape == (1, 0, 256) and y.dtype == torch.bfloat16


def test_patched_model_gives_router_logits_and_aux_loss(seed):
    qwen3, hf = _hf()
    ref = tiny(qwen3, seed)
    pat = hf.apply(copy.deepcopy(ref), fp8=False)
    ids = torch.randint(0, 512, (2, 32), generator=torch.Generator().manual_seed(seed))
    kw = dict(labels=ids, output_router_logits=True, output_hidden_states=True)
    out_r, out_p = ref(ids, **kw), pat(ids, **kw)
    assert len(out_p.router_logits) == len(out_r.router_logits) == 2
    for a, b in zip(out_p.router_logits, out_r.router_logits):
        assert a.shape == b.shape == (64, 8) and torch.isfinite(a).all()
    # layer 0's routers see the same hidden states (bf16 rounding apart); a later
    # layer's follow the experts an earlier one chose, and a near tie picks another
    # for some token (transformers' bf16 router logits against lingen's fp32 ones)
    a, b = out_p.router_logits[0].float(), out_r.router_logits[0].float()
    assert torch.allclose(a, b, rtol=0.05, atol=0.05)
    assert out_p.aux_loss is not None
    assert abs(out_p.aux_loss.item() - out_r.aux_loss.item()) < 0.02 * out_r.aux_loss.item()
    assert len(out_p.hidden_states) == len(out_r.hidden_states)
    assert abs(out_p.loss.item() - out_r.loss.item()) < 0.005 * out_r.loss.item()
    out_p.loss.backward()
    assert pat.model.layers[0].mlp.gate.weight.grad.abs().sum() > 0
