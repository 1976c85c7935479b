"""The one seam between lingen.nn and the FP8 GEMMs: every FP8 GEMM of the
layers is one of the six functions below, taking the quantised operands in
the quantisers' layouts (docs/kernels.md 1.3; lingen._torchref lists them).

When lingen has the FP8 GEMM families (lingen.fp8_gemm, fp8_gemm_dgrad,
fp8_gemm_wgrad; lingen.fp8_grouped_gemm*), the functions call them.
Otherwise they emulate them exactly: the operands dequantised with their
blockwise scales (exact: e4m3 values times power-of-two scales fit bf16 and
fp32) and multiplied with fp32 accumulation (torch.mm / torch._grouped_mm;
in fp32 on the CPU, bf16 operands with fp32 accumulation on a GPU, whose
grouped GEMM takes no fp32). backend() says which; benchmarks print it.

Shapes (M the rows, counts [E] int32 the per-expert segments, on the
device):
  linear(xq [M,K], xs, wq [N,K], ws) -> y [M,N]         (forward)
  linear_dgrad(dyq [M,N], dys, wtq [K,N], wts) -> dx [M,K] bf16
  linear_wgrad(dytq [N,M], dyts, xtq [K,M], xts[, dtype]) -> dw [N,K] fp32 or dtype
  grouped(xq, xs, wq [E,N,K], ws, counts) -> y [M,N] bf16
  grouped_dgrad(dyq, dys, wtq [E,K,N], wts, counts) -> dx [M,K] bf16
  grouped_wgrad(dytq, dyts, xtq, xts, counts[, dtype]) -> dw [E,N,K] fp32 or dtype
(the grouped ones with the per-expert scale layouts).
"""
import functools
import os
import warnings

import torch

from .. import _torchref as Q

_DENSE = ("fp8_gemm", "fp8_gemm_dgrad", "fp8_gemm_wgrad")
_GROUPED = ("fp8_grouped_gemm", "fp8_grouped_gemm_dgrad", "fp8_grouped_gemm_wgrad")


@functools.lru_cache(maxsize=None)
def _has(names):
    """Whether lingen has every op of names (a tuple): asked once a tuple,
    not once a GEMM call."""
    import lingen
    return all(callable(getattr(lingen, n, None)) for n in names)


_force_emulation = os.environ.get("LINGEN_NN_EMULATE", "") not in ("", "0")
_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)


def set_emulation(on):
    """Force the emulation even where lingen's GEMMs exist (tests, checks;
    LINGEN_NN_EMULATE=1 in the environment does so from the start)."""
    global _force_emulation
    _force_emulation = bool(on)


@functools.lru_cache(maxsize=None)
def _arch_ok(index):
    """Whether CUDA device `index` runs lingen's FP8 GEMMs (sm_90a code:
    compute capability 9.0 exactly); when not, one warning a device, and
    the FP8 layers run the emulation there (bf16 GEMMs of the dequantised
    operands, fp32 accumulation)."""
    major, minor = torch.cuda.get_device_capability(index)
    if (major, minor) == (9, 0):
        return True
    warnings.warn(f"lingen.nn: cuda:{index} is sm_{major}{minor}; lingen's FP8 GEMMs are "
                  "sm_90a code: the FP8 layers fall back to their emulation there (bf16 GEMMs "
                  "of the dequantised operands)", RuntimeWarning, stacklevel=3)
    return False


def _device_ok(t):
    """t a CUDA tensor of a device that runs the GEMMs, in eager mode (None:
    the current CUDA device, for the labels)."""
    if t is None:
        return not torch.cuda.is_available() or _arch_ok(torch.cuda.current_device())
    return (t.is_cuda and not _compiling()
            and _arch_ok(t.device.index if t.device.index is not None
                         else torch.cuda.current_device()))


def native_dense(t=None):
    """Whether the dense GEMMs are lingen's for operand t (a real CUDA
    tensor, in eager mode: lingen's Python functions launch them on torch's
    current stream, which CUDA graphs capture; under torch.compile, which
    cannot yet trace them (their torch ops give no fp32 output), the
    emulation runs), on a device that runs sm_90a code (else the
    emulation, warned once a device: _arch_ok)."""
    return not _force_emulation and _has(_DENSE) and _device_ok(t)


def native_grouped(t=None, names=_GROUPED):
    """The same for the grouped GEMMs (all of names; each grouped function
    asks for its own, so forward and dgrad run lingen's while a missing
    grouped wgrad is emulated)."""
    return not _force_emulation and _has(names) and _device_ok(t)


def backend(device=None):
    """A label for benchmark output: which GEMMs the FP8 layers run on
    `device` ("cpu", "cuda", a torch.device; None: a CUDA device), as far as
    can be known before a call (calls() tells what did run)."""
    dev = torch.device(device) if device is not None else None
    if dev is not None and dev.type != "cuda":
        return (f"dense: EMULATED (dequantise + matmul); grouped: EMULATED (dequantise + "
                f"grouped_mm): every GEMM on {dev.type} is emulated")
    d = "lingen fp8_gemm" if native_dense() else "EMULATED (dequantise + matmul)"
    g = "; ".join(f"{n}: {'lingen' if native_grouped(None, (n,)) else 'EMULATED'}"
                  for n in _GROUPED)
    legend = " (EMULATED: dequantise + grouped_mm)" if "EMULATED" in g else ""
    return f"dense: {d}; grouped: {g}{legend}"


_calls = {}


def _ran(name, native):
    """Counts a GEMM call by its path (eager calls only: not under
    torch.compile)."""
    if _compiling():
        return native
    key = (name, "lingen" if native else "emulated")
    _calls[key] = _calls.get(key, 0) + 1
    return native


def reset_calls():
    _calls.clear()


def calls():
    """The GEMMs that ran since reset_calls(), by path: {"lingen": [names],
    "emulated": [names]}."""
    out = {"lingen": [], "emulated": []}
    for name, path in sorted(_calls):
        out[path].append(name)
    return out


def _op(name):
    import lingen
    return getattr(lingen, name)


def _cdtype(t):
    return torch.float32 if t.device.type == "cpu" else torch.bfloat16


def _offs(counts):
    return torch.cumsum(counts, 0, dtype=torch.int32)


# ------------------------------------------------------------- dense

def linear(xq, xs, wq, ws, out_dtype=torch.bfloat16):
    if _ran("linear", native_dense(xq)):
        return _op("fp8_gemm")(xq, xs, wq, ws,
                               out_dtype="fp32" if out_dtype == torch.float32 else "bf16")
    dt = torch.float32 if out_dtype == torch.float32 else _cdtype(xq)
    y = Q.deq_rowwise(xq, xs, dt) @ Q.deq_weight(wq, ws, dt).t()
    return y.to(out_dtype)


def linear_dgrad(dyq, dys, wtq, wts):
    if _ran("linear_dgrad", native_dense(dyq)):
        return _op("fp8_gemm_dgrad")(dyq, dys, wtq, wts)
    dt = _cdtype(dyq)
    return (Q.deq_rowwise(dyq, dys, dt) @ Q.deq_weight(wtq, wts, dt).t()).to(torch.bfloat16)


def _dt_name(dtype):
    return "bf16" if dtype == torch.bfloat16 else "fp32"


def linear_wgrad(dytq, dyts, xtq, xts, out_dtype=torch.float32):
    """dw in out_dtype (bf16 or fp32): written so by the kernel, no cast."""
    # any token count: the copies' rows are round_up(tokens, 128) apart, zeros past the
    # tokens (the kernel and the emulation sum over the pitch to the same result)
    if _ran("linear_wgrad", native_dense(dytq)):
        return _op("fp8_gemm_wgrad")(dytq, dyts, xtq, xts, out_dtype=_dt_name(out_dtype))
    return (Q.deq_colwise(dytq, dyts).t() @ Q.deq_colwise(xtq, xts)).to(out_dtype)


# ----------------------------------------------------------- grouped

def grouped(xq, xs, wq, ws, counts):
    if _ran("grouped", native_grouped(xq, _GROUPED[:1])):
        return _op("fp8_grouped_gemm")(xq, xs, wq, ws, counts)
    dt = _cdtype(xq)
    x = Q.deq_experts_rowwise(xq, xs, counts, dt)
    w = Q.deq_weight(wq, ws, dt)
    return torch._grouped_mm(x, w.transpose(1, 2), offs=_offs(counts)).to(torch.bfloat16)


def grouped_dgrad(dyq, dys, wtq, wts, counts):
    if _ran("grouped_dgrad", native_grouped(dyq, _GROUPED[1:2])):
        return _op("fp8_grouped_gemm_dgrad")(dyq, dys, wtq, wts, counts)
    dt = _cdtype(dyq)
    dy = Q.deq_experts_rowwise(dyq, dys, counts, dt)
    wt = Q.deq_weight(wtq, wts, dt)
    return torch._grouped_mm(dy, wt.transpose(1, 2), offs=_offs(counts)).to(torch.bfloat16)


def grouped_wgrad(dytq, dyts, xtq, xts, counts, out_dtype=torch.float32):
    """dw in out_dtype (bf16 or fp32): written so by the kernel, no cast."""
    if _ran("grouped_wgrad", native_grouped(dytq, _GROUPED[2:])):
        return _op("fp8_grouped_gemm_wgrad")(dytq, dyts, xtq, xts, counts,
                                             out_dtype=_dt_name(out_dtype))
    dt = _cdtype(dytq)
    dy = Q.deq_experts_colwise(dytq, dyts, counts, dt)  # [M, N]
    x = Q.deq_experts_colwise(xtq, xts, counts, dt)  # [M, K]
    return torch._grouped_mm(dy.t(), x, offs=_offs(counts)).float().to(out_dtype)
