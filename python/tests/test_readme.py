"""The README's "From Python" quick start is run as written (on a GPU)."""
import os
import re

from conftest import torch_cuda

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def quickstart():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    m = re.search(r"<!-- python-quickstart -->\s*```python\n(.*?)```", text, re.S)
    assert m, "README.md lost its python-quickstart block"
    return m.group(1)


def test_quickstart_is_short_and_imports_lingen():
    code = quickstart()
    assert "import lingen" in code and len(code.strip().splitlines()) <= 12
    compile(code, "README.md", "exec")


def test_quickstart_runs(capsys):
    torch_cuda()
    exec(compile(quickstart(), "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "torch.Size([8192, 2048])" in out
