"""tools/fp8_gemm_bench.py - the blockwise FP8 GEMMs (fp8_gemm, and
fp8_grouped_gemm where the library has it) on the GPU against their peers
in one process, run by tools/device_fp8_gemm.sh:

  accuracy  per form and shape: max |y - ref| / max |ref| against a float64
            product of the dequantised operands (rows sampled at large M),
            lingen's fp32 output and its bf16 output, and torch._scaled_mm
            (blockwise 1x128 x 128x128, or 1x128 x 1x128 for the wgrad) on the
            same inputs (its own error, and its distance to lingen's)
  time      CUDA events, L2 flushed (a 256 MB write) before each rep, median:
            lingen, torch._scaled_mm blockwise, torch.mm bf16 (and
            torch._grouped_mm bf16 for the grouped shapes)

  python3 tools/fp8_gemm_bench.py OUT_MD [--reps R] [--quick] [--dense-only] [--tile JSON]

--tile gives every lingen call but the tile sweep's a tile (e.g.
'{"cluster": 1}', '{"epilogue": 0}': the same table for another tile).
"""
import json
import sys

import torch

import lingen
from lingen.bench import l2_flush, median_ms

DEV = "cuda"
FLUSH = None
TILE = None  # --tile: lingen's tile in every call but the tile sweep's


def rand_fp8(rows, cols):
    return (2.0 * torch.randn(rows, cols, device=DEV)).clamp(-448, 448).to(torch.float8_e4m3fn)


def rand_colwise(rows, m):
    """A columnwise copy of m tokens as lingen's quantisers write it: [rows,
    round_up(m, 128)] e4m3 (rows 128-byte aligned for TMA), zeros past m."""
    q = rand_fp8(rows, cdiv(m, 128) * 128)
    q[:, m:] = 0
    return q


def rand_scale(*shape):
    e = torch.randint(-3, 4, shape, device=DEV).float()
    return ((0.5 + torch.rand(*shape, device=DEV)) * torch.exp2(e)).contiguous()


def cdiv(a, b):
    return (a + b - 1) // b


def deq_rows(q, s):
    """q [R, L] e4m3 with 1x128 scales s [cdiv(L, 128), R] -> float64."""
    L = q.shape[1]
    return q.double() * s.t().double().repeat_interleave(128, dim=1)[:, :L]


def deq_tiles(q, s):
    """q [R, L] with 128 x 128 scales s [cdiv(R, 128), cdiv(L, 128)]."""
    R, L = q.shape
    full = s.double().repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)
    return q.double() * full[:R, :L]


def timed(fn, reps):
    """The median (ms) of reps calls after 3 untimed ones, the L2 flushed
    (256 MB written) before each."""
    global FLUSH
    if FLUSH is None:
        FLUSH = l2_flush(torch)
    return median_ms(torch, fn, reps, warmup=3, flush=FLUSH)


def rel(y, ref):
    return ((y.double() - ref).abs().max() / ref.abs().max()).item()


def scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16):
    """torch._scaled_mm with blockwise scales (scale shapes pick the recipe)."""
    return torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=out_dtype)


def case(form, M, N, K):
    """Inputs, lingen call (fp32 out), lingen call (bf16 out), scaled_mm call,
    bf16 mm call, float64 reference of sampled rows, and those rows."""
    if form == "forward":
        x, xs, w, ws = rand_fp8(M, K), rand_scale(cdiv(K, 128), M), rand_fp8(N, K), \
            rand_scale(cdiv(N, 128), cdiv(K, 128))
        ours = lambda dt="bf16": lingen.fp8_gemm(x, xs, w, ws, out_dtype=dt, tile=TILE)  # noqa: E731
        peer = lambda: scaled_mm(x, w.t(), xs.t(), ws.t())  # noqa: E731
        xb, wb = x.to(torch.bfloat16), w.to(torch.bfloat16)
        mm = lambda: torch.mm(xb, wb.t())  # noqa: E731
        rows = sample(M)
        ref = deq_rows(x[rows], xs[:, rows]) @ deq_tiles(w, ws).t()
    elif form == "dgrad":  # dx [M, K] = dy [M, N] . w [N, K]
        dy, dys, wt, wts = rand_fp8(M, N), rand_scale(cdiv(N, 128), M), rand_fp8(K, N), \
            rand_scale(cdiv(K, 128), cdiv(N, 128))
        ours = lambda dt="bf16": lingen.fp8_gemm_dgrad(dy, dys, wt, wts, out_dtype=dt, tile=TILE)  # noqa: E731
        peer = lambda: scaled_mm(dy, wt.t(), dys.t(), wts.t())  # noqa: E731
        db, wb = dy.to(torch.bfloat16), wt.to(torch.bfloat16)
        mm = lambda: torch.mm(db, wb.t())  # noqa: E731
        rows = sample(M)
        ref = deq_rows(dy[rows], dys[:, rows]) @ deq_tiles(wt, wts).t()
    else:  # wgrad: dw [N, K] = dyt [N, M] . xt [K, M]^T, the copies' rows round_up(M, 128) apart
        dyt, dyts, xt, xts = rand_colwise(N, M), rand_scale(cdiv(M, 128), N), rand_colwise(K, M), \
            rand_scale(cdiv(M, 128), K)
        ours = lambda dt="fp32": lingen.fp8_gemm_wgrad(dyt, dyts, xt, xts, tokens=M, tile=TILE)  # noqa: E731
        peer = lambda: scaled_mm(dyt, xt.t(), dyts.t(), xts, torch.float32)  # noqa: E731
        db, xb = dyt.to(torch.bfloat16), xt.to(torch.bfloat16)
        mm = lambda: torch.mm(db, xb.t())  # noqa: E731
        rows = sample(N)
        ref = deq_rows(dyt[rows], dyts[:, rows]) @ deq_rows(xt, xts).t()
    return ours, peer, mm, ref, rows


def sample(n, most=512):
    if n <= most:
        return torch.arange(n, device=DEV)
    g = torch.Generator(device=DEV)
    g.manual_seed(n)
    return torch.randperm(n, device=DEV, generator=g)[:most].sort().values


def dense(shapes, reps, lines):
    for form in ("forward", "dgrad", "wgrad"):
        for name, (M, N, K) in shapes:
            ours, peer, mm, ref, rows = case(form, M, N, K)
            acc = {}
            try:
                y32 = ours("fp32")
                acc["fp32"] = rel(y32[rows], ref)
                if form != "wgrad":
                    acc["bf16"] = rel(ours("bf16")[rows], ref)
            except Exception as e:  # noqa: BLE001
                lines.append(f"| {form} | {name} | lingen failed: {str(e)[:200]} |")
                continue
            try:
                yp = peer()
                acc["scaled_mm"] = rel(yp[rows], ref)
                acc["vs_scaled_mm"] = ((y32[rows].double() - yp[rows].double()).abs().max()
                                       / ref.abs().max()).item()
                tp = timed(peer, reps)
            except Exception as e:  # noqa: BLE001
                acc["scaled_mm"], tp = float("nan"), float("nan")
                print(f"{form} {name}: _scaled_mm: {e}", file=sys.stderr)
            t_ours = timed(lambda: ours(), reps)
            t_mm = timed(mm, reps)
            tf = lambda t: 2.0 * M * N * K / (t * 1e-3) / 1e12  # noqa: E731
            lines.append(
                f"| {form} | {name} {M}x{N}x{K} | {t_ours * 1e3:.1f} | {tf(t_ours):.0f} | "
                f"{tf(tp):.0f} | {tf(t_mm):.0f} | {tp / t_ours:.2f} | {acc['fp32']:.2e} | "
                f"{acc.get('bf16', float('nan')):.2e} | {acc['scaled_mm']:.2e} | "
                f"{acc.get('vs_scaled_mm', float('nan')):.2e} |")
            print(lines[-1], flush=True)


def grouped_peer(E, rows, N, K, reps, lines):
    """torch._grouped_mm bf16 over random per-expert counts (lingen's
    grouped GEMM where the library has it)."""
    g = torch.Generator(device="cpu")
    g.manual_seed(E * N + K)
    cuts = torch.sort(torch.randint(0, rows + 1, (E - 1,), generator=g)).values
    counts = torch.diff(torch.cat([torch.tensor([0]), cuts, torch.tensor([rows])])).to(torch.int32)
    offs = torch.cumsum(counts, 0).to(torch.int32).to(DEV)
    x = torch.randn(rows, K, device=DEV, dtype=torch.bfloat16)
    w = torch.randn(E, N, K, device=DEV, dtype=torch.bfloat16)
    flops = 2.0 * rows * N * K
    try:
        t = timed(lambda: torch._grouped_mm(x, w.transpose(1, 2), offs=offs), reps)
        line = f"| grouped fwd | {E} experts, {rows} rows, N{N} K{K} | torch._grouped_mm bf16 | " \
               f"{t * 1e3:.1f} us | {flops / (t * 1e-3) / 1e12:.0f} TFLOP/s |"
    except Exception as e:  # noqa: BLE001
        line = f"| grouped fwd | {E} experts N{N} K{K} | torch._grouped_mm failed: {str(e)[:120]} |"
    lines.append(line)
    print(line, flush=True)
    grouped_ours(E, rows, N, K, counts.to(DEV), reps, lines)


def grouped_ours(E, rows, N, K, counts, reps, lines):
    """lingen's grouped forward and dgrad at the same counts; accuracy on a
    sample of experts (float64, their own scale blocks)."""
    KB, NB = cdiv(K, 128), cdiv(N, 128)
    x, xs = rand_fp8(rows, K), rand_scale(KB, rows)
    w, ws = rand_fp8(E * N, K).view(E, N, K), rand_scale(E, NB, KB)
    dy, dys = rand_fp8(rows, N), rand_scale(NB, rows)
    wt, wts = rand_fp8(E * K, N).view(E, K, N), rand_scale(E, KB, NB)
    flops = 2.0 * rows * N * K
    starts = torch.cumsum(counts, 0) - counts
    for form, fn, a, sa, b, sb, cols, red in (
            ("fwd", lingen.fp8_grouped_gemm, x, xs, w, ws, N, K),
            ("dgrad", lingen.fp8_grouped_gemm_dgrad, dy, dys, wt, wts, K, N)):
        try:
            y = fn(a, sa, b, sb, counts, out_dtype="fp32", tile=TILE)
            err = 0.0
            for e in (0, E // 2, E - 1):
                r0, n = int(starts[e]), int(counts[e])
                if n == 0:
                    continue
                rb = cdiv(red, 128)
                blk = sa.flatten()[r0 * rb:(r0 + n) * rb].view(rb, n)
                ref = deq_rows(a[r0:r0 + n], blk) @ deq_tiles(b[e], sb[e]).t()
                err = max(err, rel(y[r0:r0 + n], ref))
            t = timed(lambda: fn(a, sa, b, sb, counts, tile=TILE), reps)
            line = f"| grouped {form} | {E} experts, {rows} rows, N{N} K{K} | lingen fp8 | " \
                   f"{t * 1e3:.1f} us | {flops / (t * 1e-3) / 1e12:.0f} TFLOP/s " \
                   f"(err fp32 {err:.2e}) |"
        except Exception as ex:  # noqa: BLE001
            line = f"| grouped {form} | {E} experts N{N} K{K} | lingen failed: {str(ex)[:160]} |"
        lines.append(line)
        print(line, flush=True)


def grouped_wgrad(E, rows, N, K, reps, lines):
    """lingen's grouped wgrad dw[e] = dy_e^T . x_e (fp32 out) against
    torch._grouped_mm bf16 over the same counts: random ones, and the same
    rounded to 16 (moe_row_map's padded segments: the cp.async path);
    accuracy on a sample of experts."""
    g = torch.Generator(device="cpu")
    g.manual_seed(E * N + K + 1)
    cuts = torch.sort(torch.randint(0, rows + 1, (E - 1,), generator=g)).values
    raw = torch.diff(torch.cat([torch.tensor([0]), cuts, torch.tensor([rows])]))
    dyb = torch.randn(N, rows, device=DEV, dtype=torch.bfloat16)
    xb = torch.randn(rows, K, device=DEV, dtype=torch.bfloat16)
    for label, cs in (("random counts", raw), ("counts % 16 == 0", raw // 16 * 16)):
        counts = cs.to(torch.int32).to(DEV)
        m = int(counts.sum())
        offs = torch.cumsum(counts, 0).to(torch.int32)
        if label == "random counts":
            # its device-side check (each group's tokens a multiple of 16 bytes)
            # would assert and end the process's CUDA context
            line = f"| grouped wgrad | {E} experts, {m} rows, N{N} K{K}, {label} | " \
                   f"torch._grouped_mm bf16 | refused: counts must be multiples of 8 | |"
        else:
            try:
                da, xa = dyb[:, :m].contiguous(), xb[:m].contiguous()
                t = timed(lambda: torch._grouped_mm(da, xa, offs=offs), reps)
                line = f"| grouped wgrad | {E} experts, {m} rows, N{N} K{K}, {label} | " \
                       f"torch._grouped_mm bf16 | {t * 1e3:.1f} us | " \
                       f"{2.0 * m * N * K / (t * 1e-3) / 1e12:.0f} TFLOP/s |"
            except Exception as e:  # noqa: BLE001
                line = f"| grouped wgrad | {label} | torch._grouped_mm failed: {str(e)[:120]} |"
        lines.append(line)
        print(line, flush=True)
        # the declared containers: cdiv(tokens, 128) + experts scale rows
        a, sa = rand_fp8(N, m), rand_scale(cdiv(m, 128) + E, N)
        b, sb = rand_fp8(K, m), rand_scale(cdiv(m, 128) + E, K)
        try:
            dw = lingen.fp8_grouped_gemm_wgrad(a, sa, b, sb, counts, tile=TILE)
            err, start, blk = 0.0, 0, 0
            cl = counts.tolist()
            for e, c in enumerate(cl):
                nb = cdiv(c, 128)
                if c and e in (0, E // 2, E - 1):
                    ea = a.reshape(-1)[start * N:(start + c) * N].view(N, c)
                    eb = b.reshape(-1)[start * K:(start + c) * K].view(K, c)
                    ref = deq_rows(ea, sa[blk:blk + nb]) @ deq_rows(eb, sb[blk:blk + nb]).t()
                    err = max(err, rel(dw[e], ref))
                start, blk = start + c, blk + nb
            out = {"dw": dw}
            t = timed(lambda: lingen.fp8_grouped_gemm_wgrad(a, sa, b, sb, counts, out=out, tile=TILE),
                      reps)
            gbs = E * N * K * 4 / (t * 1e-3) / 1e9
            line = f"| grouped wgrad | {E} experts, {m} rows, N{N} K{K}, {label} | lingen fp8 " \
                   f"(fp32 dw) | {t * 1e3:.1f} us | {2.0 * m * N * K / (t * 1e-3) / 1e12:.0f} " \
                   f"TFLOP/s, dw written at {gbs:.0f} GB/s (err fp32 {err:.2e}) |"
        except Exception as ex:  # noqa: BLE001
            line = f"| grouped wgrad | {label} | lingen failed: {str(ex)[:160]} |"
        lines.append(line)
        print(line, flush=True)


def tiles(reps, lines):
    """lingen's forward at the first shape with each tile `lingen tune` sweeps."""
    M, N, K = 4096, 7168, 16384
    x, xs, w, ws = rand_fp8(M, K), rand_scale(cdiv(K, 128), M), rand_fp8(N, K), \
        rand_scale(cdiv(N, 128), cdiv(K, 128))
    lines += ["", "| tile (forward 4096x7168x16384) | us | TFLOP/s |", "|---|---|---|"]
    for tile in TILE_SWEEP:
        try:
            t = timed(lambda: lingen.fp8_gemm(x, xs, w, ws, tile=tile or None), reps)
            lines.append(f"| {json.dumps(tile) if tile else 'default'} | {t * 1e3:.1f} | "
                         f"{2.0 * M * N * K / (t * 1e-3) / 1e12:.0f} |")
        except Exception as e:  # noqa: BLE001
            lines.append(f"| {tile} | failed: {str(e)[:120]} | |")
        print(lines[-1], flush=True)


# the tiles the sweep times beside the default (the default's own keys say nothing new)
TILE_SWEEP = ({}, {"cluster": 2}, {"cluster": 2, "ahead": 0}, {"m": 256}, {"m": 256, "stages": 3},
              {"n": 160}, {"n": 192}, {"n": 64}, {"m": 64}, {"stages": 5}, {"ahead": 0})

def main():
    out = sys.argv[1]
    reps = int(sys.argv[sys.argv.index("--reps") + 1]) if "--reps" in sys.argv else 15
    global TILE
    TILE = json.loads(sys.argv[sys.argv.index("--tile") + 1]) if "--tile" in sys.argv else None
    shapes = [("DeepSeek", (4096, 7168, 16384)), ("DeepSeek", (4096, 4096, 7168)),
              ("Ling-mini qkv", (8192, 3072, 2048)), ("Ling-mini out", (8192, 2048, 2048)),
              ("odd M", (6001, 4096, 7168)), ("M cuBLAS refuses", (9973, 3584, 5120)),
              ("its multiple of 128", (9984, 3584, 5120))]
    if "--quick" in sys.argv:
        shapes = shapes[:1]
    lines = [f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, lingen tile "
             f"{TILE or 'default'}", "",
             "| form | shape MxNxK | lingen us | lingen TFLOP/s | _scaled_mm TFLOP/s | mm bf16 "
             "TFLOP/s | speed-up vs _scaled_mm | err fp32 | err bf16 | err _scaled_mm | "
             "lingen - _scaled_mm |", "|" + "---|" * 11]
    dense(shapes, reps, lines)
    if "--dense-only" in sys.argv:
        with open(out, "w") as f:
            f.write("\n".join(lines) + "\n")
        return
    lines += ["", "| grouped | shape | peer | time | rate |", "|---|---|---|---|---|"]
    for N, K in ((1024, 2048), (2048, 512)):
        grouped_peer(256, 65536, N, K, reps, lines)
    for N, K in ((1024, 2048), (2048, 512)):
        grouped_wgrad(256, 65536, N, K, reps, lines)
    tiles(reps, lines)
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
