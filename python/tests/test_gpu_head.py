"""lingen.nn.linear_cross_entropy on the GPU (lingen's fused K9 kernel in
place over each chunk's logits, cuBLAS's GEMMs): against torch's F.linear +
F.cross_entropy on the GPU, captured in a CUDA graph, and its peak memory
against the unfused head (bf16 logits, then lingen's cross entropy).
Skipped without a GPU."""
import math

import pytest

from conftest import torch_cuda
from reference import rel

IGNORE = -100


def _inputs(torch, t, h, v, seed, ignored=0.2):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(t, h, generator=g, device="cuda").bfloat16()
    w = (torch.randn(v, h, generator=g, device="cuda") * 2 / math.sqrt(h)).bfloat16()
    y = torch.randint(0, v, (t,), generator=g, device="cuda")
    y[torch.rand(t, generator=g, device="cuda") < ignored] = IGNORE
    return x, w, y


def _grads(torch, fn, x, w, y, scale=1.0, dtype=None):
    """(loss, dx, dw) of fn(x, w, y) * scale, x and w cast to dtype."""
    xa = x.to(dtype or x.dtype, copy=True).requires_grad_()
    wa = w.to(dtype or w.dtype, copy=True).requires_grad_()
    loss = fn(xa, wa, y)
    (loss * scale).backward()
    return loss.detach(), xa.grad, wa.grad


# vocabs off 128 and off 8 (the kernel's unaligned rows), T off the chunk
@pytest.mark.parametrize("t,h,v,chunk", [(1000, 256, 5003, 256), (777, 128, 4096, 100),
                                         (1, 64, 1000, None), (512, 256, 32000, None)])
@pytest.mark.parametrize("accumulate", ["fp32", "weight"])
def test_matches_torch_on_the_gpu(t, h, v, chunk, accumulate, seed):
    """Bounds as test_head.py's (bf16 logits and gradients)."""
    torch = torch_cuda()
    import torch.nn.functional as F
    import lingen.nn as ln
    x, w, y = _inputs(torch, t, h, v, seed)
    y[0] = 1
    if chunk and chunk < t:
        y[chunk:2 * chunk] = IGNORE  # a chunk all ignored
    loss, dx, dw = _grads(torch, lambda a, b, c: ln.linear_cross_entropy(
        a, b, c, mode="bf16", chunk=chunk, accumulate=accumulate), x, w, y, 1.7)
    rl, rdx, rdw = _grads(torch, lambda a, b, c: F.cross_entropy(
        F.linear(a, b), c, ignore_index=IGNORE), x, w, y, 1.7, torch.float64)
    zmax = (x.double() @ w.double().t()).abs().max().item()
    assert abs(loss.item() - rl.item()) <= 2 ** -8 * zmax
    assert dx.dtype == dw.dtype == torch.bfloat16
    assert rel(dx, rdx) < 1.5e-2 and rel(dw, rdw) < 1.5e-2
    # the lingen kernel and the plain-torch form of the same chunks agree
    pl, pdx, pdw = _grads(torch, lambda a, b, c: ln.linear_cross_entropy(
        a, b, c, mode="torch", chunk=chunk, accumulate=accumulate), x, w, y, 1.7)
    assert abs(loss.item() - pl.item()) < 1e-5 * pl.item()
    assert rel(dx, pdx) < 5e-3 and rel(dw, pdw) < 5e-3


def test_every_token_ignored_on_the_gpu(seed):
    torch = torch_cuda()
    import lingen.nn as ln
    x, w, y = _inputs(torch, 300, 128, 1000, seed, ignored=1.0)
    loss, dx, dw = _grads(torch, lambda a, b, c: ln.linear_cross_entropy(
        a, b, c.int(), mode="bf16", chunk=64), x, w, y)
    assert math.isnan(loss.item()) and not dx.any() and not dw.any()


def test_replays_as_a_cuda_graph(seed):
    """No host sync: forward and backward captured, replayed on new data."""
    torch = torch_cuda()
    import lingen.nn as ln
    x, w, y = _inputs(torch, 600, 128, 3000, seed)
    xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
    ys = y.clone()

    def step():
        xs.grad = ws.grad = None
        loss = ln.linear_cross_entropy(xs, ws, ys, mode="bf16", chunk=128)
        loss.backward()
        return loss.detach()

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
        gx, gw = xs.grad, ws.grad
    x2, w2, y2 = _inputs(torch, 600, 128, 3000, seed + 1)
    with torch.no_grad():
        xs.copy_(x2), ws.copy_(w2), ys.copy_(y2)
    graph.replay()
    loss, dx, dw = _grads(torch, lambda a, b, c: ln.linear_cross_entropy(
        a, b, c, mode="bf16", chunk=128), x2, w2, y2)
    assert abs(out.item() - loss.item()) < 1e-6 * loss.item()
    assert rel(gx, dx) < 1e-3 and rel(gw, dw) < 1e-3


def _peak(torch, fn):
    """Bytes allocated at the peak of fn() beyond what was allocated before."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def test_peak_memory_is_below_the_unfused_head_by_the_logits(seed):
    """The unfused head holds the [T, V] bf16 logits from its forward to its
    backward (and their gradient); the fused one at most a chunk of them
    (plus dW's fp32 accumulator, 2x the bf16 dW)."""
    torch = torch_cuda()
    import torch.nn.functional as F
    import lingen.nn as ln
    t, h, v = 4096, 1024, 32768
    x, w, y = _inputs(torch, t, h, v, seed)
    logits_bytes = t * v * 2

    def run(fn):
        xa, wa = x.clone().requires_grad_(), w.clone().requires_grad_()

        def go():
            xa.grad = wa.grad = None
            fn(xa, wa, y).backward()
        go()  # once before: cuBLAS's workspaces and lingen's kernels are not the head's
        peak = _peak(torch, go)
        return peak, xa.grad, wa.grad

    unfused, ux, uw = run(lambda a, b, c: ln.cross_entropy(F.linear(a, b), c, mode="bf16"))
    fused, fx, fw = run(lambda a, b, c: ln.linear_cross_entropy(a, b, c, mode="bf16",
                                                                chunk=512))
    print(f"peak beyond the inputs: unfused {unfused / 2**20:.0f} MiB, fused (chunk 512) "
          f"{fused / 2**20:.0f} MiB, logits {logits_bytes / 2**20:.0f} MiB")
    assert fused <= unfused - 0.75 * logits_bytes
    assert rel(fx, ux) < 1e-2 and rel(fw, uw) < 1e-2


@pytest.mark.parametrize("mode", ["fp8", "bf16"])
def test_model_fused_head_matches_unfused_on_the_gpu(mode, seed):
    torch = torch_cuda()
    import lingen.nn as ln
    cfg = ln.ModelConfig(hidden=256, layers=1, q_heads=2, kv_heads=1, head_dim=128, experts=8,
                         topk=2, expert_intermediate=128, shared_intermediate=128, vocab=3001)
    torch.manual_seed(seed)
    a = ln.Model(cfg, mode, fused_head=False).cuda()
    b = ln.Model(cfg, mode, head_chunk=100).cuda()
    b.load_state_dict(a.state_dict())
    ids = torch.randint(0, cfg.vocab, (2, 128), device="cuda")
    la, lb = a(ids, ids), b(ids, ids)
    la.backward()
    lb.backward()
    assert abs(la.item() - lb.item()) < 1e-3 * la.item()
    # the same kernels upstream: only the head's rounding differs (fp8: its
    # noise reaches the rest through dx)
    lim = 1e-2 if mode == "bf16" else 0.1
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert rel(q.grad, p.grad) < (2 * lim if n.endswith("router") else lim), n
