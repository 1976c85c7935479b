"""Where a training step leaves the GPU idle: reads a PyTorch-profiler Chrome
trace (examples/train_moe.py --profile --trace PREFIX) and prints the
device's busy and idle time, and the idle time by the host operation that
was running when each gap began (the innermost CPU op, and any CUDA runtime
call inside the gap, such as a synchronisation).

    python3 tools/trace_gaps.py PREFIX-fp8.json [--steps N] [--min-us 5] [--top 25]
"""
import argparse
import bisect
import collections
import json

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def load(path):
    with open(path) as f:
        t = json.load(f)
    return t["traceEvents"] if isinstance(t, dict) else t


def intervals(events, cats):
    out = [(e["ts"], e["ts"] + e.get("dur", 0), e) for e in events
           if e.get("ph") == "X" and e.get("cat") in cats]
    out.sort(key=lambda x: x[0])
    return out


def busy_gaps(dev, min_us):
    """The union of the device intervals, and the gaps between them."""
    gaps, busy = [], 0.0
    end = None
    start = None
    for s, e, _ in dev:
        if end is None:
            start, end = s, e
            continue
        if s > end:
            busy += end - start
            if s - end >= min_us:
                gaps.append((end, s))
            start, end = s, e
        else:
            end = max(end, e)
    if end is not None:
        busy += end - start
    return busy, gaps


def innermost(cpu, starts, t):
    """The innermost CPU op running at time t (the latest-starting one that
    contains t), or None."""
    i = bisect.bisect_right(starts, t)
    best = None
    for j in range(i - 1, max(i - 400, -1), -1):
        s, e, ev = cpu[j]
        if s <= t <= e and (best is None or s > best[0]):
            best = (s, e, ev)
    return best[2]["name"] if best else None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace")
    p.add_argument("--steps", type=int, default=0, help="steps the trace holds (per-step figures)")
    p.add_argument("--min-us", type=float, default=5.0, help="gaps shorter than this are not counted")
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args()
    ev = load(a.trace)
    dev = intervals(ev, DEVICE_CATS)
    if not dev:
        raise SystemExit(f"{a.trace}: no device events (record with ProfilerActivity.CUDA)")
    cpu = intervals(ev, ("cpu_op", "python_function", "user_annotation"))
    rt = intervals(ev, ("cuda_runtime", "cuda_driver"))
    starts = [c[0] for c in cpu]
    rstarts = [r[0] for r in rt]
    busy, gaps = busy_gaps(dev, a.min_us)
    span = dev[-1][1] - dev[0][0]
    idle = sum(e - s for s, e in gaps)
    per = a.steps or 1
    unit = "a step" if a.steps else "in all"
    print(f"device span {span / 1e3 / per:.2f} ms {unit}: busy {busy / 1e3 / per:.2f}, "
          f"idle in gaps >= {a.min_us:g} us {idle / 1e3 / per:.2f} ({len(gaps)} gaps)")
    by_op, by_rt = collections.Counter(), collections.Counter()
    n_op = collections.Counter()
    for s, e in gaps:
        name = innermost(cpu, starts, s) or "(no host op)"
        by_op[name] += e - s
        n_op[name] += 1
        i = bisect.bisect_left(rstarts, s)
        seen = set()
        while i < len(rt) and rt[i][0] < e:
            nm = rt[i][2]["name"]
            if nm not in seen:
                by_rt[nm] += min(rt[i][1], e) - rt[i][0]
                seen.add(nm)
            i += 1
    print(f"\nidle by the host op running when the gap began (ms {unit}, gaps):")
    for name, us in by_op.most_common(a.top):
        print(f"  {us / 1e3 / per:8.3f} {n_op[name] / per:7.1f}  {name[:110]}")
    print(f"\nCUDA runtime/driver calls inside the gaps (ms {unit} of the call within a gap):")
    for name, us in by_rt.most_common(12):
        print(f"  {us / 1e3 / per:8.3f}  {name[:110]}")


if __name__ == "__main__":
    main()
