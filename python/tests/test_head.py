"""lingen.nn.linear_cross_entropy (the LM head and its loss in chunks of
tokens) on the CPU against torch's F.linear + F.cross_entropy in float64,
at odd shapes, chunk sizes and ignored tokens; and lingen.nn.Model's fused
head against its unfused one. The GPU checks (lingen's kernel, peak
memory) are in test_gpu_head.py."""
import math

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import lingen.nn as ln  # noqa: E402
from reference import rel  # noqa: E402

IGNORE = -100


def _inputs(t, h, v, seed, dtype=torch.bfloat16, ignored=0.2, dead=None):
    """x [t, h], w [v, h] (logits of a few units, as a trained head's) and
    labels with about `ignored` of them ignore_index, all of rows `dead`."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, h, generator=g).to(dtype)
    w = (torch.randn(v, h, generator=g) * 2 / math.sqrt(h)).to(dtype)
    y = torch.randint(0, v, (t,), generator=g)
    y[torch.rand(t, generator=g) < ignored] = IGNORE
    if dead is not None:
        y[dead] = IGNORE
    return x, w, y


def _ours(x, w, y, scale=1.0, **kw):
    xa, wa = x.clone().requires_grad_(), w.clone().requires_grad_()
    loss = ln.linear_cross_entropy(xa, wa, y, **kw)
    (loss * scale).backward()
    return loss.detach(), xa.grad, wa.grad


def _reference(x, w, y, scale=1.0):
    """float64 F.linear + F.cross_entropy (mean over the rows not ignored)."""
    xr, wr = x.double().requires_grad_(), w.double().requires_grad_()
    loss = F.cross_entropy(F.linear(xr, wr), y, ignore_index=IGNORE)
    (loss * scale).backward()
    return loss.detach(), xr.grad, wr.grad


# (tokens, hidden, vocab, chunk): T not a multiple of the chunk, T = 1,
# vocabs off 128 (and off 8: rows off 16 bytes), a chunk of one token, a
# chunk larger than T, the default chunk
SHAPES = [(1, 64, 300, None), (37, 64, 300, 5), (37, 64, 300, 1), (130, 96, 1000, 128),
          (257, 64, 517, 64), (100, 32, 129, 1000), (300, 64, 777, None)]


@pytest.mark.parametrize("accumulate", ["fp32", "weight"])
@pytest.mark.parametrize("t,h,v,chunk", SHAPES)
def test_matches_torch_in_bf16(t, h, v, chunk, accumulate, seed):
    """bf16 bounds: the logits and their gradient are bf16 (as the unfused
    head's), each rounded to 2^-9 relative: a token's loss (lse - z_label)
    moves by at most 2^-8 max|z| (measured up to 0.62 of that over 20 seeds,
    at T = 1), dx and dW within 1.5e-2 of their norms (measured up to 4e-3,
    5.7e-3 with the "weight" accumulation, which rounds dW at every chunk)."""
    dead = slice(0, chunk) if chunk and chunk < t else None  # a chunk all ignored
    x, w, y = _inputs(t, h, v, seed, dead=dead)
    y[-1] = 3  # a token that counts (past the dead chunk; T = 1: the one token)
    loss, dx, dw = _ours(x, w, y, 1.7, mode="bf16", chunk=chunk, accumulate=accumulate)
    rl, rdx, rdw = _reference(x, w, y, 1.7)
    zmax = (x.double() @ w.double().t()).abs().max().item()
    assert loss.dtype == torch.float32 and dx.dtype == dw.dtype == torch.bfloat16
    assert abs(loss.item() - rl.item()) <= 2 ** -8 * zmax
    assert rel(dx, rdx) < 1.5e-2
    assert rel(dw, rdw) < 1.5e-2
    if dead is not None:
        assert not dx[dead].any()  # ignored tokens get no gradient


@pytest.mark.parametrize("chunk", [1, 7, 64, 500])
def test_chunking_is_exact_in_fp32(chunk, seed):
    """fp32 inputs: the chunks' sums are the whole batch's (no bf16 noise
    hides an error in the chunk bookkeeping)."""
    x, w, y = _inputs(200, 48, 333, seed, torch.float32, dead=slice(64, 128))
    loss, dx, dw = _ours(x, w, y, 0.5, mode="torch", chunk=chunk)
    rl, rdx, rdw = _reference(x, w, y, 0.5)
    assert abs(loss.item() - rl.item()) < 1e-5 * rl.item()
    assert rel(dx, rdx) < 1e-5 and rel(dw, rdw) < 1e-5


def test_every_token_ignored_gives_nan_and_zero_gradients(seed):
    """torch's mean over no rows: nan, and zero gradients."""
    x, w, y = _inputs(50, 32, 200, seed, ignored=1.0)
    loss, dx, dw = _ours(x, w, y, mode="bf16", chunk=16)
    assert math.isnan(loss.item()) and math.isnan(_reference(x, w, y)[0].item())
    assert not dx.any() and not dw.any()


def test_int32_labels_and_batched_shapes(seed):
    x, w, y = _inputs(60, 32, 150, seed)
    a = _ours(x, w, y, mode="bf16", chunk=16)
    b = ln.LinearCrossEntropyLoss(mode="bf16", chunk=16)(x.view(3, 20, 32), w,
                                                         y.int().view(3, 20))
    assert torch.equal(a[0], b)


def test_without_gradients_gives_the_loss(seed, monkeypatch):
    x, w, y = _inputs(40, 32, 150, seed)
    w.requires_grad_()
    with torch.no_grad(), monkeypatch.context() as m:  # an eval loss: no dx, no dW
        m.setattr(ln.head, "_dw_into", lambda *a: pytest.fail("dW made under no_grad"))
        m.setattr(ln.head.torch, "empty_like", lambda *a, **k: pytest.fail("dx made"))
        loss = ln.linear_cross_entropy(x, w, y, mode="bf16", chunk=16)
    w.requires_grad_(False)
    assert loss.item() == _ours(x, w, y, mode="bf16", chunk=16)[0].item()
    # a frozen weight: dx only
    xa = x.clone().requires_grad_()
    ln.linear_cross_entropy(xa, w, y, mode="bf16", chunk=16).backward()
    assert w.grad is None and rel(xa.grad, _reference(x, w, y)[1]) < 1.5e-2


def test_a_second_backward_is_refused(seed):
    """dx and dW are scaled in place by the first backward."""
    x, w, y = _inputs(20, 32, 100, seed)
    loss = ln.linear_cross_entropy(x, w.requires_grad_(), y, mode="bf16")
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()


def test_chunk_tokens():
    # Ling-mini's head: 8192 tokens of a 157184 vocab in 5 equal chunks of
    # at most ~512 MiB of bf16 logits
    c = ln.chunk_tokens(8192, 157184)
    assert c == 1664 and c % 128 == 0 and c * 157184 * 2 < 1.01 * ln.CHUNK_BYTES
    assert ln.chunk_tokens(300, 1000) == 300  # one chunk
    assert ln.chunk_tokens(8192, 157184, 2, 1 << 40) == 8192


def test_fp8_chunk_tokens():
    # the FP8 head's chunks: whole 128-token blocks within the logits budget,
    # the dgrad's last wave of 128 x 128 tiles as full as it gets
    from lingen.nn.head import fp8_chunk_tokens as f
    assert f(8192, 157184, 2048, 132) == 1024  # 8 x 16 tiles: 128 of 132, one wave
    for t, v, h, sms in [(8192, 157184, 2048, 132), (9973, 201088, 5120, 132),
                         (4096, 151936, 3584, 78), (8192, 157184, 7168, 114)]:
        c = f(t, v, h, sms)
        rows, cols = c // 128, -(-h // 128)
        assert c % 128 == 0 and c * v * 2 <= ln.CHUNK_BYTES
        fill = rows * cols / (-(-rows * cols // sms) * sms)
        for r in range(1, ln.CHUNK_BYTES // (v * 2 * 128) + 1):  # none fills it better
            assert r * cols / (-(-r * cols // sms) * sms) <= fill + 0.01
    assert f(300, 1000, 256, 132) == 384  # fewer tokens than a chunk: their blocks
    assert f(128, 128, 128, 132) == 128


@pytest.mark.parametrize("call,exc,match", [
    (lambda x, w, y: ln.linear_cross_entropy(x.float(), w, y), TypeError, "x.dtype"),
    (lambda x, w, y: ln.linear_cross_entropy(x, w, y[:-1]), ValueError, "labels.shape"),
    (lambda x, w, y: ln.linear_cross_entropy(x, w, y.float()), TypeError, "labels.dtype"),
    (lambda x, w, y: ln.linear_cross_entropy(x, w, y, chunk=0), ValueError, "chunk"),
    (lambda x, w, y: ln.linear_cross_entropy(x[:0], w, y[:0]), ValueError, "at least one"),
    (lambda x, w, y: ln.linear_cross_entropy(x, w, y, accumulate="bf16"), ValueError,
     "accumulate"),
    (lambda x, w, y: ln.linear_cross_entropy(x[:, :8], w, y), ValueError, "x.shape"),
])
def test_arguments_are_checked(call, exc, match):
    x, w, y = _inputs(10, 16, 50, 0)
    with pytest.raises(exc, match=match):
        call(x, w, y)


@pytest.mark.parametrize("mode", ["bf16", "torch"])
def test_model_fused_head_matches_unfused(mode, seed):
    """The same parameters, loss and gradients with and without the fused
    head (the head's gradient within bf16 rounding: the unfused one rounds
    dW once, as the fp32 accumulation does)."""
    cfg = ln.ModelConfig(hidden=128, layers=1, q_heads=2, kv_heads=1, head_dim=64, experts=4,
                         topk=2, expert_intermediate=64, shared_intermediate=64, vocab=1000)
    torch.manual_seed(seed)
    a = ln.Model(cfg, mode, fused_head=False)
    b = ln.Model(cfg, mode, fused_head=True, head_chunk=48)
    assert a.fused_head is False and b.fused_head is True
    assert not ln.Model(cfg, "bf16").fused_head and not ln.Model(cfg, "torch").fused_head  # opt-in
    b.load_state_dict(a.state_dict())
    ids = torch.randint(0, cfg.vocab, (2, 64))
    labels = ids.clone()
    labels[0, :10] = IGNORE
    la, lb = a(ids, labels), b(ids, labels)
    la.backward()
    lb.backward()
    assert abs(la.item() - lb.item()) < 1e-3 * la.item()
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert rel(q.grad, p.grad) < 1e-2, n
    assert torch.equal(a(ids), b(ids))  # no labels: the logits


def test_compiles_fullgraph_on_meta():
    """torch.compile (no graph break) of the GPU path through the fake
    kernels: the kernel's gradient then goes to a tensor of its own."""
    with torch.device("meta"):
        x = torch.randn(300, 128, dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(1000, 128, dtype=torch.bfloat16, requires_grad=True)
        y = torch.randint(0, 1000, (300,))
    torch._dynamo.reset()
    f = torch.compile(lambda a, b, c: ln.linear_cross_entropy(a, b, c, mode="bf16", chunk=64),
                      backend="aot_eager", fullgraph=True)
    loss = f(x, w, y)
    loss.backward()
    assert loss.shape == () and x.grad.shape == x.shape
    assert w.grad.shape == w.shape and w.grad.dtype == torch.bfloat16
