"""Dtypes and data-type functions of the array API standard (2024.12)."""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes
from fnarray.core.array import Array
from fnarray.core.errors import TypePromotionError
from fnarray.numpy._util import aval_of

__all__ = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
           "bfloat16", "float32", "float64", "complex64", "complex128", "float8_e4m3fn",
           "float8_e5m2", "int4", "uint4", "float0", "finfo", "iinfo",
           "isdtype", "result_type", "can_cast", "promote_types", "astype", "dtype",
           "__array_namespace_info__", "__array_api_version__", "e", "pi", "inf", "nan", "newaxis",
           "euler_gamma", "issubdtype", "bool_", "generic", "number", "integer", "signedinteger",
           "unsignedinteger", "inexact", "floating", "complexfloating", "float_", "int_", "uint", "complex_",
           "double", "single", "cdouble", "csingle"]

__array_api_version__ = "2024.12"

def _scalar_type(name, d):
    def __new__(cls, x=0):
        from fnarray.numpy._creation import asarray
        return asarray(x, dtype=cls.dtype)
    doc = (f"The {d.name} scalar type (``jax.numpy.{name}``): ``{name}(x)`` is ``asarray(x, dtype={name})``; as a "
           f"dtype it is ``{d.name}`` (a dtype of the array API where the standard has it).")
    return dtypes.ScalarMeta(name, (), {"dtype": d, "__new__": __new__, "__module__": __name__, "__doc__": doc})


bool = _scalar_type("bool", dtypes.bool_)  # noqa: A001 (array API name)
int8, int16, int32, int64 = (_scalar_type(n, d) for n, d in (("int8", dtypes.int8), ("int16", dtypes.int16),
                                                              ("int32", dtypes.int32), ("int64", dtypes.int64)))
uint8, uint16, uint32, uint64 = (_scalar_type(n, d) for n, d in (("uint8", dtypes.uint8), ("uint16", dtypes.uint16),
                                                                  ("uint32", dtypes.uint32),
                                                                  ("uint64", dtypes.uint64)))
float16, bfloat16, float32, float64 = (_scalar_type(n, d) for n, d in (
    ("float16", dtypes.float16), ("bfloat16", dtypes.bfloat16), ("float32", dtypes.float32),
    ("float64", dtypes.float64)))
complex64, complex128 = _scalar_type("complex64", dtypes.complex64), _scalar_type("complex128", dtypes.complex128)
# NumPy's C-style aliases, as jax.numpy binds them (64-bit names: 32-bit results unless x64 is enabled)
float_, double, single, int_, uint = float64, float64, float32, int64, uint64
complex_, cdouble, csingle = complex128, complex128, complex64
# The low-bit dtypes (jnp.float8_e4m3fn, ...): storage and conversion types that promote with nothing but
# themselves, bool and (float8) the integers; docs/quantization.md, "Low-bit dtypes".
float8_e4m3fn, float8_e5m2, int4, uint4 = (_scalar_type(n, d) for n, d in (
    ("float8_e4m3fn", dtypes.float8_e4m3fn), ("float8_e5m2", dtypes.float8_e5m2), ("int4", dtypes.int4),
    ("uint4", dtypes.uint4)))
float0 = dtypes.float0
bool_ = bool  # jnp.bool_ / mx.bool_
# NumPy's abstract scalar types, for ``issubdtype(x.dtype, fnp.floating)`` as in jax.numpy
generic, number, integer, inexact = np.generic, np.number, np.integer, np.inexact
signedinteger, unsignedinteger, floating, complexfloating = (np.signedinteger, np.unsignedinteger, np.floating,
                                                             np.complexfloating)
finfo, iinfo = dtypes.finfo, dtypes.iinfo
e, pi, inf, nan, euler_gamma = np.e, np.pi, np.inf, np.nan, float(np.euler_gamma)
newaxis = None


def dtype(x):
    """``numpy.dtype``-like constructor: the fnarray dtype for a name, type or dtype (not in the array API).

    Differences from NumPy: Python ``float``/``int``/``complex`` give the 32-bit defaults
    (``float32``/``int32``/``complex64``); dtypes fnarray does not have raise ``DTypeError``. 64-bit names
    give 64-bit dtypes whatever ``config.enable_x64`` says (arrays of them are 32-bit while it is off).
    """
    return dtypes.as_dtype(x)


_KINDS = {
    "bool": dtypes.is_bool,
    "signed integer": dtypes.is_signed,
    "unsigned integer": dtypes.is_unsigned,
    "integral": dtypes.is_int,
    "real floating": dtypes.is_float,
    "complex floating": dtypes.is_complex,
    "numeric": lambda d: not dtypes.is_bool(d),
}


def isdtype(dtype, kind) -> bool:
    """Whether ``dtype`` is of ``kind`` (array API ``isdtype``).

    ``kind`` is a dtype, one of ``'bool'``, ``'signed integer'``, ``'unsigned integer'``,
    ``'integral'``, ``'real floating'``, ``'complex floating'``, ``'numeric'``, or a tuple of these.
    """
    d = dtypes.as_dtype(dtype)
    if isinstance(kind, tuple):
        return any(isdtype(d, k) for k in kind)
    if isinstance(kind, str):
        if kind not in _KINDS:
            raise ValueError(f"isdtype: unknown kind {kind!r}; expected one of {', '.join(_KINDS)}")
        return _KINDS[kind](d)
    return d == dtypes.as_dtype(kind)


def _pair(x):
    if isinstance(x, Array):
        return x.dtype, x.weak_type
    if isinstance(x, (np.dtype, type)) or isinstance(x, str):
        return dtypes.canonicalize(x), False  # a dtypes.ScalarMeta type is a type
    a = aval_of(x)
    return a.dtype, a.weak_type


def result_type(*arrays_and_dtypes):
    """The dtype that the arguments promote to (array API ``result_type``; ``jax.numpy.result_type``).

    Differences from NumPy: JAX's lattice with weak Python scalars (``float16`` with ``int32``
    gives ``float16`` and ``int32`` with ``1.0`` gives ``float32``; NumPy gives ``float64`` for
    both).

    Raises:
      ValueError: no arguments.
    """
    if not arrays_and_dtypes:
        raise ValueError("result_type needs at least one array or dtype")
    d, w = dtypes.result_type(*[_pair(x) for x in arrays_and_dtypes])
    return d


def promote_types(type1, type2):
    """``jax.numpy.promote_types``: the promoted dtype of two dtypes."""
    return dtypes.promote_types(type1, type2)[0]


def can_cast(from_, to, /) -> "bool":
    """Whether ``from_`` promotes to ``to`` without changing kind illegally (array API ``can_cast``).

    True exactly when ``promote_types(from_, to) == to`` in JAX's lattice (for the low-bit dtypes, which
    promote with almost nothing, NumPy's ``"safe"`` rule: ``can_cast(float8_e4m3fn, float32)`` is True).
    Differences from NumPy (and from ``jax.numpy.can_cast``, which uses NumPy's ``"safe"`` rule): integers cast
    to every floating dtype (``can_cast(int64, float32)`` is True here, False there); no
    ``casting=`` argument.
    """
    f = from_.dtype if isinstance(from_, Array) else dtypes.as_dtype(from_)
    t = dtypes.as_dtype(to)
    try:
        return dtypes.promote_types(f, t)[0] == t
    except TypePromotionError:   # a low-bit dtype, which promotes with nothing: NumPy's (ml_dtypes') safe casts
        return bool(np.can_cast(f, t, "safe"))


_ML_DTYPES = frozenset({dtypes.bfloat16, *dtypes.LOW_BIT_DTYPES})
_ML_PARENTS = frozenset({np.floating, np.inexact, np.number, np.integer, np.signedinteger, np.unsignedinteger})


def issubdtype(arg1, arg2) -> "bool":
    """``numpy.issubdtype`` over fnarray dtypes; bfloat16 and the float8 dtypes count as floating, int4 and
    uint4 as signed and unsigned integers (NumPy: they do not; jax.numpy: they do).

    The key dtype ``key<fry>`` of typed PRNG keys is a subtype of ``fa.dtypes.prng_key`` and
    ``fa.dtypes.extended`` (and of itself) only; no NumPy dtype is a subtype of those two (as
    ``jax.numpy.issubdtype``). Raises ``DTypeError`` for an ``arg1`` that is not a dtype.
    """
    if isinstance(arg2, type) and issubclass(arg2, dtypes.extended):
        return dtypes.is_key(arg1) and issubclass(arg1.type, arg2)
    if dtypes.is_key(arg1) or dtypes.is_key(arg2):
        return arg1 == arg2
    d = dtypes.as_dtype(arg1)
    if d in _ML_DTYPES and isinstance(arg2, type) and arg2 in _ML_PARENTS:   # NumPy: only np.generic
        kind = np.floating if dtypes.is_float(d) else np.signedinteger if dtypes.is_signed(d) else np.unsignedinteger
        return issubclass(kind, arg2)
    return np.issubdtype(d, arg2)


def astype(x, dtype, /, *, copy: "bool" = True, device=None):
    """``x`` converted to ``dtype`` (array API ``astype``; ``numpy.ndarray.astype``); float -> int saturates, NaN -> 0.

    Differences from NumPy: out-of-range float -> int conversions saturate and NaN gives 0 on
    every backend (docs/design.md; NumPy's result is platform-defined); complex -> real keeps the
    real part without a warning; ``copy`` is ignored (arrays are immutable). While
    ``fnarray.config.enable_x64`` is off, a 64-bit ``dtype`` gives its 32-bit counterpart with JAX's
    ``UserWarning`` (``dtypes.requested``).

    Raises:
      DTypeError: a ``dtype`` fnarray does not have.
    """
    from fnarray.core import lax
    from fnarray.numpy._util import asarray_internal
    x = asarray_internal(x)
    d = dtypes.requested(dtype, "astype")
    if dtypes.is_complex(x.dtype) and not dtypes.is_complex(d):
        pass  # keeps the real part, as the convert_element_type primitive defines
    out = lax.convert_element_type(x, d)
    if device is not None:
        from fnarray.devices.placement import device_put
        out = device_put(out, device)
    return out


class _NamespaceInfo:
    """The array API inspection object (``__array_namespace_info__()``)."""

    def capabilities(self):
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": 64}

    def default_device(self):
        from fnarray.devices.placement import default_device
        return default_device()

    def devices(self):
        from fnarray.devices.placement import devices
        return devices(all_backends=True)

    def default_dtypes(self, *, device=None):
        return {"real floating": dtypes.default_float(), "complex floating": dtypes.default_complex(),
                "integral": dtypes.default_int(), "indexing": dtypes.default_int()}

    def dtypes(self, *, device=None, kind=None):
        names = {"bool": bool, "int8": int8, "int16": int16, "int32": int32, "int64": int64,
                 "uint8": uint8, "uint16": uint16, "uint32": uint32, "uint64": uint64,
                 "float32": float32, "float64": float64, "complex64": complex64, "complex128": complex128}
        if kind is None:
            return names
        return {k: v for k, v in names.items() if isdtype(v, kind)}


def __array_namespace_info__():
    """The array API ``__array_namespace_info__``: devices, default dtypes, capabilities."""
    return _NamespaceInfo()


