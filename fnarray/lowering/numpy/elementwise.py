"""The NumPy references of the elementwise primitives and conversions (registered into ``common.IMPLS``)."""

from __future__ import annotations

import math

import numpy as np

from fnarray.core import dtypes, families
from fnarray.core import primitives as P
from fnarray.lowering.numpy import xla_cpu_float32
from fnarray.lowering.numpy.common import IMPLS, LOW, direct, factory, pyfunc, upcast, with_params


# ----------------------------------------------------------------------------- unary

for _p, _f in [(P.neg, np.negative), (P.floor, np.floor), (P.ceil, np.ceil), (P.is_finite, np.isfinite),
               (P.abs_p, np.abs), (P.real, np.real), (P.imag, np.imag), (P.conj, np.conj),
               (P.population_count, None)]:
    if _f is not None:
        direct(_p, _f)

# np.bitwise_count counts the bits of |x|; the primitive counts the two's-complement bits (as XLA).
direct(P.population_count, lambda x: np.bitwise_count(x.view(f"u{x.dtype.itemsize}")).astype(x.dtype))

# The primitives NumPy has by their own name (``Primitive.library``: exp, log, sin, ..., cbrt).
families.on_family("unary", lambda p: p.library and direct(p, upcast(getattr(np, p.name))))
direct(P.log2, upcast(np.log2))


def _sign(x):
    if dtypes.is_complex(x.dtype):
        a = np.abs(x)
        return np.where(a == 0, 0, x / np.where(a == 0, 1, a)).astype(x.dtype)
    return np.where(x == 0, x, np.sign(x))  # sign(-0.0) is -0.0, as XLA


direct(P.sign, upcast(_sign))
direct(P.round_p, upcast(np.round))
direct(P.rsqrt, upcast(lambda x: 1 / np.sqrt(x)))


def _logistic(x):
    if dtypes.is_complex(x.dtype):  # the stable real form below would drop the imaginary part
        return (1 / (1 + np.exp(-x))).astype(x.dtype)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)


direct(P.logistic, upcast(_logistic))
direct(P.erf, upcast(pyfunc(math.erf)))
direct(P.erfc, upcast(pyfunc(math.erfc)))
def _lgamma1(v):
    if v <= 0 and math.isfinite(v) and v == math.floor(v):
        return math.inf
    try:
        return math.lgamma(v)
    except OverflowError:  # Python raises where the result passes the float64 range (x > 2.5e305)
        return math.inf


direct(P.lgamma, upcast(pyfunc(_lgamma1)))


def _erf_inv64(y):
    # Giles (2010), "Approximating the erfinv function", single-precision branch as the start,
    # then two Newton steps on erf in float64.
    y = np.asarray(y, np.float64)
    w = -np.log(np.clip((1.0 - y) * (1.0 + y), 1e-300, None))
    small = w < 5.0
    ws = w - 2.5
    p1 = 2.81022636e-08
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
              -0.00417768164, 0.246640727, 1.50140941):
        p1 = c + p1 * ws
    wl = np.sqrt(np.maximum(w, 5.0)) - 3.0
    p2 = -0.000200214257
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
              0.00943887047, 1.00167406, 2.83297682):
        p2 = c + p2 * wl
    x = np.where(small, p1, p2) * y
    erf = np.frompyfunc(math.erf, 1, 1)
    for _ in range(2):
        fx = np.asarray(erf(x), np.float64) - y
        x = x - fx / (2 / math.sqrt(math.pi) * np.exp(-x * x))
    x = np.where(y == 1, np.inf, np.where(y == -1, -np.inf, x))
    return np.where(np.abs(y) > 1, np.nan, x)


def _erf_inv(x):
    # float32 (and float16/bfloat16, which XLA computes in float32): XLA CPU's own evaluation, so that
    # random.normal is bitwise JAX's; float64: accurate to the last bit or two
    if x.dtype == np.float64:
        return np.asarray(_erf_inv64(x))
    return xla_cpu_float32.erf_inv(x.astype(np.float32)).astype(x.dtype)


direct(P.erf_inv, _erf_inv)


def _digamma64(x):
    x = np.asarray(x, np.float64)
    reflect = x < 0.5
    xr = np.where(reflect, 1 - x, x)
    acc = np.zeros_like(xr)
    for _ in range(6):
        small = xr < 6
        acc = acc - np.where(small, 1 / xr, 0)
        xr = np.where(small, xr + 1, xr)
    inv = 1 / xr
    inv2 = inv * inv
    series = np.log(xr) - 0.5 * inv - inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (1 / 252 - inv2 * (
        1 / 240 - inv2 / 132))))
    res = acc + series
    res = np.where(reflect, res - np.pi / np.tan(np.pi * x), res)
    # The pole at 0 has a sign (as SciPy and C's tgamma): -inf at +0, +inf at -0; the other poles are NaN.
    res = np.where((x < 0) & (x == np.floor(x)), np.nan, res)
    return np.where(x == 0, -np.copysign(np.inf, x), res)


direct(P.digamma, lambda x: np.asarray(_digamma64(x)).astype(x.dtype))


def _not(x):
    return np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)


direct(P.not_p, _not)
direct(P.stop_gradient, lambda x: x)
direct(P.copy_p, lambda x: x)
direct(P.name_p, lambda x: x)


@with_params(P.integer_pow)
def _integer_pow(x, *, y):
    if x.dtype in (dtypes.float8_e4m3fn, dtypes.float8_e5m2):   # one operation: float32, rounded once (as XLA)
        return _integer_pow(x.astype(np.float32), y=y).astype(x.dtype)
    if y == 0:
        return np.ones_like(x)
    if y < 0:
        return (1 / _integer_pow(x, y=-y)).astype(x.dtype)
    acc, base = None, x
    while y:
        if y & 1:
            acc = base if acc is None else acc * base
        y >>= 1
        if y:
            base = base * base
    return np.asarray(acc).astype(x.dtype)

# ----------------------------------------------------------------------------- binary


direct(P.add, np.add)
direct(P.sub, np.subtract)
direct(P.mul, np.multiply)
direct(P.max_p, np.maximum)
direct(P.min_p, np.minimum)
direct(P.atan2, np.arctan2)
direct(P.nextafter, np.nextafter)
direct(P.and_p, np.bitwise_and)
direct(P.or_p, np.bitwise_or)
direct(P.xor_p, np.bitwise_xor)
direct(P.eq, np.equal)
direct(P.ne, np.not_equal)
direct(P.lt, np.less)
direct(P.le, np.less_equal)
direct(P.gt, np.greater)
direct(P.ge, np.greater_equal)


def _int_div(x, y):
    zero = y == 0
    ys = np.where(zero, 1, y).astype(y.dtype)
    q = np.floor_divide(x, ys)
    if dtypes.is_signed(np.asarray(x).dtype):
        r = x - q * ys
        q = q + ((r != 0) & ((x < 0) != (ys < 0))).astype(q.dtype)
    return np.where(zero, 0, q).astype(np.result_type(x, y))


def _div(x, y):
    if dtypes.is_int(np.asarray(x).dtype):
        return _int_div(x, y)
    return np.true_divide(x, y)


def _rem(x, y):
    if dtypes.is_int(np.asarray(x).dtype):
        zero = y == 0
        ys = np.where(zero, 1, y).astype(y.dtype)
        return np.where(zero, 0, np.fmod(x, ys)).astype(np.result_type(x, y))
    return np.fmod(x, y)


def _pow(x, y):
    r = np.power(x, y)
    if np.ndim(y) == 0 and y == 0.5 and r.dtype.kind == "f":
        # NumPy computes a 0-d exponent of 0.5 as sqrt: (-inf) ** 0.5 NaN and (-0.0) ** 0.5 -0.0, where IEEE 754's
        # pow (NumPy's own with an array exponent, XLA, MLX, OpenCL, WGSL) gives inf and +0.0
        r = np.where(np.isneginf(x), np.inf, r).astype(r.dtype) + r.dtype.type(0)
    return r


def _by_kind(int_fn, float_fn):
    return lambda params, in_avals, out_avals: int_fn if dtypes.is_int(in_avals[0].dtype) else float_fn


IMPLS[P.div] = _by_kind(_int_div, np.true_divide)
IMPLS[P.rem] = _by_kind(_rem, np.fmod)
direct(P.pow_p, _pow)


def _bits(d):
    d = np.dtype(d)
    return 4 if d in (dtypes.int4, dtypes.uint4) else d.itemsize * 8


def _shift_ok(y, d):
    return (y >= 0) & (y < _bits(d))


def _shift_left(x, y):
    d = np.asarray(x).dtype
    ok = _shift_ok(y, d)
    return np.where(ok, np.left_shift(x, np.where(ok, y, 0).astype(d)), 0).astype(d)


def _shift_right_arithmetic(x, y):
    d = np.asarray(x).dtype
    ok = _shift_ok(y, d)
    if d == dtypes.uint4:   # the 4-bit value's sign bit is bit 3 (ml_dtypes stores it zero-extended)
        sx = np.asarray(x).astype(np.int8)
        sx = np.where(sx >= 8, sx - 16, sx).astype(np.int8)
        r = np.right_shift(sx, np.where(ok, y, 0).astype(np.int8)).astype(d)
        neg = sx < 0
    elif dtypes.is_unsigned(d):
        sx = np.asarray(x).view(np.dtype(f"i{d.itemsize}"))
        r = np.right_shift(sx, np.where(ok, y, 0).astype(sx.dtype)).view(d)
        neg = sx < 0
    else:
        r = np.right_shift(x, np.where(ok, y, 0).astype(d))
        neg = np.asarray(x) < 0
    fill = np.where(neg, np.array(-1).astype(d) if dtypes.is_signed(d) else np.array(dtypes.iinfo(d).max, d), 0)
    return np.where(ok, r, fill).astype(d)


def _shift_right_logical(x, y):
    d = np.asarray(x).dtype
    ok = _shift_ok(y, d)
    ud = np.dtype(f"u{d.itemsize}")
    ux = np.asarray(x).view(ud) if d != ud else np.asarray(x)
    r = np.right_shift(ux, np.where(ok, y, 0).astype(ud))
    return np.where(ok, r, 0).astype(ud).view(d)


direct(P.shift_left, _shift_left)
direct(P.shift_right_arithmetic, _shift_right_arithmetic)
direct(P.shift_right_logical, _shift_right_logical)


@factory(P.complex_p)
def _complex(params, in_avals, out_avals):
    d = out_avals[0].dtype

    def f(x, y):
        x, y = np.broadcast_arrays(x, y)
        r = np.empty(x.shape, d)
        r.real, r.imag = x, y
        return r
    return f


def _select_n(which, *cases):
    if which.dtype == np.bool_:
        return np.where(which, cases[1], cases[0]) if len(cases) == 2 else cases[0]
    w = np.clip(which, 0, len(cases) - 1)
    if np.ndim(w) == 0:
        return cases[int(w)]
    return np.choose(w, cases)


direct(P.select_n, _select_n)

# ----------------------------------------------------------------------------- conversions


@factory(P.convert_element_type)
def _convert(params, in_avals, out_avals):
    src, dst = in_avals[0].dtype, params["new_dtype"]
    if src == dst:
        return lambda x: x
    if dst == np.bool_:
        return lambda x: np.asarray(x) != 0
    if dtypes.is_complex(src) and not dtypes.is_complex(dst):
        real = _convert(params, [in_avals[0].update(dtype=dtypes.float64)], out_avals)
        return lambda x: real(np.real(x).astype(np.float64))
    if dtypes.is_inexact(src) and dtypes.is_int(dst):
        info = dtypes.iinfo(dst)
        lo, hi = float(info.min), float(info.max)

        def f2i(x):
            x = np.asarray(x)
            xf = x.astype(np.float32) if x.dtype in LOW else x
            t = np.trunc(np.where(np.isnan(xf), 0, xf))
            safe = np.clip(t, lo, hi)
            r = np.where(t >= hi, info.max, np.where(t <= lo, info.min, safe.astype(dst)))
            return r.astype(dst)
        return f2i
    return lambda x: np.asarray(x).astype(dst)


@with_params(P.bitcast_convert_type)
def _bitcast(x, *, new_dtype):
    x = np.asarray(x)
    # np.ascontiguousarray makes 0-d arrays 1-d: keep the shape.
    return np.ascontiguousarray(x).view(new_dtype).reshape(x.shape)
