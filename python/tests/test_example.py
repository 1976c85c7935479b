"""examples/train_moe.py as a new user runs it, on the CPU with a tiny
model: which lingen it imports (the installed package first), its
argument checks (exit 2 before any work), its exit status when a mode
fails, and a record that says what ran (tokens, device, GEMM path)."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "train_moe.py")
TINY = ["--layers", "1", "--hidden", "256", "--experts", "8", "--vocab", "512", "--tokens", "64",
        "--seq", "32", "--active", "16", "--steps", "2", "--no-bar"]


def example():
    spec = importlib.util.spec_from_file_location("train_moe_example", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_script(args, cwd, env=None):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, SCRIPT] + args, cwd=cwd, env=e, capture_output=True,
                          text=True, timeout=300)


def test_example_prefers_installed_lingen(tmp_path):
    site = tmp_path / "site"
    (site / "lingen").mkdir(parents=True)
    (site / "lingen" / "__init__.py").write_text(
        "raise SystemExit('the installed lingen was imported')\n")
    path = os.pathsep.join([str(site)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    r = run_script(TINY + ["--modes", "torch", "--out", str(tmp_path / "o" / "t")], tmp_path,
                   {"PYTHONPATH": path})
    assert "the installed lingen was imported" in r.stderr, r.stderr[-2000:]


def test_example_help_lists_modes_without_the_library(tmp_path):
    r = run_script(["--help"], tmp_path, {"LINGEN_LIBRARY": str(tmp_path / "no-liblingen.so")})
    assert r.returncode == 0, r.stderr[-2000:]
    for mode in ("fp8", "bf16", "torch", "compile"):
        assert f"\n  {mode} " in r.stdout, r.stdout


BAD = [(["--modes", "bogus"], "--modes"), (["--modes", "fp8,FP8"], "--modes"),
       (["--tokens", "0"], "--tokens"), (["--seq", "0"], "--seq"),
       (["--tokens", "300", "--seq", "128"], "--tokens"), (["--steps", "0"], "--steps"),
       (["--layers", "-1"], "--layers"), (["--layers", "0"], "--layers"),
       (["--lr", "nan"], "--lr"), (["--lr", "0"], "--lr"), (["--active", "0"], "--active"),
       (["--time-limit", "0"], "--time-limit"),
       (["--out", "/proc/lingen-no-such/x"], "--out"),
       (["--experts", "4"], "topk"), (["--hidden", "200"], "hidden"),
       (["--vocab", "0"], "vocab"), (["--head", "chunked"], "--head")]


@pytest.mark.parametrize("argv,name", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_example_refuses_bad_arguments_before_any_work(argv, name, tmp_path, monkeypatch,
                                                       capsys):
    ex = example()
    monkeypatch.setattr(ex, "run_mode", lambda *a: pytest.fail("a mode ran"))
    out = ["--out", str(tmp_path / "o" / "t")] if name != "--out" else []
    with pytest.raises(SystemExit) as e:
        ex.main(TINY + out + argv)
    assert e.value.code == 2
    assert name in capsys.readouterr().err
    assert not (tmp_path / "o" / "t.json").exists()


def test_example_refuses_graph_without_a_gpu(tmp_path, monkeypatch, capsys):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: --graph can run")
    ex = example()
    monkeypatch.setattr(ex, "run_mode", lambda *a: pytest.fail("a mode ran"))
    with pytest.raises(SystemExit) as e:
        ex.main(TINY + ["--graph", "--out", str(tmp_path / "t")])
    assert e.value.code == 2 and "--graph" in capsys.readouterr().err


def test_example_exits_nonzero_when_a_mode_fails(tmp_path, monkeypatch):
    ex = example()
    real = ex.run_mode

    def run_mode(args, mode, device, corpus):
        if mode == "bf16":
            raise RuntimeError("this mode broke")
        return real(args, mode, device, corpus)

    monkeypatch.setattr(ex, "run_mode", run_mode)
    with pytest.raises(SystemExit) as e:
        ex.main(TINY + ["--modes", "torch,bf16", "--out", str(tmp_path / "t")])
    assert e.value.code == 1
    runs = json.loads((tmp_path / "t.json").read_text())["runs"]
    assert [r["mode"] for r in runs] == ["torch", "bf16"]
    assert "error" not in runs[0] and "this mode broke" in runs[1]["error"]


def test_example_record_says_what_ran(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("checks the CPU's record")
    ex = example()
    runs = ex.main(TINY + ["--tokens", "96", "--modes", "fp8,torch", "--out",
                           str(tmp_path / "t")])
    rec = json.loads((tmp_path / "t.json").read_text())
    assert rec["runs"] == json.loads(json.dumps(runs))
    assert rec["meta"]["device"] == "cpu" and rec["meta"]["tokens"] == 96
    assert "lingen fp8_gemm" not in rec["meta"]["gemm_backend"]
    fp8, plain = rec["runs"]
    for r in (fp8, plain):
        assert r["device"] == "cpu" and r["tokens"] == 96 and r["seq"] == 32
        assert len(r["losses"]) == 2
        assert r["tokens_per_s"] == pytest.approx(96 / r["median_step_s"])
    assert fp8["gemm_calls"]["lingen"] == []
    assert {"linear", "grouped", "grouped_wgrad"} <= set(fp8["gemm_calls"]["emulated"])
    assert "EMULATED" in fp8["gemm_backend"] and "lingen fp8_gemm" not in fp8["gemm_backend"]
    assert "emulated: " in (tmp_path / "t.md").read_text()
    assert fp8["head"] == "unfused" and plain["head"] == "unfused"  # the default head


def test_example_unfused_head_trains_the_same(tmp_path):
    """--head unfused: the logits, then lingen's cross entropy; the same
    losses as the fused head's within bf16 rounding."""
    if torch.cuda.is_available():
        pytest.skip("checks the CPU's record")
    ex = example()
    runs = {h: ex.main(TINY + ["--modes", "bf16", "--head", h, "--out", str(tmp_path / h)])[0]
            for h in ("fused", "unfused")}
    assert runs["unfused"]["head"] == "unfused"
    assert runs["fused"]["losses"] == pytest.approx(runs["unfused"]["losses"], rel=1e-2)


def test_example_default_out_is_not_the_committed_record():
    ex = example()
    default = os.path.abspath(os.path.join(ROOT, ex.parser().parse_args([]).out))
    assert not default.startswith(os.path.join(ROOT, "bench") + os.sep)
    ignored = subprocess.run(["git", "-C", ROOT, "check-ignore", "-q", default + ".json"])
    assert ignored.returncode in (0, 128)  # ignored by git (128: no git checkout here)


def test_example_profile_breakdown_names_each_kinds_top_kernels():
    ex = example()
    copy = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
            "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::"
            "operator()() const::{lambda()#8}::operator()() const::{lambda(unsigned char)#1}>"
            "(at::TensorIteratorBase&, ...)::{lambda(int)#1}>(int, ...)")
    events = [("lg_fp8_grouped_gemm_wgrad_x", 6000.0, 24), ("lg_moe_permute_quant_y", 1500.0, 12),
              (copy, 9000.0, 30), ("void at::native::vectorized_elementwise_kernel<4, "
                                   "at::native::FillFunctor<float>>", 300.0, 6),
              ("cudaLaunchKernel", 0.0, 900), ("nvjet_hsh_256x128", 4500.0, 9),
              ("flash_fwd_kernel", 1200.0, 12), ("multi_tensor_apply_kernel", 600.0, 3)]
    res = ex.breakdown(events, 3, top=1)
    kinds = res["kinds"]
    assert set(kinds) == {"lingen gemm", "lingen kernels", "other", "gemm", "attention",
                          "optimizer"}
    assert kinds["other"] == pytest.approx(3.1) and kinds["lingen gemm"] == pytest.approx(2.0)
    # per kind the top (here 1) kernel by time, ms and calls a step
    other = res["top"]["other"]
    assert len(other) == 1 and other[0]["ms"] == pytest.approx(3.0) and other[0]["calls"] == 10
    assert other[0]["name"].startswith("elementwise_kernel<128, 4, gpu_kernel_impl_nocast<"
                                       "direct_copy_kernel_cuda(TensorIteratorBase&)")
    assert "lambda" not in other[0]["name"] and "at::" not in other[0]["name"]
    assert res["top"]["lingen kernels"][0]["name"] == "lg_moe_permute_quant_y"
    lines = ex.profile_lines("fp8", kinds, res["top"])
    assert lines[0].startswith("\nfp8 profile, device ms a step: attention 0.4, gemm 1.5")
    assert any(ln.startswith("- fp8 other: `elementwise_kernel") and "3.00 ms x10" in ln
               for ln in lines)
    # a record written before the tops: the kinds' line alone
    assert ex.profile_lines("fp8", kinds, {}) == lines[:1]
