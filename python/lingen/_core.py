"""Specs, contexts, kernels, and the one call path every op goes through.

A call binds the arrays it is given to the op's declared arguments: each
dimension that is exactly a run-time size or a shape key ("tokens",
"hidden") takes its value from the array; the spec is built from those, the
element type and the keyword options, parsed and validated by the library
(errors name the JSON path, what was found and what is allowed), and the
kernel comes from the context (memory cache, disk cache, NVRTC). Every
argument is then checked against the shape the library computes from the
declaration, outputs the caller did not pass are allocated, and the kernel
is launched on the stream. All of that is remembered under the arrays'
shapes, element types and options: a second call with the same shapes
costs a dict lookup, the per-array checks and the launch."""
import ast
import ctypes
import json
import os
import sys
import threading

from . import _arrays, _cuda, _lib
from ._families import bind, families
from ._checks import (_check_options, _kind_name, _renamed, _where, check_flag,  # noqa: F401
                      check_option)
from ._lib import LingenError, SpecError


class Spec:
    """One kernel spec, parsed and validated by the library."""

    def __init__(self, spec):
        lib = _lib.load()
        text = spec if isinstance(spec, str) else json.dumps(spec)
        p = ctypes.c_void_p()
        _lib.check(lib.lg_spec_parse(text.encode(), ctypes.byref(p)))
        self._p = p.value
        self._lib = lib
        self.canonical = _lib.take_string(lib.lg_spec_canonical(self._p))
        self.entry = lib.lg_spec_entry(self._p).decode()
        d = json.loads(self.canonical)
        self.op, self.pass_ = d["op"], d["pass"]

    def __del__(self):
        p, self._p = getattr(self, "_p", None), None
        if p:
            self._lib.lg_spec_free(p)

    def __repr__(self):
        return f"lingen.Spec({self.canonical})"

    @property
    def decl(self):
        return families()[self.op].passes[self.pass_]

    def arg_shape(self, i, sizes):
        """Dimensions of argument i at the run-time sizes (the library's
        evaluation of the declared shape)."""
        n = len(sizes)
        sz = (ctypes.c_int64 * max(n, 1))(*sizes)
        dims = (ctypes.c_int64 * 8)()
        nd = ctypes.c_int()
        _lib.check(self._lib.lg_spec_arg_shape(self._p, i, sz, n, dims, 8, ctypes.byref(nd)))
        return tuple(dims[k] for k in range(nd.value))

    def arg_used(self, i):
        """0: left out; 1: used; 2: optional by its role, required by this spec."""
        return max(self._lib.lg_spec_arg_used(self._p, i), 0)

    def generate(self, arch="sm_90a"):
        """The generated CUDA source for arch (no GPU, no NVRTC needed)."""
        p = ctypes.c_void_p()
        _lib.check(self._lib.lg_generate(self._p, arch.encode(), ctypes.byref(p)))
        return _lib.take_string(p.value)


class Kernel:
    """A loaded kernel (owned by its context)."""

    def __init__(self, ctx, spec, ptr):
        self.context, self.spec, self._p = ctx, spec, ptr
        self.decl = spec.decl
        self.workspace_size = ctx._lib.lg_kernel_workspace_size(ptr)
        n = len(self.decl.args)
        self._ptr_t = ctypes.c_uint64 * n
        self._size_t = ctypes.c_int64 * max(len(self.decl.sizes), 1)

    def run(self, sizes, ptrs, stream=0):
        """Launch with the run-time sizes and device pointers in declared
        order (0 for an argument the spec does not use) on a stream handle."""
        self.launch(self._size_t(*sizes), len(sizes), self._ptr_t(*ptrs), len(ptrs), stream)

    def launch(self, sizes, nsizes, ptrs, nptrs, stream):
        """run() of ctypes arrays (self._size_t, self._ptr_t) made by the caller."""
        lib = self.context._lib
        st = lib.lg_kernel_run(self._p, stream or None, sizes, nsizes, ptrs, nptrs)
        if st:
            raise _lib.fail(st, lib)


def _package_tuning():
    for d in _lib.package_dirs():
        if os.path.isdir(os.path.join(d, "tuning")):
            return os.path.join(d, "tuning")
    return None


def _aot_table(aot):
    """lg_aot_table address from a path to a shared library built from
    lingen_aot.c, a ctypes library holding lingen_aot(), or an address."""
    if isinstance(aot, int):
        return aot
    lib = ctypes.CDLL(os.fspath(aot)) if isinstance(aot, (str, os.PathLike)) else aot
    fn = getattr(lib, "lingen_aot", None)
    if fn is None:
        raise ValueError("aot: the library has no lingen_aot() (build it from the "
                         "lingen_aot.c that `lingen aot` writes)")
    fn.restype, fn.argtypes = ctypes.c_void_p, []
    return fn(), lib


class Context:
    """A lingen context: the arch, the caches, a bundle or an aot table.

    Context() JITs for the current GPU's arch (NVRTC, memory and disk cache).
    Context(bundle="out/bundle") takes every kernel from a `lingen build`
    folder and never loads NVRTC; Context(aot="libkernels.so") from a shared
    library built from the lingen_aot.c of `lingen aot`. arch, cache_dir and
    tuning are those of lg_ctx_opts (lingen.h); tuning defaults to
    $LINGEN_TUNING, else the tuning files installed with the package.
    A context lives until close(); no launch may then be in flight.
    """

    def __init__(self, arch=None, cache_dir=None, bundle=None, aot=None, tuning=None):
        lib = _lib.load()
        self._lib = lib
        self._keep = []
        if tuning is None and not os.environ.get("LINGEN_TUNING"):
            tuning = _package_tuning()
        enc = (lambda v: os.fsencode(v) if v is not None else None)
        opts = _lib.CtxOpts(enc(arch), enc(cache_dir), enc(bundle), None, enc(tuning))
        if aot is not None:
            table = _aot_table(aot)
            if isinstance(table, tuple):
                table, keep = table
                self._keep.append(keep)
            opts.aot = table
        p = ctypes.c_void_p()
        _lib.check(lib.lg_ctx_create(ctypes.byref(opts), ctypes.byref(p)))
        self._p = p.value
        self.arch = lib.lg_ctx_arch(self._p).decode()
        self._kernels = {}
        self._plans = {}
        self._fast = {}  # torch tensors' key -> _Fast (call's cached launches)
        self._mu = threading.Lock()

    def close(self):
        """Unload every kernel (no launch of this context may be in flight)."""
        p, self._p = self._p, None
        if p:
            self._kernels.clear()
            self._plans.clear()
            self._fast.clear()
            self._lib.lg_ctx_destroy(p)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"lingen.Context(arch={self.arch!r})"

    def _alive(self):
        if not self._p:
            raise LingenError("this lingen.Context is closed")

    def kernel(self, spec):
        """The loaded kernel of a spec (a Spec, a dict or JSON text)."""
        self._alive()
        if not isinstance(spec, Spec):
            spec = Spec(spec)
        k = self._kernels.get(spec.canonical)
        if k is None:
            p = ctypes.c_void_p()
            _lib.check(self._lib.lg_kernel_get(self._p, spec._p, ctypes.byref(p)), self._lib)
            with self._mu:
                k = self._kernels.setdefault(spec.canonical, Kernel(self, spec, p.value))
        return k

    def prepare(self, specs, jobs=0):
        """Make the cubins of many specs at once, in `jobs` threads (0: one a
        CPU; lg_ctx_cubins): a cold model step compiles in about the time of
        its slowest kernel. Later kernel() calls only load. No GPU needed."""
        self._alive()
        specs = [s if isinstance(s, Spec) else Spec(s) for s in specs]
        arr = (ctypes.c_void_p * max(len(specs), 1))(*[s._p for s in specs])
        _lib.check(self._lib.lg_ctx_cubins(self._p, arr, len(specs), int(jobs)), self._lib)

    def cubin(self, spec):
        """The cubin bytes of a spec for the context's arch (no GPU needed)."""
        self._alive()
        if not isinstance(spec, Spec):
            spec = Spec(spec)
        data, size = ctypes.c_void_p(), ctypes.c_size_t()
        _lib.check(self._lib.lg_ctx_cubin(self._p, spec._p, ctypes.byref(data),
                                          ctypes.byref(size)), self._lib)
        return ctypes.string_at(data.value, size.value)


_default = None
_default_lock = threading.Lock()


def default_context():
    """The process-wide context the ops use when given none."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = Context()
    return _default


def set_default_context(ctx):
    """Make ctx (a Context, or None for a fresh JIT context on next use) the
    one ops use when given none. Returns the previous one."""
    global _default
    with _default_lock:
        prev, _default = _default, ctx
    return prev


# ------------------------------------------------------------------ calls

def stream_handle(stream):
    """A CUstream handle from an int, a torch/CuPy stream or a __cuda_stream__."""
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr", "handle"):
        v = getattr(stream, attr, None)
        if isinstance(v, int):
            return v
    f = getattr(stream, "__cuda_stream__", None)
    if f is not None:
        return int(f()[1])
    raise TypeError(f"stream: found {type(stream).__qualname__}, expected an int CUstream "
                    "handle, a torch.cuda.Stream, a cupy Stream or an object with __cuda_stream__")


def _default_stream(views, device):
    for v in views:
        if v.kind == "torch":
            torch = sys.modules["torch"]
            raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
            if raw is not None:  # the handle without a Stream object
                return raw(device)
            return torch.cuda.current_stream(device).cuda_stream
    for v in views:
        mod = type(v.obj).__module__
        if mod.startswith("cupy"):
            return sys.modules["cupy"].cuda.get_current_stream().ptr
    return 0


def _freeze(o):
    if isinstance(o, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in o.items()))
    if isinstance(o, (list, tuple)):
        return tuple(_freeze(v) for v in o)
    return o


def _set_path(d, path, value):
    parts = path.split(".")
    for p in parts[:-1]:
        d = d.setdefault(p, {})
    d[parts[-1]] = value


class _Plan:
    """What a call with given shapes, types and options resolves to: per
    argument (name, kind, shape, element type, declaration)."""
    __slots__ = ("spec", "kernel", "sizes", "decl", "args", "required")


IN, OUT, OPT_OUT, SKIP_IN, SKIP_OUT, WORKSPACE = range(6)


def _kinds(decl, used):
    for a in decl.args:
        if a.role == "workspace":
            yield WORKSPACE
        elif a.is_input:
            yield IN if used[a.index] else SKIP_IN
        elif not used[a.index]:
            yield SKIP_OUT
        else:
            yield OPT_OUT if a.role == "optional_out" else OUT


def declared(op, path):
    """The declared default of a family's key (for the ops' None)."""
    return families()[op].key(path).default


def quant_options(round_scale, output, **more):
    """The blockwise FP8 families' options by spec path (flat, so a call's
    options hash cheaply)."""
    return {"quant.round_scale": round_scale, "quant.output": output, **more}


def _prepare(fn, ctx, op, pass_, views, options, sizes_over, names=None):
    fam = families()[op]
    decl = fam.passes[pass_]
    options = dict(options)  # "dtype": the spec's dtype, where no argument tells it
    dtype_opt = options.pop("dtype", None)
    options = _check_options(fn, fam, options, names or {})
    import numbers
    for name, v in sizes_over.items():
        if not isinstance(v, numbers.Integral) or isinstance(v, bool):
            raise TypeError(_where(fn, f"{name}: found {v!r} ({_kind_name(v)}), expected an int"))
    env, origin, bad = bind(fam, decl, {n: v.shape for n, v in views.items()}, options)
    if bad is not None:
        raise ValueError(_where(fn, f"{bad.name}: found shape {views[bad.name].shape}, expected "
                                    f"{len(bad.dims)} dimensions [{bad.shape}]"))
    sizes = []
    for i, s in enumerate(decl.sizes):
        if s in sizes_over:
            sizes.append(int(sizes_over[s]))
        elif s in env:
            sizes.append(int(env[s]))
        elif not any(s in _names(a) for a in decl.args if a.name in views):
            # only in the shapes of arguments not given (or in none): not
            # read by this call; its declared minimum (cross_entropy's
            # vocab_start 0, shards 1)
            sizes.append(int(decl.size_ranges[i][0]))
        else:
            raise ValueError(_where(fn, f"cannot tell the run-time size {s!r} from the arguments; "
                                        f"pass sizes={{{s!r}: ...}}"))
    spec = {"op": op, "pass": pass_}
    dtype = None
    for a in decl.args:
        v = views.get(a.name)
        if a.elem == "dtype" and v is not None:
            got = [e for e in v.elems if e in fam.dtypes]
            if not got:
                raise TypeError(_where(fn, f"{a.name}: found {v.dtype}, expected one of "
                                           f"{', '.join(fam.dtypes)}"))
            dtype = dtype or got[0]
    spec["dtype"] = dtype or dtype_opt or fam.dtypes[0]
    for a in decl.args:  # labels: int64, or int32 (the spec's "index" key)
        v = views.get(a.name)
        if a.elem == "index" and v is not None and "index" not in options:
            got = [e for e in v.elems if e in ("int64", "int32")]
            if not got:
                raise TypeError(_where(fn, f"{a.name}: found {v.dtype}, expected int64 or int32"))
            spec["index"] = got[0]
    for k in fam.keys:
        if k.shape:
            if k.path in env:
                _set_path(spec, k.path, int(env[k.path]))
            elif k.required and k.path not in options:
                raise ValueError(_where(fn, f"cannot tell {k.path!r} from the arguments"))
    for key, val in options.items():
        if val is not None:
            _set_path(spec, key, val)
    for k in fam.keys:  # a required group whose keys all take their defaults
        if k.type == "object" and k.required and "." not in k.path and k.path not in spec:
            spec[k.path] = {}
    try:
        s = Spec(spec)
    except SpecError as e:
        told = ", ".join(f"{n} = {env[n]} from {origin[n]}" for n in origin if fam.key(n))
        msg = str(e)
        if msg.startswith("<input>: "):  # the spec is no file: the path is the argument
            msg = msg[len("<input>: "):]
        raise SpecError(_where(fn, msg + (f" ({told})" if told else "")), e.status) from None
    plan = _Plan()
    plan.spec, plan.kernel, plan.sizes, plan.decl = s, None, tuple(sizes), decl
    used = [s.arg_used(a.index) for a in decl.args]
    plan.required = tuple(u == 2 for u in used)
    index = spec.get("index", "int64")
    plan.args = tuple((a.name, kind, s.arg_shape(a.index, sizes) if kind != WORKSPACE else None,
                       spec["dtype"] if a.elem == "dtype" else index if a.elem == "index" else a.elem,
                       a)
                      for a, kind in zip(decl.args, _kinds(decl, used)))
    return plan


def _names(a):
    """The size and key names argument a's shape mentions."""
    return {n.id for d in a.dims for n in ast.walk(d) if isinstance(n, ast.Name)}


def _check_view(fn, a, v, shape, elem, output):
    """Everything about one array but its device; shape and element type
    only for a new plan (the plan's key holds them)."""
    if shape is not None:
        if elem not in v.elems:
            raise TypeError(_where(fn, f"{a.name}: found {v.dtype}, expected {elem}"))
        if v.shape != shape:
            raise ValueError(_where(fn, f"{a.name}: found shape {v.shape}, expected {shape} "
                                        f"[{a.shape}]"))
    if not v.contiguous:
        raise ValueError(_where(fn, f"{a.name}: not contiguous; expected a C-contiguous "
                                    "(row-major, dense) array"))
    if output and v.readonly:
        raise ValueError(_where(fn, f"{a.name}: read-only, but it is an output"))
    if v.ptr % a.align:
        raise ValueError(_where(fn, f"{a.name}: address 0x{v.ptr:x} is not {a.align}-byte "
                                    "aligned"))


def _device_of(fn, a, v, device):
    """The device of v (CAI: asked of the driver), the same as the others'."""
    if v.device is None and v.ptr:
        v.device = _cuda.pointer_device(v.ptr)
        if v.device is None:
            raise ValueError(_where(fn, f"{a.name}: 0x{v.ptr:x} is not device memory"))
    if device is not None and v.device is not None and v.device != device:
        raise ValueError(_where(fn, f"{a.name}: on device {v.device}, the other arrays on "
                                    f"device {device}"))
    return v.device if v.device is not None else device


def _options_key(options):
    try:
        k = tuple(options.items())
        hash(k)
        return k
    except TypeError:  # a dict value (a tile)
        return _freeze(options)


def _view(fn, name, obj, stream):
    try:
        v = _arrays.view(obj, stream or 0)
    except TypeError as e:
        raise TypeError(_where(fn, f"{name}: {e}")) from None
    if v.device is None and v.kind != "cai":
        raise ValueError(_where(fn, f"{name}: found {v.dtype}, expected a CUDA array"))
    return v


def _check_plan(fn, plan, views, fresh):
    """Each array against the plan (shape and element type for a fresh
    plan); whether any is a torch tensor."""
    torch_arrays = False
    for name, kind, shape, elem, a in plan.args:
        v = views.get(name)
        if v is None:
            if kind == IN and (a.role == "in" or plan.required[a.index]):
                raise TypeError(_where(fn, f"{name} is required"))
            continue
        if kind == SKIP_OUT:
            raise ValueError(_where(fn, f"{name}: given, but this call does not write it "
                                        "(see the op's options)"))
        _check_view(fn, a, v, shape if fresh else None, elem, kind in (OUT, OPT_OUT))
        torch_arrays = torch_arrays or v.kind == "torch"
    return torch_arrays


def check(fn, op, pass_, arrays, options, names=None):
    """The checks of call() on shapes and element types alone, nothing
    launched, no context: arrays {name: (shape, elems, dtype)} (a torch
    fake kernel's meta tensors). Raises as call() does."""
    views = {n: _arrays.View(None, 0, tuple(shape), elems, dtype, 0, None, "meta", False, True)
             for n, (shape, elems, dtype) in arrays.items()}
    unknown = set(views) - {a.name for a in families()[op].passes[pass_].args}
    if unknown:
        raise TypeError(_where(fn, f"no argument named {', '.join(sorted(unknown))}"))
    plan = _prepare(fn, None, op, pass_, views, options, {}, names)
    _check_plan(fn, plan, views, True)
    return plan


def call(fn, op, pass_, arrays, options=None, *, out=None, skip=(), sizes=None, stream=None,
         context=None, alloc=None, names=None):
    """Run one op. arrays: {argument name: array or None} (inputs, and
    outputs to write in place); options: spec keys by path ("eps",
    "quant.output", "tile"); out: more outputs by name; skip: optional
    outputs not wanted; sizes: run-time sizes the arrays cannot tell;
    names: the Python parameter of an option path where it differs
    ({"quant.round_scale": "round_scale"}), for errors. Every argument is
    checked before the context is made (no GPU: an argument error is
    reported as such). Returns {output name: array or None (not produced)}."""
    ctx = context if context is not None else _default
    fast_key = None  # torch tensors on torch's stream: a cached launch
    if out is None and alloc is None and sizes is None and stream is None and type(ctx) is Context:
        results, fast_key = _fast.call(ctx, op, pass_, arrays, options, skip)
        if results is not None:
            return results
    if ctx is not None and not isinstance(ctx, Context):
        raise TypeError(_where(fn, f"context: found {context!r} ({_kind_name(context)}), "
                                   "expected a lingen.Context or None"))
    if out is not None and not isinstance(out, dict):
        raise TypeError(_where(fn, f"out: found {out!r} ({_kind_name(out)}), expected a dict "
                                   "{output name: array} or None"))
    if alloc is not None and not callable(alloc):
        raise TypeError(_where(fn, f"alloc: found {alloc!r} ({_kind_name(alloc)}), expected "
                                   "alloc(shape, elem) -> array, or None"))
    options = options or {}
    try:
        hstream = None if stream is None else stream_handle(stream)
    except TypeError as e:
        raise TypeError(_where(fn, str(e))) from None
    views = {}
    for src in ((arrays, out) if out else (arrays,)):
        for name, obj in src.items():
            if obj is not None:
                views[name] = _view(fn, (names or {}).get(name, name), obj, hstream)
    key = (op, pass_, _options_key(options), _freeze(sizes) if sizes else (), tuple(skip),
           tuple([(n, v.shape, v.elems) for n, v in views.items()]))
    plan = ctx._plans.get(key) if ctx is not None else None
    fresh = plan is None
    if fresh:
        unknown = set(views) - {a.name for a in families()[op].passes[pass_].args}
        if unknown:
            raise TypeError(_where(fn, f"no argument named {', '.join(sorted(unknown))}"))
        try:
            plan = _prepare(fn, ctx, op, pass_, views, options, sizes or {}, names)
            _check_plan(fn, plan, views, True)
        except (TypeError, ValueError) as e:
            raise _renamed(fn, e, names) from None
    torch_arrays = _check_plan(fn, plan, views, False) if not fresh else \
        any(v.kind == "torch" for v in views.values())
    device = None
    for name, kind, shape, elem, a in plan.args:
        v = views.get(name)
        if v is not None:
            device = _device_of(fn, a, v, device)
    if device is None:
        device = 0
    allocate = alloc
    if allocate is None and torch_arrays:
        allocate = _torch_alloc(device)
    if allocate is None:
        for name, kind, shape, elem, a in plan.args:
            if (kind == OUT or (kind == OPT_OUT and name not in skip)) and name not in views:
                raise TypeError(_where(fn, f"{name}: cannot allocate outputs for these "
                                           "arrays; pass it in out= or give alloc="))
    if ctx is None:
        ctx = default_context()
    if fresh:
        if len(ctx._plans) >= 4096:  # shapes seen; kernels stay cached in the context
            ctx._plans.clear()
        plan = ctx._plans.setdefault(key, plan)
    if hstream is None:
        hstream = _default_stream(views.values(), device)
    prev = _cuda.enter_device(device)
    try:
        k = plan.kernel
        if k is None:  # the first call with these shapes: JIT, cache or bundle
            k = plan.kernel = ctx.kernel(plan.spec)
        for v in views.values():  # CAI v3: wait for the producer's stream
            if v.stream is not None and v.stream not in (hstream, 1 if hstream == 0 else -1):
                _cuda.wait_stream(hstream, v.stream)
        ptrs, results, keep, freeing = [], {}, None, None
        for name, kind, shape, elem, a in plan.args:
            v = views.get(name)
            if kind == IN:
                ptrs.append(v.ptr if v is not None else 0)
            elif kind == OUT or kind == OPT_OUT:
                if v is not None:
                    results[name] = v.obj
                    ptrs.append(v.ptr)
                elif kind == OPT_OUT and name in skip:
                    results[name] = None
                    ptrs.append(0)
                else:
                    obj = results[name] = allocate(shape, elem)
                    ptrs.append(_arrays.view(obj).ptr)
            elif kind == WORKSPACE:
                n = k.workspace_size
                if not n:
                    ptrs.append(0)
                elif allocate is not None:
                    keep = allocate((n,), "uint8")  # alive through the launch
                    ptrs.append(_arrays.view(keep).ptr)
                else:
                    freeing = _cuda.alloc_async(n, hstream)
                    ptrs.append(freeing)
            else:
                if kind == SKIP_OUT:
                    results[name] = None
                ptrs.append(0)
        k.run(plan.sizes, ptrs, hstream)
        if freeing is not None:
            _cuda.free_async(freeing, hstream)
    finally:
        _cuda.leave_device(prev)
    if fast_key is not None and torch_arrays:
        _fast.remember(ctx, fast_key, plan, k, views, skip)
    return results

from . import _fast  # noqa: E402 (call's fast launches and torch's allocator need the above)
from ._fast import _torch_alloc, _torch_allocs  # noqa: E402,F401
