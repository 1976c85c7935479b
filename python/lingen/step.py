"""The step benchmark (`python -m lingen.bench --step MODEL`): every kernel of
a model's expanded training step (`lingen expand MODEL`), timed at the
model's shapes, and their sum; beside it linghe's kernels on the same
shapes, when linghe is importable (docs/performance.md: the goal is a
lingen sum at most 0.6 x linghe's over the kernels both have).

lingen's times come from `lingen bench` (the CLI's harness: inputs from
each family's reference case, L2 flushed, CUDA events, median), every
kernel of the step at T tokens, the per-expert SwiGLU (batch_swiglu_quant)
at T x top_k rows. The kernels that have a case in lingen.benches (and a
linghe peer there) are also timed in this process, lingen and linghe on the
same inputs by lingen.bench's timer, so that the two sums compare like with
like. The CLI is $LINGEN_CLI, else `lingen` on PATH, else the `lingen`
beside $LINGEN_LIBRARY."""
import json
import os
import shutil
import subprocess
import sys
import tempfile


def cli():
    path = os.environ.get("LINGEN_CLI") or shutil.which("lingen")
    lib = os.environ.get("LINGEN_LIBRARY")
    if not path and lib:
        path = os.path.join(os.path.dirname(os.path.abspath(lib)), "lingen")
    if not path or not os.path.exists(path):
        raise SystemExit("--step needs the lingen CLI: set LINGEN_CLI or put lingen on PATH")
    return path


def expand(exe, model):
    """The step's kernels (the specs `lingen expand` prints)."""
    out = subprocess.run([exe, "expand", model], check=True, capture_output=True, text=True).stdout
    return json.loads(out[out.index("{"):])["kernels"]


def rows_of(spec, tokens, top_k):
    """The rows a kernel is timed at: T x top_k for the per-expert kernels
    over the experts' rows (the SwiGLU, the grouped GEMMs)."""
    per_expert = spec["op"] in ("batch_swiglu_quant", "fp8_grouped_gemm")
    return tokens * top_k if per_expert else tokens


def top_k(specs):
    return next((s["top_k"] for s in specs if "top_k" in s), 1)


def harness(exe, specs, tokens, reps=20):
    """{index: median us} from `lingen bench --json`, each kernel at its rows."""
    groups = {}
    for i, s in enumerate(specs):
        groups.setdefault(rows_of(s, tokens, top_k(specs)), []).append(i)
    out = {}
    with tempfile.TemporaryDirectory() as d:
        for rows, idx in groups.items():
            got = _bench(exe, d, [specs[i] for i in idx], rows, reps)
            if got is None and len(idx) > 1:  # one kernel failed: each alone
                for i in idx:
                    one = _bench(exe, d, [specs[i]], rows, reps)
                    if one:
                        out[i] = one[0]
            for i, us in zip(idx, got or []):
                out[i] = us
    return out


def _bench(exe, d, specs, rows, reps):
    """The median us of each spec by `lingen bench` (None: it failed)."""
    path = os.path.join(d, "step.json")
    with open(path, "w") as f:
        json.dump({"kernels": specs}, f)
    res = subprocess.run([exe, "bench", path, "--tokens", str(rows), "--reps", str(reps), "--json"],
                         capture_output=True, text=True)
    if res.returncode != 0:
        print(f"lingen bench {specs[0]['op'] if len(specs) == 1 else len(specs)} ({rows} rows): "
              f"{res.stderr.strip()[:300]}", file=sys.stderr)
        return None
    return [r["median_us"] for r in json.loads(res.stdout)]


def _maker(spec, t):
    """The lingen.benches case of a kernel at the step's shapes (None: none)."""
    from lingen.benches import attention, cross_entropy, norms, swiglu
    op, ps = spec["op"], spec["pass"]
    fwd = ps == "forward"
    if op == "rmsnorm_quant":
        return lambda env: norms._k1(env, t, spec["hidden"])
    if op == "rmsnorm":
        return lambda env: (norms._fwd if fwd else norms._bwd)(env, t, spec["hidden"])
    if op == "swiglu_quant":
        return lambda env: (swiglu._k7_fwd if fwd else swiglu._k7_bwd)(env, t, 2 * spec["intermediate"])
    if op == "cross_entropy":
        return lambda env: (cross_entropy._fwd if fwd else cross_entropy._bwd)(env, t, spec["vocab"])
    if op == "qk_norm_rope":
        a = (t, 1, spec["q_heads"], spec["kv_heads"], spec["head_dim"])
        return lambda env: (attention._rope_fwd if fwd else attention._rope_bwd)(env, *a)
    return None


def peers(specs, tokens):
    """{index: {impl: us}} for the kernels with a case, lingen and linghe."""
    try:
        import torch

        import lingen.torch as lt
        from lingen.bench import Env, Timer, _linghe
        env, timer, out = Env(torch, lt, None, _linghe()), Timer(torch), {}
    except Exception as e:  # no torch or no GPU: the CLI's times alone
        print(f"--step: no Python timings ({type(e).__name__}: {str(e)[:200]})", file=sys.stderr)
        return {}
    for i, s in enumerate(specs):
        make = _maker(s, tokens)
        if make is None:
            continue
        try:
            setup = make(env)
            out[i] = {k: timer.us(setup.impls[k])[0] for k in ("lingen", "linghe") if k in setup.impls}
        except Exception as e:  # reported, not fatal
            out[i] = {"error": f"{type(e).__name__}: {e}"[:200]}
        del make
        torch.cuda.empty_cache()
    return out


def _name(s):
    return s["op"] + (" fwd" if s["pass"] == "forward" else " bwd")


def run(model, tokens=8192, with_peers=True):
    exe = cli()
    specs = expand(exe, model)
    times = harness(exe, specs, tokens)
    pt = peers(specs, tokens) if with_peers else {}
    kernels = []
    for i, s in enumerate(specs):
        k = dict(kernel=_name(s), spec=s, rows=rows_of(s, tokens, top_k(specs)), lingen_us=times.get(i))
        k.update({f"{impl}_py_us": us for impl, us in pt.get(i, {}).items() if impl != "error"})
        if "error" in pt.get(i, {}):
            k["error"] = pt[i]["error"]
        kernels.append(k)
    both = [k for k in kernels if k.get("linghe_py_us") is not None and k.get("lingen_py_us") is not None]
    res = dict(model=model, tokens=tokens, kernels=kernels,
               lingen_sum_us=sum(k["lingen_us"] for k in kernels if k["lingen_us"] is not None),
               timed=sum(k["lingen_us"] is not None for k in kernels), total=len(kernels),
               command=" ".join(["python -m lingen.bench", *sys.argv[1:]]))
    if both:
        res["shared_lingen_us"] = sum(k["lingen_py_us"] for k in both)
        res["shared_linghe_us"] = sum(k["linghe_py_us"] for k in both)
        res["ratio"] = res["shared_lingen_us"] / res["shared_linghe_us"]
    return res


def table(res):
    f = lambda v: "—" if v is None else f"{v:.1f}"  # noqa: E731
    out = [f"Step of {res['model']} at {res['tokens']} tokens: {res['timed']} of {res['total']} kernels "
           f"timed, lingen sum {res['lingen_sum_us']:.1f} us (lingen bench: CUDA events, L2 flushed)", "",
           "| kernel | rows | lingen (lingen bench) | lingen (python timer) | linghe (python timer) |",
           "|---|---|---|---|---|"]
    for k in res["kernels"]:
        out.append(f"| {k['kernel']} | {k['rows']} | {f(k['lingen_us'])} | {f(k.get('lingen_py_us'))} | "
                   f"{f(k.get('linghe_py_us'))}{' (' + k['error'] + ')' if 'error' in k else ''} |")
    if "ratio" in res:
        out += ["", f"Kernels linghe has: lingen {res['shared_lingen_us']:.1f} us, linghe "
                    f"{res['shared_linghe_us']:.1f} us: {res['ratio']:.2f}x (goal <= 0.6x)"]
    else:
        out += ["", "linghe not importable here: no linghe sum"]
    return "\n".join(out)
