# session 21: K6 at 65536 x 1024 with E experts of equal counts 65536 / E
# (whole tiles, aligned qt lines): what the per-expert layout itself costs
# (the counts scan a CTA, the grid's surplus CTAs, the probs) against the
# flat K7 at the same x, under CUDA graphs (L2 flushed before each replay;
# median of 50 after 10).
import statistics, torch
import lingen.torch as lt
torch.manual_seed(0)
T, W = 65536, 1024
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

print(f"{'experts':>8} {'grid tiles':>10} {'fwd us':>8} {'bwd us':>8}")
for E in [1, 2, 8, 32, 128, 256, 512]:
    cnt = torch.full((E,), T // E, dtype=torch.int32, device="cuda")
    f = timeit(lambda: lt.batch_swiglu_quant_forward(x, p, cnt))
    bw = timeit(lambda: lt.batch_swiglu_quant_backward(g, x, p, cnt))
    print(f"{E:8d} {T // 128 + E:10d} {f:8.1f} {bw:8.1f}", flush=True)
f7 = timeit(lambda: lt.swiglu_quant_forward(x))
b7 = timeit(lambda: lt.swiglu_quant_backward(g, x))
print(f"{'K7 flat':>8} {T // 128:10d} {f7:8.1f} {b7:8.1f}")
