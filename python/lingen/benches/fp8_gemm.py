"""Rows of the blockwise FP8 GEMMs (families fp8_gemm, fp8_grouped_gemm;
sm_90a): lingen beside the dequantised fp32 product (eager), torch.mm of
the same dequantised operands in bf16 and, for the dense forward,
torch._scaled_mm with blockwise scales. tools/fp8_gemm_bench.py holds the
fuller table (bench/fp8-gemm.md)."""
from . import ODD_TOKENS, Case, Setup
from .quant import _ref


def _fp8(env, *shape):
    return (2.0 * env.randn(*shape).float()).clamp(-448, 448).to(env.torch.float8_e4m3fn)


def _scale(env, *shape):
    return (0.5 + env.randn(*shape).float().abs().clamp(max=1.0)).contiguous()


def _dense(env, m, n, k):
    import lingen as lg
    torch = env.torch
    x, xs = _fp8(env, m, k), _scale(env, (k + 127) // 128, m)
    w, ws = _fp8(env, n, k), _scale(env, (n + 127) // 128, (k + 127) // 128)
    # the bf16 peer multiplies the same dequantised operands (rounded to bf16)
    xb = _ref().deq_rowwise(x, xs).to(torch.bfloat16)
    wb = _ref().deq_weight(w, ws).to(torch.bfloat16)
    impls = {"lingen": lambda: lg.fp8_gemm(x, xs, w, ws),
             "eager": lambda: (_ref().deq_rowwise(x, xs)
                               @ _ref().deq_weight(w, ws).t()).to(torch.bfloat16),
             "torch.mm": lambda: torch.mm(xb, wb.t())}
    if k % 128 == 0 and n % 128 == 0:
        impls["_scaled_mm"] = lambda: torch._scaled_mm(x, w.t(), scale_a=xs.t(), scale_b=ws.t(),
                                                       out_dtype=torch.bfloat16)
    return Setup(impls, (x, xs, w, ws), lambda r: (r.float(),))


def _grouped(env, e, m, n, k):
    import lingen as lg
    torch = env.torch
    counts = torch.full((e,), m // e, dtype=torch.int32, device="cuda")
    x, xs = _fp8(env, m, k), _scale(env, (k + 127) // 128, m)
    w, ws = _fp8(env, e, n, k), _scale(env, e, (n + 127) // 128, (k + 127) // 128)
    offs = torch.cumsum(counts, 0).to(torch.int32)

    def dequantised():
        # equal counts c: expert i's scales are the [kb, c] block at element i c kb
        c, kb = m // e, xs.shape[0]
        flat = xs.flatten()
        xd = torch.cat([_ref().deq_rowwise(x[i * c:(i + 1) * c], flat[i * c * kb:(i + 1) * c * kb]
                                           .view(kb, c)) for i in range(e)])
        return xd, _ref().deq_weight(w, ws)

    def eager():
        c = m // e
        xd, wd = dequantised()
        y = torch.cat([xd[i * c:(i + 1) * c] @ wd[i].t() for i in range(e)])
        return y.to(torch.bfloat16)
    # the bf16 peer multiplies the same dequantised operands (rounded to bf16)
    xb, wb = (t.to(torch.bfloat16) for t in dequantised())
    impls = {"lingen": lambda: lg.fp8_grouped_gemm(x, xs, w, ws, counts), "eager": eager,
             "torch._grouped_mm": lambda: torch._grouped_mm(xb, wb.transpose(1, 2), offs=offs)}
    return Setup(impls, (x, xs, w, ws, counts), lambda r: (r.float(),))


def cases(quick):
    dense = [(4096, 7168, 16384), (8192, 3072, 2048), (8192, 2048, 2048)]
    dense += [(t, 4096, 7168) for t in ODD_TOKENS]  # the odd-shape rule (full run only)
    out = [Case("fp8_gemm fwd", f"{m}x{n}x{k}", lambda env, m=m, n=n, k=k: _dense(env, m, n, k),
                extra={"flops": 2.0 * m * n * k}, family="fp8_gemm") for m, n, k in (dense[:1] if quick else dense)]
    for n, k in ((1024, 2048), (2048, 512))[:1 if quick else 2]:
        out.append(Case("fp8_grouped_gemm fwd", f"256x65536x{n}x{k}",
                        lambda env, n=n, k=k: _grouped(env, 256, 65536, n, k),
                        extra={"flops": 2.0 * 65536 * n * k}, family="fp8_grouped_gemm"))
    return out
