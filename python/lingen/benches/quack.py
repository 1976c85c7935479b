"""QuACK (quack-kernels, CuTe DSL) as a peer of `python -m lingen.bench`:
RMSNorm forward and backward and softmax cross entropy (forward, backward,
fused forward + backward), the ops QuACK has that lingen has too. Rows
are not cases of their own: wrap() adds a "quack" implementation to the
cases of the other modules whose kernel QuACK has, reading the inputs
from the case's Setup.tensors (their order is each case module's own).
Without QuACK importable (quack-kernels 0.6.5, nvidia-cutlass-dsl 4.8.1
with -libs-base and -libs-cu13, apache-tvm-ffi, torch-c-dlpack-ext:
tools/device_quack.sh installs them on the GPU machine) the row says
"not installed", with the import error."""
import dataclasses

_loaded = None  # (namespace, version) or (None, why), once a process


def load():
    """(QuACK's functions by name, its version), or (None, why not)."""
    global _loaded
    if _loaded is None:
        try:
            import quack
            from quack.cross_entropy import cross_entropy_bwd, cross_entropy_fwd
            from quack.rmsnorm import rmsnorm_bwd, rmsnorm_fwd
            _loaded = (dict(rmsnorm_fwd=rmsnorm_fwd, rmsnorm_bwd=rmsnorm_bwd,
                            cross_entropy_fwd=cross_entropy_fwd,
                            cross_entropy_bwd=cross_entropy_bwd),
                       getattr(quack, "__version__", "installed"))
        except Exception as e:  # absent, or its CUDA libraries missing
            _loaded = (None, f"not installed ({type(e).__name__}: {e})"[:200])
    return _loaded


def version():
    """QuACK's version when it imports, else None (the run's header)."""
    fns, v = load()
    return v if fns else None


# kernel row -> fn(torch, q, tensors) -> callable returning what eager returns
def _rms_fwd(torch, q, ts):
    x, w = ts[:2]
    return lambda: q["rmsnorm_fwd"](x, w, eps=1e-6, store_rstd=True)[::2]  # (out, rstd)


def _rms_bwd(torch, q, ts):
    dy, x, w, rms = ts
    return lambda: q["rmsnorm_bwd"](x, w, dy, rms)[:2]  # (dx, dw)


def _ce_fwd(torch, q, ts):
    x, y = ts[:2]
    return lambda: (q["cross_entropy_fwd"](x, y), None, None)  # loss; S, m not kept


def _ce_bwd(torch, q, ts):
    x, y, s, m, g = ts
    lse = torch.log(s) + m  # QuACK's backward takes the log-sum-exp
    return lambda: q["cross_entropy_bwd"](x, y, g, lse)


def _ce_fused(torch, q, ts):
    x, y = ts[:2]
    # the fused row's norm keeps (loss, gradient): the gradient for dloss 1
    return lambda: q["cross_entropy_fwd"](x, y, return_dx=True)


PEERS = {"rmsnorm fwd": _rms_fwd, "rmsnorm bwd": _rms_bwd, "cross_entropy fwd": _ce_fwd,
         "cross_entropy bwd": _ce_bwd, "cross_entropy fused": _ce_fused}


def _absent(why):
    def fn():
        raise RuntimeError(why)
    return fn


def wrap(case):
    """case with a "quack" implementation added when QuACK has its kernel."""
    peer = PEERS.get(case.kernel)
    if peer is None:
        return case

    def make(env, inner=case.make):
        setup = inner(env)
        fns, why = load()
        setup.impls["quack"] = peer(env.torch, fns, setup.tensors) if fns else _absent(why)
        return setup
    return dataclasses.replace(case, make=make)


def cases(quick):
    """No rows of its own (wrap() adds QuACK to the others' rows)."""
    return []
