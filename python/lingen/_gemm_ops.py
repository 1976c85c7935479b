"""The blockwise FP8 GEMMs (family fp8_gemm, sm_90a): the three products of
a linear layer y = x . w^T on the layouts lingen's quantisers write
(docs/kernels.md 1.3); re-exported by lingen and lingen.ops (see ops.py's
docstring for the arguments every op takes: out=, stream=, context=,
alloc=, tile=)."""
from ._checks import check_flag
from ._core import call

_OUT_DTYPES = ("bf16", "fp32")


def _out_dtype(fn, out_dtype):
    if out_dtype not in _OUT_DTYPES:
        raise ValueError(f"{fn}: out_dtype: found {out_dtype!r}, allowed: 'bf16', 'fp32'")
    return out_dtype


def _accumulate(fn, accumulate, dt, out, shape):
    """The wgrads' accumulate flag, checked: True needs an fp32 dw given as
    out={"dw": main_grad} (of the shape named)."""
    if accumulate is not None:
        accumulate = check_flag(fn, "accumulate", accumulate)
    if accumulate and (dt != "fp32" or not (isinstance(out, dict) and "dw" in out)):
        raise TypeError(f"{fn}: accumulate=True needs out_dtype='fp32' and "
                        f"out={{'dw': main_grad}} (fp32 {shape})")
    return accumulate


def fp8_gemm(x, x_scale, w, w_scale, *, out_dtype="bf16", tile=None, out=None, stream=None,
             context=None, alloc=None):
    """y [tokens, n] = x . w^T: x's rowwise copy (x [tokens, k] e4m3, x_scale
    [cdiv(k, 128), tokens] fp32: fp8_quant's q, s), w's 128 x 128 tiles (w
    [n, k] e4m3, w_scale [cdiv(n, 128), cdiv(k, 128)]: fp8_quant_weight's q,
    s). out_dtype "bf16" (default) or "fp32"."""
    fn = "lingen.fp8_gemm"
    dt = _out_dtype(fn, out_dtype)
    r = call(fn, "fp8_gemm", "forward", {"x": x, "x_scale": x_scale, "w": w, "w_scale": w_scale},
             {"tile": tile, "dtype": dt}, out=out, stream=stream, context=context, alloc=alloc)
    return r["y"]


def fp8_gemm_dgrad(dy, dy_scale, wt, wt_scale, *, out_dtype="bf16", tile=None, out=None,
                   stream=None, context=None, alloc=None):
    """dx [tokens, k] = dy . w: dy's rowwise copy (dy [tokens, n], dy_scale
    [cdiv(n, 128), tokens]) and the weight's transposed copy (wt [k, n],
    wt_scale [cdiv(k, 128), cdiv(n, 128)]: fp8_quant_weight's qt, st)."""
    fn = "lingen.fp8_gemm_dgrad"
    dt = _out_dtype(fn, out_dtype)
    r = call(fn, "fp8_gemm", "dgrad",
             {"dy": dy, "dy_scale": dy_scale, "wt": wt, "wt_scale": wt_scale},
             {"tile": tile, "dtype": dt}, out=out, stream=stream, context=context, alloc=alloc)
    return r["dx"]


def fp8_gemm_wgrad(dyt, dyt_scale, xt, xt_scale, *, tokens=None, out_dtype="fp32",
                   accumulate=None, tile=None, out=None, stream=None, context=None, alloc=None):
    """dw [n, k] = dy^T . x over the tokens (any count), from the columnwise
    copies of dy (dyt [n, round_up(tokens, 128)], dyt_scale [cdiv(tokens,
    128), n]) and x (xt [k, round_up(tokens, 128)], xt_scale [cdiv(tokens,
    128), k]): the quantisers' layout (fp8_quant, rmsnorm_quant,
    swiglu_quant), rows 128-byte aligned, zeros past the tokens. tokens:
    the count (default: the pitch, dyt.shape[1]; the same sum, the tail
    being zeros). out_dtype "fp32" (default) or "bf16" (a bf16 weight's
    gradient, no cast after); accumulate=True (fp32) adds into
    out={"dw": main_grad} instead."""
    fn = "lingen.fp8_gemm_wgrad"
    dt = _out_dtype(fn, out_dtype)
    accumulate = _accumulate(fn, accumulate, dt, out, "[n, k]")
    r = call(fn, "fp8_gemm", "wgrad", {"dyt": dyt, "dyt_scale": dyt_scale, "xt": xt,
                                       "xt_scale": xt_scale},
             {"tile": tile, "accumulate": accumulate, "dtype": dt}, out=out,
             sizes=None if tokens is None else {"tokens": tokens}, stream=stream,
             context=context, alloc=alloc)
    return r["dw"]


def fp8_grouped_gemm(x, x_scale, w, w_scale, counts, *, out_dtype="bf16", tile=None, out=None,
                     stream=None, context=None, alloc=None):
    """y [tokens, n] = x . w[e]^T over each expert's rows (counts [experts]
    int32 on the device; expert e's rows start at sum(counts[:e])): x's
    per-expert rowwise copy (x [tokens, k], x_scale [cdiv(k, 128), tokens]
    as fp8_quant_batched / moe_permute_quant write it), w [experts, n, k]
    e4m3 with w_scale [experts, cdiv(n, 128), cdiv(k, 128)]. Rows past the
    counts' sum are not written."""
    fn = "lingen.fp8_grouped_gemm"
    dt = _out_dtype(fn, out_dtype)
    r = call(fn, "fp8_grouped_gemm", "forward", {"x": x, "x_scale": x_scale, "w": w,
                                                  "w_scale": w_scale, "counts": counts},
             {"tile": tile, "dtype": dt}, out=out, stream=stream, context=context, alloc=alloc)
    return r["y"]


def fp8_grouped_gemm_dgrad(dy, dy_scale, wt, wt_scale, counts, *, out_dtype="bf16", tile=None,
                           out=None, stream=None, context=None, alloc=None):
    """dx [tokens, k] = dy . w[e] over each expert's rows: dy's per-expert
    rowwise copy, the weights' transposed copies wt [experts, k, n] with
    wt_scale [experts, cdiv(k, 128), cdiv(n, 128)]."""
    fn = "lingen.fp8_grouped_gemm_dgrad"
    dt = _out_dtype(fn, out_dtype)
    r = call(fn, "fp8_grouped_gemm", "dgrad", {"dy": dy, "dy_scale": dy_scale, "wt": wt,
                                                "wt_scale": wt_scale, "counts": counts},
             {"tile": tile, "dtype": dt}, out=out, stream=stream, context=context, alloc=alloc)
    return r["dx"]


def fp8_grouped_gemm_wgrad(dyt, dyt_scale, xt, xt_scale, counts, *, out_dtype="fp32",
                           accumulate=None, tile=None, out=None, stream=None, context=None,
                           alloc=None):
    """dw [experts, n, k] = dy_e^T . x_e over each expert's tokens (counts
    [experts] int32 on the device), from the per-expert columnwise copies of
    dy (dyt [n, tokens] holding expert e's [n, count_e] block at element
    start_e n; dyt_scale [cdiv(tokens, 128) + experts, n] holding its
    [cdiv(count_e, 128), n] block at row sum of cdiv(counts[:e], 128)) and
    of x (xt [k, tokens], xt_scale likewise), as fp8_quant_batched,
    moe_permute_quant and batch_swiglu_quant write them. An expert of no
    tokens gets dw[e] = 0. out_dtype "fp32" (default) or "bf16";
    accumulate=True (fp32) adds into out={"dw": main_grad} instead."""
    fn = "lingen.fp8_grouped_gemm_wgrad"
    dt = _out_dtype(fn, out_dtype)
    accumulate = _accumulate(fn, accumulate, dt, out, "[experts, n, k]")
    r = call(fn, "fp8_grouped_gemm", "wgrad", {"dyt": dyt, "dyt_scale": dyt_scale, "xt": xt,
                                                "xt_scale": xt_scale, "counts": counts},
             {"tile": tile, "accumulate": accumulate, "dtype": dt}, out=out, stream=stream,
             context=context, alloc=alloc)
    return r["dw"]
