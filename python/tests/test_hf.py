"""lingen.hf.apply on a tiny transformers Qwen3-MoE model: the patched
model's logits, loss and gradients against the unpatched one's (bf16
tolerance with fp8=False, the blockwise FP8 recipe's with fp8=True), the
state dict unchanged. The patched router's logits are fp32 (lingen's
router GEMM; transformers' are bf16): a near tie then picks another expert
for a token, hence the tolerances on the logits and the routers' gradients
above bf16's rounding; the loss is held tight. On the CPU (the layers' torch forms) and, when there
is one, on the GPU (lingen's kernels). Skips without transformers."""
import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", reason="transformers is not installed "
                                   "(pip install '.[hf]')")
qwen3 = pytest.importorskip("transformers.models.qwen3_moe")
import lingen.hf  # noqa: E402
from reference import rel  # noqa: E402


def tiny(seed, device="cpu"):
    cfg = qwen3.Qwen3MoeConfig(vocab_size=512, hidden_size=256, intermediate_size=256,
                               moe_intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=2, num_key_value_heads=1, head_dim=128,
                               num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
                               max_position_embeddings=256, decoder_sparse_step=1,
                               mlp_only_layers=[], output_router_logits=False)
    torch.manual_seed(seed)
    m = qwen3.Qwen3MoeForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
    for p in m.parameters():  # transformers initialises the router to zeros: all ties
        if p.dim() >= 2:
            torch.nn.init.normal_(p, std=0.05)
    return m


def compare_once(fp8, seed, device, tol_out, tol_loss, tol_grad):
    """None if logits, loss and gradients hold their bounds at seed, else
    what did not."""
    ref = tiny(seed, device)
    pat = lingen.hf.apply(copy.deepcopy(ref), fp8=fp8)
    assert pat._lingen_patched == {"rms_norm": 2 * 4 + 1, "moe": 2, "loss": 1}
    assert list(pat.state_dict()) == list(ref.state_dict())
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 512, (2, 64), generator=g).to(device)
    out_r = ref(input_ids=ids, labels=ids)
    out_p = pat(input_ids=ids, labels=ids)
    assert out_p.logits.shape == out_r.logits.shape
    if rel(out_p.logits, out_r.logits) >= tol_out:
        return f"seed {seed}: logits {rel(out_p.logits, out_r.logits):.3g}"
    if abs(out_p.loss.item() - out_r.loss.item()) >= tol_loss * out_r.loss.item():
        return f"seed {seed}: loss {out_p.loss.item()} vs {out_r.loss.item()}"
    out_r.loss.backward()
    out_p.loss.backward()
    errs = {n: rel(p.grad, q.grad)
            for (n, p), (_, q) in zip(pat.named_parameters(), ref.named_parameters())}
    # a near-tied expert flipping for a token moves every gradient upstream of its
    # MoE block: 4 in 5 gradients within tol_grad, every one within 4x
    within = sum(e < tol_grad for e in errs.values()) / len(errs)
    worst = max(errs, key=errs.get)
    if within < 0.8 or errs[worst] >= 4 * tol_grad:
        return f"seed {seed}: {within:.0%} of gradients within {tol_grad}, worst {worst} " \
               f"{errs[worst]:.3g}"
    return None


def compare(fp8, seed, device, tol_out, tol_loss, tol_grad, tries=4):
    """The bounds held at one of `tries` seeds from seed on. The tiny
    model's bf16 router logits (transformers') tie often enough that one
    seed in about four flips an expert for some token at layer 0, which
    moves most gradients (measured on the CPU: 1 of 4 runs); a patch that
    computes anything else wrong fails at every seed."""
    why = []
    for s in range(seed, seed + tries):
        w = compare_once(fp8, s, device, tol_out, tol_loss, tol_grad)
        if w is None:
            return
        print(w)
        why.append(w)
    pytest.fail("; ".join(why))


def test_state_dict_and_patch_counts():
    m = tiny(0)
    keys = list(m.state_dict())
    lingen.hf.apply(m, fp8=True)
    assert list(m.state_dict()) == keys
    assert "model.layers.0.mlp.experts.gate_up_proj" in keys
    with pytest.raises(TypeError, match="no Qwen3-MoE"):
        lingen.hf.apply(torch.nn.Linear(2, 2))


def test_bf16_patch_matches_transformers_on_cpu(seed):
    compare(False, seed, "cpu", 0.1, 0.002, 0.1)


def test_fp8_patch_matches_transformers_on_cpu(seed):
    compare(True, seed, "cpu", 0.2, 0.005, 0.3)


def test_patched_on_gpu(seed):
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    compare(False, seed, "cuda", 0.1, 0.002, 0.1)
    compare(True, seed, "cuda", 0.2, 0.005, 0.3)
