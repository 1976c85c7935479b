"""The PyTorch blockwise FP8 quantiser of docs/kernels.md 1.2-1.3 that every
quantising case compares with (and times, eager and compiled), and the
dequantisation results are compared by. No cases of its own."""


def pow2(torch, a):
    """2^ceil(log2 s) by the exponent (log2 of 2^k need not be exact)."""
    m, e = torch.frexp((a / 448.0).clamp(min=1e-30))
    return torch.ldexp(torch.ones_like(m), e - (m == 0.5).int())


def torch_quant(torch, y, pitch=16):
    """y [t, h] fp32 -> (q, s [h/128, t], qt [h, round_up(t, pitch)], st
    [cdiv(t,128), h]), power-of-two scales; qt's columns past t zeros (the
    dense quantisers' layout: pitch 16; an expert's block: pitch 1)."""
    t, h = y.shape
    b = y.view(t, h // 128, 128)
    s = pow2(torch, b.abs().amax(-1))
    q = (b / s[..., None]).view(t, h).to(torch.float8_e4m3fn)
    nb = (t + 127) // 128
    c = torch.nn.functional.pad(y, (0, 0, 0, nb * 128 - t)).view(nb, 128, h)
    st = pow2(torch, c.abs().amax(1))
    tp = (t + pitch - 1) // pitch * pitch
    qt = (c / st[:, None, :]).view(nb * 128, h)[:tp].t().contiguous().to(torch.float8_e4m3fn)
    return q, s.t().contiguous(), qt, st


def dequant(torch, q, s, qt, st):
    """Both copies back to [t, h] fp32 (a copy left out: None)."""
    rows = cols = None
    if q is not None:
        t, h = q.shape
        rows = q.float() * s.t().repeat_interleave(128, dim=1)
    if qt is not None:  # [round_up(t, 16), h] (the tail zeros), [t, h] with q
        h, t = qt.shape
        if q is not None:
            t = q.shape[0]
        cols = qt[:, :t].t().float() * st.repeat_interleave(128, dim=0)[:t]
    return rows, cols


def cases(quick):
    return []
