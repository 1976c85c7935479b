"""tools/ncu_sass_top.py NAME RAW.csv SASS.csv: from one kernel's Nsight Compute
pages (--page raw --csv, --page source --csv --print-source sass), the warp
stall samples by reason, the tensor pipe's utilisation and the SASS lines with
the most stall samples (tools/device_ncu.sh with SASS=1)."""
import csv, sys


def rows(path):
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    return list(csv.reader(lines))


def main(name, raw, sass):
    print(f"== {name}")
    r = rows(raw)
    if len(r) >= 3:
        head, vals = r[0], r[2]
        picked = [(h, v) for h, v in zip(head, vals) if "pcsamp_warps_issue_stalled" in h and not h.endswith("_not_issued")]
        picked.sort(key=lambda hv: -float(hv[1].replace(",", "") or 0))
        for h, v in picked[:14]:
            print(f"{h} {v}")
        for h, v in zip(head, vals):
            if h.startswith("sm__pipe_tensor") or h in ("gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
                                                        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
                                                        "launch__registers_per_thread"):
                print(f"{h} {v}")
    s = rows(sass)
    if not s:
        print("no source page")
        return
    s = s[next((i for i, x in enumerate(s) if x and x[0] == "Address"), 0):]
    head = s[0]
    col = next((i for i, h in enumerate(head) if h.startswith("Warp Stall Sampling (All")), None)
    src = next((i for i, h in enumerate(head) if h == "Source"), 1)
    addr = next((i for i, h in enumerate(head) if h == "Address"), 0)
    if col is None:
        print("no stall sampling column:", head[:8])
        return
    body = [x for x in s[1:] if len(x) > col]
    val = lambda x: float(x[col].replace(",", "") or 0)
    total = sum(val(x) for x in body) or 1.0
    by_op = {}
    for x in body:
        op = x[src].strip().split()
        op = op[1] if op and op[0].startswith("@") and len(op) > 1 else (op[0] if op else "?")
        by_op[op] = by_op.get(op, 0.0) + val(x)
    print("stall samples by instruction:")
    for op, v in sorted(by_op.items(), key=lambda kv: -kv[1])[:12]:
        print(f"{100 * v / total:5.1f}%  {op}")
    print("top SASS lines by stall samples:")
    for x in sorted(body, key=val, reverse=True)[:30]:
        stalls = sorted(((float(x[i] or 0), h[6:]) for i, h in enumerate(head)
                         if h.startswith("stall_") and "Not Issued" not in h and i < len(x)), reverse=True)
        why = " ".join(f"{h}" for v, h in stalls[:2] if v > 0)
        print(f"{100 * val(x) / total:5.1f}%  {x[addr][-5:]:>5}  {x[src].strip()[:70]:70}  {why}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
