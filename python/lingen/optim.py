"""Optimisers on lingen's kernels (issue 35): ``lingen.optim.AdamW``.

    opt = lingen.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    loss.backward(); opt.step(); opt.zero_grad()

A ``torch.optim.Optimizer`` with torch.optim.AdamW's update (decoupled weight
decay, bias correction; amsgrad and maximize are refused) and its
``state_dict`` layout (per parameter ``step``, ``exp_avg``, ``exp_avg_sq``;
the param groups' keys are torch's), so a checkpoint of one loads into the
other (fp32 moments). On CUDA, the fp32 and bf16 parameters of a group are
updated by one launch of the generated ``adamw`` kernel per (device,
parameter dtype, gradient dtype) (a bf16 parameter: updated in fp32 and
rounded to nearest even once, as torch's fused AdamW does):
a device table of chunks (p, g, m, v, count) is built once per set of
parameters and moments (a pinned, asynchronous copy) and kept; gradients
made anew by each backward (zero_grad(set_to_none=True)) only have the
table's gradient column rewritten on the device from a pinned copy of
their addresses (no table built on the host a step); the step count and the
learning rate live in device memory, so ``step()`` never synchronises with
the host and can be captured in a CUDA graph (the parameters of one launch
share one ``step`` tensor). Elsewhere (CPU tensors, or parameters that are
neither fp32 nor bf16) the same math runs in torch, operation for operation
torch.optim.AdamW's single-tensor form, so CPU tests check it against torch.

``moments="bf16"`` keeps exp_avg and exp_avg_sq in bf16 (rounded to nearest
even after each update; DeepSeek-V3's recipe): 18-20 bytes a parameter a
step instead of 28.

``fp8_weights=True`` (issue 35 item 2): the weights lingen.nn quantises at
each forward (Fp8Linear's, the FP8 MoE's experts: marked by
lingen.nn._k.mark_fp8) are stepped by the generated ``adamw_fp8`` kernel,
one launch a weight, which writes in the same pass the weight's FP8 copies
(e4m3 in 128 x 128 tiles with their scales, and the transposed copy: the
bytes fp8_quant_weight gives for the new weight) into buffers kept on the
parameter; the next forward takes them instead of quantising
(lingen.nn._k.quant_weight), as long as the weight has not changed since
(its ``_version`` and storage: a weight changed in place by torch, e.g. a
checkpoint load, is quantised again; a write through ``.data`` is not seen).
The first step's forward has no copies yet. On the CPU the same happens in
torch (the copies from lingen.nn's CPU quantiser). The optimiser's state
and state_dict are torch's either way. Expert weights [E, N, K] get their
transposed copies in the grouped GEMMs' per-expert layout straight from the
kernel (spec key ``expert_rows``: qt [E, K, N], st [E, K/128, N/128]).

Memory (docs/python.md): the copies take ~2 bytes a parameter (q and qt,
1 B each, plus 8 B of scales a 128 x 128 tile). By default they are
buffers kept on the parameter and rewritten in place (a captured CUDA graph
replays into them), so they stay for the whole step, on top of the
gradients at the optimiser step. ``release_grads=True`` (with
``fp8_weights``; for loops that call ``zero_grad(set_to_none=True)`` after
``step()``, not for CUDA graphs): each FP8 weight's gradient is set to None
right after its launch, the copies are new tensors (taking the freed
gradient's memory) that the next forward takes off the parameter, so they
are freed as that forward's own quantised copies would be (q after the
layer's forward, qt after its backward); a second forward before the next
step quantises the weight itself. ``transposed_in_backward=True`` (with
``release_grads``): the forward is handed q and s only and the backward
quantises the transposed copy again from the weight (unchanged since the
step), one layer at a time: no weight's qt is held from the forward to its
backward (~1 B a parameter less at the backward's start, the training
step's peak) for one more pass over those weights in the backward.

This module imports torch (``import lingen`` does not import it).
"""
import torch

CHUNK = 8192  # elements a row of the kernel's table at most (gen/families/adamw.c)
_MOMENTS = {"fp32": torch.float32, "bf16": torch.bfloat16}
_GRADS = {torch.float32: "fp32", torch.bfloat16: "bf16"}


def _torch_defaults():
    """The keys (and defaults) of torch.optim.AdamW's param groups in this torch."""
    return dict(torch.optim.AdamW([torch.zeros(1, requires_grad=True)]).defaults)


class AdamW(torch.optim.Optimizer):
    """torch.optim.AdamW on one fused lingen kernel per group and device.

    Arguments as torch.optim.AdamW's (params, lr, betas, eps, weight_decay,
    amsgrad); ``moments`` is ``"fp32"`` (default, torch's layout) or
    ``"bf16"``; ``fp8_weights``: write the FP8 copies of lingen.nn's FP8
    weights in the step; ``release_grads``: with it, those weights'
    gradients set to None after their step and the copies handed to the
    next forward alone; ``transposed_in_backward`` (with release_grads):
    the forward gets q and s only, the backward quantises the transposed
    copy again (module docstring). amsgrad=True and maximize=True
    raise ValueError."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, moments="fp32", fp8_weights=False,
                 release_grads=False, transposed_in_backward=False, **torch_options):
        fn = "lingen.optim.AdamW"
        if amsgrad:
            raise ValueError(f"{fn}: amsgrad=True is not supported (the fused kernel keeps no "
                             "max of the second moment); use torch.optim.AdamW for it")
        if maximize:
            raise ValueError(f"{fn}: maximize=True is not supported; negate the loss instead")
        if release_grads and not fp8_weights:
            raise ValueError(f"{fn}: release_grads=True: only with fp8_weights=True")
        if transposed_in_backward and not release_grads:
            raise ValueError(f"{fn}: transposed_in_backward=True: only with release_grads=True")
        if moments not in _MOMENTS:
            raise ValueError(f"{fn}: moments: found {moments!r}, expected 'fp32' or 'bf16'")
        if not (isinstance(lr, torch.Tensor) or lr >= 0.0):
            raise ValueError(f"{fn}: lr: found {lr!r}, expected >= 0")
        if not 0.0 <= betas[0] < 1.0 or not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"{fn}: betas: found {betas!r}, expected each in [0, 1)")
        if not 0.0 < eps < 1.0:
            raise ValueError(f"{fn}: eps: found {eps!r}, expected in (0, 1)")
        if weight_decay < 0.0:
            raise ValueError(f"{fn}: weight_decay: found {weight_decay!r}, expected >= 0")
        defaults = _torch_defaults()
        unknown = set(torch_options) - set(defaults)
        if unknown:
            raise TypeError(f"{fn}: unexpected arguments {sorted(unknown)}")
        defaults.update(torch_options)
        defaults.update(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        amsgrad=False, maximize=False)
        self.moments = moments
        self.fp8_weights = bool(fp8_weights)
        self.release_grads = bool(release_grads)
        self.transposed_in_backward = bool(transposed_in_backward)
        self._tables = {}   # bucket key -> _Table
        self._captured = []  # tables a CUDA graph captured (kept: the graph reads them)
        self._lrs = {}      # (group index, device) -> [device fp32 tensor, value it holds]
        self._kernels = {}  # spec key -> lingen kernel
        super().__init__(params, defaults)

    # ------------------------------------------------------------ state

    def _state_of(self, p):
        st = self.state[p]
        if not st:
            dev = p.device if _gpu(p) else torch.device("cpu")
            st["step"] = torch.zeros((), dtype=torch.float32, device=dev)
            mdt = _MOMENTS[self.moments]
            st["exp_avg"] = torch.zeros_like(p, dtype=mdt, memory_format=torch.preserve_format)
            st["exp_avg_sq"] = torch.zeros_like(p, dtype=mdt, memory_format=torch.preserve_format)
        return st

    def load_state_dict(self, state_dict):
        """torch's load, then the state as this optimiser keeps it: the step
        count on the parameter's device (CUDA) and the moments in
        ``moments``' dtype."""
        super().load_state_dict(state_dict)
        mdt = _MOMENTS[self.moments]
        for p, st in self.state.items():
            if "step" in st:
                st["step"] = torch.as_tensor(st["step"], dtype=torch.float32).to(
                    p.device if _gpu(p) else "cpu")
            for k in ("exp_avg", "exp_avg_sq"):
                if k in st and st[k].dtype != mdt:
                    st[k] = st[k].to(mdt)
        self._tables.clear()

    @torch.no_grad()
    def refresh_fp8_copies(self):
        """With fp8_weights: write the FP8 copies of the FP8 weights as they
        are now into the tensors the step writes, and hand them to the next
        forward, as a step would. For weights changed outside the optimiser
        (restored from a checkpoint, copied back before capturing a CUDA
        graph): without it the next forward quantises them itself, and a
        graph captured from that forward quantises every weight at every
        replay, beside the step that writes the copies. Does nothing
        without fp8_weights."""
        if not self.fp8_weights:
            return
        k_ = _nn_k()
        for group in self.param_groups:
            for p in group["params"]:
                if not k_.is_fp8(p) or (_gpu(p) and not _fp8_fusable(p)):
                    continue  # (a CUDA weight the kernel does not take: the forward's)
                p.__dict__.pop("_lingen_fp8_copies", None)  # quantised anew, below
                fresh = k_.quant_weight(p)
                if self.release_grads or not _gpu(p):
                    copies = fresh
                else:  # the step's own tensors (a captured graph's)
                    copies = _fp8_buffers(p)
                    for c, f in zip(copies, fresh):
                        c.copy_(f)
                k_.set_weight_copies(p, self._handed(copies), take=self.release_grads)

    # ------------------------------------------------------------- step

    @torch.no_grad()
    def step(self, closure=None):
        """One AdamW step of every parameter with a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for gi, group in enumerate(self.param_groups):
            buckets, fp8s = {}, {}
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("lingen.optim.AdamW: sparse gradients are not supported")
                st = self._state_of(p)
                fused = (_gpu(p) and p.dtype in _GRADS and p.grad.dtype in _GRADS
                         and p.grad.device == p.device and p.is_contiguous()
                         and p.grad.is_contiguous() and st["exp_avg"].is_contiguous()
                         and st["exp_avg_sq"].is_contiguous())
                fp8 = self.fp8_weights and _nn_k().is_fp8(p)
                if fused and fp8 and _fp8_fusable(p):
                    fp8s.setdefault(p.device, []).append((p, st))
                elif fused:
                    buckets.setdefault((p.device, p.dtype, p.grad.dtype), []).append((p, st))
                    # the kernel writes p unseen by its _version: FP8 copies made stale
                    p.__dict__.pop("_lingen_fp8_copies", None)
                else:
                    _torch_update(p, p.grad, st, group)
                    if fp8 and not _gpu(p):  # the copies of the new weight, in torch
                        _nn_k().set_weight_copies(p, self._handed(_nn_k().quant_weight(p)),
                                                  take=self.release_grads)
                        if self.release_grads:
                            p.grad = None
                    else:  # (a CUDA weight the kernel does not take: the forward's)
                        p.__dict__.pop("_lingen_fp8_copies", None)
            for (dev, pdt, gdt), items in buckets.items():
                self._fused(gi, group, dev, pdt, gdt, items)
            for dev, items in fp8s.items():
                self._fused_fp8(gi, group, dev, items)
        return loss

    def _handed(self, copies):
        """The copies the next forward gets: all four, or q and s only
        (transposed_in_backward: the backward quantises the transposed
        copy again; the kernel's qt, st are dropped)."""
        return copies[:2] + (None, None) if self.transposed_in_backward else copies

    def _lr(self, gi, group, dev):
        lr = group["lr"]
        if isinstance(lr, torch.Tensor):
            if lr.device == dev and lr.dtype == torch.float32:
                return lr
            return lr.to(device=dev, dtype=torch.float32, non_blocking=True)
        held = self._lrs.get((gi, dev))
        if held is None:
            held = self._lrs[(gi, dev)] = [torch.empty((), dtype=torch.float32, device=dev), None]
        if held[1] != lr:
            held[0].fill_(lr)  # a kernel with lr as its argument: no host sync
            held[1] = lr
        return held[0]

    def _kernel(self, group, pdt, gdt):
        b1, b2 = group["betas"]
        key = (_GRADS[gdt], self.moments, float(b1), float(b2), float(group["eps"]),
               float(group["weight_decay"]), _GRADS[pdt])
        k = self._kernels.get(key)
        if k is None:
            from ._core import Spec, default_context
            spec = {"op": "adamw", "pass": "forward", "dtype": "fp32", "grad": key[0],
                    "moments": key[1], "beta1": key[2], "beta2": key[3], "eps": key[4],
                    "weight_decay": key[5], "param": key[6]}
            k = self._kernels[key] = default_context().kernel(Spec(spec))
        return k

    def _fused(self, gi, group, dev, pdt, gdt, items):
        # One step count for the launch: the first parameter's, shared by all.
        step = items[0][1]["step"]
        for _, st in items:
            st["step"] = step
        # The table is kept per set of (p, m, v) (they live as long as the
        # optimiser); the gradients are new tensors at every backward after
        # zero_grad(set_to_none=True), so only the table's gradient column
        # follows them: when their addresses changed, one pinned copy of the
        # addresses and one gather on the stream, no table built on the host.
        static = tuple((_addr(p), _addr(st["exp_avg"]), _addr(st["exp_avg_sq"]), p.numel())
                       for p, st in items)
        grads = tuple(_addr(p.grad) for p, _ in items)
        key = (dev, pdt, gdt, static)
        capturing = _capturing()
        table = self._tables.get(key)
        if table is None or (table.captured and table.grads != grads):
            msz = 2 if self.moments == "bf16" else 4
            table = _Table(static, grads, dev, pdt.itemsize, gdt.itemsize, msz)
            self._tables[key] = table
            while len(self._tables) > 4 * max(len(self.param_groups), 1):
                self._tables.pop(next(iter(self._tables)))
        elif table.grads != grads:
            table.set_grads(grads)
        if capturing and not table.captured:
            # a graph replays this table: never rewritten in place after this
            table.captured = True
            self._captured.append(table)
        with torch.cuda.device(dev):
            step.add_(1)
            lr = self._lr(gi, group, dev)
            k = self._kernel(group, pdt, gdt)
            stream = torch.cuda.current_stream(dev).cuda_stream
            k.run([table.rows], [table.table.data_ptr(), step.data_ptr(), lr.data_ptr()], stream)

    def _kernel_fp8(self, group, pdt, gdt, hidden, expert_rows):
        b1, b2 = group["betas"]
        key = ("fp8", _GRADS[gdt], self.moments, float(b1), float(b2), float(group["eps"]),
               float(group["weight_decay"]), _GRADS[pdt], int(hidden), int(expert_rows))
        k = self._kernels.get(key)
        if k is None:
            from ._core import Spec, default_context
            spec = {"op": "adamw_fp8", "pass": "forward", "dtype": key[7], "hidden": key[8],
                    "expert_rows": key[9], "quant": {}, "grad": key[1], "moments": key[2],
                    "beta1": key[3], "beta2": key[4], "eps": key[5], "weight_decay": key[6]}
            k = self._kernels[key] = default_context().kernel(Spec(spec))
        return k

    def _fused_fp8(self, gi, group, dev, items):
        """One adamw_fp8 launch a weight (the step count shared by the
        device's FP8 weights of the group, incremented once): the update
        and the weight's FP8 copies, recorded on the parameter (expert
        weights: their transposed copies in the per-expert layout, from the
        kernel); with release_grads the copies are new tensors the next
        forward takes and the gradient is dropped after the launch."""
        k_ = _nn_k()
        step = items[0][1]["step"]
        for _, st in items:
            st["step"] = step
        with torch.cuda.device(dev):
            step.add_(1)
            lr = self._lr(gi, group, dev)
            stream = torch.cuda.current_stream(dev).cuda_stream
            for p, st in items:
                if self.release_grads:  # new tensors (the freed gradients' memory)
                    p.__dict__.pop("_lingen_fp8_buffers", None)
                    copies = _fp8_alloc(p)
                else:
                    copies = _fp8_buffers(p)
                q, s, qt, sct = copies
                k = self._kernel_fp8(group, p.dtype, p.grad.dtype, p.shape[-1],
                                     p.shape[1] if p.dim() == 3 else 0)
                k.run([p.numel() // p.shape[-1]],
                      [p.data_ptr(), p.grad.data_ptr(), st["exp_avg"].data_ptr(),
                       st["exp_avg_sq"].data_ptr(), step.data_ptr(), lr.data_ptr(),
                       q.data_ptr(), s.data_ptr(), qt.data_ptr(), sct.data_ptr()], stream)
                k_.set_weight_copies(p, self._handed(copies), take=self.release_grads)
                if self.release_grads:
                    p.grad = None


def _addr(t):
    return t.data_ptr()


def _capturing():
    return torch.cuda.is_current_stream_capturing()


def _gpu(t):
    """Whether t takes the CUDA path (tools/step_host_audit.py traces it on meta)."""
    return t.is_cuda


def _pin(t):
    """t in pinned memory (torch's caching host allocator)."""
    return t.pin_memory()


def _nn_k():
    from .nn import _k
    return _k


def _fp8_fusable(p):
    """A weight adamw_fp8 steps: fp32 or bf16, [N, K] or [E, N, K] with K a
    multiple of 128 (and N, for experts: a tile within one expert), the
    gradient of the weight's device and contiguous (checked by the caller)."""
    if p.dim() not in (2, 3) or p.shape[-1] % 128 or p.shape[-1] > 65536 or p.numel() == 0:
        return False
    return p.dim() == 2 or p.shape[1] % 128 == 0


def _fp8_alloc(p):
    """New tensors for the kernel's outputs for p, as quant_weight gives
    the copies: [N, K]: q [N, K], s [cdiv(N, 128), K/128], qt [K, N], st
    [K/128, cdiv(N, 128)]; expert weights [E, N, K] (N a multiple of 128):
    q [E, N, K], s [E, N/128, K/128] and the per-expert transposed copies
    qt [E, K, N], st [E, K/128, N/128] (the kernel with expert_rows N
    writes them so: the bytes of fp8_quant_weight's flat copy rearranged
    by lingen._torchref.experts_transposed). Each element 1 B of q and 1 B
    of qt, each 128 x 128 tile two fp32 scales."""
    from . import _torchref as Q
    k = p.shape[-1]
    r = p.numel() // k
    rb = -(-r // 128)
    e4 = dict(dtype=Q.E4M3, device=p.device)
    f4 = dict(dtype=torch.float32, device=p.device)
    if p.dim() == 2:
        return (torch.empty(r, k, **e4), torch.empty(rb, k // 128, **f4),
                torch.empty(k, r, **e4), torch.empty(k // 128, rb, **f4))
    e, n, _ = p.shape
    return (torch.empty(e, n, k, **e4), torch.empty(e, n // 128, k // 128, **f4),
            torch.empty(e, k, n, **e4), torch.empty(e, k // 128, n // 128, **f4))


def _fp8_buffers(p):
    """_fp8_alloc's tensors kept on p and written in place at every step
    (so a captured graph replays into them); new ones when p's storage or
    shape changed."""
    b = getattr(p, "_lingen_fp8_buffers", None)
    key = (p.data_ptr(), tuple(p.shape), p.device)
    if b is not None and b[0] == key:
        return b[1]
    copies = _fp8_alloc(p)
    p._lingen_fp8_buffers = (key, copies)
    return copies


class _Table:
    """The adamw kernel's table for tensors (p, m, v addresses, numel) and
    gradient addresses: rows of int64 (p, g, m, v, count, 0), every tensor
    cut into CHUNK elements from its start (p of psz bytes an element, g of
    gsz, m and v of msz); built on the host and copied to dev from pinned
    memory without waiting, once. New gradient addresses (set_grads): their
    N addresses copied (pinned, without waiting) into a device vector and
    the gradient column rewritten on the device (gather + add), in stream
    order after the launches that read the old column; torch's caching
    host allocator reuses the pinned block once its copy has run (its CUDA
    event), except the blocks of copies made while a CUDA graph captures
    (the table holds them: every replay copies from them again). A table a
    CUDA graph captured (captured) is never rewritten."""

    def __init__(self, static, grads, dev, psz, gsz, msz):
        rows, which, offs = [], [], []
        for i, ((p, m, v, n), g) in enumerate(zip(static, grads)):
            if n == 0:
                continue
            r = torch.arange(0, n, CHUNK, dtype=torch.int64)
            t = torch.zeros((len(r), 6), dtype=torch.int64)
            t[:, 0] = p + psz * r
            t[:, 1] = g + gsz * r
            t[:, 2] = m + msz * r
            t[:, 3] = v + msz * r
            t[:, 4] = torch.clamp(n - r, max=CHUNK)
            rows.append(t)
            which.append(torch.full((len(r),), i, dtype=torch.int64))
            offs.append(gsz * r)
        self.grads, self.captured = grads, False
        self.rows = sum(len(t) for t in rows)
        if not rows:
            self.table = torch.zeros((1, 6), dtype=torch.int64, device=dev)
            return
        # the pinned sources are held as long as the table: a CUDA graph that
        # captured these copies reads them again at every replay
        self._host = [_pin(torch.cat(rows)), _pin(torch.cat(which)), _pin(torch.cat(offs))]
        self.table, self._which, self._offs = (h.to(dev, non_blocking=True) for h in self._host)
        self._gdev = torch.empty(len(static), dtype=torch.int64, device=dev)

    def set_grads(self, grads):
        if self.rows:
            src = _pin(torch.tensor(grads, dtype=torch.int64))
            if self.table.is_cuda and _capturing():  # replayed: its source kept (see __init__)
                self._host.append(src)
            self._gdev.copy_(src, non_blocking=True)
            torch.add(self._gdev.index_select(0, self._which), self._offs,
                      out=self.table.select(1, 1))
        self.grads = grads


def _torch_update(p, g, st, group):
    """torch.optim.AdamW's single-tensor update of one parameter, in torch
    (the CPU path and the fallback for non-fp32 parameters)."""
    b1, b2 = group["betas"]
    lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]
    if isinstance(lr, torch.Tensor):
        lr = lr.item()
    st["step"] += 1
    t = st["step"].item()
    m, v = st["exp_avg"], st["exp_avg_sq"]
    low = m.dtype != p.dtype
    mf, vf = (m.to(p.dtype), v.to(p.dtype)) if low else (m, v)
    g = g.to(p.dtype)
    p.mul_(1 - lr * wd)
    mf.lerp_(g, 1 - b1)
    vf.mul_(b2).addcmul_(g, g, value=1 - b2)
    bc1 = 1 - b1 ** t
    bc2 = 1 - b2 ** t
    denom = (vf.sqrt() / (bc2 ** 0.5)).add_(eps)
    p.addcdiv_(mf, denom, value=-(lr / bc1))
    if low:
        m.copy_(mf)
        v.copy_(vf)


__all__ = ["AdamW", "CHUNK"]
