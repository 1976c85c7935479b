"""Float64 torch references (docs/kernels.md K1), independent of lingen's C
references, and comparisons for the GPU tests (the quantisers' scales in
float64: lingen._torchref's row_scales, col_scales, scale_of of float64
values)."""
def rmsnorm(x, w, eps=1e-6):
    """(y float64, r float64 [tokens]): y = x * rsqrt(sum x^2 / n + eps) * w."""
    x = x.double()
    r = (x.square().sum(-1) / x.shape[-1] + eps).rsqrt()
    return x * r[:, None] * w.double(), r


def check_scales(got, want, what):
    """fp32 scales against float64 ones: equal but for rare power-of-two
    boundary cases (the kernel's fp32 y against the float64 one)."""
    assert got.shape == want.shape, (what, got.shape, want.shape)
    ratio = got.double() / want
    off = (ratio - 1).abs() > 1e-6
    frac = off.double().mean().item() if off.numel() else 0.0
    assert frac <= 1e-3, f"{what}: {frac:.2e} of the scales differ"
    if off.any():
        r = ratio[off]
        assert ((r - 2).abs() < 1e-6).logical_or((r - 0.5).abs() < 1e-6).all(), \
            f"{what}: scales off by more than a power of two"


def check_q(q, y, s_per_elem, what):
    """e4m3 bytes q against y / s rounded to e4m3 with the kernel's own
    scales: at most 1e-3 of the bytes (at least one: a 1 x 384 row has 384)
    differ, each by one code."""
    import torch
    want = (y / s_per_elem).float().to(torch.float8_e4m3fn).view(torch.uint8)
    got = q.view(torch.uint8)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    diff = (got.int() - want.int())
    off = diff != 0
    if not off.numel():
        return
    count = int(off.sum().item())
    assert count <= max(1, off.numel() // 1000), f"{what}: {count} of {off.numel()} bytes differ"
    same_sign = (got[off] & 0x80) == (want[off] & 0x80)
    assert same_sign.all() and (diff[off].abs() <= 1).all(), f"{what}: a byte off by > 1 code"


def check_rel(got, want, tol, what):
    err = (got.double() - want).norm().item()
    ref = want.norm().item()
    assert err <= tol * max(ref, 1e-30), f"{what}: relative error {err / max(ref, 1e-30):.3e}"


def check_bf16(got, want, what):
    """bf16 output against float64: within one bf16 rounding (2^-8 relative)
    plus a floor for values near 0."""
    bound = want.abs() * 2.0 ** -8 + 2.0 ** -8 * want.abs().max().clamp(min=1e-30) * 2.0 ** -8
    bad = (got.double() - want).abs() > bound
    assert not bad.any(), f"{what}: {int(bad.sum())} values beyond one bf16 rounding"


def check_bf16_rounded(got, want, err, what):
    """bf16 output bit for bit against the float64 value rounded once
    (through fp32, round to nearest even), except where the GPU's fp32
    error bound err (a tensor like want) reaches another bf16 value: there
    any bf16 within [want - err, want + err] rounded. Prints how many
    values needed that slack; a kernel rounding toward zero fails."""
    import torch
    want, err = want.double(), err.double()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    g = got.double()
    nominal = want.float().bfloat16().double()
    lo = (want - err).float().bfloat16().double()
    hi = (want + err).float().bfloat16().double()
    bad = (g < lo) | (g > hi) | (torch.isnan(g) != torch.isnan(want))
    slack = int((g != nominal).sum())
    print(f"{what}: {slack} of {want.numel()} off the nominal bf16, within the bound")
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {want.numel()} values outside their bf16 bound; "
                           f"first got {g[bad][:3].tolist()} want {want[bad][:3].tolist()}")


# lingen.nn's tiny model: every block, one layer, widths the kernels take
TINY = dict(hidden=256, layers=1, q_heads=2, kv_heads=1, head_dim=128, experts=8, topk=2,
            expert_intermediate=128, shared_intermediate=128, vocab=512)


def rel(a, b):
    """|a - b| / |b| (L2, in float64 on the CPU)."""
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm().clamp(min=1e-30)).item()
