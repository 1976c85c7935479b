"""The torch.library ops of lingen, registered from the family declarations
(see lingen.torch), and the helpers every autograd Function module shares:
_run (the op, or its eager implementation), _used (which outputs a call
produces), _flat, _none_unused, _grad_carrier."""
import json

import torch

from .. import _core, _families, _generic
from .._arrays import torch_elems
from ..ops import _uses

NAMESPACE = "lingen"


def declared(op):
    """A decorator: every parameter of the function whose default is `...`
    takes the declared default of the family op's key of that name (the last
    part of its path: round_scale is quant.round_scale), so no default is
    written twice. A name that is no key of op fails at import."""
    fam = _families.families()[op]

    def value(name, f):
        for k in fam.keys:
            if k.path.rsplit(".", 1)[-1] == name and k.default is not None:
                return float(k.default) if k.type == "number" else k.default
        raise TypeError(f"lingen.torch: {f.__qualname__}: {name} is no key of {op} with a "
                        "default")

    def deco(f):
        code = f.__code__
        names = code.co_varnames[:code.co_argcount]
        if f.__defaults__:
            first = len(names) - len(f.__defaults__)
            f.__defaults__ = tuple(value(names[first + i], f) if d is ... else d
                                   for i, d in enumerate(f.__defaults__))
        if f.__kwdefaults__:
            f.__kwdefaults__ = {n: value(n, f) if d is ... else d
                                for n, d in f.__kwdefaults__.items()}
        return f
    return deco


# which keys an op takes, and which inputs some spec leaves unused: the same
# rules as lingen's own generated ops (lingen._generic)
_SCALAR = _generic.SCALAR
_scalar_keys = _generic.scalar_keys
_maybe_unused = _generic.maybe_unused


def _param(path):
    return path.replace(".", "_")


# keys a functional torch op cannot honour: accumulate adds into an output
# the caller passes (lingen.fp8_gemm_wgrad(..., out=...)), which no op of
# these schemas takes (they mutate nothing): the ops leave it out
_NOT_OPS = ("accumulate",)


def _keys(fam, decl):
    return [k for k in _scalar_keys(fam, decl) if k.path not in _NOT_OPS]


def out_dtype(fam, decl):
    """Whether the family's element type names outputs only (no input has
    it: the FP8 GEMMs' y, dx, dw): then the op takes it as `dtype`, one of
    the family's, default its first; the fake kernel's outputs have it."""
    return (bool(fam.dtypes) and any(a.elem == "dtype" for a in decl.args if a.is_output)
            and not any(a.elem == "dtype" for a in decl.args if a.is_input))


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
    keys = _keys(fam, decl)
    if keys or out_dtype(fam, decl):
        ins.append("*")
    ins += [f"{_SCALAR[k.type]} {_param(k.path)}{_default(k)}" for k in keys]
    if out_dtype(fam, decl):
        ins.append(f'str dtype="{fam.dtypes[0]}"')
    outs = [a for a in decl.args if a.is_output]
    ret = "Tensor" if len(outs) == 1 else "(" + ", ".join("Tensor" for _ in outs) + ")"
    return "(" + ", ".join(ins) + ") -> " + ret


def _options(fam, decl, kwargs):
    """The spec's options from the op's keyword arguments (the declared
    defaults where torch passes none)."""
    opts = {}
    for k in _keys(fam, decl):
        v = kwargs.get(_param(k.path), k.default)
        if v is not None:
            opts[k.path] = v
    if out_dtype(fam, decl):
        dt = kwargs.get("dtype", fam.dtypes[0])
        if dt not in fam.dtypes:
            raise ValueError(f"torch.ops.lingen.{fam.op}_{decl.name}: dtype: found {dt!r}, "
                             f"allowed: {', '.join(map(repr, fam.dtypes))}")
        opts["dtype"] = dt
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


def _dtype(elem, like, opts=None):
    """The torch dtype of an output of element type elem: the op's `dtype`
    where it names outputs only (out_dtype), else the inputs' (like's)."""
    if elem == "dtype":
        return torch_elems()[1][opts["dtype"]] if opts and "dtype" in opts else like.dtype
    return torch_elems()[1][elem]


def _hint(d):
    """A dimension as an int: itself, or a SymInt's example value (no guard
    is added); None when it has none."""
    if isinstance(d, int):
        return d
    try:
        h = d.node.hint
    except AttributeError:
        return None
    return int(h) if h is not None else None


def _check_fake(fn, op, pass_, fam, decl, ins, tensors, kwargs):
    """A fake kernel runs the real call's checks (lingen._core.check: element
    types, dimensions, the spec's keys by the library, each shape against
    the declaration), on the dimensions' example values when symbolic: the
    same error as the real call, before anything is traced."""
    elems = torch_elems()[0]
    arrays = {}
    for a, t in zip(ins, tensors):
        if t is None:
            continue
        shape = tuple(_hint(d) for d in t.shape)
        if None in shape:  # unbacked: nothing to check against
            return
        e = elems.get(t.dtype)
        arrays[a.name] = (shape, (e,) if e else (), t.dtype)
    _core.check(fn, op, pass_, arrays, _options(fam, decl, kwargs))


def _register(op, pass_, fam, decl):
    name = f"{NAMESPACE}::{op}_{pass_}"
    ins = [a for a in decl.args if a.is_input]
    outs = [a for a in decl.args if a.is_output]
    fn = f"torch.ops.lingen.{op}_{pass_}"

    options = {}
    in_names = tuple(a.name for a in ins)

    def impl(*args, **kwargs):
        arrays = {n: (t.contiguous() if t is not None else None)
                  for n, t in zip(in_names, args)}
        key = tuple(kwargs.items())
        opts = options.get(key)
        if opts is None:
            opts = options[key] = _options(fam, decl, kwargs)
        r = _core.call(fn, op, pass_, arrays, opts)
        res = [r[a.name] for a in outs]
        if any(t is None for t in res):  # outputs this call does not produce: empty
            like = next(t for t in args[:len(ins)] if t is not None)
            res = [t if t is not None else
                   torch.empty(0, dtype=_dtype(a.elem, like, opts), device=like.device)
                   for a, t in zip(outs, res)]
        return tuple(res) if len(res) > 1 else res[0]

    def fake(*args, **kwargs):
        tensors = args[:len(ins)]
        like = next(t for t in tensors if t is not None)
        _check_fake(fn, op, pass_, fam, decl, ins, tensors, kwargs)
        shapes = {a.name: tuple(t.shape) for a, t in zip(ins, tensors) if t is not None}
        dtype = next((torch_elems()[0].get(t.dtype) for a, t in zip(ins, tensors)
                      if a.elem == "dtype" and t is not None), None)
        opts = _options(fam, decl, kwargs)
        dtype = opts.pop("dtype", dtype)
        s, env = _spec_for(op, pass_, shapes, opts, dtype if dtype in fam.dtypes else None)
        sizes = [env.get(n, decl.size_ranges[i][0]) for i, n in enumerate(decl.sizes)]
        for n, v in zip(decl.sizes, sizes):  # a size no input tells: its minimum (qt_pitch 0)
            env.setdefault(n, v)
        concrete = all(isinstance(v, int) for v in sizes)
        res = []
        for a in outs:
            if not s.arg_used(a.index):
                shape = (0,)
            elif concrete:  # the library's evaluation, as the real call's
                shape = s.arg_shape(a.index, sizes)
            else:  # symbolic sizes (torch.compile's dynamic shapes): the same
                shape = _families.eval_shape(a, env)  # expressions over SymInts
            res.append(like.new_empty(shape, dtype=_dtype(a.elem, like, {"dtype": dtype}
                                                          if out_dtype(fam, decl) else None)))
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
    from .. import lists  # imports nothing of torch's
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
    torch's dispatcher (the same code, the same stream, CUDA graphs too);
    meta and fake tensors through the dispatcher (the fake kernels)."""
    if _compiling is None or _compiling() or not _on_cuda(args):
        return getattr(torch.ops.lingen, name)(*args, **kwargs)
    return _eager[name](*args, **kwargs)


def _on_cuda(args):
    """Whether the call's first tensor is a real CUDA tensor (a meta or fake
    one goes through torch's dispatcher: the fake kernel gives its shapes)."""
    t = next((a for a in args if isinstance(a, torch.Tensor)), None)
    return t is not None and t.is_cuda and not _is_fake(t)


def _is_fake(t):
    return type(t) is not torch.Tensor and type(t).__name__ == "FakeTensor"


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


def _none_unused(res, used):
    return tuple(r if u else None for r, u in zip(res, used))


def _grad_carrier(x, n):
    """The differentiable output of the SwiGLU Functions: bf16 [..., n] of no
    memory (one element, expanded). Its values are not y (y exists only as
    its quantised copies); it carries dL/dy, from whatever consumes the
    copies, to the Function's backward."""
    return x.new_zeros(()).expand(*x.shape[:-1], n)

