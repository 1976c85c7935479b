"""The FP8 GEMM torch ops (torch.ops.lingen.fp8_gemm_*, fp8_grouped_gemm_*)
on meta tensors, i.e. their fake kernels, as torch.compile traces them:
the output dtype the real op gives (bf16 by default, fp32 when asked
with dtype=), no `accumulate` that a functional op cannot honour, a dtype
outside the family's refused with the allowed values. No GPU needed."""
import pytest

torch = pytest.importorskip("torch")
import lingen  # noqa: E402
import lingen.torch  # noqa: E402,F401
from lingen import _families  # noqa: E402
from lingen.torch import _ops  # noqa: E402

M = dict(device="meta")
E4 = torch.float8_e4m3fn
T, N, K, E = 256, 384, 512, 4


def e4(*s):
    return torch.empty(*s, dtype=E4, **M)


def f32(*s):
    return torch.empty(*s, dtype=torch.float32, **M)


def counts():
    return torch.empty(E, dtype=torch.int32, **M)


CALLS = {
    "fp8_gemm_forward": (lambda: (e4(T, K), f32(K // 128, T), e4(N, K), f32(N // 128, K // 128)),
                         (T, N)),
    "fp8_gemm_dgrad": (lambda: (e4(T, N), f32(N // 128, T), e4(K, N), f32(K // 128, N // 128)),
                       (T, K)),
    "fp8_gemm_wgrad": (lambda: (e4(N, T), f32(T // 128, N), e4(K, T), f32(T // 128, K)), (N, K)),
    "fp8_grouped_gemm_forward": (lambda: (e4(T, K), f32(K // 128, T), e4(E, N, K),
                                          f32(E, N // 128, K // 128), counts()), (T, N)),
    "fp8_grouped_gemm_dgrad": (lambda: (e4(T, N), f32(N // 128, T), e4(E, K, N),
                                        f32(E, K // 128, N // 128), counts()), (T, K)),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_fake_gives_the_real_dtype(name):
    op = getattr(torch.ops.lingen, name)
    args, shape = CALLS[name][0](), CALLS[name][1]
    y = op(*args)
    assert y.dtype == torch.bfloat16 and tuple(y.shape) == shape
    y = op(*args, dtype="fp32")
    assert y.dtype == torch.float32 and tuple(y.shape) == shape
    with pytest.raises(ValueError, match=r"dtype: found 'e4m3', allowed: 'bf16', 'fp32'"):
        op(*args, dtype="e4m3")


@pytest.mark.parametrize("name", sorted(CALLS))
def test_schema_has_no_accumulate_and_takes_dtype(name):
    schema = str(getattr(torch.ops.lingen, name).default._schema)
    assert "accumulate" not in schema and 'str dtype="bf16"' in schema


def test_only_output_typed_families_take_dtype():
    for op, fam in _families.families().items():
        for p, decl in fam.passes.items():
            if any(a.role == "list" for a in decl.args):
                continue
            has = "str dtype=" in _ops.schema(fam, decl)
            ins = any(a.elem == "dtype" for a in decl.args if a.is_input)
            assert has == (not ins and any(a.elem == "dtype" for a in decl.args if a.is_output)
                           and bool(fam.dtypes)), (op, p)


def test_compiled_trace_has_the_real_dtype():
    args = CALLS["fp8_gemm_forward"][0]()

    def f(*a):
        return torch.ops.lingen.fp8_gemm_forward(*a, dtype="fp32") * 2

    y = torch.compile(f, backend="eager", fullgraph=True)(*args)
    assert y.dtype == torch.float32


def _wgrad_args(t, pitch=None, **kw):
    """The columnwise copies of t tokens: rows round_up(t, 128) apart (pitch)."""
    p = (t + 127) // 128 * 128 if pitch is None else pitch
    return (torch.empty(N, p, dtype=E4, **kw), torch.empty((t + 127) // 128, N, **kw),
            torch.empty(K, p, dtype=E4, **kw), torch.empty((t + 127) // 128, K, **kw))


@pytest.mark.parametrize("t", [100, 8, 130, 1, 0, 112])
def test_wgrad_fake_takes_any_token_count(t):
    """The wgrad takes any token count: the columnwise copies' rows are
    round_up(tokens, 128) apart (the declaration's shape, which the library
    evaluates: the fake's shapes and the plain wrapper's are the same)."""
    dw = torch.ops.lingen.fp8_gemm_wgrad(*_wgrad_args(t, device="meta"))
    assert dw.shape == (N, K) and dw.dtype == torch.bfloat16
    s = lingen.Spec({"op": "fp8_gemm", "pass": "wgrad", "dtype": "bf16", "n": N, "k": K})
    assert tuple(s.arg_shape(0, [t])) == (N, (t + 127) // 128 * 128)


@pytest.mark.parametrize("t", [100, 130])
def test_wgrad_fake_refuses_unpitched_copies(t):
    """A [n, tokens] copy whose rows are not 128-byte multiples apart: the
    fake refuses it with the real op's message, the expected shape named."""
    with pytest.raises(ValueError) as fake:
        torch.ops.lingen.fp8_gemm_wgrad(*_wgrad_args(t, pitch=t, device="meta"))
    p = (t + 127) // 128 * 128
    assert str(fake.value) == (f"torch.ops.lingen.fp8_gemm_wgrad: dyt: found shape ({N}, {t}), "
                               f"expected ({N}, {p}) [n, round_up(tokens, 128)]")
