"""The package without a GPU: loading the library, the version, the
declarations and their shapes, specs, contexts, bundles and aot tables."""
import ctypes
import os
import re
import shutil
import subprocess
import sys

import pytest

import lingen
from lingen import _families, _lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_python(code, **env):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e)


def test_version_agrees_with_the_header():
    with open(os.path.join(ROOT, "include", "lingen.h")) as f:
        want = re.search(r'#define LINGEN_VERSION "([0-9.]+)"', f.read()).group(1)
    assert lingen.__version__ == want
    assert lingen.library_version() == want


def test_import_does_not_import_torch():
    r = run_python("import sys, lingen; lingen.families(); print('torch' in sys.modules)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_missing_library_is_one_clear_error(tmp_path):
    path = str(tmp_path / "nowhere" / "liblingen.so")
    r = run_python("import lingen; lingen.families()", LINGEN_LIBRARY=path)
    assert r.returncode != 0
    assert "LibraryError" in r.stderr and path in r.stderr and "not found" in r.stderr
    assert r.stderr.count("Traceback") == 1


def test_broken_library_is_one_clear_error(tmp_path):
    bad = tmp_path / "liblingen.so"
    bad.write_bytes(b"\x7fELF not really")
    r = run_python("import lingen; lingen.Context(arch='sm_90a')", LINGEN_LIBRARY=str(bad))
    assert r.returncode != 0
    assert "LibraryError" in r.stderr and str(bad) in r.stderr


def test_a_library_that_is_not_lingen_is_refused():
    import _ctypes  # a shared object every Python has, without lingen's symbols
    with pytest.raises(lingen.LibraryError, match="not a lingen library"):
        _lib._open(_ctypes.__file__)


def test_families_are_the_libraries_declarations():
    fams = lingen.families()
    assert {"rmsnorm_quant", "rmsnorm", "fp8_quant"} <= set(fams)
    f = fams["rmsnorm"]
    assert set(f.passes) == {"forward", "backward"}
    bwd = f.passes["backward"]
    assert [a.name for a in bwd.args] == ["dy", "x", "w", "rms", "dx", "dw", "workspace"]
    assert bwd.arg("rms").role == "optional_in" and bwd.arg("dw").elem == "fp32"
    assert bwd.sizes == ("tokens",)
    assert f.key("hidden").shape and f.key("eps").default == 1e-6


def _valid_values(op):
    """Shape-key values to try for op: the declared minimum and a few more."""
    f = lingen.families()[op]
    out = []
    for v in (f.key("hidden").min, 384, 1024, 7168):
        try:
            lingen.Spec(_spec(op, "forward", v))
            out.append(v)
        except lingen.SpecError:
            pass
    return out


def _spec(op, pass_, hidden):
    s = {"op": op, "pass": pass_, "dtype": "bf16", "hidden": hidden}
    if lingen.families()[op].key("quant"):
        s["quant"] = {}
    return s


@pytest.mark.parametrize("op", ["rmsnorm_quant", "rmsnorm", "fp8_quant"])
def test_python_shapes_agree_with_the_library(op):
    """eval_shape (for torch.compile's symbolic sizes) and the library's
    lg_spec_arg_shape give the same dimensions for every argument."""
    fam = lingen.families()[op]
    for pass_, decl in fam.passes.items():
        for hidden in _valid_values(op):
            s = lingen.Spec(_spec(op, pass_, hidden))
            for tokens in (0, 1, 127, 128, 129, 8191, 8192):
                env = {"tokens": tokens, "hidden": hidden, "quant.block": 128}
                for a in decl.args:
                    if a.role == "workspace":
                        continue
                    assert _families.eval_shape(a, env) == s.arg_shape(a.index, [tokens]), \
                        (op, pass_, a.name, hidden, tokens)


def test_eval_shape_rejects_what_it_does_not_know():
    a = _families.Arg(0, "a", "in", "fp32", "x ** 2", 4, "", _families._parse_dims("x ** 2"))
    with pytest.raises(ValueError, match="unsupported"):
        _families.eval_shape(a, {"x": 3})


def test_spec_errors_name_the_path_found_and_allowed():
    with pytest.raises(lingen.SpecError) as e:
        lingen.Spec({"op": "rmsnorm_quant", "pass": "forward", "dtype": "bf16", "hidden": 1000,
                     "quant": {}})
    assert isinstance(e.value, ValueError)
    assert "hidden" in str(e.value) and "1000" in str(e.value) and "128" in str(e.value)
    with pytest.raises(lingen.SpecError, match="did you mean"):
        lingen.Spec({"op": "rmsnorm", "pass": "forward", "dtype": "bf16", "hiden": 1024})


def test_spec_canonical_entry_used_and_source():
    s = lingen.Spec(_spec("fp8_quant", "forward", 256) | {"quant": {"output": "columnwise"}})
    assert s.entry.startswith("lg_fp8_quant_fwd")
    assert '"output": "columnwise"' in s.canonical
    assert [s.arg_used(i) for i in range(5)] == [True, False, False, True, True]
    src = lingen.generate(s.canonical, "sm_80")
    assert s.entry in src and "__global__" in src


def test_context_cubin_without_a_gpu(ctx):
    cubin = ctx.cubin(_spec("rmsnorm", "forward", 1024))
    assert cubin[:4] == b"\x7fELF"
    assert ctx.arch == "sm_90a"
    again = ctx.cubin(_spec("rmsnorm", "forward", 1024))
    assert again == cubin


def test_context_prepare_makes_the_cubins_in_threads(ctx):
    specs = [_spec("rmsnorm", "forward", 1024), _spec("rmsnorm", "backward", 1024)]
    ctx.prepare(specs, jobs=2)
    fresh = lingen.Context(arch="sm_90a", cache_dir="off")
    assert [ctx.cubin(s) for s in specs] == [fresh.cubin(s) for s in specs]
    ctx.prepare([])  # nothing to do


def test_closed_context_refuses_work(tmp_path):
    c = lingen.Context(arch="sm_90a", cache_dir="off")
    c.close()
    with pytest.raises(lingen.LingenError, match="closed"):
        c.cubin(_spec("rmsnorm", "forward", 1024))


def test_bad_context_options():
    with pytest.raises(lingen.LingenError):
        lingen.Context(arch="sm_42")
    with pytest.raises(lingen.LingenError):
        lingen.Context(arch="sm_90a", bundle="/nonexistent/bundle")


def _cli():
    for d in sorted(os.listdir(ROOT)):
        p = os.path.join(ROOT, d, "lingen")
        if d.startswith("build") and os.access(p, os.X_OK) and os.path.isfile(p):
            return p
    return shutil.which("lingen")


def test_bundle_and_aot_from_python(tmp_path):
    cli = _cli()
    if not cli:
        pytest.skip("no lingen CLI built (cmake --build build) to write a bundle")
    spec = os.path.join(ROOT, "configs", "kernels", "ling-mini-2.0-norms.json")
    bundle = tmp_path / "bundle"
    subprocess.run([cli, "build", spec, "--arch", "sm_90a", "-o", str(bundle)], check=True,
                   capture_output=True)
    s = lingen.Spec({"op": "rmsnorm", "pass": "forward", "dtype": "bf16", "hidden": 2048})
    with lingen.Context(bundle=str(bundle), arch="sm_90a") as c:
        cubin = c.cubin(s)
        assert cubin[:4] == b"\x7fELF"
        with pytest.raises(lingen.LingenError) as e:
            c.cubin({"op": "rmsnorm", "pass": "forward", "dtype": "bf16", "hidden": 4096})
        assert e.value.status == "LG_ERR_MISSING"
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler for the aot table")
    aot = tmp_path / "aot"
    subprocess.run([cli, "aot", spec, "--arch", "sm_90a", "-o", str(aot)], check=True,
                   capture_output=True)
    so = tmp_path / "libkernels.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O0", "-I", os.path.join(ROOT, "include"),
                    str(aot / "lingen_aot.c"), "-o", str(so)], check=True)
    with lingen.Context(aot=str(so), arch="sm_90a") as c:
        assert c.cubin(s) == cubin
