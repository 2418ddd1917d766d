"""Dtypes, the type-promotion lattice and weak types.

Dtypes are NumPy ``np.dtype`` objects (``bfloat16`` and the low-bit dtypes ``float8_e4m3fn``,
``float8_e5m2``, ``int4``, ``uint4`` from ``ml_dtypes``), so they compare equal to NumPy's and hash alike.
Defaults follow the 64-bit switch, as JAX's (docs/design.md, "Semantics"): with ``config.enable_x64`` off
(the default) Python ``float`` is ``float32``, ``int`` is ``int32``, ``complex`` is ``complex64``; with it on they
are ``float64``, ``int64``, ``complex128`` (``default_float``, ``default_int``, ``default_complex``: the dtypes of
weak Python scalars, ``dtype=float``, creation functions' and samplers' defaults, index results).

Promotion follows JAX's lattice with weak types (``jax.numpy.promote_types``,
JEP 9407 "Design of type promotion semantics for JAX"), which agrees with the
array API standard wherever the standard defines a result. The low-bit dtypes sit alone in the lattice,
as in JAX: ``float8_*`` above the weak float kind (so bool and every integer promote to a float8, and a
Python int or float adopts it) and ``int4``/``uint4`` above the weak int kind (bool and Python ints only);
any other pair raises ``TypePromotionError``, so upcasting is explicit (``x.astype(float32)``). A *weak* type is the
type of a Python scalar: it adopts the dtype of the array it meets, within its
kind (``f32 * 2.0 -> f32``; ``i32 + 1.5 -> f32``, weak, because a Python float
meeting an int array lands on the default float).

64-bit dtypes are a switch, as JAX's ``jax_enable_x64``: with ``fnarray.config.enable_x64`` off (the
default), ``canonicalize`` maps ``float64``/``int64``/``uint64``/``complex128`` to ``float32``/``int32``/
``uint32``/``complex64``, so NumPy float64 arrays, ``np.float64`` scalars and ``dtype=float64`` requests
become 32-bit where they enter; ``requested`` is ``canonicalize`` for a dtype the user asked for by name
and warns as JAX does ("Explicitly requested dtype float64 ... will be truncated to dtype float32").
``as_dtype`` is the conversion without the switch (``finfo(float64)`` describes float64 either way). With
``enable_x64`` on, 64-bit dtypes are kept and the defaults are 64-bit, as in JAX.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings

import ml_dtypes
import numpy as np

from fnarray.core.config import config
from fnarray.core.errors import DTypeError, TypePromotionError

__all__ = [
    "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
    "uint64", "float16", "bfloat16", "float32", "float64", "complex64",
    "complex128", "float8_e4m3fn", "float8_e5m2", "int4", "uint4", "float0", "ALL_DTYPES", "LOW_BIT_DTYPES",
    "KNOWN_DTYPES", "is_low_bit", "canonicalize", "as_dtype", "requested", "x64_enabled",
    "default_float", "default_int", "default_complex", "to_inexact",
    "narrow", "promote_types",
    "result_type", "is_float", "is_complex", "is_int", "is_unsigned",
    "is_signed", "is_bool", "is_inexact", "short_name", "default_for_kind",
    "dtype_of_scalar", "scalar_operand_dtype", "scalar_literal", "int_out_of_range", "fits_weak_int", "check_weak_int",
    "finfo", "iinfo",
    "extended", "prng_key", "KeyDType", "key_fry", "is_key",
]

bool_ = np.dtype(np.bool_)
int8, int16, int32, int64 = (np.dtype(t) for t in ("int8", "int16", "int32", "int64"))
uint8, uint16, uint32, uint64 = (np.dtype(t) for t in ("uint8", "uint16", "uint32", "uint64"))
float16, float32, float64 = (np.dtype(t) for t in ("float16", "float32", "float64"))
bfloat16 = np.dtype(ml_dtypes.bfloat16)
complex64, complex128 = np.dtype(np.complex64), np.dtype(np.complex128)
# The low-bit dtypes (ml_dtypes, as jax.numpy's): one byte an element in memory (int4/uint4 hold one value
# a byte, sign- or zero-extended, as ml_dtypes stores them).
float8_e4m3fn, float8_e5m2 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)
int4, uint4 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)
# The dtype of tangents of integer and boolean values (as JAX's float0): a
# zero-size-per-element type that carries no data.
float0 = np.dtype([("float0", np.void, 0)])

ALL_DTYPES = (bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
              float16, bfloat16, float32, float64, complex64, complex128)
#: storage and conversion dtypes outside the promotion lattice's main body (no implicit promotion with the
#: others, as in JAX); kept apart from ``ALL_DTYPES``, the dtypes every operation is defined on
LOW_BIT_DTYPES = (float8_e4m3fn, float8_e5m2, int4, uint4)
#: every dtype an array can have
KNOWN_DTYPES = ALL_DTYPES + LOW_BIT_DTYPES
_KNOWN = frozenset(KNOWN_DTYPES)
# NumPy reports kind "V" for ml_dtypes' types (float8_e5m2 excepted: "f"); the predicates below list them.
_V_FLOATS = frozenset({bfloat16, float8_e4m3fn, float8_e5m2})
_V_SIGNED, _V_UNSIGNED = frozenset({int4}), frozenset({uint4})
_FLOAT8, _LOW_BIT = frozenset({float8_e4m3fn, float8_e5m2}), frozenset(LOW_BIT_DTYPES)

_SHORT = {
    bool_: "bool", int8: "i8", int16: "i16", int32: "i32", int64: "i64",
    uint8: "u8", uint16: "u16", uint32: "u32", uint64: "u64",
    float16: "f16", bfloat16: "bf16", float32: "f32", float64: "f64",
    complex64: "c64", complex128: "c128", float0: "float0",
    float8_e4m3fn: "f8_e4m3fn", float8_e5m2: "f8_e5m2", int4: "i4", uint4: "u4",
}


def short_name(dtype: np.dtype) -> str:
    """The IR printer's short name: ``f32``, ``i32``, ``bool``, ``bf16``..."""
    return _SHORT[dtype]


class ScalarMeta(type):
    """The type of ``fnp.float32`` and its siblings: scalar types as in ``jax.numpy``.

    ``fnp.float32(x)`` makes a ``float32`` array (``jnp.float32(x)``), and the type stands wherever a
    dtype does: it equals and hashes as its NumPy dtype (``x.dtype == fnp.float32``, dict keys),
    ``np.dtype(fnp.float32)`` is that dtype, and it answers the dtype's attributes (``.itemsize``,
    ``.name``, ``.kind``...).
    """

    def __hash__(cls):
        return hash(cls.dtype)

    def __eq__(cls, other):
        if other is cls:
            return True
        if isinstance(other, ScalarMeta):
            return cls.dtype == other.dtype
        if isinstance(other, (np.dtype, str)) or (isinstance(other, type) and issubclass(other, np.generic)):
            try:
                return cls.dtype == np.dtype(other)
            except TypeError:
                return False
        return NotImplemented

    def __ne__(cls, other):
        eq = ScalarMeta.__eq__(cls, other)
        return eq if eq is NotImplemented else not eq

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(cls.dtype, name)

    def __repr__(cls):
        return f"fnarray.numpy.{cls.__name__}"  # the namespace makes them (fnarray/numpy/_info.py)


class extended:
    """The abstract type of dtypes that are not NumPy's (as ``jax.dtypes.extended``): ``issubdtype(d, extended)``
    holds for the key dtype only. Never instantiated."""


class prng_key(extended):
    """The abstract type of PRNG key dtypes (as ``jax.dtypes.prng_key``): ``fnp.issubdtype(k.dtype,
    fa.dtypes.prng_key)`` tells a typed key (``fa.random.key``) from a raw ``uint32[2]`` one. Never
    instantiated."""


class KeyDType:
    """The dtype of typed PRNG keys (``fa.random.key``), printed as JAX prints it: ``key<fry>``.

    An extended dtype (``jax.dtypes.prng_key``), not a NumPy dtype: each element of a key array is one key,
    stored as ``words`` ``uint32`` words in a trailing axis of its data (``fa.random.key_data``), as JAX's
    ``key<fry>`` overlays ``uint32[..., 2]``. ``impl`` names the generator (``"threefry2x32"``, the only one).
    Equal and hash alike by ``impl``.
    """

    __slots__ = ("impl", "tag", "words")
    type = prng_key
    kind = "V"

    def __init__(self, impl: str, tag: str, words: int):
        self.impl, self.tag, self.words = impl, tag, words

    @property
    def name(self) -> str:
        return f"key<{self.tag}>"

    @property
    def itemsize(self) -> int:
        return 4 * self.words

    def __eq__(self, other):
        return isinstance(other, KeyDType) and other.impl == self.impl

    def __hash__(self):
        return hash(("KeyDType", self.impl))

    def __repr__(self):
        return self.name

    __str__ = __repr__


#: the dtype of ``fa.random.key``'s keys: Threefry-2x32, two words a key (JAX's ``key<fry>``)
key_fry = KeyDType("threefry2x32", "fry", 2)


def is_key(d) -> bool:
    """Whether ``d`` is a PRNG key dtype (``KeyDType``)."""
    return isinstance(d, KeyDType)


#: the 32-bit dtype each 64-bit dtype becomes while ``config.enable_x64`` is off (as JAX's canonicalisation)
_NARROW = {float64: float32, int64: int32, uint64: uint32, complex128: complex64}


def x64_enabled() -> bool:
    """Whether 64-bit dtypes are kept (``fnarray.config.enable_x64``)."""
    return config.enable_x64


def default_float() -> np.dtype:
    """The default floating dtype: ``float64`` with ``config.enable_x64`` on, else ``float32`` (as JAX's
    ``dtypes.canonicalize_dtype(float)``)."""
    return float64 if config.enable_x64 else float32


def default_int() -> np.dtype:
    """The default integer dtype (also of indices: ``argmax``, ``argsort``, ``nonzero``): ``int64`` with
    ``config.enable_x64`` on, else ``int32``."""
    return int64 if config.enable_x64 else int32


def default_complex() -> np.dtype:
    """The default complex dtype: ``complex128`` with ``config.enable_x64`` on, else ``complex64``."""
    return complex128 if config.enable_x64 else complex64


def to_inexact(d: np.dtype) -> np.dtype:
    """The floating dtype integer and bool values of ``d`` compute in (``exp``, ``/``, ``mean``, ``norm``; as
    ``jax.numpy``): ``d`` itself if inexact, ``float64`` for 64-bit integers (``float32`` while
    ``config.enable_x64`` is off), else ``float32``."""
    if is_inexact(d):
        return d
    return float64 if d.itemsize == 8 and config.enable_x64 else float32


def narrow(d: np.dtype) -> np.dtype:
    """``d`` as it is stored under the current ``enable_x64`` setting: a 64-bit dtype's 32-bit counterpart
    while it is off, else ``d`` itself. ``d`` is one of our dtypes (see ``as_dtype``)."""
    return d if config.enable_x64 else _NARROW.get(d, d)


def canonicalize(dtype) -> np.dtype:
    """Turn anything NumPy accepts as a dtype (or a Python type) into the dtype arrays of it get.

    ``as_dtype`` followed by ``narrow``: with ``config.enable_x64`` off (the default), the 64-bit dtypes
    become 32-bit (``float64`` → ``float32``, ``int64`` → ``int32``, ``uint64`` → ``uint32``,
    ``complex128`` → ``complex64``), as ``jax.dtypes.canonicalize_dtype``; silently, since the callers
    are NumPy inputs and internal dtypes (``requested`` is the warning form for an explicit request).
    Raises ``DTypeError`` for dtypes fnarray does not have (strings, objects, datetimes).
    """
    return narrow(as_dtype(dtype))


def requested(dtype, where: str) -> np.dtype:
    """``canonicalize`` of a dtype the caller passed explicitly (``dtype=`` of ``where``, ``astype``).

    With ``config.enable_x64`` off, a 64-bit dtype named explicitly (``float64``, ``np.int64``, ``"float64"``;
    not the Python types ``float``/``int``/``complex``, which mean the 32-bit defaults) warns as JAX does:
    ``UserWarning: Explicitly requested dtype float64 requested in zeros is not available, and will be
    truncated to dtype float32 ...``. ``None`` is returned as ``None``.
    """
    if dtype is None:
        return None
    d = as_dtype(dtype)
    if config.enable_x64 or d not in _NARROW:
        return d
    if dtype is not float and dtype is not int and dtype is not complex:  # (np.dtype("float64") == float)
        warnings.warn(f"Explicitly requested dtype {d.name} requested in {where} is not available, and will be "
                      f"truncated to dtype {_NARROW[d].name}. To keep 64-bit dtypes, set "
                      "fnarray.config.enable_x64 = True (or fnarray.config.update('jax_enable_x64', True), or "
                      "the environment variable FNARRAY_ENABLE_X64=1) before making arrays.",
                      UserWarning, stacklevel=_user_stacklevel())
    return _NARROW[d]


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _user_stacklevel() -> int:
    """The ``stacklevel`` of ``warnings.warn`` called here that names the first frame outside fnarray."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    return level


def as_dtype(dtype) -> np.dtype:
    """Turn anything NumPy accepts as a dtype (or a Python type) into one of ours, 64-bit dtypes kept.

    Python ``float``/``int``/``complex`` map to the defaults (``default_float``: 32-bit while
    ``config.enable_x64`` is off); a non-native byte order
    (``'>f4'`` on a little-endian machine) maps to the native dtype. Raises
    ``DTypeError`` for dtypes fnarray does not have (strings, objects, datetimes).
    """
    if dtype is float:
        return default_float()
    if dtype is int:
        return default_int()
    if dtype is complex:
        return default_complex()
    if dtype is bool:
        return bool_
    try:
        d = np.dtype(dtype)
    except TypeError as e:
        raise DTypeError(f"{dtype!r} is not a dtype; expected one of "
                         f"{', '.join(d.name for d in KNOWN_DTYPES)}") from e
    if d == float0:
        return float0
    if not d.isnative:   # a big-endian file's float32 is float32, as in JAX; buffers are converted on upload
        d = d.newbyteorder("=")
    if d not in _KNOWN:
        raise DTypeError(f"fnarray has no dtype {d}; supported dtypes are "
                         f"{', '.join(x.name for x in KNOWN_DTYPES)}")
    return d


def is_bool(d) -> bool:
    return d == bool_


def is_unsigned(d) -> bool:
    k = d.kind
    return k == "u" or (k == "V" and d in _V_UNSIGNED)


def is_signed(d) -> bool:
    k = d.kind
    return k == "i" or (k == "V" and d in _V_SIGNED)


def is_int(d) -> bool:
    k = d.kind
    return k in "iu" or (k == "V" and (d in _V_SIGNED or d in _V_UNSIGNED))


def is_float(d) -> bool:
    k = d.kind
    return k == "f" or (k == "V" and d in _V_FLOATS)


def is_low_bit(d) -> bool:
    """Whether ``d`` is one of ``LOW_BIT_DTYPES`` (float8_e4m3fn, float8_e5m2, int4, uint4)."""
    return d in _LOW_BIT


def is_complex(d) -> bool:
    return d.kind == "c"


def is_inexact(d) -> bool:
    return is_float(d) or is_complex(d)


# Kinds of weak types, standing for Python scalars in the lattice.
_WEAK_INT, _WEAK_FLOAT, _WEAK_COMPLEX = "i*", "f*", "c*"

_EDGES = {
    bool_: [_WEAK_INT],
    _WEAK_INT: [uint8, int8, uint4, int4],
    uint4: [], int4: [],
    uint8: [int16, uint16], uint16: [int32, uint32], uint32: [int64, uint64],
    uint64: [_WEAK_FLOAT],
    int8: [int16], int16: [int32], int32: [int64], int64: [_WEAK_FLOAT],
    _WEAK_FLOAT: [float8_e4m3fn, float8_e5m2, float16, bfloat16, _WEAK_COMPLEX],
    float8_e4m3fn: [], float8_e5m2: [],
    float16: [float32], bfloat16: [float32], float32: [float64, complex64],
    float64: [complex128],
    _WEAK_COMPLEX: [complex64], complex64: [complex128], complex128: [],
}


def _upper_bounds():
    ub = {}

    def visit(n):
        if n not in ub:
            s = {n}
            for m in _EDGES[n]:
                s |= visit(m)
            ub[n] = frozenset(s)
        return ub[n]

    for n in _EDGES:
        visit(n)
    return ub


_UB = _upper_bounds()


def _join(a, b):
    common = _UB[a] & _UB[b]
    # The least upper bound is the one element of `common` below all others.
    for c in common:
        if all(o in _UB[c] for o in common):
            return c
    raise TypePromotionError(_no_promotion_message(a, b))


def _node_name(n) -> str:
    return {_WEAK_INT: "int (a Python int)", _WEAK_FLOAT: "float (a Python float)",
            _WEAK_COMPLEX: "complex (a Python complex)"}.get(n, getattr(n, "name", str(n)))


def _no_promotion_message(a, b) -> str:
    """JAX's ``TypePromotionError`` text for two lattice nodes without a common upper bound."""
    pair = f"Input dtypes ({_node_name(a)}, {_node_name(b)}) have no available implicit dtype promotion path."
    if any(n in _FLOAT8 for n in (a, b) if not isinstance(n, str)):
        return (f"{pair} To avoid unintended promotion, 8-bit floats do not support implicit promotion. If "
                "you'd like your inputs to be promoted to another type, you can do so explicitly using e.g. "
                "x.astype('float32')")
    return (f"{pair} To avoid unintended promotion, 4-bit integers do not support implicit promotion. If you'd "
            "like your inputs to be promoted to another type, you can do so explicitly using e.g. "
            "x.astype('int32')")


def _weak_kind(d):
    if is_bool(d):
        return bool_
    if is_int(d):
        return _WEAK_INT
    if is_float(d):
        return _WEAK_FLOAT
    return _WEAK_COMPLEX


def default_for_kind(kind) -> np.dtype:
    """The default dtype of a weak kind (``default_int`` and its siblings), or the dtype itself."""
    return _default_of_kind(kind, config.enable_x64)


def _default_of_kind(kind, x64: bool) -> np.dtype:
    if x64:
        return {_WEAK_INT: int64, _WEAK_FLOAT: float64, _WEAK_COMPLEX: complex128}.get(kind, kind)
    return {_WEAK_INT: int32, _WEAK_FLOAT: float32, _WEAK_COMPLEX: complex64}.get(kind, kind)


def _promote(a, aw, b, bw):
    return _promote_in(a, aw, b, bw, config.enable_x64)


@functools.lru_cache(maxsize=None)
def _promote_in(a, aw, b, bw, x64: bool):
    """``_promote`` under the ``enable_x64`` setting ``x64`` (part of the cache key: it picks weak defaults)."""
    if aw and bw:
        # Two weak values (as JAX): join their dtypes as if strong; the result stays weak.
        return _promote_in(a, False, b, False, x64)[0], True
    na = _weak_kind(a) if aw else a
    nb = _weak_kind(b) if bw else b
    j = _join(na, nb)
    if not isinstance(j, str):
        return j, False
    if not aw and not bw:
        # Two strong types meeting at a weak kind (uint64 with a signed int): float64, weak as in
        # JAX, so that a strong float met later decides and n-ary promotion stays order-independent.
        return float64, True
    # A strong value meeting a weak one of a higher kind (int array + Python float): the weak
    # value's dtype, which for a Python scalar is the default of its kind.
    w = a if aw else b
    return (w if _weak_kind(w) == j else _default_of_kind(j, x64)), True


def promote_types(a, b, a_weak: bool = False, b_weak: bool = False) -> tuple[np.dtype, bool]:
    """Join two dtypes in the lattice; returns ``(dtype, weak_type)``.

    Mirrors ``jax.numpy.promote_types`` extended with weak types. Examples:
    ``(f32, f64) -> f64``; ``(i32, weak f32) -> (f32, weak)``; ``(u8, i8) -> i16``.
    """
    return _promote(as_dtype(a), bool(a_weak), as_dtype(b), bool(b_weak))


def result_type(*pairs) -> tuple[np.dtype, bool]:
    """Fold ``promote_types`` over ``(dtype, weak)`` pairs; the result ``narrow``ed (``uint32 + int32`` joins at
    ``int64``, which is ``int32`` while ``config.enable_x64`` is off, as in JAX)."""
    if not pairs:
        raise DTypeError("result_type needs at least one dtype or array")
    d, w = pairs[0]
    for d2, w2 in pairs[1:]:
        d, w = _promote(d, w, d2, w2)
    return narrow(d), w


def dtype_of_scalar(x) -> tuple[np.dtype, bool]:
    """The ``(dtype, weak)`` of a Python or NumPy scalar.

    Python scalars are weak with the default of their kind (``default_float``: 32-bit while
    ``config.enable_x64`` is off); NumPy scalars keep their dtype (``canonicalize``d) and are strong.
    """
    if isinstance(x, np.generic):
        return canonicalize(x.dtype), False
    if isinstance(x, bool):
        return bool_, False
    if isinstance(x, int):
        return default_int(), True
    if isinstance(x, float):
        return default_float(), True
    if isinstance(x, complex):
        return default_complex(), True
    raise DTypeError(f"{type(x).__name__} is not a scalar type")


def scalar_operand_dtype(d: np.dtype, pytype: type):
    """How a strong array of dtype ``d`` absorbs a Python ``float`` or ``int`` operand, in the cases that need
    neither a range check nor a weak result (the eager hot path, ``fnarray.numpy``'s and ``Array``'s operators).

    Returns:
      ``None`` where the general promotion must decide (``pytype`` is neither ``float`` nor ``int``, a float
      beside an integer or bool array, an int beside a bool array or beside an integer array other than
      the default int, which needs a range check); ``(d, True)`` where the scalar stays a weak literal (its
      default dtype is ``d``: a float beside ``float32``, an int beside ``int32``, 64-bit under x64); ``(d, False)`` where it becomes a
      strong literal of ``d`` (a float beside ``float64``, ``float16``, ``bfloat16`` or complex, an int
      beside a float or complex array). The result has dtype ``d`` either way.
    """
    if pytype is float:
        if not is_inexact(d):
            return None
        return d, d == default_float()
    if pytype is int:
        if d == default_int():
            return d, True
        if d == bool_ or is_int(d):
            return None
        return d, False
    return None


def int_out_of_range(x: int, d: np.dtype) -> OverflowError:
    """The error for a Python int ``x`` that does not fit the integer dtype ``d`` it is combined with (as
    ``jax.numpy`` raises ``OverflowError``; NumPy 2 too): what was given, the range, and what to do."""
    info = np.iinfo(d)
    wider = "int64" if d != int64 else "a float dtype"
    return OverflowError(
        f"Python int {x} is out of range for {d.name} ([{info.min}, {info.max}]), the dtype of the array it is "
        f"combined with; cast the array to a wider dtype first (x.astype({wider!r}); int64 needs "
        "fnarray.config.update('enable_x64', True)), or give a value in range")


_WEAK_INT_MIN, _WEAK_INT_MAX = -(2 ** 31), 2 ** 31 - 1


def fits_weak_int(x: int) -> bool:
    """Whether the Python int ``x`` fits ``default_int()``, the dtype of a weak Python int (``dtype_of_scalar``): a
    literal beside an array, a jitted function's argument, a ``fori_loop`` bound."""
    if config.enable_x64:
        return -(2 ** 63) <= x < 2 ** 63
    return _WEAK_INT_MIN <= x <= _WEAK_INT_MAX


def check_weak_int(x: int, d: np.dtype) -> None:
    """Raise ``int_out_of_range`` where the Python int ``x``, kept a weak literal beside an array of ``d``
    (``int32``: ``scalar_operand_dtype``'s ``(int32, True)``), does not fit ``int32``."""
    if not fits_weak_int(x):
        raise int_out_of_range(x, d)


def scalar_literal(x, d: np.dtype, quiet: bool = False):
    """The Python scalar ``x`` as a strong NumPy scalar of dtype ``d`` (where ``scalar_operand_dtype`` says
    ``(d, False)``): NumPy's own conversion, with its ``RuntimeWarning`` where the value overflows ``d``, or
    ``quiet``ly (a cast under ``np.errstate(all="ignore")``, as ``fnarray.numpy``'s general promotion does)."""
    if quiet:
        with np.errstate(all="ignore"):
            return np.asarray(x).astype(d)[()]
    return np.asarray(x, d)[()]


class finfo:
    """Machine limits of a floating dtype (array API ``finfo``; mirrors ``numpy.finfo``).

    Attributes: ``bits``, ``eps``, ``max``, ``min``, ``smallest_normal``, ``dtype``.
    Complex dtypes report their real component's limits. Raises ``DTypeError``
    for non-floating dtypes.
    """

    def __init__(self, dtype):
        if hasattr(dtype, "dtype") and not isinstance(dtype, np.dtype):
            dtype = dtype.dtype
        d = as_dtype(dtype)
        if not is_inexact(d):
            raise DTypeError(f"finfo needs a floating or complex dtype, got {d}; use iinfo for integers")
        real = {complex64: float32, complex128: float64}.get(d, d)
        fi = ml_dtypes.finfo(real)
        self.bits = fi.bits
        self.eps = float(fi.eps)
        self.max = float(fi.max)
        self.min = float(fi.min)
        self.smallest_normal = float(fi.smallest_normal)
        self.resolution = float(fi.resolution)
        self.tiny = self.smallest_normal
        self.dtype = real

    def __repr__(self):
        return f"finfo(dtype={self.dtype.name}, bits={self.bits}, eps={self.eps}, max={self.max})"


class iinfo:
    """Machine limits of an integer dtype (array API ``iinfo``; mirrors ``numpy.iinfo``).

    Attributes: ``bits``, ``max``, ``min``, ``dtype``. Raises ``DTypeError`` for
    non-integer dtypes.
    """

    def __init__(self, dtype):
        if hasattr(dtype, "dtype") and not isinstance(dtype, np.dtype):
            dtype = dtype.dtype
        d = as_dtype(dtype)
        if not is_int(d):
            raise DTypeError(f"iinfo needs an integer dtype, got {d}; use finfo for floats")
        ii = ml_dtypes.iinfo(d)   # NumPy's iinfo has no int4/uint4
        self.bits, self.max, self.min, self.dtype = ii.bits, int(ii.max), int(ii.min), d

    def __repr__(self):
        return f"iinfo(dtype={self.dtype.name}, bits={self.bits}, min={self.min}, max={self.max})"
