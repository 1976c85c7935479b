"""lingen.optim.AdamW on the CPU (CI): the same math as torch.optim.AdamW,
several steps, weight decay, bf16 moments, refusals, state_dict round trips.
The CUDA path (the generated adamw kernel) is python/tests/test_gpu_optim.py."""
import copy

import pytest

torch = pytest.importorskip("torch")
import lingen.optim  # noqa: E402


def _model(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=g))
            for shape in [(37, 19), (1000,), (3, 5, 7), (1,)]]


def _grads(params, step):
    g = torch.Generator().manual_seed(100 + step)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g)


def _run(opt_cls, params, steps, **kw):
    opt = opt_cls(params, **kw)
    for s in range(steps):
        _grads(params, s)
        opt.step()
    return opt


@pytest.mark.parametrize("kw", [dict(lr=1e-2), dict(lr=3e-3, weight_decay=0.1),
                                dict(lr=1e-3, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.0),
                                dict(lr=1e-2, betas=(0.3, 0.9))])
def test_matches_torch(kw):
    ours, ref = _model(), _model()
    _run(lingen.optim.AdamW, ours, 7, **kw)
    _run(torch.optim.AdamW, ref, 7, **kw)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_bf16_moments():
    ours, ref = _model(), _model()
    opt = _run(lingen.optim.AdamW, ours, 5, lr=1e-2, moments="bf16")
    _run(torch.optim.AdamW, ref, 5, lr=1e-2)
    for p in ours:
        assert opt.state[p]["exp_avg"].dtype == torch.bfloat16
        assert opt.state[p]["exp_avg_sq"].dtype == torch.bfloat16
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-3)


def test_param_groups_and_lr_tensor():
    ours, ref = _model(), _model()
    groups = lambda ps: [{"params": ps[:2], "weight_decay": 0.1},  # noqa: E731
                         {"params": ps[2:], "lr": 5e-3, "weight_decay": 0.0}]
    a = lingen.optim.AdamW(groups(ours), lr=1e-2)
    b = torch.optim.AdamW(groups(ref), lr=1e-2)
    for s in range(4):
        _grads(ours, s), _grads(ref, s)
        a.step(), b.step()
    for x, y in zip(ours, ref):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_refusals():
    with pytest.raises(ValueError, match="amsgrad"):
        lingen.optim.AdamW(_model(), amsgrad=True)
    with pytest.raises(ValueError, match="maximize"):
        lingen.optim.AdamW(_model(), maximize=True)
    with pytest.raises(ValueError, match="moments"):
        lingen.optim.AdamW(_model(), moments="fp16")
    with pytest.raises(ValueError, match="betas"):
        lingen.optim.AdamW(_model(), betas=(1.0, 0.9))


def test_state_dict_round_trip():
    # torch -> lingen: 3 steps in torch, then 3 more in each, loaded from torch's state.
    ref = _model()
    topt = _run(torch.optim.AdamW, ref, 3, lr=1e-2, weight_decay=0.05)
    ours = [torch.nn.Parameter(p.detach().clone()) for p in ref]
    lopt = lingen.optim.AdamW(ours, lr=1e-2, weight_decay=0.05)
    lopt.load_state_dict(copy.deepcopy(topt.state_dict()))
    assert lopt.param_groups[0].keys() == topt.param_groups[0].keys()
    for s in range(3, 6):
        _grads(ours, s), _grads(ref, s)
        lopt.step(), topt.step()
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    # lingen -> torch: the state dict loads into torch.optim.AdamW as is.
    sd = copy.deepcopy(lopt.state_dict())
    back = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    t2 = torch.optim.AdamW(back, lr=1e-2, weight_decay=0.05)
    t2.load_state_dict(sd)
    for k in ("exp_avg", "exp_avg_sq", "step"):
        for p, q in zip(ours, back):
            torch.testing.assert_close(lopt.state[p][k], t2.state[q][k], rtol=0, atol=0)
