"""Side-by-side benchmark: lingen against eager PyTorch, torch.compile of
the same PyTorch code, and Liger-Kernel where it has the op, in one process
on the same inputs, with linghe's H200 figures (shared/TARGETS.md) beside.

    python -m lingen.bench [--json bench/FILE.json] [--quick]
    python -m lingen.bench --plot bench/FILE.json [-o FILE.png]

GPU time only: a CUDA graph of N x (L2 flush + op) minus a graph of N x
flush, median of several replays (the flush writes 256 MB, more than the
60 MB L2 of an H200). Every result is checked against eager PyTorch before
it is timed; % of copy = (each input read once + each output written once)
/ time, against a device-to-device copy measured in the same run.
"""
import argparse
import json
import platform
import statistics
import sys

# linghe on one H200 (shared/TARGETS.md, measured 2026-11-30): (kernel, shape) -> us
LINGHE_US = {
    ("rmsnorm_quant", "8192x2048"): 41.2, ("rmsnorm_quant", "128x2048"): 11.0,
    ("rmsnorm_quant", "1024x2048"): 13.7, ("rmsnorm fwd", "8192x2048"): 21.2,
    ("rmsnorm fwd", "8192x4096"): 37.9, ("rmsnorm bwd", "8192x2048"): 46.8,
}
IMPLS = ("lingen", "eager", "compile", "liger")


def _torch_refs(torch):
    """The PyTorch code the peers run (eager, and through torch.compile)."""
    def rmsnorm_fwd(x, w, eps=1e-6):
        xf = x.float()
        r = torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
        return (xf * r * w.float()).to(x.dtype), r.squeeze(-1)

    def rmsnorm_bwd(dy, x, w, rms):
        xf, g = x.float(), dy.float()
        r = rms[:, None]
        gw = g * w.float()
        dot = (xf * gw).sum(-1, keepdim=True)
        dx = r * gw - r * r * r * xf * dot / x.shape[-1]
        return dx.to(x.dtype), (g * xf * r).sum(0)

    def pow2(a):  # 2^ceil(log2 s) by the exponent: log2 of 2^k need not be exact
        m, e = torch.frexp((a / 448.0).clamp(min=1e-30))
        return torch.ldexp(torch.ones_like(m), e - (m == 0.5).int())

    def quant(y):
        t, h = y.shape
        b = y.view(t, h // 128, 128)
        s = pow2(b.abs().amax(-1))
        q = (b / s[..., None]).view(t, h).to(torch.float8_e4m3fn)
        nb = (t + 127) // 128
        c = torch.nn.functional.pad(y, (0, 0, 0, nb * 128 - t)).view(nb, 128, h)
        st = pow2(c.abs().amax(1))
        qt = (c / st[:, None, :]).view(nb * 128, h)[:t].t().contiguous().to(torch.float8_e4m3fn)
        return q, s.t().contiguous(), qt, st

    def rmsnorm_quant(x, w, eps=1e-6):
        xf = x.float()
        r = torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
        q, s, qt, st = quant(xf * r * w.float())
        return q, s, r.squeeze(-1), qt, st

    def fp8_quant(x):
        return quant(x.float())

    return dict(rmsnorm_fwd=rmsnorm_fwd, rmsnorm_bwd=rmsnorm_bwd, rmsnorm_quant=rmsnorm_quant,
                fp8_quant=fp8_quant)


class Timer:
    def __init__(self, torch, n=20, reps=7):
        self.torch, self.n, self.reps = torch, n, reps
        self.flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        self._base = None

    def _graph(self, fn):
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(self.n):
                self.flush.zero_()
                fn()
        return g

    def _replay(self, g):
        torch = self.torch
        out = []
        for _ in range(self.reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) * 1e3)
        return statistics.median(out)

    def us(self, fn):
        """Median GPU microseconds of one fn() (the flushes subtracted)."""
        if self._base is None:
            self._base = self._replay(self._graph(lambda: None))
        t = self._replay(self._graph(fn))
        return max(t - self._base, 0.0) / self.n


def _nbytes(ts):
    return sum(t.numel() * t.element_size() for t in ts if t is not None)


def _close(torch, got, want, what, rtol=2e-2):
    """Results agree: each value within rtol of the reference value plus
    rtol of the reference's RMS (bf16 outputs and gradients, sums whose
    order differs), at most 1e-3 of them off; e4m3 payloads and scales
    compared as dequantised values."""
    for i, (g, w) in enumerate(zip(got, want)):
        if g is None or w is None:
            continue
        g, w = g.float(), w.float()
        if g.shape != w.shape:
            raise AssertionError(f"{what}[{i}]: shape {tuple(g.shape)} != {tuple(w.shape)}")
        err = (g - w).abs()
        bound = rtol * w.abs() + rtol * w.square().mean().sqrt().clamp(min=1e-30)
        bad = (err > bound).float().mean().item()
        if bad > 1e-3:
            raise AssertionError(f"{what}[{i}]: {bad:.2e} of the values differ")


def _dequant(torch, q, s, qt, st):
    t, h = q.shape
    rows = q.float() * s.t().repeat_interleave(128, dim=1)
    cols = qt.t().float() * st.repeat_interleave(128, dim=0)[:t]
    return rows, cols


def cases(quick):
    big = [(8192, 2048)] if quick else [(8192, 2048), (8192, 4096), (8192, 7168)]
    small = [(128, 2048), (1024, 2048)]
    return [("rmsnorm_quant", s) for s in big + small] + \
           [("rmsnorm fwd", s) for s in big + small] + \
           [("rmsnorm bwd", s) for s in big + small] + \
           [("fp8_quant", s) for s in big + small]


def run(quick=False):
    import torch

    import lingen
    import lingen.torch as lt
    refs = _torch_refs(torch)
    compiled = {k: torch.compile(v) for k, v in refs.items()}
    try:
        from liger_kernel.transformers.functional import liger_rms_norm
        import liger_kernel
        liger_version = getattr(liger_kernel, "__version__", "installed")
    except ImportError:
        liger_rms_norm, liger_version = None, None
    timer = Timer(torch, n=10 if quick else 20)
    src = torch.empty(256 << 20, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    copy_us = timer.us(lambda: dst.copy_(src))
    copy_gbps = 2 * src.numel() / copy_us / 1e3
    rows = []
    g = torch.Generator(device="cuda").manual_seed(0)
    for kernel, (t, h) in cases(quick):
        x = torch.randn(t, h, generator=g, device="cuda").bfloat16()
        w = (torch.rand(h, generator=g, device="cuda") + 0.5).bfloat16()
        dy = torch.randn(t, h, generator=g, device="cuda").bfloat16()
        impls = {}
        if kernel == "rmsnorm_quant":
            impls["lingen"] = lambda: lt.rms_norm_quant(x, w)
            impls["eager"] = lambda: refs["rmsnorm_quant"](x, w)
            impls["compile"] = lambda: compiled["rmsnorm_quant"](x, w)

            def norm(r):
                q, s, rms, qt, st = r
                return (*_dequant(torch, q, s, qt, st), rms)
        elif kernel == "fp8_quant":
            impls["lingen"] = lambda: lt.fp8_quant(x)
            impls["eager"] = lambda: refs["fp8_quant"](x)
            impls["compile"] = lambda: compiled["fp8_quant"](x)

            def norm(r):
                return _dequant(torch, *r)
        elif kernel == "rmsnorm fwd":
            impls["lingen"] = lambda: lt.rms_norm_forward(x, w)
            impls["eager"] = lambda: refs["rmsnorm_fwd"](x, w)
            impls["compile"] = lambda: compiled["rmsnorm_fwd"](x, w)
            if liger_rms_norm:
                impls["liger"] = lambda: (liger_rms_norm(x, w, 1e-6, in_place=False), None)

            def norm(r):
                return r
        else:
            rms = refs["rmsnorm_fwd"](x, w)[1]
            impls["lingen"] = lambda: lt.rms_norm_backward(dy, x, w, 1e-6, rms)
            impls["eager"] = lambda: refs["rmsnorm_bwd"](dy, x, w, rms)
            impls["compile"] = lambda: compiled["rmsnorm_bwd"](dy, x, w, rms)
            if liger_rms_norm:
                xl = x.clone().requires_grad_()
                wl = w.clone().requires_grad_()
                yl = liger_rms_norm(xl, wl, 1e-6, in_place=False)
                impls["liger"] = lambda: torch.autograd.grad(yl, (xl, wl), dy, retain_graph=True)

            def norm(r):
                return r
        want = norm(impls["eager"]())
        out = impls["lingen"]()
        if kernel == "rmsnorm bwd":
            nbytes = _nbytes((dy, x, w, rms, *out))
        elif kernel == "rmsnorm_quant":
            nbytes = _nbytes((x, w, *out))
        elif kernel == "fp8_quant":
            nbytes = _nbytes((x, *out))
        else:
            nbytes = _nbytes((x, w, *out))
        for name, fn in impls.items():
            row = dict(kernel=kernel, shape=f"{t}x{h}", impl=name, bytes=nbytes)
            try:
                _close(torch, norm(fn()), want, f"{kernel} {t}x{h} {name}")
                try:
                    row["us"] = timer.us(fn)
                except RuntimeError:  # a first capture can fail on lazy set-up: once more
                    torch.cuda.synchronize()
                    row["us"] = timer.us(fn)
                row["pct_copy"] = 100.0 * nbytes / (row["us"] * 1e3) / copy_gbps
            except Exception as e:  # a peer that fails is reported, not fatal
                row["error"] = f"{type(e).__name__}: {e}"[:300]
            rows.append(row)
            print(_line(row), file=sys.stderr, flush=True)
        lh = LINGHE_US.get((kernel, f"{t}x{h}"))
        if lh:
            rows.append(dict(kernel=kernel, shape=f"{t}x{h}", impl="linghe (TARGETS.md)",
                             bytes=nbytes, us=lh,
                             pct_copy=100.0 * nbytes / (lh * 1e3) / copy_gbps, quoted=True))
    host = host_overhead(torch, lingen, lt, refs, liger_rms_norm)
    return dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                triton=_version("triton"), liger=liger_version, lingen=lingen.__version__,
                python=platform.python_version(), copy_gbps=copy_gbps, method=__doc__.strip(),
                rows=rows, host=host)


def host_overhead(torch, lingen, lt, refs, liger_rms_norm, n=2000):
    """Host microseconds per call, CPU-bound (RMSNorm forward at 128 x 2048,
    the same shapes every call): the Python path of each implementation."""
    import time
    x = torch.randn(128, 2048, device="cuda").bfloat16()
    w = torch.ones(2048, device="cuda", dtype=torch.bfloat16)
    calls = {"lingen.rmsnorm (any arrays)": lambda: lingen.rmsnorm(x, w),
             "lingen.torch.rms_norm_forward (eager path)": lambda: lt.rms_norm_forward(x, w),
             "torch.ops.lingen.rmsnorm_forward (dispatcher)":
                 lambda: torch.ops.lingen.rmsnorm_forward(x, w),
             "torch.nn.functional.rms_norm (eager)": lambda: torch.nn.functional.rms_norm(
                 x, (2048,), w, 1e-6)}
    if liger_rms_norm:
        calls["liger_rms_norm"] = lambda: liger_rms_norm(x, w, 1e-6, in_place=False)
    out = {}
    for name, fn in calls.items():
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        best = []
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            best.append((t1 - t0) / n * 1e6)
        out[name] = min(best)
        print(f"host {name:45} {out[name]:7.2f} us/call", file=sys.stderr, flush=True)
    return out


def _version(mod):
    try:
        return __import__(mod).__version__
    except Exception:
        return None


def _line(r):
    if "error" in r:
        return f"{r['kernel']:14} {r['shape']:10} {r['impl']:10} {r['error']}"
    return (f"{r['kernel']:14} {r['shape']:10} {r['impl']:10} {r['us']:9.2f} us "
            f"{r['pct_copy']:6.1f}% of copy")


def table(res):
    """Markdown: one line per kernel and shape, us (% of copy) per impl and
    lingen's speed-up over each."""
    impls = list(IMPLS) + ["linghe (TARGETS.md)"]
    by = {}
    for r in res["rows"]:
        by.setdefault((r["kernel"], r["shape"]), {})[r["impl"]] = r
    out = [f"copy ceiling measured in this run: {res['copy_gbps']:.0f} GB/s; "
           f"{res['device']}, torch {res['torch']}, triton {res['triton']}, "
           f"Liger-Kernel {res['liger']}, lingen {res['lingen']}", "",
           "| kernel | shape | " + " | ".join(impls) + " | lingen speed-up |",
           "|---|---|" + "---|" * (len(impls) + 1)]
    for (k, s), d in by.items():
        cells = []
        for i in impls:
            r = d.get(i)
            if r is None:
                cells.append("—")
            elif "error" in r:
                cells.append("failed")
            else:
                cells.append(f"{r['us']:.1f} ({r['pct_copy']:.0f}%)")
        ln = d.get("lingen", {}).get("us")
        ups = [f"{i.split()[0]} {d[i]['us'] / ln:.2f}x" for i in impls[1:]
               if ln and i in d and "us" in d[i]]
        out.append(f"| {k} | {s} | " + " | ".join(cells) + " | " + ", ".join(ups) + " |")
    if res.get("host"):
        out += ["", "Host time per call, CPU-bound (RMSNorm forward 128x2048, same shapes):", "",
                "| call | us |", "|---|---|"]
        out += [f"| {k} | {v:.1f} |" for k, v in res["host"].items()]
    return "\n".join(out)


def plot(res, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    impls = list(IMPLS) + ["linghe (TARGETS.md)"]
    keys = []
    for r in res["rows"]:
        if (r["kernel"], r["shape"]) not in keys:
            keys.append((r["kernel"], r["shape"]))
    fig, ax = plt.subplots(figsize=(max(10, len(keys) * 0.9), 5))
    width = 0.8 / len(impls)
    for j, impl in enumerate(impls):
        vals = []
        for k in keys:
            r = next((r for r in res["rows"] if (r["kernel"], r["shape"]) == k
                      and r["impl"] == impl and "us" in r), None)
            vals.append(r["pct_copy"] if r else 0.0)
        ax.bar([i + (j - (len(impls) - 1) / 2) * width for i in range(len(keys))], vals, width,
               label=impl)
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels([f"{k}\n{s}" for k, s in keys], rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("% of copy ceiling (higher is faster)")
    ax.set_title(f"{res['device']}: % of the device-to-device copy ceiling "
                 f"({res['copy_gbps']:.0f} GB/s)")
    ax.axhline(100, color="grey", lw=0.5)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m lingen.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", help="write the results here")
    p.add_argument("--markdown", help="write the table here")
    p.add_argument("--quick", action="store_true", help="fewer shapes and repetitions")
    p.add_argument("--plot", metavar="JSON", help="draw the chart of a results file")
    p.add_argument("-o", "--output", help="the chart's PNG (default: beside the JSON)")
    a = p.parse_args(argv)
    if a.plot:
        with open(a.plot) as f:
            res = json.load(f)
        out = a.output or a.plot.rsplit(".", 1)[0] + ".png"
        plot(res, out)
        print(table(res))
        print(f"wrote {out}", file=sys.stderr)
        return 0
    res = run(a.quick)
    text = table(res)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
