"""lingen for PyTorch: torch.library custom ops for every family pass,
autograd for forward/backward pairs, and nn.Modules. Import it explicitly
(`import lingen.torch`); `import lingen` alone never imports torch.

Ops (torch.ops.lingen.<op>_<pass>) are registered from the family
declarations: the declared inputs are the op's tensors, the spec's scalar
keys (eps, quant.round_scale -> quant_round_scale, ...) its keyword
arguments with the declared defaults, the declared outputs its results. An
output the options leave out (the columnwise copy with
quant_output="rowwise") comes back as an empty tensor from the op and as
None from the Python functions below. The ops have fake (meta) kernels from
the same declarations, so torch.compile traces them without graph breaks,
and they launch on torch's current stream, so CUDA graphs capture them
(after a first eager call has compiled the kernel).

    import lingen.torch as lt
    y = lt.rms_norm(x, w)                 # autograd: dx and dw from lingen
    norm = lt.RMSNorm(2048).cuda()         # nn.Module
    q, s, rms, qt, st = lt.rms_norm_quant(x, w)
"""
import json

import torch

from . import _core, _families
from ._arrays import torch_elems
from .ops import _multiple, _routing_arg, _routing_kind, _uses

NAMESPACE = "lingen"
_SCALAR = {"number": "float", "bool": "bool", "enum": "str", "int": "int"}


def _scalar_keys(fam, decl):
    """The spec keys an op takes as keyword arguments: every scalar key
    that is not a tile, nor a shape the pass's inputs show as a dimension of
    their own (qk_norm_rope's q_heads and kv_heads, in qkv's last dimension
    only as an expression, are keyword arguments of its forward). Inputs
    some specs leave unused (moe_row_map's mask or top-k) bind nothing."""
    skip = _maybe_unused(fam, decl)
    bound = {_families.bare_name(d) for a in decl.args if a.is_input and a.name not in skip
             for d in a.dims}
    return [k for k in fam.keys
            if k.type in _SCALAR and not k.tile and not (k.shape and k.path in bound)]


def _maybe_unused(fam, decl):
    """The inputs of a pass that some spec does not use (the family's
    uses() clears them: moe_permute's x_scale for bf16, moe_row_map's
    routing arrays but one): probed over the dtypes and the values of the
    enum and bool keys (at most 64 combinations) at the smallest shape.
    They are optional tensors of the torch op."""
    key = (fam.op, decl.name)
    got = _unused_cache.get(key)
    if got is not None:
        return got
    combos = [{"dtype": d} for d in fam.dtypes]
    for k in fam.keys:
        if k.tile or k.type not in ("enum", "bool"):
            continue
        values = list(k.values) if k.type == "enum" else [False, True]
        if len(combos) * len(values) > 64:
            break
        combos = [dict(c, **{k.path: v}) for c in combos for v in values]
    names = set()
    for c in combos:
        spec = {"op": fam.op, "pass": decl.name, "dtype": c.pop("dtype")}
        for k in fam.keys:
            if k.shape:
                _core._set_path(spec, k.path, k.min)
        for path, v in c.items():
            _core._set_path(spec, path, v)
        try:
            sp = _core.Spec(spec)
        except _core.SpecError:
            continue
        names |= {a.name for a in decl.args if a.role == "in" and not sp.arg_used(a.index)}
    got = _unused_cache[key] = frozenset(names)
    return got


_unused_cache = {}


def _param(path):
    return path.replace(".", "_")


def _default(k):
    if k.default is None:
        return ""
    if k.type == "bool":
        return "=True" if k.default else "=False"
    if k.type == "enum":
        return f'="{k.default}"'
    if k.type == "number":  # 0, not 0.0, in the declaration: a float literal for torch
        return f"={float(k.default)!r}"
    return f"={k.default!r}"


def schema(fam, decl):
    """The torch schema of one family pass, from its declaration."""
    inputs = [a for a in decl.args if a.is_input]
    maybe = _maybe_unused(fam, decl)
    opt = [a.role == "optional_in" or a.name in maybe for a in inputs]
    # an optional input defaults to None when every later input is optional too
    ins = [f"Tensor{'?' if opt[i] else ''} {a.name}" + ("=None" if all(opt[i:]) else "")
           for i, a in enumerate(inputs)]
    keys = _scalar_keys(fam, decl)
    if keys:
        ins.append("*")
    ins += [f"{_SCALAR[k.type]} {_param(k.path)}{_default(k)}" for k in keys]
    outs = [a for a in decl.args if a.is_output]
    ret = "Tensor" if len(outs) == 1 else "(" + ", ".join("Tensor" for _ in outs) + ")"
    return "(" + ", ".join(ins) + ") -> " + ret


def _options(fam, decl, kwargs):
    """The spec's options from the op's keyword arguments (the declared
    defaults where torch passes none)."""
    opts = {}
    for k in _scalar_keys(fam, decl):
        v = kwargs.get(_param(k.path), k.default)
        if v is not None:
            opts[k.path] = v
    return opts


_specs = {}


def _spec_for(op, pass_, shapes, opts, dtype=None):
    """The spec of a call from the input shapes (ints or SymInts), options
    and dtype (None: the family's first), and the environment its declared
    shapes evaluate in."""
    fam = _families.families()[op]
    decl = fam.passes[pass_]
    env = _families.bind(fam, decl, shapes, opts)[0]
    spec = {"op": op, "pass": pass_, "dtype": dtype or fam.dtypes[0]}
    for k in fam.keys:
        if k.shape and k.path in env:
            _core._set_path(spec, k.path, int(env[k.path]))  # shape keys are static
    for key, val in opts.items():
        _core._set_path(spec, key, val)
    text = repr(sorted(spec.items()))
    s = _specs.get(text)
    if s is None:
        s = _specs.setdefault(text, _core.Spec(spec))
    canon = json.loads(s.canonical)

    def flat(d, prefix=""):
        for key, v in d.items():
            k = fam.key(f"{prefix}{key}")
            if isinstance(v, dict):
                flat(v, f"{prefix}{key}.")
            elif isinstance(v, (bool, int, float)):  # bools as 0 / 1
                env.setdefault(f"{prefix}{key}", int(v) if isinstance(v, bool) else v)
            elif k is not None and k.type == "enum":  # an enum as its value's index
                env.setdefault(f"{prefix}{key}", list(k.values).index(v))
    flat(canon)
    return s, env


def _dtype(elem, like):
    return like.dtype if elem == "dtype" else torch_elems()[1][elem]


def _register(op, pass_, fam, decl):
    name = f"{NAMESPACE}::{op}_{pass_}"
    ins = [a for a in decl.args if a.is_input]
    outs = [a for a in decl.args if a.is_output]
    fn = f"torch.ops.lingen.{op}_{pass_}"

    options = {}

    def impl(*args, **kwargs):
        tensors = args[:len(ins)]
        like = next(t for t in tensors if t is not None)
        arrays = {a.name: (t.contiguous() if t is not None else None)
                  for a, t in zip(ins, tensors)}
        key = tuple(kwargs.items())
        opts = options.get(key)
        if opts is None:
            opts = options[key] = _options(fam, decl, kwargs)
        r = _core.call(fn, op, pass_, arrays, opts)
        res = tuple(r[a.name] if r[a.name] is not None
                    else torch.empty(0, dtype=_dtype(a.elem, like), device=like.device)
                    for a in outs)
        return res if len(res) > 1 else res[0]

    def fake(*args, **kwargs):
        tensors = args[:len(ins)]
        like = next(t for t in tensors if t is not None)
        shapes = {a.name: tuple(t.shape) for a, t in zip(ins, tensors) if t is not None}
        dtype = next((torch_elems()[0].get(t.dtype) for a, t in zip(ins, tensors)
                      if a.elem == "dtype" and t is not None), None)
        s, env = _spec_for(op, pass_, shapes, _options(fam, decl, kwargs),
                           dtype if dtype in fam.dtypes else None)
        res = []
        for a in outs:
            if s.arg_used(a.index):
                shape = _families.eval_shape(a, env)
            else:
                shape = (0,)
            res.append(like.new_empty(shape, dtype=_dtype(a.elem, like)))
        return tuple(res) if len(res) > 1 else res[0]

    impl.__name__ = fake.__name__ = f"{op}_{pass_}"
    custom = torch.library.custom_op(name, impl, mutates_args=(), schema=schema(fam, decl))
    custom.register_fake(fake)
    _eager[f"{op}_{pass_}"] = impl
    return custom


def _register_list(op, pass_, fam, decl):
    """A family over a tensor list (grad_norm, count_zero): the op takes
    Tensor[] and the scalar keys but "mixed" (which the list's element
    types decide) and returns the 0-d result (lingen.lists)."""
    from . import lists  # imports nothing of torch's
    name = f"{NAMESPACE}::{op}_{pass_}"
    out = next(a for a in decl.args if a.is_output)
    keys = [k for k in _scalar_keys(fam, decl) if k.path != "mixed"]
    params = [f"{_SCALAR[k.type]} {_param(k.path)}{_default(k)}" for k in keys]
    schema_ = "(Tensor[] tensors" + (", *, " + ", ".join(params) if params else "") + ") -> Tensor"
    fn = f"torch.ops.lingen.{op}_{pass_}"

    def impl(tensors, **kwargs):
        opts = {k.path: kwargs.get(_param(k.path), k.default) for k in keys}
        return lists._launch(fn, op, tensors, opts, out.elem, None, None, None)

    def fake(tensors, **kwargs):
        like = tensors[0] if tensors else torch.empty(0, device="meta")
        return like.new_empty((), dtype=torch_elems()[1][out.elem])

    impl.__name__ = fake.__name__ = f"{op}_{pass_}"
    custom = torch.library.custom_op(name, impl, mutates_args=(), schema=schema_)
    custom.register_fake(fake)
    _eager[f"{op}_{pass_}"] = impl
    return custom


ops = {}
_eager = {}
for _op, _fam in _families.families().items():
    for _pass, _decl in _fam.passes.items():
        _reg = _register_list if any(a.role == "list" for a in _decl.args) else _register
        ops[f"{_op}_{_pass}"] = _reg(_op, _pass, _fam, _decl)

_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)


def _run(name, *args, **kwargs):
    """torch.ops.lingen.<name> where torch traces (torch.compile, export);
    in eager mode the op's implementation directly, without the cost of
    torch's dispatcher (the same code, the same stream, CUDA graphs too)."""
    if _compiling is None or _compiling():
        return getattr(torch.ops.lingen, name)(*args, **kwargs)
    return _eager[name](*args, **kwargs)


def _constant(fn):
    c = getattr(getattr(torch, "compiler", None), "assume_constant_result", None)
    return c(fn) if c else fn


@_constant
def _used(op, pass_, options):
    """Which outputs a call produces, for options ((path, value), ...)
    (ops._uses, a constant to torch.compile)."""
    args = _families.families()[op].passes[pass_].args
    return tuple(u for a, u in zip(args, _uses(op, pass_, options)) if a.is_output)


def _flat(x):
    return x.reshape(-1, x.shape[-1])


# ------------------------------------------------------------ RMSNorm

class RMSNormFunction(torch.autograd.Function):
    """y = x * rsqrt(mean(x^2) + eps) * w over the last dimension, with
    lingen's forward and backward (dw in fp32, deterministic, cast to w's
    dtype for autograd). As linghe's facade RMSNormFunction."""

    @staticmethod
    def forward(ctx, x, weight, eps=1e-6):
        x2 = _flat(x)
        y, rms = _run("rmsnorm_forward", x2, weight, eps=eps)
        ctx.save_for_backward(x2, weight, rms)
        ctx.eps = eps
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        x2, weight, rms = ctx.saved_tensors
        dx, dw = _run("rmsnorm_backward", _flat(dy), x2, weight, rms, eps=ctx.eps)
        dw = dw.to(weight.dtype) if ctx.needs_input_grad[1] else None
        return dx.view(dy.shape), dw, None


def rms_norm(x, weight, eps=1e-6):
    """RMSNorm over the last dimension of x (bf16), differentiable."""
    return RMSNormFunction.apply(x, weight, eps)


class RMSNorm(torch.nn.Module):
    """torch.nn.RMSNorm over the last dimension with lingen's kernels; the
    weight is bf16 (the kernels' dtype)."""

    def __init__(self, hidden_size, eps=1e-6, device=None, dtype=torch.bfloat16):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self):
        return f"{self.weight.shape[0]}, eps={self.eps}"


# --------------------------------------------------- FP8 quantisation

def _none_unused(res, used):
    return tuple(r if u else None for r, u in zip(res, used))


def rms_norm_quant(x, weight, eps=1e-6, round_scale=True, output="both"):
    """RMSNorm + blockwise FP8 quantisation of x [..., hidden] (bf16), as
    lingen.rmsnorm_quant: (q, s, rms, qt, st), the copies output does not
    ask for None. Leading dimensions are flattened into tokens; q keeps x's
    shape, qt is [hidden, tokens]. Not differentiable (its backward is the
    RMSNorm backward: lingen.torch.rms_norm_backward; rms_norm_quant_autograd
    is the differentiable form)."""
    res = _run("rmsnorm_quant_forward", _flat(x), weight, eps=eps,
                                                 quant_round_scale=round_scale,
                                                 quant_output=output)
    q, s, rms, qt, st = _none_unused(res, _used("rmsnorm_quant", "forward", (("quant.output", output),)))
    return (q.view(x.shape) if q is not None else None), s, rms, qt, st


class RMSNormQuantFunction(torch.autograd.Function):
    """RMSNorm + blockwise FP8 of x [..., hidden] (bf16), K1's forward and
    backward pair: the forward is lingen.rmsnorm_quant, the backward the
    RMSNorm backward (lingen.rmsnorm_backward with the forward's rms; dw in
    fp32, deterministic, cast to the weight's dtype). Returns (y, q, s, qt,
    st): y is a gradient carrier (bf16 [..., hidden], no memory, values not
    the normalised x) through which the consumer of the FP8 copies gives
    dL/dy, as SwiGLUQuantFunction's; the copies output does not ask for
    None."""

    @staticmethod
    def forward(ctx, x, weight, eps=1e-6, round_scale=True, output="both"):
        x2 = _flat(x)
        res = _run("rmsnorm_quant_forward", x2, weight, eps=eps, quant_round_scale=round_scale,
                   quant_output=output)
        q, s, rms, qt, st = _none_unused(res, _used("rmsnorm_quant", "forward",
                                                    (("quant.output", output),)))
        copies = (q.view(x.shape) if q is not None else None, s, qt, st)
        ctx.mark_non_differentiable(*(c for c in copies if c is not None))
        ctx.save_for_backward(x2, weight, rms)
        ctx.opts = (eps, x.shape)
        return (_grad_carrier(x, x.shape[-1]), *copies)

    @staticmethod
    def backward(ctx, gy, *_):
        x2, weight, rms = ctx.saved_tensors
        eps, shape = ctx.opts
        dx, dw = _run("rmsnorm_backward", _flat(gy).contiguous(), x2, weight, rms, eps=eps)
        dw = dw.to(weight.dtype) if ctx.needs_input_grad[1] else None
        return dx.view(shape), dw, None, None, None


def rms_norm_quant_autograd(x, weight, eps=1e-6, round_scale=True, output="both"):
    """RMSNorm + blockwise FP8 of x [..., hidden], differentiable in x and
    weight: (y, q, s, qt, st) as RMSNormQuantFunction (y a gradient
    carrier; rms_norm_quant is the same forward without autograd)."""
    return RMSNormQuantFunction.apply(x, weight, eps, round_scale, output)


def rms_norm_forward(x, weight, eps=1e-6):
    """(y, rms): RMSNorm forward of x [..., hidden] without autograd."""
    y, rms = _run("rmsnorm_forward", _flat(x), weight, eps=eps)
    return y.view(x.shape), rms


def rms_norm_backward(dy, x, weight, eps=1e-6, rms=None):
    """(dx, dw fp32): RMSNorm backward, as linghe's triton_rms_norm_backward."""
    dx, dw = _run("rmsnorm_backward", _flat(dy), _flat(x), weight, rms, eps=eps)
    return dx.view(dy.shape), dw


def fp8_quant(x, round_scale=True, output="both"):
    """Blockwise FP8 quantisation of x [..., hidden] (bf16): (q, s, qt, st)
    as lingen.fp8_quant, the copies output does not ask for None."""
    res = _run("fp8_quant_forward", _flat(x), quant_round_scale=round_scale,
                                             quant_output=output)
    q, s, qt, st = _none_unused(res, _used("fp8_quant", "forward", (("quant.output", output),)))
    return (q.view(x.shape) if q is not None else None), s, qt, st


def fp8_quant_batched(x, counts, round_scale=True, output="both"):
    """Per-expert blockwise FP8 quantisation of x [tokens, hidden] (bf16,
    tokens grouped by expert) with counts [experts] int32 on the device:
    (q, s, qt, st) as lingen.fp8_quant_batched, the copies output does not
    ask for None."""
    res = _run("fp8_quant_batched_forward", x, counts, quant_round_scale=round_scale,
               quant_output=output)
    return _none_unused(res, _used("fp8_quant_batched", "forward", (("quant.output", output),)))


def fp8_quant_weight(w, round_scale=True):
    """(q, s): w [rows, hidden] (bf16) in 128 x 128 tiles, as
    lingen.fp8_quant_weight."""
    return _run("fp8_quant_weight_forward", w, quant_round_scale=round_scale)


# ------------------------------------------------- q/k norm + RoPE (K2)

def _rope_kw(eps, rotary_fraction, interleaved, transposed, silu, varlen=False, mscale=1.0,
             cp_size=1, cp_rank=0):
    return {"eps": eps, "rotary_fraction": rotary_fraction,
            "qkv_order": "seq_batch" if transposed or varlen else "batch_seq",
            "head_layout": "interleaved" if interleaved else "plain", "silu": bool(silu),
            "varlen": bool(varlen), "mscale": float(mscale), "cp_size": int(cp_size),
            "cp_rank": int(cp_rank)}


class QKNormRopeFunction(torch.autograd.Function):
    """Split qkv + q/k RMSNorm + rotate-half RoPE + [B, S, heads, D]
    (lingen.qk_norm_rope; packed sequences with cu_seqlens: qkv [T, .] ->
    [T, heads, D]), with lingen's backward (dq_weight, dk_weight in fp32,
    deterministic, cast to the weights' dtype for autograd)."""

    @staticmethod
    def forward(ctx, qkv, q_weight, k_weight, freqs, q_heads, kv_heads, eps=1e-6,
                rotary_fraction=0.5, interleaved=True, transposed=True, silu=False,
                cu_seqlens=None, mscale=1.0, cp_size=1, cp_rank=0):
        varlen = cu_seqlens is not None
        kw = _rope_kw(eps, rotary_fraction, interleaved, transposed, silu, varlen, mscale,
                      cp_size, cp_rank)
        x = qkv.view(qkv.shape[0], 1, qkv.shape[1]) if varlen and qkv.dim() == 2 else qkv
        q, k, v = _run("qk_norm_rope_forward", x, q_weight, k_weight, freqs, cu_seqlens,
                       q_heads=q_heads, kv_heads=kv_heads, **kw)
        if varlen:
            q, k, v = q[0], k[0], v[0]
        ctx.save_for_backward(qkv, q_weight, k_weight, freqs, cu_seqlens)
        ctx.kw = kw
        return q, k, v

    @staticmethod
    def backward(ctx, gq, gk, gv):
        qkv, q_weight, k_weight, freqs, cu_seqlens = ctx.saved_tensors
        x = qkv
        if cu_seqlens is not None:
            gq, gk, gv = gq.unsqueeze(0), gk.unsqueeze(0), gv.unsqueeze(0)
            if qkv.dim() == 2:
                x = qkv.view(qkv.shape[0], 1, qkv.shape[1])
        dqkv, dqw, dkw = _run("qk_norm_rope_backward", gq, gk, gv, x, q_weight, k_weight,
                              freqs, cu_seqlens, **ctx.kw)
        dqkv = dqkv.view(qkv.shape)
        dqw = dqw.to(q_weight.dtype) if ctx.needs_input_grad[1] else None
        dkw = dkw.to(k_weight.dtype) if ctx.needs_input_grad[2] else None
        return (dqkv, dqw, dkw) + (None,) * 12


def qk_norm_rope(qkv, q_weight, k_weight, freqs, q_heads, kv_heads, eps=1e-6, rotary_fraction=0.5,
                 interleaved=True, transposed=True, silu=False, cu_seqlens=None, mscale=1.0,
                 cp_size=1, cp_rank=0):
    """(q, k, v) [B, S, heads, D] from qkv [S, B, (H + 2h) D] (transposed;
    else [B, S, .]), differentiable; as linghe's qk_norm_half_rope with
    H=q_heads, h=kv_heads (rotary_fraction 0.5 there). With cu_seqlens
    (int32 [n + 1], cumulative global lengths): qkv [T, .] packed sequences
    -> [T, heads, D], positions restarting at each sequence (linghe's varlen
    form; cp_size, cp_rank: context parallelism's zig-zag halves)."""
    return QKNormRopeFunction.apply(qkv, q_weight, k_weight, freqs, q_heads, kv_heads, eps,
                                    rotary_fraction, interleaved, transposed, silu, cu_seqlens,
                                    mscale, cp_size, cp_rank)


# ------------------------------------- group RMSNorm x sigmoid gate (K8)

def _bsd(t):
    """t [a, b, ...] as [a, b, rest] (the attention output's heads x head_dim
    flattened into dim)."""
    return t.reshape(t.shape[0], t.shape[1], -1)


class GroupRMSNormGateFunction(torch.autograd.Function):
    """y = x * rsqrt(mean_group(x^2) + eps) * w * sigmoid(gate) with
    lingen's forward and backward (KERNELS.md K8): x [batch, seq, ...],
    gate [seq, batch, ...] with transpose ([batch, seq, ...] otherwise),
    weight [dim] or [dim / groups] (shared by the groups); y [seq, batch,
    dim] with transpose, else [batch, seq, dim]. dw is fp32 and
    deterministic, cast to the weight's dtype for autograd."""

    @staticmethod
    def forward(ctx, x, gate, weight, eps=1e-6, groups=4, transpose=True):
        x3, g3 = _bsd(x), _bsd(gate)
        shared = weight.shape[0] != x3.shape[-1]
        y = _run("group_rmsnorm_gate_forward", x3, g3, weight, eps=eps, groups=groups,
                 transpose=bool(transpose), shared_weight=shared)
        ctx.save_for_backward(x3, g3, weight)
        ctx.opts = dict(eps=eps, groups=groups, transpose=bool(transpose), shared_weight=shared)
        ctx.shapes = (x.shape, gate.shape)
        return y

    @staticmethod
    def backward(ctx, dy):
        x3, g3, weight = ctx.saved_tensors
        dx, dgate, dw = _run("group_rmsnorm_gate_backward", _bsd(dy), x3, g3, weight, **ctx.opts)
        dw = dw.to(weight.dtype) if ctx.needs_input_grad[2] else None
        return dx.view(ctx.shapes[0]), dgate.view(ctx.shapes[1]), dw, None, None, None


def group_rms_norm_gate(x, gate, weight, eps=1e-6, groups=4, transpose=True):
    """Group RMSNorm x sigmoid gate, differentiable (linghe's facade
    group_rms_norm_gate(attn_output, gate, weight, eps, group_size); its
    group_size is groups here)."""
    return GroupRMSNormGateFunction.apply(x, gate, weight, eps, groups, transpose)


def group_rms_norm_gate_forward(x, gate, weight, eps=1e-6, groups=4, transpose=True):
    """y without autograd, as linghe's triton_group_rms_norm_gate_forward."""
    x3 = _bsd(x)
    return _run("group_rmsnorm_gate_forward", x3, _bsd(gate), weight, eps=eps, groups=groups,
                transpose=bool(transpose), shared_weight=weight.shape[0] != x3.shape[-1])


def group_rms_norm_gate_backward(dy, x, gate, weight, eps=1e-6, groups=4, transpose=True):
    """(dx, dgate, dw fp32) as linghe's triton_group_rms_norm_gate_backward."""
    x3 = _bsd(x)
    dx, dgate, dw = _run("group_rmsnorm_gate_backward", _bsd(dy), x3, _bsd(gate), weight, eps=eps,
                         groups=groups, transpose=bool(transpose),
                         shared_weight=weight.shape[0] != x3.shape[-1])
    return dx.view(x.shape), dgate.view(gate.shape), dw


# ------------------------------------------------ softmax cross entropy (K9)

def _ce_count(labels, ignore_index):
    """The rows that count for the mean (fp32, on the device: no sync)."""
    return (labels != ignore_index).sum().float()


def _ce_reduce(loss, count, reduction, dtype):
    """The per-row losses reduced as F.cross_entropy's reduction asks
    (count: the rows not ignored, for "mean")."""
    if reduction == "none":
        return loss.to(dtype)
    total = loss.sum()
    return (total / count if count is not None else total).to(dtype)


def _ce_dloss(dout, count, reduction, rows):
    """The per-row output gradient [rows] fp32 of a reduced loss's dout."""
    if reduction == "none":
        return dout.float().contiguous()
    g = dout.float() / count if reduction == "mean" else dout.float()
    return g.reshape(1).expand(rows).contiguous()


def _ce_dense(t, align):
    """t as the kernels take it: contiguous and `align`-byte aligned (a
    fresh copy of a strided view, or of a slice starting off the boundary,
    as F.cross_entropy takes any tensor)."""
    if t.is_contiguous() and t.data_ptr() % align == 0:
        return t
    return t.clone(memory_format=torch.contiguous_format)


class CrossEntropyFunction(torch.autograd.Function):
    """F.cross_entropy(logits, labels, ignore_index=, label_smoothing=,
    reduction=) for 2-D logits [tokens, vocab] (bf16 or fp32; labels int64
    or int32) with lingen's kernels (KERNELS.md K9): loss in fp64-accurate
    fp32, returned in logits' dtype as torch does. The mean is over the rows
    whose label is not ignore_index (nan when there are none, as torch).
    Logits that are strided, or that start off a 16-byte boundary (a slice
    of rows at an odd vocab), are copied first, as are such labels.

    fused=True (reduction "mean" or "sum"): the forward also writes the
    gradient for the output gradient 1 (the usual loss.backward()), saving
    the backward's read of the logits; the backward scales it when the
    output gradient is not 1 (a check that synchronises the stream; while a
    CUDA graph is being captured it always scales instead).
    inplace=True writes the gradient over the logits (in the backward, or
    in the fused forward: the logits are then gone after the forward; over
    the copy when they had to be copied)."""

    @staticmethod
    def forward(ctx, logits, labels, ignore_index=-100, label_smoothing=0.0, reduction="mean",
                fused=False, inplace=False):
        from . import ops
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"reduction: found {reduction!r}, expected 'mean', 'sum' or 'none'")
        if fused and reduction == "none":
            raise ValueError("fused=True needs a uniform output gradient: reduction 'mean' or 'sum'")
        logits, labels = _ce_dense(logits, 16), _ce_dense(labels, 4)
        kw = dict(ignore_index=int(ignore_index), label_smoothing=float(label_smoothing))
        count = _ce_count(labels, ignore_index) if reduction == "mean" else None
        if fused:
            g = (1.0 / count if count is not None else torch.ones((), device=logits.device)).reshape(1)
            loss, _, _, grad = ops.cross_entropy_fused(logits, labels, g.float().contiguous(),
                                                       inplace=inplace, skip=("sum_exp", "max_logit"),
                                                       **kw)
            ctx.save_for_backward(grad)
        else:
            loss, s, m = ops.cross_entropy_forward(logits, labels, **kw)
            ctx.save_for_backward(logits, labels, s, m, count if count is not None else s[:0])
        ctx.kw, ctx.reduction, ctx.fused, ctx.inplace = kw, reduction, fused, inplace
        return _ce_reduce(loss, count, reduction, logits.dtype)

    @staticmethod
    def backward(ctx, dout):
        from . import ops
        if ctx.fused:
            (grad,) = ctx.saved_tensors
            if torch.cuda.is_current_stream_capturing() or \
                    not bool(torch.equal(dout.float(), torch.ones_like(dout, dtype=torch.float32))):
                grad = grad * dout.to(grad.dtype)
            return grad, None, None, None, None, None, None
        logits, labels, s, m, count = ctx.saved_tensors
        dloss = _ce_dloss(dout, count, ctx.reduction, logits.shape[0])
        grad = ops.cross_entropy_backward(logits, labels, s, m, dloss, inplace=ctx.inplace,
                                          **ctx.kw)
        return grad, None, None, None, None, None, None


def cross_entropy(logits, labels, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0, *, fused=False, inplace=False):
    """A drop-in for torch.nn.functional.cross_entropy on 2-D logits
    [tokens, vocab] (bf16 or fp32) and labels [tokens] (int64 or int32),
    differentiable, with F.cross_entropy's parameters in its order (the
    deprecated size_average and reduce as torch reads them; class weights
    are not supported: weight must be None); see CrossEntropyFunction for
    fused and inplace."""
    if weight is not None:
        raise ValueError("lingen.torch.cross_entropy: weight: class weights are not supported "
                         "(expected None)")
    if size_average is not None or reduce is not None:
        reduction = torch.nn._reduction.legacy_get_string(size_average, reduce)
    return CrossEntropyFunction.apply(logits, labels, ignore_index, label_smoothing, reduction,
                                      fused, inplace)


def _gather_stats(stats, group, all_gather):
    """Every rank's stats [tokens, 6] as [shards, tokens, 6], in rank order:
    all_gather(stats) when given, else torch.distributed's
    all_gather_into_tensor over the group."""
    if all_gather is not None:
        return all_gather(stats)
    import torch.distributed as dist
    out = stats.new_empty((dist.get_world_size(group),) + tuple(stats.shape))
    dist.all_gather_into_tensor(out, stats, group=group)
    return out


class VocabParallelCrossEntropyFunction(torch.autograd.Function):
    """Cross entropy with the vocabulary split over tensor-parallel ranks
    (KERNELS.md K9, vocab parallel): this rank holds the columns
    [vocab_start, vocab_start + logits.shape[1]) of `classes`. Forward: the
    shard's statistics, the all-gather (the group's, or all_gather(stats)),
    the merge; the loss is the whole rows' on every rank, reduced as
    CrossEntropyFunction. Backward: this shard's gradient from the merged S
    and m, with no communication. Everything the backward reads is saved by
    this forward (linghe's facade reads a ctx.tp_group its forward never
    sets)."""

    @staticmethod
    def forward(ctx, logits, labels, vocab_start, classes, group=None, all_gather=None,
                ignore_index=-100, label_smoothing=0.0, reduction="mean", inplace=False):
        from . import ops
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"reduction: found {reduction!r}, expected 'mean', 'sum' or 'none'")
        logits, labels = _ce_dense(logits, 16), _ce_dense(labels, 4)
        kw = dict(ignore_index=int(ignore_index), label_smoothing=float(label_smoothing))
        stats = ops.cross_entropy_shard_stats(logits, labels, int(vocab_start), int(classes), **kw)
        loss, s, m = ops.cross_entropy_merge(_gather_stats(stats, group, all_gather), labels,
                                             int(classes), **kw)
        count = _ce_count(labels, ignore_index) if reduction == "mean" else None
        ctx.save_for_backward(logits, labels, s, m, count if count is not None else s[:0])
        ctx.kw, ctx.reduction, ctx.inplace = kw, reduction, inplace
        ctx.vocab_start, ctx.classes = int(vocab_start), int(classes)
        return _ce_reduce(loss, count, reduction, logits.dtype)

    @staticmethod
    def backward(ctx, dout):
        from . import ops
        logits, labels, s, m, count = ctx.saved_tensors
        dloss = _ce_dloss(dout, count, ctx.reduction, logits.shape[0])
        grad = ops.cross_entropy_backward(logits, labels, s, m, dloss, inplace=ctx.inplace,
                                          vocab_start=ctx.vocab_start, classes=ctx.classes,
                                          **ctx.kw)
        return grad, None, None, None, None, None, None, None, None, None


def vocab_parallel_cross_entropy(logits, labels, vocab_start, classes, group=None, *,
                                 ignore_index=-100, reduction="mean", label_smoothing=0.0,
                                 inplace=False, all_gather=None):
    """F.cross_entropy over logits split by columns across the ranks of a
    tensor-parallel group: logits [tokens, V_rank] are the columns
    [vocab_start, vocab_start + V_rank) of `classes`, labels [tokens] the
    global columns. The shards' statistics are all-gathered over `group`
    (torch.distributed), or by all_gather(stats [tokens, 6]) ->
    [shards, tokens, 6] in rank order when given. As linghe's
    softmax_cross_entropy(..., tp_group) facade; see
    VocabParallelCrossEntropyFunction."""
    return VocabParallelCrossEntropyFunction.apply(logits, labels, vocab_start, classes, group,
                                                   all_gather, ignore_index, label_smoothing,
                                                   reduction, inplace)


def cross_entropy_forward(logits, labels, ignore_index=-100, label_smoothing=0.0):
    """(loss, sum_exp, max_logit) [tokens] fp32 without autograd, as linghe's
    triton_softmax_cross_entropy_forward."""
    from . import ops
    return ops.cross_entropy_forward(logits, labels, ignore_index=ignore_index,
                                     label_smoothing=label_smoothing)


def cross_entropy_backward(logits, labels, sum_exp, max_logit, output_grad, ignore_index=-100,
                           inplace=False, label_smoothing=0.0):
    """The logits' gradient, as linghe's triton_softmax_cross_entropy_backward
    (output_grad [tokens] fp32)."""
    from . import ops
    return ops.cross_entropy_backward(logits, labels, sum_exp, max_logit,
                                      output_grad.float().contiguous(), ignore_index=ignore_index,
                                      label_smoothing=label_smoothing, inplace=inplace)


# ------------------------------------------------------ router GEMM (K3)

class RouterGemmFunction(torch.autograd.Function):
    """logits fp32 = x . weight^T over the last dimension of x (bf16), with
    lingen's forward and backward: dx (bf16) and dw (fp32, deterministic,
    cast to weight's dtype for autograd) from the fp32 dy, as `precision`
    bf16 terms (lingen.router_gemm_backward). As linghe's facade
    fp32_gemm(input, weight)."""

    @staticmethod
    def forward(ctx, x, weight, precision="bf16"):
        x2 = _flat(x)
        logits = _run("router_gemm_forward", x2, weight)
        ctx.save_for_backward(x2, weight)
        ctx.precision = precision
        ctx.shape = x.shape
        return logits.view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, dy):
        x2, weight = ctx.saved_tensors
        dx, dw = _run("router_gemm_backward", _flat(dy).float(), x2, weight,
                      precision=ctx.precision)
        dx = dx.view(ctx.shape) if ctx.needs_input_grad[0] else None
        dw = dw.to(weight.dtype) if ctx.needs_input_grad[1] else None
        return dx, dw, None


def router_gemm(x, weight, precision="bf16"):
    """Router logits (fp32) of x [..., hidden] (bf16) and weight [experts,
    hidden] (bf16), differentiable."""
    return RouterGemmFunction.apply(x, weight, precision)


fp32_gemm = router_gemm  # linghe's name for it


def router_gemm_forward(x, weight):
    """logits fp32 [..., experts] without autograd, as linghe's triton_fp32_gemm."""
    return _run("router_gemm_forward", _flat(x), weight).view(*x.shape[:-1], weight.shape[0])


def router_gemm_backward(dy, x, weight, precision="bf16"):
    """(dx bf16 in x's shape, dw fp32 [experts, hidden]) from dy fp32
    [..., experts]: linghe's triton_fp32_gemm_for_backward and
    triton_fp32_gemm_for_update in one call."""
    dx, dw = _run("router_gemm_backward", _flat(dy).float(), _flat(x), weight, precision=precision)
    return dx.view(x.shape), dw


# ------------------------------ RMSNorm + router GEMM + FP8, fused (K3b)

def _rms_norm_router_run(x2, weight, route_weight, eps, precision, round_scale, output):
    res = _run("rmsnorm_router_forward", x2, weight, route_weight, eps=eps, precision=precision,
               quant_round_scale=round_scale, quant_output=output)
    # (hidden 128: the smallest shape, 8, takes no columnwise copy)
    used = _used("rmsnorm_router", "forward", (("hidden", 128), ("quant.output", output)))
    return _none_unused(res, used)


class RMSNormRouterFunction(torch.autograd.Function):
    """y = rmsnorm(x) * weight, the router logits y . route_weight^T (fp32)
    and y's FP8 copies in one lingen kernel (KERNELS.md K3b); y and the
    logits are differentiable. The backward composes the existing ones:
    router_gemm's (dy from the logits, as `precision` bf16 terms of the fp32
    dlogits, and d route_weight = dlogits^T . y), added to y's own
    gradient, then the RMSNorm backward (dx, d weight) from the saved rms.
    Returns (y, rms, logits, q, s, qt, st); rms and the copies carry no
    gradient."""

    @staticmethod
    def forward(ctx, x, weight, route_weight, eps=1e-6, precision="bf16", round_scale=True,
                output="rowwise"):
        x2 = _flat(x)
        y, rms, logits, q, s, qt, st = _rms_norm_router_run(x2, weight, route_weight, eps, precision,
                                                            round_scale, output)
        ctx.save_for_backward(x2, weight, route_weight, y, rms)
        ctx.opts = (eps, precision, x.shape)
        q = q.view(x.shape) if q is not None else None
        ctx.mark_non_differentiable(*(t for t in (rms, q, s, qt, st) if t is not None))
        return (y.view(x.shape), rms, logits.view(*x.shape[:-1], route_weight.shape[0]), q, s, qt,
                st)

    @staticmethod
    def backward(ctx, gy, grms, glogits, *_):
        x2, weight, route_weight, y, rms = ctx.saved_tensors
        eps, precision, shape = ctx.opts
        g = None if gy is None else _flat(gy).float()
        dr = None
        if glogits is not None:
            want = ctx.needs_input_grad
            dyr, dr = _run("router_gemm_backward", _flat(glogits).float().contiguous(), y,
                           route_weight, precision=precision)
            g = dyr.float() if g is None else g + dyr.float()
            dr = dr.to(route_weight.dtype) if want[2] else None
        if g is None:
            return None, None, dr, None, None, None, None
        dx, dw = _run("rmsnorm_backward", g.to(torch.bfloat16).contiguous(), x2, weight, rms, eps=eps)
        dw = dw.to(weight.dtype) if ctx.needs_input_grad[1] else None
        return dx.view(shape), dw, dr, None, None, None, None


def rms_norm_router(x, weight, route_weight, eps=1e-6, precision="bf16", round_scale=True,
                    output="rowwise"):
    """RMSNorm + router logits + FP8 copies of x [..., hidden] (bf16),
    differentiable in y and the logits: (y, rms, logits, q, s, qt, st) as
    RMSNormRouterFunction (the copies output leaves out None)."""
    return RMSNormRouterFunction.apply(x, weight, route_weight, eps, precision, round_scale, output)


def rms_norm_router_forward(x, weight, route_weight, eps=1e-6, precision="bf16", round_scale=True,
                            output="rowwise"):
    """(y, rms, logits, q, s, qt, st) without autograd, as linghe's
    triton_rms_norm_fp32_gemm_block_quant_forward (output "rowwise": its
    output_mode 0); leading dimensions flattened into tokens (y, q and the
    logits keep them)."""
    y, rms, logits, q, s, qt, st = _rms_norm_router_run(_flat(x), weight, route_weight, eps,
                                                        precision, round_scale, output)
    return (y.view(x.shape), rms, logits.view(*x.shape[:-1], route_weight.shape[0]),
            q.view(x.shape) if q is not None else None, s, qt, st)


# ------------------------------------------------ tensor lists (K10, K11)

from . import lists as _lists  # noqa: E402
from .lists import TensorList  # noqa: E402,F401  (re-exported: a list's table, built once)


def grad_norm(tensors, ord=2, norm=True):
    """The norm of a list of gradients (a lingen.TensorList, or a list of
    bf16 / fp32 CUDA tensors): ord 2, 1 or inf (-1 too), a 0-d fp32 tensor;
    fp64 sums, deterministic. As linghe's triton_batch_norm(xs, ord, norm)
    with scalar=True and high_precision=True, with no host copy and no
    synchronisation per call (CUDA graphs capture it)."""
    if isinstance(tensors, TensorList) or not (_compiling and _compiling()):
        return _lists.grad_norm(tensors, ord, norm)
    return torch.ops.lingen.grad_norm_forward(list(tensors), ord=_lists._ord(ord), norm=bool(norm))


def count_zero(tensors):
    """The zeros (+0.0 and -0.0) of a list of bf16 / fp32 CUDA tensors, a 0-d
    int64 tensor. As linghe's triton_batch_count_zero (which reads bf16
    wrongly)."""
    if isinstance(tensors, TensorList) or not (_compiling and _compiling()):
        return _lists.count_zero(tensors)
    return torch.ops.lingen.count_zero_forward(list(tensors))


# ------------------------------------------------ SwiGLU + FP8 (K7, K6)

def _grad_carrier(x, n):
    """The differentiable output of the SwiGLU Functions: bf16 [..., n] of no
    memory (one element, expanded). Its values are not y (y exists only as
    its quantised copies); it carries dL/dy, from whatever consumes the
    copies, to the Function's backward."""
    return x.new_zeros(()).expand(*x.shape[:-1], n)


def _quant_copies(op, res, output, shape=None):
    """(q, s, qt, st) of a forward, the copies output leaves out None; q
    in `shape` (x's leading dimensions) when given."""
    q, s, qt, st = _none_unused(res, _used(op, "forward", (("quant.output", output),)))
    if q is not None and shape is not None:
        q = q.view(shape)
    return q, s, qt, st


class SwiGLUQuantFunction(torch.autograd.Function):
    """y = silu(gate) * up of x [..., 2n] = [gate | up] (bf16), quantised
    (KERNELS.md K7), with lingen's backward. Returns (y, q, s, qt, st): y is
    a gradient carrier (bf16 [..., n], no memory, values not y) through
    which the consumer of the FP8 copies gives dL/dy; the copies are
    lingen.swiglu_quant's. The backward gives dx in bf16 and, to grad_sink
    (a callable, if given), the quantised dx copies (dxq, dxs, dxqt, dxst)
    the next GEMMs take."""

    @staticmethod
    def forward(ctx, x, round_scale=True, output="both", grad_sink=None):
        x2 = _flat(x)
        n = x2.shape[-1] // 2
        res = _run("swiglu_quant_forward", x2, intermediate=n, quant_round_scale=round_scale,
                   quant_output=output)
        copies = _quant_copies("swiglu_quant", res, output, (*x.shape[:-1], n))
        ctx.mark_non_differentiable(*(c for c in copies if c is not None))
        ctx.save_for_backward(x2)
        ctx.opts = (round_scale, grad_sink, x.shape)
        return (_grad_carrier(x, n), *copies)

    @staticmethod
    def backward(ctx, gy, *_):
        (x2,) = ctx.saved_tensors
        round_scale, grad_sink, shape = ctx.opts
        g = _flat(gy).contiguous()
        dxq, dxs, dxqt, dxst, dx = _run("swiglu_quant_backward", g, x2, quant_round_scale=round_scale,
                                        quant_output="both", dx_bf16=True)
        if grad_sink is not None:
            grad_sink(dxq, dxs, dxqt, dxst)
        return dx.view(shape), None, None, None


def swiglu_quant(x, round_scale=True, output="both", grad_sink=None):
    """SwiGLU + blockwise FP8 of x [..., 2n], differentiable:
    (y, q, s, qt, st) as SwiGLUQuantFunction (y a gradient carrier)."""
    return SwiGLUQuantFunction.apply(x, round_scale, output, grad_sink)


def swiglu_quant_forward(x, round_scale=True, output="both"):
    """(q, s, qt, st) without autograd, as linghe's
    triton_silu_and_block_quant_forward; leading dimensions flattened into
    tokens (q keeps them)."""
    x2 = _flat(x)
    n = x2.shape[-1] // 2
    res = _run("swiglu_quant_forward", x2, intermediate=n, quant_round_scale=round_scale,
               quant_output=output)
    return _quant_copies("swiglu_quant", res, output, (*x.shape[:-1], n))


def swiglu_quant_backward(g, x, round_scale=True, dx_bf16=False):
    """(dxq, dxs, dxqt, dxst), and dx bf16 with dx_bf16, as linghe's
    triton_silu_and_block_quant_backward (any token count)."""
    res = _run("swiglu_quant_backward", _flat(g), _flat(x), quant_round_scale=round_scale,
               quant_output="both", dx_bf16=bool(dx_bf16))
    return res if dx_bf16 else res[:4]


def _prob2(prob):
    """prob as the kernels take it: [tokens, 1] fp32, contiguous."""
    return prob.reshape(-1, 1).float().contiguous()


class BatchSwiGLUQuantFunction(torch.autograd.Function):
    """y = silu(gate) * up * prob of x [tokens, 2n] (bf16, rows grouped by
    expert; counts [experts] int32 on the device), quantised per expert
    (KERNELS.md K6), with lingen's backward. Returns (y, q, s, qt, st) as
    SwiGLUQuantFunction; the backward gives dx in bf16, dprob (fp32
    deterministic, cast to prob's dtype) and, to grad_sink if given, the
    per-expert quantised dx copies (dxq, dxs, dxqt, dxst)."""

    @staticmethod
    def forward(ctx, x, prob, counts, round_scale=True, output="both", grad_sink=None):
        n = x.shape[-1] // 2
        p2 = _prob2(prob)
        res = _run("batch_swiglu_quant_forward", x, p2, counts, intermediate=n,
                   quant_round_scale=round_scale, quant_output=output)
        copies = _quant_copies("batch_swiglu_quant", res, output)
        ctx.mark_non_differentiable(*(c for c in copies if c is not None))
        ctx.save_for_backward(x, p2, counts)
        ctx.opts = (round_scale, grad_sink, prob.shape, prob.dtype)
        return (_grad_carrier(x, n), *copies)

    @staticmethod
    def backward(ctx, gy, *_):
        x, p2, counts = ctx.saved_tensors
        round_scale, grad_sink, pshape, pdtype = ctx.opts
        dxq, dxs, dp, dxqt, dxst, dx = _run("batch_swiglu_quant_backward", gy.contiguous(), x, p2,
                                            counts, quant_round_scale=round_scale,
                                            quant_output="both", dx_bf16=True)
        if grad_sink is not None:
            grad_sink(dxq, dxs, dxqt, dxst)
        dprob = dp.to(pdtype).view(pshape) if ctx.needs_input_grad[1] else None
        return dx, dprob, None, None, None, None


def batch_swiglu_quant(x, prob, counts, round_scale=True, output="both", grad_sink=None):
    """Per-expert weighted SwiGLU + FP8, differentiable in x and prob:
    (y, q, s, qt, st) as BatchSwiGLUQuantFunction."""
    return BatchSwiGLUQuantFunction.apply(x, prob, counts, round_scale, output, grad_sink)


def batch_swiglu_quant_forward(x, prob, counts, round_scale=True, output="both"):
    """(q, s, qt, st) without autograd, as linghe's
    triton_batch_weighted_silu_and_block_quant_forward."""
    res = _run("batch_swiglu_quant_forward", x, _prob2(prob), counts,
               intermediate=x.shape[-1] // 2, quant_round_scale=round_scale, quant_output=output)
    return _quant_copies("batch_swiglu_quant", res, output)


def batch_swiglu_quant_backward(g, x, prob, counts, round_scale=True, dx_bf16=False):
    """(dxq, dxs, dprob, dxqt, dxst), and dx bf16 with dx_bf16, as linghe's
    triton_batch_weighted_silu_and_block_quant_backward (dprob fp32
    [tokens, 1])."""
    res = _run("batch_swiglu_quant_backward", g, x, _prob2(prob), counts,
               quant_round_scale=round_scale, quant_output="both", dx_bf16=bool(dx_bf16))
    return res if dx_bf16 else res[:5]


# ------------------------------------- MoE dispatch and combine (K4, K5)

def moe_row_map(routing, top_k, experts=None, multiple=None):
    """(row_id_map, counts, offsets, row_index, padded_counts) of a routing mask [tokens,
    experts] (bool / uint8) or top-k indices [tokens, top_k] (int32 / int64;
    experts= required), as lingen.moe_row_map; not differentiable. The
    padded total is offsets[-1] (on the device; .item() copies 4 bytes)."""
    kind, routing = _routing_kind(routing)
    if experts is None:
        if kind != "mask":
            raise ValueError("lingen.torch.moe_row_map: top-k routing: pass experts=")
        experts = routing.shape[1]
    arrays = [None, None, None]  # the routing inputs, in declared order
    arrays[_routing_arg(kind).index] = routing
    return _run("moe_row_map_forward", *arrays, experts=int(experts), top_k=int(top_k),
                **_multiple(multiple), routing=kind)


class MoePermuteFunction(torch.autograd.Function):
    """MoE dispatch (KERNELS.md K4): tokens x [tokens, hidden] bf16 and
    probs [tokens, experts] fp32 into expert-major padded rows [rows,
    hidden] and their probabilities [rows] (zeros on padding rows). Its
    backward is the combine of the gradients (dx: the fp32 sum of each
    token's row gradients; dprobs: each routed pair's row gradient)."""

    @staticmethod
    def forward(ctx, x, probs, row_id_map, offsets, counts, top_k, multiple=None):
        out, _, out_probs = _run("moe_permute_forward", x, None, probs, row_id_map, offsets, counts,
                                 top_k=int(top_k), **_multiple(multiple))
        ctx.save_for_backward(row_id_map)
        ctx.kw = dict(top_k=int(top_k), **_multiple(multiple))
        ctx.has_probs = probs is not None
        return out, out_probs

    @staticmethod
    def backward(ctx, dout, dout_probs):
        (row_id_map,) = ctx.saved_tensors
        dx, dprobs = _run("moe_permute_backward", dout.contiguous(),
                          dout_probs.contiguous() if ctx.has_probs else None, row_id_map, **ctx.kw)
        return dx, (dprobs if ctx.has_probs else None), None, None, None, None, None


class MoeUnpermuteFunction(torch.autograd.Function):
    """MoE combine (KERNELS.md K5): rows g [rows, hidden] bf16 back into
    tokens, out[t] = the fp32 sum of t's rows in ascending expert order
    (weighted: each times probs[r]), and probs [rows] restored to [tokens,
    experts]. Its backward dispatches the gradient into the rows (weighted:
    times probs[r], and dprobs[r] = <dout[t], g[r]>)."""

    @staticmethod
    def forward(ctx, g, probs, row_id_map, offsets, counts, top_k, multiple=None, weighted=False):
        out, restore = _run("moe_unpermute_forward", g, probs, row_id_map, top_k=int(top_k),
                            **_multiple(multiple), weighted=bool(weighted))
        ctx.save_for_backward(g if weighted else None, probs if weighted else None, row_id_map,
                              offsets, counts)
        ctx.kw = dict(top_k=int(top_k), **_multiple(multiple), weighted=bool(weighted))
        ctx.has_probs = probs is not None
        return out, restore

    @staticmethod
    def backward(ctx, dout, drestore):
        g, probs, row_id_map, offsets, counts = ctx.saved_tensors
        dg, dprobs = _run("moe_unpermute_backward", dout.contiguous(),
                          drestore.contiguous() if ctx.has_probs else None, row_id_map, offsets,
                          counts, g, probs, **ctx.kw)
        return dg, (dprobs if ctx.has_probs else None), None, None, None, None, None, None


def moe_permute(x, row_id_map, offsets, counts, probs=None, top_k=None, multiple=None):
    """(rows [rows, hidden], rows_probs [rows]) of x [..., hidden] bf16 (leading
    dimensions flattened into tokens) and probs [tokens, experts] fp32 or
    None, differentiable; rows = tokens * top_k + experts * (multiple - 1),
    the rows past the padded total offsets[-1] zeros. As linghe's facade
    padded_permute, without its host-side expert counts."""
    if top_k is None:
        raise ValueError("lingen.torch.moe_permute: pass top_k= (it sizes the padded rows)")
    return MoePermuteFunction.apply(_flat(x), probs, row_id_map, offsets, counts, top_k, multiple)


def moe_permute_fp8(xq, x_scale, row_id_map, offsets, counts, probs=None, top_k=None, multiple=None,
                    round_scale=True):
    """(rows e4m3, rows_scale [rows, hidden / 128] fp32, rows_probs or None):
    the permute of FP8 tokens xq [tokens, hidden] float8_e4m3fn with their
    scales [tokens, hidden / 128]; padding rows take the zero block's scale
    (2^-99 with round_scale, else 1e-30). Not differentiable."""
    if top_k is None:
        raise ValueError("lingen.torch.moe_permute_fp8: pass top_k=")
    out, scale, out_probs = _run("moe_permute_forward", xq, x_scale, probs, row_id_map, offsets,
                                 counts, top_k=int(top_k), **_multiple(multiple),
                                 round_scale=bool(round_scale))
    return out, scale, (out_probs if probs is not None else None)


def moe_unpermute(rows, row_id_map, offsets, counts, probs=None, top_k=None, multiple=None,
                  weighted=False):
    """(out [tokens, hidden] bf16, restore_probs [tokens, experts] fp32) of
    rows [rows, hidden] bf16 and their probs [rows] fp32 (None: no
    restore; required with weighted=True), differentiable. As linghe's
    facade padded_unpermute, plus the weighting."""
    if top_k is None:
        raise ValueError("lingen.torch.moe_unpermute: pass top_k= (it sizes the padded rows)")
    if weighted and probs is None:
        raise ValueError("lingen.torch.moe_unpermute: weighted=True needs probs")
    return MoeUnpermuteFunction.apply(rows, probs, row_id_map, offsets, counts, top_k, multiple,
                                      weighted)


def moe_permute_quant(x, row_index, padded_counts, probs=None, top_k=None, multiple=None,
                      round_scale=True, output="both"):
    """(q, s, qt, st, out_probs) of lingen.moe_permute_quant for x [..., hidden]
    bf16 (K4b: permute + pad + per-expert blockwise FP8 in one kernel); the
    copies output does not ask for, and out_probs without probs, None. Not
    differentiable (its backward is the unpermute of the gradient)."""
    if top_k is None:
        raise ValueError("lingen.torch.moe_permute_quant: pass top_k= (it sizes the padded rows)")
    res = _run("moe_permute_quant_forward", _flat(x), probs, row_index, padded_counts,
               top_k=int(top_k), **_multiple(multiple), quant_round_scale=bool(round_scale),
               quant_output=output)
    q, s, qt, st, op = _none_unused(res, _used("moe_permute_quant", "forward",
                                               (("quant.output", output),)))
    return q, s, qt, st, (op if probs is not None else None)
