# session 21 call 4: K6 65536 x 1024 under CUDA graphs with the liblingen at
# $LINGEN_LIBRARY (experiment builds: A no heads / tails of the qt lines,
# B a grid without the E surplus tiles, C B and no counts scan at E = 1).
# argv[1]: "counts" (count patterns at 256 experts) or "experts" (E equal
# experts, whole tiles).
import random, statistics, sys, torch
import lingen.torch as lt
torch.manual_seed(0); random.seed(0)
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
    for _ in range(40):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); graph.replay(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b) * 1000)
    return statistics.median(ts)

def split(unit, E=256):
    cuts = sorted(random.randrange(0, T // unit + 1) for _ in range(E - 1))
    c = [b - a for a, b in zip([0] + cuts, cuts + [T // unit])]
    return [v * unit for v in c]

if sys.argv[1] == "counts":
    pats = {"random": split(1), "random x16": split(16), "random x128": split(128), "all 256": [256] * 256}
else:
    pats = {f"E={E} equal": [T // E] * E for E in map(int, sys.argv[2].split(","))}
for name, c in pats.items():
    cnt = torch.tensor(c, dtype=torch.int32, device="cuda")
    f = timeit(lambda: lt.batch_swiglu_quant_forward(x, p, cnt))
    bw = timeit(lambda: lt.batch_swiglu_quant_backward(g, x, p, cnt))
    print(f"{name:14} {f:8.1f} {bw:8.1f}", flush=True)
