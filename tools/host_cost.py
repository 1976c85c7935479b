"""The host cost of one lingen op call, measured on a machine with no GPU.

    LINGEN_LIBRARY=build/liblingen.so PYTHONPATH=python python tools/host_cost.py [-n N]
        [--profile OP] [--top 15]

Every call after the first with the same shapes goes through lingen's
Python (the op's wrapper, lingen._core.call, the plan cache, the per-array
checks, output allocation, the kernel's argument arrays) and then launches.
This tool runs that path with the GPU stubbed out, so that only lingen's own
Python work is timed:

  * arrays are CPU torch tensors of a subclass that says it is on cuda:0
    (is_cuda, get_device()); data_ptr(), shape, dtype and is_contiguous() are
    torch's own, so reading them costs what it costs on a GPU tensor;
  * outputs and workspaces are allocated by torch.empty on the CPU (through
    the allocator cache lingen._core keeps per device), wrapped the same way;
  * the kernel comes from a stub Context.kernel (the spec is still parsed
    and validated by the library on the first call of a shape); its launch
    calls the real lg_kernel_run through ctypes with a NULL kernel, so the
    ctypes marshalling of sizes and pointers is timed, the launch is not;
  * the CUDA driver (lingen._cuda) is a Python object answering the calls
    the bindings make (current context, primary context, pointer device);
  * torch's current stream is a constant.

What the numbers leave out (real cost on a GPU machine): cuLaunchKernelEx
inside lg_kernel_run (a few us), the driver's cuCtxGetCurrent, torch's
CUDA caching allocator for outputs (torch.empty on cuda costs more than on
the CPU), the tensor-map encoding of the TMA kernels (lg_kernel_tmap, cached
per thread by address), and the GPU itself. A stubbed driver call costs
about what a ctypes call costs (a Python call), so the driver calls
lingen makes are counted but not the driver's work.
"""
import argparse
import cProfile
import os
import pstats
import sys
import timeit

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import lingen  # noqa: E402
from lingen import _arrays, _core, _cuda  # noqa: E402

CTX_HANDLE = 0x7000
STREAM = 0x5000


class FakeCuda(torch.Tensor):
    """A CPU tensor that says it lives on cuda:0 (views of it are plain CPU
    tensors again: the ops are given 2-D tensors, as the layers flatten)."""
    is_cuda = True
    __torch_function__ = torch._C._disabled_torch_function_impl

    def get_device(self):
        return 0


def fake(t):
    return torch.Tensor._make_subclass(FakeCuda, t)


def empty(shape, dtype):
    return fake(torch.empty(shape, dtype=dtype))


class FakeDriver:
    """The libcuda.so.1 calls lingen._cuda makes, answered in Python: one
    device whose primary context is always current."""

    def cuCtxGetCurrent(self, p):
        p._obj.value = CTX_HANDLE
        return 0

    def cuDeviceGet(self, p, d):
        p._obj.value = d
        return 0

    def cuDevicePrimaryCtxRetain(self, p, d):
        p._obj.value = CTX_HANDLE
        return 0

    def cuCtxSetCurrent(self, c):
        return 0

    def cuPointerGetAttribute(self, p, attr, ptr):
        p._obj.value = 0
        return 0

    def cuMemAllocAsync(self, p, n, stream):
        p._obj.value = 0x100000
        return 0

    def cuMemFreeAsync(self, p, stream):
        return 0


class _LaunchLib:
    """The library as a stub kernel sees it: lg_kernel_run is the real one
    (a NULL kernel: it returns at its argument check), its status ignored."""

    def __init__(self, lib):
        self._lib = lib
        self._run = lib.lg_kernel_run

    def __getattr__(self, name):
        return getattr(self._lib, name)

    def lg_kernel_run(self, *args):
        self._run(*args)
        return 0

    def lg_grad_norm(self, *args):  # a tensor list's launch (not called: no NULL check)
        return 0

    lg_count_zero = lg_grad_norm


class StubKernel(_core.Kernel):
    """A kernel of a spec with no cubin behind it."""

    def __init__(self, ctx, spec, workspace):
        lib = ctx._lib
        ctx = type("StubContext", (), {})()
        ctx._lib = lib if isinstance(lib, _LaunchLib) else _LaunchLib(lib)
        self._workspace = workspace
        super().__init__(ctx, spec, None)

    # Kernel.__init__ asks the library for the workspace size of the kernel
    @property
    def workspace_size(self):
        return self._workspace

    @workspace_size.setter
    def workspace_size(self, v):
        pass


def stub_gpu():
    """Stub the driver, torch's stream and allocator and the kernel loads;
    returns the context the ops use."""
    _cuda._cu = FakeDriver()
    torch._C._cuda_getCurrentRawStream = lambda device: STREAM
    by_elem = _arrays.torch_elems()[1]
    _core._torch_allocs[0] = lambda shape, elem: empty(shape, by_elem[elem])
    ctx = _core.Context(arch="sm_90a")
    ctx.kernel = lambda spec: StubKernel(ctx, spec if isinstance(spec, _core.Spec)
                                         else _core.Spec(spec), 1 << 20)
    ctx._lib = _LaunchLib(ctx._lib)
    _core.set_default_context(ctx)
    return ctx


def stub_list(tensors):
    """A lingen.TensorList of tensors with no device table (the table is
    made by the driver): cached as lingen.lists caches a plain list's."""
    from lingen import lists
    tl = object.__new__(lists.TensorList)
    views = lists._views("stub", tensors)
    tl.tensors, tl.device, tl.torch, tl._p = list(tensors), 0, True, None
    tl.elems = frozenset(e for _, e in views)
    tl.dtype = next(iter(tl.elems))
    lists._cache[tuple((v.ptr, v.elems, v.shape, v.device) for v, _ in views)] = tl
    return tl


def cases():
    """{name: a call of no arguments}: representative ops of the FP8 training
    step (the host cost does not depend on the sizes; small ones keep the
    stub's CPU allocations cheap, as the caching allocator's are)."""
    bf16, e4m3, fp32, i32 = torch.bfloat16, torch.float8_e4m3fn, torch.float32, torch.int32
    T, H, N, E = 256, 512, 512, 16  # small: the CPU allocations stay cheap
    x = empty((T, H), bf16)
    xq, xs = empty((T, H), e4m3), empty((H // 128, T), fp32)
    wq, ws = empty((N, H), e4m3), empty((N // 128, H // 128), fp32)
    gx = empty((H, T), e4m3)
    gxs = empty((T // 128 + E, H), fp32)
    counts = empty((E,), i32)
    grads = [empty((1024,), fp32) for _ in range(8)]
    stub_list(grads)
    norm = empty((), fp32)
    from lingen.torch import _ops
    return {
        "fp8_quant": lambda: lingen.fp8_quant(x),
        "torch fp8_quant": lambda: _ops._run("fp8_quant_forward", x, quant_round_scale=False,
                                             quant_output="both"),
        "fp8_gemm": lambda: lingen.fp8_gemm(xq, xs, wq, ws),
        "fp8_grouped_gemm_wgrad (workspace)":
            lambda: lingen.fp8_grouped_gemm_wgrad(gx, gxs, gx, gxs, counts),
        "grad_norm (list of 8)": lambda: lingen.grad_norm(grads, out=norm),
    }


def measure(fn, n):
    """us per call, best of 7 runs of n calls (after one warm call)."""
    fn()
    return min(timeit.repeat(fn, number=n, repeat=7)) / n * 1e6


def profile(fn, n, top):
    fn()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(n):
        fn()
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(top)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=2000, help="calls a run (default 2000)")
    ap.add_argument("--profile", default="torch fp8_quant",
                    help="the case cProfile shows ('' for none; default: torch fp8_quant)")
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args(argv)
    stub_gpu()
    cs = cases()
    for name, fn in cs.items():
        try:
            print(f"{name:40s} {measure(fn, a.n):7.1f} us/call")
        except Exception as e:  # a path this stub cannot run (it touched the GPU)
            print(f"{name:40s}     n/a ({type(e).__name__}: {str(e)[:60]})")
    if a.profile:
        print(f"\ncProfile of {a.profile!r}, {a.n} calls, top {a.top} by own time:")
        profile(cs[a.profile], a.n, a.top)


if __name__ == "__main__":
    main()
