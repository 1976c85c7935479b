"""Every exposed op on the GPU against float64 torch references, at the
target shapes and at odd ones, through torch tensors, the CUDA Array
Interface and DLPack; autograd against torch autograd; CUDA graph capture;
torch.compile without graph breaks. Skipped without torch or a GPU."""
import pytest

import lingen
import reference as ref
from conftest import torch_cuda

TOKENS = (1, 127, 8191, 8192)


def inputs(torch, seed, tokens, hidden, scale=1.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = (torch.randn(tokens, hidden, generator=g, device="cuda") * scale).bfloat16()
    w = (torch.rand(hidden, generator=g, device="cuda") * 2 - 0.5).bfloat16()
    return x, w


def check_quant(torch, y64, q, s, qt, st, round_scale, what):
    from lingen import _torchref as R
    t, h = y64.shape
    if q is not None:
        s_ref = R.row_scales(y64, round_scale)
        ref.check_scales(s, s_ref, f"{what} s")
        per = s.double().T.repeat_interleave(128, dim=1)  # [tokens, hidden]
        ref.check_q(q, y64, per, f"{what} q")
    if qt is not None:
        st_ref = R.col_scales(y64, round_scale)
        ref.check_scales(st, st_ref, f"{what} st")
        per = st.double().repeat_interleave(128, dim=0)[:t]  # [tokens, hidden]
        assert qt.shape == (h, R.pitch(t)), (what, qt.shape)  # rows round_up(t, 128) apart
        ref.check_q(qt[:, :t].T, y64, per, f"{what} qt")
        assert not qt[:, t:].view(torch.uint8).any(), f"{what} qt: the tail past the tokens not 0"


@pytest.mark.parametrize("hidden", [128, 384, 2048, 7168])
@pytest.mark.parametrize("tokens", TOKENS)
def test_rmsnorm_quant(seed, tokens, hidden):
    torch = torch_cuda()
    from lingen import _torchref as R
    x, w = inputs(torch, seed, tokens, hidden)
    for round_scale in (True, False):
        q, s, rms, qt, st = lingen.rmsnorm_quant(x, w, round_scale=round_scale)
        assert q.dtype == torch.float8_e4m3fn and q.shape == (tokens, hidden)
        assert s.shape == (hidden // 128, tokens) and st.shape == ((tokens + 127) // 128, hidden)
        assert qt.shape == (hidden, R.pitch(tokens)) and rms.shape == (tokens,)
        y64, r64 = ref.rmsnorm(x, w)
        ref.check_rel(rms, r64, 1e-6, "rms")
        check_quant(torch, y64, q, s, qt, st, round_scale, f"rmsnorm_quant {tokens}x{hidden}")
    q, s, rms, qt, st = lingen.rmsnorm_quant(x, w, output="rowwise")
    assert qt is None and st is None and q is not None
    q2, s2, rms2, qt2, st2 = lingen.rmsnorm_quant(x, w, output="columnwise")
    assert q2 is None and s2 is None
    check_quant(torch, y64, None, None, qt2, st2, True, "columnwise only")


@pytest.mark.parametrize("hidden", [8, 1000, 2048, 4096])
@pytest.mark.parametrize("tokens", TOKENS)
def test_rmsnorm_forward_backward(seed, tokens, hidden):
    torch = torch_cuda()
    x, w = inputs(torch, seed, tokens, hidden)
    y, rms = lingen.rmsnorm(x, w)
    y64, r64 = ref.rmsnorm(x, w)
    ref.check_bf16(y, y64, "y")
    ref.check_rel(rms, r64, 1e-6, "rms")
    _, none = lingen.rmsnorm(x, w, rms=False)
    assert none is None
    dy = inputs(torch, seed + 1, tokens, hidden)[0]
    x64 = x.double().requires_grad_()
    w64 = w.double().requires_grad_()
    r = (x64.square().sum(-1) / hidden + 1e-6).rsqrt()
    (x64 * r[:, None] * w64).backward(dy.double())
    for given in (rms, None):
        dx, dw = lingen.rmsnorm_backward(dy, x, w, 1e-6, given)
        assert dx.dtype == torch.bfloat16 and dw.dtype == torch.float32
        ref.check_rel(dx, x64.grad, 1e-2, "dx")
        ref.check_rel(dw, w64.grad, 1e-4, "dw")
    dx2, dw2 = lingen.rmsnorm_backward(dy, x, w, 1e-6, rms)
    assert torch.equal(dw, dw2) and torch.equal(dx, dx2)  # deterministic


@pytest.mark.parametrize("hidden", [128, 384, 7168])
@pytest.mark.parametrize("tokens", TOKENS)
def test_fp8_quant(seed, tokens, hidden):
    torch = torch_cuda()
    x, _ = inputs(torch, seed, tokens, hidden, scale=3.0)
    for round_scale in (True, False):
        q, s, qt, st = lingen.fp8_quant(x, round_scale=round_scale)
        check_quant(torch, x.double(), q, s, qt, st, round_scale, f"fp8_quant {tokens}x{hidden}")


def test_zero_tokens():
    torch = torch_cuda()
    x = torch.empty(0, 256, dtype=torch.bfloat16, device="cuda")
    w = torch.ones(256, dtype=torch.bfloat16, device="cuda")
    y, rms = lingen.rmsnorm(x, w)
    assert y.shape == (0, 256) and rms.shape == (0,)
    dx, dw = lingen.rmsnorm_backward(x, x, w)
    torch.cuda.synchronize()
    assert dx.shape == (0, 256) and bool((dw == 0).all())


# ------------------------------------------------- other array libraries

class CAIWrap:
    def __init__(self, t, typestr, stream=None):
        self.t = t
        self.__cuda_array_interface__ = dict(shape=tuple(t.shape), typestr=typestr,
                                             data=(t.data_ptr(), False), strides=None,
                                             version=3, stream=stream)


class DLWrap:
    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None):
        return self.t.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def test_cuda_array_interface_and_dlpack(seed):
    torch = torch_cuda()
    x, w = inputs(torch, seed, 1021, 2048)
    y_want, rms_want = lingen.rmsnorm(x, w)
    dy = inputs(torch, seed + 1, 1021, 2048)[0]
    dx_want, dw_want = lingen.rmsnorm_backward(dy, x, w, 1e-6, rms_want)
    torch.cuda.synchronize()
    # CAI: outputs given, the legacy default stream, the workspace from cuMemAllocAsync
    y = torch.empty_like(x)
    rms = torch.empty(1021, device="cuda")
    lingen.rmsnorm(CAIWrap(x, "<V2"), CAIWrap(w, "<V2"),
                   out={"y": CAIWrap(y, "<V2"), "rms": CAIWrap(rms, "<f4")})
    dx, dw = torch.empty_like(x), torch.empty(2048, device="cuda")
    lingen.rmsnorm_backward(CAIWrap(dy, "<V2"), CAIWrap(x, "<V2"), CAIWrap(w, "<V2"), 1e-6,
                            CAIWrap(rms, "<f4"),
                            out={"dx": CAIWrap(dx, "<V2"), "dw": CAIWrap(dw, "<f4")})
    torch.cuda.synchronize()
    assert torch.equal(y, y_want) and torch.equal(rms, rms_want)
    assert torch.equal(dx, dx_want) and torch.equal(dw, dw_want)
    # DLPack, outputs from alloc=
    made = []

    def alloc(shape, elem):
        t = torch.empty(shape, dtype={"bf16": torch.bfloat16, "fp32": torch.float32,
                                      "uint8": torch.uint8}[elem], device="cuda")
        made.append(t)
        return DLWrap(t)
    y3, rms3 = lingen.rmsnorm(DLWrap(x), DLWrap(w), alloc=alloc)
    torch.cuda.synchronize()
    assert torch.equal(y3.t, y_want) and torch.equal(rms3.t, rms_want) and len(made) == 2


def test_side_stream_and_second_device_guard(seed):
    torch = torch_cuda()
    x, w = inputs(torch, seed, 4096, 2048)
    want, _ = lingen.rmsnorm(x, w)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        got, _ = lingen.rmsnorm(x, w)
    s.synchronize()
    assert torch.equal(got, want)


def test_bundle_context_on_the_gpu(seed, tmp_path):
    torch = torch_cuda()
    import test_package
    cli = test_package._cli()
    if not cli:
        pytest.skip("no lingen CLI to write a bundle")
    import subprocess
    arch = lingen.default_context().arch
    spec = test_package.os.path.join(test_package.ROOT, "configs/kernels/ling-mini-2.0-norms.json")
    subprocess.run([cli, "build", spec, "--arch", arch, "-o", str(tmp_path)], check=True,
                   capture_output=True)
    x, w = inputs(torch, seed, 8192, 2048)
    with lingen.Context(bundle=str(tmp_path)) as c:
        got = lingen.rmsnorm_quant(x, w, context=c)
        torch.cuda.synchronize()
    want = lingen.rmsnorm_quant(x, w)
    for a, b in zip(got, want):
        assert torch.equal(a.view(torch.uint8) if a.dtype == torch.float8_e4m3fn else a,
                           b.view(torch.uint8) if b.dtype == torch.float8_e4m3fn else b)
