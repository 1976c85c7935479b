"""lingen.optim.AdamW on the GPU (the generated adamw kernel) against
torch.optim.AdamW and against its own CPU path (torch's math): several
steps, param groups with and without weight decay, odd sizes and a slice
that is not 16-byte aligned, bf16 gradients, bf16 moments; a CUDA graph of
step() replayed with new gradients and a new learning rate gives the eager
result; a torch state_dict loads and the steps go on alike.
Skipped without torch or a GPU."""
import copy

import pytest

from conftest import torch_cuda


def _params(torch, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(37, 19), (8193,), (3, 5, 7), (1,), (2048, 33), (20000,)]
    ps = [torch.randn(s, generator=g) for s in shapes]
    out = [torch.nn.Parameter(p.to(device)) for p in ps]
    # a start not 16-byte aligned (12 bytes past the allocation): the element path
    out.append(torch.nn.Parameter(torch.randn(4099, generator=g).to(device)[3:]))
    return out


def _grads(torch, params, step, dtype=None):
    g = torch.Generator().manual_seed(100 + step)
    for p in params:
        x = torch.randn(p.shape, generator=g).to(p.device)
        if dtype is not None and dtype != p.dtype and hasattr(p, "grad_dtype"):
            p.grad_dtype = None  # torch >= 2.11 refuses another gradient dtype unless told
        p.grad = x.to(dtype) if dtype is not None else x


def _steps(torch, opt, params, n, dtype=None):
    for s in range(n):
        _grads(torch, params, s, dtype)
        opt.step()


def _groups(params):
    return [{"params": params[:3], "weight_decay": 0.1},
            {"params": params[3:], "lr": 3e-3, "weight_decay": 0.0}]


@pytest.mark.parametrize("kw", [dict(lr=1e-3), dict(lr=1e-2, betas=(0.8, 0.95), eps=1e-6)])
def test_against_torch(kw):
    torch = torch_cuda()
    import lingen.optim
    ours, ref, cpu = _params(torch, "cuda"), _params(torch, "cuda"), _params(torch, "cpu")
    _steps(torch, lingen.optim.AdamW(_groups(ours), **kw), ours, 5)
    _steps(torch, torch.optim.AdamW(_groups(ref), **kw), ref, 5)
    _steps(torch, lingen.optim.AdamW(_groups(cpu), **kw), cpu, 5)
    for a, b, c in zip(ours, ref, cpu):
        # torch's CUDA AdamW contracts and divides by reciprocals: a few fp32 ulps
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(a.cpu(), c, rtol=1e-5, atol=1e-6)


def test_bf16():
    torch = torch_cuda()
    import lingen.optim
    ours, ref = _params(torch, "cuda"), _params(torch, "cuda")
    opt = lingen.optim.AdamW(ours, lr=1e-3, moments="bf16")
    _steps(torch, opt, ours, 4, torch.bfloat16)
    # torch's AdamW takes no bf16 gradient of an fp32 parameter: the same values widened
    ropt = torch.optim.AdamW(ref, lr=1e-3)
    for s in range(4):
        _grads(torch, ref, s, torch.bfloat16)
        for p in ref:
            p.grad = p.grad.float()
        ropt.step()
    for p in ours:
        assert opt.state[p]["exp_avg"].dtype == torch.bfloat16
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=2e-4)


def test_graph_replay():
    torch = torch_cuda()
    import lingen.optim
    ours, eager = _params(torch, "cuda"), _params(torch, "cuda")
    lr = torch.tensor(1e-3, device="cuda")
    opt = lingen.optim.AdamW(ours, lr=lr, weight_decay=0.05)
    ref = lingen.optim.AdamW(eager, lr=1e-3, weight_decay=0.05)
    grads = [torch.zeros_like(p) for p in ours]
    for p, g in zip(ours, grads):
        p.grad = g
    _steps(torch, ref, eager, 1)
    _grads(torch, ours, 0)
    for p, g in zip(ours, grads):
        g.copy_(p.grad)
        p.grad = g
    opt.step()  # the state and the table made outside the graph
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s), torch.cuda.graph(graph, stream=s):
        opt.step()
    torch.cuda.current_stream().wait_stream(s)
    for step in range(1, 4):
        rate = 1e-3 / (step + 1)
        ref.param_groups[0]["lr"] = rate
        _steps_one(torch, ref, eager, step)
        _grads(torch, ours, step)
        for p, g in zip(ours, grads):
            g.copy_(p.grad)
            p.grad = g
        lr.fill_(rate)
        graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(ours, eager):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def _steps_one(torch, opt, params, step):
    _grads(torch, params, step)
    opt.step()


def test_load_torch_state():
    torch = torch_cuda()
    import lingen.optim
    ref = _params(torch, "cuda")
    topt = torch.optim.AdamW(ref, lr=1e-3, weight_decay=0.02)
    _steps(torch, topt, ref, 3)
    ours = [torch.nn.Parameter(p.detach().clone()) for p in ref]
    lopt = lingen.optim.AdamW(ours, lr=1e-3, weight_decay=0.02)
    lopt.load_state_dict(copy.deepcopy(topt.state_dict()))
    for s in range(3, 6):
        _steps_one(torch, topt, ref, s)
        _steps_one(torch, lopt, ours, s)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert float(lopt.state[ours[0]]["step"]) == 6.0


def test_bf16_parameters():
    """bf16 parameters and gradients (a bf16 model's own weights), fp32
    moments: one step is torch.optim.AdamW on an fp32 copy rounded to
    nearest even (within one bf16 step where the two fp32 results straddle
    a rounding boundary, a few in 10^4); five steps stay within bf16's
    rounding of torch's fused AdamW on the bf16 parameters."""
    torch = torch_cuda()
    import lingen.optim
    base = [p.detach().to(torch.bfloat16) for p in _params(torch, "cuda")]
    ours = [torch.nn.Parameter(b.clone()) for b in base]
    f32 = [torch.nn.Parameter(b.float()) for b in base]
    opt = lingen.optim.AdamW(ours, lr=1e-2, weight_decay=0.1)
    ref = torch.optim.AdamW(f32, lr=1e-2, weight_decay=0.1)
    _grads(torch, ours, 0, torch.bfloat16)
    for p, q in zip(f32, ours):
        p.grad = q.grad.float()
    opt.step()
    ref.step()
    for p, q in zip(ours, f32):
        assert p.dtype == torch.bfloat16
        r = q.to(torch.bfloat16)
        off = (p != r).sum().item()
        assert off <= 1e-3 * p.numel() + 1, off
        assert ((p.float() - r.float()).abs() <= 2 ** -7 * r.float().abs()).all()
    fused = [torch.nn.Parameter(b.clone()) for b in base]
    ours = [torch.nn.Parameter(b.clone()) for b in base]
    _steps(torch, lingen.optim.AdamW(ours, lr=1e-2), ours, 5, torch.bfloat16)
    _steps(torch, torch.optim.AdamW(fused, lr=1e-2, fused=True), fused, 5, torch.bfloat16)
    for p, q in zip(ours, fused):
        d = (p.float() - q.float()).abs().max().item()
        assert d <= 4 * 2 ** -8 * q.float().abs().max().item(), d
