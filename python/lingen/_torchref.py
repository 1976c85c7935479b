"""The torch form of lingen's kernels' math, in one place: what lingen.nn
runs on the CPU, what the benches time as the eager / torch.compile peer,
and what python/tests compares the kernels with. Blockwise FP8 (e4m3) as
docs/kernels.md 1.2-1.3 and the C references (gen/ref/quant_ref.c,
numeric_ref.c) state it, bit for bit with the C references:

- the scale of a block of absolute maximum amax: s = max(amax / 448,
  1e-30) in fp32 (float64 where amax is float64: the GPU tests' float64
  references); round_scale: 2^ceil(log2 s) (exact, by the exponent);
- the payload e4m3(v / s), v the fp32 value (round to nearest even);
- a partial last block takes its amax over its real rows (absent rows 0).

Layouts (as lingen's kernels write them):
- rowwise x [M, K]: q [M, K] e4m3, s [K/128, M] fp32 (1 x 128 blocks);
- columnwise: qt [K, round_up(M, 128)] e4m3 (QT_PITCH: rows 128-byte
  aligned for the wgrad's TMA, zeros past M), st [cdiv(M, 128), K] fp32
  (128 x 1 blocks);
- weight w [N, K]: q [N, K], s [cdiv(N, 128), cdiv(K, 128)] (128 x 128
  tiles), the transposed copy qt [K, N], st [cdiv(K, 128), cdiv(N, 128)];
- per expert (segments of rows given by counts [E], any counts; each
  segment quantised as a tensor of its own): s flat, expert e's [K/128,
  c_e] block at K/128 * off_e; qt flat, expert e's [K, c_e] block at K *
  off_e (no padding); st [cdiv(M, 128) + E, K], expert e's cdiv(c_e, 128)
  rows (its 128-row blocks from its first row) at row sum of cdiv(c_e',
  128) over the experts before it.
"""
import torch

E4M3 = torch.float8_e4m3fn
FMAX = 448.0
BLOCK = 128
# The row pitch of the dense quantisers' columnwise copies: qt [K,
# round_up(M, QT_PITCH)], every 128-token tile's line a whole 128 bytes
# (LG_QT_PITCH in gen/core/family.h: at round_up(M, 16) the lines straddled
# 32-byte L2 sectors, fp8_quant 1.07-1.10x slower at 6025 and 8169 tokens).
# The library owns it: qt_pitch reads it from the declarations; this copy is
# the references' and the fallback without the library (python/tests/
# test_torchref.py checks the two agree).
QT_PITCH = 128


def _wide(x):
    """x as fp32, or as it is when float64."""
    return x if x.dtype == torch.float64 else x.float()


def scale_of(amax, round_scale=True):
    """The scale of a block of absolute maximum amax (fp32; float64 for a
    float64 amax)."""
    s = (_wide(amax) / FMAX).clamp(min=1e-30)
    if round_scale:  # 2^ceil(log2 s) by the exponent (log2 of 2^k need not be exact)
        m, e = torch.frexp(s)
        s = torch.where((m == 0.5) | torch.isinf(s), s, torch.ldexp(torch.ones_like(s), e))
    return s


def quantize(x, s):
    """e4m3(x / s), x as fp32 (s broadcast to x; never past 448 since s >=
    amax / 448)."""
    return (x.float() / s).to(E4M3)


def pitch(m, multiple=QT_PITCH):
    """round_up(m, multiple): the row pitch of a columnwise copy of m tokens
    (the dense quantisers' QT_PITCH, 128; an expert's block in the
    per-expert layout 1)."""
    return -(-m // multiple) * multiple


_qt_dim = []


def _declared_qt_dim():
    """qt's row dimension as the library declares it (cross_entropy_quant's
    qt [vocab, pick(qt_pitch, round_up(tokens, 128), qt_pitch)], the
    LG_QT_PITCH of gen/core/family.h), an ast node; None without a library
    (looked for once)."""
    if not _qt_dim:
        from . import _families, _lib
        try:
            decl = _families.families()["cross_entropy_quant"].passes["forward"]
            _qt_dim.append(decl.arg("qt").dims[1])
        except _lib.LibraryError:
            _qt_dim.append(None)
    return _qt_dim[0]


def qt_pitch(m):
    """The row pitch of a dense columnwise copy of m tokens (the buffers
    lingen's kernels write qt into): the library's declaration evaluated at
    m tokens (qt_pitch 0: the tokens' own pitch); without the library
    pitch(m), round_up(m, QT_PITCH)."""
    dim = _declared_qt_dim()
    if dim is None:
        return pitch(m)
    from ._families import eval_dim
    return eval_dim(dim, {"tokens": m, "qt_pitch": 0})


def row_scales(x, round_scale=True):
    """s [K/128, M] of x [M, K] (1 x 128 blocks; float64 for a float64 x)."""
    m, k = x.shape
    return scale_of(_wide(x).view(m, k // BLOCK, BLOCK).abs().amax(-1), round_scale).t()


def _padded_rows(x):
    m, k = x.shape
    nb = -(-m // BLOCK)
    return torch.nn.functional.pad(_wide(x), (0, 0, 0, nb * BLOCK - m)).view(nb, BLOCK, k)


def col_scales(x, round_scale=True):
    """st [cdiv(M, 128), K] of x [M, K] (128 x 1 blocks, a last partial
    block's missing rows counting as 0; float64 for a float64 x)."""
    return scale_of(_padded_rows(x).abs().amax(1), round_scale)


def rowwise(x, round_scale=True):
    """(q [M, K], s [K/128, M]) of x [M, K] (K a multiple of 128)."""
    m, k = x.shape
    xf = x.float()
    s = row_scales(xf, round_scale)
    return quantize(xf.view(m, k // BLOCK, BLOCK), s.t()[..., None]).view(m, k), s.contiguous()


def colwise(x, round_scale=True, multiple=QT_PITCH):
    """(qt [K, round_up(M, multiple)], st [cdiv(M, 128), K]) of x [M, K]
    (qt's columns past M: zeros, as the kernels write them)."""
    m, k = x.shape
    pad = _padded_rows(x)
    st = scale_of(pad.abs().amax(1), round_scale)
    q = quantize(pad, st[:, None, :]).view(-1, k)[:pitch(m, multiple)]
    return q.t().contiguous(), st


def quant(x, round_scale=True, output="both", multiple=QT_PITCH):
    """(q, s, qt, st) of x [M, K] (fp8_quant's layouts; output "rowwise" or
    "columnwise": the other copy None)."""
    q, s = rowwise(x, round_scale) if output != "columnwise" else (None, None)
    qt, st = colwise(x, round_scale, multiple) if output != "rowwise" else (None, None)
    return q, s, qt, st


def weight(w, round_scale=True, transposed=True):
    """(q [N, K], s [cdiv(N, 128), cdiv(K, 128)], qt [K, N], st) of w [N, K]
    in 128 x 128 tiles (the transposed copy: the same tiles transposed);
    transposed=False: (q, s), as lingen.fp8_quant_weight."""
    n, k = w.shape
    bn, bk = -(-n // BLOCK), -(-k // BLOCK)
    pad = torch.nn.functional.pad(w.float(), (0, bk * BLOCK - k, 0, bn * BLOCK - n))
    t = pad.view(bn, BLOCK, bk, BLOCK)
    s = scale_of(t.abs().amax(dim=(1, 3)), round_scale)
    q = quantize(t, s[:, None, :, None]).view(bn * BLOCK, bk * BLOCK)[:n, :k].contiguous()
    if not transposed:
        return q, s
    return q, s, q.t().contiguous(), s.t().contiguous()


def weight_experts(w, round_scale=True):
    """(q, s, qt, st) of expert weights w [E, N, K] (N a multiple of 128):
    q [E, N, K], s [E, N/128, cdiv(K, 128)], qt [E, K, N], st [E, ., .]."""
    e, n, k = w.shape
    q, s, qt, st = weight(w.reshape(e * n, k), round_scale)
    return (q.view(e, n, k), s.view(e, n // BLOCK, -1)) + experts_transposed(qt, st, e)


def experts_transposed(qt, st, experts):
    """The experts' transposed copies (qt [E, K, N], st [E, cdiv(K, 128),
    N/128]) of the transposed copy (qt [K, E N], st [cdiv(K, 128), E N/128])
    of expert weights quantised as one [E N, K] weight (fp8_quant_weight's;
    N a multiple of 128, so that no tile spans two experts: the same tiles
    and bytes as each expert's own). A copy of whole N-byte row pieces,
    moved as 8-byte words (coalesced on both sides), where transposing q
    would move single bytes at a stride of K."""
    k, en = qt.shape
    n = en // experts
    words = qt.view(torch.uint8).view(k, experts, n).view(torch.int64)
    qe = words.transpose(0, 1).contiguous().view(torch.uint8).view(E4M3)
    se = st.view(st.shape[0], experts, -1).transpose(0, 1).contiguous()
    return qe, se


# ------------------------------------------------- per-expert layouts

def _segments(counts, m):
    """(expert [M], local [M], off [E + 1], valid [M]) of the rows of
    per-expert segments counts [E] (on the device, no synchronisation)."""
    ends = torch.cumsum(counts.long(), 0)
    off = torch.nn.functional.pad(ends, (1, 0))
    r = torch.arange(m, device=counts.device)
    # (the boundaries a buffer of their own: inductor's bucketize takes no slice of one)
    e = torch.bucketize(r, ends, right=True).clamp(max=counts.shape[0] - 1)
    return e, r - off[e], off, r < off[-1]


def _flat_index(counts, m, k, blk):
    """The flat per-expert index [M, k/blk] of element (row, column block) in
    a [k/blk, c_e] block an expert (s with blk 128; qt with blk 1); rows
    past the segments index k/blk * M (one past the end: a dummy slot)."""
    e, local, off, valid = _segments(counts, m)
    kk = k // blk
    cols = torch.arange(kk, device=counts.device)
    idx = (kk * off[e] + local)[:, None] + cols[None, :] * counts.long()[e][:, None]
    return torch.where(valid[:, None], idx, kk * m), valid


def _col_blocks(counts, m):
    """(block [M], valid [M]): each row's st row in the per-expert
    columnwise layout (an expert's 128-row blocks from its first row, the
    experts' blocks one after the other); rows past the segments block
    cdiv(M, 128) + E, one past st's rows."""
    e, local, _, valid = _segments(counts, m)
    nb = (counts.long() + BLOCK - 1) // BLOCK
    first = torch.nn.functional.pad(torch.cumsum(nb, 0), (1, 0))
    return torch.where(valid, first[e] + local // BLOCK, -(-m // BLOCK) + counts.shape[0]), valid


def experts_quant(x, counts, round_scale=True):
    """(q, s, qt, st) of x [M, K] quantised per expert in the per-expert
    layouts; rows past the segments quantise as 0."""
    m, k = x.shape
    idx_s, valid = _flat_index(counts, m, k, BLOCK)
    x = torch.where(valid[:, None], x, torch.zeros((), dtype=x.dtype, device=x.device))
    q, s_std = rowwise(x, round_scale)
    s = torch.ones(k // BLOCK * m + 1, dtype=torch.float32, device=x.device)
    s = s.scatter(0, idx_s.reshape(-1), s_std.t().reshape(-1))[:-1].view(k // BLOCK, m)
    blk, _ = _col_blocks(counts, m)
    rows = -(-m // BLOCK) + counts.shape[0]
    xf = x.float()
    amax = xf.new_zeros(rows + 1, k).index_reduce_(0, blk, xf.abs(), "amax")
    st = scale_of(amax, round_scale)
    qt_rows = quantize(xf, st[blk])  # [M, K] in x's row order, each row with its block's scales
    idx_t, _ = _flat_index(counts, m, k, 1)
    qt = torch.zeros(k * m + 1, dtype=torch.uint8, device=x.device)
    qt = qt.scatter(0, idx_t.reshape(-1), qt_rows.view(torch.uint8).reshape(-1))[:-1]
    return q, s, qt.view(E4M3).view(k, m), st[:rows]


def experts_quant_loop(x, counts, round_scale=True):
    """experts_quant as a loop over the experts (counts a list of ints: what
    linghe's tests compare with): (q [sum, K], s flat, qt flat, st [sum of
    cdiv(c_e, 128), K]), each expert's copies by rowwise and colwise
    (pitch 1), concatenated (the layouts' flat order)."""
    qs, ss, qts, sts = [], [], [], []
    start = 0
    for c in counts:
        if c:
            q, s, qt, st = quant(x[start:start + c], round_scale, multiple=1)
            qs.append(q), ss.append(s.reshape(-1)), qts.append(qt.reshape(-1)), sts.append(st)
        start += c
    return torch.cat(qs), torch.cat(ss), torch.cat(qts), torch.cat(sts)


# ------------------------------------------------------- dequantise

def deq_rowwise(q, s, dtype=torch.float32):
    """x [M, K] of a rowwise copy (q [M, K], s [K/128, M])."""
    return (q.to(dtype) * s.t().to(dtype).repeat_interleave(BLOCK, 1)[:, :q.shape[1]])


def deq_colwise(qt, st, dtype=torch.float32, m=None):
    """x [M, K] of a columnwise copy (qt [K, round_up(M, 128)], st [cdiv(M,
    128), K]); m None: x [round_up(M, 128), K], the rows past M zeros (a
    product over the tokens the same)."""
    p = qt.shape[1] if m is None else m
    return qt[:, :p].t().to(dtype) * st.to(dtype).repeat_interleave(BLOCK, 0)[:p]


def deq_weight(q, s, dtype=torch.float32):
    """w [..., N, K] of 128 x 128 tiles (q [..., N, K], s [..., N/128, K/128])."""
    n, k = q.shape[-2:]
    full = s.to(dtype).repeat_interleave(BLOCK, -2).repeat_interleave(BLOCK, -1)
    return q.to(dtype) * full[..., :n, :k]


def deq_experts_rowwise(q, s, counts, dtype=torch.float32):
    """x [M, K] of a per-expert rowwise copy; rows past the segments 0."""
    m, k = q.shape
    idx, valid = _flat_index(counts, m, k, BLOCK)
    sf = s.reshape(-1)[idx.clamp(max=s.numel() - 1)]  # [M, K/128]
    x = q.to(dtype) * sf.to(dtype).repeat_interleave(BLOCK, 1)
    return torch.where(valid[:, None], x, torch.zeros((), dtype=dtype, device=q.device))


def deq_experts_colwise(qt, st, counts, dtype=torch.float32):
    """x [M, K] of a per-expert columnwise copy (qt [K, M] holding per-expert
    [K, c_e] blocks, st); rows past the segments 0."""
    k, m = qt.shape
    idx, valid = _flat_index(counts, m, k, 1)
    x = qt.reshape(-1).view(torch.uint8)[idx.clamp(max=qt.numel() - 1)].view(E4M3).to(dtype)
    blk, _ = _col_blocks(counts, m)
    x = x * st.to(dtype)[blk.clamp(max=st.shape[0] - 1)]
    return torch.where(valid[:, None], x, torch.zeros((), dtype=dtype, device=qt.device))


def deq_copies(q, s, qt, st, dtype=torch.float32):
    """(rows, cols): both copies of fp8_quant's layouts back to x [M, K] (a
    copy left out: None; cols without q: [round_up(M, 128), K])."""
    rows = None if q is None else deq_rowwise(q, s, dtype)
    cols = None if qt is None else deq_colwise(qt, st, dtype, None if q is None else q.shape[0])
    return rows, cols


def deq_experts(counts, q, s, qt, st, dtype=torch.float32):
    """(rows, cols): both per-expert copies back to x [M, K] (counts [E]
    or a list of ints)."""
    if not torch.is_tensor(counts):
        counts = torch.tensor(counts, dtype=torch.int32, device=q.device)
    return (deq_experts_rowwise(q, s, counts, dtype),
            deq_experts_colwise(qt.reshape(q.shape[1], -1), st, counts, dtype))


# --------------------------------------------------- RMSNorm (K1, K1b)
#
# The forms below compute in fp32 (float64 for float64 inputs), as the
# kernels do (docs/kernels.md: fp32 accumulation, eps inside the root,
# bf16 outputs rounded once from fp32, and an FP8 copy quantised from the
# fp32 value, never from a bf16 one); differentiable by torch autograd.

def rms_norm_fp32(x, w, eps=1e-6):
    """(y, r): y = x * r * w in fp32 with r = rsqrt(mean(x^2) + eps) over
    the last dimension (r [...], fp32)."""
    xf = _wide(x)
    r = torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
    return xf * r * w.to(xf.dtype), r.squeeze(-1)


def rms_norm(x, w, eps=1e-6):
    """(y in x's dtype, r [...] fp32): RMSNorm's forward (K1b)."""
    y, r = rms_norm_fp32(x, w, eps)
    return y.to(x.dtype), r


def rms_norm_backward(dy, x, w, r):
    """(dx in x's dtype, dw fp32 [H]) of dy, x [T, H] and the forward's r [T]."""
    xf, g = _wide(x), _wide(dy)
    r = r[:, None]
    gw = g * w.to(xf.dtype)
    dot = (xf * gw).sum(-1, keepdim=True)
    dx = r * gw - r * r * r * xf * dot / x.shape[-1]
    return dx.to(x.dtype), (g * xf * r).sum(0)


def rms_norm_quant(x, w, eps=1e-6, round_scale=True):
    """(q, s, r, qt, st) of x [T, H] (K1: the copies of the fp32 y)."""
    y, r = rms_norm_fp32(x, w, eps)
    q, s, qt, st = quant(y, round_scale)
    return q, s, r, qt, st


def group_rms_norm_gate(x, gate, w, groups, eps=1e-6):
    """y [L, B, dim] in x's dtype = group RMSNorm(x [B, L, dim]) * w *
    sigmoid(gate [L, B, dim]) (K8), in fp32."""
    b, l, dim = x.shape
    xg = _wide(x).view(b, l, groups, dim // groups)
    y = (xg * torch.rsqrt(xg.square().mean(-1, keepdim=True) + eps)).view(b, l, dim)
    return ((y * w.to(y.dtype)).transpose(0, 1) * torch.sigmoid(_wide(gate))).to(x.dtype)


# ------------------------------------------------ router GEMM (K3)

def router_gemm(x, w):
    """fp32 logits x . w^T of x [T, H] and w [E, H] (upcast copies)."""
    return x.float() @ w.float().t()


def router_gemm_backward(dy, x, w):
    """(dx in x's dtype, dw fp32) of fp32 dy [T, E]."""
    return (dy @ w.float()).to(x.dtype), dy.t() @ x.float()


# ------------------------------------------------ q/k norm + RoPE (K2)

def qk_norm_rope(qkv, qw, kw, freqs, q_heads, kv_heads, eps=1e-6, rotary_fraction=0.5,
                 interleaved=False, transposed=False, silu=False, mscale=1.0):
    """(q [B, S, H, D], k, v [B, S, h, D]) in qkv's dtype of qkv [B, S,
    (H + 2h) D] ([S, B, .] when transposed; heads per kv group [H/h q, k,
    v] when interleaved, else q | k | v): q and k RMSNorm over D (weights
    qw, kw [D]), then rotate-half RoPE over the first R = rotary_fraction
    * D of each head by the angles freqs[s, :R/2] (freqs [S, >= R/2], the
    cat(f, f) layout's first half), cos and sin times mscale; silu: SiLU
    on qkv first. In fp32 (float64 for float64 qkv)."""
    x = _wide(qkv.transpose(0, 1) if transposed else qkv)
    b, s, width = x.shape
    heads = q_heads + 2 * kv_heads
    d = width // heads
    x = x.reshape(b, s, heads, d)
    if silu:
        x = x * torch.sigmoid(x)
    if interleaved:
        per = q_heads // kv_heads
        g = x.view(b, s, kv_heads, per + 2, d)
        q, k, v = g[:, :, :, :per].reshape(b, s, q_heads, d), g[:, :, :, per], g[:, :, :, per + 1]
    else:
        q, k, v = x.split([q_heads, kv_heads, kv_heads], 2)
    half = int(rotary_fraction * d) // 2
    ang = freqs[:s, :half].to(x.dtype)
    c, sn = ang.cos()[None, :, None] * mscale, ang.sin()[None, :, None] * mscale

    def norm_rope(u, wt):
        y = u * torch.rsqrt(u.square().mean(-1, keepdim=True) + eps) * wt.to(x.dtype)
        a, z = y[..., :half], y[..., half:2 * half]
        return torch.cat([a * c - z * sn, z * c + a * sn, y[..., 2 * half:]], -1).to(qkv.dtype)
    return norm_rope(q, qw), norm_rope(k, kw), v.to(qkv.dtype).contiguous()


# ------------------------------------------------- SwiGLU (K6, K7)

def swiglu(x, prob=None):
    """y [..., n] fp32 = silu(gate) * up (* prob per row) of x [..., 2n] =
    [gate | up] (prob [rows] or [rows, 1])."""
    n = x.shape[-1] // 2
    a, u = _wide(x[..., :n]), _wide(x[..., n:])
    y = a * torch.sigmoid(a) * u
    return y if prob is None else y * _wide(prob).reshape(y.shape[:-1] + (1,))


def swiglu_backward(g, x, prob=None):
    """(dx [..., 2n] fp32, dprob [rows] fp32) of dy = g [..., n]: dgate = g
    p u s (1 + a (1 - s)), dup = g p silu(a) (s = sigmoid(a), p = prob or
    1), dprob = sum of g silu(a) u over the row."""
    n = x.shape[-1] // 2
    a, u, gf = _wide(x[..., :n]), _wide(x[..., n:]), _wide(g)
    s = torch.sigmoid(a)
    gp = gf if prob is None else gf * _wide(prob).reshape(gf.shape[:-1] + (1,))
    dx = torch.cat([gp * u * s * (1 + a * (1 - s)), gp * a * s], -1)
    return dx, (a * s * u * gf).sum(-1)


def swiglu_quant(x, round_scale=True):
    """(q, s, qt, st) of swiglu(x) (K7's forward: the fp32 y quantised)."""
    return quant(swiglu(x), round_scale)


def swiglu_quant_backward(g, x, round_scale=True):
    """(q, s, qt, st) of K7's fp32 dx."""
    return quant(swiglu_backward(g, x)[0], round_scale)


def batch_swiglu_quant(x, prob, counts, round_scale=True):
    """(q, s, qt, st) of swiglu(x, prob) quantised per expert (K6)."""
    return experts_quant(swiglu(x, prob), counts, round_scale)


def batch_swiglu_quant_backward(g, x, prob, counts, round_scale=True):
    """(q, s, qt, st, dprob [rows]) of K6's fp32 dx, quantised per expert."""
    dx, dprob = swiglu_backward(g, x, prob)
    return (*experts_quant(dx, counts, round_scale), dprob)


# ---------------------------------------------- cross entropy (K9)

def _labels(y, ignore_index):
    live = torch.ones_like(y, dtype=torch.bool) if ignore_index is None else y != ignore_index
    return torch.where(live, y, 0).long()[:, None], live


def cross_entropy_forward(x, y, ignore_index=None):
    """(loss, S, m) per row of logits x [rows, V] in fp32: m = max x, S =
    sum exp(x - m), loss = log S + m - x_y (0 on a row whose label is
    ignore_index)."""
    xf = _wide(x)
    m = xf.max(-1).values
    s = torch.exp(xf - m[:, None]).sum(-1)
    yy, live = _labels(y, ignore_index)
    loss = torch.log(s) + m - xf.gather(1, yy)[:, 0]
    return torch.where(live, loss, 0.0), s, m


def cross_entropy_backward(x, y, s, m, g, ignore_index=None):
    """(softmax - onehot(y)) * g per row in x's dtype (g [rows], or [1]
    for every row; 0 on ignored rows)."""
    p = torch.exp(_wide(x) - m[:, None]) / s[:, None]
    yy, live = _labels(y, ignore_index)
    p = p.scatter_add(1, yy, -torch.ones_like(p[:, :1]))
    return torch.where(live[:, None], p * g.reshape(-1, 1), 0.0).to(x.dtype)


def cross_entropy_quant(x, y, s, m, g, ignore_index=None, round_scale=True, output="both"):
    """(q, s, qt, st) of lingen's cross_entropy_quant: the gradient
    cross_entropy_backward gives in x's dtype (bf16), quantised as
    fp8_quant (the kernel's copies bit for bit but for the exp's rounding
    here and there: torch's exp, not ex2.approx)."""
    return quant(cross_entropy_backward(x, y, s, m, g, ignore_index), round_scale, output)


def cross_entropy_fused(x, y, g=None, ignore_index=None):
    """(loss, grad) of the fused forward (g None: 1 for every row)."""
    loss, s, m = cross_entropy_forward(x, y, ignore_index)
    return loss, cross_entropy_backward(x, y, s, m, torch.ones_like(s) if g is None else g,
                                        ignore_index)


# -------------------------------------- MoE row map, permute (K4, K5)
#
# Without host synchronisation (no nonzero): lingen.nn's CPU path runs
# them under torch.compile(fullgraph=True).

def rows_bound(tokens, top_k, experts, multiple):
    """R, the padded rows' bound: tokens * top_k + experts * (multiple - 1)."""
    return tokens * top_k + experts * (multiple - 1)


def row_map(mask, top_k, multiple=16):
    """(row_id_map [T, E] int32, counts [E], offsets [E + 1], row_index [R],
    padded_counts [E]) of the routing mask [T, E] (bool or 0 / 1): each
    expert's tokens in token order from offsets[e] (its count padded to a
    multiple of multiple), -1 where not routed; row_index: each row's
    token, -1 on padding rows (moe_row_map)."""
    t, experts = mask.shape
    m = (mask != 0).to(torch.int32)
    counts = m.sum(0, dtype=torch.int32)
    padded = (counts + multiple - 1) // multiple * multiple
    offsets = torch.nn.functional.pad(torch.cumsum(padded, 0, dtype=torch.int32), (1, 0))
    rank = torch.cumsum(m, 0, dtype=torch.int32) - m
    rid = torch.where(m > 0, offsets[:-1][None, :] + rank, -1).to(torch.int32)
    rows = rows_bound(t, top_k, experts, multiple)
    tok = torch.arange(t, dtype=torch.int32, device=mask.device)[:, None].expand(t, experts)
    dest = torch.where(rid >= 0, rid, rows).long().reshape(-1)
    row_index = torch.full((rows + 1,), -1, dtype=torch.int32, device=mask.device).scatter(
        0, dest, tok.reshape(-1))
    return rid, counts, offsets, row_index[:rows].contiguous(), padded


def row_map_topk(topk, experts, multiple=16):
    """row_map of top-k indices [T, k] (each token's k distinct experts)."""
    mask = torch.zeros(topk.shape[0], experts, dtype=torch.int32, device=topk.device)
    return row_map(mask.scatter(1, topk.long(), 1), topk.shape[1], multiple)


def row_experts(row_index, padded):
    """(expert [R], real [R]): each padded row's expert and whether it holds
    a token."""
    e, _, _, valid = _segments(padded, row_index.shape[0])
    return e, valid & (row_index >= 0)


def permute(x, probs, row_index, padded):
    """(rows [R, H], rows_probs [R]): x[t] and probs[t, e] at each of token
    t's rows (e the row's expert), zeros on padding rows; differentiable."""
    e, real = row_experts(row_index, padded)
    tok = row_index.clamp(min=0).long()
    rows = torch.where(real[:, None], x[tok], torch.zeros((), dtype=x.dtype, device=x.device))
    return rows, None if probs is None else torch.where(real, probs[tok, e], 0.0)


def permute_quant(x, probs, row_index, padded, round_scale=True):
    """(q, s, qt, st, rows_probs) of the permuted rows quantised per
    expert (K4b, the padded counts as the experts' segments)."""
    rows, p = permute(x, probs, row_index, padded)
    return (*experts_quant(rows, padded, round_scale), p)


def unpermute(rows, row_index, padded, tokens, dtype=None):
    """out [tokens, H]: each token's rows summed in fp32 (unweighted), in
    dtype (rows' when None); differentiable."""
    _, real = row_experts(row_index, padded)
    idx = torch.where(real, row_index.long(), tokens)
    out = rows.new_zeros(tokens + 1, rows.shape[1], dtype=torch.float32)
    return out.index_add(0, idx, rows.float())[:tokens].to(dtype or rows.dtype)


def tokens_to_rows(dout, row_index, padded):
    """dg [R, H]: dout[t] in each of token t's rows, zeros elsewhere (the
    unweighted unpermute's backward)."""
    return permute(dout, None, row_index, padded)[0]
