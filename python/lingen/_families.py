"""The family declarations, read from the library (lg_families_json): each
op's spec keys, and per pass its run-time sizes and arguments (role, element
type, shape expression, alignment). Nothing here knows a family: the call
layer binds tensors to these declarations, and the shape expressions are
evaluated as written ("tokens, hidden", "cdiv(tokens, 128), hidden") by
the library (lg_spec_arg_shape: real calls, and torch's fake kernels at
concrete sizes); :func:`eval_shape` here only where the sizes are symbolic
(torch.compile's dynamic shapes: SymInts the library cannot take), and
tests check the two agree on every declaration.
"""
import ast
import json
import threading
from dataclasses import dataclass, field

from . import _lib


@dataclass(frozen=True)
class Key:
    path: str
    type: str
    required: bool
    shape: bool
    tile: bool
    default: object = None
    values: tuple = ()
    doc: str = ""
    min: object = None
    max: object = None  # an int key's declared range (min, max)


@dataclass(frozen=True)
class Arg:
    index: int
    name: str
    role: str      # in | out | optional_in | optional_out | workspace | list
    elem: str      # bf16 | fp32 | e4m3 | int32 | int64 | uint8 | dtype
    shape: str     # the declared expression; "" for a workspace
    align: int
    doc: str
    dims: tuple = ()  # the expression's dimensions, parsed (ast nodes)

    @property
    def is_input(self):
        return self.role in ("in", "optional_in")

    @property
    def is_output(self):
        return self.role in ("out", "optional_out")


@dataclass(frozen=True)
class Pass:
    name: str
    sizes: tuple        # names, in launch order
    size_ranges: tuple  # (min, max) each
    args: tuple

    def arg(self, name):
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError(name)


@dataclass(frozen=True)
class Family:
    op: str
    summary: str
    dtypes: tuple
    keys: tuple
    passes: dict = field(default_factory=dict)

    def key(self, path):
        for k in self.keys:
            if k.path == path:
                return k
        return None


def _parse_dims(expr):
    if not expr:
        return ()
    tree = ast.parse(f"({expr},)", mode="eval").body
    return tuple(tree.elts)


def eval_dim(node, env):
    """One dimension's value: + - * / (integer, toward zero for the
    non-negative values shapes have), cdiv(a, b), round_up(a, b) (cdiv(a,
    b) * b: a row pitch), pick(c, a, b) (a if c is
    0, else b; an enum key is its value's index), names from env; a number
    key after '*' where the product is whole ("head_dim * rotary_fraction").
    Works on ints and on torch SymInts."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.Attribute):  # "quant.block"
        return env[ast.unparse(node)]
    if isinstance(node, ast.BinOp):
        a, b = eval_dim(node.left, env), eval_dim(node.right, env)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            if isinstance(b, float):  # a number key: the product is a whole number
                if a * b != int(a * b):
                    raise ValueError(f"{ast.unparse(node)} is not a whole number")
                return int(a * b)
            return a * b
        if isinstance(node.op, ast.Div):
            return a // b
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "cdiv" and len(node.args) == 2):
        a, b = eval_dim(node.args[0], env), eval_dim(node.args[1], env)
        return (a + b - 1) // b
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "round_up" and len(node.args) == 2):
        a, b = eval_dim(node.args[0], env), eval_dim(node.args[1], env)
        return (a + b - 1) // b * b
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "pick" and len(node.args) == 3):
        return eval_dim(node.args[2] if eval_dim(node.args[0], env) else node.args[1], env)
    raise ValueError(f"unsupported shape expression: {ast.unparse(node)}")


def eval_shape(arg, env):
    """The shape of arg for env (run-time sizes and integer spec keys)."""
    return tuple(eval_dim(d, env) for d in arg.dims)


def bare_name(node, fam=None, options=None):
    """The size or key a dimension is exactly (None for an expression).
    With fam and options (spec keys by path), also the name a
    pick(c, a, b) dimension picks when c is a key (options, else its
    default): qkv [pick(qkv_order, seq, batch), ...] is [seq, ...] or
    [batch, ...]."""
    if isinstance(node, ast.Name):
        return node.id
    if (fam is not None and isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "pick" and len(node.args) == 3
            and isinstance(node.args[0], ast.Name)):
        k = fam.key(node.args[0].id)
        if k is None:
            return None
        v = (options or {}).get(k.path, k.default)
        if k.type == "enum":
            v = list(k.values).index(v) if v in k.values else None
        if v is None:
            return None
        return bare_name(node.args[2] if v else node.args[1], fam, options)
    return None


def default_name(node):
    """The size a dimension `pick(name, a, name)` is: name, whose 0 stands
    for a (cross_entropy_quant's qt [vocab, pick(qt_pitch, round_up(tokens,
    128), qt_pitch)]: the row pitch, 0 for the tokens' own); None else. An
    array's dimension gives name its value (a value equal to a's means the
    same as 0)."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "pick" and len(node.args) == 3
            and isinstance(node.args[0], ast.Name) and isinstance(node.args[2], ast.Name)
            and node.args[0].id == node.args[2].id):
        return node.args[0].id
    return None


def offset_name(node):
    """(name, c) for a dimension `name + c` (c an integer constant): the
    size it binds is the dimension minus c (cu_seqlens [batch + 1])."""
    if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)
            and isinstance(node.left, ast.Name) and isinstance(node.right, ast.Constant)
            and isinstance(node.right.value, int)):
        return node.left.id, node.right.value
    return None


def rounded_name(node):
    """(name, c) for a dimension `round_up(name, c)` (a row pitch: the
    columnwise copies' qt [k, round_up(tokens, 128)])."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "round_up" and len(node.args) == 2
            and isinstance(node.args[0], ast.Name) and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, int) and node.args[1].value > 0):
        return node.args[0].id, node.args[1].value
    return None


def scaled_name(node):
    """(name, c) for a dimension `c * name` (c an integer constant): the
    size it binds is the dimension / c (SwiGLU's x [tokens, 2 * intermediate])."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        for c, n in ((node.left, node.right), (node.right, node.left)):
            if (isinstance(c, ast.Constant) and isinstance(c.value, int) and c.value > 0
                    and isinstance(n, ast.Name)):
                return n.id, c.value
    return None


_lock = threading.Lock()
_families = None


def families():
    """{op: Family} for every family the library has."""
    global _families
    if _families is not None:
        return _families
    with _lock:
        if _families is None:
            lib = _lib.load()
            import ctypes
            p = ctypes.c_void_p()
            _lib.check(lib.lg_families_json(ctypes.byref(p)))
            _families = parse(json.loads(_lib.take_string(p.value)))
    return _families


def parse(doc):
    out = {}
    for o in doc["ops"]:
        keys = tuple(Key(k["path"], k["type"], k["required"], k["shape"], k["tile"],
                         k.get("default"), tuple(k.get("values", ())), k.get("doc", ""),
                         k.get("min"), k.get("max"))
                     for k in o["keys"])
        passes = {}
        for pname, p in o["passes"].items():
            args = tuple(Arg(i, a["name"], a["role"], a["elem"], a["shape"] or "", a["align"],
                             a.get("doc", ""), _parse_dims(a["shape"] or ""))
                         for i, a in enumerate(p["args"]))
            passes[pname] = Pass(pname, tuple(s["name"] for s in p["sizes"]),
                                 tuple((s["min"], s["max"]) for s in p["sizes"]), args)
        out[o["op"]] = Family(o["op"], o["summary"], tuple(o["dtypes"]), keys, passes)
    return out


def bind(fam, decl, shapes, options):
    """Sizes and shape keys read off the arrays' dimensions: each dimension
    that is exactly a name takes its value from the first array declaring
    it. shapes: {argument name: shape}. Returns (env, origin, bad): origin
    names where each value came from, bad the first argument whose number
    of dimensions is not the declared one (None)."""
    env, origin, bad = {}, {}, None
    for a in decl.args:
        shape = shapes.get(a.name)
        if shape is None or not a.dims:
            continue
        if len(shape) != len(a.dims):
            bad = bad or a
            continue
        for i, (d, n) in enumerate(zip(a.dims, shape)):
            name = bare_name(d, fam, options) or default_name(d)
            if name and name not in env:
                env[name], origin[name] = n, f"{a.name}.shape[{i}]"
    for a in decl.args:  # then `name + c` and `c * name` dimensions, for what is unbound
        shape = shapes.get(a.name)
        if shape is None or len(shape) != len(a.dims):
            continue
        for i, (d, n) in enumerate(zip(a.dims, shape)):
            off, sc = offset_name(d), scaled_name(d)
            if off and off[0] not in env:
                env[off[0]], origin[off[0]] = n - off[1], f"{a.name}.shape[{i}] - {off[1]}"
            elif sc and sc[0] not in env:  # (an odd n: the shape check names the argument)
                env[sc[0]], origin[sc[0]] = n // sc[1], f"{a.name}.shape[{i}] / {sc[1]}"
    for a in decl.args:  # last, `round_up(name, c)`: name is the pitch, its tail taken as part
        shape = shapes.get(a.name)  # of it (the quantisers write zeros there: the wgrad sums
        if shape is None or len(shape) != len(a.dims):  # over them to the same result)
            continue
        for i, (d, n) in enumerate(zip(a.dims, shape)):
            ru = rounded_name(d)
            if ru and ru[0] not in env:
                env[ru[0]], origin[ru[0]] = n, f"{a.name}.shape[{i}]"
    return env, origin, bad
