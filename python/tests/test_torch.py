"""lingen.torch: the ops registered from the declarations, autograd against
torch autograd, CUDA graph capture, torch.compile without graph breaks.
The schema tests need only torch; the rest a GPU."""
import re

import pytest

import lingen
import reference as ref
from conftest import torch_cuda


def test_schemas_come_from_the_declarations():
    pytest.importorskip("torch")
    import lingen.torch as lt
    fams = lingen.families()
    assert set(lt.ops) == {f"{op}_{p}" for op, f in fams.items() for p in f.passes}
    s = lt.schema(fams["rmsnorm_quant"], fams["rmsnorm_quant"].passes["forward"])
    assert s.startswith("(Tensor x, Tensor w, *, float eps=1e-06")
    assert 'str quant_output="both"' in s and "bool quant_round_scale=True" in s
    assert s.endswith("-> (Tensor, Tensor, Tensor, Tensor, Tensor)")
    s = lt.schema(fams["rmsnorm"], fams["rmsnorm"].passes["backward"])
    assert "Tensor? rms" in s and s.endswith("-> (Tensor, Tensor)")


def test_fake_shapes_without_a_gpu():
    torch = pytest.importorskip("torch")
    import lingen.torch  # noqa: F401
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        x = torch.empty(300, 1024, dtype=torch.bfloat16, device="meta")
        w = torch.empty(1024, dtype=torch.bfloat16, device="meta")
        q, s, rms, qt, st = torch.ops.lingen.rmsnorm_quant_forward(x, w)
        assert q.shape == (300, 1024) and s.shape == (8, 300) and st.shape == (3, 1024)
        assert qt.shape == (1024, 384) and rms.shape == (300,) and q.dtype == torch.float8_e4m3fn
        q, s, rms, qt, st = torch.ops.lingen.rmsnorm_quant_forward(x, w, quant_output="rowwise")
        assert qt.shape == (0,) and st.shape == (0,)


def test_autograd_matches_torch(seed):
    torch = torch_cuda()
    import lingen.torch as lt
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(2, 511, 2048, generator=g, device="cuda").bfloat16().requires_grad_()
    w = (torch.rand(2048, generator=g, device="cuda") + 0.5).bfloat16().requires_grad_()
    dy = torch.randn(2, 511, 2048, generator=g, device="cuda").bfloat16()
    y = lt.rms_norm(x, w)
    assert y.shape == x.shape and y.dtype == torch.bfloat16
    y.backward(dy)
    x64 = x.detach().double().requires_grad_()
    w64 = w.detach().double().requires_grad_()
    y64 = x64 * (x64.square().mean(-1, keepdim=True) + 1e-6).rsqrt() * w64
    y64.backward(dy.double())
    ref.check_bf16(y.detach().reshape(-1, 2048), y64.detach().reshape(-1, 2048), "y")
    ref.check_rel(x.grad, x64.grad, 1e-2, "dx")
    ref.check_rel(w.grad, w64.grad, 1e-2, "dw (bf16)")
    assert w.grad.dtype == torch.bfloat16
    # a non-contiguous input goes through too
    xt = x.detach().transpose(0, 1).requires_grad_()
    lt.rms_norm(xt, w).sum().backward()
    assert xt.grad.shape == xt.shape


def test_rms_norm_quant_autograd(seed):
    """K1's pair as one autograd Function: the copies are rms_norm_quant's
    bytes, dL/dy through the gradient carrier gives dx and dw of the RMSNorm
    backward (float64 reference), at an odd token count and both outputs."""
    torch = torch_cuda()
    import lingen.torch as lt
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(3, 111, 2048, generator=g, device="cuda").bfloat16().requires_grad_()
    w = (torch.rand(2048, generator=g, device="cuda") + 0.5).bfloat16().requires_grad_()
    dy = torch.randn(3, 111, 2048, generator=g, device="cuda").bfloat16()
    y, q, s, qt, st = lt.rms_norm_quant_autograd(x, w)
    assert y.shape == x.shape and y.requires_grad and not q.requires_grad
    wq, ws, _, wqt, wst = lt.rms_norm_quant(x.detach(), w.detach())
    for got, want in ((q, wq), (s, ws), (qt, wqt), (st, wst)):
        assert torch.equal(got.view(torch.uint8) if got.dtype != torch.float32 else got,
                           want.view(torch.uint8) if want.dtype != torch.float32 else want)
    y.backward(dy)
    x64 = x.detach().double().requires_grad_()
    w64 = w.detach().double().requires_grad_()
    y64 = x64 * (x64.square().mean(-1, keepdim=True) + 1e-6).rsqrt() * w64
    y64.backward(dy.double())
    ref.check_rel(x.grad, x64.grad, 1e-2, "dx")
    ref.check_rel(w.grad, w64.grad, 1e-2, "dw (bf16)")
    assert w.grad.dtype == torch.bfloat16
    y, q, s, qt, st = lt.rms_norm_quant_autograd(x, w, output="rowwise")
    assert qt is None and st is None and q.shape == x.shape
    x.grad = None
    y.backward(dy)
    assert x.grad.shape == x.shape


def test_module_and_quant_functions(seed):
    torch = torch_cuda()
    import lingen.torch as lt
    m = lt.RMSNorm(384, device="cuda")
    x = torch.randn(3, 5, 384, device="cuda").bfloat16()
    y = m(x)
    want, _ = lingen.rmsnorm(x.reshape(-1, 384), m.weight.detach())
    assert torch.equal(y.reshape(-1, 384), want)
    q, s, rms, qt, st = lt.rms_norm_quant(x, m.weight, output="rowwise")
    assert q.shape == x.shape and qt is None and st is None and s.shape == (3, 15)
    q, s, qt, st = lt.fp8_quant(x, output="columnwise")
    assert q is None and s is None and qt.shape == (384, 15) and st.shape == (1, 384)


def test_cuda_graph_capture(seed):
    torch = torch_cuda()
    import lingen.torch as lt
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(1024, 2048, generator=g, device="cuda").bfloat16()
    w = torch.rand(2048, generator=g, device="cuda").bfloat16()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up: compile and load before capture
        for _ in range(2):
            lt.rms_norm_forward(x, w)
            lt.rms_norm_quant(x, w)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y, rms = lt.rms_norm_forward(x, w)
        q, s, _, qt, st = lt.rms_norm_quant(x, w)
    x.copy_(torch.randn(1024, 2048, generator=g, device="cuda").bfloat16())
    graph.replay()
    torch.cuda.synchronize()
    y_want, rms_want = lt.rms_norm_forward(x, w)
    q_want, s_want, _, qt_want, st_want = lt.rms_norm_quant(x, w)
    assert torch.equal(y, y_want) and torch.equal(rms, rms_want)
    assert torch.equal(q.view(torch.uint8), q_want.view(torch.uint8))
    assert torch.equal(qt.view(torch.uint8), qt_want.view(torch.uint8))
    assert torch.equal(s, s_want) and torch.equal(st, st_want)


def test_torch_compile_without_graph_breaks(seed):
    torch = torch_cuda()
    import lingen.torch as lt
    torch.manual_seed(seed)
    model = torch.nn.Sequential(lt.RMSNorm(1024, device="cuda"),
                                torch.nn.Linear(1024, 1024, device="cuda", dtype=torch.bfloat16))
    x = torch.randn(4, 256, 1024, device="cuda").bfloat16()
    explain = torch._dynamo.explain(model)(x)
    assert explain.graph_break_count == 0, explain.break_reasons
    assert explain.graph_count == 1
    torch._dynamo.reset()
    compiled = torch.compile(model)
    xe = x.clone().requires_grad_()
    xc = x.clone().requires_grad_()
    ye = model(xe)
    yc = compiled(xc)
    torch.testing.assert_close(yc, ye, rtol=1e-2, atol=1e-2)
    ye.float().square().sum().backward()
    yc.float().square().sum().backward()
    torch.testing.assert_close(xc.grad, xe.grad, rtol=2e-2, atol=2e-2)
    # the quantiser compiles too, with a varying token count
    weight = model[0].weight.detach()
    f = torch.compile(lambda t: lt.rms_norm_quant(t, weight)[0])
    for n in (128, 300):
        t = torch.randn(n, 1024, device="cuda").bfloat16()
        assert torch.equal(f(t).view(torch.uint8),
                           lt.rms_norm_quant(t, weight)[0].view(torch.uint8))


@pytest.mark.parametrize("dtype, hidden, words", [
    ("float16", 1024, "x: found torch.float16, expected bf16"),
    ("bfloat16", 1000, "w: found shape (1000,), expected (1024,) [hidden]"),
])
def test_fake_kernels_check_as_the_real_op(dtype, hidden, words):
    """Meta tensors (and torch.compile's fake ones) are refused with the
    real call's error (issue 24: a fake kernel returned outputs for an fp16
    x and a wrong-size weight)."""
    torch = pytest.importorskip("torch")
    import lingen.torch  # noqa: F401
    from torch._subclasses.fake_tensor import FakeTensorMode
    x = torch.empty(64, 1024, dtype=getattr(torch, dtype), device="meta")
    w = torch.empty(hidden, dtype=torch.bfloat16, device="meta")
    with pytest.raises((TypeError, ValueError),
                       match=f"^torch.ops.lingen.rmsnorm_forward: {re.escape(words)}"):
        torch.ops.lingen.rmsnorm_forward(x, w)
    with FakeTensorMode():
        x = torch.empty(64, 1024, dtype=getattr(torch, dtype), device="meta")
        w = torch.empty(hidden, dtype=torch.bfloat16, device="meta")
        with pytest.raises((TypeError, ValueError), match=re.escape(words)):
            torch.ops.lingen.rmsnorm_forward(x, w)
    if torch.cuda.is_available():  # the real op says the same
        with pytest.raises((TypeError, ValueError), match=re.escape(words)):
            torch.ops.lingen.rmsnorm_forward(torch.zeros(64, 1024, dtype=getattr(torch, dtype),
                                                         device="cuda"),
                                             torch.zeros(hidden, dtype=torch.bfloat16,
                                                         device="cuda"))


def test_compile_traces_symbolic_shapes_without_a_gpu():
    """torch.compile with dynamic shapes over meta tensors: no graph break,
    the declared shapes with a symbolic token count (cdiv(tokens, 128))."""
    torch = pytest.importorskip("torch")
    import lingen.torch as lt
    torch._dynamo.reset()
    w = torch.empty(1024, dtype=torch.bfloat16, device="meta")

    def f(x):
        q, s, rms, qt, st = lt.rms_norm_quant(x, w)
        return s, st

    explain = torch._dynamo.explain(f)(torch.empty(300, 1024, dtype=torch.bfloat16, device="meta"))
    assert explain.graph_break_count == 0, explain.break_reasons
    g = torch.compile(f, backend="eager", dynamic=True)
    for n in (300, 513):
        s, st = g(torch.empty(n, 1024, dtype=torch.bfloat16, device="meta"))
        assert s.shape == (8, n) and st.shape == (-(-n // 128), 1024)
    with pytest.raises(Exception, match="x: found torch.float16, expected bf16"):
        g(torch.empty(300, 1024, dtype=torch.float16, device="meta"))


def test_torch_defaults_are_the_declarations():
    """lingen.torch's functions take their spec defaults from the family
    declarations (lingen.torch._ops.declared), not from literals."""
    pytest.importorskip("torch")
    import inspect
    import lingen.torch as lt
    fams = lingen.families()
    for fn, op in ((lt.rms_norm_quant, "rmsnorm_quant"), (lt.rms_norm_router, "rmsnorm_router"),
                   (lt.qk_norm_rope, "qk_norm_rope"), (lt.group_rms_norm_gate, "group_rmsnorm_gate"),
                   (lt.swiglu_quant_backward, "swiglu_quant"), (lt.moe_unpermute, "moe_unpermute")):
        seen = 0
        for p in inspect.signature(fn).parameters.values():
            k = next((k for k in fams[op].keys if k.path.rsplit(".", 1)[-1] == p.name), None)
            if k is not None and k.default is not None and not k.shape:
                assert p.default == k.default, (fn.__name__, p.name)
                seen += 1
        assert seen, fn.__name__
