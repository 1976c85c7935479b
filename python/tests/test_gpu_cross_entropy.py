"""cross_entropy (docs/kernels.md K9) on the GPU against torch: the loss against
F.cross_entropy in float64 (1e-6 relative, docs/kernels.md 5), S and m against
logsumexp / max, the gradient against float64 autograd (a bf16 or fp32
rounding), for vocabs 157184 (target), 151936, 129280, 50257, 100003 and
tiny ones, bf16 and fp32 logits, int64 and int32 labels, ignore_index,
label smoothing (torch's definition), every reduction; the drop-in
lingen.torch.cross_entropy (fused and in place too; F.cross_entropy's
parameter order; unaligned and strided inputs; captured in a CUDA graph
with its backward); the vocab-parallel
pieces chained on one GPU (shards' statistics, stacked as an all-gather
would, merged, each shard's backward) against the whole rows, and their
autograd function on each of 3 simulated ranks. Skipped without torch or
a GPU."""
import pytest

import lingen
from conftest import torch_cuda

VOCABS = [157184, 151936, 129280, 50257, 100003, 7, 1]


def make(torch, seed, rows, vocab, dtype, index=None, ignore=-100, frac_ignored=0.125):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = (torch.randn(rows, vocab, generator=gen, device="cuda") * 2).to(dtype)
    y = torch.randint(0, vocab, (rows,), generator=gen, device="cuda")
    drop = torch.rand(rows, generator=gen, device="cuda") < frac_ignored
    y = torch.where(drop, torch.full_like(y, ignore), y)
    return x, (y.to(index) if index is not None else y)


def ref_rows(torch, x, y, ignore, smooth):
    """Per-row loss (float64 torch), lse, max, and the float64 gradient of
    sum(loss * g) for g = 1."""
    x64 = x.double().requires_grad_()
    loss = torch.nn.functional.cross_entropy(x64, y.long(), ignore_index=ignore, reduction="none",
                                             label_smoothing=smooth)
    loss.sum().backward()
    return loss.detach(), torch.logsumexp(x.double(), -1), x.double().max(-1).values, x64.grad


def close(torch, got, want, rel, what, floor=0.0):
    got, want = got.double(), want.double()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    bad = (got - want).abs() > rel * want.abs() + floor
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {want.numel()} out of tolerance; first "
                           f"got {got[bad][:3].tolist()} want {want[bad][:3].tolist()}")


def grad_rel(torch, dtype):
    return 2.0 ** -7 if dtype == torch.bfloat16 else 1e-5


@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("dt", ["bf16", "fp32"])
@pytest.mark.parametrize("smooth", [0.0, 0.1])
def test_forward_backward(seed, vocab, dt, smooth):
    torch = torch_cuda()
    dtype = torch.bfloat16 if dt == "bf16" else torch.float32
    for rows in (1, 3, 257):
        x, y = make(torch, seed + rows, rows, vocab, dtype)
        loss_ref, lse, mx, grad_ref = ref_rows(torch, x, y, -100, smooth)
        loss, s, m = lingen.cross_entropy_forward(x, y, label_smoothing=smooth)
        live = y != -100
        close(torch, loss, loss_ref, 1e-6, "loss", 1e-7)
        close(torch, m[live], mx[live], 0.0, "max_logit")
        close(torch, (s.double().log() + m.double())[live], lse[live], 1e-6, "lse", 1e-6)
        assert (loss[~live] == 0).all() and (s[~live] == 0).all() and (m[~live] == 0).all()
        g = torch.ones(rows, device="cuda")
        grad = lingen.cross_entropy_backward(x, y, s, m, g, label_smoothing=smooth)
        assert grad.dtype == dtype and grad.shape == x.shape
        # p - smooth / vocab cancels: the error is of the terms, not of the result
        floor = 1e-9 + grad_rel(torch, dtype) * smooth / vocab
        close(torch, grad, grad_ref, grad_rel(torch, dtype), "grad", floor)
        # fused: the same gradient with g[0] on every row
        g0 = torch.full((1,), 0.25, device="cuda")
        loss2, _, _, grad2 = lingen.cross_entropy_fused(x, y, g0, label_smoothing=smooth)
        close(torch, loss2, loss_ref, 1e-6, "fused loss", 1e-7)
        close(torch, grad2, grad_ref * 0.25, grad_rel(torch, dtype), "fused grad", floor * 0.25)


@pytest.mark.parametrize("vocab", [157184, 50257])
def test_label_smoothing_one(seed, vocab):
    """e = 1, the end of torch's range (the uniform target): the label no
    longer counts."""
    torch = torch_cuda()
    x, y = make(torch, seed, 65, vocab, torch.bfloat16)
    loss_ref, _, _, grad_ref = ref_rows(torch, x, y, -100, 1.0)
    loss, s, m = lingen.cross_entropy_forward(x, y, label_smoothing=1.0)
    close(torch, loss, loss_ref, 1e-6, "loss", 1e-7)
    floor = 1e-9 + 2.0 ** -7 / vocab
    grad = lingen.cross_entropy_backward(x, y, s, m, torch.ones(65, device="cuda"),
                                         label_smoothing=1.0)
    close(torch, grad, grad_ref, 2.0 ** -7, "grad", floor)
    _, _, _, g2 = lingen.cross_entropy_fused(x, y, torch.ones(1, device="cuda"),
                                             label_smoothing=1.0)
    close(torch, g2, grad_ref, 2.0 ** -7, "fused grad", floor)


@pytest.mark.parametrize("index", ["int64", "int32"])
@pytest.mark.parametrize("ignore", [-100, -1, 3])
def test_labels_and_ignore_index(seed, index, ignore):
    torch = torch_cuda()
    idx = torch.int64 if index == "int64" else torch.int32
    x, y = make(torch, seed, 300, 50257, torch.bfloat16, idx, ignore, 0.3)
    loss_ref, _, _, grad_ref = ref_rows(torch, x, y, ignore, 0.0)
    loss, s, m = lingen.cross_entropy_forward(x, y, ignore_index=ignore)
    close(torch, loss, loss_ref, 1e-6, "loss", 1e-7)
    grad = lingen.cross_entropy_backward(x, y, s, m, torch.ones(300, device="cuda"),
                                         ignore_index=ignore)
    close(torch, grad, grad_ref, 2.0 ** -7, "grad", 1e-9)
    assert (grad[y == ignore] == 0).all()


def test_int32_labels_at_an_odd_element(seed):
    """int32 labels 4 bytes past an 8-byte boundary (a slice): taken as
    they are (labels need only 4-byte alignment)."""
    torch = torch_cuda()
    x, y = make(torch, seed, 65, 50257, torch.bfloat16, torch.int32)
    yy = torch.cat([y[:1], y])[1:]
    assert yy.data_ptr() % 8 == 4
    loss_ref, _, _, grad_ref = ref_rows(torch, x, y, -100, 0.0)
    loss, s, m = lingen.cross_entropy_forward(x, yy)
    close(torch, loss, loss_ref, 1e-6, "loss", 1e-7)
    grad = lingen.cross_entropy_backward(x, yy, s, m, torch.ones(65, device="cuda"))
    close(torch, grad, grad_ref, 2.0 ** -7, "grad", 1e-9)


def test_every_label_ignored():
    torch = torch_cuda()
    x = torch.randn(5, 100003, device="cuda").bfloat16()
    y = torch.full((5,), -100, device="cuda")
    loss, s, m = lingen.cross_entropy_forward(x, y)
    assert (loss == 0).all() and (s == 0).all() and (m == 0).all()
    grad = lingen.cross_entropy_backward(x, y, s, m, torch.ones(5, device="cuda"))
    assert (grad == 0).all()
    _, _, _, g2 = lingen.cross_entropy_fused(x, y, torch.ones(1, device="cuda"))
    assert (g2 == 0).all()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smooth", [0.0, 0.2])
@pytest.mark.parametrize("mode", ["plain", "fused", "inplace", "fused_inplace"])
def test_drop_in(seed, reduction, smooth, mode):
    torch = torch_cuda()
    import lingen.torch as lt
    fused, inplace = "fused" in mode, "inplace" in mode
    if fused and reduction == "none":
        pytest.skip("fused needs a uniform output gradient")
    for vocab, rows in ((157184, 64), (50257, 33)):
        x, y = make(torch, seed + vocab, rows, vocab, torch.bfloat16)
        x64 = x.double().requires_grad_()
        want = torch.nn.functional.cross_entropy(x64, y, reduction=reduction,
                                                 label_smoothing=smooth)
        dout = torch.rand(want.shape, dtype=torch.float64, device="cuda") + 0.5
        want.backward(dout)
        xl = x.clone().requires_grad_() if not inplace else x.clone()
        leaf = xl if not inplace else xl.requires_grad_()
        got = lt.cross_entropy(leaf, y, reduction=reduction, label_smoothing=smooth, fused=fused,
                               inplace=inplace)
        assert got.dtype == torch.bfloat16 and got.shape == want.shape
        close(torch, got.float(), want.detach(), 2.0 ** -8, "loss")
        got.backward(dout.to(got.dtype))
        close(torch, leaf.grad, x64.grad, 2.0 ** -6, "grad", 1e-9)


def test_drop_in_fp32_int32_ignore(seed):
    torch = torch_cuda()
    import lingen.torch as lt
    x, y = make(torch, seed, 100, 100003, torch.float32, torch.int32, -1, 0.25)
    x64 = x.double().requires_grad_()
    want = torch.nn.functional.cross_entropy(x64, y.long(), ignore_index=-1, label_smoothing=0.1)
    want.backward()
    xl = x.clone().requires_grad_()
    got = lt.cross_entropy(xl, y, ignore_index=-1, label_smoothing=0.1)
    close(torch, got, want.detach(), 1e-6, "loss")
    got.backward()
    close(torch, xl.grad, x64.grad, 1e-5, "grad", 1e-10)


def test_drop_in_signature_and_views(seed):
    """F.cross_entropy's parameters in its order (weight, size_average,
    ignore_index, reduce, reduction, label_smoothing); logits that are a
    slice of rows starting off a 16-byte boundary (odd vocab), strided
    logits, strided labels: taken as F.cross_entropy takes them."""
    torch = torch_cuda()
    import lingen.torch as lt
    F = torch.nn.functional
    big, yb = make(torch, seed, 41, 50257, torch.bfloat16, frac_ignored=0.2)
    x, y = big[1:], yb[1:]  # x starts 100514 bytes in: not 16-byte aligned
    assert x.data_ptr() % 16 != 0
    x64 = x.double().requires_grad_()
    want = F.cross_entropy(x64, y, None, None, -100, None, "sum", 0.1)
    want.backward()
    xl = x.detach().requires_grad_()
    got = lt.cross_entropy(xl, y, None, None, -100, None, "sum", 0.1)
    close(torch, got.float(), want.detach(), 2.0 ** -8, "positional loss")
    got.backward()
    close(torch, xl.grad, x64.grad, 2.0 ** -6, "unaligned grad", 1e-9)
    # strided logits (a transposed copy's transpose) and strided labels
    xt = x.t().contiguous().t()
    y2 = torch.stack([y, y], 1)[:, 0]
    assert not xt.is_contiguous() and not y2.is_contiguous()
    xl = xt.detach().requires_grad_()
    got = lt.cross_entropy(xl, y2, label_smoothing=0.1, reduction="sum")
    close(torch, got.float(), want.detach(), 2.0 ** -8, "strided loss")
    got.backward()
    close(torch, xl.grad, x64.grad, 2.0 ** -6, "strided grad", 1e-9)
    # the deprecated size_average / reduce, read as torch reads them
    s = lt.cross_entropy(x, y, size_average=False)
    close(torch, s.float(), F.cross_entropy(x.double(), y, reduction="sum"), 2.0 ** -8, "legacy sum")
    with pytest.raises(ValueError, match="weight"):
        lt.cross_entropy(x, y, torch.ones(50257, device="cuda"))


@pytest.mark.parametrize("fused", [False, True])
def test_drop_in_cuda_graph(seed, fused):
    """The loss and its backward captured in a CUDA graph (the fused form
    scales by the output gradient instead of checking it on the host) and
    replayed: the same loss and gradient as eager torch."""
    torch = torch_cuda()
    import lingen.torch as lt
    x, y = make(torch, seed, 64, 157184, torch.bfloat16)
    x64 = x.double().requires_grad_()
    want = torch.nn.functional.cross_entropy(x64, y, label_smoothing=0.1)
    want.backward()
    xl = x.clone().requires_grad_()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: compile and load before the capture
        lt.cross_entropy(xl, y, label_smoothing=0.1, fused=fused).backward()
    torch.cuda.current_stream().wait_stream(side)
    xl.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loss = lt.cross_entropy(xl, y, label_smoothing=0.1, fused=fused)
        loss.backward()
    graph.replay()
    torch.cuda.synchronize()
    close(torch, loss.float(), want.detach(), 2.0 ** -8, "captured loss")
    close(torch, xl.grad, x64.grad, 2.0 ** -6, "captured grad", 1e-9)


@pytest.mark.parametrize("vocab,shards", [(157184, 8), (50257, 3), (129280, 2)])
@pytest.mark.parametrize("smooth", [0.0, 0.1])
def test_vocab_parallel(seed, vocab, shards, smooth):
    """The pieces chained as a tensor-parallel trainer would, on one GPU:
    each shard's stats, torch.stack as the all-gather, the merge, each
    shard's backward; against the whole rows."""
    torch = torch_cuda()
    rows = 129
    x, y = make(torch, seed, rows, vocab, torch.bfloat16, torch.int64)
    loss_ref, lse, _, grad_ref = ref_rows(torch, x, y, -100, smooth)
    bounds = [vocab * k // shards for k in range(shards + 1)]
    parts = [x[:, bounds[k]:bounds[k + 1]].contiguous() for k in range(shards)]
    stats = torch.stack([lingen.cross_entropy_shard_stats(parts[k], y, bounds[k], vocab,
                                                          label_smoothing=smooth)
                         for k in range(shards)])
    assert stats.shape == (shards, rows, 6)
    loss, s, m = lingen.cross_entropy_merge(stats, y, vocab, label_smoothing=smooth)
    close(torch, loss, loss_ref, 1e-6, "merged loss", 1e-7)
    live = y != -100
    close(torch, (s.double().log() + m.double())[live], lse[live], 1e-6, "merged lse", 1e-6)
    dl = torch.ones(rows, device="cuda")
    grads = [lingen.cross_entropy_backward(parts[k], y, s, m, dl, vocab_start=bounds[k],
                                           classes=vocab, label_smoothing=smooth)
             for k in range(shards)]
    close(torch, torch.cat(grads, 1), grad_ref, 2.0 ** -7, "shard grads", 1e-9)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smooth", [0.0, 0.1])
def test_vocab_parallel_autograd(seed, reduction, smooth):
    """lingen.torch.vocab_parallel_cross_entropy on each of 3 "ranks" of one
    GPU, the all-gather played by a function that puts this rank's stats
    among the others' (computed beforehand): on every rank the whole rows'
    loss, and this shard's columns of the whole rows' gradient."""
    torch = torch_cuda()
    import lingen.torch as lt
    vocab, shards, rows = 50257, 3, 97
    x, y = make(torch, seed, rows, vocab, torch.bfloat16, frac_ignored=0.2)
    x64 = x.double().requires_grad_()
    want = torch.nn.functional.cross_entropy(x64, y, reduction=reduction, label_smoothing=smooth)
    dout = torch.rand(want.shape, dtype=torch.float64, device="cuda") + 0.5
    want.backward(dout)
    bounds = [vocab * k // shards for k in range(shards + 1)]
    parts = [x[:, bounds[k]:bounds[k + 1]].contiguous() for k in range(shards)]
    others = [lingen.cross_entropy_shard_stats(parts[k], y, bounds[k], vocab, label_smoothing=smooth)
              for k in range(shards)]
    for k in range(shards):
        def gather(st, k=k):
            return torch.stack([st if j == k else others[j] for j in range(shards)])
        leaf = parts[k].clone().requires_grad_()
        got = lt.vocab_parallel_cross_entropy(leaf, y, bounds[k], vocab, reduction=reduction,
                                              label_smoothing=smooth, all_gather=gather)
        assert got.dtype == torch.bfloat16 and got.shape == want.shape
        close(torch, got.float(), want.detach(), 2.0 ** -8, f"rank {k} loss")
        got.backward(dout.to(got.dtype))
        close(torch, leaf.grad, x64.grad[:, bounds[k]:bounds[k + 1]], 2.0 ** -6, f"rank {k} grad",
              1e-9)



@pytest.mark.parametrize("vocab,rows", [(128, 8191), (1024, 300), (157184, 129), (201088, 127)])
@pytest.mark.parametrize("smooth,index", [(0.0, None), (0.1, "int32")])
@pytest.mark.parametrize("round_scale", [True, False])
def test_cross_entropy_quant_is_backward_then_fp8_quant(seed, vocab, rows, smooth, index,
                                                        round_scale):
    """cross_entropy_quant (the FP8 LM head's backward): the FP8 copies bit
    for bit those of cross_entropy_backward's bf16 gradient (dloss g[0] on
    every row) quantised by fp8_quant, every copy alone too."""
    torch = torch_cuda()
    x, y = make(torch, seed + rows, rows, vocab, torch.bfloat16,
                getattr(torch, index) if index else None)
    kw = dict(label_smoothing=smooth)  # the CE ops take the labels' dtype from the labels
    _, s, m = lingen.cross_entropy_forward(x, y, **kw)
    g = torch.full((1,), 1.0 / rows, device="cuda")
    grad = lingen.cross_entropy_backward(x, y, s, m, g.expand(rows).contiguous(), **kw)
    kw["index"] = index or "int64"
    for output in ("both", "rowwise", "columnwise"):
        want = lingen.fp8_quant(grad, round_scale=round_scale, output=output)
        got = lingen.cross_entropy_quant(x, y, s, m, g, round_scale=round_scale, output=output,
                                         **kw)
        for name, a, b in zip(("q", "s", "qt", "st"), got, want):
            if b is None or b.numel() == 0:
                continue
            assert a.dtype == b.dtype and a.shape == b.shape, (output, name)
            assert torch.equal(a.view(torch.uint8) if a.element_size() == 1 else a,
                               b.view(torch.uint8) if b.element_size() == 1 else b), (output, name)
