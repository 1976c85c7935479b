"""The LM head and its loss without the logits (docs/kernels.md K9;
peer: Liger-Kernel's FusedLinearCrossEntropy): mean cross entropy of x . W^T
over the tokens not ignored, the tokens taken in chunks, so that at most
one chunk's logits [chunk, V] exist at a time (never [T, V]). Per chunk:
the logits by a bf16 GEMM (fp32 accumulation), lingen's fused K9 forward
+ gradient writing dlogits over them, then dx_c = dlogits . W and
dW += dlogits^T . x_c. The forward leaves dx and dW ready; the backward
only scales them by the output gradient."""
import torch

from . import _args as A, _gemm, _k
from .linear import QUANT_WIDTH_MAX

__all__ = ["LinearCrossEntropyLoss", "linear_cross_entropy", "chunk_tokens", "fp8_chunk_tokens",
           "CHUNK_BYTES",
           "fp8_linear_cross_entropy", "Fp8LinearCrossEntropyChunked"]

# bytes of one chunk's logits by default: at Ling-mini's vocab (157184,
# bf16) 5 chunks of 1664 tokens for 8192 tokens. Larger chunks mean
# fewer passes over the fp32 dW accumulator (4 V H bytes read and written
# by each chunk's GEMM); smaller ones less memory.
CHUNK_BYTES = 512 << 20
ACCUMULATE = ("fp32", "weight")


def chunk_tokens(tokens, vocab, itemsize=2, budget=CHUNK_BYTES):
    """Tokens a chunk: the fewest chunks whose logits fit `budget` bytes,
    made equal (no sliver of a last chunk) and rounded up to 128 tokens (the
    GEMMs' tile)."""
    n = max(1, -(-tokens * vocab * itemsize // budget))
    per = -(-tokens // n)
    return min(tokens, -(-per // 128) * 128)


def fp8_chunk_tokens(tokens, vocab, hidden, sms, budget=CHUNK_BYTES):
    """The FP8 head's tokens a chunk: whole 128-token blocks, logits within
    `budget` bytes (bf16), and of those the chunk whose dgrad (dx_c = dq_c
    W, a 128 x 128 output tile a CTA of `sms` persistent ones) fills its
    last wave best, the larger on a tie within 1%: the dgrad's reduction is
    the whole vocab, so a last wave a fifth full costs a fifth of a wave of
    the longest tiles (8192 tokens, hidden 2048, 132 SMs: 1024-token chunks,
    128 tiles, against chunk_tokens's 1664, 208 tiles in two waves: 79%)."""
    most = max(1, min(-(-tokens // 128), budget // (vocab * 2 * 128)))
    cols = -(-hidden // 128)

    def fill(rows):
        tiles = rows * cols
        return tiles / (-(-tiles // sms) * sms)
    best = max(fill(r) for r in range(1, most + 1))
    return 128 * max(r for r in range(1, most + 1) if fill(r) >= best - 0.01)


def _dw_into(dw, dz_t, x, first):
    """dw (+)= dz_t . x by the GEMM itself: its products summed in fp32
    and, for an fp32 dw of bf16 operands, added to dw in fp32 in the GEMM's
    epilogue (cuBLAS's bf16 x bf16 -> fp32 addmm), no pass of its own."""
    if dw.dtype == x.dtype:
        return torch.mm(dz_t, x, out=dw) if first else torch.addmm(dw, dz_t, x, out=dw)
    if _k.on_cpu(x):  # no mixed-dtype GEMM on the CPU: the operands in fp32
        dz_t, x = dz_t.float(), x.float()
        return torch.mm(dz_t, x, out=dw) if first else dw.addmm_(dz_t, x)
    if first:
        return torch.mm(dz_t, x, out_dtype=dw.dtype, out=dw)
    return torch.addmm(dw, dz_t, x, out_dtype=dw.dtype, out=dw)


def _fp32_gemm_out():
    """Whether this torch has the bf16 x bf16 -> fp32 GEMMs (aten::mm.dtype,
    addmm.dtype_out: torch 2.8 on)."""
    return hasattr(torch.ops.aten.addmm, "dtype_out") and hasattr(torch.ops.aten.mm, "dtype_out")


def _chunks(x, weight, labels, g, ignore_index, chunk, plain, dx, dw):
    """The chunks' summed loss (fp32, on the device), dx and dw (+)= theirs
    (each when not None); one logits buffer [chunk, V], freed on return."""
    t, v = x.shape[0], weight.shape[0]
    logits = x.new_empty(min(chunk, t), v)
    total = torch.zeros((), dtype=torch.float32, device=x.device)
    for i, s in enumerate(range(0, t, chunk)):
        e = min(s + chunk, t)
        xc = x[s:e]
        z = torch.mm(xc, weight.t(), out=logits[:e - s])
        loss, dz = _k.cross_entropy_grad(z, labels[s:e], g, ignore_index, plain)
        total += loss.sum()
        if dx is not None:
            torch.mm(dz, weight, out=dx[s:e])
        if dw is not None:
            _dw_into(dw, dz.t(), xc, i == 0)
    return total


class _LinearCrossEntropy(torch.autograd.Function):
    """loss = sum over live tokens of CE(x W^T, y) / n_live; dx and dW made
    in the forward (the loss is the graph's last node: they are needed
    right after) and saved; no host sync (n_live stays on the device)."""

    @staticmethod
    def forward(ctx, x, weight, labels, ignore_index, chunk, plain, accumulate, grad):
        # grad: whether autograd records (needs_input_grad says True under
        # no_grad too: an eval loss would make dx and dW for nothing)
        need_dx, need_dw = (grad and n for n in ctx.needs_input_grad[:2])
        count = (labels != ignore_index).sum()
        # the mean's output gradient, the same on every row: 1 / n_live
        # (inf when every token is ignored: the kernel zeroes ignored rows)
        g = count.float().reciprocal().reshape(1)
        fp32 = (accumulate == "fp32" and x.shape[0] > chunk and weight.dtype != torch.float32
                and (_k.on_cpu(x) or _fp32_gemm_out()))
        dx = torch.empty_like(x) if need_dx else None
        dw = torch.empty_like(weight, dtype=torch.float32 if fp32 else None) if need_dw else None
        total = _chunks(x, weight, labels, g, ignore_index, chunk, plain, dx, dw)
        if need_dw and dw.dtype != weight.dtype:  # after the chunk buffer is gone
            dw = dw.to(weight.dtype)
        ctx.save_for_backward(dx, dw)
        ctx.scaled = False
        return total / count.float()

    @staticmethod
    def backward(ctx, dout):
        if ctx.scaled:  # dx and dW are scaled in place (no copy of dW at the step's peak)
            raise RuntimeError("lingen.nn.linear_cross_entropy: backward through the same "
                               "graph a second time (retain_graph=True) is not supported")
        ctx.scaled = True
        dx, dw = ctx.saved_tensors
        if dx is not None:
            dx.mul_(dout)
        if dw is not None:
            dw.mul_(dout)
        return dx, dw, None, None, None, None, None, None


def linear_cross_entropy(x, weight, labels, ignore_index=-100, mode="fp8", chunk=None,
                         accumulate="fp32"):
    """Mean cross entropy of the logits x . weight^T over the tokens whose
    label is not ignore_index (nan when none is), as lingen.nn.cross_entropy
    of the bf16 head's logits, without ever holding them: x [..., H],
    weight [V, H] (the same floating dtype), labels [...] int32 or int64.

    chunk: tokens a chunk (None: chunk_tokens's, about CHUNK_BYTES of logits).
    accumulate: dW's sum over the chunks, "fp32" (an fp32 [V, H] buffer
    while the forward runs, rounded once to the weight's dtype at the end,
    as the unfused head's single GEMM rounds it; used when this torch has
    the bf16 -> fp32 GEMM, else "weight") or "weight" (in the weight's
    dtype, rounded at every chunk: Liger's; no buffer). mode "fp8" and
    "bf16" run lingen's K9 kernel on a GPU, "torch" (and every CPU tensor)
    its plain-torch form; the GEMMs are torch's bf16 ones in every mode.

    Eager and CUDA graphs: no host sync. Under torch.compile the kernel's
    gradient goes to a buffer of its own (its in-place write is not
    visible to tracing)."""
    fn = "lingen.nn.linear_cross_entropy"
    A.choice(fn, "mode", mode, A.MODES)
    A.choice(fn, "accumulate", accumulate, ACCUMULATE)
    if not torch.is_tensor(weight) or not weight.is_floating_point() or weight.dim() != 2:
        A.fail(fn, "weight", getattr(weight, "shape", weight), "a 2-D floating tensor [V, H]",
               TypeError)
    A.last_dim(fn, x, weight.shape[1])
    if x.dtype != weight.dtype:
        A.fail(fn, "x.dtype", x.dtype, f"weight's dtype ({weight.dtype})", TypeError)
    if not torch.is_tensor(labels) or labels.dtype not in (torch.int32, torch.int64):
        A.fail(fn, "labels.dtype", getattr(labels, "dtype", labels), "torch.int32, torch.int64",
               TypeError)
    if labels.numel() * x.shape[-1] != x.numel():
        A.fail(fn, "labels.shape", tuple(labels.shape), f"a label a token of x "
               f"{tuple(x.shape)}")
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    t = x2.shape[0]
    if not t:
        A.fail(fn, "x.shape", tuple(x.shape), "at least one token")
    if chunk is None:
        chunk = chunk_tokens(t, weight.shape[0], x.element_size())
    A.integer(fn, "chunk", chunk)
    return _LinearCrossEntropy.apply(x2, weight, labels.reshape(-1).contiguous(),
                                     int(ignore_index), min(chunk, t), mode == "torch",
                                     accumulate, torch.is_grad_enabled())


class LinearCrossEntropyLoss(torch.nn.Module):
    """The LM head and CrossEntropyLoss (mean) in one, the logits never
    whole: forward(x [..., H], weight [V, H], labels [...]); see
    linear_cross_entropy."""

    def __init__(self, ignore_index=-100, mode="fp8", chunk=None, accumulate="fp32"):
        super().__init__()
        fn = "lingen.nn.LinearCrossEntropyLoss"
        A.integer(fn, "ignore_index", ignore_index, lo=-2 ** 63)
        A.choice(fn, "mode", mode, A.MODES)
        if chunk is not None:
            A.integer(fn, "chunk", chunk)
        A.choice(fn, "accumulate", accumulate, ACCUMULATE)
        self.ignore_index, self.mode, self.chunk, self.accumulate = (ignore_index, mode, chunk,
                                                                     accumulate)

    def forward(self, x, weight, labels):
        return linear_cross_entropy(x, weight, labels, self.ignore_index, self.mode, self.chunk,
                                    self.accumulate)


# ------------------------------------------------- the FP8 head, chunked

def _fp8_chunks(x_copies, weight, labels, ignore_index, chunk, need_dx, need_dw):
    """The FP8 head's forward in chunks of tokens: (the rows' loss [T] fp32,
    dx [T, H] or None, the gradient's columnwise copy (qt [V, pitch(T)],
    st [cdiv(T, 128), V]) or None, count). Per chunk: the chunk's logits
    (lingen's FP8 GEMM of the chunk's rows of x's rowwise copy), their
    cross entropy stats, the gradient's copies by cross_entropy_quant with
    g = 1 / count (all the tokens' count, on the device), its columnwise
    copy written straight into the full one (the kernel's qt_pitch: the
    chunk's columns of gqt, its block rows of gst, no copy; the chunks start
    on 128-token blocks: the copies are those of the whole gradient), and
    the chunk's dgrad into dx[chunk]."""
    q, s, qt, st = x_copies
    t, v = q.shape[0], weight.shape[0]
    wq, ws, wtq, wts = _k.quant_weight(weight)
    if need_dx and wtq is None:  # handed over without its transposed copy: made now
        wtq, wts = _k.quant_weight(weight)[2:]
    count = (labels != ignore_index).sum().float()
    # the mean's output gradient, the same on every row (inf when every token is
    # ignored: the kernel zeroes ignored rows); dout is folded in by the backward
    g = count.new_ones(()).div(count).reshape(1)  # (the unfused head's dout / count at 1)
    loss = torch.empty(t, dtype=torch.float32, device=q.device)
    dx = torch.empty(t, weight.shape[1], dtype=torch.bfloat16, device=q.device) if need_dx \
        else None
    gqt = gst = None
    if need_dw:
        gqt = _k.qt_buffer(v, t, q.device)
        gst = torch.empty(-(-t // A.FP8_BLOCK), v, dtype=torch.float32, device=q.device)
    for a in range(0, t, chunk):
        e = min(a + chunk, t)
        logits = _gemm.linear(q[a:e], s[:, a:e].contiguous(), wq, ws)
        lc, sc, mc = _k.cross_entropy_stats(logits, labels[a:e], ignore_index)
        loss[a:e] = lc
        if need_dx or need_dw:
            # the columnwise copy into the chunk's columns of the whole one (on a GPU
            # by the kernel itself: its copy after it took 0.87 ms a training step on
            # an H100 at the bench model's head)
            dq, ds, _, _ = _k.cross_entropy_quant(logits, labels[a:e], sc, mc, g, ignore_index,
                                                  into=(gqt, gst, a) if need_dw else None)
            del logits
            if need_dx:
                dx[a:e] = _gemm.linear_dgrad(dq, ds, wtq, wts)
            del dq, ds
        logits = None  # (freed before the next chunk's: one chunk's buffers at a time)
    return loss, dx, (gqt, gst), count


class Fp8LinearCrossEntropyChunked(torch.autograd.Function):
    """Fp8LinearCrossEntropy without the logits: the forward runs the head in
    chunks of tokens (_fp8_chunks) and keeps dx [T, H] bf16 and the logits
    gradient's columnwise FP8 copy (V x T bytes e4m3 + V x T / 32 bytes of
    scales) for the backward, which scales dx by dout and runs ONE wgrad
    over all the tokens (K = T: the GEMM at full efficiency, the same sum
    as the unfused head's), dout folded into the copy's fp32 scales."""

    @staticmethod
    def forward(ctx, x, weight, x_copies, labels, ignore_index, chunk, grad):
        need_dx, need_dw = (grad and n for n in ctx.needs_input_grad[:2])
        loss, dx, (gqt, gst), count = _fp8_chunks(x_copies, weight, labels, ignore_index,
                                                  chunk, need_dx, need_dw)
        qt, st = x_copies[2:] if need_dw else (None, None)
        ctx.save_for_backward(dx, gqt, gst, qt, st)
        ctx.shape, ctx.wdtype, ctx.scaled = x.shape, weight.dtype, False
        return loss.sum() / count

    @staticmethod
    def backward(ctx, dout):
        if ctx.scaled:  # dx and the scales are scaled in place
            raise RuntimeError("lingen.nn.fp8_linear_cross_entropy: backward through the same "
                               "graph a second time (retain_graph=True) is not supported")
        ctx.scaled = True
        dx, gqt, gst, qt, st = ctx.saved_tensors
        dw = None
        if dx is not None:
            dx = dx.mul_(dout).view(ctx.shape)
        if gqt is not None:  # dout into the gradient's 128 x 1 blocks' scales: exact for
            # dout = 1 (and any power of two), one fp32 rounding a scale otherwise
            dw = _gemm.linear_wgrad(gqt, gst.mul_(dout.float()), qt, st, ctx.wdtype)
        return dx, dw, None, None, None, None, None


def fp8_linear_cross_entropy(x, weight, labels, ignore_index=-100, chunk=None, x_copies=None):
    """Mean cross entropy of the FP8 head's logits x . weight^T (lingen's
    blockwise FP8 GEMMs, as Fp8Linear's) over the tokens whose label is not
    ignore_index (nan when none is), without ever holding the logits: the
    numbers of lingen.nn.Fp8LinearCrossEntropy (Model(fp8_head=True)'s
    unfused head), the tokens in chunks. x [..., H] bf16 (H a multiple of
    128), weight [V, H] bf16 (V a multiple of 128, at most QUANT_WIDTH_MAX),
    labels [...] int32 or int64; x_copies: x's quantised copies (q, s, qt,
    st) from its producer (rms_norm_quant), else quantised here.

    chunk: tokens a chunk, a multiple of 128 (the columnwise copies' blocks;
    None: chunk_tokens's, about CHUNK_BYTES of logits). Each chunk: its
    logits [chunk, V] bf16 (FP8 GEMM), cross_entropy_stats, the gradient's
    FP8 copies by cross_entropy_quant (never bf16), its dgrad into dx and
    its columnwise copy straight into one [V, T] e4m3 buffer (the kernel
    writes the chunk's columns there: no copy).

    Memory held from the forward to the backward: that copy (V x T bytes +
    its scales, V x T / 32 bytes) and dx [T, H] bf16, instead of the
    unfused head's [T, V] bf16 logits (2 V T bytes) and the weight's
    transposed copy; at the forward's peak one chunk's logits and its
    rowwise gradient copy (about 3 bytes a logit). The backward:
    dx * dout, and one wgrad over all T tokens (the same K order as the
    unfused head's: with dout = 1 dx and dW are its bit for bit, the loss
    too, given the same kernels' tiles), dout folded into the gradient's
    scales. Eager and CUDA graphs: no host sync."""
    fn = "lingen.nn.fp8_linear_cross_entropy"
    if not torch.is_tensor(weight) or weight.dtype != torch.bfloat16 or weight.dim() != 2:
        A.fail(fn, "weight", getattr(weight, "dtype", weight), "a 2-D torch.bfloat16 tensor "
               "[V, H]", TypeError)
    v, h = weight.shape
    A.width(fn, "weight.shape[1]", h, "fp8")
    if v % A.FP8_BLOCK or v > QUANT_WIDTH_MAX:
        A.fail(fn, "weight.shape[0]", v, f"a multiple of {A.FP8_BLOCK} up to "
               f"{QUANT_WIDTH_MAX} (the logits' gradient quantised in 1 x 128 blocks, a row "
               "a launch)")
    A.last_dim(fn, x, h)
    if x.dtype != torch.bfloat16:
        A.fail(fn, "x.dtype", x.dtype, "torch.bfloat16", TypeError)
    if not torch.is_tensor(labels) or labels.dtype not in (torch.int32, torch.int64):
        A.fail(fn, "labels.dtype", getattr(labels, "dtype", labels), "torch.int32, torch.int64",
               TypeError)
    if labels.numel() * h != x.numel():
        A.fail(fn, "labels.shape", tuple(labels.shape), f"a label a token of x "
               f"{tuple(x.shape)}")
    A.integer(fn, "ignore_index", ignore_index, lo=-2 ** 63)
    t = x.numel() // h
    if not t:
        A.fail(fn, "x.shape", tuple(x.shape), "at least one token")
    if chunk is None:
        # (on the CPU the chunk only bounds the logits' memory: an H100's SMs)
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count \
            if x.is_cuda else 132
        chunk = fp8_chunk_tokens(t, v, h, sms)
    _fp8_chunk_arg(fn, "chunk", chunk)
    if x_copies is None:
        x_copies = _k.quant(x.reshape(-1, h).contiguous(), "both")
    elif (not isinstance(x_copies, (tuple, list)) or len(x_copies) != 4
          or not all(torch.is_tensor(c) for c in x_copies)
          or tuple(x_copies[0].shape) != (t, h)):
        A.fail(fn, "x_copies", type(x_copies).__name__, f"x's quantised copies (q [{t}, {h}], "
               "s, qt, st), as rms_norm_quant gives them", TypeError)
    return Fp8LinearCrossEntropyChunked.apply(x, weight, tuple(x_copies),
                                              labels.reshape(-1).contiguous(), int(ignore_index),
                                              chunk, torch.is_grad_enabled())


def _fp8_chunk_arg(fn, name, chunk):
    """The FP8 head's chunk: a positive multiple of 128 (the chunks start on
    the columnwise copies' 128-token blocks)."""
    A.integer(fn, name, chunk)
    if chunk % A.FP8_BLOCK:
        A.fail(fn, name, chunk, f"a positive multiple of {A.FP8_BLOCK} (the FP8 head's chunks "
               "start on the 128-token blocks of the columnwise copies)")
    return chunk
