"""The checks lingen.nn's constructors and forwards make on their
arguments, so that what a layer cannot run is refused where it is given,
naming the argument, what was found and what is allowed (as the C side's
messages do), not later inside torch with a shape message."""
import numbers

import torch

MODES = ("fp8", "bf16", "torch")
SCORES = ("sigmoid", "softmax")
FP8_BLOCK = 128  # the FP8 recipe's blocks: a GEMM's reduced width, a multiple of 128
BF16_ALIGN = 8  # torch._grouped_mm: rows of a multiple of 16 bytes


def fail(where, name, found, allowed, exc=ValueError):
    raise exc(f"{where}: {name}: found {found!r}, allowed: {allowed}")


def integer(where, name, v, lo=1, hi=None):
    """v an int (not a bool) in [lo, hi]."""
    if not isinstance(v, numbers.Integral) or isinstance(v, bool):
        fail(where, name, v, "an int", TypeError)
    if v < lo or (hi is not None and v > hi):
        fail(where, name, v, f"an int from {lo} to {hi}" if hi is not None
             else f"an int of at least {lo}")
    return int(v)


def number(where, name, v, lo=None, hi=None, lo_open=False):
    """v a finite real (not a bool) within the bounds given."""
    if not isinstance(v, numbers.Real) or isinstance(v, bool) or v != v or v in (
            float("inf"), float("-inf")):
        fail(where, name, v, "a finite number", TypeError)
    if lo is not None and (v <= lo if lo_open else v < lo):
        fail(where, name, v, f"a number {'above' if lo_open else 'of at least'} {lo}"
             + (f" and at most {hi}" if hi is not None else ""))
    if hi is not None and v > hi:
        fail(where, name, v, f"a number of at most {hi}")
    return v


def choice(where, name, v, allowed):
    """v one of allowed (exactly: "FP8" is not "fp8")."""
    if not isinstance(v, str) or v not in allowed:
        fail(where, name, v, "one of " + ", ".join(repr(a) for a in allowed))
    return v


def flag(where, name, v):
    if not isinstance(v, bool):
        fail(where, name, v, "True or False", TypeError)
    return v


def float_dtype(where, name, v):
    if not isinstance(v, torch.dtype) or not v.is_floating_point or v.itemsize < 2:
        fail(where, name, v, "a floating torch dtype (torch.bfloat16, torch.float16, "
             "torch.float32, torch.float64)", TypeError)
    return v


def width(where, name, v, mode):
    """A width a GEMM reduces over: a multiple of 128 in FP8 (the recipe's
    blocks), of 8 otherwise (torch._grouped_mm's 16-byte rows)."""
    integer(where, name, v)
    m = FP8_BLOCK if mode == "fp8" else BF16_ALIGN
    if v % m:
        fail(where, name, v, f"a multiple of {m} in mode {mode!r}")
    return v


def last_dim(where, x, size, name="x"):
    """x a floating tensor whose last dimension is size."""
    if not torch.is_tensor(x):
        fail(where, name, type(x).__name__, "a torch.Tensor", TypeError)
    if not x.is_floating_point():
        fail(where, f"{name}.dtype", x.dtype, "a floating dtype", TypeError)
    if x.dim() < 1 or x.shape[-1] != size:
        fail(where, f"{name}.shape", tuple(x.shape), f"a last dimension of {size}")
