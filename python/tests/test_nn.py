"""lingen.nn on the CPU: the quantisers' layouts, Fp8Linear and the MoE
against plain torch (values and gradients), routing, state dicts, the
model of a config, and the lingen path traced with meta tensors (the
kernels' fake kernels) in autograd and torch.compile. Tiny shapes: fast."""
import pytest

torch = pytest.importorskip("torch")
import lingen.nn as ln  # noqa: E402
from lingen import _torchref as Q  # noqa: E402
from reference import TINY, rel  # noqa: E402


def test_quant_layouts_round_trip(seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(300, 256, generator=g) * torch.rand(300, 1, generator=g) * 10).bfloat16()
    q, s = Q.rowwise(x)
    assert q.shape == (300, 256) and s.shape == (2, 300) and q.dtype == torch.float8_e4m3fn
    assert rel(Q.deq_rowwise(q, s), x) < 0.04
    qt, st = Q.colwise(x)  # rows round_up(300, 128) apart, zeros past the tokens
    assert qt.shape == (256, 384) and st.shape == (3, 256)
    assert rel(Q.deq_colwise(qt, st, m=300), x) < 0.04
    assert not qt[:, 300:].float().any() and Q.deq_colwise(qt, st).shape == (384, 256)
    w = torch.randn(200, 384, generator=g).bfloat16()
    wq, ws, wtq, wts = Q.weight(w)
    assert ws.shape == (2, 3) and wtq.shape == (384, 200) and wts.shape == (3, 2)
    assert rel(Q.deq_weight(wq, ws), w) < 0.04
    assert torch.equal(Q.deq_weight(wtq, wts), Q.deq_weight(wq, ws).t())
    # power-of-two scales: dequantised values are exact in bf16
    assert torch.equal(Q.deq_rowwise(q, s, torch.bfloat16).float(), Q.deq_rowwise(q, s))


def test_per_expert_layouts(seed):
    g = torch.Generator().manual_seed(seed)
    counts = torch.tensor([128, 0, 256, 128], dtype=torch.int32)
    rows = 640  # 512 in segments, 128 past them
    x = torch.randn(rows, 256, generator=g).bfloat16()
    q, s, qt, st = Q.experts_quant(x, counts)
    assert s.shape == (2, rows) and qt.shape == (256, rows) and st.shape == (5 + 4, 256)
    want = x.float().clone()
    want[512:] = 0
    assert rel(Q.deq_experts_rowwise(q, s, counts), want) < 0.04
    assert rel(Q.deq_experts_colwise(qt, st, counts), want) < 0.04
    # expert 2's rowwise block is [2, 256] at 2 * 128 in s's storage
    blk = s.reshape(-1)[2 * 128:2 * 128 + 2 * 256].view(2, 256)
    assert torch.equal(blk, Q.rowwise(x[128:384])[1])


def test_per_expert_layouts_at_counts_of_16(seed):
    """lingen.nn's FP8 segments (multiples of 16, not of 128): each expert
    quantised as a tensor of its own, its 128-row blocks from its first
    row, its columnwise scales cdiv(c_e, 128) rows after the experts'
    before it (fp8_quant_batched's layout)."""
    g = torch.Generator().manual_seed(seed)
    counts = torch.tensor([48, 0, 16, 144, 0, 32], dtype=torch.int32)
    rows = 256 + 32  # 240 in segments, 48 past them
    x = (torch.randn(rows, 256, generator=g) * torch.rand(rows, 1, generator=g) * 10).bfloat16()
    q, s, qt, st = Q.experts_quant(x, counts)
    assert qt.shape == (256, rows) and st.shape == (3 + 6, 256)
    want = x.float().clone()
    want[240:] = 0
    assert rel(Q.deq_experts_rowwise(q, s, counts), want) < 0.04
    assert rel(Q.deq_experts_colwise(qt, st, counts), want) < 0.04
    start, st_row = 0, 0
    for c in counts.tolist():
        qt_e, st_e = Q.colwise(x[start:start + c], multiple=1)  # an expert's block: rows c apart
        assert torch.equal(qt.reshape(-1)[256 * start:256 * (start + c)].view(torch.uint8),
                           qt_e.reshape(-1).view(torch.uint8))
        assert torch.equal(st[st_row:st_row + st_e.shape[0]], st_e)
        start, st_row = start + c, st_row + st_e.shape[0]


def test_emulated_grouped_wgrad_at_counts_of_16(seed):
    """The grouped wgrad of per-expert columnwise copies at counts that are
    multiples of 16 (the padding lingen.nn's FP8 MoE uses): dw[e] =
    dy_e^T x_e of the dequantised operands, padding rows (zeros) adding
    nothing."""
    from lingen.nn import _gemm
    g = torch.Generator().manual_seed(seed)
    counts = torch.tensor([48, 0, 16, 144], dtype=torch.int32)
    x = torch.randn(208, 256, generator=g).bfloat16()
    dy = torch.randn(208, 128, generator=g).bfloat16()
    x[40:48] = 0  # expert 0's padding rows
    dy[40:48] = 0
    _, _, xt, xts = Q.experts_quant(x, counts)
    _, _, dyt, dyts = Q.experts_quant(dy, counts)
    dw = _gemm.grouped_wgrad(dyt, dyts, xt, xts, counts)
    start = 0
    for e, c in enumerate(counts.tolist()):
        ref = dy[start:start + c].float().t() @ x[start:start + c].float()
        if c:
            assert rel(dw[e], ref) < 0.06, e
        else:
            assert torch.equal(dw[e], torch.zeros_like(dw[e]))
        start += c


def test_fp8_moe_pads_segments_to_16():
    from lingen.nn import _k, moe
    assert moe.MULTIPLE_FP8 == 16
    topk = torch.tensor([[0, 1], [0, 2], [0, 1]], dtype=torch.int32)
    _, counts, offsets, _, padded = _k.row_map(topk, 4, moe.MULTIPLE_FP8)
    assert counts.tolist() == [3, 2, 1, 0] and padded.tolist() == [16, 16, 16, 0]
    assert offsets.tolist() == [0, 16, 32, 48, 48]


def test_expert_weights_transposed_copies_from_one_weight(seed):
    """The experts' transposed copies taken from the transposed copy of the
    experts as one [E N, K] weight (what lingen.nn asks fp8_quant_weight
    for): bit for bit each expert's own q^T and s^T."""
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(3, 256, 384, generator=g) * torch.rand(3, 256, 1, generator=g)).bfloat16()
    q, s, qt, st = Q.weight_experts(w)
    assert qt.shape == (3, 384, 256) and st.shape == (3, 3, 2)
    for e in range(3):
        qe, se, qte, ste = Q.weight(w[e])
        assert torch.equal(q[e].view(torch.uint8), qe.view(torch.uint8)) and torch.equal(s[e], se)
        assert torch.equal(qt[e].view(torch.uint8), qte.view(torch.uint8))
        assert torch.equal(st[e], ste)


def test_fused_producers_give_y_and_its_copies(seed):
    """The producers that hand an Fp8Linear its quantised input (RMSNorm +
    quant before qkv, SwiGLU + quant before the shared expert's down): y
    differentiable, y the fp32 value rounded once, the copies the fp32
    y's (as the kernels', docs/kernels.md 1.2), the layer's result from
    them close to the one from y itself."""
    from lingen.nn import _k
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 40, 256, generator=g).bfloat16().requires_grad_()
    w = (1 + torch.randn(256, generator=g) * 0.1).bfloat16()
    lin = ln.Fp8Linear(256, 128)
    xf = x.detach().float()
    a, u = xf[..., :128], xf[..., 128:]
    for y, copies, want in (
            (*_k.rms_norm_quant(x, w, 1e-6),
             xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + 1e-6) * w.float()),
            (*_k.swiglu_quant_dense(x), a * torch.sigmoid(a) * u)):
        assert torch.equal(y, want.bfloat16()) and y.requires_grad
        for c, b in zip(copies, _k.quant(want.reshape(-1, want.shape[-1]))):
            assert torch.equal(c.view(torch.uint8) if c.dtype == Q.E4M3 else c,
                               b.view(torch.uint8) if b.dtype == Q.E4M3 else b)
        if want.shape[-1] == 256:
            got, ref = lin(y, copies).float(), lin(y).float()
            assert (got - ref).norm() <= 0.02 * ref.norm()


def test_fp8_linear_matches_bf16(seed):
    import lingen.torch as lt
    assert lt.Fp8Linear is ln.Fp8Linear and lt.fp8_linear is ln.fp8_linear
    torch.manual_seed(seed)
    lin = ln.Fp8Linear(256, 384, fp8=True)
    ref = ln.Fp8Linear(256, 384, fp8=False)
    ref.load_state_dict(lin.state_dict())
    x = torch.randn(2, 100, 256).bfloat16().requires_grad_()
    xr = x.detach().clone().requires_grad_()
    dy = torch.randn(2, 100, 384).bfloat16()
    y, yr = lin(x), ref(xr)
    assert y.shape == (2, 100, 384) and y.dtype == torch.bfloat16
    y.backward(dy)
    yr.backward(dy)
    assert rel(y, yr) < 0.06
    assert rel(x.grad, xr.grad) < 0.06 and rel(lin.weight.grad, ref.weight.grad) < 0.06
    assert lin.weight.grad.dtype == torch.bfloat16


def _moe_pair(mode, seed, **kw):
    torch.manual_seed(seed)
    a = ln.MoE(256, 8, 2, 128, 128, mode=mode, **kw)
    b = ln.MoE(256, 8, 2, 128, 128, mode="torch", **kw)
    b.load_state_dict(a.state_dict())
    return a, b


@pytest.mark.parametrize("mode,tol", [("bf16", 0.01), ("fp8", 0.1)])
def test_moe_matches_plain_torch(mode, tol, seed):
    a, b = _moe_pair(mode, seed)
    x = torch.randn(96, 256).bfloat16().requires_grad_()
    xb = x.detach().clone().requires_grad_()
    dy = torch.randn(96, 256).bfloat16()
    y, yb = a(x), b(xb)
    y.backward(dy)
    yb.backward(dy)
    assert rel(y, yb) < tol, mode
    assert rel(x.grad, xb.grad) < tol
    for n in ("w1", "w2", "router"):
        ga, gb = getattr(a, n).grad, getattr(b, n).grad
        assert ga is not None and rel(ga, gb) < tol, n
    assert rel(a.shared.gate_up.weight.grad, b.shared.gate_up.weight.grad) < tol


def test_route_group_limited_and_bias(seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(50, 16, generator=g)
    topk, probs = ln.route(logits, 4, groups=4, topk_groups=2)
    assert topk.shape == (50, 4) and topk.dtype == torch.int32
    assert torch.allclose(probs.sum(-1), torch.ones(50), atol=1e-5)
    assert ((probs > 0).sum(-1) == 4).all()
    groups = (topk.long() // 4)
    assert all(len(set(r.tolist())) <= 2 for r in groups)  # within two groups
    bias = torch.zeros(16)
    bias[3] = 100.0
    topk, probs = ln.route(logits, 2, bias=bias)
    assert (topk == 3).any(-1).all()  # the bias chooses expert 3, the weights ignore it
    chosen = torch.sigmoid(logits).gather(1, topk.long())
    assert torch.allclose(probs[:, 3], torch.sigmoid(logits[:, 3]) / chosen.sum(-1), atol=1e-6)


def test_softmax_route_matches_topk_of_softmax(seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(20, 8, generator=g)
    topk, probs = ln.route(logits, 2, score="softmax", norm=False)
    sm = torch.softmax(logits, -1)
    want = sm.topk(2, -1)
    assert torch.equal(topk.long().sort(-1).values, want.indices.sort(-1).values)
    assert torch.allclose(probs.sum(-1), want.values.sum(-1))


def test_state_dicts_identical_across_modes():
    cfg = ln.ModelConfig(**TINY)
    keys = [list(ln.Model(cfg, m).state_dict()) for m in ln.layers.MODES]
    assert keys[0] == keys[1] == keys[2]
    assert "blocks.0.moe.w1" in keys[0] and "blocks.0.attn.qkv.weight" in keys[0]


def test_model_modes_agree_on_cpu(seed):
    cfg = ln.ModelConfig(**TINY)
    torch.manual_seed(seed)
    ref = ln.Model(cfg, "torch")
    ids = torch.randint(0, cfg.vocab, (2, 64))
    loss_ref = ref(ids, ids)
    loss_ref.backward()
    # fp8: the worst gradient over 16 seeds measured 0.10-0.19 of its norm (an
    # expert's w1 with few tokens: the 1x128 e4m3 noise of its inputs); 0.2 failed
    # about one random seed in six
    for mode, tol in (("bf16", 0.01), ("fp8", 0.3)):
        m = ln.Model(cfg, mode)
        m.load_state_dict(ref.state_dict())
        loss = m(ids, ids)
        loss.backward()
        assert abs(loss.item() - loss_ref.item()) < 0.01 * loss_ref.item(), mode
        for (n, p), (_, pr) in zip(m.named_parameters(), ref.named_parameters()):
            # the router's gradient: FP8 noise upstream flips near-tied experts
            assert rel(p.grad, pr.grad) < (2 * tol if n.endswith("router") else tol), (mode, n)


def test_from_config_shapes_on_meta():
    with torch.device("meta"):
        m = ln.Model.from_config("configs/models/ling-mini-2.0.json", layers=2, mode="fp8")
    assert len(m.blocks) == 2 and m.cfg.vocab == 157184
    moe = m.blocks[0].moe
    assert moe.w1.shape == (256, 1024, 2048) and moe.w2.shape == (256, 2048, 512)
    assert m.blocks[0].attn.qkv.weight.shape == ((16 + 8) * 128, 2048)
    assert moe.shared.gate_up.weight.shape == (1024, 2048)


@pytest.mark.parametrize("mode", ["fp8", "bf16"])
def test_lingen_path_traces_on_meta(mode):
    """The GPU path (lingen's torch ops) with meta tensors: every op's fake
    kernel, autograd through the Functions, shapes of every gradient."""
    cfg = ln.ModelConfig(**TINY)
    with torch.device("meta"):
        m = ln.Model(cfg, mode)
        ids = torch.randint(0, cfg.vocab, (2, 64))
    loss = m(ids, ids)
    assert loss.shape == () and loss.device.type == "meta"
    loss.backward()
    for n, p in m.named_parameters():
        assert p.grad is not None and p.grad.shape == p.shape, n


def test_moe_compiles_fullgraph_on_meta():
    """torch.compile (fullgraph: no graph break) of the FP8 MoE's lingen
    path, forward and backward, through the fake kernels."""
    with torch.device("meta"):
        moe = ln.MoE(256, 8, 2, 128, 128, mode="fp8")
        x = torch.randn(64, 256, dtype=torch.bfloat16, requires_grad=True)
    torch._dynamo.reset()
    y = torch.compile(moe, backend="aot_eager", fullgraph=True)(x)
    y.sum().backward()
    assert y.shape == (64, 256) and moe.w1.grad.shape == moe.w1.shape
    assert x.grad.shape == x.shape


def test_fp8_linear_compiles_on_cpu(seed):
    torch.manual_seed(seed)
    lin = ln.Fp8Linear(128, 256)
    x = torch.randn(64, 128).bfloat16()
    torch._dynamo.reset()
    y = torch.compile(lin, backend="aot_eager", fullgraph=True)(x)
    assert torch.equal(y, lin(x))


def test_gemm_backend_is_labelled():
    b = ln.gemm_backend()
    assert "dense:" in b and "grouped:" in b
    from lingen.nn import _gemm
    assert ("EMULATED" in b.split(";")[0]) == (not _gemm.native_dense())
    assert not _gemm.native_dense(torch.zeros(1))  # never for CPU operands


@pytest.mark.parametrize("m", [1, 127, 333])
def test_wgrad_emulation_at_any_token_count(m):
    """The CPU wgrad over the pitched columnwise copies (qt [K, round_up(m,
    128)], zeros past m) is the product over the m tokens."""
    from lingen.nn import _gemm, _k
    x, dy = torch.randn(m, 256).bfloat16(), torch.randn(m, 384).bfloat16()
    q, s, qt, st = _k.quant(x)
    gq, gs, gqt, gst = _k.quant(dy)
    assert qt.shape == (256, (m + 127) // 128 * 128) and not qt[:, m:].float().any()
    dw = _gemm.linear_wgrad(gqt, gst, qt, st)
    ref = Q.deq_colwise(gqt, gst, m=m).double().t() @ Q.deq_colwise(qt, st, m=m).double()
    assert dw.shape == (384, 256) and rel(dw, ref) < 1e-6
