"""lingen.nn on the GPU: lingen's kernels against the layers' plain-torch
forms (the CPU path, here run on the GPU's copy of the inputs), the FP8
model against plain PyTorch, torch.compile without graph breaks, a whole
training step captured as a CUDA graph, and lingen's FP8 GEMMs (when built)
against the seam's emulation. Skipped without a GPU."""
import pytest

from conftest import torch_cuda
from reference import rel

TINY = dict(hidden=256, layers=1, q_heads=2, kv_heads=1, head_dim=128, experts=8, topk=2,
            expert_intermediate=128, shared_intermediate=128, vocab=1024)


def _twins(make, seed):
    torch = torch_cuda()
    torch.manual_seed(seed)
    a = make().cuda()
    b = make()
    b.load_state_dict({k: v.cpu() for k, v in a.state_dict().items()})
    return a, b


@pytest.mark.parametrize("mode,tol", [("bf16", 0.02), ("fp8", 0.05)])
def test_moe_kernels_match_cpu_forms(mode, tol, seed):
    torch = torch_cuda()
    import lingen.nn as ln
    a, b = _twins(lambda: ln.MoE(256, 8, 2, 128, 128, mode=mode), seed)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(300, 256, generator=g).bfloat16()
    dy = torch.randn(300, 256, generator=g).bfloat16()
    xa = x.cuda().requires_grad_()
    xb = x.clone().requires_grad_()
    ya, yb = a(xa), b(xb)
    ya.backward(dy.cuda())
    yb.backward(dy)
    assert rel(ya, yb) < tol
    assert rel(xa.grad, xb.grad) < tol
    for n in ("w1", "w2", "router"):
        assert rel(getattr(a, n).grad, getattr(b, n).grad) < 2 * tol, n


def test_attention_kernels_match_plain_torch(seed):
    torch = torch_cuda()
    import lingen.nn as ln
    torch.manual_seed(seed)
    a = ln.Attention(256, 2, 1, 128, mode="bf16").cuda()
    b = ln.Attention(256, 2, 1, 128, mode="torch").cuda()
    b.load_state_dict(a.state_dict())
    with torch.no_grad():
        a.q_norm.uniform_(0.5, 1.5)
        b.q_norm.copy_(a.q_norm)
    x = torch.randn(2, 128, 256, device="cuda").bfloat16()
    freqs = ln.rope_freqs(128, 64, device="cuda")
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = a(xa, freqs), b(xb, freqs)
    dy = torch.randn_like(ya)
    ya.backward(dy)
    yb.backward(dy)
    assert rel(ya, yb) < 0.02 and rel(xa.grad, xb.grad) < 0.02
    assert rel(a.q_norm.grad, b.q_norm.grad) < 0.03
    assert rel(a.qkv.weight.grad, b.qkv.weight.grad) < 0.02


def test_cross_entropy_matches_torch(seed):
    torch = torch_cuda()
    import lingen.nn as ln
    g = torch.Generator(device="cuda").manual_seed(seed)
    logits = torch.randn(300, 1000, generator=g, device="cuda").bfloat16().requires_grad_()
    labels = torch.randint(0, 1000, (300,), generator=g, device="cuda")
    loss = ln.cross_entropy(logits, labels)
    ref = torch.nn.functional.cross_entropy(logits.float(), labels)
    assert abs(loss.item() - ref.item()) < 1e-3 * ref.item()
    (gl,) = torch.autograd.grad(loss, logits)
    (gr,) = torch.autograd.grad(ref, logits)
    assert rel(gl, gr) < 0.01


@pytest.mark.parametrize("mode", ["fp8", "bf16"])
def test_model_matches_plain_pytorch(mode, seed):
    torch = torch_cuda()
    import lingen.nn as ln
    cfg = ln.ModelConfig(**TINY)
    torch.manual_seed(seed)
    ref = ln.Model(cfg, "torch").cuda()
    m = ln.Model(cfg, mode).cuda()
    m.load_state_dict(ref.state_dict())
    ids = torch.randint(0, cfg.vocab, (2, 128), device="cuda")
    lr, lm = ref(ids, ids), m(ids, ids)
    tol = 0.01 if mode == "bf16" else 0.02
    assert abs(lm.item() - lr.item()) < tol * lr.item()
    lr.backward()
    lm.backward()
    for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
        lim = 0.05 if mode == "bf16" else 0.25
        assert rel(p.grad, q.grad) < (2 * lim if n.endswith("router") else lim), n


def test_fp8_moe_compiles_without_graph_breaks(seed):
    torch = torch_cuda()
    import lingen.nn as ln
    torch.manual_seed(seed)
    moe = ln.MoE(256, 8, 2, 128, 128, mode="fp8").cuda()
    x = torch.randn(256, 256, device="cuda").bfloat16()
    want = moe(x)
    torch._dynamo.reset()
    got = torch.compile(moe, backend="aot_eager", fullgraph=True)(x)
    from lingen.nn import _gemm
    _gemm.set_emulation(True)  # what a compiled graph runs (lingen's FP8 GEMM ops are eager-only)
    try:
        emulated = moe(x)
    finally:
        _gemm.set_emulation(False)
    assert rel(got, emulated) < 1e-6
    assert rel(got, want) < 0.01  # eager: lingen's FP8 GEMMs where built


def test_training_step_replays_as_a_cuda_graph(seed):
    torch = torch_cuda()
    import lingen.nn as ln
    cfg = ln.ModelConfig(**TINY)
    torch.manual_seed(seed)
    m = ln.Model(cfg, "fp8").cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=torch.tensor(1e-3, device="cuda"),
                            capturable=True)
    ids = torch.randint(0, cfg.vocab, (2, 128), device="cuda")

    def step():
        loss = m(ids, ids)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        return loss.detach()

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(s)
    snap = [p.detach().clone() for p in m.parameters()]
    state = [{k: v.clone() for k, v in st.items()} for st in opt.state.values()]
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step()
    eager = []
    for _ in range(2):
        g.replay()
        eager.append(out.item())
    with torch.no_grad():  # back to the snapshot: eager steps must give the same losses
        for p, p0 in zip(m.parameters(), snap):
            p.copy_(p0)
        for st, st0 in zip(opt.state.values(), state):
            for k, v in st.items():
                v.copy_(st0[k])
    again = [step().item() for _ in range(2)]
    assert all(abs(a - b) <= 1e-3 * abs(b) for a, b in zip(eager, again)), (eager, again)
    assert eager[1] < eager[0] + 1.0


@pytest.mark.parametrize("vocab", [1024, 65536 + 1024, 262144 + 1024])  # the last: dy quantised in slices
def test_fp8_head_matches_the_bf16_head(vocab, seed):
    """Model(fp8_head=True) against the same model (same weights) with the
    bf16 head, on the GPU: the loss within 1% (the FP8 model test's 2% vs
    plain PyTorch, halved: only the head differs), the head's weight
    gradient, the final norm's and the hidden states' (the embedding's)
    within 0.06 of their norm (Fp8Linear's tolerance against bf16,
    test_nn.py), every other gradient within the FP8 model test's 0.25."""
    torch = torch_cuda()
    import lingen.nn as ln
    cfg = ln.ModelConfig(**dict(TINY, vocab=vocab))
    torch.manual_seed(seed)
    a = ln.Model(cfg, "fp8", fp8_head=True).cuda()
    b = ln.Model(cfg, "fp8").cuda()
    b.load_state_dict(a.state_dict())
    ids = torch.randint(0, cfg.vocab, (2, 128), device="cuda")
    la, lb = a(ids, ids), b(ids, ids)
    assert abs(la.item() - lb.item()) < 0.01 * lb.item(), (la.item(), lb.item())
    la.backward()
    lb.backward()
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        lim = 0.06 if n in ("lm_head.weight", "norm.weight", "embed.weight") else 0.25
        assert p.grad is not None and rel(p.grad, q.grad) < (2 * lim if n.endswith("router")
                                                             else lim), n


# 777 and 333: odd counts, their last chunk short (256 and 128 no divisors)
@pytest.mark.parametrize("t,chunk", [(300, 128), (1000, 384), (1000, None), (777, 256),
                                     (333, 128)])
@pytest.mark.parametrize("vocab", [1024, 65536 + 1024])
def test_fp8_head_chunked_is_the_unfused_bit_for_bit(t, chunk, vocab, seed):
    """fp8_linear_cross_entropy (the FP8 head without the logits) against
    Fp8LinearCrossEntropy on the GPU, dout = 1: the same quantised copies
    (rows' stats and 1 x 128 / 128 x 1 blocks: the chunks start on 128-token
    blocks) and the same GEMMs (each dx row the same dgrad; one wgrad over
    all the tokens, the same K order): loss, dx and dW equal bit for bit.
    (Could differ only if a kernel's tuned tile for the chunk's rows summed
    a row in another order than for all the rows.)"""
    torch = torch_cuda()
    import lingen.nn as ln
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(t, 256, generator=g, device="cuda").bfloat16()
    w = (0.05 * torch.randn(vocab, 256, generator=g, device="cuda")).bfloat16()
    lab = torch.randint(0, vocab, (t,), generator=g, device="cuda")
    lab[torch.rand(t, generator=g, device="cuda") < 0.2] = -100
    out = []
    for f in (lambda a, b: ln.Fp8LinearCrossEntropy.apply(a, b, None, lab, -100),
              lambda a, b: ln.fp8_linear_cross_entropy(a, b, lab, chunk=chunk)):
        xa, wa = x.clone().requires_grad_(), w.clone().requires_grad_()
        loss = f(xa, wa)
        loss.backward()
        out.append((loss.detach(), xa.grad, wa.grad))
    for name, a, b in zip(("loss", "dx", "dW"), *out):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("t,chunk", [(777, 256), (1000, 384), (300, 128)])
def test_cross_entropy_quant_writes_its_chunk_of_the_whole_copy(t, chunk, seed):
    """The FP8 head's chunks (_k.cross_entropy_quant into=, the kernel's
    qt_pitch): each writes its columns of the whole copy gqt [V, pitch(T)]
    (its zero tail included) and its block rows of gst, bit for bit the
    chunk's own copies, and nothing else: a poisoned buffer keeps its
    poison everywhere else."""
    torch = torch_cuda()
    from lingen import _torchref as Q
    from lingen.nn import _k
    v = 1024
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = (2 * torch.randn(t, v, generator=g, device="cuda")).bfloat16()
    lab = torch.randint(0, v, (t,), generator=g, device="cuda")
    lab[torch.rand(t, generator=g, device="cuda") < 0.2] = -100
    gs = torch.full((1,), 1.0 / t, device="cuda")
    p = Q.pitch(t)
    for a in range(0, t, chunk):
        e = min(a + chunk, t)
        _, s, m = _k.cross_entropy_stats(x[a:e], lab[a:e], -100)
        want = _k.cross_entropy_quant(x[a:e], lab[a:e], s, m, gs, -100)
        gqt = _k.qt_buffer(v, t, x.device)
        gqt.view(torch.uint8).fill_(0xff)
        gst = torch.full((-(-t // 128), v), float("nan"), device="cuda")
        got = _k.cross_entropy_quant(x[a:e], lab[a:e], s, m, gs, -100, into=(gqt, gst, a))
        for name, u, w in zip(("q", "s"), got[:2], want[:2]):
            assert torch.equal(u, w), name
        pc, b0 = Q.pitch(e - a), a // 128
        assert got[2].data_ptr() == gqt[:, a:].data_ptr()
        assert got[3].data_ptr() == gst[b0].data_ptr()
        assert torch.equal(gqt[:, a:a + pc].view(torch.uint8), want[2].view(torch.uint8))
        assert torch.equal(gst[b0:b0 + want[3].shape[0]], want[3])
        rest = torch.cat([gqt[:, :a], gqt[:, a + pc:p]], 1).view(torch.uint8)
        assert bool((rest == 0xff).all()), "columns of other chunks written"
        assert torch.isnan(torch.cat([gst[:b0], gst[b0 + want[3].shape[0]:]])).all()


@pytest.mark.parametrize("m", [320, 333])  # 333: the wgrad at a count not a multiple of 16
def test_native_fp8_gemms_match_the_emulation(seed, m):
    torch = torch_cuda()
    from lingen.nn import _gemm, _k
    if not _gemm.native_dense():
        pytest.skip("lingen's FP8 GEMM ops are not built (the emulation runs)")
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, 512, generator=g, device="cuda").bfloat16()
    w = torch.randn(384, 512, generator=g, device="cuda").bfloat16()
    dy = torch.randn(m, 384, generator=g, device="cuda").bfloat16()
    q, s, qt, st = _k.quant(x)
    wq, ws, wtq, wts = _k.quant_weight(w)
    gq, gs, gqt, gst = _k.quant(dy)

    def all3():
        return (_gemm.linear(q, s, wq, ws), _gemm.linear_dgrad(gq, gs, wtq, wts),
                _gemm.linear_wgrad(gqt, gst, qt, st))
    got = all3()
    _gemm.set_emulation(True)
    try:
        want = all3()
    finally:
        _gemm.set_emulation(False)
    for name, a, b in zip(("forward", "dgrad", "wgrad"), got, want):
        assert a.shape == b.shape and rel(a, b) < 0.01, name


def test_native_grouped_fp8_gemms_match_the_emulation(seed):
    torch = torch_cuda()
    from lingen.nn import _gemm, _k
    if not _gemm.native_grouped(None, _gemm._GROUPED[:2]):
        pytest.skip("lingen's grouped FP8 GEMM ops are not built (the emulation runs)")
    g = torch.Generator(device="cuda").manual_seed(seed)
    counts = torch.tensor([48, 0, 16, 80, 0, 32], dtype=torch.int32, device="cuda")
    m, n, k = int(counts.sum()), 256, 384
    x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
    dy = torch.randn(m, n, generator=g, device="cuda").bfloat16()
    w = torch.randn(counts.numel(), n, k, generator=g, device="cuda").bfloat16()
    q, s, _, _ = _k.experts_quant(x, counts)
    gq, gs, _, _ = _k.experts_quant(dy, counts)
    wq, ws, wtq, wts = _k.quant_weight(w)

    def both():
        return (_gemm.grouped(q, s, wq, ws, counts), _gemm.grouped_dgrad(gq, gs, wtq, wts, counts))
    got = both()
    _gemm.set_emulation(True)
    try:
        want = both()
    finally:
        _gemm.set_emulation(False)
    for name, a, b in zip(("forward", "dgrad"), got, want):
        assert a.shape == b.shape and rel(a, b) < 0.01, name


def test_native_grouped_wgrad_matches_the_emulation_at_counts_of_16(seed):
    """The grouped wgrad at the segments lingen.nn's FP8 MoE pads to (counts
    multiples of 16, not of 128: the per-expert columnwise copies' rows
    16-byte aligned, the last 128-row block of an expert partial)."""
    torch = torch_cuda()
    from lingen.nn import _gemm, _k
    if not _gemm.native_grouped(None, _gemm._GROUPED[2:]):
        pytest.skip("lingen's grouped FP8 wgrad is not built (the emulation runs)")
    g = torch.Generator(device="cuda").manual_seed(seed)
    counts = torch.tensor([48, 0, 16, 144, 0, 32], dtype=torch.int32, device="cuda")
    m, n, k = int(counts.sum()), 256, 384
    x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
    dy = torch.randn(m, n, generator=g, device="cuda").bfloat16()
    _, _, xt, xts = _k.experts_quant(x, counts)
    _, _, dyt, dyts = _k.experts_quant(dy, counts)
    got = _gemm.grouped_wgrad(dyt, dyts, xt, xts, counts)
    _gemm.set_emulation(True)
    try:
        want = _gemm.grouped_wgrad(dyt, dyts, xt, xts, counts)
    finally:
        _gemm.set_emulation(False)
    assert got.shape == want.shape == (6, n, k) and rel(got, want) < 0.01
