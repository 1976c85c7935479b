#!/usr/bin/env python3
"""bench/table.py - markdown tables from the JSON that bench/run.sh writes.

    python3 bench/table.py bench/h200-2026-11-30

Prints the kernel table (median GPU time, GB/s, % of the copy ceiling
measured in the same run) and the JIT table, for bench/README.md and the
README's Benchmarks section.
"""
import json
import os
import sys

d = sys.argv[1] if len(sys.argv) > 1 else "bench/h200-2026-11-30"
rows = json.load(open(os.path.join(d, "kernels.json")))
print("| kernel | tokens | median µs | GB/s | % of copy ceiling |")
print("| --- | --- | --- | --- | --- |")
for r in rows:
    print(f"| `{r['kernel']}` | {r['tokens']:.0f} | {r['median_us']:.2f} | {r['gbps']:.0f} | {r['pct_copy']:.1f}% |")
if rows:
    print(f"\ncopy ceiling measured in the same run: {rows[0]['copy_gbps']:.0f} GB/s")
if not os.path.exists(os.path.join(d, "jit.json")):
    sys.exit(0)  # a run without the JIT part
j = json.load(open(os.path.join(d, "jit.json")))
c, k, l = j["compile"], j["cache"], j["launch"]
print("\n| JIT measure | measured | goal (TARGETS.md) |")
print("| --- | --- | --- |")
print(f"| first NVRTC compile in a process (start-up included) | {c['first_ms']:.1f} ms | ≤ 150 ms |")
print(f"| NVRTC compile after the first, median | {c['median_after_first_ms']:.1f} ms | ≤ 15 ms |")
print(f"| disk-cache hit, warm process (read + load), median | {k['get_median_us']:.1f} µs | ≤ 50 µs |")
print(f"| host cost of a launch (`{l['kernel']}`, {l['entries']} entries) | {l['lingen_us']:.2f} µs vs raw {l['raw_us']:.2f} µs (+{l['diff_us']:.2f}) | ≤ raw + 0.5 µs |")
