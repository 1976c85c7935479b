"""The PyTorch blockwise FP8 quantiser of docs/kernels.md 1.2-1.3 (the
torch form in lingen._torchref) in the benches' form fn(torch, ...): what
every quantising case compares with (and times, eager and compiled), and
the dequantisation results are compared by. No cases of its own."""


def _ref():
    from .. import _torchref
    return _torchref


def torch_quant(torch, y, pitch=None):
    """y [t, h] fp32 -> (q, s [h/128, t], qt [h, round_up(t, pitch)], st
    [cdiv(t,128), h]), power-of-two scales; qt's columns past t zeros (the
    dense quantisers' layout: pitch None, _torchref.QT_PITCH (128); an
    expert's block: pitch 1)."""
    return _ref().quant(y, round_scale=True, multiple=pitch or _ref().QT_PITCH)


def dequant(torch, q, s, qt, st):
    """Both copies back to [t, h] fp32 (a copy left out: None)."""
    return _ref().deq_copies(q, s, qt, st)


def cases(quick):
    return []
