"""grad_norm (docs/kernels.md K10) and count_zero (K11) on the GPU against
torch (float64 norms of the concatenated values, torch's own zero count):
lists of 1 and of 10 000 tensors, tensors of 1 element, odd sizes,
starts that are not 16-byte aligned (slices), bf16, fp32 and mixed lists,
the L2 norm of 512 tensors to 1e-6 relative, NaN, empty lists; the same
bits on every call; no host synchronisation (CUDA graph capture and
replay after the values change); lingen.torch's ops and torch.compile.
Skipped without torch or a GPU."""
import math

import pytest

import lingen
from conftest import torch_cuda


def ref_norms(torch, tensors):
    """(sum x^2, sum |x|, max |x|, zeros) in float64 over every element."""
    flat = [t.detach().reshape(-1).double() for t in tensors]
    v = torch.cat(flat) if flat else torch.zeros(0, dtype=torch.float64, device="cuda")
    mx = v.abs().max().item() if v.numel() else 0.0
    if v.isnan().any():
        mx = math.nan
    return (v.square().sum().item(), v.abs().sum().item(), mx,
            int(sum(int((t == 0).sum()) for t in tensors)))


def close(got, want, rel=1e-6):
    return (math.isnan(got) and math.isnan(want)) or abs(got - want) <= rel * abs(want)


def check(torch, tensors, what):
    """Every norm and the count, each as torch has it, each twice (same bits)."""
    ss, l1, mx, zeros = ref_norms(torch, tensors)
    tl = lingen.TensorList(tensors)
    cases = [((2, True), math.sqrt(ss)), ((2, False), ss), ((1, True), l1), (("inf", True), mx)]
    for (ord, norm), want in cases:
        a = lingen.grad_norm(tl, ord, norm)
        b = lingen.grad_norm(tl, ord, norm)
        assert a.shape == () and a.dtype == torch.float32 and a.device.type == "cuda"
        assert torch.equal(a, b) or (a.isnan() and b.isnan()), f"{what} ord {ord}: calls differ"
        assert close(a.item(), float(torch.tensor(want, dtype=torch.float32))), \
            f"{what} ord {ord} norm {norm}: got {a.item()!r}, expected {want!r}"
    c = lingen.count_zero(tl)
    assert c.shape == () and c.dtype == torch.int64
    assert c.item() == zeros, f"{what}: {c.item()} zeros, expected {zeros}"
    # a plain list gives the same (its table cached)
    a, b = lingen.grad_norm(tensors), lingen.grad_norm(tl)
    assert torch.equal(a, b) or (a.isnan() and b.isnan()), f"{what}: a list and its TensorList differ"
    assert lingen.count_zero(tensors).item() == zeros


def randn(torch, gen, n, dtype, zeros=0.05):
    x = torch.randn(n, generator=gen, device="cuda")
    mask = torch.rand(n, generator=gen, device="cuda") < zeros
    x = torch.where(mask, torch.where(torch.rand(n, generator=gen, device="cuda") < 0.5,
                                      torch.tensor(-0.0, device="cuda"), 0.0), x)
    return x.to(dtype)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_one_tensor_one_element(seed, dtype):
    torch = torch_cuda()
    dt = getattr(torch, dtype)
    for v in (3.5, -2.0, 0.0, -0.0):
        check(torch, [torch.tensor([v], device="cuda", dtype=dt)], f"[{v}] {dtype}")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = randn(torch, gen, 1001, dt)
    check(torch, [x[7:8]], "one element, unaligned")


def test_odd_sizes_and_unaligned_starts(seed):
    torch = torch_cuda()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    sizes = [1, 2, 3, 7, 9, 15, 17, 33, 127, 4095, 4097, 8193, 16385, 100003, 1234567]
    for dtype in (torch.float32, torch.bfloat16):
        tensors = []
        for i, n in enumerate(sizes):
            base = randn(torch, gen, n + 8, dtype)
            off = i % 8  # starts 0..7 elements past an aligned address
            tensors.append(base[off:off + n])
        check(torch, tensors, f"odd sizes {dtype}")
    mixed = [randn(torch, gen, n + 3, (torch.float32, torch.bfloat16)[i % 2])[i % 3:i % 3 + n]
             for i, n in enumerate(sizes)]
    check(torch, mixed, "odd sizes mixed")


def test_ten_thousand_tiny(seed):
    torch = torch_cuda()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    n = torch.randint(1, 40, (10000,), generator=gen, device="cuda").tolist()
    pool = randn(torch, gen, sum(n) + 10000, torch.float32, zeros=0.2)
    tensors, at = [], 0
    for i, k in enumerate(n):
        t = pool[at + (i % 4):at + (i % 4) + k]
        tensors.append(t if i % 3 else t.bfloat16())
        at += k + 1
    check(torch, tensors, "10000 tiny mixed")
    check(torch, [t.float() for t in tensors], "10000 tiny fp32")


def test_target_512_tensors(seed):
    """The K10 target: 512 fp32 tensors (2.36 GB), L2 to 1e-6 relative."""
    torch = torch_cuda()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    shapes = [(2048, 2048), (512, 2048), (2048,), (3 * 512, 2048), (2048, 256), (128,), (1,)]
    tensors = [torch.randn(shapes[i % 7], generator=gen, device="cuda") for i in range(511)]
    rest = 590_000_000 - sum(t.numel() for t in tensors)
    tensors.append(torch.randn(max(rest, 1), generator=gen, device="cuda"))
    tl = lingen.TensorList(tensors)
    got = lingen.grad_norm(tl).item()
    want = math.sqrt(sum(t.double().square().sum().item() for t in tensors))
    assert abs(got - want) <= 1e-6 * want, f"{got!r} vs {want!r}"
    zeros = sum(int((t == 0).sum()) for t in tensors)
    assert lingen.count_zero(tl).item() == zeros


def test_count_zero_32_big(seed):
    """The K11 target: 32 x [4096, 8192] fp32 with zeros (and bf16 copies)."""
    torch = torch_cuda()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    tensors = [torch.randn(4096, 8192, generator=gen, device="cuda").clamp_(-0.5, 2.0)
               .sub_(-0.5).relu_() for _ in range(32)]  # about 30% zeros; 4.29 GB
    tensors[1][0, :17] = -0.0
    want = sum(int((t == 0).sum()) for t in tensors)
    assert lingen.count_zero(tensors).item() == want
    bf = [t.bfloat16() for t in tensors]
    assert lingen.count_zero(bf).item() == sum(int((t == 0).sum()) for t in bf)


def test_nan_and_empty(seed):
    torch = torch_cuda()
    x = torch.randn(70000, device="cuda")
    x[60001] = math.nan
    check(torch, [torch.randn(5, device="cuda"), x], "a NaN")
    check(torch, [], "no tensor")
    check(torch, [torch.empty(0, device="cuda"), torch.ones(3, device="cuda"),
                  torch.empty(0, 5, device="cuda", dtype=torch.bfloat16)], "empty tensors")


def test_errors():
    torch = torch_cuda()
    with pytest.raises(TypeError, match="bf16 or fp32"):
        lingen.TensorList([torch.ones(3, device="cuda", dtype=torch.float16)])
    with pytest.raises(ValueError, match="not contiguous"):
        lingen.TensorList([torch.ones(4, 4, device="cuda").t()])
    with pytest.raises(ValueError, match="ord"):
        lingen.grad_norm([torch.ones(3, device="cuda")], ord=3)
    with pytest.raises(ValueError, match="norm=False"):
        lingen.grad_norm([torch.ones(3, device="cuda")], ord=1, norm=False)


def test_cuda_graph(seed):
    """Captured once, replayed after the values change: no host copy and no
    synchronisation in a call (a capture would fail on either)."""
    torch = torch_cuda()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    tensors = [randn(torch, gen, n, dt) for n, dt in
               ((1000, torch.float32), (77777, torch.bfloat16), (5, torch.float32))]
    tl = lingen.TensorList(tensors)
    lingen.grad_norm(tl), lingen.count_zero(tl)  # compile and load before capture
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s), torch.cuda.graph(g, stream=s):
        norm = lingen.grad_norm(tl)
        zeros = lingen.count_zero(tl)
    torch.cuda.current_stream().wait_stream(s)
    for step in range(3):
        with torch.no_grad():
            for t in tensors:
                t.copy_(randn(torch, gen, t.numel(), t.dtype))
        g.replay()
        torch.cuda.synchronize()
        ss, _, _, nz = ref_norms(torch, tensors)
        assert close(norm.item(), math.sqrt(ss)), f"replay {step}"
        assert zeros.item() == nz, f"replay {step}"


def test_torch_ops(seed):
    torch = torch_cuda()
    import lingen.torch as lt
    gen = torch.Generator(device="cuda").manual_seed(seed)
    tensors = [randn(torch, gen, n, torch.float32) for n in (10, 4099, 3)]
    ss, l1, mx, nz = ref_norms(torch, tensors)
    assert close(torch.ops.lingen.grad_norm_forward(tensors).item(), math.sqrt(ss))
    assert close(torch.ops.lingen.grad_norm_forward(tensors, ord="1").item(), l1)
    assert torch.ops.lingen.count_zero_forward(tensors).item() == nz
    assert close(lt.grad_norm(tensors, -1).item(), mx)
    assert lt.count_zero(lt.TensorList(tensors)).item() == nz

    @torch.compile(fullgraph=True)
    def f(ts):
        return lt.grad_norm(ts) * 2, lt.count_zero(ts)

    n2, z = f(tensors)
    assert close(n2.item(), 2 * math.sqrt(ss)) and z.item() == nz
