#!/usr/bin/env python3
"""bench/table.py - bench/README.md's table from `python -m lingen.bench` JSON.

    python3 bench/table.py RUN.json [NEWER.json ...]            print the tables
    python3 bench/table.py RUN.json [NEWER.json ...] --write    also rewrite them
        in bench/README.md (between <!-- bench-table --> marks) and the
        summary in README.md (between <!-- results --> marks)

Each JSON is one run (tools/device_bench.sh writes one). With several, a
(kernel, shape) row of a later run replaces the same row of an earlier one,
whole: every number of a row comes from one run, and the `run` column says
which. Cells are median GPU µs and, in brackets, % of the device-to-device
copy ceiling measured in that run (TFLOP/s for GEMM rows). linghe's published
H200 figures (docs/performance.md) are a column of their own: they were not
measured by the run. No GPU needed.
"""
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = ("eager", "compile", "liger", "linghe", "quack")
HEAD = {"eager": "eager PyTorch", "compile": "torch.compile", "liger": "Liger",
        "linghe": "linghe (measured)", "quack": "QuACK"}


def load(paths):
    """(runs, rows by (kernel, shape) -> (run index, {impl: row})) in file order."""
    runs, by = [], {}
    for i, p in enumerate(paths):
        with open(p) as f:
            res = json.load(f)
        res["path"] = os.path.relpath(p, ROOT)
        runs.append(res)
        mine = {}
        for r in res["rows"]:
            mine.setdefault((r["kernel"], r["shape"]), {})[
                "published" if r.get("quoted") else r["impl"]] = r
        for key, impls in mine.items():
            by[key] = (i, impls)  # a later run's row replaces the whole row
    return runs, by


def label(run):
    """A run's short name: its date, else its folder under bench/."""
    return run.get("date") or os.path.basename(os.path.dirname(run["path"]))


def cell(r, eager=None):
    if r is None:
        return "—"
    if "error" in r:
        return "refused" if r.get("refused") else "failed"
    if "tflops" in r:
        text = f"{r['us']:.1f} ({r['tflops']:.0f} TF/s)"
    else:
        text = f"{r['us']:.1f} ({r['pct_copy']:.0f}%)"
    if r.get("timer") == "events":
        text += " ev"
    if eager and "us" in eager and r["impl"] == "compile" and \
            abs(r["us"] - eager["us"]) <= 0.005 * eager["us"]:
        text += " †"
    return text


def others(impls):
    """Peers other than the usual ones (torch.mm, Liger's unquantised SwiGLU...)."""
    return [k for k in impls if k not in ("lingen", "published", *PEERS)]


def full_table(runs, by):
    many = len(runs) > 1
    head = ["kernel", "shape", "lingen"] + [HEAD[p] for p in PEERS] + \
        ["other peer", "linghe (published, TARGETS)"] + (["run"] if many else [])
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (kernel, shape), (i, d) in by.items():
        extra = "; ".join(f"{k}: {cell(d[k])}" for k in others(d)) or "—"
        cells = [kernel, shape, cell(d.get("lingen"))] + \
            [cell(d.get(p), d.get("eager")) for p in PEERS] + [extra]
        pub = d.get("published")
        cells.append(f"{pub['us']:.1f}" if pub else "—")
        if many:
            cells.append(label(runs[i]))
        out.append("| " + " | ".join(cells) + " |")
    return out


def odd_table(by):
    """The odd-shape rule: a token count (the first number of the shape that
    has a row at its count rounded up to 128: 6001x2048, 1x6001x2048 G4)
    against the same rounded up; and random per-expert counts against the
    same rounded to multiples of 128 (the "counts%128" and "m128" rows)."""
    out = []
    for (kernel, shape), (_, d) in by.items():
        ups = []
        for m in re.finditer(r"(?<![0-9])[0-9]+(?![0-9])", shape):
            n = int(m.group())
            if n > 128 and n % 128:
                ups.append(shape[:m.start()] + str(-(-n // 128) * 128) + shape[m.end():])
        ups += [shape + " counts%128", shape + " m128"]
        up = next((u for u in ups if (kernel, u) in by), None)
        if up is None:
            continue
        a, b = d.get("lingen", {}), by[(kernel, up)][1].get("lingen", {})
        if "us" in a and "us" in b:
            rule = "1.1" if up.endswith(("counts%128", "m128")) else "1.05"
            out.append(f"| {kernel} | {shape} | {a['us']:.1f} | {up} | {b['us']:.1f} | "
                       f"{a['us'] / b['us']:.2f} | {rule} |")
    if not out:
        return []
    return ["| kernel | shape | lingen µs | rounded to 128 | lingen µs | ratio | rule: ≤ |",
            "|---|---|---|---|---|---|---|"] + out


def summary(runs, by):
    """The README's table: the first shape of every kernel, lingen against
    the fastest peer measured in the same run and linghe's published figure."""
    seen, out = set(), ["| kernel | shape | lingen µs | % of copy | fastest peer, same run (µs) "
                        "| linghe published µs |", "|---|---|---|---|---|---|"]
    for (kernel, shape), (_, d) in by.items():
        if kernel in seen or "us" not in d.get("lingen", {}):
            continue
        seen.add(kernel)
        ln = d["lingen"]
        peers = [(r["us"], k) for k, r in d.items()
                 if k not in ("lingen", "published") and "us" in r]
        best = min(peers) if peers else None
        if best:
            best = (best[0], best[1] + (" †" if cell(d[best[1]], d.get("eager")).endswith("†")
                                        else ""))
        pub = d.get("published")
        pct = f"{ln['tflops']:.0f} TF/s" if "tflops" in ln else f"{ln['pct_copy']:.0f}%"
        peer = f"{best[0]:.1f} ({best[1]})" if best else "—"
        quoted = f"{pub['us']:.1f}" if pub else "—"
        out.append(f"| {kernel} | {shape} | {ln['us']:.1f} | {pct} | {peer} | {quoted} |")
    return out


def notes(runs):
    out = []
    for r in runs:
        cmd = r.get("command", "python -m lingen.bench (command not recorded)")
        out.append(f"- `{r['path']}`: {label(r)}, {r['device']}, "
                   f"copy ceiling {r['copy_gbps']:.0f} GB/s, torch {r['torch']}, "
                   f"triton {r['triton']}, Liger {r['liger']}, linghe {r.get('linghe')}, "
                   f"QuACK {r.get('quack')}, inputs and per-expert counts seed "
                   f"{r.get('seed', 'not recorded')}; "
                   f"`{cmd}`")
        if r.get("not_run"):
            out.append(f"  - not run (budget spent): {', '.join(r['not_run'])}")
    return out


def replace(path, mark, lines):
    with open(path) as f:
        text = f.read()
    a, b = f"<!-- {mark} -->", f"<!-- /{mark} -->"
    if a not in text or b not in text:
        sys.exit(f"bench/table.py: {path} has no {a} ... {b} marks")
    head, rest = text.split(a, 1)
    tail = rest.split(b, 1)[1]
    with open(path, "w") as f:
        f.write(head + a + "\n" + "\n".join(lines) + "\n" + b + tail)


def main(argv):
    write = "--write" in argv
    paths = [a for a in argv if a != "--write"]
    if not paths:
        sys.exit(__doc__)
    runs, by = load(paths)
    full = ["Runs (a row's numbers all come from one run):", ""] + notes(runs) + [""] + \
        full_table(runs, by)
    odd = odd_table(by)
    if odd:
        full += ["", "The odd-shape rule (docs/performance.md), lingen in the same run:", ""] + odd
    full += ["", "ev: timed by CUDA events (not capturable in a graph). †: torch.compile "
             "within 0.5% of eager, i.e. dynamo fell back to eager in that run."]
    short = summary(runs, by) + ["", "†: torch.compile fell back to eager in that run. "
                                 f"From `{', '.join(r['path'] for r in runs)}` "
                                 "(`python3 bench/table.py`); every kernel and peer: "
                                 "[bench/README.md](bench/README.md)."]
    print("\n".join(full))
    print()
    print("\n".join(short))
    if write:
        replace(os.path.join(ROOT, "bench", "README.md"), "bench-table", full)
        replace(os.path.join(ROOT, "README.md"), "results", short)


if __name__ == "__main__":
    main(sys.argv[1:])
