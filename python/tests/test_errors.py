"""The Python error rule, over every op and every wrong kind of argument:
an error names `lingen.OP: ARG:` and says what was found and what was
expected, before anything reaches the device. No GPU: arrays are fakes
(__cuda_array_interface__ with no memory, numpy for host arrays), and the
default context cannot be made (as on a machine without a GPU), so an
argument error that came after the context would show as that error."""
import inspect
import math
import re

import numpy as np
import pytest

import lingen
from lingen import _core, _families, _generic

from conftest import CAI, Reached

pytestmark = pytest.mark.usefixtures("no_device")

T, H, E, K, M = 64, 1024, 16, 2, 16      # tokens, hidden, experts, top_k, multiple
ROWS = T * K + E * (M - 1)               # the padded MoE rows
P = -(-T // 128) * 128                   # the columnwise copies' pitch, round_up(T, 128)
S, B, QH, KH, D = 16, 2, 8, 2, 128       # q/k norm + RoPE


def a(*shape, t="<V2"):
    return CAI(shape, t)


# op -> (positional arrays and values, keyword arguments) that pass every check.
# By hand for lingen.ops.BY_HAND's ops only: their signatures are written by
# hand (linghe's argument order, flags, launch forms), which no declaration
# tells; the generated ops' good calls are made from the declarations (good_call).
BY_HAND_GOOD = {
    "rmsnorm_quant": ((a(T, H), a(H)), {}),
    "rmsnorm": ((a(T, H), a(H)), {}),
    "rmsnorm_backward": ((a(T, H), a(T, H), a(H)), {}),
    "fp8_quant_weight": ((a(256, H),), {}),
    "qk_norm_rope": ((a(S, B, (QH + 2 * KH) * D), a(D), a(D), a(S, D // 2, t="<f4")),
                     {"q_heads": QH, "kv_heads": KH}),
    "qk_norm_rope_backward": ((a(B, S, QH, D), a(B, S, KH, D), a(B, S, KH, D),
                               a(S, B, (QH + 2 * KH) * D), a(D), a(D), a(S, D // 2, t="<f4")), {}),
    "group_rmsnorm_gate": ((a(B, S, 512), a(S, B, 512), a(512)), {}),
    "group_rmsnorm_gate_backward": ((a(S, B, 512), a(B, S, 512), a(S, B, 512), a(512)), {}),
    "cross_entropy_forward": ((a(T, 1000), a(T, t="<i8")), {}),
    "cross_entropy_fused": ((a(T, 1000), a(T, t="<i8"), a(1, t="<f4")), {}),
    "cross_entropy_backward": ((a(T, 1000), a(T, t="<i8"), a(T, t="<f4"), a(T, t="<f4"),
                                a(T, t="<f4")), {}),
    "cross_entropy_shard_stats": ((a(T, 1000), a(T, t="<i8"), 0, 2000), {}),
    "cross_entropy_merge": ((a(2, T, 6, t="<f4"), a(T, t="<i8"), 2000), {}),
    "swiglu_quant_backward": ((a(T, 256), a(T, 512)), {}),
    "batch_swiglu_quant_backward": ((a(T, 256), a(T, 512), a(T, 1, t="<f4"), a(4, t="<i4")), {}),
    "router_gemm_backward": ((a(T, E, t="<f4"), a(T, H), a(E, H)), {}),
    "rmsnorm_router": ((a(T, H), a(H), a(E, H)), {}),
    "moe_row_map": ((a(T, E, t="|u1"),), {"top_k": K}),
    "moe_permute": ((a(T, H), a(T, E, t="<i4"), a(E + 1, t="<i4"), a(E, t="<i4")), {"top_k": K}),
    "moe_permute_backward": ((a(ROWS, H), a(T, E, t="<i4")), {"top_k": K}),
    "moe_unpermute": ((a(ROWS, H), a(T, E, t="<i4")), {"top_k": K}),
    "moe_unpermute_backward": ((a(T, H), a(T, E, t="<i4"), a(E + 1, t="<i4"), a(E, t="<i4")),
                               {"top_k": K}),
    "moe_permute_quant": ((a(T, H), a(ROWS, t="<i4"), a(E, t="<i4")), {"top_k": K}),
    "fp8_gemm": ((a(T, H, t="|V1"), a(H // 128, T, t="<f4"), a(512, H, t="|V1"),
                  a(4, H // 128, t="<f4")), {}),
    "fp8_gemm_dgrad": ((a(T, 512, t="|V1"), a(4, T, t="<f4"), a(H, 512, t="|V1"),
                        a(H // 128, 4, t="<f4")), {}),
    "fp8_gemm_wgrad": ((a(512, P, t="|V1"), a(1, 512, t="<f4"), a(H, P, t="|V1"),
                        a(1, H, t="<f4")), {}),
    "fp8_grouped_gemm": ((a(T, H, t="|V1"), a(H // 128, T, t="<f4"), a(E, 512, H, t="|V1"),
                          a(E, 4, H // 128, t="<f4"), a(E, t="<i4")), {}),
    "fp8_grouped_gemm_dgrad": ((a(T, 512, t="|V1"), a(4, T, t="<f4"), a(E, H, 512, t="|V1"),
                                a(E, H // 128, 4, t="<f4"), a(E, t="<i4")), {}),
    "fp8_grouped_gemm_wgrad": ((a(512, T, t="|V1"), a(-(-T // 128) + E, 512, t="<f4"),
                                a(H, T, t="|V1"), a(-(-T // 128) + E, H, t="<f4"), a(E, t="<i4")), {}),
    "grad_norm": (([a(T, t="<f4"), a(H)],), {}),
    "count_zero": (([a(T, t="<f4")],), {}),
}

# the CAI typestr of each declared element type
TYPESTR = {"bf16": "<V2", "fp32": "<f4", "e4m3": "|V1", "int32": "<i4", "int64": "<i8",
           "uint8": "|u1"}


def good_call(op):
    """A generated op's good call, from its family pass's declaration: the
    first run-time size 64 and the others 4 (within their ranges), each
    integer shape key a multiple of its declared minimum, at least 16 and
    unlike the values before it (a swapped dimension shows), every other key its
    default (else its minimum or first value); each input an array of its
    declared shape and element type ("dtype": the family's first dtype; an
    enum key's name: that key's value), positionally in declared order; the
    keyword keys without a default given."""
    fam_name, pass_ = lingen.ops.generated_target(op)
    fam = lingen.families()[fam_name]
    decl = fam.passes[pass_]
    env = {n: min(hi, max(lo, 64 if i == 0 else 4))
           for i, (n, (lo, hi)) in enumerate(zip(decl.sizes, decl.size_ranges))}
    keys = {}
    for k in fam.keys:
        if k.tile or k.type == "object":
            continue
        v = k.default
        if k.type == "int" and k.shape and v is None:  # a multiple of min, >= 16, not
            v = -(-16 // k.min) * k.min                 # another dimension's value
            while v in env.values():
                v += k.min
        elif v is None:
            v = k.min if k.type == "int" else k.values[0] if k.type == "enum" else None
        keys[k.path] = v
        env[k.path] = list(k.values).index(v) if k.type == "enum" else v

    def typestr(elem):
        return TYPESTR[fam.dtypes[0] if elem == "dtype" else keys.get(elem, elem)]
    ins = [a for a in decl.args if a.role == "in"]
    args = tuple(a(*_families.eval_shape(x, env), t=typestr(x.elem)) for x in ins)
    keyword = _generic.op_keys(fam, decl)
    names = _generic._param_names(fam, keyword, {x.name for x in ins})
    return args, {names[k.path]: keys[k.path] for k in keyword if k.default is None}


GOOD = BY_HAND_GOOD | {op: good_call(op) for op in lingen.ops.generated()}
# a run-time size given as a parameter
INTS = {"vocab_start"}
# the ops of the family passes that take a tensor list (lingen.lists)
LIST_OPS = {_generic.op_name(op, p) for op, fam in lingen.families().items()
            for p, decl in fam.passes.items() if any(x.role == "list" for x in decl.args)}


def test_every_op_is_in_the_table():
    """The ops are the registry's (lingen.ops.public(): BY_HAND's and the
    generated ones, all in lingen.__all__): a hand-written one without good
    arguments in BY_HAND_GOOD would go untested (a generated one gets its
    good call from its declaration)."""
    ops = set(lingen.ops.public())
    assert ops <= set(lingen.__all__)
    missing = sorted(set(lingen.ops.BY_HAND) - set(BY_HAND_GOOD))
    assert not missing, f"hand-written ops without arguments in BY_HAND_GOOD: {missing}"
    stale = sorted(set(BY_HAND_GOOD) - set(lingen.ops.BY_HAND))
    assert not stale, f"BY_HAND_GOOD entries of ops not in lingen.ops.BY_HAND: {stale}"
    assert ops == set(GOOD)
    assert LIST_OPS and LIST_OPS <= set(lingen.ops.BY_HAND)  # the generic op takes no list


class NoDevice(Exception):
    """The default context was asked for: the driver would have been next."""


@pytest.fixture(autouse=True)
def no_default_context(monkeypatch):
    prev = lingen.set_default_context(None)

    def refuse(*a, **k):
        raise NoDevice()
    monkeypatch.setattr(_core, "default_context", refuse)
    monkeypatch.setattr(lingen.lists, "default_context", refuse)
    yield
    lingen.set_default_context(prev)


def run(op, args, kwargs):
    return getattr(lingen, op)(*args, **kwargs)


@pytest.mark.parametrize("op", sorted(GOOD))
def test_good_arguments_pass_every_check(op):
    """The table's arguments get past every check: the next step (the
    default context, or a pointer's device) is reached."""
    args, kwargs = GOOD[op]
    with pytest.raises((NoDevice, Reached)):
        run(op, args, kwargs)


def params(op):
    return inspect.signature(getattr(lingen, op)).parameters


def kind_of(p):
    """"bool", "int", "number" or None: the type of the declared key the
    parameter is (by its name, a key path's last part: round_scale is
    quant.round_scale), else by its default (Python-only flags)."""
    if p.name in INTS:
        return "int"
    for fam in lingen.families().values():
        for k in fam.keys:
            if k.path.rsplit(".", 1)[-1] == p.name and k.type in ("bool", "int", "number"):
                return k.type
    if isinstance(p.default, bool):
        return "bool"
    return None


def bound(op):
    """{parameter name: value} of the table's good call."""
    args, kwargs = GOOD[op]
    names = list(params(op))
    return dict(zip(names, args)) | kwargs


def call_with(op, **change):
    values = bound(op) | change
    ps = params(op)
    pos = [values.pop(n) for n, p in ps.items()
           if p.kind == p.POSITIONAL_OR_KEYWORD and n in values and p.default is p.empty]
    return run(op, pos, values)


def expect(op, arg, words, fn=None, exc=(TypeError, ValueError)):
    """The call raises, its message starting `lingen.OP: ARG: ` and holding
    every word."""
    def check(f):
        with pytest.raises(exc) as e:
            f()
        msg = str(e.value)
        assert msg.startswith(f"lingen.{op}: {arg}: "), msg
        for w in words:
            assert w in msg, (w, msg)
        return msg
    return check


def array_params(op):
    return [n for n, v in bound(op).items() if isinstance(v, CAI)]


CASES = []
for _op in sorted(GOOD):
    for _n in (array_params(_op) if _op not in LIST_OPS else ["tensors"]):
        for _bad in ("type", "rank", "dtype", "device"):
            if _op in LIST_OPS and _bad == "rank":
                continue  # any shape is a list item
            CASES.append((_op, _n, _bad))


@pytest.mark.parametrize("op, name, bad", CASES)
def test_bad_arrays(op, name, bad):
    """Wrong type, number of dimensions, element type, or host memory, for
    every array argument of every op."""
    if op in LIST_OPS:
        good = bound(op)["tensors"]
        item = {"type": "x", "dtype": a(T, t="<f2"), "device": np.zeros(T, np.float32)}[bad]
        where = "tensors[1]"
        f = (lambda: run(op, ([good[0], item],), {}))
        words = {"type": ["found builtins.str", "expected a CUDA array"],
                 "dtype": ["found typestr '<f2'", "expected bf16 or fp32"],
                 "device": ["found a DLPack array on the CPU", "expected a CUDA array"]}[bad]
        expect(op, where, words)(f)
        return
    v = bound(op)[name]
    shape, typestr = v.__cuda_array_interface__["shape"], v.__cuda_array_interface__["typestr"]
    new = {"type": "x", "rank": CAI((), typestr), "dtype": CAI(shape, "<f2"),
           "device": np.zeros(shape, np.float16)}[bad]
    arg = name
    words = {"type": ["found builtins.str", "expected a CUDA array"],
             "rank": ["found shape ()", "expected", "dimensions"],
             "dtype": ["found typestr '<f2'", "expected"],
             "device": ["found a DLPack array on the CPU", "expected a CUDA array"]}[bad]
    expect(op, arg, words)(lambda: call_with(op, **{name: new}))


def option_cases():
    out = []
    for op in sorted(GOOD):
        for n, p in params(op).items():
            k = kind_of(p) if n != "ord" else None  # 2, 1 or inf: test_list_arguments
            if k == "bool":
                out += [(op, n, "yes", ["found 'yes' (str)", "expected a bool"]),
                        (op, n, 1, ["found 1 (int)", "expected a bool"])]
            elif k == "int":
                out += [(op, n, "2", ["found '2' (str)", "expected an int"]),
                        (op, n, 2.0, ["found 2.0 (float)", "expected an int"])]
            elif k == "number":
                out += [(op, n, float("nan"), ["found nan", "expected a finite number"]),
                        (op, n, math.inf, ["found inf", "expected a finite number"]),
                        (op, n, "0.1", ["found '0.1' (str)", "expected a finite number"])]
    return out


def test_declared_defaults_are_not_written_twice():
    """A spec option of a hand-written op defaults to None (the declared
    default), never to a value of its own; a generated op's default is the
    declared one, read from the declaration."""
    for op in GOOD:
        generic = op in lingen.ops.generated()
        for n, p in params(op).items():
            if kind_of(p) and n not in ("rms", "dx", "dw", "row_index", "norm", "ord"):
                assert (p.default is None or p.default is p.empty
                        or generic and p.default == declared_default(op, n)), (op, n, p.default)


def declared_default(op, name):
    fam, _ = lingen.ops.generated_target(op)
    return next(k.default for k in lingen.families()[fam].keys
                if k.path.rsplit(".", 1)[-1] == name.removesuffix("_dtype"))


@pytest.mark.parametrize("op, name, value, words", option_cases())
def test_bad_options(op, name, value, words):
    """Every bool, int and number parameter of every op refuses a value of
    another kind, NaN and infinity, naming itself."""
    expect(op, name, words)(lambda: call_with(op, **{name: value}))


@pytest.mark.parametrize("op", sorted(GOOD))
@pytest.mark.parametrize("name, value, words", [
    ("context", "x", ["found 'x' (str)", "expected a lingen.Context"]),
    ("out", "x", ["found 'x'", "expected"]),
    ("stream", "fast", ["found str", "expected an int CUstream"]),
])
def test_bad_call_arguments(op, name, value, words):
    if name == "out" and op in LIST_OPS:
        words = ["found builtins.str", "expected a CUDA array"]
    expect(op, name if name != "stream" else "stream", words)(
        lambda: call_with(op, **{name: value}))


def test_shapes_name_the_argument():
    expect("rmsnorm", "w", ["found shape (1000,), expected (1024,)"])(
        lambda: lingen.rmsnorm(a(T, H), a(1000)))
    expect("moe_permute", "counts", ["found shape (15,), expected (16,)"])(
        lambda: call_with("moe_permute", counts=a(15, t="<i4")))
    expect("group_rmsnorm_gate", "gate", ["found shape (2, 16, 512), expected (16, 2, 512)"])(
        lambda: call_with("group_rmsnorm_gate", gate=a(B, S, 512)))


def test_list_arguments():
    expect("count_zero", "tensors", ["found 5 (int)", "expected a lingen.TensorList"])(
        lambda: lingen.count_zero(5))
    expect("grad_norm", "tensors[0]", ["found builtins.str", "expected a CUDA array"])(
        lambda: lingen.grad_norm(["x"]))
    expect("grad_norm", "ord", ["found 3", "expected 2, 1 or inf"])(
        lambda: lingen.grad_norm([a(T, t="<f4")], ord=3))


def test_torch_cpu_tensors_blame_the_device():
    torch = pytest.importorskip("torch")
    t = torch.zeros(T)
    expect("grad_norm", "tensors[0]", ["found a torch.float32 tensor on cpu",
                                       "expected a CUDA array"])(lambda: lingen.grad_norm([t]))
    expect("rmsnorm", "x", ["found a torch.bfloat16 tensor on cpu", "expected a CUDA array"])(
        lambda: lingen.rmsnorm(torch.zeros(T, H, dtype=torch.bfloat16), a(H)))


def test_spec_errors_name_the_key():
    """Values of the right kind outside the declared range: the library's
    validation, under the op's name."""
    msg = expect("rmsnorm", "eps", ["found 2"])(lambda: lingen.rmsnorm(a(T, H), a(H), eps=2.0))
    assert re.search("allowed|expected", msg)
    expect("moe_row_map", "top_k", ["found 0"])(
        lambda: lingen.moe_row_map(a(T, E, t="|u1"), top_k=0))
