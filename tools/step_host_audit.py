#!/usr/bin/env python3
"""What the host does in one FP8 training step, traced on the CPU (issue 35:
the GPU idles ~7.7 ms a step in gaps while Python catches up).

    python3 tools/step_host_audit.py [--config PATH] [--layers N] [--tiny]
                                     [--steps N] [--batch B] [--seq S] [--top N]
                                     [--head fused|unfused] [--fp8-head]

Runs examples/train_moe.py's FP8 step (lingen.nn.Model in mode "fp8":
forward with labels, backward, lingen.optim.AdamW(moments="bf16",
fp8_weights=True, release_grads=True) step, zero_grad(set_to_none=True))
on the ``meta`` device, where lingen.nn takes its GPU path (lingen's torch
ops, their fake kernels; test_nn_fp8_head.py's meta trace), under a
TorchDispatchMode that lists, for the last step (the first steps warm the
caches: the optimiser's tables and kernels, the weights' FP8 copies):

  * host syncs (aten._local_scalar_dense: .item() / float() / int() /
    bool() of a tensor; nonzero, is_nonzero, equal, masked_select, ...) and
    device -> host copies, with the Python stack that made them;
  * host -> device copies (a CPU tensor copied to the device, pin_memory);
  * allocations (factory ops: empty / zeros / full / arange / ..., and the
    zero fills among them) by call site;
  * the aten ops and lingen ops (torch.ops.lingen.*, and the FP8 GEMMs,
    which lingen calls through its Python API: counted at lingen.nn._gemm)
    a step, by phase and by the innermost lingen (or example) function.

The GPU-only pieces are simulated so that their host work shows: the FP8
GEMMs run lingen's path (lingen.nn._gemm's native checks answer yes; a
stub gives the output's shape); lingen.optim.AdamW takes its CUDA path for
meta parameters (the kernels' launches counted, not run; pin_memory
recorded and skipped: the CPU build of torch has no pinned memory). What
lingen's CUDA implementations do inside one torch op (lingen._core.call)
is not seen: one lingen op is one launch here.
"""
import argparse
import collections
import contextlib
import os
import sys
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.join(ROOT, "python", "tests"))

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

aten = torch.ops.aten

SYNC_OPS = {aten._local_scalar_dense.default, aten.nonzero.default, aten.is_nonzero.default,
            aten.equal.default, aten.masked_select.default, aten.unique_dim.default,
            aten._unique2.default, aten.nonzero_static.default}
FACTORIES = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
             "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like",
             "new_full", "arange", "scalar_tensor", "randn", "rand", "randint", "randperm",
             "eye", "linspace", "lift_fresh")
ZEROS = ("zeros", "zeros_like", "new_zeros", "zero_")
HERE = os.path.abspath(__file__)
TORCH = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def _frames():
    """The Python stack (outermost first) without this file's and torch's frames."""
    out = []
    for f in traceback.extract_stack()[:-3]:
        fn = os.path.abspath(f.filename)
        if fn == HERE or fn.startswith(TORCH) or "/site-packages/" in fn:
            continue
        out.append(f)
    return out


def _inner(frames):
    """The innermost frame of lingen's or the example's code, or None."""
    return next((f for f in reversed(frames) if os.path.abspath(f.filename).startswith(ROOT)),
                None)


def _where(frames):
    """The innermost frame of lingen's or the example's code, as file:line fn."""
    f = _inner(frames)
    if f is None:
        return "(no Python frame: autograd's own derivatives)"
    return f"{os.path.relpath(os.path.abspath(f.filename), ROOT)}:{f.lineno} {f.name}"


def _func_of(frames):
    """The innermost lingen function (file function), for op counts."""
    f = _inner(frames)
    if f is None:
        return "(autograd: torch's derivatives)"
    return f"{os.path.relpath(os.path.abspath(f.filename), os.path.join(ROOT, 'python'))} {f.name}"


def _stack_text(frames, depth=6):
    keep = [f for f in frames if os.path.abspath(f.filename).startswith(ROOT)][-depth:]
    return "\n".join(f"      {os.path.relpath(os.path.abspath(f.filename), ROOT)}:{f.lineno}"
                     f" in {f.name}: {(f.line or '').strip()[:90]}" for f in keep)


def _devs(args):
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(_devs(a))
    return out


class Audit(TorchDispatchMode):
    """Records every aten / lingen op with the stack that made it."""

    def __init__(self):
        super().__init__()
        self.phase = "setup"
        self.on = False
        self.reset()

    def reset(self):
        self.syncs, self.h2d, self.d2h, self.allocs = [], [], [], []
        self.ops = collections.Counter()       # (phase, op) -> n
        self.by_func = collections.Counter()   # (phase, function) -> n
        self.lingen = collections.Counter()    # (phase, lingen op) -> n
        self.extra = collections.Counter()     # simulated launches, pin_memory

    def note(self, kind, name, frames=None):
        """A simulated event (a GEMM or optimiser launch, a pin_memory)."""
        if not self.on:
            return
        frames = frames if frames is not None else _frames()
        self.lingen[(self.phase, name)] += 1 if kind == "launch" else 0
        if kind == "launch":
            self.by_func[(self.phase, _func_of(frames))] += 1
        if kind == "pin":
            self.h2d.append((self.phase, name, frames))
        self.extra[(self.phase, kind, name)] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = _devs(list(args) + list(kwargs.values()))
        name = func.name() if hasattr(func, "name") else str(func)
        meta_in = any(t.device.type == "meta" for t in tensors)
        cpu_in = [t for t in tensors if t.device.type == "cpu" and t.dim() > 0]
        if self.on:
            frames = _frames()
            self.ops[(self.phase, name)] += 1
            self.by_func[(self.phase, _func_of(frames))] += 1
            if func.namespace == "lingen":
                self.lingen[(self.phase, name)] += 1
            short = name.split("::")[-1].split(".")[0]
            if func in SYNC_OPS:
                self.syncs.append((self.phase, name, frames))
            if short in FACTORIES:
                self.allocs.append((self.phase, name, frames))
            elif short == "zero_" or (short == "fill_" and len(args) > 1 and args[1] == 0):
                self.allocs.append((self.phase, name + " (zero fill)", frames))
            dev = kwargs.get("device")
            to_meta = (dev is not None and torch.device(dev).type == "meta") or \
                (short in ("copy_",) and args[0].device.type == "meta")
            if cpu_in and (to_meta or (meta_in and short not in ("copy_",))):
                self.h2d.append((self.phase, name, frames))
            to_cpu = (dev is not None and torch.device(dev).type == "cpu") or \
                (short == "copy_" and args[0].device.type == "cpu")
            if meta_in and to_cpu:
                self.d2h.append((self.phase, name, frames))
        # data-dependent ops have no meta kernel: a stand-in value (recorded above)
        if func is aten._local_scalar_dense.default and args[0].device.type == "meta":
            return 1 if args[0].dtype.is_floating_point is False else 1.0
        if func in (aten.is_nonzero.default,) and meta_in:
            return True
        if func is aten.nonzero.default and meta_in:
            return torch.empty((0, args[0].dim()), dtype=torch.long, device="meta")
        if meta_in and name.split("::")[-1].split(".")[0] in ("_to_copy", "copy_"):
            dev = kwargs.get("device")
            if (dev is not None and torch.device(dev).type == "cpu") or (
                    args[0].device.type == "cpu" and args[0].dim() >= 0 and func is
                    aten.copy_.default):
                # meta -> CPU: zeros of the shape (the values are not traced)
                src = args[0] if func is not aten.copy_.default else args[1]
                out = torch.zeros(src.shape, dtype=kwargs.get("dtype") or src.dtype)
                if func is aten.copy_.default:
                    return args[0]
                return out
        return func(*args, **kwargs)


# ------------------------------------------------------ the GPU stand-ins

def _gemm_stub(audit):
    """lingen's FP8 GEMMs as one launch each: the output's shape only."""
    def make(name):
        def run(a, a_s, b, b_s, *rest, out_dtype="bf16", **kw):
            audit.note("launch", f"lingen.{name} (fp8 GEMM)")
            dt = torch.float32 if out_dtype == "fp32" else torch.bfloat16
            if name == "fp8_gemm":
                shape = (a.shape[0], b.shape[-2])
            elif name in ("fp8_gemm_dgrad", "fp8_grouped_gemm_dgrad"):
                shape = (a.shape[0], b.shape[-2])
            elif name == "fp8_gemm_wgrad":
                shape = (a.shape[0], b.shape[0])
            elif name == "fp8_grouped_gemm":
                shape = (a.shape[0], b.shape[-2])
            else:  # grouped wgrad: [E, N, K]
                shape = (rest[0].shape[0], a.shape[0], b.shape[0])
            return torch.empty(shape, dtype=dt, device=a.device)
        return run
    return make


def install_stand_ins(audit):
    """lingen.nn's GEMMs and lingen.optim.AdamW's CUDA path on meta."""
    from lingen.nn import _gemm
    import lingen.optim as optim
    make = _gemm_stub(audit)
    _gemm.native_dense = lambda t=None: True
    _gemm.native_grouped = lambda t=None, names=None: True
    _gemm._op = make
    optim._gpu = lambda t: t.is_cuda or t.device.type == "meta"

    class Kernel:
        def __init__(self, key):
            self.key = key

        def run(self, grid, args, stream):
            audit.note("launch", f"lingen {self.key[0] if self.key[0] == 'fp8' else ''}adamw")

    optim.AdamW._kernel = lambda self, group, pdt, gdt: Kernel(("adamw",))
    optim.AdamW._kernel_fp8 = lambda self, *a: Kernel(("fp8",))

    def pinned(t):
        audit.note("pin", "pin_memory (cudaHostAlloc / the pinned cache)")
        return t
    optim._pin = pinned
    # meta tensors all have data_ptr 0: each new tensor gets an address of its own here
    # (a gradient made again by each backward: a new address, the worst case on a GPU)
    from torch.utils.weak import WeakIdKeyDictionary
    addrs = WeakIdKeyDictionary()
    fresh = iter(range(1, 1 << 40))
    real_addr = optim._addr

    def addr(t):
        if t.device.type != "meta":
            return real_addr(t)
        a = addrs.get(t)
        if a is None:
            a = addrs[t] = 0x10000 * next(fresh)
        return a
    optim._addr = addr

    class Stream:
        cuda_stream = 0
    torch.cuda.device = lambda dev: contextlib.nullcontext()
    torch.cuda.current_stream = lambda dev=None: Stream()
    torch.cuda.is_current_stream_capturing = lambda: False


# ---------------------------------------------------------------- report

def report(audit, top):
    def sites(items):
        c = collections.Counter()
        stacks = {}
        for phase, name, frames in items:
            key = (phase, name, _where(frames))
            c[key] += 1
            stacks.setdefault(key, frames)
        return c, stacks

    print("== host syncs (a GPU waits for the host to read it) and device -> host copies ==")
    c, st = sites(audit.syncs + audit.d2h)
    if not c:
        print("   none")
    for (phase, name, where), n in c.most_common():
        print(f"  {n:4d}x [{phase}] {name}  at {where}")
        print(_stack_text(st[(phase, name, where)]))
    print("\n== host -> device copies (and pinned allocations) ==")
    c, st = sites(audit.h2d)
    if not c:
        print("   none")
    for (phase, name, where), n in c.most_common():
        print(f"  {n:4d}x [{phase}] {name}  at {where}")
        print(_stack_text(st[(phase, name, where)], 3))
    print("\n== allocations by call site (factory ops; zero fills marked) ==")
    c, _ = sites(audit.allocs)
    zeros = sum(n for (_, name, _), n in c.items()
                if name.split("::")[-1].split(".")[0] in ZEROS or "zero fill" in name)
    for (phase, name, where), n in c.most_common(top):
        print(f"  {n:4d}x [{phase}] {name.split('::')[-1]}  at {where}")
    print(f"  total {sum(c.values())} factory calls a step, {zeros} of them zero-filled")
    print("\n== ops a step by phase (aten ops; lingen ops: torch.ops.lingen + GEMM + "
          "optimiser launches) ==")
    phases = []
    for (ph, _), _n in list(audit.ops.items()) + list(audit.lingen.items()):
        if ph not in phases:
            phases.append(ph)
    tot_a = tot_l = 0
    for ph in phases:
        a = sum(n for (p, name), n in audit.ops.items()
                if p == ph and not name.startswith("lingen::"))
        lg = sum(n for (p, _), n in audit.lingen.items() if p == ph)
        tot_a += a
        tot_l += lg
        print(f"  {ph:10s} aten {a:5d}   lingen {lg:4d}")
    print(f"  {'step':10s} aten {tot_a:5d}   lingen {tot_l:4d}")
    print("\n== ops a step by the innermost lingen / example function ==")
    for (ph, fn), n in audit.by_func.most_common(top):
        print(f"  {n:5d}  [{ph}] {fn}")
    print("\n== aten ops a step, most frequent ==")
    for (ph, name), n in audit.ops.most_common(top):
        print(f"  {n:5d}  [{ph}] {name}")
    print("\n== lingen ops a step ==")
    for (ph, name), n in sorted(audit.lingen.items()):
        print(f"  {n:5d}  [{ph}] {name}")
    return {"syncs": len(audit.syncs) + len(audit.d2h), "h2d": len(audit.h2d),
            "allocs": len(audit.allocs), "zero_fills": zeros, "aten": tot_a, "lingen": tot_l}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=os.path.join(ROOT, "configs/models/ling-mini-2.0.json"))
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--tiny", action="store_true", help="the tests' TINY model instead")
    p.add_argument("--steps", type=int, default=3, help="steps run; the last one reported")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--head", choices=("fused", "unfused"), default="unfused")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--fp8-head", action="store_true")
    args = p.parse_args(argv)

    import lingen.nn as ln
    import lingen.optim
    import train_moe

    audit = Audit()
    install_stand_ins(audit)
    if args.tiny:
        from reference import TINY
        cfg = ln.ModelConfig(**TINY)
    else:
        cfg = ln.ModelConfig.from_json(args.config, layers=args.layers)
    torch.manual_seed(0)
    with torch.device("meta"):
        model = ln.Model(cfg, mode="fp8", fused_head=args.head == "fused",
                         fp8_head=args.fp8_head)
    opt = lingen.optim.AdamW(model.parameters(), moments="bf16", fp8_weights=True,
                             release_grads=True, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.0,
                             eps=1e-8)
    corpus = train_moe.Corpus(cfg.vocab, min(cfg.vocab, 1000), args.seq, args.batch, 0, "meta")
    targs = argparse.Namespace(steps=1000, lr=1e-3)

    def phase(name):
        audit.phase = name

    with audit:
        for i in range(args.steps):
            audit.on = i == args.steps - 1
            audit.reset()
            phase("lr")
            for gr in opt.param_groups:  # train_moe: the warm-up's lr, a new value a step
                gr["lr"] = train_moe._lr(i, targs)
            phase("batch")
            ids, labels = corpus.batch_at(i)
            phase("forward")
            loss = model(ids, labels)
            phase("backward")
            loss.backward()
            phase("optimizer")
            opt.step()
            phase("zero_grad")
            opt.zero_grad(set_to_none=True)
            phase("loss")
            loss.detach()
        audit.on = False
    print(f"step_host_audit: model {'TINY' if args.tiny else os.path.basename(args.config)} "
          f"layers {cfg.layers} hidden {cfg.hidden} experts {cfg.experts}, batch {args.batch} x "
          f"{args.seq}, FP8 mode, head {args.head}{' fp8' if args.fp8_head else ''}; step "
          f"{args.steps} of {args.steps} (meta device: the GPU path, traced on the CPU)\n")
    totals = report(audit, args.top)
    print("\nsummary: " + ", ".join(f"{k} {v}" for k, v in totals.items()))
    return totals


if __name__ == "__main__":
    main()
