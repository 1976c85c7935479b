"""lingen.nn refuses what it cannot run where it is given: each
constructor (or the first call) names the argument, what it found and
what is allowed; no mode or score string is taken for another; a model
config file with an unknown key, a wrong type or a missing size is refused
rather than filled in. CPU only, tiny shapes."""
import json

import pytest

torch = pytest.importorskip("torch")
import lingen.nn as ln  # noqa: E402

CONFIG = dict(hidden=256, layers=1, q_heads=2, kv_heads=1, head_dim=128, experts=8, topk=2,
              expert_intermediate=128, shared_experts=1, shared_intermediate=128, vocab=512)
MOE = dict(hidden=256, experts=8, top_k=2, intermediate=128, shared_intermediate=128)

BAD_CTORS = [
    ("Fp8Linear 144", lambda: ln.Fp8Linear(144, 256), "in_features", "multiple of 128"),
    ("Fp8Linear 0", lambda: ln.Fp8Linear(256, 0), "out_features", "at least 1"),
    ("MoE intermediate 100", lambda: ln.MoE(**dict(MOE, intermediate=100)), "intermediate",
     "multiple of 128"),
    ("MoE bf16 intermediate 100", lambda: ln.MoE(**dict(MOE, intermediate=100), mode="bf16"),
     "intermediate", "multiple of 8"),
    ("MoE hidden 200", lambda: ln.MoE(**dict(MOE, hidden=200)), "hidden", "multiple of 128"),
    ("MoE shared 100", lambda: ln.MoE(**dict(MOE, shared_intermediate=100)),
     "shared_intermediate", "multiple of 128"),
    ("MoE top_k > experts", lambda: ln.MoE(**dict(MOE, top_k=9)), "top_k", "from 1 to 8"),
    ("MoE 0 experts", lambda: ln.MoE(**dict(MOE, experts=0)), "experts", "at least 1"),
    ("MoE groups 3", lambda: ln.MoE(**MOE, groups=3), "groups", "divisor of experts"),
    ("MoE topk_groups", lambda: ln.MoE(**MOE, groups=2, topk_groups=3), "topk_groups",
     "from 1 to 2"),
    ("MoE top_k over groups", lambda: ln.MoE(**dict(MOE, top_k=3), groups=4, topk_groups=1),
     "top_k", "at most topk_groups"),
    ("MoE int dtype", lambda: ln.MoE(**MOE, dtype=torch.int32), "dtype", "floating"),
    ("RMSNorm eps", lambda: ln.RMSNorm(256, eps=0), "eps", "above 0"),
    ("Attention heads", lambda: ln.Attention(256, 3, 2, 128), "q_heads", "multiple of kv_heads"),
    ("Attention fp8 o", lambda: ln.Attention(256, 1, 1, 64), "in_features", "multiple of 128"),
    ("CrossEntropyLoss index", lambda: ln.CrossEntropyLoss(ignore_index=1.5), "ignore_index",
     "an int"),
]


@pytest.mark.parametrize("make,name,allowed", [c[1:] for c in BAD_CTORS],
                         ids=[c[0] for c in BAD_CTORS])
def test_constructors_refuse_with_the_argument_and_allowed_values(make, name, allowed):
    with pytest.raises((ValueError, TypeError)) as e:
        make()
    assert f" {name}: found " in str(e.value) and allowed in str(e.value), str(e.value)


MODE_STRINGS = ["FP8", "bogus", "", None, "Torch"]


@pytest.mark.parametrize("mode", MODE_STRINGS)
@pytest.mark.parametrize("make", [lambda m: ln.MoE(**MOE, mode=m),
                                  lambda m: ln.RMSNorm(256, mode=m),
                                  lambda m: ln.CrossEntropyLoss(mode=m),
                                  lambda m: ln.Attention(256, 2, 1, 128, mode=m),
                                  lambda m: ln.Model(ln.ModelConfig(**CONFIG), m)],
                         ids=["MoE", "RMSNorm", "CrossEntropyLoss", "Attention", "Model"])
def test_no_mode_string_taken_for_another(make, mode):
    with pytest.raises(ValueError, match=r"mode: found .*allowed: one of 'fp8', 'bf16', 'torch'"):
        make(mode)


def test_no_score_string_taken_for_another():
    with pytest.raises(ValueError, match="score: found 'bogus'"):
        ln.MoE(**MOE, score="bogus")
    with pytest.raises(ValueError, match="score: found 'Softmax'"):
        ln.route(torch.zeros(3, 8), 2, score="Softmax")
    with pytest.raises(ValueError, match="score"):
        ln.ModelConfig(**CONFIG, score="bogus")


def test_forward_refuses_wrong_width_and_dtype():
    with pytest.raises(ValueError, match=r"RMSNorm: x.shape: found \(4, 128\)"):
        ln.RMSNorm(256)(torch.randn(4, 128).bfloat16())
    with pytest.raises(TypeError, match="RMSNorm: x.dtype: found torch.int32"):
        ln.RMSNorm(256)(torch.ones(4, 256, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"MoE: x.shape: found \(4, 128\)"):
        ln.MoE(**MOE)(torch.randn(4, 128).bfloat16())
    with pytest.raises(ValueError, match=r"Fp8Linear: x.shape"):
        ln.Fp8Linear(256, 128)(torch.randn(4, 384).bfloat16())


def test_float32_moe_has_float32_shared_expert(seed):
    torch.manual_seed(seed)
    moe = ln.MoE(**MOE, mode="torch", dtype=torch.float32)
    assert {p.dtype for p in moe.parameters()} == {torch.float32}
    y = moe(torch.randn(5, 256))
    assert y.shape == (5, 256) and y.dtype == torch.float32


def test_cross_entropy_labels(seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(6, 32, generator=g)
    labels = torch.randint(0, 32, (6,), generator=g)
    ref = torch.nn.functional.cross_entropy(logits, labels)
    for mode in ("fp8", "torch"):
        loss = ln.CrossEntropyLoss(mode=mode)(logits, labels.int())
        assert torch.allclose(loss, ref)
    with pytest.raises(TypeError, match="labels.dtype: found torch.float32"):
        ln.cross_entropy(logits, labels.float())
    with pytest.raises(ValueError, match="labels.shape"):
        ln.cross_entropy(logits, labels[:5])


def write(tmp_path, d):
    p = tmp_path / "model.json"
    p.write_text(json.dumps(d))
    return str(p)


def test_config_file_refuses_unknown_keys_and_missing_sizes(tmp_path):
    with pytest.raises(ValueError, match=r"key: found 'hidden_size'"):
        ln.ModelConfig.from_json(write(tmp_path, {"hidden_size": 512, "num_experts": 4}))
    with pytest.raises(ValueError, match=r"key: found 'foo'"):
        ln.ModelConfig.from_json(write(tmp_path, dict(CONFIG, foo=1)))
    with pytest.raises(ValueError, match="missing experts"):
        ln.ModelConfig.from_json(write(tmp_path, {k: v for k, v in CONFIG.items()
                                                  if k != "experts"}))
    with pytest.raises(TypeError, match="override: found 'hiden'"):
        ln.ModelConfig.from_json(write(tmp_path, CONFIG), hiden=256)
    with pytest.raises(ValueError, match="JSON object"):
        ln.ModelConfig.from_json(write(tmp_path, [1, 2]))


@pytest.mark.parametrize("key,value", [("hidden", "256"), ("layers", 1.0), ("experts", True),
                                       ("eps", "1e-6"), ("expert_bias", 1), ("layers", 0),
                                       ("layers", -1), ("topk", 9), ("rotary_fraction", 1.5)])
def test_config_refuses_wrong_types_and_ranges(tmp_path, key, value):
    with pytest.raises((TypeError, ValueError), match=f"{key}: found {value!r}"):
        ln.ModelConfig.from_json(write(tmp_path, dict(CONFIG, **{key: value})))


def test_shipped_configs_still_load():
    import glob
    import os
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = glob.glob(os.path.join(root, "configs", "models", "*.json"))
    assert paths
    for p in paths:
        cfg = ln.ModelConfig.from_json(p, layers=1)
        with open(p) as f:
            d = json.load(f)
        assert (cfg.hidden, cfg.experts, cfg.topk) == (d["hidden"], d["experts"], d["topk"])
