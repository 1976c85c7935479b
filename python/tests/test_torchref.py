"""lingen._torchref's quantisers (the torch form lingen.nn's CPU path, the
benches and the GPU tests use) on the CPU: every layout against
expectations computed here (numpy fp32 scales, dequantised values within
one e4m3 rounding, the tails and the per-expert placement), and bit for bit
against the C references (gen/ref) through build/bench/ref_time, which
runs a reference on given inputs (REF_TIME_LOAD) and writes its outputs
(REF_TIME_DUMP). Random cases print their seed (LINGEN_SEED replays)."""
import math
import os
import subprocess

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from lingen import _torchref as R  # noqa: E402

E4M3 = torch.float8_e4m3fn


def quant_input(gen, m, n):
    """x [m, n] bf16 as the C references' quantiser input: rows of varied
    magnitude, rows of +0 and -0, rows under the 1e-30 floor and far above
    448, outliers, an all-zero feature."""
    mags = torch.randint(-8, 9, (m, 1), generator=gen).double().exp2()
    kind = torch.randint(0, 101, (m,), generator=gen)
    mags[kind == 1] = 2.0 ** -120
    mags[kind == 2] = 2.0 ** 100
    x = (torch.randn(m, n, generator=gen, dtype=torch.float64) * mags).float()
    if m > 1:
        x[kind == 0] = 0.0
        x[kind == 3] = -0.0
        x[:, int(torch.randint(0, n, (1,), generator=gen))] = 0.0
    out = torch.randint(0, m * n, (max(m // 7, 1),), generator=gen)
    x.view(-1)[out] *= 40.0
    return x.bfloat16()


# ---------------------------------------------------- expectations

def np_scale(amax, round_scale):
    """docs/kernels.md 1.2 in numpy fp32: max(amax / 448, 1e-30), then
    the smallest power of two >= it."""
    s = np.maximum(np.float32(amax) / np.float32(448.0), np.float32(1e-30)).astype(np.float32)
    if round_scale:
        flat = s.reshape(-1)
        for i, v in enumerate(flat.tolist()):
            if math.isfinite(v):
                p = 2.0 ** math.ceil(math.log2(v))
                while p < v:
                    p *= 2
                while p / 2 >= v:
                    p /= 2
                flat[i] = p
    return torch.from_numpy(s)


def block_amax(x, rows, cols):
    """amax over rows x cols blocks of x [M, N] (partial blocks: the real
    elements), float64 (exact for bf16 values)."""
    m, n = x.shape
    out = torch.zeros(-(-m // rows), -(-n // cols), dtype=torch.float64)
    xa = x.double().abs()
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = xa[i * rows:(i + 1) * rows, j * cols:(j + 1) * cols].max()
    return out.numpy()


def check_payload(q, x, s_full, what):
    """q e4m3 = x / s (the fp32 quotient, as the kernels and gen/ref divide)
    rounded: |q - x / s| at most half an e4m3 step of x / s (subnormal step
    2^-9), signs kept (a zero's sign too)."""
    v = (x.float() / s_full.float()).double()
    qv = q.double()
    a = v.abs().clamp(min=2.0 ** -6)
    step = torch.exp2(torch.floor(torch.log2(a)) - 3)
    err = (qv - v).abs()
    assert (err <= step / 2 + 1e-12 * a).all(), f"{what}: a payload beyond one e4m3 rounding"
    assert (qv.abs() <= 448).all(), f"{what}: payload past 448"
    sign = q.view(torch.uint8) >> 7
    assert torch.equal(sign, torch.signbit(x.float()).to(torch.uint8)), f"{what}: a sign lost"


def check_dense(x, q, s, qt, st, round_scale, multiple, what):
    m, n = x.shape
    s_want = np_scale(block_amax(x, 1, 128), round_scale).t()
    assert s.shape == (n // 128, m) and torch.equal(s, s_want), f"{what} s"
    check_payload(q, x, s.t().repeat_interleave(128, 1), f"{what} q")
    st_want = np_scale(block_amax(x, 128, 1), round_scale)
    assert st.shape == (-(-m // 128), n) and torch.equal(st, st_want), f"{what} st"
    p = -(-m // multiple) * multiple
    assert qt.shape == (n, p), f"{what} qt {tuple(qt.shape)}"
    check_payload(qt[:, :m].t(), x, st.repeat_interleave(128, 0)[:m], f"{what} qt")
    assert not qt[:, m:].view(torch.uint8).any(), f"{what} qt: the pitch's tail not zeros"


@pytest.mark.parametrize("m", [1, 127, 128, 129, 6001])
@pytest.mark.parametrize("round_scale", [True, False])
def test_dense(seed, m, round_scale):
    gen = torch.Generator().manual_seed(seed + m)
    n = 256 if m > 1000 else 384
    x = quant_input(gen, m, n)
    q, s, qt, st = R.quant(x, round_scale)
    check_dense(x, q, s, qt, st, round_scale, 128, f"quant {m}x{n}")
    rq, rs = R.rowwise(x, round_scale)
    cq, cs = R.colwise(x, round_scale, multiple=1)
    assert torch.equal(rq.view(torch.uint8), q.view(torch.uint8)) and torch.equal(rs, s)
    assert torch.equal(cq.view(torch.uint8), qt[:, :m].view(torch.uint8)) and torch.equal(cs, st)
    assert R.quant(x, round_scale, output="rowwise")[2:] == (None, None)
    assert R.quant(x, round_scale, output="columnwise")[:2] == (None, None)
    rows, cols = R.deq_copies(q, s, qt, st)
    assert rows.shape == cols.shape == (m, n)
    assert torch.equal(rows, q.float() * s.t().repeat_interleave(128, 1))


def test_qt_pitch_is_the_library_declaration(monkeypatch):
    """QT_PITCH (the references' copy, the fallback without the library)
    agrees with the library's LG_QT_PITCH as qt_pitch reads it from the
    declarations (cross_entropy_quant's qt), and qt_pitch is that
    declaration's, not the fallback."""
    R._qt_dim.clear()
    assert R._declared_qt_dim() is not None, "the library's declaration not read"
    for m in (1, 16, 127, 128, 129, 6025, 8169, 8192, 2 ** 20 + 3):
        assert R.qt_pitch(m) == R.pitch(m) == -(-m // R.QT_PITCH) * R.QT_PITCH, m
    assert R.qt_pitch(1) == R.QT_PITCH
    monkeypatch.setattr(R, "_qt_dim", [None])  # no library: the fallback
    assert R.qt_pitch(129) == 256


def test_scale_edges():
    """Zero blocks get the floor (2^-99 with round_scale), an exact power of
    two stays, inf stays inf (as lg_ref_scale), float64 stays float64."""
    a = torch.tensor([0.0, 448.0, 448.0 * 3, 1e-40, float("inf")])
    assert R.scale_of(a, False).tolist()[:3] == [np.float32(1e-30), 1.0, 3.0]
    got = R.scale_of(a, True).tolist()
    assert got[:4] == [2.0 ** -99, 1.0, 4.0, 2.0 ** -99] and math.isinf(got[4])
    assert R.scale_of(a.double(), True).dtype == torch.float64


@pytest.mark.parametrize("round_scale", [True, False])
def test_weight(seed, round_scale):
    gen = torch.Generator().manual_seed(seed)
    for n, k in ((1, 128), (129, 384), (300, 256)):
        w = quant_input(gen, n, k)
        q, s, qt, st = R.weight(w, round_scale)
        s_want = np_scale(block_amax(w, 128, 128), round_scale)
        assert torch.equal(s, s_want), f"weight {n}x{k} s"
        full = s.repeat_interleave(128, 0).repeat_interleave(128, 1)[:n, :k]
        check_payload(q, w, full, f"weight {n}x{k} q")
        assert torch.equal(qt.view(torch.uint8), q.t().view(torch.uint8)) and torch.equal(st, s.t())
        assert torch.equal(R.deq_weight(q, s), q.float() * full)
        q2, s2 = R.weight(w, round_scale, transposed=False)
        assert torch.equal(q2.view(torch.uint8), q.view(torch.uint8)) and torch.equal(s2, s)
    e, n, k = 3, 256, 256
    w = quant_input(gen, e * n, k).view(e, n, k)
    q, s, qt, st = R.weight_experts(w, round_scale)
    for i in range(e):
        qi, si, qti, sti = R.weight(w[i], round_scale)
        assert torch.equal(q[i].view(torch.uint8), qi.view(torch.uint8)) and torch.equal(s[i], si)
        assert torch.equal(qt[i].view(torch.uint8), qti.view(torch.uint8)) and torch.equal(st[i], sti)


def random_counts(gen, m, experts):
    """Counts summing to m: 0, 1, 127, 128, 129 and random sizes, the last
    expert taking what is left."""
    special = [0, 1, 127, 128, 129]
    counts, left = [], m
    for e in range(experts):
        r = int(torch.randint(0, 10, (1,), generator=gen))
        c = special[r] if r < 5 else int(torch.randint(0, 2 * (m // experts) + 1, (1,), generator=gen))
        c = left if c > left or e + 1 == experts else c
        counts.append(c)
        left -= c
    return counts


def experts_input(seed, m, n, experts):
    """(x [m, n] bf16, counts (a list, printed), counts [E] int32)."""
    gen = torch.Generator().manual_seed(seed + m)
    x = quant_input(gen, m, n)
    counts = random_counts(gen, m, experts)
    print("counts", counts)
    return x, counts, torch.tensor(counts, dtype=torch.int32)


@pytest.mark.parametrize("m,experts", [(1, 1), (300, 5), (6001, 17)])
@pytest.mark.parametrize("round_scale", [True, False])
def test_experts(seed, m, experts, round_scale):
    """Each expert's segment quantised as a tensor of its own, at its place
    in the flat layouts; the loop form the same bytes; rows past the
    counts quantise as zeros."""
    n = 256
    x, counts, cdev = experts_input(seed, m, n, experts)
    q, s, qt, st = R.experts_quant(x, cdev, round_scale)
    lq, ls, lqt, lst = R.experts_quant_loop(x, counts, round_scale)
    assert torch.equal(q.view(torch.uint8), lq.view(torch.uint8)), "q: loop"
    assert torch.equal(s.reshape(-1), ls) and torch.equal(qt.reshape(-1).view(torch.uint8), lqt.view(torch.uint8))
    assert torch.equal(st[:lst.shape[0]], lst), "st: loop"
    sf, qtf = s.reshape(-1), qt.reshape(-1)
    start = trow = 0
    for e, c in enumerate(counts):
        if c == 0:
            continue
        xe = x[start:start + c]
        se = sf[start * n // 128:(start + c) * n // 128].view(n // 128, c)
        qte = qtf[start * n:(start + c) * n].view(n, c)
        nt = -(-c // 128)
        check_dense(xe, q[start:start + c], se, qte, st[trow:trow + nt], round_scale, 1, f"expert {e} ({c})")
        start, trow = start + c, trow + nt
    rows, cols = R.deq_experts(counts, q, s, qt, st)
    assert torch.equal(rows, R.deq_experts(cdev, lq, ls, lqt, lst)[0])
    # within an eighth of the largest value, or zero where the whole input is
    # under what the 1e-30 scale floor resolves (quant_input's tiny rows: at
    # m = 1 a seed in ~90 draws one, which failed this bound)
    floor = 1e-30 * 2.0 ** -9
    assert (rows - x.float()).abs().max() <= x.float().abs().max() / 8 + floor
    # rows past the segments (a capacity larger than the counts): zeros
    q2, s2, qt2, st2 = R.experts_quant(torch.cat([x, x[:5]]), cdev, round_scale)
    assert not q2[m:].view(torch.uint8).any()
    assert torch.equal(q2[:m].view(torch.uint8), q.view(torch.uint8))


# ------------------------------------------- bit for bit with gen/ref

def ref_time():
    lib = os.environ.get("LINGEN_LIBRARY")
    exe = os.path.join(os.path.dirname(lib), "bench", "ref_time") if lib else None
    if not exe or not os.access(exe, os.X_OK):
        pytest.skip("no build/bench/ref_time beside LINGEN_LIBRARY: the C references unreachable")
    return exe


def run_ref(tmp_path, spec, sizes, inputs):
    """The C reference of spec on inputs {argument index: tensor}: {argument
    index: raw bytes} of every buffer it wrote."""
    import json
    exe = ref_time()
    src, dst = tmp_path / "in", tmp_path / "out"
    src.mkdir(exist_ok=True), dst.mkdir(exist_ok=True)
    for i, t in inputs.items():
        (src / f"0.{i}").write_bytes(raw(t))
    env = dict(os.environ, REF_TIME_LOAD=str(src), REF_TIME_DUMP=str(dst), LINGEN_REF_THREADS="2")
    r = subprocess.run([exe, json.dumps(spec), ",".join(map(str, sizes))], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    out = {}
    for f in dst.iterdir():
        if not f.name.endswith(".slack"):
            out[int(f.name.split(".")[1])] = f.read_bytes()
    return out


def raw(t):
    return t.reshape(-1).contiguous().view(torch.uint8).numpy().tobytes()


def same_bytes(got, copies, what):
    """The C reference's buffers 1-4 (q, s, qt, st) equal to copies."""
    for i, (t, name) in enumerate(zip(copies, ("q", "s", "qt", "st")), 1):
        assert got[i] == raw(t), f"{what} {name}: not the C reference's bytes"


def spec(op, hidden, round_scale, **keys):
    return {"op": op, "pass": "forward", "dtype": "bf16", "hidden": hidden,
            "quant": {"round_scale": round_scale, "output": "both"}, **keys}


@pytest.mark.parametrize("op,m,n", [("fp8_quant", 1, 256), ("fp8_quant", 127, 256),
                                    ("fp8_quant", 6001, 256), ("fp8_quant_weight", 1, 384),
                                    ("fp8_quant_weight", 129, 384), ("fp8_quant_weight", 384, 384)])
@pytest.mark.parametrize("round_scale", [True, False])
def test_c_ref_dense(tmp_path, seed, op, m, n, round_scale):
    """fp8_quant's copies (quant) and fp8_quant_weight's with the transposed
    copy (weight), the C reference's bytes."""
    x = quant_input(torch.Generator().manual_seed(seed + m), m, n)
    weight = op == "fp8_quant_weight"
    keys = {"transposed": True} if weight else {}
    got = run_ref(tmp_path, spec(op, n, round_scale, **keys), [m], {0: x})
    same_bytes(got, (R.weight if weight else R.quant)(x, round_scale), f"{op} {m}x{n}")


@pytest.mark.parametrize("m,experts", [(1, 1), (6001, 17)])
@pytest.mark.parametrize("round_scale", [True, False])
def test_c_ref_experts(tmp_path, seed, m, experts, round_scale):
    n = 256
    x, counts, cdev = experts_input(seed, m, n, experts)
    got = run_ref(tmp_path, spec("fp8_quant_batched", n, round_scale), [m, experts], {0: x, 1: cdev})
    q, s, qt, st = R.experts_quant(x, cdev, round_scale)
    rows = sum(-(-c // 128) for c in counts)
    assert got[2] == raw(q) and got[3] == raw(s) and got[4] == raw(qt), "fp8_quant_batched q/s/qt"
    assert got[5][:rows * n * 4] == raw(st[:rows]), "fp8_quant_batched st"


# ------------------------------ the other kernels' forms, in numpy float64

def _np(t):
    return t.double().numpy()


def _close(got, want, tol=2e-6):
    got = got.double().numpy() if torch.is_tensor(got) else got
    assert np.abs(got - want).max() <= tol * max(np.abs(want).max(), 1e-30)


def _bf16(gen, *shape, scale=1.0):
    return (torch.randn(*shape, generator=gen) * scale).bfloat16()


def test_rms_norm_and_backward(seed):
    gen = torch.Generator().manual_seed(seed)
    x, w, dy = _bf16(gen, 37, 256), 1 + _bf16(gen, 256, scale=0.1), _bf16(gen, 37, 256)
    xd, wd, gd = _np(x), _np(w), _np(dy)
    r = 1 / np.sqrt((xd ** 2).mean(-1, keepdims=True) + 1e-6)
    y, rr = R.rms_norm(x, w)
    assert y.dtype == torch.bfloat16 and rr.dtype == torch.float32
    _close(rr, r[:, 0]), _close(y, xd * r * wd, 2 ** -8)
    # dx = r w dy - r^3 x sum(x w dy) / n, dw = sum over rows of dy x r
    dot = (xd * wd * gd).sum(-1, keepdims=True)
    dx, dw = R.rms_norm_backward(dy, x, w, rr)
    _close(dx, r * wd * gd - r ** 3 * xd * dot / 256, 2 ** -7)
    _close(dw, (gd * xd * r).sum(0), 1e-5)
    q, s, r2, qt, st = R.rms_norm_quant(x, w)  # the copies of the fp32 y
    want = R.quant(R.rms_norm_fp32(x, w)[0])
    assert torch.equal(r2, rr) and all(torch.equal(a.float(), b.float())
                                       for a, b in zip((q, s, qt, st), want))


def test_group_rms_norm_gate(seed):
    gen = torch.Generator().manual_seed(seed)
    x, gate, w = _bf16(gen, 2, 9, 64), _bf16(gen, 9, 2, 64), 1 + _bf16(gen, 64, scale=0.1)
    xg = _np(x).reshape(2, 9, 4, 16)
    y = (xg / np.sqrt((xg ** 2).mean(-1, keepdims=True) + 1e-6)).reshape(2, 9, 64) * _np(w)
    want = y.transpose(1, 0, 2) / (1 + np.exp(-_np(gate)))
    _close(R.group_rms_norm_gate(x, gate, w, 4), want, 2 ** -7)


def test_swiglu_and_backward(seed):
    gen = torch.Generator().manual_seed(seed)
    x, g, p = _bf16(gen, 40, 256), _bf16(gen, 40, 128), torch.rand(40, generator=gen)
    a, u, gd, pd = _np(x[:, :128]), _np(x[:, 128:]), _np(g), _np(p)[:, None]
    sig = 1 / (1 + np.exp(-a))
    _close(R.swiglu(x), a * sig * u), _close(R.swiglu(x, p), a * sig * u * pd)
    dx, dp = R.swiglu_backward(g, x, p)
    da = gd * pd * u * (sig + a * sig * (1 - sig))  # d silu(a) / da = s + a s (1 - s)
    _close(dx, np.concatenate([da, gd * pd * a * sig], 1), 1e-5)
    _close(dp, (gd * a * sig * u).sum(-1), 1e-5)
    counts = torch.tensor([0, 17, 23], dtype=torch.int32)
    got = R.batch_swiglu_quant_backward(g, x, p, counts)
    want = R.experts_quant(dx, counts)
    assert all(torch.equal(a.float(), b.float()) for a, b in zip(got[:4], want))
    assert torch.equal(got[4], dp)


def test_cross_entropy(seed):
    gen = torch.Generator().manual_seed(seed)
    x = _bf16(gen, 33, 1000, scale=3.0)
    y = torch.randint(0, 1000, (33,), generator=gen)
    y[::5] = -100
    g = torch.rand(33, generator=gen) + 0.5
    xd, live = _np(x), (y != -100).numpy()
    m = xd.max(-1)
    s = np.exp(xd - m[:, None]).sum(-1)
    yy = np.where(live, y.numpy(), 0)
    loss = np.where(live, np.log(s) + m - xd[np.arange(33), yy], 0.0)
    got, gs, gm = R.cross_entropy_forward(x, y, -100)
    _close(got, loss, 1e-6), _close(gs, s), _close(gm, m, 0)
    p = np.exp(xd - m[:, None]) / s[:, None]
    p[np.arange(33), yy] -= 1
    want = np.where(live[:, None], p * _np(g)[:, None], 0.0)
    _close(R.cross_entropy_backward(x, y, gs, gm, g, -100), want, 2 ** -7)
    loss1, grad1 = R.cross_entropy_fused(x, y, None, -100)
    _close(grad1, np.where(live[:, None], p, 0.0), 2 ** -7)


@pytest.mark.parametrize("interleaved, transposed, rotary", [(False, False, 1.0),
                                                              (True, True, 0.5)])
def test_qk_norm_rope(seed, interleaved, transposed, rotary):
    gen = torch.Generator().manual_seed(seed)
    S, B, H, h, D = 7, 2, 4, 2, 32
    qkv = _bf16(gen, *((S, B) if transposed else (B, S)), (H + 2 * h) * D)
    qw, kw = 1 + _bf16(gen, D, scale=0.1), 1 + _bf16(gen, D, scale=0.1)
    rr = int(rotary * D)
    f = np.arange(S)[:, None] * 10000.0 ** (-2.0 * (np.arange(rr) % (rr // 2)) / rr)
    q, k, v = R.qk_norm_rope(qkv, qw, kw, torch.tensor(f, dtype=torch.float32), H, h,
                             rotary_fraction=rotary, interleaved=interleaved,
                             transposed=transposed)
    xd = _np(qkv)
    xd = (xd.transpose(1, 0, 2) if transposed else xd).reshape(B, S, H + 2 * h, D)
    per = H // h
    slots = ([g * (per + 2) + j for g in range(h) for j in range(per)],
             [g * (per + 2) + per for g in range(h)], [g * (per + 2) + per + 1 for g in range(h)])
    if not interleaved:
        slots = (list(range(H)), list(range(H, H + h)), list(range(H + h, H + 2 * h)))
    ang = np.float32(f[:, :rr // 2])  # the fp32 angles
    for got, idx, wt in ((q, slots[0], qw), (k, slots[1], kw)):
        for b in range(B):
            for s in range(S):
                for j, hd in enumerate(idx):
                    u = xd[b, s, hd]
                    y = u / np.sqrt((u ** 2).mean() + 1e-6) * _np(wt)
                    c, sn = np.cos(ang[s]), np.sin(ang[s])
                    a, z = y[:rr // 2], y[rr // 2:rr]
                    want = np.concatenate([a * c - z * sn, z * c + a * sn, y[rr:]])
                    _close(got[b, s, j], want, 2 ** -7)
    assert torch.equal(v, qkv.transpose(0, 1).reshape(B, S, H + 2 * h, D)[:, :, slots[2]]
                       if transposed else qkv.view(B, S, H + 2 * h, D)[:, :, slots[2]])


def test_moe_row_map_permute_unpermute(seed):
    gen = torch.Generator().manual_seed(seed)
    T, E, k, mult = 23, 6, 2, 4
    topk = torch.rand(T, E, generator=gen).topk(k, -1).indices.int()
    rid, counts, offsets, row_index, padded = R.row_map_topk(topk, E, mult)
    rows = R.rows_bound(T, k, E, mult)
    sel = [sorted(r) for r in topk.tolist()]
    want_rid = np.full((T, E), -1)
    want_index = np.full(rows, -1)
    start = 0
    for e in range(E):
        mine = [t for t in range(T) if e in sel[t]]
        assert counts[e] == len(mine) and padded[e] == -(-len(mine) // mult) * mult
        assert offsets[e] == start
        for i, t in enumerate(mine):
            want_rid[t, e], want_index[start + i] = start + i, t
        start += int(padded[e])
    assert (rid.numpy() == want_rid).all() and (row_index.numpy() == want_index).all()
    x, probs = _bf16(gen, T, 8), torch.rand(T, E, generator=gen)
    out, pp = R.permute(x, probs, row_index, padded)
    for t in range(T):
        for e in sel[t]:
            assert torch.equal(out[want_rid[t, e]], x[t]) and pp[want_rid[t, e]] == probs[t, e]
    assert not out[torch.from_numpy(want_index < 0)].any()
    back = R.unpermute(out.float(), row_index, padded, T)
    assert torch.equal(back, k * x.float())
