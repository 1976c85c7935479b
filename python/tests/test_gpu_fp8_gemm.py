"""The blockwise FP8 GEMMs from Python on the GPU (sm_90a): inputs quantised by
lingen's own quantisers (fp8_quant rowwise and columnwise, fp8_quant_weight with
its transposed copy), the three products against float64 torch products of the
dequantised operands (max |err| / max |ref| <= 2e-3, fp32 output), wgrad's
accumulate, and the grouped forward per expert. Skipped without torch, a GPU,
or on another arch than sm_90a."""
import pytest

import lingen
from conftest import torch_cuda


def sm90(torch):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the FP8 GEMMs need sm_90a")


def deq_rows(q, s):
    return q.double() * s.t().double().repeat_interleave(128, dim=1)[:, :q.shape[1]]


def deq_tiles(q, s):
    full = s.double().repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)
    return q.double() * full[:q.shape[0], :q.shape[1]]


def rel(y, ref):
    return ((y.double() - ref).abs().max() / ref.abs().max()).item()


@pytest.mark.parametrize("m", [1, 127, 1024, 9973])
def test_three_products(seed, m):
    torch = torch_cuda()
    sm90(torch)
    g = torch.Generator(device="cuda").manual_seed(seed)
    n, k = 384, 640
    x = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    w = torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16)
    q, s, qt, st = lingen.fp8_quant(x)
    wq, ws, wqt, wst = lingen.fp8_quant_weight(w, transposed=True)
    assert torch.equal(wqt.view(torch.uint8), wq.view(torch.uint8).t()) and torch.equal(wst, ws.t())
    y = lingen.fp8_gemm(q, s, wq, ws, out_dtype="fp32")
    assert rel(y, deq_rows(q, s) @ deq_tiles(wq, ws).t()) <= 2e-3
    dy = torch.randn(m, n, device="cuda", generator=g).to(torch.bfloat16)
    dq, ds, dqt, dst = lingen.fp8_quant(dy)
    dx = lingen.fp8_gemm_dgrad(dq, ds, wqt, wst, out_dtype="fp32")
    assert rel(dx, deq_rows(dq, ds) @ deq_tiles(wqt, wst).t()) <= 2e-3
    # any token count: qt rows round_up(m, 128) apart, zeros past m
    assert qt.shape == (k, (m + 127) // 128 * 128) and not qt[:, m:].view(torch.uint8).any()
    dw = lingen.fp8_gemm_wgrad(dqt, dst, qt, st)
    ref = deq_rows(dqt[:, :m], dst) @ deq_rows(qt[:, :m], st).t()
    assert rel(dw, ref) <= 2e-3
    assert torch.equal(lingen.fp8_gemm_wgrad(dqt, dst, qt, st, tokens=m), dw)  # the tail: zeros
    again = dw.clone()
    lingen.fp8_gemm_wgrad(dqt, dst, qt, st, accumulate=True, out={"dw": again})
    assert torch.equal(again, 2 * dw)
    if m % 128:  # an unpitched copy: refused, the expected shape named
        with pytest.raises(ValueError, match="round_up"):
            lingen.fp8_gemm_wgrad(dqt[:, :m].contiguous(), dst, qt[:, :m].contiguous(), st,
                                  tokens=m)


def test_grouped_forward(seed):
    torch = torch_cuda()
    sm90(torch)
    g = torch.Generator(device="cuda").manual_seed(seed)
    e, n, k = 8, 256, 384
    counts = torch.tensor([0, 5, 128, 129, 0, 1, 300, 77], dtype=torch.int32, device="cuda")
    rows = int(counts.sum())
    x = torch.randn(rows, k, device="cuda", generator=g).to(torch.bfloat16)
    q, s, _, _ = lingen.fp8_quant_batched(x, counts, output="rowwise")
    w = torch.randn(e, n, k, device="cuda", generator=g).to(torch.bfloat16)
    qs = [lingen.fp8_quant_weight(w[i]) for i in range(e)]
    wq = torch.stack([a for a, _ in qs])
    ws = torch.stack([b for _, b in qs])
    y = lingen.fp8_grouped_gemm(q, s, wq, ws, counts, out_dtype="fp32")
    start, kb = 0, k // 128
    for i, c in enumerate(counts.tolist()):
        if c:
            blk = s.reshape(-1)[start * kb:(start + c) * kb].view(kb, c)
            ref = deq_rows(q[start:start + c], blk) @ deq_tiles(wq[i], ws[i]).t()
            assert rel(y[start:start + c], ref) <= 2e-3
        start += c


def test_grouped_wgrad(seed):
    """dw[e] from fp8_quant_batched's columnwise copies, expert by expert
    (empty experts, counts off 16 and 128), and accumulate."""
    torch = torch_cuda()
    sm90(torch)
    g = torch.Generator(device="cuda").manual_seed(seed)
    e, n, k = 8, 256, 384
    for cs in ([0, 5, 128, 129, 0, 1, 300, 77], [16, 0, 256, 144, 32, 0, 128, 48]):
        counts = torch.tensor(cs, dtype=torch.int32, device="cuda")
        rows = int(counts.sum())
        dy = torch.randn(rows, n, device="cuda", generator=g).to(torch.bfloat16)
        x = torch.randn(rows, k, device="cuda", generator=g).to(torch.bfloat16)
        _, _, dqt, dst = lingen.fp8_quant_batched(dy, counts, output="columnwise")
        _, _, xqt, xst = lingen.fp8_quant_batched(x, counts, output="columnwise")
        dw = lingen.fp8_grouped_gemm_wgrad(dqt, dst, xqt, xst, counts)
        assert dw.shape == (e, n, k) and dw.dtype == torch.float32
        start, blk = 0, 0
        for i, c in enumerate(cs):
            if c == 0:
                assert torch.count_nonzero(dw[i]) == 0
                continue
            nb = (c + 127) // 128
            a = dqt.reshape(-1)[start * n:(start + c) * n].view(n, c)
            b = xqt.reshape(-1)[start * k:(start + c) * k].view(k, c)
            ref = deq_rows(a, dst[blk:blk + nb]) @ deq_rows(b, xst[blk:blk + nb]).t()
            assert rel(dw[i], ref) <= 2e-3
            start, blk = start + c, blk + nb
        again = dw.clone()
        lingen.fp8_grouped_gemm_wgrad(dqt, dst, xqt, xst, counts, accumulate=True,
                                      out={"dw": again})
        assert torch.equal(again, 2 * dw)
