"""The benchmark's cases and table, without a GPU: every case module
imports, names its rows once, and the table shows each implementation."""
import lingen.bench as bench
from lingen.benches import all_cases, modules


def test_case_modules_declare_distinct_rows():
    assert any(m.__name__.endswith(".norms") for m in modules())
    for quick in (True, False):
        cases = all_cases(quick)
        keys = [(c.kernel, c.shape) for c in cases]
        assert keys, "no benchmark cases"
        assert len(keys) == len(set(keys)), "a (kernel, shape) row twice"
        assert all(callable(c.make) for c in cases)
    assert len(all_cases(False)) > len(all_cases(True))


def test_run_order_puts_every_kernel_first_then_the_other_shapes():
    quick = [(c.kernel, c.shape) for c in bench.ordered(True)]
    full = [(c.kernel, c.shape) for c in bench.ordered(False)]
    assert full[:len(quick)] == quick, "the quick set runs first"
    assert len(full) == len(set(full))
    assert {(c.kernel, c.shape) for c in all_cases(False)} <= set(full)
    moe = bench.ordered(False, ["moe"])
    assert moe and all(c.kernel.startswith("moe") for c in moe)
    # the odd-shape rule's token counts are in the full run
    assert any(s.startswith("6001x") for _, s in full)


# every family of gen/core/families.h, by the kernel names of its rows
FAMILY_ROWS = {
    "rmsnorm_quant": "rmsnorm_quant", "rmsnorm": "rmsnorm fwd", "fp8_quant": "fp8_quant",
    "fp8_quant_batched": "fp8_quant_batched", "fp8_quant_weight": "fp8_quant_weight",
    "group_rmsnorm_gate": "group_rmsnorm_gate fwd", "qk_norm_rope": "qk_norm_rope fwd",
    "cross_entropy": "cross_entropy fwd", "grad_norm": "grad_norm l2",
    "count_zero": "count_zero", "swiglu_quant": "swiglu_quant fwd",
    "batch_swiglu_quant": "batch_swiglu_quant fwd", "router_gemm": "router fwd",
    "moe_row_map": "moe row map", "moe_permute": "moe permute",
    "moe_unpermute": "moe unpermute", "moe_permute_quant": "moe permute+quant",
    "rmsnorm_router": "rmsnorm_router", "fp8_gemm": "fp8_gemm fwd",
    "fp8_grouped_gemm": "fp8_grouped_gemm fwd"}


def test_every_family_has_rows():
    import os
    import re
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "gen", "core", "families.h")) as f:
        families = re.findall(r"^\s*X\((\w+),", f.read(), re.M)
    assert sorted(families) == sorted(FAMILY_ROWS), "a family without bench rows"
    kernels = {c.kernel for c in all_cases(True)}
    assert {FAMILY_ROWS[f] for f in families} <= kernels


def test_table_lists_every_impl_and_speedup():
    rows = [dict(kernel="k", shape="1x128", impl="lingen", us=2.0, pct_copy=50.0),
            dict(kernel="k", shape="1x128", impl="eager", us=6.0, pct_copy=16.7),
            dict(kernel="k", shape="1x128", impl="torch.mm", us=4.0, pct_copy=25.0),
            dict(kernel="k", shape="1x128", impl="compile", error="boom"),
            dict(kernel="k", shape="1x128", impl=bench.QUOTED, us=8.0,
                 pct_copy=12.5, quoted=True)]
    res = dict(rows=rows, copy_gbps=4000.0, device="dev", torch="t", triton="tr",
               liger=None, lingen="0", host={})
    text = bench.table(res)
    head = next(ln for ln in text.splitlines() if ln.startswith("| kernel"))
    assert "torch.mm" in head and head.rstrip().endswith("lingen speed-up |")
    line = next(ln for ln in text.splitlines() if ln.startswith("| k |"))
    assert "2.0 (50%)" in line and "failed" in line
    assert "eager 3.00x" in line and "torch.mm 2.00x" in line and "linghe 4.00x" in line


class _FakeCuda:
    """Enough of torch.cuda for bench.Timer: captures fail for ops marked
    uncapturable (as a host sync does), events tick 5 us an op."""

    def __init__(self):
        self.clock, self.capturing, self.synced = 0.0, False, 0

    class _G:
        def replay(self):
            pass

    def CUDAGraph(self):
        return self._G()

    def graph(self, g):
        cuda = self

        class Ctx:
            def __enter__(self):
                cuda.capturing = True

            def __exit__(self, *exc):
                cuda.capturing = False
        return Ctx()

    def Stream(self):
        return _Null()

    def stream(self, s):
        return _Null()

    def current_stream(self):
        return _Null()

    def synchronize(self):
        self.synced += 1

    def Event(self, enable_timing=True):
        cuda = self

        class E:
            def record(self):
                self.t = cuda.clock

            def synchronize(self):
                pass

            def elapsed_time(self, other):
                return (other.t - self.t) / 1e3
        return E()


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def wait_stream(self, s):
        pass


class _FakeTorch:
    uint8 = "u8"

    def __init__(self):
        self.cuda = _FakeCuda()

    def empty(self, n, dtype=None, device=None):
        class Flush:
            def zero_(self):
                pass
        return Flush()


def test_timer_falls_back_to_events_when_capture_fails():
    torch = _FakeTorch()
    timer = bench.Timer(torch, n=4, reps=3)

    def host_sync_op():  # as .item() or nonzero(): illegal while capturing
        if torch.cuda.capturing:
            raise RuntimeError("operation not permitted when stream is capturing")
        torch.cuda.clock += 5.0

    us, how = timer.us(host_sync_op)
    assert how == "events" and abs(us - 5.0) < 1e-9
    assert torch.cuda.synced >= 2  # the failed captures were waited out

    def plain_op():
        torch.cuda.clock += 5.0
    us, how = timer.us(plain_op)
    assert how == "graph"


def test_events_rows_are_marked():
    rows = [dict(kernel="k", shape="s", impl="lingen", us=2.0, pct_copy=50.0, timer="graph"),
            dict(kernel="k", shape="s", impl="eager", us=9.0, pct_copy=11.0, timer="events")]
    res = dict(rows=rows, copy_gbps=4000.0, device="dev", torch="t", triton="tr",
               liger=None, lingen="0", host={})
    line = next(ln for ln in bench.table(res).splitlines() if ln.startswith("| k |"))
    assert "9.0 (11%) ev" in line and "2.0 (50%) |" in line
    assert "(events)" in bench._line(rows[1]) and "(events)" not in bench._line(rows[0])


def test_quack_joins_the_rows_of_its_kernels_or_says_not_installed():
    import types

    import pytest

    from lingen.benches import Case, Setup, quack
    made = []

    def make(env):
        made.append(env)
        return Setup({"lingen": lambda: None}, ("x", "w"))
    other = Case("fp8_quant", "1x128", make)
    assert quack.wrap(other) is other  # a kernel QuACK lacks: untouched
    row = quack.wrap(Case("rmsnorm fwd", "1x128", make))
    env = types.SimpleNamespace(torch=None)
    saved = quack._loaded
    try:
        quack._loaded = (None, "not installed (ImportError: no quack)")
        with pytest.raises(RuntimeError, match="not installed"):
            row.make(env).impls["quack"]()
        assert quack.version() is None
        fwd = lambda x, w, eps, store_rstd: (x + "'", "res", w + "r")  # noqa: E731
        quack._loaded = (dict(rmsnorm_fwd=fwd), "0.6.5")
        assert row.make(env).impls["quack"]() == ("x'", "wr")  # (out, rstd), as eager's
        assert quack.version() == "0.6.5"
    finally:
        quack._loaded = saved
    assert made == [env, env]
    kernels = {c.kernel for c in all_cases(True)}
    assert set(quack.PEERS) <= kernels, "a QuACK peer for a row no module has"
