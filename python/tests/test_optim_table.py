"""lingen.optim.AdamW's kernel table (issue 35) on the CPU: a table kept
across new gradient tensors has, after set_grads, exactly the rows of a
table built for the new addresses (only the gradient column rewritten, on
the device, from a copy of the N addresses); a captured table is never
rewritten; tools/step_host_audit.py runs (the FP8 step traced on meta)
and finds no table rebuilt in the steady state."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import lingen.optim as optim  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def no_pin(monkeypatch):
    monkeypatch.setattr(optim, "_pin", lambda t: t)


def _static():
    # (p, m, v, numel): one empty tensor, one of one chunk, one of several with a tail
    return ((1 << 20, 1 << 30, 1 << 31, 3 * optim.CHUNK + 5), (5 << 20, 3 << 30, 5 << 30, 0),
            (9 << 20, 7 << 30, 9 << 30, 100))


@pytest.mark.parametrize("gsz", [2, 4])
def test_set_grads_is_a_new_table(no_pin, gsz):
    static = _static()
    a = optim._Table(static, (111 << 12, 0, 222 << 12), "cpu", 2, gsz, 2)
    new = (333 << 12, 0, 444 << 12)
    a.set_grads(new)
    b = optim._Table(static, new, "cpu", 2, gsz, 2)
    assert a.rows == b.rows == 5 and a.grads == new
    assert torch.equal(a.table, b.table)
    assert a.table[1, 1] == (333 << 12) + gsz * optim.CHUNK
    assert a.table[4, 1] == 444 << 12 and a.table[3, 4] == 5


def test_no_rows(no_pin):
    t = optim._Table(((1, 2, 3, 0),), (4,), "cpu", 2, 2, 2)
    t.set_grads((5,))
    assert t.rows == 0 and t.table.shape == (1, 6)


def test_step_host_audit_runs():
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "step_host_audit.py"),
                        "--tiny", "--steps", "3"], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "summary: syncs 0," in out, out[-3000:]
    assert "_table" not in out and "aten::zeros  " not in out
