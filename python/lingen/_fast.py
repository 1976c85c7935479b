"""The fast launch of lingen._core.call for torch CUDA tensors on torch's
current stream: a plan's launch with everything that does not depend on the
tensors' addresses resolved once (see Fast), so that a repeated call costs
its key, a few checks per tensor, the output allocations and the launch."""
import sys

from . import _cuda
from ._arrays import torch_elems
from ._core import OPT_OUT, OUT, SKIP_OUT, WORKSPACE, _options_key


class Fast:
    """A plan's launch for torch CUDA tensors, everything that does not
    depend on the tensors' addresses resolved once: per argument in
    declared order a step (name, what to do, the output's shape and element
    type, the alignment), the kernel, the run-time sizes as their ctypes
    array. Made after a full call of the plan succeeded; a later call with
    the same key checks per tensor only what the key does not hold (device,
    contiguity, alignment) and hands any doubt back to the full path, which
    raises its own error."""
    __slots__ = ("kernel", "steps", "sizes", "nsizes", "ptr_t", "nptrs", "results")

    # steps: a given tensor's pointer; an output to allocate; a workspace; a
    # 0 pointer (an argument left out), its result None where it is an output
    GIVEN, ALLOC, WORK, NONE = range(4)

    def __init__(self, plan, kernel, given, skip):
        steps, results = [], []
        for name, kind, shape, elem, a in plan.args:
            output = kind in (OUT, OPT_OUT, SKIP_OUT)
            if name in given:
                steps.append((self.GIVEN, name, a.align))
            elif kind == OUT or (kind == OPT_OUT and name not in skip):
                steps.append((self.ALLOC, name, shape, elem))
            elif kind == WORKSPACE and kernel.workspace_size:
                steps.append((self.WORK, name, (kernel.workspace_size,), "uint8"))
            else:
                steps.append((self.NONE, name if output else None))
            if output:
                results.append(name)
        self.kernel, self.steps, self.results = kernel, tuple(steps), tuple(results)
        self.nsizes, self.nptrs = len(plan.sizes), len(steps)
        self.sizes = kernel._size_t(*plan.sizes)
        self.ptr_t = kernel._ptr_t

    def launch(self, arrays, device):
        """Allocate the outputs on device, launch on torch's current stream
        there; the results {output name: tensor or None}. The tensors were
        checked (_fast_device)."""
        allocate = _torch_alloc(device)
        results = dict.fromkeys(self.results)
        ptrs, keep = [], None
        for step in self.steps:
            what = step[0]
            if what == 0:  # GIVEN
                t = arrays[step[1]]
                ptrs.append(t.data_ptr())
                if step[1] in results:
                    results[step[1]] = t
            elif what == 1:  # ALLOC
                t = results[step[1]] = allocate(step[2], step[3])
                ptrs.append(t.data_ptr())
            elif what == 2:  # WORK: alive through the launch
                keep = allocate(step[2], step[3])
                ptrs.append(keep.data_ptr())
            else:
                ptrs.append(0)
        stream = _raw_stream(device)
        prev = _cuda.enter_device(device)
        try:
            self.kernel.launch(self.sizes, self.nsizes, self.ptr_t(*ptrs), self.nptrs, stream)
        finally:
            _cuda.leave_device(prev)
        del keep
        return results


def call(ctx, op, pass_, arrays, options, skip):
    """(results, key) of a call of torch tensors whose key has a fast
    launch that its tensors pass; (None, key) when the full path must run
    (key None: not every array is a torch tensor)."""
    tkey = torch_key(arrays)
    if tkey is None:
        return None, None
    key = (op, pass_, _options_key(options) if options else (), tuple(skip), tkey)
    fast = ctx._fast.get(key)
    if fast is not None and ctx._p:
        device = fast_device(fast, arrays)
        if device is not None:
            return fast.launch(arrays, device), key
    return None, key


def fast_device(fast, arrays):
    """The CUDA device of the given tensors when every one passes what a
    cached plan still checks per call (a CUDA tensor, all on one device,
    contiguous, its address aligned as the argument asks); None otherwise
    (the full path then finds the error)."""
    device = None
    for step in fast.steps:
        if step[0] == 0:
            t = arrays[step[1]]
            d = t.get_device()
            if d < 0 or (device is not None and d != device) or not t.is_cuda \
                    or not t.is_contiguous() or t.data_ptr() % step[2]:
                return None
            device = d
    return 0 if device is None else device


_torch_allocs = {}


def _torch_alloc(device):
    f = _torch_allocs.get(device)
    if f is None:
        torch = sys.modules["torch"]
        by_elem = torch_elems()[1]
        dev = torch.device("cuda", device)
        empty = torch.empty
        f = _torch_allocs[device] = lambda shape, elem: empty(shape, dtype=by_elem[elem],
                                                               device=dev)
    return f


_raw = []


def _raw_stream(device):
    """torch's current stream on device as a handle (no Stream object)."""
    if not _raw:
        torch = sys.modules["torch"]
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        _raw.append(raw if raw is not None else
                    (lambda d: torch.cuda.current_stream(d).cuda_stream))
    return _raw[0](device)


def torch_key(arrays):
    """The shapes and dtypes of arrays {name: tensor or None} when every
    array given is a torch tensor (the fast key's part); None otherwise."""
    tensor = _tensor_type()
    if tensor is None:
        return None
    key = []
    for name, t in arrays.items():
        if t is not None:
            if not isinstance(t, tensor):
                return None
            key.append((name, t.shape, t.dtype))
    return tuple(key)


def _tensor_type():
    torch = sys.modules.get("torch")
    return torch.Tensor if torch is not None else None


def remember(ctx, key, plan, kernel, views, skip):
    """Keep the plan's fast launch under the torch tensors' key (a call
    that succeeded through the full path: its arguments are good)."""
    if key in ctx._fast or any(v.kind != "torch" or v.device is None for v in views.values()):
        return
    if len(ctx._fast) >= 4096:
        ctx._fast.clear()
    ctx._fast.setdefault(key, Fast(plan, kernel, set(views), skip))
