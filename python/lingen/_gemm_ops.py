"""The blockwise FP8 GEMMs (family fp8_gemm, sm_90a): the three products of
a linear layer y = x . w^T on the layouts lingen's quantisers write
(docs/kernels.md 1.3); re-exported by lingen and lingen.ops (see ops.py's
docstring for the arguments every op takes: out=, stream=, context=,
alloc=, tile=)."""
from ._core import call

_OUT_DTYPES = ("bf16", "fp32")


def _out_dtype(fn, out_dtype):
    if out_dtype not in _OUT_DTYPES:
        raise ValueError(f"{fn}: out_dtype: found {out_dtype!r}, allowed: 'bf16', 'fp32'")
    return out_dtype


def _output(fn, name, shape_of, dtype, out, like):
    """out with an fp32 output `name` allocated beside `like` (torch) when
    the caller gave none: the output's dtype is the spec's."""
    out = dict(out or {})
    if dtype == "fp32" and name not in out:
        import sys
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(like, torch.Tensor):
            raise TypeError(f"{fn}: out_dtype 'fp32' with non-torch arrays: pass {name} in out=")
        out[name] = torch.empty(shape_of, dtype=torch.float32, device=like.device)
    return out or None


def fp8_gemm(x, x_scale, w, w_scale, *, out_dtype="bf16", tile=None, out=None, stream=None,
             context=None, alloc=None):
    """y [tokens, n] = x . w^T: x's rowwise copy (x [tokens, k] e4m3, x_scale
    [cdiv(k, 128), tokens] fp32: fp8_quant's q, s), w's 128 x 128 tiles (w
    [n, k] e4m3, w_scale [cdiv(n, 128), cdiv(k, 128)]: fp8_quant_weight's q,
    s). out_dtype "bf16" (default) or "fp32"."""
    fn = "lingen.fp8_gemm"
    dt = _out_dtype(fn, out_dtype)
    out = _output(fn, "y", (x.shape[0], w.shape[0]), dt, out, x)
    r = call(fn, "fp8_gemm", "forward", {"x": x, "x_scale": x_scale, "w": w, "w_scale": w_scale},
             {"tile": tile}, out=out, stream=stream, context=context, alloc=alloc)
    return r["y"]


def fp8_gemm_dgrad(dy, dy_scale, wt, wt_scale, *, out_dtype="bf16", tile=None, out=None,
                   stream=None, context=None, alloc=None):
    """dx [tokens, k] = dy . w: dy's rowwise copy (dy [tokens, n], dy_scale
    [cdiv(n, 128), tokens]) and the weight's transposed copy (wt [k, n],
    wt_scale [cdiv(k, 128), cdiv(n, 128)]: fp8_quant_weight's qt, st)."""
    fn = "lingen.fp8_gemm_dgrad"
    dt = _out_dtype(fn, out_dtype)
    out = _output(fn, "dx", (dy.shape[0], wt.shape[0]), dt, out, dy)
    r = call(fn, "fp8_gemm", "dgrad", {"dy": dy, "dy_scale": dy_scale, "wt": wt, "wt_scale": wt_scale},
             {"tile": tile}, out=out, stream=stream, context=context, alloc=alloc)
    return r["dx"]


def fp8_gemm_wgrad(dyt, dyt_scale, xt, xt_scale, *, accumulate=False, tile=None, out=None,
                   stream=None, context=None, alloc=None):
    """dw [n, k] fp32 = dy^T . x over the tokens (a multiple of 16), from the
    columnwise copies of dy (dyt [n, tokens], dyt_scale [cdiv(tokens, 128),
    n]) and x (xt [k, tokens], xt_scale [cdiv(tokens, 128), k]).
    accumulate=True adds into out={"dw": main_grad} (fp32) instead."""
    fn = "lingen.fp8_gemm_wgrad"
    if not isinstance(accumulate, bool):
        raise TypeError(f"{fn}: accumulate: found {accumulate!r}, expected True or False")
    if accumulate and not (out and "dw" in out):
        raise TypeError(f"{fn}: accumulate=True needs out={{'dw': main_grad}} (fp32 [n, k])")
    out = _output(fn, "dw", (dyt.shape[0], xt.shape[0]), "fp32", out, dyt)
    r = call(fn, "fp8_gemm", "wgrad", {"dyt": dyt, "dyt_scale": dyt_scale, "xt": xt,
                                       "xt_scale": xt_scale},
             {"tile": tile, "accumulate": accumulate}, out=out, stream=stream, context=context,
             alloc=alloc)
    return r["dw"]
