"""The cases of `python -m lingen.bench`, one module a family (or group of
families): each module defines

    def cases(quick) -> list of Case

and is found by name (every module of this package), so adding a family's
rows touches no other file. A Case names the kernel row and shape (and
`family`, the registry's family whose kernel its lingen row times: every
family has a quick row, python/tests/test_bench.py checks), gives
linghe's H200 time from docs/performance.md when there is one, and a
`make(env)` that allocates the inputs and returns a Setup: the callables
to time by implementation ("lingen", "eager", "compile", "liger", ...),
`norm` (a result -> a tuple of tensors to compare with eager's), and the
tensors whose bytes count as moved (each input read once, each output
written once). `env` (lingen.bench.Env) holds torch, lingen.torch, a seeded
generator and the optional peers (env.liger: the module liger_kernel's
functional API, or None)."""
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Callable, Optional


# the odd-shape rule's token counts (docs/performance.md), each followed by
# its count rounded up to 128: the full run's rows of every family whose
# shape takes a token count
ODD_TOKENS = (6001, 6016, 8191, 8192)


@dataclass
class Setup:
    impls: dict
    tensors: tuple
    norm: Callable = lambda r: r


@dataclass
class Case:
    kernel: str
    shape: str
    make: Callable
    linghe_us: Optional[float] = None
    rtol: float = 2e-2
    extra: dict = field(default_factory=dict)
    family: Optional[str] = None  # the lingen family the row times (lingen.families())


def linghe(env, name):
    """linghe's function `name` (a docs/kernels.md entry point) when linghe is
    importable on this machine, else None: its rows are then measured in
    the same run, beside the others."""
    return (env.linghe or {}).get(name)


def modules():
    """Every case module of this package, by name (norms first)."""
    names = sorted(m.name for m in pkgutil.iter_modules(__path__))
    names.sort(key=lambda n: n != "norms")
    return [importlib.import_module(f"{__name__}.{n}") for n in names]


def all_cases(quick):
    from .quack import wrap  # QuACK joins the rows of the kernels it has
    return [wrap(c) for m in modules() for c in m.cases(quick)]
