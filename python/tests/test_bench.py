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


def test_every_family_has_rows():
    """Each Case names the family its lingen row times (Case.family, beside
    the row); every family of the library's registry (gen/core/families.h)
    has a row in the quick run, and no row names a family the registry
    lacks."""
    import lingen
    families = set(lingen.families())
    for quick in (True, False):
        cases = all_cases(quick)
        nameless = sorted({c.kernel for c in cases if not c.family})
        assert not nameless, f"bench rows without Case.family: {nameless}"
        unknown = sorted({(c.kernel, c.family) for c in cases if c.family not in families})
        assert not unknown, f"bench rows of families the registry lacks: {unknown}"
    covered = {c.family for c in all_cases(True)}
    missing = sorted(families - covered)
    assert not missing, f"families without a quick bench row: {missing}"


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

    def empty_cache(self):
        self.emptied = getattr(self, "emptied", 0) + 1

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

    assert torch.cuda.emptied >= 2  # and their pools handed back

    def plain_op():
        torch.cuda.clock += 5.0
    us, how = timer.us(plain_op)
    assert how == "graph"


def test_timer_times_a_long_op_by_events_without_a_graph():
    torch = _FakeTorch()
    timer = bench.Timer(torch, n=4, reps=3)
    captured = []

    def long_op():  # 1.5 ms: no graph of it (its temporaries would stay in the graph's pool)
        captured.append(torch.cuda.capturing)
        torch.cuda.clock += 1500.0
    us, how = timer.us(long_op)
    assert how == "events" and abs(us - 1500.0) < 1e-9
    assert not any(captured)


def test_event_times_warmup_untimed_and_flush_outside_the_events():
    """bench.event_times (the tools' and benches' one timer): warmup calls
    untimed, the flush zeroed before each timed call and not timed, ms."""
    torch, log = _FakeTorch(), []

    class Flush:
        def zero_(self):
            log.append("flush")
            torch.cuda.clock += 1000.0  # outside the events: not in the times

    def op():
        log.append("op")
        torch.cuda.clock += 5.0
    ts = bench.event_times(torch, op, 3, warmup=2, flush=Flush())
    assert log == ["op"] * 2 + ["flush", "op"] * 3
    assert len(ts) == 3 and all(abs(t - 0.005) < 1e-12 for t in ts)
    assert abs(bench.median_ms(torch, op, 4) - 0.005) < 1e-12


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


def _token_quantisers():
    """{family: per_expert} for every family of the library with an e4m3
    output whose shape names tokens; per_expert: it takes counts by expert."""
    import lingen
    out = {}
    for name, f in lingen.families().items():
        args = [a for p in f.passes.values() for a in p.args]
        if any(a.role != "in" and a.elem == "e4m3" and "tokens" in a.shape for a in args):
            out[name] = any(a.name in ("counts", "padded_counts") for a in args)
    return out


def _names(shape, n):
    """The shape names the count n (6001x2048, 1x6001x2048 G4; not 60016)."""
    import re
    return re.search(rf"(?<![0-9]){n}(?![0-9])", shape) is not None


def _rounded(shape, n):
    import re
    return re.sub(rf"(?<![0-9]){n}(?![0-9])", str((n + 127) // 128 * 128), shape, count=1)


def test_quantising_families_have_odd_count_rows():
    """The odd-shape rule's rows (docs/performance.md) for every quantising
    family: 6001 and 8191 tokens, each beside its count rounded up to 128,
    and, for the per-expert ones, random counts beside the same rounded to
    multiples of 128 (counts%128; K4b's m128); none of them in --quick."""
    quant = _token_quantisers()
    # the detector still sees the per-expert quantisers it was written for
    assert {"batch_swiglu_quant", "fp8_quant_batched", "moe_permute_quant"} <= {
        f for f, per in quant.items() if per}
    cases = all_cases(False)
    full = {(c.kernel, c.shape) for c in cases}
    for family, per_expert in quant.items():
        kernels = sorted({c.kernel for c in cases if c.family == family})  # its rows (Case.family)
        assert kernels, f"{family}: a quantising family without bench rows"
        for kernel in kernels:
            shapes = [s for k, s in full if k == kernel]
            for odd in (6001, 8191):
                rows = [s for s in shapes if _names(s, odd)]
                assert rows, f"{family}: {kernel} has no {odd}-token row"
                for s in rows:
                    assert (kernel, _rounded(s, odd)) in full, (kernel, s, "no aligned neighbour")
            if per_expert:
                assert any((kernel, s + suffix) in full for s in shapes
                           for suffix in (" counts%128", " m128")), \
                    f"{family}: {kernel} has no random-count row beside counts rounded to 128"
    quick = [c.shape for c in all_cases(True)]
    assert not any(_names(s, 6001) or _names(s, 8191) or s.endswith("counts%128")
                   for s in quick), "--quick runs an odd-count row"


def test_odd_token_counts_sit_beside_their_aligned_neighbours():
    """Every kernel with an odd-count row (the quantisers and every other
    family whose shape takes a token count) has 6001 and 8191, each beside
    its count rounded up to 128 (same other sizes)."""
    full = {(c.kernel, c.shape) for c in all_cases(False)}
    odd_kernels = {k for k, s in full if _names(s, 6001) or _names(s, 8191)}
    assert {"rmsnorm fwd", "rmsnorm bwd", "cross_entropy fwd", "qk_norm_rope fwd",
            "group_rmsnorm_gate fwd", "router fwd", "moe permute", "moe unpermute",
            "moe row map", "fp8_gemm fwd"} <= odd_kernels
    for kernel in odd_kernels:
        shapes = [s for k, s in full if k == kernel]
        for odd in (6001, 8191):
            rows = [s for s in shapes if _names(s, odd)]
            assert rows, f"{kernel}: no {odd}-token row"
            for s in rows:
                assert (kernel, _rounded(s, odd)) in full, (kernel, s)
    assert ("moe permute+quant", "8192x2048 e256 top8 m128") in full


def test_table_marks_refused_peers_and_prints_the_seed():
    rows = [dict(kernel="k", shape="6001x128", impl="lingen", us=2.0, pct_copy=50.0),
            dict(kernel="k", shape="6001x128", impl="liger", error="ValueError: n", refused=True),
            dict(kernel="k", shape="6001x128", impl="compile", error="AssertionError: differ")]
    res = dict(rows=rows, copy_gbps=4000.0, device="dev", torch="t", triton="tr",
               liger=None, lingen="0", host={}, seed=7)
    text = bench.table(res)
    assert "seed 7" in text.splitlines()[0]
    line = next(ln for ln in text.splitlines() if ln.startswith("| k |"))
    assert "refused" in line and "failed" in line
    assert "refused: ValueError" in bench._line(rows[1])


def test_round_counts_keeps_the_total_in_multiples_of_128():
    import random
    from lingen.benches.swiglu import round_counts
    rng = random.Random(5)
    for experts in (1, 5, 256):
        counts = [rng.randrange(0, 600) for _ in range(experts)]
        counts[-1] += (-sum(counts)) % 128
        out = round_counts(counts)
        print(experts, counts[:5], out[:5])
        assert sum(out) == sum(counts) and len(out) == experts
        assert all(c % 128 == 0 and c >= 0 for c in out)


def test_step_rows_and_table():
    from lingen import step
    specs = [{"op": "rmsnorm_quant", "pass": "forward", "hidden": 2048},
             {"op": "moe_permute", "pass": "forward", "top_k": 6},
             {"op": "batch_swiglu_quant", "pass": "backward", "intermediate": 512},
             {"op": "grad_norm", "pass": "forward"}]
    assert step.top_k(specs) == 6
    assert [step.rows_of(s, 100, 6) for s in specs] == [100, 100, 600, 100]
    assert step._maker(specs[0], 100) is not None and step._maker(specs[3], 100) is None
    res = dict(model="m", tokens=100, timed=3, total=4, lingen_sum_us=30.0,
               kernels=[dict(kernel="rmsnorm_quant fwd", rows=100, lingen_us=10.0,
                             lingen_py_us=11.0, linghe_py_us=20.0),
                        dict(kernel="grad_norm fwd", rows=100, lingen_us=None)],
               shared_lingen_us=11.0, shared_linghe_us=20.0, ratio=0.55)
    text = step.table(res)
    assert "| rmsnorm_quant fwd | 100 | 10.0 | 11.0 | 20.0 |" in text
    assert "| grad_norm fwd | 100 | — | — | — |" in text and "0.55x (goal <= 0.6x)" in text


def test_step_expands_the_model_with_the_cli():
    import os
    import pytest
    from lingen import step
    try:
        exe = step.cli()
    except SystemExit:
        pytest.skip("no lingen CLI (LINGEN_CLI, PATH or beside LINGEN_LIBRARY)")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    specs = step.expand(exe, os.path.join(root, "configs", "models", "ling-mini-2.0.json"))
    ops = [s["op"] for s in specs]
    gemms = [o for o in ops if o.startswith("fp8_") and o.endswith("gemm")]
    assert len(specs) - len(gemms) == 21 and "batch_swiglu_quant" in ops and "rmsnorm_quant" in ops
    assert {"fp8_gemm", "fp8_grouped_gemm"} <= set(gemms)
    assert step.top_k(specs) == 8


class _CpuEnv:
    """What a case's make(env) reads of lingen.bench.Env, on the CPU (no
    compile: a compiled peer runs its function as it is)."""

    def __init__(self, torch, lt=None, seed=0):
        import lingen
        self.torch, self.lt, self.lingen, self.liger, self.linghe = torch, lt, lingen, None, None
        self.seed = seed
        self.gen = torch.Generator().manual_seed(seed)

    def randn(self, *shape, dtype=None):
        return self.torch.randn(*shape, generator=self.gen).to(dtype or self.torch.bfloat16)

    def compiled(self, fn):
        return lambda *args, **kwargs: fn(self.torch, *args, **kwargs)


class _OneCall:
    """bench.Timer's place: each implementation called once, not timed."""

    def us(self, fn):
        fn()
        return 1.0, "graph"


def _checked(env, case):
    """bench._case's rows of case (its check against eager, each peer)."""
    rows = []
    bench._case(env.torch, env, _OneCall(), case, 1.0, rows)
    return rows


def _declared_permute_quant(torch, scale=1.0):
    """moe_permute_quant as the kernel declares its outputs: q [R, hidden],
    s, qt, st and out_probs of the bound's R rows, the rows past the padded
    total P not written (NaN bytes here): the PyTorch form of the kernel
    (lingen._torchref.permute_quant) of x * scale."""
    from lingen import _torchref as Q

    def kernel(x, row_index, padded, probs=None, *, top_k, multiple):
        q, s, qt, st, pp = Q.permute_quant(x * scale, probs, row_index, padded)
        plist = [int(c) for c in padded.tolist()]
        P, h = sum(plist), x.shape[1]
        assert q.shape == (Q.rows_bound(x.shape[0], top_k, padded.shape[0], multiple), h)
        q.view(torch.uint8)[P:] = 0x7F  # e4m3 NaN
        qt.view(torch.uint8).reshape(-1)[P * h:] = 0x7F
        s.reshape(-1)[P * h // 128:] = float("nan")
        st[sum(-(-c // 128) for c in plist):] = float("nan")
        pp[P:] = float("nan")
        return q, s, qt, st, pp
    return kernel


def test_moe_permute_quant_case_compares_the_rows_that_hold_data():
    """K4b's row: lingen's outputs have the rows' bound (tokens * top_k +
    experts * (multiple - 1)) rows, eager's per-expert quantiser the padded
    total P; the case compares the first P rows (both copies dequantised,
    out_probs), whatever lies past them, and still fails a kernel whose
    rows differ."""
    import types

    import pytest
    torch = pytest.importorskip("torch")
    from lingen.benches import Case, moe
    for multiple in (16, 128):
        case = Case("moe permute+quant", f"333x256 e16 top4 m{multiple}",
                    lambda env, m=multiple: moe._permute_quant(env, 333, 256, 16, 4, m))
        lt = types.SimpleNamespace(moe_permute_quant=_declared_permute_quant(torch))
        rows = _checked(_CpuEnv(torch, lt), case)
        assert [r["impl"] for r in rows] == ["lingen", "eager"]
        assert not [r["error"] for r in rows if "error" in r]
        lt = types.SimpleNamespace(moe_permute_quant=_declared_permute_quant(torch, 1.5))
        rows = _checked(_CpuEnv(torch, lt), case)
        assert "differ" in rows[0].get("error", ""), rows[0]


def test_adamw_fp8_case_has_an_eager_peer():
    """adamw_fp8's row has eager (torch.optim.AdamW, then the PyTorch weight
    quantiser): every peer checked against it, weights and both FP8 copies
    dequantised (a copy of another weight fails)."""
    import pytest
    torch = pytest.importorskip("torch")
    from lingen import _torchref as Q
    from lingen.benches import Case, optim
    shapes = [(256, 384), (130, 256)]
    make = optim._case_fp8(256 * 384 + 1, shapes)
    rows = _checked(_CpuEnv(torch), Case("adamw_fp8 bf16", "2 weights", make))
    assert [r["impl"] for r in rows] == ["lingen", "eager", "adamw + fp8_quant_weight"]
    assert not [r["error"] for r in rows if "error" in r]
    setup = make(_CpuEnv(torch))
    want = setup.norm(setup.impls["eager"]())
    assert [tuple(t.shape) for t in want] == [(256, 384), (256, 384), (384, 256),
                                             (130, 256), (130, 256), (256, 130)]
    got = list(setup.impls["lingen"]())
    bench._close(torch, setup.norm(got), want, "adamw_fp8")
    got[1:5] = Q.weight(got[0].detach() * 2)  # the copies of another weight
    with pytest.raises(AssertionError, match="differ"):
        bench._close(torch, setup.norm(got), want, "adamw_fp8")
