"""The per-expert and weight FP8 quantisers (lingen.fp8_quant_batched,
lingen.fp8_quant_weight, docs/kernels.md 1.3) on the GPU against float64 torch
references: each expert's segment quantised as a tensor of its own, the
copies in the concatenated per-expert layout, at the target shape (65536 x
1024, 256 experts) and odd ones (counts 0, 1, 127, 128, 129, experts not a
power of two, more experts than a CTA's threads); weights in 128 x 128
tiles with a partial last row of tiles. Skipped without torch or a GPU."""
import pytest

import lingen
import reference as ref
from conftest import torch_cuda


def make_counts(torch, g, tokens, experts):
    """Counts summing to tokens, with the special sizes first."""
    special = [0, 1, 127, 128, 129]
    counts = []
    left = tokens
    for e in range(experts):
        if e == experts - 1:
            c = left
        elif e < len(special):
            c = min(special[e], left)
        else:
            c = min(int(torch.randint(0, 2 * max(tokens // experts, 1) + 1, (1,), generator=g)), left)
        counts.append(c)
        left -= c
    return counts


def check_batched(torch, x, counts, q, s, qt, st, round_scale, what):
    from lingen import _torchref as R
    t, h = x.shape
    nb = h // 128
    start, trow = 0, 0
    sf, qtf = (s.reshape(-1) if s is not None else None), (qt.reshape(-1) if qt is not None else None)
    for e, c in enumerate(counts):
        if c == 0:
            continue
        y = x[start:start + c].double()
        w = f"{what} expert {e} ({c} tokens)"
        if q is not None:
            se = sf[start * nb:(start + c) * nb].view(nb, c)
            ref.check_scales(se, R.row_scales(y, round_scale), w + " s")
            ref.check_q(q[start:start + c], y, se.double().T.repeat_interleave(128, dim=1), w + " q")
        if qt is not None:
            nt = (c + 127) // 128
            ste = st[trow:trow + nt]
            ref.check_scales(ste, R.col_scales(y, round_scale), w + " st")
            qte = qtf[start * h:(start + c) * h].view(h, c)
            ref.check_q(qte.T, y, ste.double().repeat_interleave(128, dim=0)[:c], w + " qt")
            trow += nt
        start += c


CASES = [(65536, 1024, 256), (1, 1024, 1), (1000, 384, 96), (8191, 2048, 160), (5000, 256, 1000)]


@pytest.mark.parametrize("tokens,hidden,experts", CASES)
def test_fp8_quant_batched(seed, tokens, hidden, experts):
    torch = torch_cuda()
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = (torch.randn(tokens, hidden, generator=g) * 3).bfloat16().cuda()
    counts = make_counts(torch, g, tokens, experts)
    cdev = torch.tensor(counts, dtype=torch.int32, device="cuda")
    for round_scale in (True, False):
        q, s, qt, st = lingen.fp8_quant_batched(x, cdev, round_scale=round_scale)
        assert q.shape == (tokens, hidden) and q.dtype == torch.float8_e4m3fn
        assert s.shape == (hidden // 128, tokens) and qt.shape == (hidden, tokens)
        assert st.shape == ((tokens + 127) // 128 + experts, hidden)
        check_batched(torch, x, counts, q, s, qt, st, round_scale,
                      f"fp8_quant_batched {tokens}x{hidden}/{experts}")
    q, s, qt, st = lingen.fp8_quant_batched(x, cdev, output="columnwise")
    assert q is None and s is None
    check_batched(torch, x, counts, None, None, qt, st, True, "columnwise only")


def test_fp8_quant_batched_torch(seed):
    torch = torch_cuda()
    import lingen.torch as lt
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(700, 256, generator=g).bfloat16().cuda()
    counts = [0, 1, 127, 128, 129, 315]
    cdev = torch.tensor(counts, dtype=torch.int32, device="cuda")
    q, s, qt, st = lt.fp8_quant_batched(x, cdev, output="rowwise")
    assert qt is None and st is None
    check_batched(torch, x, counts, q, s, None, None, True, "lingen.torch")


def test_fp8_quant_weight(seed):
    torch = torch_cuda()
    from lingen import _torchref as R
    g = torch.Generator(device="cpu").manual_seed(seed)
    for rows, hidden in ((2048, 2048), (129, 384), (1, 128), (7168, 2048)):
        w = (torch.randn(rows, hidden, generator=g) * 0.02).bfloat16().cuda()
        for round_scale in (True, False):
            q, s = lingen.fp8_quant_weight(w, round_scale=round_scale)
            nr = (rows + 127) // 128
            assert q.shape == (rows, hidden) and s.shape == (nr, hidden // 128)
            pad = torch.zeros(nr * 128, hidden, dtype=torch.float64, device="cuda")
            pad[:rows] = w.double()
            amax = pad.view(nr, 128, hidden // 128, 128).abs().amax(dim=(1, 3))
            ref.check_scales(s, R.scale_of(amax, round_scale), f"weight {rows}x{hidden} s")
            per = s.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:rows]
            ref.check_q(q, w.double(), per, f"weight {rows}x{hidden} q")
