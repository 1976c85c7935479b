"""The argument checks every call makes before anything reaches the device:
option values against their declared key types, Python-only flags, and the
names errors give ("lingen.OP: ARG: found ..., expected ...")."""
import math
import numbers

from ._lib import LingenError


def _where(fn, msg):
    return f"{fn}: {msg}"


def _kind_name(v):
    return type(v).__qualname__


def _expect(k):
    """What a key of type k.type takes, in words."""
    if k.type == "enum":
        return "one of " + ", ".join(repr(v) for v in k.values)
    return {"bool": "a bool (True or False)", "int": "an int",
            "number": "a finite number (int or float)",
            "object": "a dict or None"}.get(k.type, k.type)


def check_option(fn, k, value, name=None):
    """value against its key's declared type (the library checks ranges and
    values); TypeError / ValueError "fn: name: found ..., expected ..."
    (name: the Python parameter, default the key's path)."""
    name = name or k.path
    if k.type == "bool":
        ok = isinstance(value, bool) or type(value).__name__ == "bool_"
    elif k.type == "int":
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    elif k.type == "number":
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        if ok and not math.isfinite(value):
            raise ValueError(_where(fn, f"{name}: found {value!r}, expected a finite number"))
    elif k.type == "enum":
        ok = isinstance(value, str)
    elif k.type == "object":
        ok = isinstance(value, dict)
    else:
        ok = True
    if not ok:
        raise TypeError(_where(fn, f"{name}: found {value!r} ({_kind_name(value)}), expected "
                                   f"{_expect(k)}"))


def _plain(v):
    """A checked option value as JSON takes it (numpy scalars as Python's)."""
    if isinstance(v, bool) or type(v).__name__ == "bool_":
        return bool(v)
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real):
        return float(v)
    return v


def _check_options(fn, fam, options, names):
    """options checked against the declared keys' types, as JSON values. An
    option's name in errors: names[path], else the path's last part
    ("quant.round_scale" is the ops' round_scale)."""
    plain = {}
    for path, value in options.items():
        if value is None:
            continue
        name = names.get(path, path.rsplit(".", 1)[-1])
        k = fam.key(path)
        if k is None:
            raise TypeError(_where(fn, f"no option {name!r} (the spec keys of {fam.op}: "
                                       f"{', '.join(k.path for k in fam.keys)})"))
        check_option(fn, k, value, name)
        plain[path] = _plain(value)
    return plain


def check_flag(fn, name, value):
    """A Python-only bool parameter (one that picks an enum or the outputs)."""
    if not (isinstance(value, bool) or type(value).__name__ == "bool_"):
        raise TypeError(_where(fn, f"{name}: found {value!r} ({_kind_name(value)}), expected a "
                                   "bool (True or False)"))
    return bool(value)


def _renamed(fn, e, names):
    """e with a declared name in its "fn: NAME: " replaced by the Python
    parameter's (names: {declared: parameter})."""
    msg = str(e)
    for decl_name, param in (names or {}).items():
        if msg.startswith(f"{fn}: {decl_name}: "):
            msg = f"{fn}: {param}: " + msg[len(f"{fn}: {decl_name}: "):]
            e = type(e)(msg, e.status) if isinstance(e, LingenError) else type(e)(msg)
            break
    return e
