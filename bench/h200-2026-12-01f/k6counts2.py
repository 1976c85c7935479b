# session 20: K6 at 65536 x 1024, 256 experts, under different count patterns,
# each call captured in a CUDA graph (no host time between the events):
# what the partial tiles and the unaligned qt lines each cost. L2 flushed by
# a 256 MB memset before each replay; median of 50 after 10.
import random, statistics, torch
import lingen.torch as lt
torch.manual_seed(0); random.seed(0)
T, W, E = 65536, 1024, 256
x = torch.randn(T, W, device="cuda").to(torch.bfloat16)
g = torch.randn(T, W // 2, device="cuda").to(torch.bfloat16)
p = torch.rand(T, 1, device="cuda")
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")

def timeit(fn):
    fn(); torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(10): graph.replay()
    ts = []
    for _ in range(50):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); graph.replay(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b) * 1000)
    return statistics.median(ts)

def split(unit):
    cuts = sorted(random.randrange(0, T // unit + 1) for _ in range(E - 1))
    c = [b - a for a, b in zip([0] + cuts, cuts + [T // unit])]
    return [v * unit for v in c]

pats = {
    "random (any count)": split(1),
    "random multiples of 16 (aligned qt lines)": split(16),
    "random multiples of 128 (no partial tile)": split(128),
    "all 256 (aligned, no partial tile)": [T // E] * E,
    "256 +- 1 alternating (unaligned, partial)": [T // E + (1 if i % 2 else -1) for i in range(E)],
    "256 +- 16 alternating (aligned, partial)": [T // E + (16 if i % 2 else -16) for i in range(E)],
}
print(f"{'counts':45} {'tiles':>6} {'fwd us':>8} {'bwd us':>8}")
for name, c in pats.items():
    assert sum(c) == T and min(c) >= 0
    cnt = torch.tensor(c, dtype=torch.int32, device="cuda")
    tiles = sum((v + 127) // 128 for v in c)
    f = timeit(lambda: lt.batch_swiglu_quant_forward(x, p, cnt))
    bw = timeit(lambda: lt.batch_swiglu_quant_backward(g, x, p, cnt))
    print(f"{name:45} {tiles:6d} {f:8.1f} {bw:8.1f}", flush=True)
f7 = timeit(lambda: lt.swiglu_quant_forward(x))
print(f"{'K7 flat (swiglu_quant fwd, same x)':45} {T // 128:6d} {f7:8.1f}")
