"""The ops read off the family declarations (lingen.families()): for every
family pass that lingen.ops does not wrap by hand, lingen.<op> (the
forward) or lingen.<op>_<pass> takes the pass's inputs positionally in
declared order, its scalar spec keys as keyword arguments (the declared
defaults), then tile=, out=, stream=, context=, alloc= as every op does,
and returns its outputs in declared order (one output: itself; an output
the call does not produce: None). A new family gets its op with no Python
written; lingen.torch registers its torch op from the same rules
(scalar_keys, maybe_unused).
"""
import inspect

from . import _core, _families

# the torch schema types of the key types an op takes as keyword arguments
SCALAR = {"number": "float", "bool": "bool", "enum": "str", "int": "int"}
_COMMON = ("tile", "out", "stream", "context", "alloc")


def scalar_keys(fam, decl):
    """The spec keys an op takes as keyword arguments: every scalar key
    that is not a tile, nor a shape the pass's inputs show as a dimension of
    their own (qk_norm_rope's q_heads and kv_heads, in qkv's last dimension
    only as an expression, are keyword arguments of its forward). Inputs
    some specs leave unused (moe_row_map's mask or top-k) bind nothing."""
    skip = maybe_unused(fam, decl)
    bound = {_families.bare_name(d) for a in decl.args if a.is_input and a.name not in skip
             for d in a.dims}
    return [k for k in fam.keys
            if k.type in SCALAR and not k.tile and not (k.shape and k.path in bound)]


def op_keys(fam, decl):
    """The keyword arguments of the Python op: scalar_keys less what the
    declaration shows this pass does not take: a shape key bound by an
    input dimension `c * name`, `name + c` or `round_up(name, c)`
    (swiglu_quant's intermediate, x being [tokens, 2 * intermediate]), and
    a key whose doc starts with another pass's name ("backward: ...":
    router_gemm's precision, swiglu_quant's dx_bf16 in the forward)."""
    skip = maybe_unused(fam, decl)
    bound = {n[0] for a in decl.args if a.is_input and a.name not in skip for d in a.dims
             for n in (_families.offset_name(d), _families.scaled_name(d),
                       _families.rounded_name(d)) if n}
    other = tuple(f"{p}:" for p in fam.passes if p != decl.name)
    return [k for k in scalar_keys(fam, decl)
            if not (k.shape and k.path in bound) and not k.doc.startswith(other)]


def maybe_unused(fam, decl):
    """The inputs of a pass that some spec does not use (the family's
    uses() clears them: moe_permute's x_scale for bf16, moe_row_map's
    routing arrays but one): probed over the dtypes and the values of the
    enum and bool keys (at most 64 combinations) at the smallest shape.
    They are optional arguments of the op."""
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


def op_name(op, pass_):
    """The Python name of a family pass: the op for the forward, else
    op_pass (rmsnorm, rmsnorm_backward)."""
    return op if pass_ == "forward" else f"{op}_{pass_}"


def _param_names(fam, keys, args=()):
    """{key path: parameter name}: the path's last part (round_scale for
    quant.round_scale) unless two keys share it, then the path with '_';
    a key named as an argument (adamw_fp8's grad, the gradient's type)
    gets `_dtype` after it."""
    last = [k.path.rsplit(".", 1)[-1] for k in fam.keys]
    names = {k.path: (k.path.rsplit(".", 1)[-1] if last.count(k.path.rsplit(".", 1)[-1]) == 1
                      else k.path.replace(".", "_")) for k in keys}
    return {p: n + "_dtype" if n in args else n for p, n in names.items()}


def _default(k):
    if k.default is None:
        return None
    return float(k.default) if k.type == "number" else k.default


def make(op, pass_):
    """The generic op of one family pass (see the module's comment)."""
    fam = _families.families()[op]
    decl = fam.passes[pass_]
    if any(a.role == "list" for a in decl.args):
        raise TypeError(f"lingen: {op} {pass_} takes a tensor list: see lingen.lists")
    name = op_name(op, pass_)
    fn = f"lingen.{name}"
    ins = [a for a in decl.args if a.is_input]
    outs = [a for a in decl.args if a.is_output]
    maybe = maybe_unused(fam, decl)
    opt = [a.role == "optional_in" or a.name in maybe for a in ins]
    keys = op_keys(fam, decl)
    pnames = _param_names(fam, keys, {a.name for a in ins})
    P = inspect.Parameter
    params = [P(a.name, P.POSITIONAL_OR_KEYWORD, default=None if all(opt[i:]) else P.empty)
              for i, a in enumerate(ins)]
    params += [P(pnames[k.path], P.KEYWORD_ONLY, default=_default(k)) for k in keys]
    params += [P(n, P.KEYWORD_ONLY, default=None) for n in _COMMON]
    sig = inspect.Signature(params)
    # (a key named as an argument keeps its name in errors: the arrays' errors name it too)
    renamed = {path: p for path, p in pnames.items() if p != path and path not in sig.parameters}

    binder = _Binder(fn, sig)
    in_names = tuple(a.name for a in ins)
    out_names = tuple(a.name for a in outs)
    key_params = tuple((k.path, pnames[k.path]) for k in keys)

    def generic(*args, **kwargs):
        v = binder.bind(args, kwargs)
        options = {path: v[p] for path, p in key_params if v[p] is not None}
        if v["tile"] is not None:
            options["tile"] = v["tile"]
        r = _core.call(fn, op, pass_, {n: v[n] for n in in_names}, options, out=v["out"],
                       stream=v["stream"], context=v["context"], alloc=v["alloc"],
                       names=renamed)
        if len(out_names) == 1:
            return r[out_names[0]]
        return tuple([r[n] for n in out_names])

    generic.__name__ = generic.__qualname__ = name
    generic.__signature__ = sig
    generic.__doc__ = (f"{fam.summary} ({op}, {pass_}; generated from the declaration).\n\n"
                       + "\n".join(f"{a.name} [{a.shape}] {a.elem}, {a.role}"
                                   + (f": {a.doc}" if a.doc else "") for a in decl.args
                                   if a.role != "workspace")
                       + "\n\nReturns (" + ", ".join(a.name for a in outs) + ").")
    generic.__module__ = "lingen"
    return generic


class _Binder:
    """Signature.bind for an op called many times: whether a call binds
    depends only on how many positional arguments it has and which keyword
    names, so the first call of each such form is bound by the signature
    (its TypeError, "fn: ...", for a bad one) and later ones by a dict of
    the defaults, the positional names and the keywords."""

    def __init__(self, fn, sig):
        self.fn, self.sig = fn, sig
        self.defaults = {n: p.default for n, p in sig.parameters.items()}
        self.names = tuple(sig.parameters)
        self.forms = set()

    def bind(self, args, kwargs):
        """{parameter: value} of every parameter (defaults filled in)."""
        form = (len(args), *kwargs)
        if form not in self.forms:
            try:
                self.sig.bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"{self.fn}: {e}") from None
            self.forms.add(form)
        v = dict(self.defaults)
        v.update(zip(self.names, args))
        v.update(kwargs)
        return v


_made = {}


def generated(taken):
    """{Python name: (op, pass)} of every family pass without an op in
    taken (the names lingen.ops defines by hand) nor a tensor list."""
    out = {}
    for op, fam in _families.families().items():
        for pass_, decl in fam.passes.items():
            name = op_name(op, pass_)
            if name in taken or any(a.role == "list" for a in decl.args):
                continue
            out[name] = (op, pass_)
    return out


def lookup(name, taken):
    """The generic op called name, or None (made once, on first use)."""
    f = _made.get(name)
    if f is None:
        target = generated(taken).get(name)
        if target is None:
            return None
        f = _made.setdefault(name, make(*target))
    return f


def outputs(op, pass_, r):
    """A call's result {name: array} as the op returns it: the pass's
    outputs in declared order (one output: itself)."""
    names = _outputs.get((op, pass_))
    if names is None:
        decl = _families.families()[op].passes[pass_]
        names = _outputs[(op, pass_)] = tuple(a.name for a in decl.args if a.is_output)
    if len(names) == 1:
        return r[names[0]]
    return tuple(r[n] for n in names)


_outputs = {}
