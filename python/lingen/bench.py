"""Side-by-side benchmark: lingen against eager PyTorch, torch.compile of
the same PyTorch code, and Liger-Kernel where it has the op, in one process
on the same inputs, with linghe's published H200 figures (docs/performance.md) beside.

    python -m lingen.bench [--json FILE.json] [--quick] [--budget SECONDS] [--only K] [--impl I]
                           [--shape S] [--seed N]
    python -m lingen.bench --list [--quick]
    python -m lingen.bench --plot FILE.json [-o FILE.png]
    python -m lingen.bench --step MODEL.json [--tokens T] [--json FILE.json]

bench/table.py turns the JSON into bench/README.md's table.

GPU time only: a CUDA graph of N x (L2 flush + op) minus a graph of N x
flush, median of several replays (the flush writes 256 MB, more than the
60 MB L2 of an H200). An op that cannot be captured (one that waits for the
host, as a data-dependent size does) or that takes a millisecond or more is
timed instead by CUDA events around each call after a flush, median of N
(its row says "events"). Every result is
checked against eager PyTorch before it is timed; % of copy = (each input
read once + each output written once) / time, against a device-to-device
copy measured in the same run. linghe's published H200 figures
(docs/performance.md) come as rows of their own, marked quoted: they are not
measured by this run. With --budget, the first case of every kernel runs
first, then the other shapes, and no case starts after the budget is spent
(the JSON lists those as not run); --json is rewritten after every case, so
a run cut short keeps what it measured.

The full run (not --quick) times the odd-shape rule's rows
(docs/performance.md): every family whose rows take a token count at 6001
and 8191 tokens beside 6016 and 8192, and the per-expert kernels at random
per-expert counts beside the same counts rounded to multiples of 128
("counts%128" rows). Every case draws its inputs (random counts and routings
included) from a generator reseeded with --seed (default 0) before the case,
so a row's counts are the same whichever cases run before it, and a
counts%128 row rounds the counts of its random-count row; the seed is in the
table's header and the JSON. A peer that raises on a shape (a size it does
not take) is recorded as refused, and the run goes on.
"""
import argparse
import gc
import json
import os
import platform
import statistics
import sys

IMPLS = ("lingen", "eager", "compile", "liger", "linghe", "quack")
SEED = 0  # every case's inputs and random per-expert counts (--seed)
QUOTED = "linghe (published, TARGETS)"


class Env:
    """What a case's make(env) builds its inputs and peers from."""

    def __init__(self, torch, lt, liger, linghe=None, seed=SEED):
        import lingen
        self.torch, self.lt, self.liger, self.lingen = torch, lt, liger, lingen
        self.linghe = linghe  # linghe's triton functions by name, or None
        self.seed = seed
        self.gen = torch.Generator(device="cuda").manual_seed(seed)
        self._compiled = {}

    def randn(self, *shape, dtype=None):
        t = self.torch
        return t.randn(*shape, generator=self.gen, device="cuda").to(dtype or t.bfloat16)

    def weight(self, *shape, dtype=None):
        t = self.torch
        return (t.rand(*shape, generator=self.gen, device="cuda") + 0.5).to(dtype or t.bfloat16)

    def compiled(self, fn):
        """torch.compile of fn(torch, *args), once per function, called
        with the args alone. Each function is compiled as itself (a shared
        wrapper, a partial too, is one code object for dynamo, recompiled for
        every function until its recompile limit sends the rest to eager)."""
        if fn not in self._compiled:
            c, torch = self.torch.compile(fn), self.torch
            self._compiled[fn] = lambda *args, **kwargs: c(torch, *args, **kwargs)
        return self._compiled[fn]


def l2_flush(torch, nbytes=256 << 20):
    """A buffer whose zero_() empties the L2 of what the last call left: it
    writes nbytes (256 MB: more than an H200's 60 MB L2)."""
    return torch.empty(nbytes, dtype=torch.uint8, device="cuda")


def event_times(torch, fn, reps, warmup=0, flush=None):
    """The GPU times in ms of reps calls of fn(), each between two CUDA
    events on the current stream, after warmup untimed calls; flush (a
    l2_flush buffer, or None): zeroed before each timed call, outside its
    events. The one timer of lingen.bench, tools/ and bench/."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        if flush is not None:
            flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return out


def median_ms(torch, fn, reps, warmup=0, flush=None):
    """The median of event_times (ms)."""
    return statistics.median(event_times(torch, fn, reps, warmup, flush))


class Timer:
    def __init__(self, torch, n=20, reps=7):
        self.torch, self.n, self.reps = torch, n, reps
        self.flush = l2_flush(torch)
        self._base = {}

    def _graph(self, fn, n):
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(n):
                self.flush.zero_()
                fn()
        return g

    def _replay(self, g):
        """Median GPU microseconds of a replay of g (reps replays)."""
        return median_ms(self.torch, g.replay, self.reps) * 1e3

    def _events(self, fn, n=None):
        """Median GPU microseconds of fn() between two events, each call
        after a flush (for what a graph cannot capture), of n calls
        (default 2 x the graph's count) after one untimed call."""
        return median_ms(self.torch, fn, n or self.n * 2, warmup=1, flush=self.flush) * 1e3

    def us(self, fn):
        """(median GPU microseconds of one fn(), how it was timed): a graph
        (the flushes subtracted), tried twice (a first capture can fail on
        lazy set-up), else events. An op of a millisecond or more is timed
        by events alone: its launch is under 1% of it, and a graph of it
        would keep its temporaries (an eager peer's fp32 copies of 8192 x
        157184 logits, several GiB each) in the graph's private pool, which
        a failed capture can leave behind for the rest of the run."""
        probe = self._events(fn, 1)
        if probe >= 1000:
            return self._events(fn, max(3, min(self.n * 2, int(self.n * 2000 / probe)))), "events"
        n = self.n
        if n not in self._base:
            self._base[n] = self._replay(self._graph(lambda: None, n))
        for _ in range(2):
            try:
                t = self._replay(self._graph(fn, n))
                return max(t - self._base[n], 0.0) / n, "graph"
            except Exception:  # not capturable (or lazy set-up on the first try)
                try:
                    self.torch.cuda.synchronize()
                except Exception:
                    pass
                gc.collect()  # the failed graph and its pool, before the next try
                self.torch.cuda.empty_cache()
        return self._events(fn), "events"


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


def _linghe():
    """linghe's entry points by name (docs/kernels.md names: triton_rms_norm_forward,
    ...) when linghe is importable, else None."""
    try:
        import importlib
        out = {}
        for mod in ("norm", "silu", "loss", "gather", "scatter", "rope", "gate", "reduce"):
            try:
                m = importlib.import_module(f"linghe.utils.{mod}")
            except ImportError:
                continue
            out.update({k: v for k, v in vars(m).items() if k.startswith("triton_")})
        return out or None
    except Exception:
        return None


def _quack_version():
    from lingen.benches.quack import version
    return version()


def ordered(quick, only=None, shapes=None):
    """The cases to run, in order: quick -> the quick set; else the quick
    set first (one case of every kernel at its target shape), then every
    other case of the full set; only / shapes: those whose kernel / shape
    contains one of these."""
    from lingen.benches import all_cases
    first = all_cases(True)
    cases = first if quick else first + [
        c for c in all_cases(False) if (c.kernel, c.shape) not in
        {(f.kernel, f.shape) for f in first}]
    return [c for c in cases if (not only or any(o in c.kernel for o in only))
            and (not shapes or any(o in c.shape for o in shapes))]


def _case(torch, env, timer, case, copy_gbps, rows, impls=None):
    """Time one case's implementations (those named in impls, else all) into
    rows (errors recorded); eager runs once anyway, for the check."""
    kernel, shape = case.kernel, case.shape
    env.gen.manual_seed(env.seed)  # a case's inputs whatever ran before it
    try:
        setup = case.make(env)
        want = setup.norm(setup.impls["eager"]())
        out = setup.impls["lingen"]()
    except Exception as e:  # a case that cannot be set up is reported, not fatal
        rows.append(dict(kernel=kernel, shape=shape, impl="lingen",
                         error=f"{type(e).__name__}: {e}"[:300]))
        print(_line(rows[-1]), file=sys.stderr, flush=True)
        return
    outs = out if isinstance(out, (tuple, list)) else (out,)
    nbytes = _nbytes((*setup.tensors, *outs))
    for name, fn in setup.impls.items():
        if impls and name not in impls:
            continue
        row = dict(kernel=kernel, shape=shape, impl=name, bytes=nbytes)
        try:
            try:
                got = fn()
            except Exception:  # the peer does not take this shape (or is not there)
                row["refused"] = True
                raise
            _close(torch, setup.norm(got), want, f"{kernel} {shape} {name}", case.rtol)
            row["us"], row["timer"] = timer.us(fn)
            row["pct_copy"] = 100.0 * nbytes / (row["us"] * 1e3) / copy_gbps
            if case.extra.get("flops"):
                row["tflops"] = case.extra["flops"] / (row["us"] * 1e6)
        except Exception as e:  # a peer that fails is reported, not fatal
            row["error"] = f"{type(e).__name__}: {e}"[:300]
            if isinstance(e, torch.cuda.OutOfMemoryError):
                del e  # (its traceback holds the frames' tensors)
                gc.collect()
                torch.cuda.empty_cache()
        rows.append(row)
        print(_line(row), file=sys.stderr, flush=True)
    if case.linghe_us:
        lh = case.linghe_us
        rows.append(dict(kernel=kernel, shape=shape, impl=QUOTED, bytes=nbytes, us=lh,
                         pct_copy=100.0 * nbytes / (lh * 1e3) / copy_gbps, quoted=True))
        if case.extra.get("flops"):
            rows[-1]["tflops"] = case.extra["flops"] / (lh * 1e6)


def run(quick=False, only=None, budget=None, save=None, impls=None, shapes=None, seed=SEED):
    """Every case, timed; save(res) after each (for --json)."""
    import time

    import torch

    import lingen
    import lingen.torch as lt
    start = time.monotonic()
    try:
        import liger_kernel
        import liger_kernel.transformers.functional as liger
        liger_version = getattr(liger_kernel, "__version__", "installed")
    except ImportError:
        liger, liger_version = None, None
    linghe = _linghe()
    env = Env(torch, lt, liger, linghe, seed)
    timer = Timer(torch, n=10 if quick else 20)
    src = torch.empty(256 << 20, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    copy_us = timer.us(lambda: dst.copy_(src))[0]
    copy_gbps = 2 * src.numel() / copy_us / 1e3
    del src, dst
    rows, skipped = [], []
    res = dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
               triton=_version("triton"), liger=liger_version, quack=_quack_version(),
               linghe=_version("linghe") if linghe else None, lingen=lingen.__version__,
               python=platform.python_version(), copy_gbps=copy_gbps, method=__doc__.strip(),
               command=" ".join(["python -m lingen.bench", *sys.argv[1:]]),
               date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               seed=seed, rows=rows, not_run=skipped, host={})
    for case in ordered(quick, only, shapes):
        if budget is not None and time.monotonic() - start > budget:
            skipped.append(f"{case.kernel} {case.shape}")
            continue
        _case(torch, env, timer, case, copy_gbps, rows, impls)
        gc.collect()  # a case's tensors, graphs and failed peers' tracebacks, before the next
        torch.cuda.empty_cache()
        held, kept = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        if held > 1 << 30 or kept > held + (4 << 30):  # what a case leaves behind
            # shrinks every later one's room (reserved: held by graphs' pools)
            print(f"{case.kernel} {case.shape}: {held / 2**30:.1f} GiB still allocated after it, "
                  f"{kept / 2**30:.1f} GiB reserved", file=sys.stderr, flush=True)
        if save:
            save(res)
    res["host"] = host_overhead(torch, lingen, lt, liger)
    res["seconds"] = time.monotonic() - start
    if skipped:
        print(f"not run (budget of {budget} s spent): {len(skipped)} cases", file=sys.stderr)
    return res


def host_overhead(torch, lingen, lt, liger, n=2000):
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
    if liger:
        calls["liger_rms_norm"] = lambda: liger.liger_rms_norm(x, w, 1e-6, in_place=False)
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
        what = "refused: " if r.get("refused") else ""
        return f"{r['kernel']:14} {r['shape']:10} {r['impl']:10} {what}{r['error']}"
    flops = f" {r['tflops']:7.1f} TFLOP/s" if "tflops" in r else ""
    how = " (events)" if r.get("timer") == "events" else ""
    return (f"{r['kernel']:14} {r['shape']:10} {r['impl']:10} {r['us']:9.2f} us "
            f"{r['pct_copy']:6.1f}% of copy{flops}{how}")


def _impls(res):
    """The implementations in the results: the usual ones first, then any a
    case adds (torch.mm, ...), linghe's quoted figure last."""
    seen = list(IMPLS)
    for r in res["rows"]:
        if r["impl"] not in seen and not r.get("quoted"):
            seen.append(r["impl"])
    quoted = [r["impl"] for r in res["rows"] if r.get("quoted")]
    return seen + ([quoted[0]] if quoted else [QUOTED])


def table(res):
    """Markdown: one line per kernel and shape, us (% of copy) per impl and
    lingen's speed-up over each."""
    impls = _impls(res)
    by = {}
    for r in res["rows"]:
        by.setdefault((r["kernel"], r["shape"]), {})[r["impl"]] = r
    out = [f"copy ceiling measured in this run: {res['copy_gbps']:.0f} GB/s; "
           "ev: timed by events (not capturable in a graph); refused: the peer raised on "
           "this shape; failed: its result differs from eager's; "
           f"inputs and random per-expert counts: seed {res.get('seed', SEED)} (every row); "
           f"{res['device']}, torch {res['torch']}, triton {res['triton']}, "
           f"Liger-Kernel {res['liger']}, QuACK {res.get('quack')}, lingen {res['lingen']}", "",
           "| kernel | shape | " + " | ".join(impls) + " | lingen speed-up |",
           "|---|---|" + "---|" * (len(impls) + 1)]
    for (k, s), d in by.items():
        cells = []
        for i in impls:
            r = d.get(i)
            if r is None:
                cells.append("—")
            elif "error" in r:
                cells.append("refused" if r.get("refused") else "failed")
            elif "tflops" in r:  # a GEMM: TFLOP/s rather than % of copy
                cells.append(f"{r['us']:.1f} ({r['tflops']:.0f} TFLOP/s)")
            else:
                cells.append(f"{r['us']:.1f} ({r['pct_copy']:.0f}%)")
            if r is not None and r.get("timer") == "events":
                cells[-1] += " ev"
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
    impls = _impls(res)
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
    p.add_argument("--quick", action="store_true",
                   help="fewer shapes and repetitions: one shape a kernel, without the odd "
                   "token counts (6001, 8191, their 6016 / 8192 neighbours) and the random "
                   "vs counts%%128 per-expert rows")
    p.add_argument("--only", action="append", metavar="KERNEL",
                   help="only the kernels whose name contains this (repeatable)")
    p.add_argument("--budget", type=float, metavar="SECONDS",
                   help="start no case after this many seconds (target shapes first)")
    p.add_argument("--shape", action="append", metavar="SHAPE",
                   help="only the shapes that contain this (repeatable)")
    p.add_argument("--impl", action="append", metavar="NAME",
                   help="time only these implementations (repeatable: lingen, eager, ...)")
    p.add_argument("--seed", type=int, default=SEED,
                   help="the seed of every case's inputs and random per-expert counts "
                   "(default %(default)s; printed in the table's header)")
    p.add_argument("--list", action="store_true", help="print the cases in run order and stop")
    p.add_argument("--plot", metavar="JSON", help="draw the chart of a results file")
    p.add_argument("-o", "--output", help="the chart's PNG (default: beside the JSON)")
    p.add_argument("--step", metavar="MODEL",
                   help="time every kernel of the model's expanded training step (lingen.step)")
    p.add_argument("--tokens", type=int, default=8192, help="with --step: tokens of the step")
    a = p.parse_args(argv)
    if a.step:
        from lingen import step
        res = step.run(a.step, a.tokens)
        text = step.table(res)
        print(text)
        for path, data in ((a.json, json.dumps(res, indent=1)), (a.markdown, text)):
            if path:
                with open(path, "w") as f:
                    f.write(data + "\n")
        return 0
    if a.plot:
        with open(a.plot) as f:
            res = json.load(f)
        out = a.output or a.plot.rsplit(".", 1)[0] + ".png"
        plot(res, out)
        print(table(res))
        print(f"wrote {out}", file=sys.stderr)
        return 0
    if a.list:
        for c in ordered(a.quick, a.only, a.shape):
            print(f"{c.kernel:28} {c.shape}")
        return 0

    def save(res):
        if a.json:
            with open(a.json + ".tmp", "w") as f:
                json.dump(res, f, indent=1)
            os.replace(a.json + ".tmp", a.json)
    res = run(a.quick, a.only, a.budget, save, a.impl, a.shape, a.seed)
    save(res)
    text = table(res)
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
