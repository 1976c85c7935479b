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


def test_table_lists_every_impl_and_speedup():
    rows = [dict(kernel="k", shape="1x128", impl="lingen", us=2.0, pct_copy=50.0),
            dict(kernel="k", shape="1x128", impl="eager", us=6.0, pct_copy=16.7),
            dict(kernel="k", shape="1x128", impl="torch.mm", us=4.0, pct_copy=25.0),
            dict(kernel="k", shape="1x128", impl="compile", error="boom"),
            dict(kernel="k", shape="1x128", impl="linghe (TARGETS.md)", us=8.0,
                 pct_copy=12.5, quoted=True)]
    res = dict(rows=rows, copy_gbps=4000.0, device="dev", torch="t", triton="tr",
               liger=None, lingen="0", host={})
    text = bench.table(res)
    head = next(ln for ln in text.splitlines() if ln.startswith("| kernel"))
    assert "torch.mm" in head and head.rstrip().endswith("lingen speed-up |")
    line = next(ln for ln in text.splitlines() if ln.startswith("| k |"))
    assert "2.0 (50%)" in line and "failed" in line
    assert "eager 3.00x" in line and "torch.mm 2.00x" in line and "linghe 4.00x" in line
