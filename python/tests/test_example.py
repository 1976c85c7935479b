"""examples/train_moe.py as a new user runs it, on the CPU with a tiny
model: which lingen it imports (the installed package first), its
argument checks (exit 2 before any work), its exit status when a mode
fails, and a record that says what ran (tokens, device, GEMM path)."""
import importlib.util
import json
import math
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
       (["--vocab", "0"], "vocab"), (["--head", "chunked"], "--head"),
       (["--eval-every", "-1"], "--eval-every"), (["--eval-batches", "0"], "--eval-batches"),
       (["--topk", "0"], "topk"), (["--topk", "9", "--experts", "8"], "topk"),
       (["--expert-intermediate", "100"], "intermediate: found 100"),
       (["--config", "/no/such/model.json"], "--config"),
       (["--fp8-head", "--modes", "bf16,torch"], "--fp8-head"),
       (["--fp8-head", "--modes", "fp8", "--head", "fused", "--vocab", "262272"],
        "cfg.vocab (fp8_head=True, fused_head=True)"),
       (["--fp8-head", "--modes", "fp8", "--vocab", "520"], "cfg.vocab (fp8_head=True)")]


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
    assert fp8["head_gemms"] == "bf16" and plain["head_gemms"] == "bf16"
    assert rec["meta"]["fp8_head"] is False


def test_example_fp8_head_is_the_fp8_modes(tmp_path):
    """--fp8-head: the fp8 mode's head in FP8, the other modes' in bf16 as
    without it (the same losses), and the record (json and md) says which
    head each mode ran."""
    if torch.cuda.is_available():
        pytest.skip("checks the CPU's record")
    ex = example()
    args = TINY + ["--modes", "fp8,bf16"]
    with_ = ex.main(args + ["--fp8-head", "--out", str(tmp_path / "h")])
    without = ex.main(args + ["--out", str(tmp_path / "n")])
    assert [r["head_gemms"] for r in with_] == ["fp8", "bf16"]
    assert [r["head_gemms"] for r in without] == ["bf16", "bf16"]
    assert with_[1]["losses"] == without[1]["losses"]  # bf16 unaffected
    # the fp8 mode's first loss (the same initial weights) within FP8's noise
    assert with_[0]["losses"][0] == pytest.approx(without[0]["losses"][0], rel=1e-2)
    assert all(math.isfinite(v) for v in with_[0]["losses"])
    rec = json.loads((tmp_path / "h.json").read_text())
    assert rec["meta"]["fp8_head"] is True and rec["meta"]["head"] == "unfused"
    md = (tmp_path / "h.md").read_text()
    assert "LM heads: fp8 unfused fp8, bf16 unfused bf16; --fp8-head" in md, md


def test_example_fp8_head_fused_trains_as_unfused(tmp_path):
    """--fp8-head --head fused: the FP8 head in chunks of tokens, without the
    logits (lingen.nn.fp8_linear_cross_entropy); on the CPU the same
    numbers as the unfused FP8 head's, so the same losses."""
    if torch.cuda.is_available():
        pytest.skip("checks the CPU's record")
    ex = example()
    args = TINY + ["--modes", "fp8", "--fp8-head"]
    fused = ex.main(args + ["--head", "fused", "--out", str(tmp_path / "f")])
    unfused = ex.main(args + ["--out", str(tmp_path / "u")])
    assert fused[0]["head"] == "fused" and fused[0]["head_gemms"] == "fp8"
    assert fused[0]["losses"] == unfused[0]["losses"]
    assert "LM heads: fp8 fused fp8; --fp8-head" in (tmp_path / "f.md").read_text()


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
    # the eval (at the end, no_grad) through either head: the same loss
    assert runs["fused"]["eval_last"] == pytest.approx(runs["unfused"]["eval_last"], rel=1e-2)
    assert [n for n, _ in runs["fused"]["eval"]] == [2]


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


def test_example_eval_batches_are_held_out_and_the_same_in_every_mode():
    """The held-out batches: a function of the seed alone (every mode gets
    the same), none of them a training batch, from the training corpus's
    cycle (the same task)."""
    ex = example()
    a = ex.Corpus(512, 16, 32, 2, 0, "cpu")
    b = ex.Corpus(512, 16, 32, 2, 0, "cpu")
    ev = a.eval_batches(3)
    assert len(ev) == 3
    for (i, l), (j, m) in zip(ev, b.eval_batches(3)):
        assert torch.equal(i, j) and torch.equal(l, m)
    assert not torch.equal(ev[0][0], ev[1][0])  # three batches, not one thrice
    train = [a.batch_at(k)[0] for k in range(200)]
    assert not any(torch.equal(e[0], t) for e in ev for t in train)
    assert not any(torch.equal(e[0], t) for e in ev
                   for t in (ex.Corpus(512, 16, 32, 2, 1, "cpu").batch_at(k)[0] for k in range(50)))
    # the training corpus's cycle: most next tokens follow it (10% noise)
    nxt = {int(x): int(y) for x, y in zip(a.order, a.order.roll(-1))}
    ids, labels = ev[0]
    follows = (torch.tensor([[nxt.get(int(x), -1) for x in row] for row in ids]) == labels)
    assert follows.float().mean() > 0.6


def test_example_eval_loss_in_the_record(tmp_path):
    """--eval-every 2 over 5 steps: evals after 2, 4 and 5 (the end's),
    finite, the same in bf16 and torch (the same math on the CPU, as their
    training losses), eval_last the mean of those in the last 50 steps;
    the table's eval column and the FP8-vs-BF16 line; --eval-every 0: none."""
    if torch.cuda.is_available():
        pytest.skip("checks the CPU's record")
    ex = example()
    ex.main(TINY + ["--steps", "5", "--eval-every", "2", "--eval-batches", "2",
                    "--modes", "fp8,bf16,torch", "--out", str(tmp_path / "t")])
    rec = json.loads((tmp_path / "t.json").read_text())
    fp8, bf16, plain = rec["runs"]
    for r in rec["runs"]:
        assert [n for n, _ in r["eval"]] == [2, 4, 5], r["eval"]
        assert all(math.isfinite(v) and 0 < v < 10 for _, v in r["eval"])
        assert r["eval_last"] == pytest.approx(sum(v for _, v in r["eval"]) / 3)
        assert r["eval_every"] == 2 and r["eval_batches"] == 2
    assert bf16["losses"] == plain["losses"]
    assert bf16["eval"] == plain["eval"]
    assert fp8["eval"] != bf16["eval"]  # the FP8 forward's own
    assert fp8["eval_last"] == pytest.approx(bf16["eval_last"], rel=0.05)
    md = (tmp_path / "t.md").read_text()
    assert "| eval loss |" in md and f"| {bf16['eval_last']:.4f} |" in md
    rel = abs(fp8["eval_last"] - bf16["eval_last"]) / bf16["eval_last"]
    assert f"FP8 vs BF16 eval loss: {rel:.2%}" in md and "no floor" in md
    off = ex.main(TINY + ["--eval-every", "0", "--modes", "torch", "--out", str(tmp_path / "o")])
    assert off[0]["eval"] == [] and "eval_last" not in off[0]
    assert "eval loss:" not in (tmp_path / "o.md").read_text()


def test_example_eval_last_and_the_noise_floor_line():
    ex = example()
    assert ex.eval_last([[50, 3.0], [100, 2.0], [150, 1.0]], 150) == pytest.approx(1.0)
    assert ex.eval_last([[50, 3.0], [100, 2.0], [125, 1.0], [150, 0.5]], 150) == \
        pytest.approx(0.75)
    assert ex.eval_last([[10, 3.0]], 500) == 3.0  # none in the last 50: the final eval
    runs = [{"mode": "fp8", "eval_last": 2.03}, {"mode": "bf16", "eval_last": 2.0},
            {"mode": "compile", "eval_last": 1.9}]
    line = ex.eval_verdict(runs)
    assert "noise floor |eval(bf16) - eval(compile)| / eval(compile) = 5.26%" in line
    assert "FP8 vs BF16 eval loss: 1.50%" in line and ": met" in line
    runs[2]["eval_last"] = 1.99  # floor 0.50%: 1.5% is over both
    assert "NOT met" in ex.eval_verdict(runs)
    runs[0]["eval_last"] = 2.01  # 0.5%: within 1%
    assert ": met" in ex.eval_verdict(runs)
    assert ex.eval_verdict(runs[:1]) == ""  # no bf16: no line
    assert ex.eval_verdict([{"mode": "bf16", "eval_last": 2.0}, {"mode": "fp8", "error": "x"}]) == ""
    # a record of before the evals: the table without them
    meta = {"argv": [], "device": "cpu", "torch": "t", "gemm_backend": "g"}
    old = {"mode": "torch", "losses": [1.0], "median_step_s": 1.0, "tokens_per_s": 1.0,
           "loss_last50": 1.0, "peak_mem_gib": None}
    assert "| 1.0000 | - | - |" in ex.markdown(meta, [old])


def test_example_eval_keeps_the_fp8_copies_for_the_next_step():
    """lingen.optim.AdamW(fp8_weights, release_grads) hands each FP8 weight's
    copies to the next training forward, which takes them: the eval between
    puts them back (the next step quantises no weight again), and its loss
    is the model's no_grad loss."""
    if torch.cuda.is_available():
        pytest.skip("the CPU's path")
    ex = example()
    ex.ln, ex._gemm = ex.import_lingen()
    import lingen.optim
    from lingen.nn import _k
    args = ex.parser().parse_args(TINY)
    torch.manual_seed(0)
    model = ex.ln.Model(ex.model_config(args), mode="fp8")
    opt = lingen.optim.AdamW(model.parameters(), fp8_weights=True, release_grads=True, lr=1e-3)
    corpus = ex.Corpus(512, 16, 32, 2, 0, "cpu")
    model(*corpus.batch_at(0)).backward()
    opt.step()
    held = [p for p in model.parameters() if _k.weight_copies(p) is not None]
    assert held  # the step handed copies over
    batches = corpus.eval_batches(2)
    loss = ex.evaluate(model, model, batches)
    assert all(_k.weight_copies(p) is not None for p in held)
    with torch.no_grad():
        want = sum(model(*b).item() for b in batches) / 2
    assert loss == pytest.approx(want, rel=1e-6)
