"""Blockwise FP8 (docs/kernels.md 1.3) in plain torch, in the quantisers'
layouts: the CPU path of lingen.nn's quantising steps, and the dequantisers
the GEMM emulation (lingen.nn._gemm) reads the copies back with.

Layouts (as lingen's kernels write them):
- rowwise x [M, K]: q [M, K] e4m3, s [K/128, M] fp32 (1 x 128 blocks);
- columnwise: qt [K, round_up(M, 16)] e4m3 (rows 16-byte aligned for the
  wgrad's TMA, zeros past M), st [cdiv(M, 128), K] fp32 (128 x 1 blocks);
- weight w [N, K]: q [N, K], s [cdiv(N, 128), cdiv(K, 128)] (128 x 128 tiles);
- per expert (segments of rows given by counts [E], any counts; each
  segment quantised as a tensor of its own): s flat, expert e's [K/128,
  c_e] block at K/128 * off_e; qt flat, expert e's [K, c_e] block at K *
  off_e; st [cdiv(M, 128) + E, K], expert e's cdiv(c_e, 128) rows (its
  128-row blocks from its first row) at row sum of cdiv(c_e', 128) over
  the experts before it.
"""
import torch

E4M3 = torch.float8_e4m3fn
FMAX = 448.0
BLOCK = 128


def scale_of(amax, round_scale=True):
    """The fp32 scale of a block of absolute maximum amax."""
    s = (amax.float() / FMAX).clamp(min=1e-30)
    if round_scale:  # 2^ceil(log2 s)
        m, e = torch.frexp(s)
        s = torch.where(m == 0.5, s, torch.ldexp(torch.ones_like(s), e))
    return s


def _q(x, s_full):
    return (x.float() / s_full).clamp(-FMAX, FMAX).to(E4M3)


def rowwise(x, round_scale=True):
    """(q [M, K], s [K/128, M]) of x [M, K] (K a multiple of 128)."""
    m, k = x.shape
    b = x.float().view(m, k // BLOCK, BLOCK)
    s = scale_of(b.abs().amax(-1), round_scale)  # [M, K/128]
    return _q(b, s[..., None]).view(m, k), s.t().contiguous()


def pitch(m):
    """round_up(m, 16): the row pitch of a columnwise copy of m tokens."""
    return -(-m // 16) * 16


def colwise(x, round_scale=True):
    """(qt [K, round_up(M, 16)], st [cdiv(M, 128), K]) of x [M, K], a last
    partial block of rows counting the missing rows as 0 (qt's columns past
    M: zeros, as the kernels write them)."""
    m, k = x.shape
    nb = -(-m // BLOCK)
    pad = torch.nn.functional.pad(x.float(), (0, 0, 0, nb * BLOCK - m))
    st = scale_of(pad.view(nb, BLOCK, k).abs().amax(1), round_scale)  # [nb, K]
    q = _q(pad.view(nb, BLOCK, k), st[:, None, :]).view(nb * BLOCK, k)[:pitch(m)]
    return q.t().contiguous(), st


def weight(w, round_scale=True):
    """(q [N, K], s [cdiv(N, 128), cdiv(K, 128)], qt [K, N], st) of w [N, K]
    in 128 x 128 tiles (the transposed copy: the same tiles transposed)."""
    n, k = w.shape
    bn, bk = -(-n // BLOCK), -(-k // BLOCK)
    pad = torch.nn.functional.pad(w.float(), (0, bk * BLOCK - k, 0, bn * BLOCK - n))
    t = pad.view(bn, BLOCK, bk, BLOCK)
    s = scale_of(t.abs().amax(dim=(1, 3)), round_scale)
    q = _q(t, s[:, None, :, None]).view(bn * BLOCK, bk * BLOCK)[:n, :k]
    return q.contiguous(), s, q.t().contiguous(), s.t().contiguous()


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
    qt_rows = _q(xf, st[blk])  # [M, K] in x's row order, each row with its block's scales
    idx_t, _ = _flat_index(counts, m, k, 1)
    qt = torch.zeros(k * m + 1, dtype=torch.uint8, device=x.device)
    qt = qt.scatter(0, idx_t.reshape(-1), qt_rows.view(torch.uint8).reshape(-1))[:-1]
    return q, s, qt.view(E4M3).view(k, m), st[:rows]


# ------------------------------------------------------- dequantise

def deq_rowwise(q, s, dtype=torch.float32):
    """x [M, K] of a rowwise copy (q [M, K], s [K/128, M])."""
    return (q.to(dtype) * s.t().to(dtype).repeat_interleave(BLOCK, 1)[:, :q.shape[1]])


def deq_colwise(qt, st, dtype=torch.float32, m=None):
    """x [M, K] of a columnwise copy (qt [K, round_up(M, 16)], st [cdiv(M,
    128), K]); m None: x [round_up(M, 16), K], the rows past M zeros (a
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
