"""Elementwise functions of the array API standard (2024.12), with NumPy aliases.

Arguments are promoted with JAX's lattice and weak types and broadcast as in
NumPy; see ``fnarray.core.dtypes``. Integer inputs to functions defined on
floats (``exp``, ``sqrt``, ``divide``...) are promoted to the default float
dtype, as ``jax.numpy`` does. Pinned edge cases (docs/design.md): integer division
and remainder by zero give 0, shifts past the bit width give 0 (or -1),
``maximum``/``minimum`` propagate NaN, ``0 ** 0 == 1``.
"""

from __future__ import annotations

import numpy as np

from fnarray.core import dtypes, lax
from fnarray.core.errors import DTypeError
from fnarray.numpy._util import aval_of, check_arraylike, elementwise, promote

# ``__all__``: every public function defined below (derived at the end of the module).


def _not_bool(name):
    def check(d):
        if dtypes.is_bool(d):
            raise DTypeError(f"{name} does not accept bool arrays; convert with .astype(int) first")
    return check


def _int_or_bool(name):
    def check(d):
        if not (dtypes.is_int(d) or dtypes.is_bool(d)):
            raise DTypeError(f"{name} accepts integer or boolean arrays, got {d.name}")
    return check


def _int_only(name):
    def check(d):
        if not dtypes.is_int(d):
            raise DTypeError(f"{name} accepts integer arrays, got {d.name}")
    return check


def _real_only(name):
    def check(d):
        if dtypes.is_complex(d):
            raise DTypeError(f"{name} is not defined for complex arrays ({d.name})")
    return check


def _to_inexact(x):
    """Promote integer/bool operands to the default float, keeping weak types."""
    a = aval_of(x)
    if dtypes.is_inexact(a.dtype):
        return x
    if isinstance(x, (bool, int)) and not isinstance(x, np.generic):
        return float(x)
    if isinstance(x, np.ndarray):
        from fnarray.numpy._util import asarray_internal
        x = asarray_internal(x)
    return lax.convert_element_type(x, dtypes.to_inexact(a.dtype), weak_type=a.weak_type)


def _float_unary(name, fn, real_only=False, source=None):
    """The namespace function ``name`` applying ``fn`` to an inexact ``x``; ``source``: what it mirrors, where
    that is not "array API ``name``; ``numpy.name``" (it heads the docstring)."""
    def f(x, /):
        check_arraylike(name, x)
        x = _to_inexact(x)
        if real_only and dtypes.is_complex(aval_of(x).dtype):
            raise DTypeError(f"{name} is not defined for complex arrays")
        return elementwise(name, fn, x)
    f.__name__ = name
    source = source or f"array API ``{name}``; ``numpy.{name}``"
    f.__doc__ = (f"Elementwise {name} ({source}).\n\n"
                 "Differences from NumPy: integer and bool inputs give ``float32`` (NumPy: ``float64``); lists "
                 "are not accepted, as in ``jax.numpy``.\n\n"
                 "Args:\n  x: an array or a scalar.\n\n"
                 "Returns:\n  An array of ``x``'s shape and floating (or complex) dtype.\n\n"
                 "Raises:\n  TypeError: ``x`` is not an array or a scalar."
                 + ("\n  DTypeError: ``x`` is complex." if real_only else ""))
    return f


exp = _float_unary("exp", lax.exp)
exp2 = _float_unary("exp2", lax.exp2, source="``numpy.exp2``; not in the array API")


def _expm1(x):
    if not dtypes.is_complex(aval_of(x).dtype):
        return lax.expm1(x)
    # exp(a + ib) - 1 = expm1(a) cos b - 2 sin^2(b/2) + i e^a sin b keeps precision near 0; the
    # selects give the array API's special cases at infinities and NaNs, where NumPy's complex
    # expm1 gives NaN parts (expm1(inf + 0j) is inf + 0j, expm1(-inf + nan j) is -1 + 0j).
    a, b = lax.real(x), lax.imag(x)
    shape, f = aval_of(a).shape, aval_of(a).dtype
    zero = lax.zeros_like(a)
    s = lax.sin(lax.mul(b, np.asarray(0.5, f)[()]))
    # (+ 0 makes expm1(-0 + 0j) +0 + 0j, as the standard asks; no other value changes.)
    re = lax.add(lax.sub(lax.mul(lax.expm1(a), lax.cos(b)), lax.mul(lax.add(s, s), s)), zero)
    im = lax.select(lax.eq(b, zero), b, lax.mul(lax.exp(a), lax.sin(b)))
    b_nonfinite = lax.bitwise_not(lax.is_finite(b))
    a_neg_inf = lax.eq(a, np.asarray(-np.inf, f)[()])
    a_pos_inf = lax.eq(a, np.asarray(np.inf, f)[()])
    re = lax.select(a_neg_inf, lax.full(shape, -1, f), re)
    im = lax.select(lax.bitwise_and(a_neg_inf, b_nonfinite), zero, im)
    re = lax.select(lax.bitwise_and(a_pos_inf, b_nonfinite), lax.full(shape, np.inf, f), re)
    return lax.complex(re, im)


expm1 = _float_unary("expm1", _expm1)
log = _float_unary("log", lax.log)
log1p = _float_unary("log1p", lax.log1p)
sin, cos, tan = _float_unary("sin", lax.sin), _float_unary("cos", lax.cos), _float_unary("tan", lax.tan)
asin, acos, atan = _float_unary("asin", lax.asin), _float_unary("acos", lax.acos), _float_unary("atan", lax.atan)
sinh, cosh = _float_unary("sinh", lax.sinh), _float_unary("cosh", lax.cosh)


def _tanh(x):
    y = lax.tanh(x)
    if not dtypes.is_complex(aval_of(x).dtype):
        return y
    # At real part +-inf and a finite imaginary part b, NumPy's (C99's) ctanh gives +-1 + 0 sin(2b) j;
    # the array API asks for a zero with b's sign (tanh(inf + 3j) is 1 + 0j, not 1 - 0j).
    a, b = lax.real(x), lax.imag(x)
    at_inf = lax.bitwise_and(lax.eq(lax.abs(a), np.asarray(np.inf, aval_of(a).dtype)[()]), lax.is_finite(b))
    im = lax.select(at_inf, lax.mul(lax.zeros_like(b), b), lax.imag(y))
    return lax.complex(lax.real(y), im)


tanh = _float_unary("tanh", _tanh)
asinh = _float_unary("asinh", lax.asinh)
acosh = _float_unary("acosh", lax.acosh)
atanh = _float_unary("atanh", lax.atanh)
sqrt = _float_unary("sqrt", lax.sqrt)
cbrt = _float_unary("cbrt", lax.cbrt, real_only=True, source="``numpy.cbrt``; not in the array API")
erf = _float_unary("erf", lax.erf, real_only=True,
                   source="``jax.scipy.special.erf``, ``scipy.special.erf``; not in NumPy or the array API")
erfinv = _float_unary("erfinv", lax.erf_inv, real_only=True,
                      source="``jax.scipy.special.erfinv``, ``scipy.special.erfinv``; not in NumPy or the array API")
arcsin, arccos, arctan, arcsinh, arccosh, arctanh = asin, acos, atan, asinh, acosh, atanh


_erfc = _float_unary("erfc", lax.erfc, real_only=True)


def erfc(x, /):
    """Complementary error function ``1 - erf(x)`` (``scipy.special.erfc``), accurate for large ``x``.

    Computed by the ``erfc`` primitive (within a few float32 ulps up to x = 9), not as ``1 - erf(x)``, which is
    0 in float32 from x of about 3.9. Integer and bool inputs give ``float32``.

    Args:
      x: a real array or a scalar.

    Returns:
      An array of ``x``'s shape and floating dtype.

    Raises:
      DTypeError: ``x`` is complex.
    """
    return _erfc(x)


def log2(x, /):
    """Base-2 logarithm (array API ``log2``; ``numpy.log2``).

    Differences from NumPy: integer and bool inputs give ``float32`` (NumPy: ``float64``). Real arrays use the
    ``log2`` primitive, exact at powers of two (``log(x) / log(2)`` was one ulp off at some); complex arrays are
    computed as ``log(x) / log(2)`` (may differ from NumPy in the last place).

    Args:
      x: an array or a scalar.

    Returns:
      An array of ``x``'s shape and floating dtype.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
    """
    x = _to_inexact(x)
    if not dtypes.is_complex(aval_of(x).dtype):
        return elementwise("log2", lax.log2, x)
    return divide(log(x), np.log(2).astype(_real_dtype(x)))


def log10(x, /):
    """Base-10 logarithm (array API ``log10``; ``numpy.log10``): the ``log10`` primitive for real inputs.

    Differences from NumPy: integer and bool inputs give ``float32`` (NumPy: ``float64``); complex inputs are
    computed as ``log(x) / log(10)``.

    Args:
      x: an array or a scalar.

    Returns:
      An array of ``x``'s shape and floating dtype.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
    """
    x = _to_inexact(x)
    if not dtypes.is_complex(aval_of(x).dtype):
        return elementwise("log10", lax.log10, x)
    return divide(log(x), np.log(10).astype(_real_dtype(x)))


def _real_dtype(x):
    d = aval_of(x).dtype
    return {dtypes.complex64: dtypes.float32, dtypes.complex128: dtypes.float64}.get(d, d)


def _arith(name, fn, bool_fn=None):
    no_bool = _not_bool(name) if bool_fn is None else None

    def f(x1, x2, /):
        return elementwise(name, fn, x1, x2, check=no_bool, bool_fn=bool_fn)
    f.__name__ = name
    on_bool = (f"On bool arrays it is logical {'or' if name == 'add' else 'and'}, as in NumPy."
               if bool_fn is not None else "Bool arrays raise ``DTypeError``, as NumPy raises ``TypeError``.")
    f.__doc__ = (f"Elementwise {name} (array API ``{name}``; ``numpy.{name}``).\n\n"
                 "Differences from NumPy: JAX's promotion (weak Python scalars; ``float16`` with ``int32`` gives "
                 "``float16``, NumPy ``float64``; a Python int outside the other operand's integer range raises); "
                 f"lists are not accepted, as in ``jax.numpy``. {on_bool}\n\n"
                 "Args:\n  x1, x2: arrays or scalars, promoted and broadcast.\n\n"
                 "Returns:\n  An array of the promoted dtype and the broadcast shape.\n\n"
                 "Raises:\n  TypeError: an argument is not an array or a scalar.\n"
                 "  ShapeError: the shapes do not broadcast.\n"
                 "  OverflowError: a Python int out of range of the other operand's integer dtype.")
    return f


add = _arith("add", lax.add, lax.bitwise_or)
subtract = _arith("subtract", lax.sub)
multiply = _arith("multiply", lax.mul, lax.bitwise_and)


def divide(x1, x2, /):
    """True division (array API ``divide``; ``numpy.divide``).

    Differences from NumPy: integer and bool inputs give ``float32`` (NumPy: ``float64``); JAX's promotion (weak
    Python scalars; ``float16`` with ``int32`` gives ``float16``, NumPy ``float64``); lists are not accepted, as in
    ``jax.numpy``.

    Args:
      x1, x2: arrays or scalars, promoted and broadcast.

    Returns:
      A floating (or complex) array of the broadcast shape; ``x / 0`` is ``±inf`` or NaN.

    Raises:
      TypeError: an argument is not an array or a scalar.
      ShapeError: the shapes do not broadcast.
    """
    check_arraylike("divide", x1, x2)
    a = promote("divide", x1, x2)
    if not dtypes.is_inexact(aval_of(a[0]).dtype):
        a = [_to_inexact(v) for v in a]
    return elementwise("divide", lax.div, *a)


true_divide = divide


def floor_divide(x1, x2, /):
    """Floor division ``x1 // x2`` (array API ``floor_divide``; ``numpy.floor_divide``).

    Differences from NumPy: integer division by zero gives 0 without a warning (docs/design.md);
    float special cases follow the array API (``1 // -inf`` is ``-0.0``, NumPy ``-1.0``); bool
    operands are computed in ``int8``; JAX's promotion (weak Python scalars; ``float16`` with ``int32`` gives
    ``float16``, NumPy ``float64``); lists are not accepted, as in ``jax.numpy``.

    Args:
      x1, x2: real arrays or scalars, promoted and broadcast.

    Returns:
      An array of the promoted dtype (``int8`` for bool) and the broadcast shape.

    Raises:
      TypeError: an argument is not an array or a scalar.
      ShapeError: the shapes do not broadcast.
      DTypeError: a complex argument.
    """
    check_arraylike("floor_divide", x1, x2)
    a = promote("floor_divide", x1, x2)
    d = aval_of(a[0]).dtype
    if dtypes.is_complex(d):
        raise DTypeError("floor_divide is not defined for complex arrays")
    if dtypes.is_bool(d):
        a = [lax.convert_element_type(v, dtypes.int8) if not isinstance(v, bool) else int(v) for v in a]
        d = dtypes.int8
    if dtypes.is_unsigned(d):
        return elementwise("floor_divide", lax.div, *a)
    if dtypes.is_int(d):
        return elementwise("floor_divide", _int_floor_div, *a)
    return elementwise("floor_divide", _float_floor_div, *a)


def _int_floor_div(x, y):
    q = lax.div(x, y)
    r = lax.rem(x, y)
    zero = lax.zeros_like(r)
    adjust = lax.bitwise_and(lax.ne(r, zero), lax.ne(lax.lt(r, zero), lax.lt(y, lax.zeros_like(y))))
    one = lax.full(aval_of(q).shape, 1, aval_of(q).dtype)
    return lax.select(adjust, lax.sub(q, one), q)


def _float_floor_div(x, y):
    # As NumPy: (x - fmod(x, y)) / y, corrected toward -inf and rounded to the nearest integer.
    mod = lax.rem(x, y)
    div = lax.div(lax.sub(x, mod), y)
    zero = lax.zeros_like(mod)
    adjust = lax.bitwise_and(lax.ne(mod, zero), lax.ne(lax.lt(y, lax.zeros_like(y)), lax.lt(mod, zero)))
    one = lax.full(aval_of(div).shape, 1, aval_of(div).dtype)
    div = lax.select(adjust, lax.sub(div, one), div)
    fl = lax.floor(div)
    half = lax.full(aval_of(div).shape, 0.5, aval_of(div).dtype)
    fl = lax.select(lax.gt(lax.sub(div, fl), half), lax.add(fl, one), fl)
    # Division by zero and inf operands follow true division (the array API's special cases:
    # 1 // -inf is -0, not NumPy's -1).
    plain = lax.div(x, y)
    use_plain = lax.bitwise_or(lax.eq(y, lax.zeros_like(y)),
                               lax.bitwise_not(lax.bitwise_and(lax.is_finite(div), lax.is_finite(y))))
    out = lax.select(use_plain, lax.floor(plain), fl)
    # A zero quotient carries the sign of x / y (-0 // 2 is -0, -0 // -2 is +0). The quotient is piecewise
    # constant: its derivative is zero, also by a zero y (where 0 * d(x / 0) would be NaN).
    return lax.stop_gradient(lax.select(lax.eq(out, zero), lax.mul(zero, plain), out))


def remainder(x1, x2, /):
    """Remainder with the sign of the divisor (array API ``remainder``; ``numpy.remainder``, Python's ``%``).

    Differences from NumPy: integer remainder by zero gives 0 without a warning (docs/design.md);
    bool arrays raise (NumPy computes them in ``int8``); JAX's promotion (weak Python scalars; ``float16`` with
    ``int32`` gives ``float16``, NumPy ``float64``); lists are not accepted, as in ``jax.numpy``.

    Args:
      x1, x2: integer or real floating arrays or scalars, promoted and broadcast.

    Returns:
      An array of the promoted dtype and the broadcast shape.

    Raises:
      TypeError: an argument is not an array or a scalar.
      ShapeError: the shapes do not broadcast.
      DTypeError: a bool or complex argument.
    """
    check_arraylike("remainder", x1, x2)
    a = promote("remainder", x1, x2)
    d = aval_of(a[0]).dtype
    if dtypes.is_complex(d) or dtypes.is_bool(d):
        raise DTypeError(f"remainder is not defined for {d.name} arrays")
    return elementwise("remainder", _py_mod, *a)


mod = remainder


def _py_mod(x, y):
    r = lax.rem(x, y)
    d = aval_of(r).dtype
    if dtypes.is_unsigned(d):
        return r
    zero = lax.zeros_like(r)
    fix = lax.bitwise_and(lax.ne(r, zero), lax.ne(lax.lt(r, zero), lax.lt(y, lax.zeros_like(y))))
    out = lax.select(fix, lax.add(r, lax.broadcast_to_rank_shape(y, aval_of(r).shape)), r)
    if dtypes.is_float(d):
        # A zero result takes the divisor's sign, as in Python and NumPy. Its derivative stays that of ``out``
        # (JAX's: 1 in x, -trunc(x / y) in y at exact multiples): ``out - stop_gradient(out)`` adds +0 and the tangent.
        signed = lax.sub(copysign(zero, lax.broadcast_to_rank_shape(y, aval_of(r).shape)),
                         lax.sub(lax.stop_gradient(out), out))
        out = lax.select(lax.eq(out, zero), signed, out)
    return out


def fmod(x1, x2, /):
    """C ``fmod``: remainder with the sign of the dividend (``numpy.fmod``; not in the array API).

    Differences from NumPy: integer ``fmod`` by zero gives 0 (docs/design.md); JAX's promotion (weak Python scalars;
    ``float16`` with ``int32`` gives ``float16``, NumPy ``float64``); lists are not accepted, as in ``jax.numpy``.

    Args:
      x1, x2: real arrays or scalars, promoted and broadcast.

    Returns:
      An array of the promoted dtype and the broadcast shape.

    Raises:
      TypeError: an argument is not an array or a scalar.
      ShapeError: the shapes do not broadcast.
      DTypeError: a complex argument.
    """
    return elementwise("fmod", lax.rem, x1, x2, check=_real_only("fmod"))


def pow(x1, x2, /):  # noqa: A001 (array API name)
    """``x1 ** x2`` (array API ``pow``; ``numpy.power``); ``0 ** 0 == 1``.

    Integer powers use binary exponentiation; a negative exponent array element gives 0
    unless the base is 1 or -1 (as ``jax.numpy.power`` under ``jit``; NumPy raises ``ValueError``), and a
    negative Python int exponent of an integer array raises ``TypeError`` (as ``jax.numpy``). A Python
    int exponent with an array base keeps the base's dtype (``lax.integer_pow``). Otherwise
    JAX's promotion (weak Python scalars; ``float16`` with ``int32`` gives ``float16``, NumPy ``float64``); lists
    are not accepted, as in ``jax.numpy``.

    Args:
      x1, x2: arrays or scalars, promoted and broadcast.

    Returns:
      An array of the promoted dtype and the broadcast shape.

    Raises:
      TypeError: an argument is not an array or a scalar; an integer array to a negative Python int power.
      ShapeError: the shapes do not broadcast.
      DTypeError: a bool argument.
    """
    check_arraylike("pow", x1, x2)
    if isinstance(x2, int) and not isinstance(x2, bool) and not isinstance(x1, (int, float, complex)):
        d = aval_of(x1).dtype
        if dtypes.is_bool(d):
            raise DTypeError("pow does not accept bool arrays")
        if x2 < 0 and dtypes.is_int(d):
            raise TypeError(f"pow: an integer array ({d.name}) cannot be raised to the negative Python int power "
                            f"{x2} (as jax.numpy and NumPy refuse it); cast the base to a float dtype first "
                            f"(x.astype('float32') ** {x2}) or use fnarray.numpy.float_power")
        if x2 >= 0 or dtypes.is_inexact(d):
            if isinstance(x1, np.ndarray):
                from fnarray.numpy._util import asarray_internal
                x1 = asarray_internal(x1)
            return lax.integer_pow(x1, x2)
    a = promote("pow", x1, x2)
    d = aval_of(a[0]).dtype
    if dtypes.is_bool(d):
        raise DTypeError("pow does not accept bool arrays")
    if dtypes.is_int(d):
        return elementwise("pow", _int_pow, *a)
    if not isinstance(x2, (int, float, complex)) and dtypes.is_int(aval_of(x2).dtype):
        return elementwise("pow", _pow_int_exponent, *a)
    return elementwise("pow", lax.pow, *a)


power = pow


def _pow_int_exponent(x, y):
    """``x ** y`` for an integer array ``y`` (promoted): 1 where ``y == 0`` with derivative 0 there, also at
    ``x == 0``, as JAX's ``lax.pow`` with an integer exponent (a float exponent 0 gives NaN there)."""
    shape = aval_of(x).shape or aval_of(y).shape
    x = lax.broadcast_to_rank_shape(x, shape)
    y = lax.broadcast_to_rank_shape(y, shape)
    # the base, not the result, is selected: a select after pow would still send a zero cotangent through its NaN
    return lax.pow(lax.select(lax.eq(y, lax.zeros_like(y)), lax.full(shape, 1, aval_of(x).dtype), x), y)


def _int_pow(x, y):
    d = aval_of(x).dtype
    shape = aval_of(x).shape or aval_of(y).shape
    x = lax.broadcast_to_rank_shape(x, shape)
    y = lax.broadcast_to_rank_shape(y, shape)
    one = lax.full(shape, 1, d)
    zero = lax.full(shape, 0, d)
    acc, base, e = one, x, y
    for _ in range(d.itemsize * 8):
        bit = lax.ne(lax.bitwise_and(e, one), zero)
        acc = lax.select(bit, lax.mul(acc, base), acc)
        base = lax.mul(base, base)
        e = lax.shift_right_logical(e, one)
    if dtypes.is_signed(d):
        neg = lax.lt(y, zero)
        minus_one = lax.full(shape, -1, d)
        odd = lax.ne(lax.bitwise_and(y, one), zero)
        neg_val = lax.select(lax.eq(x, one), one,
                             lax.select(lax.eq(x, minus_one), lax.select(odd, minus_one, one), zero))
        acc = lax.select(neg, neg_val, acc)
    return acc


def float_power(x1, x2, /):
    """``x1 ** x2`` computed in float64 (``numpy.float_power``; not in the array API).

    As NumPy, the result is ``float64`` even for ``float32`` inputs, and ``complex128`` when
    either input is complex (backends without 64-bit floats run it on the numpy backend,
    docs/design.md).

    Args:
      x1, x2: arrays, scalars or nested sequences (converted as by ``asarray``), broadcast.

    Returns:
      A ``float64`` (or ``complex128``) array of the broadcast shape.

    Raises:
      ShapeError: the shapes do not broadcast.
      DTypeError: an argument that holds no numbers.
    """
    check_arraylike("float_power", x1, x2)
    complex_ = any(dtypes.is_complex(aval_of(v).dtype) for v in (x1, x2))
    d = dtypes.complex128 if complex_ else dtypes.float64
    return pow(_asarray_as(x1, d), _asarray_as(x2, d))


def _asarray_as(x, d):
    from fnarray.numpy._util import asarray_internal
    return lax.convert_element_type(asarray_internal(x), d)


def _cmp(name, fn, real_only=True):
    def f(x1, x2, /):
        return elementwise(name, fn, x1, x2, check=_real_only(name) if real_only else None)
    f.__name__ = name
    f.__doc__ = (f"Elementwise ``{name}`` comparison (array API ``{name}``; ``numpy.{name}``); returns a bool array "
                 "of the broadcast shape.\n\nDifferences from NumPy: JAX's promotion; lists are not accepted"
                 + ("; complex arguments raise ``DTypeError`` (NumPy orders them lexicographically)."
                    if real_only else "."))
    return f


equal = _cmp("equal", lax.eq, False)
not_equal = _cmp("not_equal", lax.ne, False)
less = _cmp("less", lax.lt)
less_equal = _cmp("less_equal", lax.le)
greater = _cmp("greater", lax.gt)
greater_equal = _cmp("greater_equal", lax.ge)


def maximum(x1, x2, /):
    """Elementwise maximum (array API ``maximum``; ``numpy.maximum``); propagates NaN.

    Differences from NumPy: complex arrays raise (NumPy orders them lexicographically);
    JAX's promotion (weak Python scalars; ``float16`` with ``int32`` gives ``float16``, NumPy ``float64``); lists
    are not accepted, as in ``jax.numpy``.

    Args:
      x1, x2: real arrays or scalars, promoted and broadcast.

    Returns:
      An array of the promoted dtype and the broadcast shape.

    Raises:
      TypeError: an argument is not an array or a scalar.
      ShapeError: the shapes do not broadcast.
      DTypeError: a complex argument.
    """
    return elementwise("maximum", lax.max, x1, x2, check=_real_only("maximum"))


def minimum(x1, x2, /):
    """Elementwise minimum (array API ``minimum``; ``numpy.minimum``); propagates NaN.

    Differences from NumPy: complex arrays raise (NumPy orders them lexicographically);
    JAX's promotion (weak Python scalars; ``float16`` with ``int32`` gives ``float16``, NumPy ``float64``); lists
    are not accepted, as in ``jax.numpy``.

    Args:
      x1, x2: real arrays or scalars, promoted and broadcast.

    Returns:
      An array of the promoted dtype and the broadcast shape.

    Raises:
      TypeError: an argument is not an array or a scalar.
      ShapeError: the shapes do not broadcast.
      DTypeError: a complex argument.
    """
    return elementwise("minimum", lax.min, x1, x2, check=_real_only("minimum"))


def _same_shape(*xs):
    """Broadcast rank-0 operands (which ``elementwise`` leaves as they are) to the common shape, as
    ``lax.select`` needs cases of one shape."""
    from fnarray.numpy._util import broadcast_shapes
    shape = broadcast_shapes(*[aval_of(x).shape for x in xs])
    return [lax.broadcast_to_rank_shape(x, shape) for x in xs]


def _fmax(a, b):
    a, b = _same_shape(a, b)
    return lax.select(lax.ne(a, a), b, lax.select(lax.ne(b, b), a, lax.max(a, b)))


def _fmin(a, b):
    a, b = _same_shape(a, b)
    return lax.select(lax.ne(a, a), b, lax.select(lax.ne(b, b), a, lax.min(a, b)))


def fmax(x1, x2, /):
    """Elementwise maximum ignoring NaN (``numpy.fmax``; not in the array API); JAX's promotion (weak Python
    scalars; ``float16`` with ``int32`` gives ``float16``, NumPy ``float64``); lists are not accepted, as in
    ``jax.numpy``.
    """
    return elementwise("fmax", _fmax, x1, x2)


def fmin(x1, x2, /):
    """Elementwise minimum ignoring NaN (``numpy.fmin``; not in the array API); JAX's promotion (weak Python
    scalars; ``float16`` with ``int32`` gives ``float16``, NumPy ``float64``); lists are not accepted, as in
    ``jax.numpy``.
    """
    return elementwise("fmin", _fmin, x1, x2)


def atan2(x1, x2, /):
    """Four-quadrant arctangent of ``x1 / x2`` (array API ``atan2``; ``numpy.arctan2``).

    Differences from NumPy: integer and bool inputs give ``float32`` (NumPy: ``float64``); JAX's promotion (weak
    Python scalars; ``float16`` with ``int32`` gives ``float16``, NumPy ``float64``); lists are not accepted, as in
    ``jax.numpy``; complex inputs raise.

    Args:
      x1, x2: arrays or scalars, promoted and broadcast.

    Returns:
      A floating array of the promoted dtype and the broadcast shape.

    Raises:
      TypeError: an argument is not an array or a scalar.
      ShapeError: the shapes do not broadcast.
      DTypeError: a complex argument.
    """
    check_arraylike("atan2", x1, x2)
    a = [_to_inexact(v) for v in promote("atan2", x1, x2)]
    return elementwise("atan2", lax.atan2, *a, check=_real_only("atan2"))


arctan2 = atan2


def hypot(x1, x2, /):
    """``sqrt(x1**2 + x2**2)`` without undue overflow (array API ``hypot``; ``numpy.hypot``).

    Differences from NumPy: integer and bool inputs give ``float32`` (NumPy: ``float64``); JAX's promotion (weak
    Python scalars; ``float16`` with ``int32`` gives ``float16``, NumPy ``float64``); lists are not accepted, as in
    ``jax.numpy``; complex inputs raise. ``hypot(inf, nan)`` is ``inf``, as in NumPy.

    Args:
      x1, x2: arrays or scalars, promoted and broadcast.

    Returns:
      A floating array of the promoted dtype and the broadcast shape.

    Raises:
      TypeError: an argument is not an array or a scalar.
      ShapeError: the shapes do not broadcast.
      DTypeError: a complex argument.
    """
    check_arraylike("hypot", x1, x2)
    a = [_to_inexact(v) for v in promote("hypot", x1, x2)]

    def f(x, y):
        ax, ay = lax.abs(x), lax.abs(y)
        hi, lo = lax.max(ax, ay), lax.min(ax, ay)
        zero = lax.zeros_like(hi)
        safe = lax.select(lax.eq(hi, zero), lax.full(aval_of(hi).shape, 1, aval_of(hi).dtype), hi)
        r = lax.div(lo, safe)
        out = lax.mul(hi, lax.sqrt(lax.add(lax.full(aval_of(r).shape, 1, aval_of(r).dtype), lax.mul(r, r))))
        inf = lax.full(aval_of(hi).shape, np.inf, aval_of(hi).dtype)
        return lax.select(lax.bitwise_or(lax.eq(ax, inf), lax.eq(ay, inf)), inf, out)
    return elementwise("hypot", f, *a, check=_real_only("hypot"))


def logaddexp(x1, x2, /):
    """``log(exp(x1) + exp(x2))``, computed stably (array API ``logaddexp``; ``numpy.logaddexp``).

    Differences from NumPy: integer and bool inputs give ``float32`` (NumPy: ``float64``); JAX's promotion (weak
    Python scalars; ``float16`` with ``int32`` gives ``float16``, NumPy ``float64``); lists are not accepted, as in
    ``jax.numpy``; complex inputs raise.

    Args:
      x1, x2: arrays or scalars, promoted and broadcast.

    Returns:
      A floating array of the promoted dtype and the broadcast shape.

    Raises:
      TypeError: an argument is not an array or a scalar.
      ShapeError: the shapes do not broadcast.
      DTypeError: a complex argument.
    """
    check_arraylike("logaddexp", x1, x2)
    a = [_to_inexact(v) for v in promote("logaddexp", x1, x2)]
    return elementwise("logaddexp", _logaddexp, *a, check=_real_only("logaddexp"))


def _logaddexp_of(x, y):
    amax = lax.max(x, y)
    delta = lax.sub(x, y)
    isnan = lax.ne(delta, delta)
    out = lax.add(amax, lax.log1p(lax.exp(lax.neg(lax.abs(delta)))))
    # Equal infinities give nan deltas; the result is then amax (or nan for nan inputs).
    return lax.select(isnan, lax.add(x, y), out)


def _logaddexp_jvp(primals, tangents):
    # JAX's rule: each tangent weighted by exp(x_i - out), +inf read as 0 there (finite at ties, where the formula's
    # max and |delta| have kinks whose one-sided derivatives would cancel: d/dx logaddexp(x, 0) at 0 is 1/2)
    (x, y), (tx, ty) = primals, tangents
    out = _logaddexp(x, y)

    def finite(v):
        return lax.select(lax.eq(v, lax.full(aval_of(v).shape, np.inf, aval_of(v).dtype)), lax.zeros_like(v), v)
    fo = finite(out)
    return out, lax.add(lax.mul(tx, lax.exp(lax.sub(finite(x), fo))), lax.mul(ty, lax.exp(lax.sub(finite(y), fo))))


def _make_logaddexp():
    from fnarray.transforms.ad import custom_jvp
    f = custom_jvp(_logaddexp_of)
    f.defjvp(_logaddexp_jvp)
    return f


_logaddexp = _make_logaddexp()


def logaddexp2(x1, x2, /):
    """``log2(2**x1 + 2**x2)`` (``numpy.logaddexp2``; not in the array API).

    Differences from NumPy: integer and bool inputs give ``float32`` (NumPy: ``float64``); JAX's promotion (weak
    Python scalars; ``float16`` with ``int32`` gives ``float16``, NumPy ``float64``); computed through ``logaddexp``
    scaled by ``ln 2``.

    Args:
      x1, x2: real arrays or scalars, promoted and broadcast.

    Returns:
      A floating array of the broadcast shape.

    Raises:
      TypeError: an argument is not an array or a scalar.
      ShapeError: the shapes do not broadcast.
      DTypeError: a complex argument.
    """
    ln2 = float(np.log(2))  # a Python float: weak, so that float32 stays float32
    x1, x2 = [_to_inexact(v) for v in promote("logaddexp2", x1, x2)]
    return divide(logaddexp(multiply(x1, ln2), multiply(x2, ln2)), ln2)


def _logical(name, fn):
    def f(x1, x2, /):
        check_arraylike(name, x1, x2)
        a = [_as_bool(v) for v in (x1, x2)]
        return elementwise(name, fn, *a)
    f.__name__ = name
    f.__doc__ = (f"Elementwise logical {name[8:]} (array API ``{name}``; ``numpy.{name}``); non-bool inputs are "
                 "tested != 0, as in NumPy. Lists are not accepted (as in ``jax.numpy``); returns a bool array of "
                 "the broadcast shape.")
    return f


def _as_bool(x):
    if isinstance(x, (bool, int, float, complex, np.generic)):
        return bool(x)
    if aval_of(x).dtype == dtypes.bool_:
        return x
    return lax.ne(x, lax.zeros_like(x))


logical_and = _logical("logical_and", lax.bitwise_and)
logical_or = _logical("logical_or", lax.bitwise_or)
logical_xor = _logical("logical_xor", lax.bitwise_xor)


def logical_not(x, /):
    """Elementwise logical not (array API ``logical_not``; ``numpy.logical_not``).

    Differences from NumPy: none beyond lists are not accepted, as in ``jax.numpy`` (non-bool inputs are tested ``!=
    0``, as in NumPy).

    Args:
      x: an array or a scalar.

    Returns:
      A bool array of ``x``'s shape.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
    """
    check_arraylike("logical_not", x)
    return elementwise("logical_not", lax.bitwise_not, _as_bool(x))


def bitwise_and(x1, x2, /):
    """Elementwise bitwise and (array API ``bitwise_and``; ``numpy.bitwise_and``).

    Differences from NumPy: JAX's promotion (weak Python scalars; ``float16`` with ``int32`` gives ``float16``,
    NumPy ``float64``); lists are not accepted, as in ``jax.numpy``.

    Args:
      x1, x2: integer or bool arrays or scalars, promoted and broadcast.

    Returns:
      An array of the promoted dtype and the broadcast shape.

    Raises:
      TypeError: an argument is not an array or a scalar.
      ShapeError: the shapes do not broadcast.
      DTypeError: an argument that is not integer or bool.
    """
    return elementwise("bitwise_and", lax.bitwise_and, x1, x2, check=_int_or_bool("bitwise_and"))


def bitwise_or(x1, x2, /):
    """Elementwise bitwise or (array API ``bitwise_or``; ``numpy.bitwise_or``).

    Differences from NumPy: JAX's promotion (weak Python scalars; ``float16`` with ``int32`` gives ``float16``,
    NumPy ``float64``); lists are not accepted, as in ``jax.numpy``.

    Args:
      x1, x2: integer or bool arrays or scalars, promoted and broadcast.

    Returns:
      An array of the promoted dtype and the broadcast shape.

    Raises:
      TypeError: an argument is not an array or a scalar.
      ShapeError: the shapes do not broadcast.
      DTypeError: an argument that is not integer or bool.
    """
    return elementwise("bitwise_or", lax.bitwise_or, x1, x2, check=_int_or_bool("bitwise_or"))


def bitwise_xor(x1, x2, /):
    """Elementwise bitwise xor (array API ``bitwise_xor``; ``numpy.bitwise_xor``).

    Differences from NumPy: JAX's promotion (weak Python scalars; ``float16`` with ``int32`` gives ``float16``,
    NumPy ``float64``); lists are not accepted, as in ``jax.numpy``.

    Args:
      x1, x2: integer or bool arrays or scalars, promoted and broadcast.

    Returns:
      An array of the promoted dtype and the broadcast shape.

    Raises:
      TypeError: an argument is not an array or a scalar.
      ShapeError: the shapes do not broadcast.
      DTypeError: an argument that is not integer or bool.
    """
    return elementwise("bitwise_xor", lax.bitwise_xor, x1, x2, check=_int_or_bool("bitwise_xor"))


def bitwise_invert(x, /):
    """Elementwise bitwise not; logical not on bool (array API ``bitwise_invert``; ``numpy.invert``).

    Differences from NumPy: none beyond lists are not accepted, as in ``jax.numpy``.

    Args:
      x: an array or a scalar.

    Returns:
      An array of ``x``'s shape and dtype.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is floating or complex.
    """
    return elementwise("bitwise_invert", lax.bitwise_not, x, check=_int_or_bool("bitwise_invert"))


invert = bitwise_not = bitwise_invert


def bitwise_left_shift(x1, x2, /):
    """``x1 << x2`` (array API ``bitwise_left_shift``; ``numpy.left_shift``).

    Differences from NumPy: shifts by ``>=`` the bit width or by a negative amount give 0 on every backend
    (docs/design.md); JAX's promotion (weak Python scalars; ``float16`` with ``int32`` gives ``float16``, NumPy
    ``float64``); lists are not accepted, as in ``jax.numpy``.

    Args:
      x1, x2: integer arrays or scalars, promoted and broadcast.

    Returns:
      An array of the promoted dtype and the broadcast shape.

    Raises:
      TypeError: an argument is not an array or a scalar.
      ShapeError: the shapes do not broadcast.
      DTypeError: an argument that is not an integer.
    """
    return elementwise("bitwise_left_shift", lax.shift_left, x1, x2, check=_int_only("bitwise_left_shift"))


def bitwise_right_shift(x1, x2, /):
    """``x1 >> x2``: arithmetic for signed, logical for unsigned integers (array API ``bitwise_right_shift``;
    ``numpy.right_shift``).

    Differences from NumPy: shifts by ``>=`` the bit width give 0 (or -1 for a negative signed ``x1``) on every
    backend (docs/design.md); JAX's promotion (weak Python scalars; ``float16`` with ``int32`` gives ``float16``, NumPy
    ``float64``); lists are not accepted, as in ``jax.numpy``.

    Args:
      x1, x2: integer arrays or scalars, promoted and broadcast.

    Returns:
      An array of the promoted dtype and the broadcast shape.

    Raises:
      TypeError: an argument is not an array or a scalar.
      ShapeError: the shapes do not broadcast.
      DTypeError: an argument that is not an integer.
    """
    def f(x, y):
        if dtypes.is_unsigned(aval_of(x).dtype):
            return lax.shift_right_logical(x, y)
        return lax.shift_right_arithmetic(x, y)
    return elementwise("bitwise_right_shift", f, x1, x2, check=_int_only("bitwise_right_shift"))


left_shift, right_shift = bitwise_left_shift, bitwise_right_shift


def abs(x, /):  # noqa: A001 (array API name)
    """Absolute value; complex input gives its real dtype (array API ``abs``; ``numpy.abs``).

    Differences from NumPy: bool arrays raise (as the array API; NumPy returns them unchanged); lists are not
    accepted, as in ``jax.numpy``.

    Args:
      x: an array or a scalar.

    Returns:
      An array of ``x``'s shape and dtype (the real dtype for complex ``x``); ``abs`` of the minimum signed integer
      wraps to itself, as in NumPy.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is bool.
    """
    def f(v):
        return v if dtypes.is_unsigned(aval_of(v).dtype) else lax.abs(v)
    return elementwise("abs", f, x, check=_not_bool("abs"))


absolute = abs


def negative(x, /):
    """Elementwise negation (array API ``negative``; ``numpy.negative``).

    Differences from NumPy: lists are not accepted, as in ``jax.numpy``; integer negation wraps.

    Args:
      x: an array or a scalar.

    Returns:
      An array of ``x``'s shape and dtype.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is bool.
    """
    return elementwise("negative", lax.neg, x, check=_not_bool("negative"))


def positive(x, /):
    """Elementwise ``+x``: the same values (array API ``positive``; ``numpy.positive``).

    Differences from NumPy: lists are not accepted, as in ``jax.numpy``.

    Args:
      x: an array or a scalar.

    Returns:
      An array of ``x``'s shape and dtype.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is bool.
    """
    return elementwise("positive", lambda v: v, x, check=_not_bool("positive"))


def sign(x, /):
    """-1, 0 or 1 (``x/|x|`` for complex); NaN gives NaN (array API ``sign``; ``numpy.sign``).

    Differences from NumPy: ``sign(-0.0)`` is ``+0.0``; complex ``x`` gives ``x / |x|`` (the array API's; NumPy 2
    agrees); lists are not accepted, as in ``jax.numpy``.

    Args:
      x: an array or a scalar.

    Returns:
      An array of ``x``'s shape and dtype.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is bool.
    """
    def f(v):
        d = aval_of(v).dtype
        if dtypes.is_unsigned(d):
            return lax.convert_element_type(lax.ne(v, lax.zeros_like(v)), d)
        if dtypes.is_inexact(d):
            # The sign primitive keeps -0 (as XLA); the array API (and NumPy) give +0 for -0.
            return lax.add(lax.sign(v), np.asarray(0, d)[()])
        return lax.sign(v)
    return elementwise("sign", f, x, check=_not_bool("sign"))


def _int_identity(name, fn):
    def f(x, /):
        def g(v):
            return v if not dtypes.is_inexact(aval_of(v).dtype) else fn(v)
        return elementwise(name, g, x, check=_real_only(name))
    f.__name__ = name
    f.__doc__ = (f"Elementwise {name} (array API ``{name}``; ``numpy.{name}``); integers and bools are returned "
                 "unchanged, with their dtype (as the array API and NumPy 2). Complex arguments raise ``DTypeError``; "
                 "lists are not accepted.")
    return f


floor = _int_identity("floor", lax.floor)
ceil = _int_identity("ceil", lax.ceil)
trunc = _int_identity("trunc", lambda v: lax.select(lax.lt(v, lax.zeros_like(v)), lax.ceil(v), lax.floor(v)))


def round(x, /, decimals: int = 0):  # noqa: A001 (array API name)
    """Round half to even (array API ``round``; ``numpy.round`` with ``decimals``).

    Integer inputs are returned unchanged for ``decimals >= 0`` and rounded half to even to a
    multiple of ``10**-decimals`` otherwise, in integer arithmetic, as NumPy does (JAX raises);
    a multiple beyond the dtype's range gives 0. A float array whose ``10**decimals`` overflows its dtype is
    returned unchanged (it holds no more places), as JAX does. Complex inputs round both parts. Differences
    from NumPy: lists are not accepted, as in ``jax.numpy``.

    Args:
      x: an array or a scalar.
      decimals: the number of decimal places (a Python int; negative rounds to tens...).

    Returns:
      An array of ``x``'s shape and dtype.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
    """
    def g(v):
        d = aval_of(v).dtype
        if dtypes.is_complex(d):
            return lax.complex(g(lax.real(v)), g(lax.imag(v)))
        if not dtypes.is_inexact(d):
            return v if decimals >= 0 or d == dtypes.bool_ else _round_int(v, -decimals)
        if decimals == 0:
            return lax.round(v)
        with np.errstate(over="ignore"):
            f = np.asarray(10.0 ** decimals if decimals < 400 else np.inf, d)[()]
        if not np.isfinite(f):   # more places than the dtype holds: x itself (JAX's result)
            return v
        return lax.div(lax.round(lax.mul(v, f)), f)
    return elementwise("round", g, x)


def _round_int(v, digits):
    """Round an integer array half to even to a multiple of ``10**digits`` (``digits > 0``)."""
    d = aval_of(v).dtype
    f = 10 ** digits
    if f > int(np.iinfo(d).max):
        return lax.zeros_like(v)  # |v| < f: every value rounds to 0 (half to even at +-f/2 too)
    f_ = lax.full(aval_of(v).shape, f, d)
    q = lax.div(v, f_)            # truncating division
    r = lax.sub(v, lax.mul(q, f_))  # remainder with v's sign, |r| < f
    zero = lax.zeros_like(v)
    neg = lax.lt(r, zero) if dtypes.is_signed(d) else lax.ne(zero, zero)
    mag = lax.select(neg, lax.neg(r), r)
    half = lax.sub(f_, mag)       # compare 2|r| with f without overflowing: |r| vs f - |r|
    odd = lax.ne(lax.rem(q, lax.full(aval_of(v).shape, 2, d)), zero)
    up = lax.bitwise_or(lax.gt(mag, half), lax.bitwise_and(lax.eq(mag, half), odd))
    one = lax.full(aval_of(v).shape, 1, d)
    step = lax.select(neg, lax.neg(one), one) if dtypes.is_signed(d) else one
    q = lax.select(up, lax.add(q, step), q)
    return lax.mul(q, f_)


def isnan(x, /):
    """Elementwise NaN test; False for integers (array API ``isnan``; ``numpy.isnan``).

    Differences from NumPy: lists are not accepted, as in ``jax.numpy``.

    Args:
      x: an array or a scalar.

    Returns:
      A bool array of ``x``'s shape.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
    """
    def f(v):
        if not dtypes.is_inexact(aval_of(v).dtype):
            return lax.full(aval_of(v).shape, False, dtypes.bool_)
        if dtypes.is_complex(aval_of(v).dtype):
            return lax.bitwise_or(f(lax.real(v)), f(lax.imag(v)))
        return lax.ne(v, v)
    return elementwise("isnan", f, x)


def isinf(x, /):
    """Elementwise infinity test; False for integers (array API ``isinf``; ``numpy.isinf``).

    Differences from NumPy: lists are not accepted, as in ``jax.numpy``.

    Args:
      x: an array or a scalar.

    Returns:
      A bool array of ``x``'s shape.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
    """
    def f(v):
        d = aval_of(v).dtype
        if not dtypes.is_inexact(d):
            return lax.full(aval_of(v).shape, False, dtypes.bool_)
        if dtypes.is_complex(d):
            return lax.bitwise_or(f(lax.real(v)), f(lax.imag(v)))
        return lax.eq(lax.abs(v), lax.full(aval_of(v).shape, np.inf, d))
    return elementwise("isinf", f, x)


def isfinite(x, /):
    """Elementwise finiteness test; True for integers (array API ``isfinite``; ``numpy.isfinite``).

    Differences from NumPy: lists are not accepted, as in ``jax.numpy``.

    Args:
      x: an array or a scalar.

    Returns:
      A bool array of ``x``'s shape.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
    """
    def f(v):
        d = aval_of(v).dtype
        if not dtypes.is_inexact(d):
            return lax.full(aval_of(v).shape, True, dtypes.bool_)
        if dtypes.is_complex(d):
            return lax.bitwise_and(f(lax.real(v)), f(lax.imag(v)))
        return lax.is_finite(v)
    return elementwise("isfinite", f, x)


def signbit(x, /):
    """True where the sign bit is set, -0.0 and negative NaN included (array API ``signbit``; ``numpy.signbit``).

    Differences from NumPy: lists are not accepted, as in ``jax.numpy``.

    Args:
      x: an array or a scalar.

    Returns:
      A bool array of ``x``'s shape.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is complex.
    """
    def f(v):
        d = aval_of(v).dtype
        if dtypes.is_int(d):
            return lax.lt(v, lax.zeros_like(v)) if dtypes.is_signed(d) else lax.full(aval_of(v).shape, False,
                                                                                    dtypes.bool_)
        idt = np.dtype(f"i{d.itemsize}")
        bits = lax.bitcast_convert_type(v, idt)
        return lax.lt(bits, lax.zeros_like(bits))
    return elementwise("signbit", f, x, check=_real_only("signbit"))


def copysign(x1, x2, /):
    """``x1`` with the sign of ``x2`` (array API ``copysign``; ``numpy.copysign``).

    Differences from NumPy: integer and bool inputs give ``float32`` (NumPy: ``float64``); JAX's promotion (weak
    Python scalars; ``float16`` with ``int32`` gives ``float16``, NumPy ``float64``); lists are not accepted, as in
    ``jax.numpy``; complex inputs raise.

    Args:
      x1, x2: arrays or scalars, promoted and broadcast.

    Returns:
      A floating array of the promoted dtype and the broadcast shape.

    Raises:
      TypeError: an argument is not an array or a scalar.
      ShapeError: the shapes do not broadcast.
      DTypeError: a complex argument.
    """
    check_arraylike("copysign", x1, x2)
    a = [_to_inexact(v) for v in promote("copysign", x1, x2)]

    def f(x, y):
        x, y = _same_shape(x, y)
        ax = lax.abs(x)
        return lax.select(signbit(y), lax.neg(ax), ax)
    return elementwise("copysign", f, *a, check=_real_only("copysign"))


def nextafter(x1, x2, /):
    """The next float after ``x1`` toward ``x2`` (array API ``nextafter``; ``numpy.nextafter``).

    Differences from NumPy: integer and bool inputs give ``float32`` (NumPy: ``float64``); JAX's promotion (weak
    Python scalars; ``float16`` with ``int32`` gives ``float16``, NumPy ``float64``); lists are not accepted, as in
    ``jax.numpy``; complex inputs raise.

    Args:
      x1, x2: arrays or scalars, promoted and broadcast.

    Returns:
      A floating array of the promoted dtype and the broadcast shape.

    Raises:
      TypeError: an argument is not an array or a scalar.
      ShapeError: the shapes do not broadcast.
      DTypeError: a complex argument.
    """
    check_arraylike("nextafter", x1, x2)
    a = [_to_inexact(v) for v in promote("nextafter", x1, x2)]
    return elementwise("nextafter", lax.nextafter, *a, check=_real_only("nextafter"))


def reciprocal(x, /):
    """``1 / x`` (array API ``reciprocal``; ``numpy.reciprocal``).

    Differences from NumPy: integer inputs give ``float32`` reciprocals (NumPy's integer ``reciprocal`` truncates,
    ``1 // x``); lists are not accepted, as in ``jax.numpy``.

    Args:
      x: an array or a scalar.

    Returns:
      A floating array of ``x``'s shape.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
    """
    x = _to_inexact(x)
    return divide(1, x)


def square(x, /):
    """``x * x`` (array API ``square``; ``numpy.square``).

    Differences from NumPy: bool arrays raise (as the array API; NumPy gives ``int8``); lists are not accepted, as
    in ``jax.numpy``.

    Args:
      x: an array or a scalar.

    Returns:
      An array of ``x``'s shape and dtype.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      DTypeError: ``x`` is bool.
    """
    return elementwise("square", lambda v: lax.integer_pow(v, 2), x, check=_not_bool("square"))


def real(x, /):
    """Real part; real input is returned as is (array API ``real``; ``numpy.real``).

    Differences from NumPy: lists are not accepted, as in ``jax.numpy``.

    Args:
      x: an array or a scalar.

    Returns:
      An array of ``x``'s shape and real dtype.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
    """
    return elementwise("real", lambda v: lax.real(v) if dtypes.is_complex(aval_of(v).dtype) else v, x)


def imag(x, /):
    """Imaginary part; zeros for real input (array API ``imag``; ``numpy.imag``).

    Differences from NumPy: lists are not accepted, as in ``jax.numpy``.

    Args:
      x: an array or a scalar.

    Returns:
      An array of ``x``'s shape and real dtype.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
    """
    return elementwise("imag", lambda v: lax.imag(v) if dtypes.is_complex(aval_of(v).dtype) else lax.zeros_like(v),
                       x)


def conj(x, /):
    """Complex conjugate; real input is returned as is (array API ``conj``; ``numpy.conj``).

    Differences from NumPy: lists are not accepted, as in ``jax.numpy``.

    Args:
      x: an array or a scalar.

    Returns:
      An array of ``x``'s shape and dtype.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
    """
    return elementwise("conj", lambda v: lax.conj(v) if dtypes.is_complex(aval_of(v).dtype) else v, x)


conjugate = conj


def angle(z, deg: bool = False):
    """Argument of complex numbers, in radians (or degrees) (``numpy.angle``; not in the array API).

    Differences from NumPy: integer and bool inputs give ``float32`` (NumPy: ``float64``).

    Args:
      z: an array or a scalar (real inputs give 0 or pi).
      deg: return degrees instead of radians.

    Returns:
      A real floating array of ``z``'s shape.

    Raises:
      TypeError: ``z`` is not an array or a scalar.
    """
    z = _to_inexact(z)
    a = atan2(imag(z), real(z))
    return rad2deg(a) if deg else a


def isreal(x, /):
    """True where the imaginary part is zero (``numpy.isreal``; not in the array API); a bool array of ``x``'s
    shape.
    """
    return equal(imag(x), 0)


def iscomplex(x, /):
    """True where the imaginary part is non-zero (``numpy.iscomplex``; not in the array API); a bool array of
    ``x``'s shape.
    """
    return not_equal(imag(x), 0)


def deg2rad(x, /):
    """Degrees to radians (``numpy.deg2rad``; not in the array API); integer and bool inputs give ``float32``
    (NumPy: ``float64``).
    """
    x = _to_inexact(x)
    return multiply(x, np.pi / 180)


def rad2deg(x, /):
    """Radians to degrees (``numpy.rad2deg``; not in the array API); integer and bool inputs give ``float32``
    (NumPy: ``float64``).
    """
    x = _to_inexact(x)
    return multiply(x, 180 / np.pi)


radians, degrees = deg2rad, rad2deg


def sinc(x, /):
    """``sin(pi x) / (pi x)``, 1 at 0 (``numpy.sinc``; not in the array API); integer and bool inputs give
    ``float32`` (NumPy: ``float64``).
    """
    from fnarray.numpy._manipulation import where
    x = _to_inexact(x)
    px = multiply(x, np.pi)
    zero = equal(x, 0)
    safe = where(zero, 1, px)
    # at 0 the Maclaurin series 1 - (pi x)**2 / 6 + (pi x)**4 / 120: exactly 1, and derivatives of every order
    # up to the fifth exact there (JAX's sinc: -pi**2 / 3 twice), where a constant 1 would give 0
    p2 = multiply(px, px)
    series = subtract(1, multiply(divide(p2, 6), subtract(1, divide(p2, 20))))
    return where(zero, series, divide(sin(safe), safe))


def heaviside(x1, x2, /):
    """0 where ``x1 < 0``, ``x2`` where ``x1 == 0``, 1 where ``x1 > 0`` (``numpy.heaviside``).

    Differences from NumPy: integer and bool inputs give ``float32`` (NumPy: ``float64``); JAX's promotion (weak
    Python scalars; ``float16`` with ``int32`` gives ``float16``, NumPy ``float64``); lists are not accepted, as in
    ``jax.numpy``; complex inputs raise.

    Args:
      x1, x2: arrays or scalars, promoted and broadcast.

    Returns:
      A floating array of the promoted dtype and the broadcast shape.

    Raises:
      TypeError: an argument is not an array or a scalar.
      ShapeError: the shapes do not broadcast.
      DTypeError: a complex argument.
    """
    from fnarray.numpy._manipulation import where
    check_arraylike("heaviside", x1, x2)
    x1, x2 = [_to_inexact(v) for v in promote("heaviside", x1, x2)]  # the result has their dtype
    x1, x2 = _same_shape(x1, x2)
    return where(less(x1, 0), lax.zeros_like(x1), where(equal(x1, 0), x2, lax.full(aval_of(x1).shape, 1,
                                                                                      aval_of(x1).dtype)))


def clip(x, /, min=None, max=None):  # noqa: A002 (array API names)
    """Clamp ``x`` to ``[min, max]`` (array API ``clip``; ``numpy.clip``); the result has x's dtype.

    NaN in ``x`` stays NaN; ``min``/``max`` may be ``None``, scalars or arrays.
    Differences from NumPy: the result keeps ``x``'s dtype, as the array API asks (NumPy 2
    promotes: ``clip(int array, 2.5, 7)`` is ``float64`` there, ``int32`` here; array bounds
    are cast to ``x``'s dtype first); no ``out=``.

    Args:
      x: an array or a scalar.
      min, max: the bounds, or ``None`` for no bound; broadcast with ``x``.

    Returns:
      An array of ``x``'s dtype and the broadcast shape.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
      ShapeError: the bounds do not broadcast with ``x``.
      DTypeError: complex arguments.
    """
    check_arraylike("clip", x)
    from fnarray.numpy._util import asarray_internal
    x = asarray_internal(x)
    d = x.dtype
    out = x
    if min is not None:
        m = min if not hasattr(min, "dtype") else lax.convert_element_type(min, d)
        out = maximum(out, m)
    if max is not None:
        m = max if not hasattr(max, "dtype") else lax.convert_element_type(max, d)
        out = minimum(out, m)
    if out.dtype != d:
        out = lax.convert_element_type(out, d)
    return out


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """``|a - b| <= atol + rtol * |b|`` elementwise (``numpy.isclose``; not in the array API).

    An infinity is close only to an infinity of the same sign; NaN is close to NaN only with
    ``equal_nan``. Integer and bool inputs are compared in ``float32`` (as ``jax.numpy.isclose``;
    NumPy uses ``float64``). Differences from NumPy: JAX's promotion (weak Python scalars;
    ``float16`` with ``int32`` gives ``float16``, NumPy ``float64``).

    Args:
      a, b: arrays or scalars, promoted and broadcast.
      rtol, atol: relative and absolute tolerances.
      equal_nan: treat NaNs as equal.

    Returns:
      A bool array of the broadcast shape.

    Raises:
      TypeError: an argument is not an array or a scalar.
      ShapeError: the shapes do not broadcast.
    """
    check_arraylike("isclose", a, b)
    a, b = promote("isclose", a, b)
    if not dtypes.is_inexact(aval_of(a).dtype):
        # As NumPy and jax.numpy: integers and bools are compared in the default float dtype.
        a, b = promote("isclose", a, b, to=dtypes.float32)
    out = less_equal(abs(subtract(a, b)), add(atol, multiply(rtol, abs(b))))
    out = logical_and(out, logical_and(isfinite(a), isfinite(b)))  # an infinity is close only to itself
    out = logical_or(out, equal(a, b))  # equal infinities
    if equal_nan:
        out = logical_or(out, logical_and(isnan(a), isnan(b)))
    return out


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """Replace NaN and infinities by finite numbers (``numpy.nan_to_num``; not in the array API).

    Differences from NumPy: ``copy`` is ignored (arrays are immutable: the result is always a
    new array); lists are accepted as by ``asarray``.

    Args:
      x: an array, scalar or nested sequence; integer inputs are returned unchanged.
      copy: ignored.
      nan: the value for NaN.
      posinf, neginf: the values for ``±inf`` (default: the dtype's largest / lowest finite value).

    Returns:
      An array of ``x``'s shape and dtype (complex: real and imaginary parts replaced separately).

    Raises:
      DTypeError: ``x`` holds no numbers.
    """
    from fnarray.numpy._manipulation import where
    from fnarray.numpy._util import asarray_internal
    x = asarray_internal(x)
    if not dtypes.is_inexact(x.dtype):
        return x
    if dtypes.is_complex(x.dtype):
        return lax.complex(nan_to_num(real(x), nan=nan, posinf=posinf, neginf=neginf),
                           nan_to_num(imag(x), nan=nan, posinf=posinf, neginf=neginf))
    fi = dtypes.finfo(x.dtype)
    posinf = fi.max if posinf is None else posinf
    neginf = fi.min if neginf is None else neginf
    out = where(isnan(x), nan, x)
    out = where(equal(out, np.inf), posinf, out)
    out = where(equal(out, -np.inf), neginf, out)
    return lax.convert_element_type(out, x.dtype)


def frexp(x, /):
    """Mantissa in [0.5, 1) and integer exponent with ``x = m * 2**e`` (``numpy.frexp``; not in the array API).

    Differences from NumPy: integer and bool inputs give ``float32`` (NumPy: ``float64``); computed from ``log2``
    and ``exp2`` rather than read from the bits;
    non-finite ``x`` gives ``(x, 0)``.

    Args:
      x: a real array or scalar.

    Returns:
      ``(mantissa, exponent)``: a floating array and an ``int32`` array of ``x``'s shape.

    Raises:
      TypeError: ``x`` is not an array or a scalar.
    """
    from fnarray.numpy._manipulation import where
    x = _to_inexact(x)
    ax = abs(x)
    e = where(equal(ax, 0), 0, floor(log2(where(equal(ax, 0), 1, ax))) + 1)
    m = divide(x, exp2(e))
    fix = greater_equal(abs(m), 1)
    m = where(fix, divide(m, 2), m)
    e = where(fix, e + 1, e)
    finite = isfinite(x)
    return where(finite, m, x), lax.convert_element_type(where(finite, e, 0), dtypes.int32)


def ldexp(x1, x2, /):
    """``x1 * 2**x2`` (``numpy.ldexp``; not in the array API).

    Differences from NumPy: integer and bool inputs give ``float32`` (NumPy: ``float64``); computed as ``x1 *
    exp2(x2)`` (so results that underflow
    ``2**x2`` alone may differ from NumPy's exact scaling).

    Args:
      x1: a real array or scalar.
      x2: integer exponents (an array or a scalar), broadcast with ``x1``.

    Returns:
      A floating array of the broadcast shape.

    Raises:
      TypeError: an argument is not an array or a scalar.
      ShapeError: the shapes do not broadcast.
    """
    from fnarray.numpy._util import asarray_internal
    x1 = _to_inexact(x1)
    # NumPy exponent arrays become arrays first (lax takes Arrays and scalars only).
    return multiply(x1, exp2(lax.convert_element_type(asarray_internal(x2), aval_of(x1).dtype)
                             if hasattr(x2, "dtype") else float(x2)))


def gcd(x1, x2, /):
    """Greatest common divisor of integers (``numpy.gcd``; not in the array API), by Euclid's algorithm.

    Runs as a ``while_loop`` (so reverse-mode ``grad`` does not apply). JAX's promotion (weak Python scalars;
    ``float16`` with ``int32`` gives ``float16``, NumPy ``float64``). Floating inputs are
    rejected with ``DTypeError`` (a ``TypeError``, as NumPy raises).

    Args:
      x1, x2: integer arrays or scalars, promoted and broadcast.

    Returns:
      A non-negative array of the promoted dtype and the broadcast shape.

    Raises:
      TypeError: an argument is not an array or a scalar.
      DTypeError: the promoted dtype is not an integer type.
      ShapeError: the shapes do not broadcast.
    """
    from fnarray.transforms.control_flow import while_loop
    check_arraylike("gcd", x1, x2)
    a, b = promote("gcd", x1, x2)
    _check_integer("gcd", aval_of(a).dtype)
    from fnarray.numpy._util import broadcast_arrays_, asarray_internal
    (a, b), _ = broadcast_arrays_([asarray_internal(abs(a)), asarray_internal(abs(b))], "gcd")
    a, b = _same_shape(a, b)  # the loop carry needs both at the full shape

    def cond(c):
        return lax.reduce_or(lax.ne(c[1], lax.zeros_like(c[1])), range(len(c[1].shape)))

    def body(c):
        x, y = c
        nz = lax.ne(y, lax.zeros_like(y))
        return (lax.select(nz, y, x), lax.select(nz, lax.rem(x, y), y))
    return while_loop(cond, body, (a, b))[0]


def _check_integer(name, d):
    if not dtypes.is_int(d):
        raise DTypeError(f"{name} needs integer arguments, got {np.dtype(d).name} (as numpy.{name}); "
                         "convert with astype(int32) first if the values are whole numbers")


def lcm(x1, x2, /):
    """Least common multiple of integers (``numpy.lcm``; not in the array API); 0 where either is 0.

    JAX's promotion (weak Python scalars); as ``gcd``, floating and bool inputs raise ``DTypeError``.

    Args:
      x1, x2: integer arrays or scalars, promoted and broadcast.

    Returns:
      A non-negative array of the promoted dtype and the broadcast shape.

    Raises:
      TypeError: an argument is not an array or a scalar.
      DTypeError: the promoted dtype is not an integer type.
      ShapeError: the shapes do not broadcast.
    """
    g = gcd(x1, x2)
    from fnarray.numpy._manipulation import where
    return where(equal(g, 0), 0, abs(multiply(floor_divide(x1, where(equal(g, 0), 1, g)), x2)))


__all__ = [_n for _n, _v in list(globals().items())
           if not _n.startswith("_") and callable(_v) and getattr(_v, "__module__", None) == __name__]
